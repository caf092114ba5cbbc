"""Section "How much ε changes the Jacobian": the gap between the Jacobian with ε and without, as ε grows
against the norm's statistic."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import torch

from normlab.analysis.jacobians.closed_forms import (
    autograd_jacobian,
    layer_norm_jacobian,
    layer_normalise,
    relative_max_error,
    rms_jacobian,
    rms_normalise,
)


@dataclass
class EpsEffect:
    frame: pd.DataFrame  # d, ε / statistic, norm, relative gap
    ratios: torch.Tensor  # the ε / statistic values swept


def eps_effect_table(dims, points: int, generator: torch.Generator) -> EpsEffect:
    """The ε-free Jacobian's relative gap to the true one, for ε from 1e-10 to 10 times mean(x²) (RMSNorm) or
    σ² (LayerNorm), one offset token per size."""
    ratios = torch.logspace(-10, 1, points, dtype=torch.float64)
    rows = []
    for d in dims:
        x = torch.randn(d, generator=generator, dtype=torch.float64) + 2.0
        mean_square, variance = float(x.pow(2).mean()), float((x - x.mean()).pow(2).mean())
        for relative in ratios.tolist():
            rms_true = autograd_jacobian(lambda v: rms_normalise(v, relative * mean_square), x)
            ln_true = autograd_jacobian(lambda v: layer_normalise(v, relative * variance), x)
            rows.append(
                {
                    "d": d,
                    "ε / statistic": relative,
                    "norm": "RMSNorm (ε / mean(x²))",
                    "relative gap": relative_max_error(rms_jacobian(x), rms_true),
                }
            )
            rows.append(
                {
                    "d": d,
                    "ε / statistic": relative,
                    "norm": "LayerNorm (ε / σ²)",
                    "relative gap": relative_max_error(layer_norm_jacobian(x), ln_true),
                }
            )
    return EpsEffect(pd.DataFrame(rows), ratios)


def gap_per_eps(eps_effect: pd.DataFrame, small: float = 1e-4) -> float:
    """Gap per unit of ε/statistic in the small-ε regime (ε/statistic ≤ `small`): the slope of the linear law."""
    rows = eps_effect[eps_effect["ε / statistic"] <= small]
    return float((rows["relative gap"] / rows["ε / statistic"]).max())
