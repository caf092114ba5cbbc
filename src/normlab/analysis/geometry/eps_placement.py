"""Section "Where ε goes (A2 vs B2, Q1)": what torch computes, when ε inside and outside the root
differ in a stored output, and the verdicts Q1 and A2."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd
import torch
import torch.nn.functional as F

from normlab.analysis.geometry.articles import (
    max_abs_difference,
    random_tokens,
    repeated,
    rms_norm_eps_inside,
    rms_norm_eps_outside,
)
from normlab.analysis.geometry.formulas import FormulaCheck
from normlab.analysis.geometry.settings import short
from normlab.study.findings import Finding
from normlab.study.key_numbers import DIMENSIONLESS, KeyNumber
from normlab.study.present import significant
from normlab.study.results import decide

Q1_KEY = KeyNumber("RMS below which the ε placement shows in float32 (ε = 1e-6)", DIMENSIONLESS)
A2_KEY = KeyNumber("max abs difference, ε outside vs PyTorch's ε inside", DIMENSIONLESS)


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


RESOLUTION = {"float32": torch.finfo(torch.float32).eps, "bfloat16": torch.finfo(torch.bfloat16).eps}

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
        f"Every checked implementation puts ε inside the root (torch measured: {measured.inside_error:.0e}) except the "
        f"RMSNorm authors' PyTorch file; for ε = {short(eps)} the placements differ visibly in float32 below r ≈ "
        f"{fp32_crossover:.1f}. Their TensorFlow, Theano and 'zero' code put it inside. The outputs differ by "
        f"≈ |ε/r − ε/(2r²)|, which exceeds float32 resolution below r ≈ {fp32_crossover:.1f} ({share32_at_1:.0%} of "
        f"float32 outputs differ at r = 1) and bfloat16 resolution only below r ≈ {bf16_crossover:.1e}.",
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
        **Q1_KEY.fields(),
        reads=("eps", "agreement", "visible_rms", "float32_tol"),
    )
    a2 = Finding(
        decide(check.a2_vs_outside_reference < formula_tol, caveat=check.a2_vs_torch > formula_tol),
        f"A2's ε-outside formula is a valid RMSNorm (matched to {check.a2_vs_outside_reference:.0e}), but not what "
        f"PyTorch, LLaMA, T5 or Gemma compute (ε inside, as B2 writes): the two differ by up to "
        f"{check.a2_vs_torch:.0e} (max abs). It is the form of only one of the authors' four implementations (their "
        f"PyTorch file; their TensorFlow, Theano and 'zero' code put ε inside, and the paper's equations have none). "
        f"On these random tokens the difference is visible in float32 for any RMS below ≈ {fp32_crossover:.1f} when "
        f"ε = {short(eps)}.",
        {
            "vs_outside_reference": check.a2_vs_outside_reference,
            "vs_torch": check.a2_vs_torch,
            f"float32_crossover_rms_eps_{short(eps)}": fp32_crossover,
            f"bfloat16_crossover_rms_eps_{short(eps)}": bf16_crossover,
            "tolerance": formula_tol,
            "authors_implementations_with_eps_outside": "1 of 4 (rmsnorm_torch.py)",
        },
        key_number=check.a2_vs_torch,
        threshold=formula_tol,
        spread=check.a2_gap_spread,
        **A2_KEY.fields(),
        reads=("formula_tol",),
    )
    paragraph = (
        f"**Q1, A2.** PyTorch, LLaMA, T5, Gemma and three of the authors' four implementations put ε inside the root. "
        f"The two placements differ by ≈ |ε/r − ε/(2r²)|: for ε = {short(eps)} the stored float32 output changes "
        f"below RMS ≈ {fp32_crossover:.2g} ({share32_at_1:.0%} of elements at RMS 1), bfloat16 only below "
        f"{bf16_crossover:.1e}."
    )
    return PlacementFindings(q1, a2, paragraph)
