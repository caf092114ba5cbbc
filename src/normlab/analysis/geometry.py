"""Geometry of the two norms: invariances, the dimension of the output set, and what ε does.

The formulas below are the articles' formulas transcribed literally, so that the
chapter can check each one against PyTorch's own implementations:

    A1 / B2 (LayerNorm):  y = (x - mean) / sqrt(var + eps) * gamma + beta
    A2 (RMSNorm):         y = x / (sqrt(mean(x^2)) + eps) * gamma          eps outside the root
    B2 (RMSNorm):         y = x / sqrt(mean(x^2) + eps) * gamma            eps inside the root

The second half of the module is the chapter itself, one block per section: each measurement returns its data,
and each verdict is a function of those data and of the thresholds the chapter states, returning a `Finding`.
The chapter's random draws all come from one generator, in the order the sections run, so the sections must be
called in that order for the published numbers to repeat.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from normlab.norms.modules import LayerNorm, RMSNorm
from normlab.norms.reference import layer_norm_reference, rms_norm_reference
from normlab.study.findings import Finding
from normlab.study.present import significant
from normlab.study.results import decide


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


# ---------------------------------------------------------------- invariance


def shift_change(norm, x: torch.Tensor, shifts) -> torch.Tensor:
    """max |norm(x + c·1) - norm(x)| over tokens, per shift c; x + c is rounded in x's dtype, as a model would."""
    reference = norm(x).double()
    return torch.tensor([float((norm(x + c).double() - reference).abs().max()) for c in shifts], dtype=torch.float64)


def scale_change(norm, x: torch.Tensor, scales) -> torch.Tensor:
    """max |norm(a·x) - norm(x)| over tokens, per scale a > 0."""
    reference = norm(x).double()
    return torch.tensor([float((norm(a * x).double() - reference).abs().max()) for a in scales], dtype=torch.float64)


def largest_passing(values, errors, tolerance: float) -> float:
    """The largest value such that it and every smaller value keep the error below tolerance (0 if none)."""
    passing = 0.0
    for value, error in sorted(zip(map(float, values), map(float, errors))):
        if not error < tolerance:
            break
        passing = value
    return passing


# ---------------------------------------------------------------- output set


def singular_values(outputs: torch.Tensor) -> torch.Tensor:
    """Singular values of a (tokens, d) batch of outputs, divided by the largest."""
    values = torch.linalg.svdvals(outputs.double())
    return values / values[0]


def numerical_rank(outputs: torch.Tensor, rtol: float = 1e-10) -> int:
    return int((singular_values(outputs) > rtol).sum())


# ---------------------------------------------------------------- eps placement (A2 vs B2, Q1)


def tokens_with_rms(rms_values, d: int, generator: torch.Generator) -> torch.Tensor:
    """One token per requested RMS, shape (len(rms_values), d), in float64, each with exactly that RMS."""
    base = torch.randn(len(rms_values), d, generator=generator, dtype=torch.float64)
    base = base / base.pow(2).mean(-1, keepdim=True).sqrt()
    return base * torch.as_tensor(rms_values, dtype=torch.float64)[:, None]


def placement_output_gap(x: torch.Tensor, eps: float) -> torch.Tensor:
    """Per token: max |inside - outside| / max |inside| in float64: how much ε's placement changes the output."""
    inside = rms_norm_eps_inside(x, torch.ones(x.shape[-1], dtype=x.dtype), eps)
    outside = rms_norm_eps_outside(x, torch.ones(x.shape[-1], dtype=x.dtype), eps)
    return (inside - outside).abs().amax(-1) / inside.abs().amax(-1)


def placement_gradient_gap(x: torch.Tensor, eps: float, upstream: torch.Tensor) -> torch.Tensor:
    """Per token: relative max difference of ∂ℓ/∂x between the two placements, ℓ = Σ upstream ⊙ y, in float64."""
    gradients = []
    for norm in (rms_norm_eps_inside, rms_norm_eps_outside):
        leaf = x.detach().clone().requires_grad_(True)
        (grad,) = torch.autograd.grad(norm(leaf, torch.ones(x.shape[-1], dtype=x.dtype), eps), leaf, upstream)
        gradients.append(grad)
    inside, outside = gradients
    return (inside - outside).abs().amax(-1) / inside.abs().amax(-1)


def placement_rounded_disagreement(x: torch.Tensor, eps: float, dtype: torch.dtype) -> torch.Tensor:
    """Per token: the share of output elements that differ once each placement's exact result is rounded to dtype."""
    ones = torch.ones(x.shape[-1], dtype=x.dtype)
    inside = rms_norm_eps_inside(x, ones, eps).to(dtype)
    outside = rms_norm_eps_outside(x, ones, eps).to(dtype)
    return (inside != outside).double().mean(-1)


def crossover_rms(rms_values, gaps, threshold: float) -> float:
    """The largest RMS at which the placement gap still exceeds threshold, log-log interpolated to the next point.

    The gap is not monotone (its two leading terms, ε/r and ε/(2r²), cancel near r = 1/2), so the scan starts
    from the large-RMS end. Returns 0 if the gap never exceeds threshold and inf if it does at the largest RMS.
    """
    points = sorted(zip(map(float, rms_values), map(float, gaps)))
    if points[-1][1] > threshold:
        return math.inf
    for (r0, g0), (r1, g1) in reversed(list(zip(points, points[1:]))):
        if g0 > threshold:
            if g1 <= 0:
                return r1
            t = (math.log(g0) - math.log(threshold)) / (math.log(g0) - math.log(g1))
            return math.exp(math.log(r0) + t * (math.log(r1) - math.log(r0)))
    return 0.0


