"""Argument checks and dtype rules shared by every norm implementation.

Every backend calls the checks before touching memory, so a bad call fails with a
message naming the argument and the fix, and nothing is written. The dtype rules
(statistics_dtype, sum_dtype) live here once, so every backend computes in the same dtypes.
"""

from __future__ import annotations

import torch

EPS_PLACEMENTS = ("inside", "outside")
# How RMSNorm rounds (see normlab.norms.functional.rms_norm): "none" computes in fp32 and rounds once,
# "gemma" is the same path (transformers' GemmaRMSNorm), "llama" rounds the normalised row to
# x's dtype before the gain, as transformers' LlamaRMSNorm does.
CASTING_MODES = ("none", "gemma", "llama")


def statistics_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype every backend computes statistics in: float32 for half inputs, float64 stays float64
    (so gradcheck is exact). The reference, the composite, compiled and Triton backends and DyT all ask here."""
    return torch.promote_types(dtype, torch.float32)


def check_input(x: torch.Tensor, name: str = "x") -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.dtype.is_floating_point:
        raise TypeError(
            f"{name} has dtype {x.dtype}; norms need a real floating dtype "
            f"(float16, bfloat16, float32 or float64). Cast it first, e.g. {name}.float()"
        )
    if x.dim() == 0:
        raise ValueError(f"{name} is a 0-d tensor; norms act over the last dimension, so give it shape (..., d)")
    if x.shape[-1] == 0:
        raise ValueError(
            f"{name} has an empty last dimension (shape {tuple(x.shape)}); a norm over 0 features is undefined"
        )


def check_param(param: torch.Tensor | None, x: torch.Tensor, name: str) -> None:
    if param is None:
        return
    if not isinstance(param, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor or None, got {type(param).__name__}")
    if not param.dtype.is_floating_point:
        raise TypeError(f"{name} has dtype {param.dtype}; it must be a floating dtype")
    d = x.shape[-1]
    if tuple(param.shape) != (d,):
        raise ValueError(
            f"{name} has shape {tuple(param.shape)} but x's last dimension is {d}; {name} must have shape ({d},)"
        )
    if param.device != x.device:
        raise ValueError(f"{name} is on {param.device} but x is on {x.device}; move both to one device")


def check_residual(residual: torch.Tensor | None, x: torch.Tensor) -> None:
    if residual is None:
        return
    check_input(residual, "residual")
    if residual.shape != x.shape:
        raise ValueError(
            f"residual has shape {tuple(residual.shape)} but x has shape {tuple(x.shape)}; they must match"
        )
    if residual.device != x.device:
        raise ValueError(f"residual is on {residual.device} but x is on {x.device}; move both to one device")


def check_eps(eps: float) -> None:
    if not isinstance(eps, (int, float)) or isinstance(eps, bool):
        raise TypeError(f"eps must be a positive float, got {type(eps).__name__}")
    if not eps > 0:  # also rejects NaN
        raise ValueError(f"eps must be > 0 (it keeps the denominator away from zero), got {eps}")


def resolve_eps(eps, x: torch.Tensor):
    """eps=None means the machine epsilon of the dtype the statistics are computed in, as torch.nn.RMSNorm does.

    torch documents torch.finfo(x.dtype).eps, but its kernels take the epsilon of the
    computation ("opmath") type, float32 for half inputs; normlab matches what torch computes."""
    if eps is not None:
        return eps
    if not isinstance(x, torch.Tensor) or not x.dtype.is_floating_point:
        dtype = getattr(x, "dtype", type(x).__name__)
        raise TypeError(
            f"eps=None means torch.finfo(x.dtype).eps, which needs a floating x, got {dtype}; "
            "pass eps explicitly or cast x to a floating dtype"
        )
    return torch.finfo(statistics_dtype(x.dtype)).eps


def check_casting_mode(casting_mode: str | None) -> None:
    """None means the backend's own order (see normlab.norms.functional.rms_norm)."""
    if casting_mode is not None and casting_mode not in CASTING_MODES:
        raise ValueError(f"casting_mode must be one of {CASTING_MODES}, got {casting_mode!r}")


def sum_dtype(x: torch.Tensor, residual: torch.Tensor | None, residual_in_fp32: bool) -> torch.dtype:
    """The dtype of the running sum s = x + residual.

    PyTorch's promotion of x and residual (what `x + residual` gives), raised to at least
    float32 with residual_in_fp32=True. Without a residual there is no s: x's dtype."""
    if not isinstance(residual_in_fp32, bool):
        raise TypeError(f"residual_in_fp32 must be a bool, got {type(residual_in_fp32).__name__}")
    if residual is None:
        return x.dtype
    dtype = torch.promote_types(x.dtype, residual.dtype)
    # residual_in_fp32's own rule (flash-attention's), not the statistics dtype: it only raises a half sum.
    return torch.promote_types(dtype, torch.float32) if residual_in_fp32 else dtype


def check_partial(partial: float) -> None:
    if not isinstance(partial, (int, float)) or isinstance(partial, bool):
        raise TypeError(f"partial must be a float in (0, 1], got {type(partial).__name__}")
    if not 0 < partial <= 1:
        raise ValueError(f"partial must lie in (0, 1] (the share of features used for the RMS), got {partial}")


def check_eps_placement(eps_placement: str) -> None:
    if eps_placement not in EPS_PLACEMENTS:
        raise ValueError(f"eps_placement must be one of {EPS_PLACEMENTS}, got {eps_placement!r}")


def check_rms_args(x, weight, eps, residual, offset, eps_placement, partial) -> None:
    check_input(x)
    check_param(weight, x, "weight")
    check_residual(residual, x)
    check_eps(eps)
    check_partial(partial)
    check_eps_placement(eps_placement)
    if not isinstance(offset, (int, float)) or isinstance(offset, bool):
        raise TypeError(f"offset must be a float (the gain is offset + weight), got {type(offset).__name__}")
    if weight is None and offset != 0:
        raise ValueError("offset needs a weight (the gain is offset + weight); pass weight, or leave offset at 0")


def check_layer_args(x, weight, bias, eps, residual) -> None:
    check_input(x)
    check_param(weight, x, "weight")
    check_param(bias, x, "bias")
    check_residual(residual, x)
    check_eps(eps)


def partial_size(d: int, partial: float) -> int:
    """Number of leading features pRMSNorm uses: ceil(p * d), at least 1."""
    import math

    return max(1, min(d, math.ceil(partial * d - 1e-9)))
