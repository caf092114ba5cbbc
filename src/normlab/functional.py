"""Public functional API: `rms_norm` and `layer_norm`, dispatched to a backend.

    reference  the float64-capable specification (normlab.reference); every feature
    eager      the unfused composite as HuggingFace computes it (normlab.composite)
    torch      PyTorch's native F.rms_norm / F.layer_norm
    compile    torch.compile of the general composite (inductor fuses it)
    triton     normlab.ops: our Triton kernels behind torch.library custom ops
    auto       the fastest backend for the device that has the requested features

A backend asked for a feature it lacks raises `UnsupportedFeature` (a
ValueError) naming the backends that have it; nothing falls back silently.
"""
from __future__ import annotations

import functools
import warnings

import torch
import torch.nn.functional as F

from . import composite
from .reference import layer_norm_reference, rms_norm_reference
from .validation import check_layer_args, check_rms_args, partial_size

BACKENDS = ("reference", "eager", "torch", "compile", "triton", "auto")

# Which optional RMSNorm features each backend implements. HuggingFace's norms
# and F.rms_norm put ε inside the square root over the whole row, so they have
# no "outside" placement and no partial RMS. The offset gain (Gemma) is a
# weight pre-add that any backend can do. LayerNorm features are universal.
_ALL_RMS_FEATURES = frozenset({"weight", "residual", "offset", "eps_placement='outside'", "partial"})
_RMS_FEATURES = {
    "reference": _ALL_RMS_FEATURES,
    "eager": frozenset({"weight", "residual", "offset"}),
    "torch": frozenset({"weight", "residual", "offset"}),
    "compile": _ALL_RMS_FEATURES,
    "triton": _ALL_RMS_FEATURES,
}

# On CPU, auto sends large RMSNorm inputs to the compiled composite. Measured on
# the 2-core study VM, torch 2.13, fp32, median of interleaved repeats
# (scripts/cpu_auto_measure.py): at 8192x4096, native F.rms_norm ran at ~32% of
# an allocating clone's bandwidth (~3x slower than F.layer_norm: on CPU it is a
# chain of separate ops, each a pass over memory), while the inductor-compiled
# composite (one C++ loop per row: the row stays in L1 between its reduction
# and its scaling) ran at 85-100% of clone, level with F.layer_norm. While the
# tensor fits in cache the native chain is as fast or faster (1M elements:
# 0.39 ms native vs 0.53 ms compiled, min of 40), and compiled calls carry
# ~0.1 ms of guard overhead; the two cross near 2M elements (1.19 vs 1.01 ms),
# beyond which compiled wins 2-5x. Compilation costs seconds once per feature
# set; shapes are dynamic, so new batch or sequence lengths do not recompile.
AUTO_CPU_COMPILE_MIN_NUMEL = 1 << 21


class UnsupportedFeature(ValueError):
    """A backend was asked for a feature it does not implement."""


def _check_backend(backend) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; valid backends: {', '.join(BACKENDS)}")


def _requested_rms_features(weight, residual, offset, eps_placement, partial) -> set[str]:
    requested = set()
    if weight is not None:
        requested.add("weight")
    if residual is not None:
        requested.add("residual")
    if offset != 0:
        requested.add("offset")
    if eps_placement == "outside":
        requested.add("eps_placement='outside'")
    if partial != 1.0:
        requested.add("partial")
    return requested


def _require_rms_features(backend: str, requested: set[str]) -> None:
    missing = requested - _RMS_FEATURES[backend]
    if missing:
        having = [name for name, features in _RMS_FEATURES.items() if requested <= features]
        raise UnsupportedFeature(
            f"backend {backend!r} does not support {', '.join(sorted(missing))}; "
            f"use backend={having[0]!r} (also: {', '.join(having[1:])}) or backend='auto'"
        )


# ---------------------------------------------------------------- triton

def _ops():
    try:
        from . import ops
    except ImportError as error:  # triton is an optional dependency
        raise ImportError(
            f"backend='triton' needs the triton package ({error}); install normlab[triton], or pick another backend"
        ) from error
    return ops


@functools.lru_cache(maxsize=None)
def _triton_importable() -> bool:
    try:
        _ops()
    except ImportError:
        return False
    return True


# ---------------------------------------------------------------- compile

@functools.lru_cache(maxsize=None)
def _compiled(kind: str):
    # dynamic=True: one graph serves every shape, so varying batch or sequence
    # lengths do not recompile. Float/bool arguments (eps, flags) are guarded
    # on, so each distinct feature set compiles once.
    function = composite.rms_norm_general if kind == "rms" else composite.layer_norm_general
    return torch.compile(function, dynamic=True, fullgraph=True)