def predicted_crossover_rms(eps: float, resolution: float) -> float:
    """Leading-order estimate of crossover_rms: the gap is ≈ ε/r for r ≫ 1/2 and ≈ ε/(2r²) for r ≪ 1/2."""
    return max(eps / resolution, math.sqrt(eps / (2 * resolution)))


# ---------------------------------------------------------------- eps on mean-dominated inputs (B11)


def mean_dominated_tokens(offset: float, noise: float, tokens: int, d: int, generator: torch.Generator) -> torch.Tensor:
    """x = offset·1 + noise·z with z standard normal, in float64."""
    return offset + noise * torch.randn(tokens, d, generator=generator, dtype=torch.float64)


def eps_effect(norm, x: torch.Tensor, eps: float) -> float:
    """max |norm_ε(x) - norm_0(x)| / max |norm_0(x)|: how much ε changes the output (float64, ε=0 via 1e-300)."""
    with_eps, without = norm(x, eps), norm(x, 1e-300)
    return float((with_eps - without).abs().max() / without.abs().max())


def mean_direction_share(y: torch.Tensor) -> float:
    """Average over tokens of mean(y)² / mean(y²): the share of the output's energy along 1."""
    return float((y.mean(-1).pow(2) / y.pow(2).mean(-1)).mean())


# ---------------------------------------------------------------- parameters (A6)


def parameter_count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def parameter_bytes(module: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in module.parameters())


def saved_for_backward_bytes(function, x: torch.Tensor) -> int:
    """Bytes of distinct tensors autograd keeps for the backward pass of function(x)."""
    storages: dict[int, int] = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        function(x)
    return sum(storages.values())


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


# ================================================================ the chapter, section by section

SETTINGS = {
    # tokens/d: the random batch for formula and invariance checks; points: resolution of every sweep;
    # rank_tokens/rank_d: the batch whose output rank is measured.
    "smoke": {"tokens": 64, "d": 64, "points": 9, "rank_tokens": 256, "rank_d": 32},
    "cpu": {"tokens": 1024, "d": 256, "points": 31, "rank_tokens": 4096, "rank_d": 256},
    "gpu": {"tokens": 8192, "d": 512, "points": 41, "rank_tokens": 8192, "rank_d": 512},
}
EPS_FREE = 1e-300  # an ε that float64 cannot tell from 0 at these scales
RESOLUTION = {"float32": torch.finfo(torch.float32).eps, "bfloat16": torch.finfo(torch.bfloat16).eps}


def chapter_settings(profile: str, settings: dict | None = None) -> dict:
    """The sizes of the chapter's batches and sweeps for a profile, checked."""
    if settings is None:
        if profile not in SETTINGS:
            raise ValueError(f"profile must be one of {sorted(SETTINGS)}, got {profile!r}")
        settings = SETTINGS[profile]
    for key, minimum in (("tokens", 8), ("d", 8), ("points", 5), ("rank_d", 4)):
        if not (isinstance(settings[key], int) and settings[key] >= minimum):
            raise ValueError(f"{key} must be an int >= {minimum}, got {settings[key]!r}")
    if settings["rank_tokens"] < 2 * settings["rank_d"]:
        raise ValueError(
            f"rank_tokens must be at least 2 * rank_d so the rank is not limited by the batch, got {settings}"
        )
    return settings


def _short(value: float) -> str:
    """1e-06 written as 1e-6, the way the chapter's sentences write a tolerance."""
    return re.sub(r"e([+-])0*(\d)", r"e\1\2", f"{value:.0e}")


# ---------------------------------------------------------------- formulas against PyTorch (A1, B2, A3)

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
    tried = ", ".join(_short(eps) for eps in FORMULA_EPS)
    tokens, d = check.tokens.shape
    return Finding(
        decide(error < formula_tol),
        f"A1's LayerNorm formula matches F.layer_norm to {error:.0e} (float64, ε ∈ {{{tried}}}, random γ, β).",
        {"max_abs_diff": error, "tolerance": formula_tol, "tokens": tokens, "d": d},
        key_number=error,
        threshold=formula_tol,
        spread=check.spread,
        rule="Holds if the formula as written matches F.layer_norm to FORMULA_TOL (float64) at every ε tried.",
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
        rule="Holds if both formulas as written match PyTorch to FORMULA_TOL (float64).",
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
        rule="Holds if both RMSNorm modules hold only a gain, F.rms_norm matches a formula without a mean, and the median "
        f"per-token |mean| of its output exceeds {uncentred:g} (not centred).",
    )


def formulas_paragraph(check: FormulaCheck, a3: Finding) -> str:
    return (
        f"**A1, B2, A3.** The formulas match PyTorch to "
        f"{significant(max(check.layer_norm_error, check.rms_inside_error))} (float64). "
        f"RMSNorm modules hold only `weight`; the median |per-token mean| of RMSNorm's output is "
        f"{a3.evidence['rms_output_mean_median']:.2f}, LayerNorm's at most "
        f"{significant(a3.evidence['ln_output_mean_max'])}."
    )


# ---------------------------------------------------------------- shift and scale invariance (A4, B3, B4)

SHIFT = "shift x + c·1"
SCALE = "scale a·x"
# (dtype shown, dtype computed in, variant of the norm): float64 tests the mathematics with ε = 0; the lower
# precisions use the defaults a model runs with.
INVARIANCE_DTYPES = (
    ("float64", torch.float64, "float64"),
    ("float32", torch.float32, "default ε"),
    ("bfloat16", torch.bfloat16, "default ε"),
)


