"""Section "The gain in the backward pass": how the gain scales the input gradient, and B13's verdict."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from normlab.analysis.jacobians.against_autograd import PRINTED_INPUT_GRADIENT, FormulaCheck
from normlab.analysis.jacobians.closed_forms import autograd_rms_gradients
from normlab.analysis.jacobians.update_parts import RadialCheck
from normlab.analysis.jacobians.verdicts import verdict_line
from normlab.study import decide
from normlab.study.findings import Finding
from normlab.study.key_numbers import DIMENSIONLESS, KeyNumber
from normlab.study.present import significant

B13_KEY = KeyNumber("relative error of the essay's printed ∂ℓ/∂x", DIMENSIONLESS)


@dataclass
class GainTrials:
    uniform_gain_error: float  # largest |a·‖∂ℓ/∂x(g)‖ / ‖∂ℓ/∂x(a·g)‖ − 1| over the trials
    share_increasing: float  # share of trials in which raising one channel's gain by 10% raised ‖∂ℓ/∂x‖
    trials: int


def gain_trials(dims, trials: int, generator: torch.Generator) -> GainTrials:
    """Scale the whole gain by a log-uniform a in [0.1, 10], then raise one random channel's gain by 10%."""
    uniform_errors, per_channel_increase = [], []
    for trial in range(trials):
        d = dims[trial % len(dims)]
        x, gain, upstream = (torch.randn(d, generator=generator, dtype=torch.float64) for _ in range(3))
        base = autograd_rms_gradients(x, gain, upstream)[0].norm()
        a = float(10 ** (2 * torch.rand((), generator=generator) - 1))
        scaled = autograd_rms_gradients(x, a * gain, upstream)[0].norm()
        uniform_errors.append(abs(float(scaled / (a * base)) - 1))
        channel = int(torch.randint(d, (), generator=generator))
        bumped = gain.clone()
        bumped[channel] *= 1.1
        per_channel_increase.append(bool(autograd_rms_gradients(x, bumped, upstream)[0].norm() > base))
    return GainTrials(max(uniform_errors), float(np.mean(per_channel_increase)), len(per_channel_increase))


def b13_finding(
    formulas: FormulaCheck, trials: GainTrials, gradient_cosine: float, machine_tol: float, wrong_tol: float
) -> Finding:
    """B13: ∂ℓ/∂g, the exact ∂ℓ/∂x and the uniform-gain scaling against `machine_tol`; a caveat when the printed
    ∂ℓ/∂x is off by more than `wrong_tol` (the key number) or one channel's larger gain can shrink the gradient."""
    printed, exact, gain_error = (
        formulas.printed_input_grad_error,
        formulas.exact_input_grad_error,
        formulas.gain_grad_error,
    )
    return Finding(
        decide(
            exact < machine_tol and gain_error < machine_tol and trials.uniform_gain_error < machine_tol,
            caveat=printed > wrong_tol or trials.share_increasing < 1.0,
        ),
        f"∂ℓ/∂g = δ⊙x̂ holds ({gain_error:.0e}), but the printed ∂ℓ/∂x is off by {printed:.1f} — the exact "
        f"form is (1/r)(I − x̂x̂ᵀ/d)(g⊙δ) ({exact:.0e}). A larger gain gives a larger gradient exactly for a "
        f"uniform rescaling of g, but raising one channel's gain does so in only {trials.share_increasing:.0%} of "
        f"trials.",
        {
            "gain_gradient_error": gain_error,
            "printed_input_gradient_error": printed,
            "exact_input_gradient_error": exact,
            "uniform_gain_scaling_error": trials.uniform_gain_error,
            "share_single_channel_increase": trials.share_increasing,
            "gain_trials": trials.trials,
            "max_abs_cos_grad_x": gradient_cosine,
            "tolerance": machine_tol,
        },
        key_number=printed,
        threshold=wrong_tol,
        spread=float(formulas.sd[PRINTED_INPUT_GRADIENT]),
        **B13_KEY.fields(),
        reads=("machine_tol", "wrong_tol"),
    )


def b12_b13_paragraph(b12: Finding, b13: Finding, radial: RadialCheck) -> str:
    worst = radial.worst
    return (
        f"{verdict_line('B12', b12)}\n\n{verdict_line('B13', b13)}\n\n"
        f"Radial against tangential: the radial part is kept at most {significant(float(worst['radial kept']))}, the "
        f"tangential part passes as v/r to {significant(float(worst['tangential error']))}: the essay is right that "
        f"the component along x̂ is removed, and wrong that updates leave the normalised vector's direction "
        f"unchanged; its direction is all they can change."
    )
