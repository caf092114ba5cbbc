"""Section "Closed forms against autograd": every closed form against the autograd Jacobian of the reference
norm in float64, on random tokens of every scale and offset."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import torch

from normlab.analysis.jacobians.closed_forms import formula_errors
from normlab.study.present import table

PRINTED_JACOBIAN = "B12 printed: (1/r)(I - x̂x̂ᵀ)"


EXACT_JACOBIANS = ["exact: (1/r)(I - x̂x̂ᵀ/d)", "exact, ε inside: (1/s)(I - yyᵀ/d)", "exact, ε outside"]


LAYER_NORM_FORMS = ["LN exact: (1/s)(P - yyᵀ/d)", "LN = J_RMS(Px)·P (autograd both)"]


PRINTED_INPUT_GRADIENT = "B13 printed: ∂ℓ/∂x"


EXACT_INPUT_GRADIENT = "exact: ∂ℓ/∂x"


GAIN_GRADIENT = "B13: ∂ℓ/∂g = δ⊙x̂"

# The token scale a is log-uniform between these powers of ten: from far below unit RMS to far above it.
SCALE_DECADES = (-2, 2)


def random_token(d: int, generator: torch.Generator) -> torch.Tensor:
    """a·z + b·1 with z standard normal, a log-uniform over SCALE_DECADES and b normal: every scale and offset."""
    low, high = SCALE_DECADES
    scale = 10 ** ((high - low) * torch.rand((), generator=generator, dtype=torch.float64) + low)
    shift = torch.randn((), generator=generator, dtype=torch.float64)
    return scale * torch.randn(d, generator=generator, dtype=torch.float64) + shift


def formula_error_table(dims, tokens: int, generator: torch.Generator, eps_check: float) -> pd.DataFrame:
    """`formula_errors` for `tokens` random tokens of each size, with ε = eps_check · mean(x²) so ε always matters."""
    rows = []
    for d in dims:
        for token in range(tokens):
            x = random_token(d, generator)
            gain = torch.randn(d, generator=generator, dtype=torch.float64)
            upstream = torch.randn(d, generator=generator, dtype=torch.float64)
            eps = eps_check * float(x.pow(2).mean())
            for form, error in formula_errors(x, gain, upstream, eps).items():
                rows.append({"d": d, "token": token, "form": form, "relative max error": error})
    errors = pd.DataFrame(rows)
    # Exact zeros cannot sit on a log axis; they are drawn at 1e-18 and kept as 0 in the numbers.
    errors["plotted error"] = errors["relative max error"].clip(lower=1e-18)
    return errors


@dataclass
class FormulaCheck:
    errors: pd.DataFrame  # formula_error_table

    @property
    def worst(self) -> pd.Series:
        return self.errors.groupby("form", sort=False)["relative max error"].max()

    @property
    def sd(self) -> pd.Series:
        """Each form's run-to-run spread: its sd over the random tokens of this run."""
        return self.errors.groupby("form", sort=False)["relative max error"].std()

    @property
    def printed_jacobian_error(self) -> float:
        return float(self.worst[PRINTED_JACOBIAN])

    @property
    def exact_jacobian_error(self) -> float:
        return float(self.worst[EXACT_JACOBIANS].max())

    @property
    def layer_norm_error(self) -> float:
        return float(self.worst[LAYER_NORM_FORMS].max())

    @property
    def printed_input_grad_error(self) -> float:
        return float(self.worst[PRINTED_INPUT_GRADIENT])

    @property
    def exact_input_grad_error(self) -> float:
        return float(self.worst[EXACT_INPUT_GRADIENT])

    @property
    def gain_grad_error(self) -> float:
        return float(self.worst[GAIN_GRADIENT])


def formula_table(check: FormulaCheck):
    return table(
        check.worst.rename("worst relative error").reset_index().assign(sd=check.sd.values),
        caption="Worst relative error of each closed form against autograd over all tokens, and its sd over tokens.",
    )