def invariance_norms(d: int) -> dict:
    """Per norm, the ε-free float64 reference and torch's op with its default ε (LayerNorm 1e-5, RMSNorm 1e-6)."""
    return {
        "LayerNorm": {
            "float64": lambda v: layer_norm_reference(v, eps=EPS_FREE),
            "default ε": lambda v: F.layer_norm(v, (d,), eps=1e-5),
        },
        "RMSNorm": {
            "float64": lambda v: rms_norm_reference(v, eps=EPS_FREE),
            "default ε": lambda v: F.rms_norm(v, (d,), eps=1e-6),
        },
    }


@dataclass
class InvarianceSweep:
    base: torch.Tensor  # standard-normal tokens, float64
    shifts: list[float]
    scales: list[float]
    changes: pd.DataFrame  # norm, dtype, transform, amount, max change
    eps_scale_change: dict[str, torch.Tensor]  # float64 with the default ε: ε, not rounding, breaks it at small scales

    def curve(self, norm: str, dtype: str, transform: str) -> tuple[np.ndarray, np.ndarray]:
        frame = self.changes[
            (self.changes["norm"] == norm) & (self.changes["dtype"] == dtype) & (self.changes["transform"] == transform)
        ]
        return frame.amount.to_numpy(), frame["max change"].to_numpy()


def sweep_invariance(tokens: int, d: int, points: int, generator: torch.Generator) -> InvarianceSweep:
    """The largest output change under shifts 1e-2..1e8 and scales 1e-4..1e4, per norm and dtype."""
    base = torch.randn(tokens, d, generator=generator, dtype=torch.float64)
    shifts = torch.logspace(-2, 8, points, dtype=torch.float64).tolist()
    scales = torch.logspace(-4, 4, points, dtype=torch.float64).tolist()
    norms = invariance_norms(d)
    rows = []
    for name, variants in norms.items():
        for dtype_name, dtype, variant in INVARIANCE_DTYPES:
            cast = base.to(dtype)
            for c, change in zip(shifts, shift_change(variants[variant], cast, shifts).tolist()):
                rows.append({"norm": name, "dtype": dtype_name, "transform": SHIFT, "amount": c, "max change": change})
            for a, change in zip(scales, scale_change(variants[variant], cast, scales).tolist()):
                rows.append({"norm": name, "dtype": dtype_name, "transform": SCALE, "amount": a, "max change": change})
    eps_scale_change = {name: scale_change(variants["default ε"], base, scales) for name, variants in norms.items()}
    return InvarianceSweep(base, shifts, scales, pd.DataFrame(rows), eps_scale_change)


@dataclass
class InvarianceFindings:
    a4: Finding
    b3_summary: str  # B3 is judged in the Jacobian chapter: this chapter leaves its invariance part as evidence
    b3_evidence: dict
    b4: Finding
    paragraph: str


