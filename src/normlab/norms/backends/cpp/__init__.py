"""The "cpp" backend: a hand-written CPU RMSNorm (rms_norm.cpp), one pass over memory each way.

Why it exists: on CPU, PyTorch's native LayerNorm backward computes dx and the
weight gradient in one pass (each thread sums its rows' share of the weight
gradient), while every composite RMSNorm, compiled or not, needs a second pass
for the column sum. The kernel here does what ATen does for LayerNorm, so
RMSNorm's training step moves no more memory than LayerNorm's
(scripts/cpu_train_step.py and the speed chapter's backward study measure it).

The source is compiled on first use with the C++ compiler that inductor uses
(the "compile" backend needs one already), for this machine's instruction set
(-march=native), and cached under $NORMLAB_CACHE_DIR (default
~/.cache/normlab), keyed by the source, the flags, the compiler and the CPU
(its model and instruction-set flags), so a cache shared between machines of
different CPUs never loads another machine's build. $NORMLAB_CPP_MARCH sets
the -march value instead (e.g. x86-64-v3, or x86-64 for any 64-bit x86): a
portable binary, for a cache or an image built on one machine and run on
others. It is loaded with ctypes; the calls release the GIL and use
torch.get_num_threads() OpenMP threads.

Without a compiler, backend="auto" warns once, naming the tool it looked
for, and uses another backend; backend="cpp" raises KernelBuildError with
the same message.

Scope: 2-D contiguous CPU tensors, x, weight and residual all float32 or all
float64; weight, residual (s = x + residual, returned), offset and either ε
placement. Callers (normlab.norms.functional) validate and route everything else.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import warnings
from pathlib import Path

import torch

SOURCE = Path(__file__).with_name("rms_norm.cpp")
MARCH_SETTING = "NORMLAB_CPP_MARCH"
_FLAGS_BUT_MARCH = ("-O3", "-fopenmp", "-std=c++17", "-shared", "-fPIC")
DTYPES = (torch.float32, torch.float64)
_SUFFIX = {torch.float32: "f32", torch.float64: "f64"}


class KernelBuildError(RuntimeError):
    """The CPU kernel could not be compiled or loaded on this machine."""


def march() -> str:
    """The -march value the kernel is built for: $NORMLAB_CPP_MARCH, else "native" (this machine's CPU)."""
    value = os.environ.get(MARCH_SETTING, "").strip() or "native"
    if not all(c.isalnum() or c in "-_.+" for c in value):
        raise KernelBuildError(
            f"{MARCH_SETTING}={value!r} is not a -march value; set it to one such as x86-64-v3 or native, or unset it"
        )
    return value


def flags() -> tuple[str, ...]:
    return (*_FLAGS_BUT_MARCH, f"-march={march()}")


def _compiler() -> str:
    import torch._inductor.config as inductor_config

    configured = inductor_config.cpp.cxx[-1] if isinstance(inductor_config.cpp.cxx, tuple) else inductor_config.cpp.cxx
    candidates = [name for name in dict.fromkeys((os.environ.get("CXX"), configured, "g++", "c++", "clang++")) if name]
    for name in candidates:
        if shutil.which(name):
            return shutil.which(name)
    raise KernelBuildError(
        f"backend='cpp' needs a C++ compiler with OpenMP, and none of {', '.join(candidates)} is on PATH; install "
        "one (Debian: apt install g++), or set CXX to its path; else use backend='compile' or 'torch'"
    )


def _cpu_identity() -> str:
    """What -march=native depends on, and what any -march build needs: the CPU model and its instruction-set flags."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        return "\n".join(sorted({l for l in lines if l.startswith(("model name", "flags"))}))
    except OSError:
        return platform.processor() or platform.machine()


@functools.cache
def build_info() -> dict:
    """How this machine builds the kernel, for the results files: -march=native is resolved to the architecture
    the compiler picks, so two machines' results say whether they ran the same machine code."""
    build_flags = list(_FLAGS_BUT_MARCH)  # what is known when the march setting itself is refused
    try:
        build_flags = list(flags())
        compiler = _compiler()
    except KernelBuildError as error:
        return {"compiler": None, "flags": build_flags, "why_none": str(error)}
    return {
        "compiler": Path(compiler).name,
        "compiler_version": _compiler_version(compiler),
        "flags": build_flags,
        "native_arch": _native_arch(compiler),
    }


def _compiler_version(compiler: str) -> str | None:
    lines = subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout.splitlines()
    return lines[0] if lines else None


def _native_arch(compiler: str) -> str | None:
    """The architecture -march=native resolves to (gcc answers; clang does not, and this is None)."""
    target = subprocess.run([compiler, "-march=native", "-Q", "--help=target"], capture_output=True, text=True)
    resolved = [line.split()[-1] for line in target.stdout.splitlines() if line.strip().startswith("-march=")]
    return resolved[0] if resolved else None


def cache_dir() -> Path:
    return Path(os.environ.get("NORMLAB_CACHE_DIR") or Path.home() / ".cache" / "normlab")


def cached_library(compiler: str, build_flags: tuple[str, ...]) -> Path:
    """Where the build for this source, these flags, this compiler and this CPU is cached."""
    parts = [SOURCE.read_text(), " ".join(build_flags), _compiler_version(compiler) or compiler, _cpu_identity()]
    key = hashlib.sha256("\0".join(parts).encode()).hexdigest()
    return cache_dir() / f"rms_norm_{key[:16]}.so"


def _build(compiler: str) -> Path:
    build_flags = flags()
    target = cached_library(compiler, build_flags)
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # Build beside the target and rename: processes building at once (a spawn pool) never load a half-written file.
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        built = Path(scratch) / target.name
        command = [compiler, *build_flags, str(SOURCE), "-o", str(built)]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            setting = f" ({MARCH_SETTING}={march()})" if os.environ.get(MARCH_SETTING) else ""
            raise KernelBuildError(
                f"compiling {SOURCE.name} with {compiler}{setting} failed:\n{result.stderr.strip()[:2000]}"
            )
        os.replace(built, target)
    return target


@functools.cache
def _load() -> ctypes.CDLL | KernelBuildError:
    """The library, or the reason it cannot be had: a failed build is remembered, not retried on every call."""
    try:
        lib = ctypes.CDLL(str(_build(_compiler())))
    except KernelBuildError as error:
        return error
    except OSError as error:  # a build directory that cannot be written, a library that cannot be loaded
        return KernelBuildError(
            f"building or loading the CPU kernel failed: {error}; set NORMLAB_CACHE_DIR to a "
            "writable directory, or use backend='compile'"
        )
    pointer, size = ctypes.c_void_p, ctypes.c_int64
    # after the tensors' pointers (6 forward, 7 backward): rows, d, eps, offset, eps_inside and threads
    scalars = [size, size, ctypes.c_double, ctypes.c_double, ctypes.c_int, ctypes.c_int]
    for suffix in _SUFFIX.values():
        getattr(lib, f"normlab_rms_forward_{suffix}").argtypes = [pointer] * 6 + scalars
        getattr(lib, f"normlab_rms_backward_{suffix}").argtypes = [pointer] * 7 + scalars
    return lib


def library() -> ctypes.CDLL:
    """The compiled kernels, built once per machine and loaded once per process; KernelBuildError says why not."""
    loaded = _load()
    if isinstance(loaded, KernelBuildError):
        raise loaded
    return loaded


@functools.cache
def available() -> bool:
    """Whether the kernel builds and loads here. auto asks this, and warns once (naming what failed) when it
    cannot; backend='cpp' raises the reason instead."""
    loaded = _load()
    if isinstance(loaded, KernelBuildError):
        warnings.warn(
            f"normlab: the CPU RMSNorm kernel is unavailable, so auto uses another backend (slower to train): {loaded}",
            stacklevel=3,
        )
        return False
    return True


def _empty(shape, dtype) -> torch.Tensor:
    """Every output buffer comes from here (the tests poison it, so an element the kernel never wrote shows)."""
    return torch.empty(shape, dtype=dtype)


def _pointer(t: torch.Tensor | None):
    return None if t is None else t.data_ptr()


def forward(x, weight, residual, eps: float, offset: float, eps_inside: bool):
    """(y, s or None, inverse rms per row) for 2-D contiguous CPU tensors of one dtype in DTYPES."""
    rows, d = x.shape
    y = _empty(x.shape, x.dtype)
    s = None if residual is None else _empty(x.shape, x.dtype)
    inverse = _empty((rows,), x.dtype)
    getattr(library(), f"normlab_rms_forward_{_SUFFIX[x.dtype]}")(
        _pointer(x),
        _pointer(residual),
        _pointer(weight),
        _pointer(y),
        _pointer(s),
        _pointer(inverse),
        rows,
        d,
        eps,
        offset,
        int(eps_inside),
        torch.get_num_threads(),
    )
    return y, s, inverse


def backward(dy, dsum, s, weight, inverse, eps: float, offset: float, eps_inside: bool, need_dweight: bool):
    """(dx, dweight or None): dx is the gradient of the sum s (of x when there is no residual)."""
    rows, d = s.shape
    dx = _empty(s.shape, s.dtype)
    dweight = _empty(weight.shape, weight.dtype) if need_dweight and weight is not None else None
    getattr(library(), f"normlab_rms_backward_{_SUFFIX[s.dtype]}")(
        _pointer(dy),
        _pointer(dsum),
        _pointer(s),
        _pointer(weight),
        _pointer(inverse),
        _pointer(dx),
        _pointer(dweight),
        rows,
        d,
        eps,
        offset,
        int(eps_inside),
        torch.get_num_threads(),
    )
    return dx, dweight


class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, residual, eps, offset, eps_inside):
        y, s, inverse = forward(
            x.detach(),
            None if weight is None else weight.detach(),
            None if residual is None else residual.detach(),
            eps,
            offset,
            eps_inside,
        )
        ctx.config = (eps, offset, eps_inside, residual is not None)
        ctx.save_for_backward(x if s is None else s, weight, inverse)
        return y, s

    @staticmethod
    def backward(ctx, dy, dsum):
        s, weight, inverse = ctx.saved_tensors
        eps, offset, eps_inside, has_residual = ctx.config
        need_dweight = weight is not None and ctx.needs_input_grad[1]
        if torch.is_grad_enabled():
            # create_graph=True: differentiable eager ops (the compiled backend's math), so higher derivatives are right
            from normlab.norms.backends.compiled import rms_backward_math

            ms = (s * s).mean(-1, keepdim=True)
            dx, dweight = rms_backward_math(
                torch.zeros_like(s) if dy is None else dy,
                dsum,
                s,
                weight,
                ms,
                eps,
                offset,
                eps_inside,
                None,
                False,
                s.dtype,
                need_dweight,
            )
        else:
            dy = torch.zeros_like(s) if dy is None else dy.contiguous()
            dx, dweight = backward(
                dy,
                None if dsum is None else dsum.contiguous(),
                s,
                weight,
                inverse,
                eps,
                offset,
                eps_inside,
                need_dweight,
            )
        return dx, dweight, (dx if has_residual else None), None, None, None


