"""Section "What the gain learns": the gain fitted by gradient descent against the per-channel
least-squares slope and correlation, and B14's verdict."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from normlab.analysis.jacobians.closed_forms import (
    EPS_FREE,
    fit_gain,
    gain_gradient,
    regression_gain,
    relative_max_error,
    rms_normalise,
)
from normlab.norms.reference import rms_norm_reference
from normlab.study import decide
from normlab.study.findings import Finding
from normlab.study.key_numbers import DIMENSIONLESS, KeyNumber

B14_KEY = KeyNumber("largest |g − Pearson r| over channels", DIMENSIONLESS)

TRUE_SLOPES = (2.0, -1.0, 0.0, 0.5, 3.0, 1.0, 0.0, -2.0)  # per channel; the zeros are channels with no signal


def _pearson(hat: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return torch.stack([torch.corrcoef(torch.stack([hat[:, i], target[:, i]]))[0, 1] for i in range(hat.shape[1])])


@dataclass
class GainFit:
    trajectory: torch.Tensor  # (steps + 1, d): the gain during gradient descent
    slopes: torch.Tensor  # per-channel least-squares slope Σx̂t/Σx̂²
    pearson: torch.Tensor  # per-channel Pearson r(x̂, t)
    batch_gain_error: float  # Σ δ⊙x̂ against autograd on the batch
    fit_error: float  # max |final gain − slope|
    correlation_gap: float  # max |final gain − Pearson r|
    correlation_gap_sd: float  # sd of the slope–correlation gap over fresh draws of the experiment
    suppression: float  # largest |final gain| on a no-signal channel
    suppression_bound: float  # about 4 standard errors of a zero slope
    fit_tokens: int
    fit_steps: int


def gain_fit(fit_tokens: int, fit_steps: int, generator: torch.Generator, lr: float = 0.5) -> GainFit:
    """Fit x̂ ⊙ g to t = x̂ ⊙ slopes + noise by gradient descent on g alone; check the batch gain gradient first.

    The gradient check's gain is drawn from torch's global generator (every other draw from `generator`), as the
    chapter always has, so the chapter seeds the global generator once at its top."""
    true_slopes = torch.tensor(TRUE_SLOPES, dtype=torch.float64)
    d = true_slopes.numel()
    fit_x = torch.randn(fit_tokens, d, generator=generator, dtype=torch.float64) + 0.5
    fit_hat = rms_normalise(fit_x)
    noise_scale = torch.linspace(0.2, 2.0, d, dtype=torch.float64)
    fit_target = fit_hat * true_slopes + noise_scale * torch.randn(
        fit_tokens, d, generator=generator, dtype=torch.float64
    )

    # Part 1: batch gradient against autograd, with an arbitrary upstream error.
    batch_upstream = torch.randn(fit_tokens, d, generator=generator, dtype=torch.float64)
    gain_leaf = torch.randn(d, dtype=torch.float64, requires_grad=True)
    (auto_gain_grad,) = torch.autograd.grad(
        rms_norm_reference(fit_x, gain_leaf, eps=EPS_FREE), gain_leaf, batch_upstream
    )
    batch_gain_error = relative_max_error(gain_gradient(fit_x, batch_upstream), auto_gain_grad)

    # Part 2: fit g alone by gradient descent and compare with slopes and correlations.
    trajectory = fit_gain(fit_x, fit_target, steps=fit_steps, lr=lr)
    slopes = regression_gain(fit_x, fit_target)
    pearson = _pearson(fit_hat, fit_target)

    def slope_correlation_gap(seed):
        """|least-squares slope − Pearson r| on a fresh draw of the same experiment: the spread of the key number."""
        gen = torch.Generator().manual_seed(seed)
        xs = torch.randn(fit_tokens, d, generator=gen, dtype=torch.float64) + 0.5
        hat = rms_normalise(xs)
        target = hat * true_slopes + noise_scale * torch.randn(fit_tokens, d, generator=gen, dtype=torch.float64)
        return float((regression_gain(xs, target) - _pearson(hat, target)).abs().max())

    return GainFit(
        trajectory=trajectory,
        slopes=slopes,
        pearson=pearson,
        batch_gain_error=batch_gain_error,
        fit_error=float((trajectory[-1] - slopes).abs().max()),
        correlation_gap=float((trajectory[-1] - pearson).abs().max()),
        suppression=float(trajectory[-1][true_slopes == 0].abs().max()),
        suppression_bound=4 * float(noise_scale.max()) / math.sqrt(fit_tokens),  # ~4 standard errors
        correlation_gap_sd=float(np.std([slope_correlation_gap(100 + i) for i in range(3)], ddof=1)),
        fit_tokens=fit_tokens,
        fit_steps=fit_steps,
    )


def b14_finding(fit: GainFit, machine_tol: float, fit_tol: float, correlation_tol: float) -> Finding:
    """B14: the batch gain gradient against `machine_tol`, descent reaching the slope within `fit_tol`, no-signal
    channels suppressed; a caveat when the gain differs from the Pearson correlation by more than
    `correlation_tol` (the key number)."""
    return Finding(
        decide(
            fit.batch_gain_error < machine_tol and fit.fit_error < fit_tol and fit.suppression < fit.suppression_bound,
            caveat=fit.correlation_gap > correlation_tol,
        ),
        f"∂ℓ/∂g = Σ δ⊙x̂ matches autograd ({fit.batch_gain_error:.0e}) and g converges to the per-channel "
        f"least-squares slope Σx̂t/Σx̂² (|g − slope| = {fit.fit_error:.0e}), suppressing no-signal channels "
        f"(|g| ≤ {fit.suppression:.3f}). That is an uncentred regression slope, not a correlation coefficient "
        f"(|g − Pearson r| up to {fit.correlation_gap:.2f}).",
        {
            "batch_gain_gradient_error": fit.batch_gain_error,
            "fit_error_vs_slope": fit.fit_error,
            "max_gap_vs_pearson": fit.correlation_gap,
            "no_signal_channel_max_abs_gain": fit.suppression,
            "suppression_bound": fit.suppression_bound,
            "fit_tokens": fit.fit_tokens,
            "fit_steps": fit.fit_steps,
            "learned_gain": fit.trajectory[-1],
            "least_squares_slope": fit.slopes,
            "pearson": fit.pearson,
            "tolerances": {"machine": machine_tol, "fit": fit_tol, "correlation": correlation_tol},
        },
        key_number=fit.correlation_gap,
        threshold=correlation_tol,
        spread=fit.correlation_gap_sd,
        **B14_KEY.fields(),
        reads=("machine_tol", "fit_tol", "correlation_tol"),
    )