def invariance_findings(
    sweep: InvarianceSweep,
    invariance_tol: float,
    visible_change: dict[str, float],
    formula_tol: float,
    *,
    shift_regime: float,
    shift_sensitive: float,
    repeats: int,
) -> InvarianceFindings:
    """A4, B3's invariance part and B4 from the sweep.

    Invariant in float64 means a change below invariance_tol; in float32 and bfloat16 a change above
    visible_change[dtype] is a visible break. LayerNorm must stay invariant under shifts up to shift_regime·σ;
    RMSNorm is shift sensitive if a shift of one σ moves it by more than shift_sensitive.
    """
    ln_shift_limit = {
        dt: largest_passing(
            *sweep.curve("LayerNorm", dt, SHIFT), invariance_tol if dt == "float64" else visible_change[dt]
        )
        for dt in ("float64", "float32", "bfloat16")
    }
    ln_scale_change_64 = float(sweep.curve("LayerNorm", "float64", SCALE)[1].max())
    rms_scale_change_64 = float(sweep.curve("RMSNorm", "float64", SCALE)[1].max())
    rms_shift_amounts, rms_shift_changes = sweep.curve("RMSNorm", "float64", SHIFT)
    rms_shift_at_sigma = float(np.interp(0.0, np.log10(rms_shift_amounts), rms_shift_changes))  # change at c = σ
    smallest_scale_ok = {
        name: min(
            (a for a, ch in zip(sweep.scales, changes.tolist()) if ch < visible_change["float32"]), default=math.inf
        )
        for name, changes in sweep.eps_scale_change.items()
    }
    tokens, d = sweep.base.shape
    norms = invariance_norms(d)

    def shift_at(norm, shift):
        return lambda draw: float(
            shift_change(norm, torch.randn(tokens, d, generator=draw, dtype=torch.float64), [shift])[0]
        )

    _, rms_shift_spread, _ = repeated(shift_at(norms["RMSNorm"]["float64"], 1.0), repeats)
    ln_shift_regime_mean, ln_shift_regime_spread, _ = repeated(
        shift_at(norms["LayerNorm"]["float64"], shift_regime), repeats
    )

    # LayerNorm depends only on the direction of the centred input: LN(x) = √d·Px/‖Px‖ when ε → 0.
    base = sweep.base
    centred = base - base.mean(-1, keepdim=True)
    direction_form = math.sqrt(d) * centred / centred.norm(dim=-1, keepdim=True)
    ln_free = layer_norm_reference(base, eps=EPS_FREE)
    direction_error = max_abs_difference(ln_free, direction_form)
    sum_error = float(ln_free.sum(-1).abs().max())
    radius_error = float((ln_free.norm(dim=-1) - math.sqrt(d)).abs().max())

    shift_ok = ln_shift_limit["float64"] >= shift_regime
    scale_ok = ln_scale_change_64 < invariance_tol and rms_scale_change_64 < invariance_tol
    rms_shift_sensitive = rms_shift_at_sigma > shift_sensitive
    precision_caveat = ln_shift_limit["float32"] < sweep.shifts[-1] or ln_shift_limit["bfloat16"] < sweep.shifts[-1]
    evidence = {
        "ln_shift_limit_sigma": ln_shift_limit,
        "ln_scale_change_eps0": ln_scale_change_64,
        "rms_scale_change_eps0": rms_scale_change_64,
        "rms_shift_change_at_c_sigma": rms_shift_at_sigma,
        "smallest_scale_without_visible_change_default_eps": smallest_scale_ok,
        "tolerances": {"float64": invariance_tol, "visible": visible_change},
        "shift_regime": shift_regime,
    }
    a4 = Finding(
        decide(shift_ok and scale_ok and rms_shift_sensitive, caveat=precision_caveat),
        f"In float64 LayerNorm is unchanged (< {invariance_tol:g}) by shifts up to {ln_shift_limit['float64']:.0e}σ and "
        f"both norms by any scale, while RMSNorm moves by {rms_shift_at_sigma:.1f} at c = σ; in float32 LayerNorm's "
        f"shift invariance is visibly broken beyond {ln_shift_limit['float32']:.0e}σ (bfloat16: "
        f"{ln_shift_limit['bfloat16']:.0e}σ) because x + c is rounded.",
        evidence,
        key_number=ln_shift_regime_mean,
        threshold=invariance_tol,
        spread=ln_shift_regime_spread,
        rule=f"Holds if, in float64, LayerNorm's output moves by less than INVARIANCE_TOL under shifts up to "
        f"{shift_regime:g}σ (the key number: the change at that shift) and both norms under any scale, while RMSNorm "
        f"moves by more than {shift_sensitive:g} at c = σ; a caveat where float32 or bfloat16 rounding breaks the shift "
        "invariance within the sweep.",
    )
    b3_summary = (
        f"Invariance part: LayerNorm equals √d·Px/‖Px‖ (P = I − 11ᵀ/d) to {direction_error:.0e} and ignores shifts up "
        f"to {ln_shift_limit['float64']:.0e}σ and scales in float64; in float32 rounding of x + c breaks shift "
        f"invariance beyond {ln_shift_limit['float32']:.0e}σ."
    )
    b3_evidence = {
        **evidence,
        "direction_form_error": direction_error,
        "output_sum_max": sum_error,
        "radius_error": radius_error,
        "shift_ok": bool(shift_ok),
        "scale_ok": bool(scale_ok),
        "direction_ok": bool(direction_error < formula_tol and sum_error < formula_tol),
        "precision_caveat": bool(precision_caveat),
        "formula_tolerance": formula_tol,
    }
    b4 = Finding(
        decide(rms_scale_change_64 < invariance_tol and rms_shift_sensitive),
        f"RMSNorm is scale invariant (change {rms_scale_change_64:.0e} with ε → 0) but a shift of one σ changes its "
        f"output by {rms_shift_at_sigma:.2f} (max abs, unit-RMS outputs).",
        {
            "rms_scale_change_eps0": rms_scale_change_64,
            "rms_shift_change_at_c_sigma": rms_shift_at_sigma,
            "rms_shift_changes": dict(zip(map(str, rms_shift_amounts.tolist()), rms_shift_changes.tolist())),
        },
        key_number=rms_shift_at_sigma,
        threshold=shift_sensitive,
        spread=rms_shift_spread,
        rule="Holds if RMSNorm's float64 output moves by less than INVARIANCE_TOL under any scale and by more than "
        f"{shift_sensitive:g} under a shift of one σ (the key number).",
    )
    paragraph = (
        f"**A4, B4.** In float64 LayerNorm is unchanged by shifts up to {ln_shift_limit['float64']:.0e}σ "
        f"(float32: {ln_shift_limit['float32']:.0e}σ; bfloat16: {ln_shift_limit['bfloat16']:.0e}σ) and both norms by "
        f"any scale (change ≤ {significant(max(ln_scale_change_64, rms_scale_change_64))}); a shift of one σ moves "
        f"RMSNorm's output by {rms_shift_at_sigma:.2f}. LayerNorm's output equals √d·Px/‖Px‖ to "
        f"{significant(direction_error)}: it lies on a sphere in the hyperplane 1ᵀy = 0 (evidence for B3, which the "
        f"Jacobian chapter judges)."
    )
    return InvarianceFindings(a4, b3_summary, b3_evidence, b4, paragraph)


# ---------------------------------------------------------------- the dimension of the output set (B16)


@dataclass
class OutputRank:
    outputs: dict[str, torch.Tensor]  # per norm, the stacked outputs of the random tokens
    ranks: dict[str, int]
    spectra: pd.DataFrame  # norm, index, singular value / largest
    mean_spread: dict[str, float]  # sd over tokens of the per-token output mean: the extra dimension RMSNorm keeps


