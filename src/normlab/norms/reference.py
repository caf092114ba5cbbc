"""The specification: plain PyTorch LayerNorm and RMSNorm.

Every faster backend is tested against these functions evaluated in float64.
They favour clarity over speed: statistics are computed in at least float32
(float64 stays float64; validation.statistics_dtype), and the result is cast back to x's dtype.

    LayerNorm:  y = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias
    RMSNorm:    y = x / sqrt(mean(x_[:k]^2) + eps) * (offset + weight)      eps "inside"
                y = x / (sqrt(mean(x_[:k]^2)) + eps) * (offset + weight)    eps "outside"

where var is the biased (1/d) variance and k = ceil(partial * d) (pRMSNorm).
With `residual`, the norm is applied to s = x + residual and (y, s) is returned.

Dtypes: y always has x's dtype. s has the dtype of `x + residual` under PyTorch's
promotion, or at least float32 with residual_in_fp32=True (validation.sum_dtype).
casting_mode="llama" rounds x/rms to x's dtype before multiplying by the gain.
"""

from __future__ import annotations

import torch

from normlab.norms.validation import (
    check_casting_mode,
    check_layer_args,
    check_rms_args,
    partial_size,
    resolve_eps,
    statistics_dtype,
    sum_dtype,
)


def rms_norm_reference(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    eps: float = 1e-6,
    *,
    residual: torch.Tensor | None = None,
    offset: float = 0.0,
    eps_placement: str = "inside",
    partial: float = 1.0,
    residual_in_fp32: bool = False,
    casting_mode: str | None = None,
):
    eps = resolve_eps(eps, x)
    check_rms_args(x, weight, eps, residual, offset, eps_placement, partial)
    check_casting_mode(casting_mode)
    out_dtype = x.dtype
    s_dtype = sum_dtype(x, residual, residual_in_fp32)
    if residual is not None:
        x = x.to(s_dtype) + residual.to(s_dtype)
    compute = statistics_dtype(x.dtype)
    xc = x.to(compute)
    k = partial_size(x.shape[-1], partial)
    mean_square = xc[..., :k].pow(2).mean(dim=-1, keepdim=True)
    if eps_placement == "inside":
        denominator = torch.sqrt(mean_square + eps)
    else:
        denominator = torch.sqrt(mean_square) + eps
    y = xc / denominator
    if weight is not None and casting_mode == "llama":
        y = ((weight + offset if offset else weight) * y.to(out_dtype)).to(compute)
    elif weight is not None:
        y = y * (offset + weight.to(compute))
    y = y.to(out_dtype)
    return (y, x) if residual is not None else y


def layer_norm_reference(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
    *,
    residual: torch.Tensor | None = None,
    residual_in_fp32: bool = False,
):
    eps = resolve_eps(eps, x)
    check_layer_args(x, weight, bias, eps, residual)
    out_dtype = x.dtype
    s_dtype = sum_dtype(x, residual, residual_in_fp32)
    if residual is not None:
        x = x.to(s_dtype) + residual.to(s_dtype)
    compute = statistics_dtype(x.dtype)
    xc = x.to(compute)
    mean = xc.mean(dim=-1, keepdim=True)
    centred = xc - mean
    variance = centred.pow(2).mean(dim=-1, keepdim=True)  # two-pass: exact for mean-dominated rows
    y = centred / torch.sqrt(variance + eps)
    if weight is not None:
        y = y * weight.to(compute)
    if bias is not None:
        y = y + bias.to(compute)
    y = y.to(out_dtype)
    return (y, x) if residual is not None else y