def _run_compiled(kind: str, x, *args):
    """Runs the composite compiled; the residual is args[1] (rms) or args[2] (layer)."""
    if torch.compiler.is_compiling():
        # Already inside an outer torch.compile: let it trace the composite.
        function = composite.rms_norm_general if kind == "rms" else composite.layer_norm_general
        return function(x, *args)
    # Seen as 2-D, inputs of any rank share one graph instead of compiling per rank.
    shape, n_features = x.shape, x.shape[-1]
    args = list(args)
    where = 1 if kind == "rms" else 2
    if args[where] is not None:
        args[where] = args[where].reshape(-1, n_features)
    y, s = _compiled(kind)(x.reshape(-1, n_features), *args)
    return y.reshape(shape), (None if s is None else s.reshape(shape))


_compile_failure: str | None = None


def _auto_compiled(kind: str, *args):
    """The compiled composite for auto; returns None (and warns once) if this machine cannot compile."""
    global _compile_failure
    if _compile_failure is not None:
        return None
    try:
        return _run_compiled(kind, *args)
    except Exception as error:  # no C++ compiler, unsupported platform, ...: auto must still answer
        _compile_failure = f"{type(error).__name__}: {error}"
        warnings.warn(f"normlab: torch.compile is unusable here ({_compile_failure}); auto uses the native ops", stacklevel=3)
        return None


# ---------------------------------------------------------------- auto

def _auto_rms_backend(x: torch.Tensor, requested: set[str]) -> str:
    if x.device.type == "cuda" and _triton_importable():
        return "triton"
    if x.device.type == "cpu" and x.numel() >= AUTO_CPU_COMPILE_MIN_NUMEL and _compile_failure is None:
        return "compile"
    if requested <= _RMS_FEATURES["torch"]:
        return "torch"
    return "compile" if x.device.type == "cuda" else "reference"


def _auto_layer_backend(x: torch.Tensor) -> str:
    # F.layer_norm is already one fused, vectorised pass on CPU (measured at
    # clone bandwidth), so only CUDA gains from our kernels.
    if x.device.type == "cuda" and _triton_importable():
        return "triton"
    return "torch"


# ---------------------------------------------------------------- public API

def rms_norm(x, weight=None, eps=1e-6, *, residual=None, offset=0.0, eps_placement="inside", partial=1.0, backend="auto"):
    """RMSNorm over the last dimension.

    y = x / sqrt(mean(x[..., :k]**2) + eps) * (offset + weight)   (eps_placement="inside")
    y = x / (sqrt(mean(x[..., :k]**2)) + eps) * (offset + weight) (eps_placement="outside")

    with k = ceil(partial * d). With `residual`, s = x + residual is normalised
    and `(y, s)` is returned. The output has x's dtype.
    """
    _check_backend(backend)
    check_rms_args(x, weight, eps, residual, offset, eps_placement, partial)
    requested = _requested_rms_features(weight, residual, offset, eps_placement, partial)
    if backend == "auto":
        backend = _auto_rms_backend(x, requested)
        if backend == "compile":
            k = None if partial == 1.0 else partial_size(x.shape[-1], partial)
            out = _auto_compiled("rms", x, weight, residual, float(eps), float(offset), eps_placement == "inside", k)
            if out is not None:
                y, s = out
                return (y, s) if residual is not None else y
            backend = "torch" if requested <= _RMS_FEATURES["torch"] else "reference"
    _require_rms_features(backend, requested)

    if backend == "reference":
        return rms_norm_reference(x, weight, eps, residual=residual, offset=offset, eps_placement=eps_placement, partial=partial)
    if backend == "triton":
        return _ops().rms_norm(x, weight, eps, residual=residual, offset=offset, eps_placement=eps_placement, partial=partial)
    if backend == "compile":
        k = None if partial == 1.0 else partial_size(x.shape[-1], partial)
        y, s = _run_compiled("rms", x, weight, residual, float(eps), float(offset), eps_placement == "inside", k)
        return (y, s) if residual is not None else y

    s = x if residual is None else x + residual
    if backend == "torch":
        gain = None if weight is None else (weight + offset if offset else weight)
        y = F.rms_norm(s, (s.shape[-1],), gain, eps)
    else:
        y = composite.rms_norm_hf(s, weight, eps, offset)
    return (y, s) if residual is not None else y


def layer_norm(x, weight=None, bias=None, eps=1e-5, *, residual=None, backend="auto"):
    """LayerNorm over the last dimension: (x - mean) / sqrt(var + eps) * weight + bias.

    The variance is the biased (1/d) one. With `residual`, s = x + residual is
    normalised and `(y, s)` is returned. The output has x's dtype.
    """
    _check_backend(backend)
    check_layer_args(x, weight, bias, eps, residual)
    if backend == "auto":
        backend = _auto_layer_backend(x)

    if backend == "reference":
        return layer_norm_reference(x, weight, bias, eps, residual=residual)
    if backend == "triton":
        return _ops().layer_norm(x, weight, bias, eps, residual=residual)
    if backend == "compile":
        y, s = _run_compiled("layer", x, weight, bias, residual, float(eps))
        return (y, s) if residual is not None else y

    s = x if residual is None else x + residual
    if backend == "torch":
        y = F.layer_norm(s, (s.shape[-1],), weight, bias, eps)
    else:
        y = composite.layer_norm_unfused(s, weight, bias, eps)
    return (y, s) if residual is not None else y