def measure_output_rank(tokens: int, d: int, generator: torch.Generator) -> OutputRank:
    inputs = random_tokens(tokens, d, generator)
    outputs = {"LayerNorm": layer_norm_reference(inputs, eps=1e-5), "RMSNorm": rms_norm_reference(inputs, eps=1e-6)}
    spectra = pd.concat(
        [
            pd.DataFrame(
                {"norm": name, "index": np.arange(1, d + 1), "singular value / largest": singular_values(y).numpy()}
            )
            for name, y in outputs.items()
        ]
    )
    return OutputRank(
        outputs=outputs,
        ranks={name: numerical_rank(y) for name, y in outputs.items()},
        spectra=spectra,
        mean_spread={name: float(y.mean(-1).std()) for name, y in outputs.items()},
    )


def b16_geometric_part(rank: OutputRank) -> tuple[str, dict]:
    """B16's geometric part, as (summary, evidence): the quality chapter judges B16 with its training runs."""
    tokens, d = rank.outputs["RMSNorm"].shape
    ranks, spread = rank.ranks, rank.mean_spread
    summary = (
        f"Geometric part: the outputs of {tokens} random tokens have rank {ranks['RMSNorm']} under RMSNorm and "
        f"{ranks['LayerNorm']} under LayerNorm (d = {d}): one more dimension, the output mean (spread "
        f"{spread['RMSNorm']:.2f} vs {spread['LayerNorm']:.0e}); whether training uses or suppresses it is measured in "
        f"the quality chapter."
    )
    evidence = {
        "ranks": ranks,
        "d": d,
        "tokens": tokens,
        "output_mean_spread": spread,
        "rank_one_more": bool(ranks["LayerNorm"] == d - 1 and ranks["RMSNorm"] == d),
        "smallest_singular_value": {name: float(singular_values(y)[-1]) for name, y in rank.outputs.items()},
    }
    return summary, evidence


# ---------------------------------------------------------------- parameters and memory (A6)


@dataclass
class ParameterMemory:
    d: int
    tokens: int
    table: pd.DataFrame  # module, parameters, parameter bytes (float32), bytes kept for backward
    counts: dict[str, int]
    saved: dict[str, int]  # per norm, bytes autograd keeps for the backward of one float32 batch
    block_share: dict[str, float]  # the norms' share of a GPT-2-small-shaped block's weights


def measure_parameters(d: int, tokens: int) -> ParameterMemory:
    rows = []
    for name, module in (
        ("torch.nn.LayerNorm", torch.nn.LayerNorm(d)),
        ("torch.nn.RMSNorm", torch.nn.RMSNorm(d)),
        ("normlab.LayerNorm", LayerNorm(d)),
        ("normlab.RMSNorm", RMSNorm(d)),
    ):
        rows.append(
            {
                "module": name,
                "parameters": parameter_count(module),
                "parameter bytes (float32)": parameter_bytes(module),
            }
        )
    batch = torch.randn(tokens, d, requires_grad=True)
    weight, bias = torch.ones(d, requires_grad=True), torch.zeros(d, requires_grad=True)
    saved = {
        "LayerNorm": saved_for_backward_bytes(lambda v: F.layer_norm(v, (d,), weight, bias, 1e-5), batch),
        "RMSNorm": saved_for_backward_bytes(lambda v: F.rms_norm(v, (d,), weight, 1e-6), batch),
    }
    table = pd.DataFrame(rows)
    # For scale: a GPT-2-small-shaped block (d = 768) has ~12·d² weights and two norms.
    block_share = {name: 2 * k * 768 / (12 * 768**2) for name, k in (("LayerNorm", 2), ("RMSNorm", 1))}
    counts = dict(zip(table.module, table.parameters))
    shown = table.assign(
        **{"bytes kept for backward": [saved["LayerNorm"], saved["RMSNorm"], saved["LayerNorm"], saved["RMSNorm"]]}
    )
    return ParameterMemory(d, tokens, shown, counts, saved, block_share)


def a6_parameter_saving(memory: ParameterMemory, negligible_share: float) -> Finding:
    """Holds if LayerNorm holds 2d parameters and RMSNorm d; a caveat if the saving is negligible at model scale
    (the norms under negligible_share of a d = 768 block's weights) or activation memory is not smaller."""
    d, counts, saved, share = memory.d, memory.counts, memory.saved, memory.block_share
    holds = (
        counts["torch.nn.LayerNorm"] == 2 * d
        and counts["torch.nn.RMSNorm"] == d
        and counts["normlab.LayerNorm"] == 2 * d
        and counts["normlab.RMSNorm"] == d
    )
    return Finding(
        decide(holds, caveat=share["LayerNorm"] < negligible_share or saved["RMSNorm"] >= saved["LayerNorm"]),
        f"LayerNorm holds 2d = {2 * d} parameters and RMSNorm d = {d} (torch.nn and normlab alike); the saving is real "
        f"but tiny: norms are {share['LayerNorm']:.2%} vs {share['RMSNorm']:.2%} of a d = 768 block's weights, and for "
        f"activations PyTorch's CPU kernels keep {saved['LayerNorm']} B (LayerNorm) vs {saved['RMSNorm']} B (RMSNorm) "
        f"for the backward of a {memory.tokens}×{d} float32 batch.",
        {"parameters": counts, "saved_for_backward_bytes": saved, "share_of_block_weights_d768": share},
        key_number=counts["torch.nn.LayerNorm"] - counts["torch.nn.RMSNorm"],
        threshold=0,
        spread=0.0,
        rule="Holds if LayerNorm holds 2d parameters and RMSNorm d (key number: the difference, d; a count does not "
        f"vary between draws); a caveat if the norms are under {negligible_share:.0%} of a d = 768 block's weights or "
        "activation memory is not smaller.",
    )


# ---------------------------------------------------------------- where ε goes (A2, Q1)

