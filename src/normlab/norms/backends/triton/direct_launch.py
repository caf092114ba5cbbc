"""`kernel[grid](...)` for compiled kernels, without JITFunction.run's per-call binding.

JITFunction.run binds every argument through a generated Python function, builds a string cache key
from the specialisation and the options, checks the kernel's globals and hooks, and only then calls
the C launcher: about 9 µs a launch on the host (scripts/triton_host_overhead.py), as long as a
small norm's whole GPU time. `DirectLauncher` compiles each specialisation once through that same
JITFunction.run, keeps the compiled kernel, and later calls its C launcher directly.

The cache key holds everything that makes Triton compile a different kernel (its
`specialize_impl`): the device; num_warps and the constexprs; a tensor's dtype and whether its
address is 16-byte aligned; a scalar's type, whether it fits 32 bits, and, unless the kernel marks it
`do_not_specialize`, whether it is 1 and whether it is divisible by 16. (For floats this splits more
finely than Triton does: a few more entries, each holding the kernel Triton picks.) A key that missed
one of these would launch a kernel compiled for other arguments: tests/test_triton_host_path.py checks,
call by call, that this picks the kernel JITFunction.run would.

Triton's `native_specialize_impl` costs microseconds per tensor, so the key comes from a function
generated per kernel, one inline expression per parameter. An argument that is neither a tensor nor a
number (None, say) falls back to `kernel[grid](...)`.

In Triton's interpreter (TRITON_INTERPRET=1), whenever a launch hook is installed (profilers
such as proton want JITFunction.run's metadata), and on a Triton older than 3.4 (no `triton.knobs`: torch 2.6
pairs with Triton 3.2, whose compiled kernels' launchers take other arguments), it calls `kernel[grid](...)` as
written: the same kernels, with JITFunction.run's host cost. The direct path is checked on a GPU with Triton 3.6.

A kernel runs on its first tensor argument's device, not the current one (as Liger's launches do under
`torch.cuda.device(x.device)`): a model on cuda:1 while cuda:0 is current compiles, keys and launches
its kernels for cuda:1, on that device's current stream, switching the current device only for that call.
"""

from __future__ import annotations

import contextlib
import operator

import torch
from triton.runtime.driver import driver

try:
    from triton import knobs
except ImportError:  # Triton < 3.4: launches go through JITFunction.run (see the module docstring)
    knobs = None

from normlab.norms.backends.triton._runtime import kernels_interpreted


