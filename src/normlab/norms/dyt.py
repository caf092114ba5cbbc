"""Dynamic Tanh (DyT): an element-wise replacement for a norm layer.

    DyT(x) = weight ⊙ tanh(alpha · x) + bias

with a learnable scalar `alpha` (Zhu, Chen, He, LeCun & Liu, "Transformers
without Normalization", CVPR 2025). It computes no statistic over the row:
alpha squashes large activations the way a norm's 1/σ would, but every
element is handled alone.

The paper initialises alpha to 0.5 for its non-LLM models (its section 7 and
its code's `alpha_init_value=0.5`); for LLMs it reports that the best initial
alpha shrinks with width, which the landscape chapter measures. These
statements were checked against a transcription of the paper, not its PDF.

Backends, as for the norms:

    reference  float64-capable specification: computes in at least float32, casts back
    torch      the eager composite (autograd through tanh)
    eager      the same as torch (there is no separate HuggingFace-style path)
    compile    torch.compile of the composite (inductor fuses it into one loop)
    auto       torch

There is no Triton or C++ kernel (normlab.norms.backends.features); asking for one raises an error naming
the backends that exist.
"""

from __future__ import annotations

import functools
import math
import numbers

import torch
from torch import nn

from normlab.norms.backends.features import BACKENDS, backend_choices, backends_for, norm_refusal
from normlab.norms.validation import statistics_dtype

DYT_BACKENDS = backends_for("dyt")
DEFAULT_ALPHA_INIT = 0.5

# The authors' LLaMA training commands (other_tasks/LLaMA/README.md): model width -> (α₀ of the norm in front of
# attention, α₀ of every other norm), from --attn_alpha_init_value, --ffn_alpha_init_value and
# --dec_alpha_init_value (the last two are equal in every command). Widths from fms_fsdp/models/llama.py's size table.
AUTHORS_LLAMA_ALPHA = {
    4096: (0.8, 0.2),  # LLaMA2 7B
    5120: (0.6, 0.15),  # 13B
    8192: (0.2, 0.05),  # 34B and 70B: both 8192 wide (LLaMA 2's 34B is not LLaMA 1's 6656-wide 33B)
}


def authors_alpha_init(width: int) -> tuple[float, float]:
    """The authors' (attention, other) α₀ for a model of this width: the entry of the widest model they trained
    that is no wider. Their narrowest is 4096 wide, so every narrower model takes its values: α₀ grows as width
    shrinks, but two steps of a trend are too few to extrapolate it over six octaves, and the narrowest entry is
    the nearest the code says anything about."""
    if isinstance(width, bool) or not isinstance(width, int) or width <= 0:
        raise ValueError(f"authors_alpha_init needs a positive int width, got {width!r}")
    fitting = [w for w in AUTHORS_LLAMA_ALPHA if w <= width]
    return AUTHORS_LLAMA_ALPHA[max(fitting) if fitting else min(AUTHORS_LLAMA_ALPHA)]


def _check_backend(backend) -> None:
    refusal = norm_refusal(backend, "dyt") if backend in BACKENDS else None
    if refusal is not None:
        raise ValueError(f"{refusal}; use backend={backend_choices('dyt')}")
    if backend not in DYT_BACKENDS:
        raise ValueError(f"unknown DyT backend {backend!r}; valid backends: {', '.join(DYT_BACKENDS)}")


def check_alpha_init(alpha_init, norm: str = "DyT", authors_start: float = DEFAULT_ALPHA_INIT) -> float:
    """alpha must start positive: alpha <= 0 flips or flattens every activation, and 0 kills the gradient. The
    same rule serves every point-wise norm with a scalar α (DyT, Derf), each naming its authors' start."""
    if (
        isinstance(alpha_init, bool)
        or not isinstance(alpha_init, numbers.Real)
        or not math.isfinite(alpha_init)
        or alpha_init <= 0
    ):
        raise ValueError(
            f"{norm}'s alpha must be a positive finite number (its authors start at {authors_start}), "
            f"got {alpha_init!r}"
        )
    return float(alpha_init)


