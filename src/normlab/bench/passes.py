"""Count the passes over memory an implementation actually makes.

Two independent views of the same call:

- `trace_traffic` runs it under a TorchDispatchMode and adds up, op by op,
  the full-size tensors each ATen op reads and writes (views move nothing and
  are skipped). That is the bytes-moved model of the implementation as it runs.
- `profiler_ops` asks torch.profiler for the ops that ran: on CPU the leaf
  ATen ops that touch a full-size tensor, on CUDA the device kernels.

The two must agree on how many separate data-moving ops there are; the
harness reports both, and the tests check they agree for the eager composites.
A fused native op (F.layer_norm) or a Triton kernel is one op to both views:
its internal passes are invisible here and are bounded by its bandwidth
instead (see `traffic.effective_passes`).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

# Ops that only allocate, reshape or alias: they move no data even when their
# inputs are full size.
_NON_MOVING = {
    "empty",
    "empty_like",
    "empty_strided",
    "view",
    "_unsafe_view",
    "reshape",
    "expand",
    "as_strided",
    "slice",
    "select",
    "unsqueeze",
    "squeeze",
    "detach",
    "alias",
    "t",
    "transpose",
    "permute",
    "resize_",
    "lift_fresh",
    "to",
    "_reshape_alias",
    "result_type",
    "contiguous",
    "unbind",
    "split",
    "narrow",
    "flatten",
    "type_as",
    "view_as",
    "expand_as",
    "reshape_as",
}
# In-place ops that overwrite their target without reading it.
_WRITE_ONLY = {"fill_", "zero_", "copy_", "normal_", "uniform_"}


@dataclass
class OpTraffic:
    name: str
    reads: int  # full-size tensors read
    writes: int  # full-size tensors written
    bytes: int


@dataclass
class TraceResult:
    ops: list[OpTraffic] = field(default_factory=list)
    unit_bytes: int = 1  # bytes of one full-size tensor in x's dtype

    @property
    def moving_ops(self) -> list[OpTraffic]:
        return [op for op in self.ops if op.reads or op.writes]

    @property
    def passes(self) -> float:
        """Full-size traffic in units of one x-sized tensor (an fp32 temporary of a bf16 x counts 2)."""
        return sum(op.bytes for op in self.ops) / self.unit_bytes

    @property
    def op_names(self) -> list[str]:
        return [op.name for op in self.moving_ops]


def _short_name(func) -> str:
    return func.overloadpacket.__name__


class _TrafficMode(TorchDispatchMode):
    def __init__(self, full_numel: int, result: TraceResult):
        super().__init__()
        self.full_numel = full_numel
        self.result = result

    def _full(self, tensors) -> list[torch.Tensor]:
        seen, full = set(), []
        for t in tensors:
            if isinstance(t, torch.Tensor) and t.numel() >= self.full_numel:
                key = (t.untyped_storage().data_ptr(), t.storage_offset(), t.dtype)
                if key not in seen:  # mul(x, x) reads x once
                    seen.add(key)
                    full.append(t)
        return full

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = _short_name(func)
        returns = func._schema.returns
        is_view = any(r.alias_info is not None and not r.alias_info.is_write for r in returns)
        if name in _NON_MOVING or is_view:
            return out
        inputs = self._full(tree_flatten((args, kwargs))[0])
        outputs = self._full(tree_flatten(out)[0])
        written_in_place = any(r.alias_info is not None and r.alias_info.is_write for r in returns)
        if written_in_place:
            # the written tensor is also an input: do not count it as read unless the op reads it
            out_keys = {t.untyped_storage().data_ptr() for t in outputs}
            if name in _WRITE_ONLY or name.endswith("_out"):
                inputs = [t for t in inputs if t.untyped_storage().data_ptr() not in out_keys]
        moved = sum(t.numel() * t.element_size() for t in inputs + outputs)
        self.result.ops.append(OpTraffic(name, len(inputs), len(outputs), moved))
        return out


def trace_traffic(fn: Callable[[], object], full_numel: int, unit_bytes: int) -> TraceResult:
    """Run `fn()` once and tally the full-size (numel >= full_numel) tensors each ATen op reads and writes."""
    result = TraceResult(unit_bytes=unit_bytes)
    with _TrafficMode(full_numel, result):
        fn()
    return result


@dataclass
class ProfilerOps:
    names: list[str]
    device: str

    @property
    def count(self) -> int:
        return len(self.names)


def profiler_ops(fn: Callable[[], object], full_numel: int, device: str = "cpu") -> ProfilerOps:
    """The separate data-moving ops torch.profiler sees while `fn()` runs.

    On CPU: ATen ops whose inputs include a full-size tensor and none of whose
    children does (mean counts once, as the sum it calls), minus the ones that
    only allocate or alias. On
    CUDA: every device kernel launched.
    """
    if device == "cuda":
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
            fn()
            torch.cuda.synchronize()
        kernels = [e.name for e in prof.events() if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA]
        return ProfilerOps(kernels, device)
    events = _cpu_events(fn)
    names = []
    for event in events:
        if _moves_full_tensor(event, full_numel) and not any(
            _moves_full_tensor(c, full_numel) for c in event.cpu_children
        ):
            names.append(event.name[len("aten::") :])
    return ProfilerOps(names, device)


@contextlib.contextmanager
def _native_stderr_silenced():
    """Some torch builds print a line to fd 2 each time a profiler starts and stops; keep the tables readable."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def _cpu_events(fn: Callable[[], object]):
    """CPU op events. The legacy (non-Kineto) profiler starts in milliseconds; Kineto takes ~10 s to start up."""
    try:
        with _native_stderr_silenced(), torch.autograd.profiler.profile(use_kineto=False, record_shapes=True) as prof:
            fn()
    except (RuntimeError, TypeError, AssertionError):  # a torch without the legacy profiler
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            fn()
    return prof.events() if hasattr(prof, "events") else prof.function_events


def _moves_full_tensor(event, full_numel: int) -> bool:
    """An ATen op that may move a full-size tensor; the innermost such op is the one that does the work."""
    if not event.name.startswith("aten::") or event.name[len("aten::") :] in _NON_MOVING:
        return False
    shapes = [
        s
        for s in (event.input_shapes or [])
        if isinstance(s, (list, tuple)) and s and all(isinstance(n, int) for n in s)
    ]
    return any(_numel(s) >= full_numel for s in shapes)


def _numel(shape) -> int:
    n = 1
    for size in shape:
        n *= size
    return n


def count_reductions(names: list[str]) -> int:
    """Row reductions (mean, sum, var, ...) in an op list: LN's composite needs two, RMS's one."""
    reducing = {"mean", "sum", "var", "var_mean", "std", "std_mean", "norm", "linalg_vector_norm", "amax"}
    return sum(1 for n in names if n in reducing)


def op_histogram(names: list[str]) -> dict[str, int]:
    return dict(Counter(names))
