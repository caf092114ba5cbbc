"""Public functional API: `rms_norm` and `layer_norm`, dispatched to a backend.

(Initial version: reference, eager and torch backends. The Triton and compile
backends, and "auto" selection by measured speed, are added by the kernels work.)
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .reference import layer_norm_reference, rms_norm_reference
from .validation import check_layer_args, check_rms_args

BACKENDS = ("reference", "eager", "torch", "auto")


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; valid backends: {', '.join(BACKENDS)}")


def rms_norm(x, weight=None, eps=1e-6, *, residual=None, offset=0.0, eps_placement="inside", partial=1.0, backend="auto"):
    _check_backend(backend)
    check_rms_args(x, weight, eps, residual, offset, eps_placement, partial)
    plain = eps_placement == "inside" and partial == 1.0
    if backend == "reference" or not plain:
        return rms_norm_reference(x, weight, eps, residual=residual, offset=offset, eps_placement=eps_placement, partial=partial)
    s = x if residual is None else x + residual
    gain = None if weight is None else (weight + offset if offset else weight)
    if backend == "torch":
        y = F.rms_norm(s, (s.shape[-1],), gain, eps)
    else:
        # HuggingFace LLaMA style: statistics in fp32, normalise, cast back, then the gain.
        s32 = s.float()
        y = (s32 * torch.rsqrt(s32.pow(2).mean(-1, keepdim=True) + eps)).to(s.dtype)
        if gain is not None:
            y = gain * y
    return (y, s) if residual is not None else y


def layer_norm(x, weight=None, bias=None, eps=1e-5, *, residual=None, backend="auto"):
    _check_backend(backend)
    check_layer_args(x, weight, bias, eps, residual)
    if backend == "reference":
        return layer_norm_reference(x, weight, bias, eps, residual=residual)
    s = x if residual is None else x + residual
    y = F.layer_norm(s, (s.shape[-1],), weight, bias, eps)
    return (y, s) if residual is not None else y