def supports(x, weight, residual, s_dtype) -> str | None:
    """None if the kernel can take these inputs, else why not (for error messages and auto's routing)."""
    if x.device.type != "cpu":
        return f"it runs on CPU tensors, and x is on {x.device.type}"
    if x.dtype not in DTYPES:
        return f"it computes in float32 or float64, and x is {x.dtype}"
    others = [t for t in (weight, residual) if t is not None]
    if any(t.dtype != x.dtype for t in others) or s_dtype != x.dtype:
        return "it needs x, weight, residual and the running sum in one dtype"
    return None


def cpp_rms_norm(x, weight, residual, eps: float, offset: float, eps_inside: bool):
    """(y, s or None) through the kernel, with autograd; inputs of any rank are seen as 2-D."""
    shape, n = x.shape, x.shape[-1]
    rows = lambda t: None if t is None else t.reshape(-1, n).contiguous()  # noqa: E731
    x2, weight, residual2 = rows(x), None if weight is None else weight.contiguous(), rows(residual)
    tracked = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, residual))
    if tracked:
        y, s = _RMSNorm.apply(x2, weight, residual2, float(eps), float(offset), bool(eps_inside))
    else:  # inference: no autograd node to build (a few microseconds per call at small batches)
        y, s, _ = forward(x2, weight, residual2, float(eps), float(offset), bool(eps_inside))
    return y.reshape(shape), (None if s is None else s.reshape(shape))
