"""Section "Null directions, ranks and LayerNorm's extra projection", with its B3 subsection: each
Jacobian's null directions and rank, and B3's verdict combined with the geometry chapter's evidence."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import torch

from normlab.analysis.jacobians.against_autograd import LAYER_NORM_FORMS, FormulaCheck
from normlab.analysis.jacobians.closed_forms import autograd_rms_gradients, cosine, null_directions
from normlab.study import decide
from normlab.study.findings import Finding
from normlab.study.key_numbers import DIMENSIONLESS, KeyNumber
from normlab.study.present import table

B3_KEY = KeyNumber("relative error of J_LN = J_RMS(Px)·P", DIMENSIONLESS)


def structure_table(dims, tokens: int, generator: torch.Generator, eps_typical: float) -> pd.DataFrame:
    """`null_directions` for random offset tokens, each with ε = 0 and ε = eps_typical."""
    rows = []
    for d in dims:
        for _token in range(tokens):
            x = torch.randn(d, generator=generator, dtype=torch.float64) + torch.randn(
                (), generator=generator, dtype=torch.float64
            )
            for eps in (0.0, eps_typical):
                rows.append({"d": d, "eps": eps, **null_directions(x, eps)})
    return pd.DataFrame(rows)


@dataclass
class StructureCheck:
    structure: pd.DataFrame  # structure_table

    @property
    def free(self) -> pd.DataFrame:
        return self.structure[self.structure.eps == 0]

    @property
    def rank_ok(self) -> bool:
        """Ranks d − 1 (RMSNorm) and d − 2 (LayerNorm) for every token with ε = 0."""
        free = self.free
        return bool(((free["RMS rank"] == free.d - 1) & (free["LN rank"] == free.d - 2)).all())

    @property
    def null_kept(self) -> dict[str, float]:
        """With ε = 0, the largest share each Jacobian keeps of a direction its norm is invariant to."""
        return {col: float(self.free[col].max()) for col in ("RMS: J x", "LN: J x", "LN: J 1")}

    @property
    def rms_keeps_ones(self) -> float:
        return float(self.free["RMS: J 1"].min())

    @property
    def eps_scale_leak(self) -> float:
        return float(self.structure[self.structure.eps > 0]["RMS: J x"].max())

    @property
    def eps_shift_leak(self) -> float:
        return float(self.structure[self.structure.eps > 0]["LN: J 1"].max())


def structure_summary_table(check: StructureCheck):
    summary = check.structure.groupby("eps")[["RMS: J x", "RMS: J 1", "LN: J x", "LN: J 1"]].max()
    return table(
        summary.reset_index(),
        caption=f"Largest share of each direction a Jacobian keeps, ‖Jv‖/(‖J‖‖v‖), per ε "
        f"(0 = removed). Ranks d − 1 (RMSNorm) and d − 2 (LayerNorm) for every token with ε = 0: {check.rank_ok}.",
    )


def max_gradient_cosine(dims, tokens: int, generator: torch.Generator) -> float:
    """Largest |cos(∂ℓ/∂x, x)| over random offset tokens: the input gradient is orthogonal to x."""
    cosines = []
    for d in dims:
        for _ in range(tokens):
            x, gain, upstream = (torch.randn(d, generator=generator, dtype=torch.float64) for _ in range(3))
            grad_x, _ = autograd_rms_gradients(x + 3.0, gain, upstream)
            cosines.append(abs(cosine(grad_x, x + 3.0)))
    return max(cosines)


def b3_finding(
    formulas: FormulaCheck, structure: StructureCheck, geometry_b3: dict | None, machine_tol: float
) -> Finding:
    """B3 from this chapter's Jacobian part and the geometry chapter's invariance part (its evidence record,
    None when it has not run), by the rule the chapter states."""
    layer_norm_error, null_kept = formulas.layer_norm_error, structure.null_kept
    jacobian_part = bool(
        layer_norm_error < machine_tol
        and null_kept["LN: J 1"] < machine_tol
        and null_kept["LN: J x"] < machine_tol
        and structure.rank_ok
    )
    if geometry_b3 is None:
        geometry_part, geometry_caveat = True, True
        geometry_text = "the geometry chapter has not run, so its invariance part is missing"
    else:
        g = geometry_b3["evidence"]
        geometry_part = bool(g.get("shift_ok") and g.get("scale_ok") and g.get("direction_ok"))
        geometry_caveat = bool(g.get("precision_caveat"))
        geometry_text = "geometry part: " + geometry_b3["summary"]
    return Finding(
        decide(jacobian_part and geometry_part, caveat=geometry_caveat),
        f"Jacobian part: J_LN = J_RMS(Px)·P with P = I − 11ᵀ/d to {layer_norm_error:.1e} (relative) and J_LN "
        f"annihilates 1 and x (leak ≤ {max(null_kept['LN: J 1'], null_kept['LN: J x']):.0e}), rank d−2. "
        f"{geometry_text[:1].upper()}{geometry_text[1:]}",
        {
            "layer_norm_jacobian_error": layer_norm_error,
            "ln_shift_leak": null_kept["LN: J 1"],
            "ln_scale_leak": null_kept["LN: J x"],
            "ranks_as_expected": structure.rank_ok,
            "ln_shift_leak_with_eps_1e-6": structure.eps_shift_leak,
            "tolerance": machine_tol,
            "jacobian_part_holds": jacobian_part,
            "geometry_part_present": geometry_b3 is not None,
            "geometry_part_holds": geometry_part if geometry_b3 is not None else None,
            "geometry_precision_caveat": geometry_caveat,
        },
        key_number=layer_norm_error,
        threshold=machine_tol,
        spread=float(formulas.sd[LAYER_NORM_FORMS].max()),
        **B3_KEY.fields(),
        reads=("machine_tol",),
    )