def _check_args(x, alpha, weight, bias) -> None:
    if not isinstance(x, torch.Tensor) or x.dim() < 1 or not x.is_floating_point():
        raise ValueError("DyT needs x as a floating-point tensor with at least one dimension")
    if isinstance(alpha, torch.Tensor):
        if alpha.numel() != 1:
            raise ValueError(f"DyT's alpha is one scalar, got a tensor of shape {tuple(alpha.shape)}")
    else:
        check_alpha_init(alpha)
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None and tuple(p.shape) != (x.shape[-1],):
            raise ValueError(
                f"DyT's {name} must have shape ({x.shape[-1]},) to match x's last dimension, got {tuple(p.shape)}"
            )


def _composite(x, alpha, weight, bias):
    y = torch.tanh(alpha * x)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


def dyt_reference(x: torch.Tensor, alpha, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None):
    """The specification, computed in at least float32 (float64 stays float64) and cast back to x's dtype."""
    _check_args(x, alpha, weight, bias)
    compute = statistics_dtype(x.dtype)
    cast = lambda t: None if t is None else t.to(compute)
    alpha = cast(alpha) if isinstance(alpha, torch.Tensor) else float(alpha)
    return _composite(x.to(compute), alpha, cast(weight), cast(bias)).to(x.dtype)


@functools.cache
def _compiled():
    return torch.compile(_composite, dynamic=True)


def dyt(
    x: torch.Tensor,
    alpha,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    *,
    backend: str = "auto",
) -> torch.Tensor:
    """weight ⊙ tanh(alpha·x) + bias over the last dimension; alpha a scalar (float or one-element tensor)."""
    _check_backend(backend)
    _check_args(x, alpha, weight, bias)
    if backend == "reference":
        return dyt_reference(x, alpha, weight, bias)
    if backend == "compile" and not torch.compiler.is_compiling():
        if isinstance(alpha, torch.Tensor):
            alpha = alpha.reshape(())
        return _compiled()(x, alpha, weight, bias)
    return _composite(x, alpha, weight, bias)


class DyT(nn.Module):
    """Drop-in for a norm layer: parameters `alpha` (shape (1,), as in the paper's code), `weight`, `bias`
    (bias=False drops β, as the authors' LLaMA code does)."""

    def __init__(
        self,
        normalized_shape,
        alpha_init: float = DEFAULT_ALPHA_INIT,
        elementwise_affine: bool = True,
        bias: bool = True,
        *,
        backend: str = "auto",
        device=None,
        dtype=None,
    ):
        super().__init__()
        _check_backend(backend)
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        if len(shape) != 1 or isinstance(shape[0], bool) or not isinstance(shape[0], int) or shape[0] <= 0:
            raise ValueError(
                f"normalized_shape must be one positive int (DyT acts over the last dimension), "
                f"got {normalized_shape!r}"
            )
        self.normalized_shape = shape
        self.alpha_init = check_alpha_init(alpha_init)
        self.backend = backend
        self.alpha = nn.Parameter(torch.full((1,), self.alpha_init, device=device, dtype=dtype))
        if elementwise_affine:
            self.weight = nn.Parameter(torch.ones(shape, device=device, dtype=dtype))
            if bias:
                self.bias = nn.Parameter(torch.zeros(shape, device=device, dtype=dtype))
            else:  # the authors' LLaMA DyT: weight ⊙ tanh(alpha·x), no β
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, x):
        return dyt(x, self.alpha, self.weight, self.bias, backend=self.backend)

    def extra_repr(self) -> str:
        beta = "" if self.bias is not None or self.weight is None else ", bias=False"
        return f"{self.normalized_shape}, alpha_init={self.alpha_init}{beta}, backend={self.backend!r}"