class DirectLauncher:
    """Launches one @triton.jit kernel: `launcher(grid, *runtime_args, num_warps=..., **constexprs)`.

    Runtime arguments are positional, in the kernel's order; constexprs by keyword, all of them."""

    def __init__(self, kernel):
        self.kernel = kernel
        self.interpreted = kernels_interpreted(kernel)
        self.name = getattr(kernel, "__name__", None) or kernel.fn.__name__
        if self.interpreted:
            return
        params = kernel.params
        names = [p.name for p in params if p.is_constexpr]
        # The constexpr values in the kernel's order, as a tuple even for one (itemgetter alone gives a bare value).
        self.constants_of = operator.itemgetter(*names, names[0]) if names else (lambda _: ())
        self.constexpr_count = len(names)
        runtime = [p for p in params if not p.is_constexpr]
        if any(p.is_constexpr for p in params[: len(runtime)]):
            raise TypeError(f"{self.name}: DirectLauncher needs the constexpr parameters after all runtime ones")
        self.key_of = _key_function([(p.name, not p.do_not_specialize) for p in runtime])
        self.compiled = {}  # key -> (C launcher, function handle, packed metadata, compiled kernel)

    def compiled_for(self, *args, num_warps, maxnreg=None, **constexprs):
        """The compiled kernel a call with these arguments launches, None before the first such call."""
        device = _device_of(args, driver.active.get_current_device())
        key = (device, num_warps, maxnreg, self.constants_of(constexprs)[: self.constexpr_count])
        entry = self.compiled.get(key + (self.key_of(*args),))
        return None if entry is None else entry[3]

    def __call__(self, grid, *args, num_warps, maxnreg=None, **constexprs):
        """`maxnreg`: ptxas's register budget a thread (tuning.KernelConfig.registers), None for ptxas's own."""
        if maxnreg is not None:
            constexprs["maxnreg"] = maxnreg  # a compile option to Triton; part of this launcher's key below
        if self.interpreted or knobs is None or _launch_hooks_installed():
            return self.kernel[grid](*args, num_warps=num_warps, **constexprs)
        current = driver.active.get_current_device()
        device = _device_of(args, current)
        if device == current:
            return self._launch(device, grid, args, num_warps, maxnreg, constexprs)
        with switched_to(device):
            return self._launch(device, grid, args, num_warps, maxnreg, constexprs)

    def _launch(self, device, grid, args, num_warps, maxnreg, constexprs):
        constants = self.constants_of(constexprs)[: self.constexpr_count]
        try:
            key = (device, num_warps, maxnreg, constants, self.key_of(*args))
        except (AttributeError, TypeError):  # neither tensors nor numbers (None, say): Triton binds them
            return self.kernel[grid](*args, num_warps=num_warps, **constexprs)
        entry = self.compiled.get(key)
        stream = driver.active.get_current_stream(device)
        if entry is None:
            # The first call of this specialisation: JITFunction.run compiles (or finds) it and launches it.
            kernel = self.kernel[grid](*args, num_warps=num_warps, **constexprs)
            kernel = kernel.result() if hasattr(kernel, "result") else kernel  # asynchronous compilation
            self.compiled[key] = (kernel.run, kernel.function, kernel.packed_metadata, kernel)
            return kernel
        run, function, metadata, _ = entry
        grid_size = len(grid)
        run(
            grid[0],
            grid[1] if grid_size > 1 else 1,
            grid[2] if grid_size > 2 else 1,
            stream,
            function,
            metadata,
            None,  # launch metadata, and the enter and exit hooks: there are none (checked above)
            None,
            None,
            *args,
            *constants,
        )
        return None


def _device_of(args, current: int) -> int:
    """The device index of the first tensor argument (the kernel's X, or its partials), else the current one."""
    first = args[0] if args else None
    index = first.get_device() if isinstance(first, torch.Tensor) else -1
    return index if index >= 0 else current


def switched_to(device: int):
    """The current CUDA device set to `device` for one launch (a stand-in replaces it in the tests)."""
    return torch.cuda.device(device) if torch.cuda.is_available() else contextlib.nullcontext()


def _launch_hooks_installed() -> bool:
    # Triton keeps its launch hooks in chains that are present but empty until a profiler adds one.
    enter, exit_ = knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook
    return bool(
        (enter is not None and getattr(enter, "calls", True)) or (exit_ is not None and getattr(exit_, "calls", True))
    )


_FITS_32_BITS = "-2147483648 <= {0} <= 2147483647"


def _key_function(params: list[tuple[str, bool]]):
    """A function of the runtime arguments returning their part of the cache key (see the module docstring)."""
    parts = []
    for name, specialize in params:
        scalar = f"type({name}), {_FITS_32_BITS.format(name)}"
        if specialize:
            scalar += f", {name} == 1, {name} % 16 == 0"
        # A tuple per argument: a tensor's (dtype, aligned) never equals a scalar's (type, ...).
        parts.append(f"(({name}.dtype, {name}.data_ptr() % 16 == 0) if isinstance({name}, Tensor) else ({scalar}))")
    names = ", ".join(name for name, _ in params)
    namespace = {"Tensor": torch.Tensor}
    exec(f"def key_of({names}):\n    return ({', '.join(parts)},)\n", namespace)
    return namespace["key_of"]
