"""Unfused PyTorch compositions of the norms: the "eager" and "compile" backends.

* `rms_norm_hf` / `layer_norm_unfused` reproduce how HuggingFace computes its
  norms (transformers, models/llama/modeling_llama.py `LlamaRMSNorm`,
  models/t5/modeling_t5.py `T5LayerNorm`, models/gemma/modeling_gemma.py
  `GemmaRMSNorm`): statistics in fp32, ε inside the square root, and, for
  LLaMA, the cast back to the input dtype *before* the gain is applied. That
  rounding order is part of what the eager backend measures, so it is kept.
The "compile" backend's math (every feature, forward and backward written
out for inductor) lives in normlab.norms.backends.compiled.

Callers validate arguments first (normlab.norms.validation); nothing here checks.
"""

from __future__ import annotations

import torch

from normlab.norms.validation import statistics_dtype


def rms_norm_hf(
    s: torch.Tensor, weight: torch.Tensor | None, eps: float, offset: float, llama: bool = False
) -> torch.Tensor:
    """HuggingFace's RMSNorm ops: LLaMA/T5's rounding order with llama=True, else Gemma's (gain in fp32, one rounding)."""
    s32 = s.to(statistics_dtype(s.dtype))
    normalised = s32 * torch.rsqrt(s32.pow(2).mean(-1, keepdim=True) + eps)
    if weight is None:
        return normalised.to(s.dtype)
    if not llama:
        # Gemma: the (offset + weight) gain is applied in fp32, then cast once.
        return (normalised * (offset + weight.to(s32.dtype))).to(s.dtype)
    # LLaMA/T5: cast back first, then multiply by the gain in the low dtype.
    gain = weight + offset if offset else weight
    return (gain * normalised.to(s.dtype)).to(s.dtype)


def layer_norm_unfused(
    s: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float
) -> torch.Tensor:
    """LayerNorm as separate mean, centred variance, normalise, affine ops."""
    s32 = s.to(statistics_dtype(s.dtype))
    centred = s32 - s32.mean(-1, keepdim=True)
    y = centred * torch.rsqrt(centred.pow(2).mean(-1, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.to(s32.dtype)
    if bias is not None:
        y = y + bias.to(s32.dtype)
    return y.to(s.dtype)
