"""Section "What the matrices look like": the Jacobians of one token drawn as heatmaps, and the gap
between RMSNorm's and LayerNorm's on a zero-mean input."""

from __future__ import annotations

import torch

from normlab.analysis.jacobians.closed_forms import (
    autograd_jacobian,
    layer_normalise,
    rms,
    rms_jacobian_as_printed,
    rms_normalise,
)

ZERO_MEAN_DIFFERENCE = "zero-mean x: r·(J_RMS − J_LN)"


def heatmap_panels(generator: torch.Generator, d: int = 16) -> dict[str, torch.Tensor]:
    """One offset token: the exact RMSNorm Jacobian, B12 as printed, LayerNorm's, and for its centred copy the
    difference of the two; scaled by r (resp. σ) so the entries are dimensionless."""
    x = torch.randn(d, generator=generator, dtype=torch.float64) + 1.5
    r, sigma = rms(x), (x - x.mean()).pow(2).mean().sqrt()
    panels = {
        "exact RMSNorm: r·J": r * autograd_jacobian(rms_normalise, x),
        "B12 as printed: r·(1/r)(I − x̂x̂ᵀ)": r * rms_jacobian_as_printed(x),
        "LayerNorm: σ·J": sigma * autograd_jacobian(layer_normalise, x),
    }
    centred = x - x.mean()
    panels[ZERO_MEAN_DIFFERENCE] = rms(centred) * (
        autograd_jacobian(rms_normalise, centred) - autograd_jacobian(layer_normalise, centred)
    )
    return panels


def mean_projection_gap(difference: torch.Tensor) -> float:
    """max |difference − 11ᵀ/d|: 0 when two Jacobians differ exactly by the projection onto the mean direction."""
    d = difference.shape[0]
    return float((difference - torch.full((d, d), 1 / d, dtype=torch.float64)).abs().max())