# Read from each implementation's source at the commit given (the chapter's table has the details).
EPS_PLACEMENT_SOURCES = {
    "authors_pytorch": "bzhangGo/rmsnorm@2e726f1 rmsnorm_torch.py (outside, eps 1e-8)",
    "authors_tensorflow": "bzhangGo/rmsnorm@2e726f1 rmsnorm_tensorflow.py (inside, eps 1e-8)",
    "authors_theano": "bzhangGo/rmsnorm@2e726f1 layers.py (inside, eps 1e-5)",
    "authors_zero_toolkit": "bzhangGo/zero@d97e2c2 func.py rms_norm (inside)",
    "meta": "meta-llama/llama llama/model.py (inside)",
    "hf_llama": "transformers models/llama/modeling_llama.py (inside)",
    "hf_t5": "transformers models/t5/modeling_t5.py (inside)",
    "hf_gemma": "transformers models/gemma/modeling_gemma.py (inside, 1 + weight, float32)",
    "torch": "torch.nn.RMSNorm / F.rms_norm (inside, measured)",
}
PLACEMENT_EPS = (1e-8, 1e-6, 1e-5)


@dataclass
class TorchPlacement:
    """What torch computes, measured: F.rms_norm against both placements, and its default ε in float32."""

    inside_error: float
    outside_gap: float
    default_eps_error: float

    def sentence(self) -> str:
        return (
            f"Measured: `F.rms_norm` matches ε inside to {significant(self.inside_error)} and differs from ε outside by "
            f"{significant(self.outside_gap)}; `torch.nn.RMSNorm(eps=None)` on float32 matches ε inside with "
            f"`finfo(float32).eps` to {significant(self.default_eps_error)}."
        )


def probe_torch_placement(d: int, generator: torch.Generator) -> TorchPlacement:
    probe = random_tokens(64, d, generator)
    inside_error = max_abs_difference(F.rms_norm(probe, (d,), None, 1e-6), rms_norm_eps_inside(probe, 1.0, 1e-6))
    outside_gap = max_abs_difference(F.rms_norm(probe, (d,), None, 1e-6), rms_norm_eps_outside(probe, 1.0, 1e-6))
    probe32 = probe.float()
    default_eps_error = max_abs_difference(
        torch.nn.RMSNorm(d, elementwise_affine=False)(probe32),
        rms_norm_eps_inside(probe32.double(), 1.0, torch.finfo(torch.float32).eps),
    )
    return TorchPlacement(inside_error, outside_gap, default_eps_error)


@dataclass
class PlacementSweep:
    rms_values: list[float]
    gaps: pd.DataFrame  # eps, RMS of x, output gap, gradient gap, float32/bfloat16 elements differing
    crossovers: dict[tuple[float, str], dict[str, float]]  # (ε, dtype) -> output, gradient, predicted crossover RMS

    def crossover_table(self) -> pd.DataFrame:
        return pd.DataFrame(
            [{"ε": eps, "dtype": dt, **values} for (eps, dt), values in self.crossovers.items()]
        ).rename(
            columns={
                "output": "output crossover RMS",
                "gradient": "gradient crossover RMS",
                "predicted": "predicted max(ε/u, √(ε/2u))",
            }
        )


def sweep_placement(d: int, points: int, generator: torch.Generator) -> PlacementSweep:
    """ε inside against outside for tokens of prescribed RMS 1e-9..1e4, at each ε of PLACEMENT_EPS."""
    rms_values = torch.logspace(-9, 4, 4 * points, dtype=torch.float64).tolist()
    rows, crossovers = [], {}
    for eps in PLACEMENT_EPS:
        tokens = tokens_with_rms(rms_values, d, generator)
        upstream = torch.randn(tokens.shape, generator=generator, dtype=torch.float64)
        output_gap = placement_output_gap(tokens, eps)
        gradient_gap = placement_gradient_gap(tokens, eps, upstream)
        share32 = placement_rounded_disagreement(tokens, eps, torch.float32)
        share16 = placement_rounded_disagreement(tokens, eps, torch.bfloat16)
        for r, out, grad, s32, s16 in zip(
            rms_values, output_gap.tolist(), gradient_gap.tolist(), share32.tolist(), share16.tolist()
        ):
            rows.append(
                {
                    "eps": f"ε = {eps:g}",
                    "RMS of x": r,
                    "output gap": out,
                    "gradient gap": grad,
                    "float32 elements differing": s32,
                    "bfloat16 elements differing": s16,
                }
            )
        for dtype_name, resolution in RESOLUTION.items():
            crossovers[(eps, dtype_name)] = {
                "output": crossover_rms(rms_values, output_gap, resolution),
                "gradient": crossover_rms(rms_values, gradient_gap, resolution),
                "predicted": predicted_crossover_rms(eps, resolution),
            }
    return PlacementSweep(rms_values, pd.DataFrame(rows), crossovers)


@dataclass
class PlacementFindings:
    q1: Finding
    a2: Finding
    paragraph: str


