"""Section "The formulas against PyTorch": each formula as written against torch (A1, B2), and A3's missing
centring."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import torch
import torch.nn.functional as F

from normlab.analysis.geometry.articles import (
    layer_norm_as_written,
    max_abs_difference,
    random_tokens,
    repeated,
    rms_norm_eps_inside,
    rms_norm_eps_outside,
)
from normlab.analysis.geometry.settings import short
from normlab.norms.modules import RMSNorm
from normlab.norms.reference import rms_norm_reference
from normlab.study.findings import Finding
from normlab.study.key_numbers import DIMENSIONLESS, KeyNumber
from normlab.study.present import significant
from normlab.study.results import decide

A1_KEY = KeyNumber("max abs difference, the formula vs F.layer_norm (float64)", DIMENSIONLESS)
B2_KEY = KeyNumber("max abs difference, the formulas vs PyTorch (float64)", DIMENSIONLESS)
A3_KEY = KeyNumber("median |per-token mean| of RMSNorm's output", DIMENSIONLESS)

FORMULA_EPS = (1e-6, 1e-5, 1e-2)
LAYER_NORM_FORMULA = "A1/B2 LayerNorm vs F.layer_norm"
INSIDE_FORMULA = "B2 RMSNorm (ε inside) vs F.rms_norm"
OUTSIDE_VS_TORCH = "A2 RMSNorm (ε outside) vs F.rms_norm"
OUTSIDE_VS_REFERENCE = "A2 RMSNorm (ε outside) vs normlab reference, outside"


@dataclass
class FormulaCheck:
    """Each formula as written against PyTorch on one random batch, and the spreads over fresh batches."""

    tokens: torch.Tensor  # the batch, reused by the A3 check
    errors: pd.DataFrame  # formula, eps, max abs diff
    layer_norm_error: float  # worst over ε, per formula
    rms_inside_error: float
    a2_vs_torch: float
    a2_vs_outside_reference: float
    spread: float  # sd over draws of the worst LayerNorm / ε-inside error
    a2_gap_spread: float  # sd over draws of the ε-outside formula's gap to F.rms_norm

    def by_eps(self) -> pd.DataFrame:
        return self.errors.pivot(index="formula", columns="eps", values="max abs diff").reset_index()


def check_formulas(tokens: int, d: int, generator: torch.Generator, repeats: int) -> FormulaCheck:
    """Every formula as written against torch, float64, random tokens and random γ, β, at each ε of FORMULA_EPS."""
    x = random_tokens(tokens, d, generator)
    gamma = torch.randn(d, generator=generator, dtype=torch.float64)
    beta = torch.randn(d, generator=generator, dtype=torch.float64)
    rows = []
    for eps in FORMULA_EPS:
        outside = rms_norm_eps_outside(x, gamma, eps)
        rows += [
            {
                "formula": LAYER_NORM_FORMULA,
                "eps": eps,
                "max abs diff": max_abs_difference(
                    layer_norm_as_written(x, gamma, beta, eps), F.layer_norm(x, (d,), gamma, beta, eps)
                ),
            },
            {
                "formula": INSIDE_FORMULA,
                "eps": eps,
                "max abs diff": max_abs_difference(rms_norm_eps_inside(x, gamma, eps), F.rms_norm(x, (d,), gamma, eps)),
            },
            {
                "formula": OUTSIDE_VS_TORCH,
                "eps": eps,
                "max abs diff": max_abs_difference(outside, F.rms_norm(x, (d,), gamma, eps)),
            },
            {
                "formula": OUTSIDE_VS_REFERENCE,
                "eps": eps,
                "max abs diff": max_abs_difference(outside, rms_norm_reference(x, gamma, eps, eps_placement="outside")),
            },
        ]
    errors = pd.DataFrame(rows)
    worst = errors.groupby("formula", sort=False)["max abs diff"].max()

    def formula_errors(draw):
        xs = random_tokens(tokens, d, draw)
        g, b = (torch.randn(d, generator=draw, dtype=torch.float64) for _ in range(2))
        return max(
            max_abs_difference(layer_norm_as_written(xs, g, b, 1e-5), F.layer_norm(xs, (d,), g, b, 1e-5)),
            max_abs_difference(rms_norm_eps_inside(xs, g, 1e-5), F.rms_norm(xs, (d,), g, 1e-5)),
        )

    def a2_gap(draw):
        xs = random_tokens(tokens, d, draw)
        return max_abs_difference(rms_norm_eps_outside(xs, 1.0, 1e-5), F.rms_norm(xs, (d,), None, 1e-5))

    return FormulaCheck(
        tokens=x,
        errors=errors,
        layer_norm_error=float(worst[LAYER_NORM_FORMULA]),
        rms_inside_error=float(worst[INSIDE_FORMULA]),
        a2_vs_torch=float(worst[OUTSIDE_VS_TORCH]),
        a2_vs_outside_reference=float(worst[OUTSIDE_VS_REFERENCE]),
        spread=repeated(formula_errors, repeats)[1],
        a2_gap_spread=repeated(a2_gap, repeats)[1],
    )


def a1_layer_norm_formula(check: FormulaCheck, formula_tol: float) -> Finding:
    error = check.layer_norm_error
    tried = ", ".join(short(eps) for eps in FORMULA_EPS)
    tokens, d = check.tokens.shape
    return Finding(
        decide(error < formula_tol),
        f"A1's LayerNorm formula matches F.layer_norm to {error:.0e} (float64, ε ∈ {{{tried}}}, random γ, β).",
        {"max_abs_diff": error, "tolerance": formula_tol, "tokens": tokens, "d": d},
        key_number=error,
        threshold=formula_tol,
        spread=check.spread,
        **A1_KEY.fields(),
        reads=("formula_tol",),
    )


def b2_formulas(check: FormulaCheck, formula_tol: float) -> Finding:
    worst = max(check.layer_norm_error, check.rms_inside_error)
    return Finding(
        decide(check.layer_norm_error < formula_tol and check.rms_inside_error < formula_tol),
        f"B2's formulas (ε inside the root for RMSNorm) match F.layer_norm and F.rms_norm to {worst:.0e}; "
        f"B2 and A2 disagree on where ε goes, and PyTorch follows B2.",
        {
            "layer_norm_max_abs_diff": check.layer_norm_error,
            "rms_norm_max_abs_diff": check.rms_inside_error,
            "a2_outside_vs_torch_max_abs_diff": check.a2_vs_torch,
            "tolerance": formula_tol,
        },
        key_number=worst,
        threshold=formula_tol,
        spread=check.spread,
        **B2_KEY.fields(),
        reads=("formula_tol",),
    )


def a3_no_centring(check: FormulaCheck, formula_tol: float, uncentred: float, repeats: int) -> Finding:
    """RMSNorm keeps no β and subtracts no mean: one parameter, no mean in the formula, outputs not centred.

    Not centred means the median per-token |mean(y)| exceeds `uncentred`; LayerNorm's must stay below formula_tol.
    """
    x = check.tokens
    tokens, d = x.shape
    torch_parameters = list(dict(torch.nn.RMSNorm(d).named_parameters()))
    normlab_parameters = list(dict(RMSNorm(d).named_parameters()))
    rms_output_means = F.rms_norm(x, (d,), None, 1e-6).mean(-1).abs()
    ln_output_means = F.layer_norm(x, (d,), None, None, 1e-5).mean(-1).abs()
    rms_mean, ln_mean = float(rms_output_means.median()), float(ln_output_means.max())
    holds = (
        torch_parameters == ["weight"]
        and normlab_parameters == ["weight"]
        and check.rms_inside_error < formula_tol
        and rms_mean > uncentred
        and ln_mean < formula_tol
    )
    _, spread, _ = repeated(
        lambda draw: F.rms_norm(random_tokens(tokens, d, draw), (d,), None, 1e-6).mean(-1).abs().median(), repeats
    )
    return Finding(
        decide(holds),
        f"torch.nn.RMSNorm and normlab.RMSNorm hold only a gain, F.rms_norm subtracts no mean (formula match "
        f"{check.rms_inside_error:.0e}), and its outputs keep a per-token mean (median |mean(y)| = {rms_mean:.2f}; "
        f"LayerNorm ≤ {ln_mean:.0e}).",
        {
            "torch_parameters": torch_parameters,
            "normlab_parameters": normlab_parameters,
            "rms_output_mean_median": rms_mean,
            "ln_output_mean_max": ln_mean,
            "formula_max_abs_diff": check.rms_inside_error,
        },
        key_number=rms_mean,
        threshold=uncentred,
        spread=spread,
        **A3_KEY.fields(),
        reads=("uncentred", "formula_tol"),
    )


def formulas_paragraph(check: FormulaCheck, a3: Finding) -> str:
    return (
        f"**A1, B2, A3.** The formulas match PyTorch to "
        f"{significant(max(check.layer_norm_error, check.rms_inside_error))} (float64). "
        f"RMSNorm modules hold only `weight`; the median |per-token mean| of RMSNorm's output is "
        f"{a3.evidence['rms_output_mean_median']:.2f}, LayerNorm's at most "
        f"{significant(a3.evidence['ln_output_mean_max'])}."
    )
