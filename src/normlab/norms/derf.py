"""Dynamic erf (Derf): an element-wise replacement for a norm layer.

    Derf(x) = weight ⊙ erf(alpha · x + shift) + bias

with learnable scalars `alpha` and `shift` and per-channel `weight` (γ) and `bias` (β) (Chen, Lu, Zhu, Sun & Liu,
"Stronger Normalization-Free Transformers", arXiv 2512.10938). Like DyT it computes no statistic over the row;
erf's tails flatten faster than tanh's, and the shift lets the curve sit off-centre.

The recipe is the authors' GPT-2 code (github.com/zlab-princeton/Derf, "language model/model_derf.patch"):
alpha and shift are one-element parameters, alpha starting at `alpha_init_value=0.5` (the module's default) and
shift at `shift_init_value=0.0`; weight starts at ones and bias at zeros, both of the width; every norm of the
model (the two in each block and the final one) becomes Derf, and the embeddings are multiplied by a learnable
scalar initialised to sqrt(width) (their `shared_scale`), as DyT's recipe does.

There is one backend, the eager composite (autograd through erf); `derf_reference` is the specification in at
least float32 (float64 stays float64). A model trained with the compiled trainer compiles it with everything else.
"""

from __future__ import annotations

import math
import numbers

import torch
from torch import nn

from normlab.norms import dyt
from normlab.norms.validation import statistics_dtype

DEFAULT_ALPHA_INIT = 0.5  # the authors' Dynamic_erf(alpha_init_value=0.5)
DEFAULT_SHIFT_INIT = 0.0  # the authors' Dynamic_erf(shift_init_value=0.0)


def check_alpha_init(alpha_init) -> float:
    """alpha must start positive and finite, as DyT's (the same rule)."""
    return dyt.check_alpha_init(alpha_init, "Derf", DEFAULT_ALPHA_INIT)


def check_shift_init(shift_init) -> float:
    """The shift may have either sign, but must be a finite real number."""
    if isinstance(shift_init, bool) or not isinstance(shift_init, numbers.Real) or not math.isfinite(shift_init):
        raise ValueError(
            f"Derf's shift must be a finite number (the authors start at {DEFAULT_SHIFT_INIT}), got {shift_init!r}"
        )
    return float(shift_init)


def _check_scalar(name: str, value, check) -> None:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"Derf's {name} is one scalar, got a tensor of shape {tuple(value.shape)}")
    else:
        check(value)


def _check_args(x, alpha, shift, weight, bias) -> None:
    if not isinstance(x, torch.Tensor) or x.dim() < 1 or not x.is_floating_point():
        raise ValueError("Derf needs x as a floating-point tensor with at least one dimension")
    _check_scalar("alpha", alpha, check_alpha_init)
    _check_scalar("shift", shift, check_shift_init)
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None and tuple(p.shape) != (x.shape[-1],):
            raise ValueError(
                f"Derf's {name} must have shape ({x.shape[-1]},) to match x's last dimension, got {tuple(p.shape)}"
            )


def _composite(x, alpha, shift, weight, bias):
    y = torch.erf(alpha * x + shift)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


def derf_reference(x: torch.Tensor, alpha, shift=0.0, weight=None, bias=None) -> torch.Tensor:
    """The specification, computed in at least float32 (float64 stays float64) and cast back to x's dtype."""
    _check_args(x, alpha, shift, weight, bias)
    compute = statistics_dtype(x.dtype)

    def cast(t):
        return t.to(compute) if isinstance(t, torch.Tensor) else t

    return _composite(x.to(compute), cast(alpha), cast(shift), cast(weight), cast(bias)).to(x.dtype)


def derf(x: torch.Tensor, alpha, shift=0.0, weight=None, bias=None) -> torch.Tensor:
    """weight ⊙ erf(alpha·x + shift) + bias over the last dimension; alpha and shift scalars (floats or
    one-element tensors)."""
    _check_args(x, alpha, shift, weight, bias)
    return _composite(x, alpha, shift, weight, bias)


class Derf(nn.Module):
    """Drop-in for a norm layer: parameters `alpha` and `shift` (shape (1,), as in the authors' code), `weight` and
    `bias` (shape (width,))."""

    def __init__(
        self,
        normalized_shape,
        alpha_init: float = DEFAULT_ALPHA_INIT,
        shift_init: float = DEFAULT_SHIFT_INIT,
        *,
        device=None,
        dtype=None,
    ):
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        if len(shape) != 1 or isinstance(shape[0], bool) or not isinstance(shape[0], int) or shape[0] <= 0:
            raise ValueError(
                f"normalized_shape must be one positive int (Derf acts over the last dimension), "
                f"got {normalized_shape!r}"
            )
        self.normalized_shape = shape
        self.alpha_init = check_alpha_init(alpha_init)
        self.shift_init = check_shift_init(shift_init)
        # constants only: building a Derf draws nothing from the random generator, so a model's other parameters
        # start the same whichever norm it has
        self.alpha = nn.Parameter(torch.full((1,), self.alpha_init, device=device, dtype=dtype))
        self.shift = nn.Parameter(torch.full((1,), self.shift_init, device=device, dtype=dtype))
        self.weight = nn.Parameter(torch.ones(shape, device=device, dtype=dtype))
        self.bias = nn.Parameter(torch.zeros(shape, device=device, dtype=dtype))

    def forward(self, x):
        return derf(x, self.alpha, self.shift, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, alpha_init={self.alpha_init}, shift_init={self.shift_init}"
