"""normlab.norms.backends.triton: Triton kernels for RMSNorm and LayerNorm (forward, backward, fused residual add).

Entry points (for the speed study and other callers)
-----------------------------------------------------
* ``triton_rms_norm(x, weight, eps, *, residual, offset, eps_placement, partial, onchip_limit=None, chunk=None)``
  and ``triton_layer_norm(x, weight, bias, eps, *, residual, stats="welford", onchip_limit=None, chunk=None)``:
  differentiable (autograd through the registered backward op) and torch.compile-able. Same results
  as ``normlab.rms_norm(..., backend="triton")``, plus the kernel-selection keywords:

  - ``onchip_limit``: rows of length <= this (elements) are kept whole in registers; longer rows use
    the chunked kernels. ``onchip_limit=0`` forces the chunked path at any length. Default
    ``launch.ONCHIP_LIMIT`` (16384); the backward also caps it at ``launch.BACKWARD_ONCHIP_LIMIT``
    (8192), above which its on-chip kernel would spill registers.
  - ``chunk``: elements streamed per step by the chunked kernels (a power of two; default 4096).
  - ``stats`` (LayerNorm only): how the chunked kernel gets mean and variance. ``"two_pass"`` streams
    the row twice for them (mean, then centred squares) and a third time to normalise; ``"welford"``
    streams it once (per-chunk statistics merged with Chan et al.'s update) and once to normalise.
    The on-chip kernel ignores it (the row is read once either way).

* ``triton_rms_norm_prevalidated`` / ``triton_layer_norm_prevalidated``: the same, positional, for a caller
  that has already validated the arguments, so they are not checked twice.
* ``rms_norm_plan(eps, offset, eps_placement, partial, residual_in_fp32)`` / ``layer_norm_plan(eps,
  residual_in_fp32)``: a function of the tensors alone, ``plan(x, weight, residual)`` (``plan(x, weight, bias,
  residual)``), with every argument-derived constant resolved once; normlab.norms.functional keeps one per kind of
  validated call (backend, dtypes, device, features) and calls it. The entry points above are a plan made and
  called once.

* ``launch.forward(..., centred)`` / ``launch.backward(..., centred)``: the bare launchers without autograd, one
  per direction for both norms (``centred``: LayerNorm), returning the saved statistics too; the cheapest thing to
  time. ``launch.rms_forward`` / ``layer_forward`` and the ``*_backward`` functions are the same with each norm's
  own arguments. Outputs are always freshly allocated and contiguous. The kernels are one family
  (``norm_kernels``): LayerNorm's centring and bias are compile-time switches of the RMSNorm kernels.

One call path (``custom_ops.rms_norm_forward_call``): in eager mode a torch.autograd.Function that calls the
launcher; under torch.compile or torch.export, or for a tensor that is not a plain one (FakeTensor, a tensor
subclass), the registered custom op, whose fake impl compile sees. The eager Function keeps the statistics on its
ctx and materialises no zero gradient, so a backward is one row kernel and one reduction kernel
(``reduce_kernels``), with no ATen work.
Compiled kernels are launched through ``direct_launch.DirectLauncher``: each specialisation is
compiled once by JITFunction.run, and later calls go straight to its C launcher. Row counts are not
specialised (``do_not_specialize``): a new batch size reuses the kernel. Row strides are, on purpose:
Triton's divisible-by-16 flag is what proves every row 16-byte aligned, so that a tile of several rows
loads in 16-byte vectors. That makes at most three kernels per width, dtype and flags (a stride of 1,
a multiple of 16, or neither), not one per batch shape.

Host cost per call, layer by layer (no GPU needed): ``scripts/triton_host_overhead.py``.

GPU-side checks without a GPU: ``scripts/compile_kernels_sm90.py`` compiles every kernel variant for
sm_90 and reports register spills. On a lent GPU, ``scripts/gpu_session.py`` checks the kernels at real
shapes and times the launch variants (``variants``) that ``tuning_table`` turns into the tuning table.

Kernels run on CUDA tensors; on CPU only in Triton's interpreter (TRITON_INTERPRET=1 set before this
package is first imported). Otherwise a RuntimeError explains that.
"""

from __future__ import annotations

try:
    import triton  # noqa: F401
except ImportError as error:  # an optional dependency: say which extra brings it
    raise ImportError(
        f"normlab.norms.backends.triton (the Triton kernels, backend='triton') needs the triton package ({error}); "
        'install it with `pip install "normlab[triton]"`, or use another backend (e.g. "auto", "compile", "torch")'
    ) from error

from normlab.norms.backends.triton import custom_ops, launch
from normlab.norms.validation import check_layer_args, check_rms_args, partial_size, resolve_eps, sum_dtype

__all__ = [
    "launch",
    "layer_norm_plan",
    "rms_norm_plan",
    "triton_layer_norm",
    "triton_layer_norm_prevalidated",
    "triton_rms_norm",
    "triton_rms_norm_prevalidated",
]


