"""The articles' formulas transcribed literally, and the float64 measures every section compares them with.

    A1 / B2 (LayerNorm):  y = (x - mean) / sqrt(var + eps) * gamma + beta
    A2 (RMSNorm):         y = x / (sqrt(mean(x^2)) + eps) * gamma          eps outside the root
    B2 (RMSNorm):         y = x / sqrt(mean(x^2) + eps) * gamma            eps inside the root

`repeated` gives a verdict's spread: the same measurement on independently drawn random inputs.
"""

from __future__ import annotations

import torch


def layer_norm_as_written(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, eps: float) -> torch.Tensor:
    mean = x.mean(-1, keepdim=True)
    variance = (x - mean).pow(2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(variance + eps) * gamma + beta


def rms_norm_eps_outside(x: torch.Tensor, gamma: torch.Tensor, eps: float) -> torch.Tensor:
    """A2's formula (also the form in the RMSNorm authors' own code)."""
    return x / (torch.sqrt(x.pow(2).mean(-1, keepdim=True)) + eps) * gamma


def rms_norm_eps_inside(x: torch.Tensor, gamma: torch.Tensor, eps: float) -> torch.Tensor:
    """B2's formula."""
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * gamma


def max_abs_difference(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max())


def random_tokens(tokens: int, d: int, generator: torch.Generator, dtype=torch.float64) -> torch.Tensor:
    """Standard-normal tokens with a random per-token offset and scale, so no invariance holds by accident."""
    base = torch.randn(tokens, d, generator=generator, dtype=torch.float64)
    offset = torch.randn(tokens, 1, generator=generator, dtype=torch.float64)
    scale = torch.exp(torch.randn(tokens, 1, generator=generator, dtype=torch.float64))
    return (scale * base + offset).to(dtype)


def repeated(measure, repeats: int, seed: int = 0) -> tuple[float, float, list[float]]:
    """Run `measure(generator)` on `repeats` independent random draws: (mean, sample sd, values).

    The sd is the run-to-run spread a verdict records: how much the key number
    moves when the random inputs are drawn again.
    """
    if not (isinstance(repeats, int) and repeats >= 2):
        raise ValueError(f"repeats must be an int >= 2 (a spread needs two draws), got {repeats!r}")
    values = [float(measure(torch.Generator().manual_seed(seed + 1000 * i))) for i in range(repeats)]
    mean = sum(values) / repeats
    sd = (sum((v - mean) ** 2 for v in values) / (repeats - 1)) ** 0.5
    return mean, sd, values