def placement_findings(
    sweep: PlacementSweep,
    measured: TorchPlacement,
    check: FormulaCheck,
    formula_tol: float,
    *,
    eps: float,
    agreement: float,
    visible_rms: float,
    float32_tol: float,
    repeats: int,
) -> PlacementFindings:
    """Q1 and A2 from the measured placements.

    Q1 holds if torch measures as ε inside (to formula_tol, and to float32_tol with its float32 default ε) and every
    measured crossover lies within a factor `agreement` of the prediction max(ε/u, √(ε/2u)); a caveat if, at the
    given ε (LLaMA's), float32 outputs differ above RMS visible_rms. A2 holds if its formula is an ε-outside
    RMSNorm to formula_tol, with a caveat where it differs from torch by more than that.
    """
    d = check.tokens.shape[-1]
    fp32_crossover = sweep.crossovers[(eps, "float32")]["output"]
    bf16_crossover = sweep.crossovers[(eps, "bfloat16")]["output"]
    at_eps = sweep.gaps[sweep.gaps.eps == f"ε = {eps:g}"]
    at_unit_rms = at_eps.iloc[(at_eps["RMS of x"] - 1.0).abs().argsort()[:1]]
    share32_at_1 = float(at_unit_rms["float32 elements differing"].iloc[0])
    share16_at_1 = float(at_unit_rms["bfloat16 elements differing"].iloc[0])
    predicted_ok = all(1 / agreement < v["output"] / v["predicted"] < agreement for v in sweep.crossovers.values())
    torch_is_inside = (
        measured.inside_error < formula_tol
        and measured.outside_gap > formula_tol
        and measured.default_eps_error < float32_tol
    )

    def fp32_crossover_draw(draw):
        tokens = tokens_with_rms(sweep.rms_values, d, draw)
        return crossover_rms(sweep.rms_values, placement_output_gap(tokens, eps), RESOLUTION["float32"])

    _, crossover_spread, _ = repeated(fp32_crossover_draw, repeats)
    q1 = Finding(
        decide(torch_is_inside and predicted_ok, caveat=fp32_crossover > visible_rms),
        f"All checked implementations put ε inside the root (torch measured: {measured.inside_error:.0e}) except one "
        f"file, the RMSNorm authors' PyTorch code (their TensorFlow, Theano and 'zero' code put it inside); the outputs "
        f"differ by ≈ |ε/r − ε/(2r²)|, which for ε = {_short(eps)} exceeds float32 resolution below r ≈ "
        f"{fp32_crossover:.1f} ({share32_at_1:.0%} of float32 outputs differ at r = 1) and bfloat16 resolution only "
        f"below r ≈ {bf16_crossover:.1e}.",
        {
            "torch_vs_inside_max_abs": measured.inside_error,
            "torch_vs_outside_max_abs": measured.outside_gap,
            "torch_default_eps_is_finfo_eps_error": measured.default_eps_error,
            "crossovers": {f"eps={e:g}/{dt}": v for (e, dt), v in sweep.crossovers.items()},
            "float32_share_differing_at_rms_1": share32_at_1,
            "bfloat16_share_differing_at_rms_1": share16_at_1,
            "sources": EPS_PLACEMENT_SOURCES,
        },
        key_number=fp32_crossover,
        threshold=visible_rms,
        spread=crossover_spread,
        rule=f"Holds if torch measures as ε inside and the measured crossovers agree with max(ε/u, √(ε/2u)) within "
        f"{agreement:g}×; a caveat if for ε = {_short(eps)} the placements differ in float32 above RMS {visible_rms:g} "
        "(the key number: that crossover RMS).",
    )
    a2 = Finding(
        decide(check.a2_vs_outside_reference < formula_tol, caveat=check.a2_vs_torch > formula_tol),
        f"A2's ε-outside formula is a valid RMSNorm (matched to {check.a2_vs_outside_reference:.0e}), but it is the "
        f"form of only one of the authors' four implementations (their PyTorch file; their TensorFlow, Theano and "
        f"'zero' code put ε inside, and the paper's equations have none), and it is not what PyTorch, LLaMA, T5 or "
        f"Gemma compute (ε inside, as B2 writes): on these random tokens the two differ by up to "
        f"{check.a2_vs_torch:.0e} (max abs), a difference visible in float32 for any RMS below ≈ "
        f"{fp32_crossover:.1f} when ε = {_short(eps)}.",
        {
            "vs_outside_reference": check.a2_vs_outside_reference,
            "vs_torch": check.a2_vs_torch,
            f"float32_crossover_rms_eps_{_short(eps)}": fp32_crossover,
            f"bfloat16_crossover_rms_eps_{_short(eps)}": bf16_crossover,
            "tolerance": formula_tol,
            "authors_implementations_with_eps_outside": "1 of 4 (rmsnorm_torch.py)",
        },
        key_number=check.a2_vs_torch,
        threshold=formula_tol,
        spread=check.a2_gap_spread,
        rule="Holds if A2's formula matches an ε-outside RMSNorm to FORMULA_TOL; a caveat if it differs from what "
        "PyTorch computes by more than FORMULA_TOL (the key number).",
    )
    paragraph = (
        f"**Q1, A2.** PyTorch, LLaMA, T5, Gemma and three of the authors' four implementations put ε inside the root. "
        f"The two placements differ by ≈ |ε/r − ε/(2r²)|: for ε = {_short(eps)} the stored float32 output changes "
        f"below RMS ≈ {fp32_crossover:.2g} ({share32_at_1:.0%} of elements at RMS 1), bfloat16 only below "
        f"{bf16_crossover:.1e}."
    )
    return PlacementFindings(q1, a2, paragraph)


# ---------------------------------------------------------------- mean-dominated inputs and ε (B11)

MEAN_DOMINATED_OFFSETS = (0.0, 1.0, 100.0)
MEAN_DOMINATED_TOKENS = 32  # tokens per (offset, noise) point


def _layer_norm_with_eps(v, eps):
    return layer_norm_reference(v, eps=eps)


def _rms_norm_with_eps(v, eps):
    return rms_norm_reference(v, eps=eps)