def triton_rms_norm(
    x,
    weight=None,
    eps=1e-6,
    *,
    residual=None,
    offset=0.0,
    eps_placement="inside",
    partial=1.0,
    residual_in_fp32=False,
    onchip_limit=None,
    chunk=None,
):
    """RMSNorm with the Triton kernels; returns y, or (y, x + residual) when `residual` is given.

    y has x's dtype; s has sum_dtype(x, residual, residual_in_fp32) (see normlab.norms.functional.rms_norm)."""
    eps = resolve_eps(eps, x)
    check_rms_args(x, weight, eps, residual, offset, eps_placement, partial)
    plan = rms_norm_plan(eps, offset, eps_placement, partial, residual_in_fp32, onchip_limit, chunk)
    return plan(x, weight, residual)


def triton_rms_norm_prevalidated(
    x, weight, eps, residual, offset, eps_placement, partial, residual_in_fp32=False, onchip_limit=None, chunk=None
):
    """triton_rms_norm for a caller that has already run resolve_eps and validation.check_rms_args on these arguments
    (normlab.norms.functional does): the same result without checking them a second time."""
    plan = rms_norm_plan(eps, offset, eps_placement, partial, residual_in_fp32, onchip_limit, chunk)
    return plan(x, weight, residual)


def triton_layer_norm(
    x,
    weight=None,
    bias=None,
    eps=1e-5,
    *,
    residual=None,
    residual_in_fp32=False,
    stats="welford",
    onchip_limit=None,
    chunk=None,
):
    """LayerNorm with the Triton kernels; returns y, or (y, x + residual) when `residual` is given (dtypes as triton_rms_norm)."""
    eps = resolve_eps(eps, x)
    check_layer_args(x, weight, bias, eps, residual)
    return layer_norm_plan(eps, residual_in_fp32, stats, onchip_limit, chunk)(x, weight, bias, residual)


def triton_layer_norm_prevalidated(
    x, weight, bias, eps, residual, residual_in_fp32=False, stats="welford", onchip_limit=None, chunk=None
):
    """triton_layer_norm for a caller that has already run resolve_eps and validation.check_layer_args."""
    return layer_norm_plan(eps, residual_in_fp32, stats, onchip_limit, chunk)(x, weight, bias, residual)


def _summed_dtype(x, residual, residual_in_fp32: bool):
    # The kernels add in one dtype and store s in it: cast both to s's dtype (validation.sum_dtype) first.
    dtype = sum_dtype(x, residual, residual_in_fp32)
    return launch._as(x, dtype), launch._as(residual, dtype)


def rms_norm_plan(eps, offset, eps_placement, partial, residual_in_fp32, onchip_limit=None, chunk=None):
    """The validated call as a function of the tensors alone, plan(x, weight, residual): every argument-derived
    constant resolved once; each call pays only for the dtype casts its tensors need and the call path
    (custom_ops.rms_norm_forward_call: the autograd.Function in eager mode, the custom op under tracing).

    onchip_limit and chunk default to launch.ONCHIP_LIMIT and launch.CHUNK as they are at each call (tests and the
    speed study change them on the module)."""
    eps, offset, eps_inside = float(eps), float(offset), eps_placement == "inside"
    forward = custom_ops.rms_norm_forward_call

    def plan(x, weight, residual):
        n = x.shape[-1]
        k = n if partial == 1.0 else partial_size(n, partial)  # partial RMS: the leading features it is taken over
        limit = launch.ONCHIP_LIMIT if onchip_limit is None else int(onchip_limit)
        size = launch.CHUNK if chunk is None else int(chunk)
        if residual is None:  # no cast: y is allocated in x's dtype
            return forward(x, weight, None, eps, offset, eps_inside, k, limit, size)[0]
        out_dtype = x.dtype
        x, residual = _summed_dtype(x, residual, residual_in_fp32)
        y, s, _ = forward(x, weight, residual, eps, offset, eps_inside, k, limit, size)
        # A mixed-dtype call computed y in s's dtype; y is x's (one rounding from fp32 either way).
        return launch._as(y, out_dtype), s

    return plan


def layer_norm_plan(eps, residual_in_fp32, stats="welford", onchip_limit=None, chunk=None):
    """triton_layer_norm_prevalidated as a function of (x, weight, bias, residual), as rms_norm_plan."""
    if stats not in launch.LAYER_STATS:
        raise ValueError(f"stats must be one of {launch.LAYER_STATS}, got {stats!r}")
    eps = float(eps)
    forward = custom_ops.layer_norm_forward_call

    def plan(x, weight, bias, residual):
        limit = launch.ONCHIP_LIMIT if onchip_limit is None else int(onchip_limit)
        size = launch.CHUNK if chunk is None else int(chunk)
        if residual is None:
            return forward(x, weight, bias, None, eps, stats, limit, size)[0]
        out_dtype = x.dtype
        x, residual = _summed_dtype(x, residual, residual_in_fp32)
        y, s, _, _ = forward(x, weight, bias, residual, eps, stats, limit, size)
        return launch._as(y, out_dtype), s

    return plan
