"""Unfused PyTorch compositions of the norms: the "eager" and "compile" backends.

Two families live here:

* `rms_norm_hf` / `layer_norm_unfused` reproduce how HuggingFace computes its
  norms (transformers, models/llama/modeling_llama.py `LlamaRMSNorm`,
  models/t5/modeling_t5.py `T5LayerNorm`, models/gemma/modeling_gemma.py
  `GemmaRMSNorm`): statistics in fp32, ε inside the square root, and, for
  LLaMA, the cast back to the input dtype *before* the gain is applied. That
  rounding order is part of what the eager backend measures, so it is kept.
* `rms_norm_general` / `layer_norm_general` take every feature (ε placement,
  partial RMS, offset gain, fused residual add) and are what the "compile"
  backend hands to `torch.compile`, where inductor fuses them into one loop.

Callers validate arguments first (normlab.validation); nothing here checks.
"""
from __future__ import annotations

import torch


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    # fp16/bf16 statistics in fp32; float64 stays float64 so gradcheck is exact.
    return torch.promote_types(dtype, torch.float32)


def rms_norm_hf(s: torch.Tensor, weight: torch.Tensor | None, eps: float, offset: float) -> torch.Tensor:
    """HuggingFace's RMSNorm: LLaMA/T5 order without offset, Gemma's with one."""
    s32 = s.to(_compute_dtype(s.dtype))
    normalised = s32 * torch.rsqrt(s32.pow(2).mean(-1, keepdim=True) + eps)
    if weight is None:
        return normalised.to(s.dtype)
    if offset:
        # Gemma: the (offset + weight) gain is applied in fp32, then cast once.
        return (normalised * (offset + weight.to(s32.dtype))).to(s.dtype)
    # LLaMA/T5: cast back first, then multiply by the gain in the low dtype.
    return (weight * normalised.to(s.dtype)).to(s.dtype)


def layer_norm_unfused(s: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float) -> torch.Tensor:
    """LayerNorm as separate mean, centred variance, normalise, affine ops."""
    s32 = s.to(_compute_dtype(s.dtype))
    centred = s32 - s32.mean(-1, keepdim=True)
    y = centred * torch.rsqrt(centred.pow(2).mean(-1, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.to(s32.dtype)
    if bias is not None:
        y = y + bias.to(s32.dtype)
    return y.to(s.dtype)


def rms_norm_general(x, weight, residual, eps: float, offset: float, eps_inside: bool, k: int | None):
    """Every RMSNorm feature; `k` is the pRMSNorm prefix length (None: the whole row).

    Returns (y, s) where s = x + residual, or (y, None) without a residual.
    """
    s = x if residual is None else x + residual
    s32 = s.to(_compute_dtype(s.dtype))
    head = s32 if k is None else s32[..., :k]
    mean_square = head.pow(2).mean(-1, keepdim=True)
    if eps_inside:
        inverse_rms = torch.rsqrt(mean_square + eps)
    else:
        inverse_rms = 1.0 / (torch.sqrt(mean_square) + eps)
    y = s32 * inverse_rms
    if weight is not None:
        y = y * (offset + weight.to(s32.dtype))
    return y.to(s.dtype), (None if residual is None else s)


def layer_norm_general(x, weight, bias, residual, eps: float):
    """LayerNorm with the residual add folded in; returns (y, s) or (y, None)."""
    s = x if residual is None else x + residual
    return layer_norm_unfused(s, weight, bias, eps), (None if residual is None else s)