def sweep_mean_dominated(d: int, points: int, eps: float, generator: torch.Generator) -> pd.DataFrame:
    """Tokens c·1 + s·z for each offset c and noise s: how much ε changes each norm, and the output's share along 1.

    "statistic / ε" is what ε pads, relative to ε: the variance s² for LayerNorm, the mean square c² + s² for RMSNorm.
    """
    noise_levels = torch.logspace(-6, 1, 2 * points, dtype=torch.float64).tolist()
    rows = []
    for c in MEAN_DOMINATED_OFFSETS:
        for s in noise_levels:
            tokens = mean_dominated_tokens(c, s, MEAN_DOMINATED_TOKENS, d, generator)
            for name, norm, statistic in (
                ("LayerNorm", _layer_norm_with_eps, s * s),
                ("RMSNorm", _rms_norm_with_eps, c * c + s * s),
            ):
                rows.append(
                    {
                        "norm": name,
                        "offset c": c,
                        "noise s": s,
                        "statistic / ε": statistic / eps,
                        "ε effect": eps_effect(norm, tokens, eps),
                        "output share along 1": mean_direction_share(norm(tokens, eps)),
                    }
                )
    return pd.DataFrame(rows)


def b11_eps_on_mean_dominated(
    b11: pd.DataFrame,
    eps: float,
    d: int,
    *,
    rms_negligible: float,
    ln_takes_over: float,
    ln_negligible: float,
    offset_dominated: float,
    repeats: int,
) -> tuple[Finding, str]:
    """B11's finding and the chapter's sentence for it.

    Holds if RMSNorm's ε effect stays below rms_negligible once mean(x²) ≥ 1e5·ε, LayerNorm's exceeds ln_takes_over
    where σ² ≤ ε (the key number: its smallest value there) and stays below ln_negligible where σ² ≥ 1e3·ε, and
    RMSNorm's outputs on mean-dominated inputs (c = 100, s ≤ 1) are more than offset_dominated along 1.
    """
    rms_large = b11[(b11.norm == "RMSNorm") & (b11["statistic / ε"] >= 1e5)]  # mean square ≥ 1: a residual stream
    ln_small_var = b11[(b11.norm == "LayerNorm") & (b11["statistic / ε"] <= 1.0)]  # variance ≤ ε: near-constant input
    ln_large_var = b11[(b11.norm == "LayerNorm") & (b11["statistic / ε"] >= 1e3)]
    rms_effect_large = float(rms_large["ε effect"].max())
    ln_effect_small = float(ln_small_var["ε effect"].min())
    ln_effect_large = float(ln_large_var["ε effect"].max())
    dominated = b11[(b11.norm == "RMSNorm") & (b11["offset c"] == 100.0) & (b11["noise s"] <= 1.0)]
    rms_offset_share = float(dominated["output share along 1"].min())
    rms_signal_share = 1 - rms_offset_share  # what is left for the per-token signal
    # the spread of LayerNorm's small-variance effect: the same (c, s) point drawn again
    near_constant = ln_small_var.sort_values("ε effect").iloc[0]
    _, ln_effect_spread, _ = repeated(
        lambda draw: eps_effect(
            _layer_norm_with_eps,
            mean_dominated_tokens(near_constant["offset c"], near_constant["noise s"], MEAN_DOMINATED_TOKENS, d, draw),
            eps,
        ),
        repeats,
    )
    holds = (
        rms_effect_large < rms_negligible
        and ln_effect_small > ln_takes_over
        and ln_effect_large < ln_negligible
        and rms_offset_share > offset_dominated
    )
    finding = Finding(
        decide(holds),
        f"With ε = {eps:g}, RMSNorm's output moves by ≤ {rms_effect_large:.0e} once mean(x²) ≥ 1, whereas LayerNorm's "
        f"shrinks by ≥ {ln_effect_small:.0%} when σ² ≤ ε; on mean-dominated inputs (c = 100, s ≤ 1) at most "
        f"{rms_signal_share:.1e} of RMSNorm's output energy is per-token signal (the rest is along 1), the case "
        f"LayerNorm handles and RMSNorm gives up.",
        {
            "eps": eps,
            "rms_effect_mean_square_ge_1": rms_effect_large,
            "ln_effect_variance_le_eps_min": ln_effect_small,
            "ln_effect_variance_ge_1e3_eps_max": ln_effect_large,
            "rms_output_share_along_1_mean_dominated": rms_offset_share,
            "rms_signal_share_mean_dominated": rms_signal_share,
        },
        key_number=ln_effect_small,
        threshold=ln_takes_over,
        spread=ln_effect_spread,
        rule=f"Holds if RMSNorm's ε effect is below {_short(rms_negligible)} once mean(x²) ≥ 1, LayerNorm's exceeds "
        f"{ln_takes_over:.0%} when σ² ≤ ε (the key number: its smallest value there) and stays below "
        f"{_short(ln_negligible)} when σ² ≥ 1e3·ε, and mean-dominated RMSNorm outputs are > {offset_dominated:.0%} "
        "offset.",
    )
    sentence = (
        f"**B11.** With ε = {eps:g}, RMSNorm's output moves by at most {significant(rms_effect_large)} once mean(x²) "
        f"≥ 1; LayerNorm's shrinks by at least {ln_effect_small:.0%} once σ² ≤ ε. On mean-dominated inputs (c = 100, "
        f"s ≤ 1) at most {significant(rms_signal_share)} of RMSNorm's output energy is per-token signal."
    )
    return finding, sentence
