"""Section "Gradients shrink as 1/r": the input gradient as the input is scaled, against the 1/r law."""

from __future__ import annotations

import math

import pandas as pd
import torch

from normlab.analysis.jacobians.closed_forms import gradient_scale_ratios


def scaling_table(dims, scales: int, generator: torch.Generator, eps_typical: float) -> pd.DataFrame:
    """`gradient_scale_ratios` over a·x for a log-spaced in [1e-6, 1e4], one random token per size, ε = 0 and
    ε = eps_typical."""
    sweep = torch.logspace(-6, 4, scales, dtype=torch.float64)
    rows = []
    for d in dims:
        x, gain, upstream = (torch.randn(d, generator=generator, dtype=torch.float64) for _ in range(3))
        mean_square = float(x.pow(2).mean())
        for eps in (0.0, eps_typical):
            ratios = gradient_scale_ratios(x, gain, upstream, sweep, eps)
            for a, ratio in zip(sweep.tolist(), ratios.tolist()):
                rows.append(
                    {
                        "d": d,
                        "eps": eps,
                        "scale a": a,
                        "a²·mean(x²)/ε": a * a * mean_square / eps if eps else math.inf,
                        "ratio": ratio,
                        "rms of a·x": a * math.sqrt(mean_square),
                    }
                )
    return pd.DataFrame(rows)


def exact_scaling_error(scaling: pd.DataFrame) -> float:
    """With ε = 0: the largest |ratio − 1|, 0 where gradients scale exactly as 1/r."""
    return float((scaling[scaling.eps == 0].ratio - 1).abs().max())


def rms_where_broken(scaling: pd.DataFrame, tolerance: float = 0.01) -> float:
    """With ε > 0: the largest input RMS at which the 1/r law is off by more than `tolerance` (0: nowhere)."""
    eps_rows = scaling[scaling.eps > 0]
    broken = eps_rows[(eps_rows.ratio - 1).abs() > tolerance]
    return float(broken["rms of a·x"].max()) if len(broken) else 0.0
