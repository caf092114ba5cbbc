"""Section "Which part of an update the normalisation removes": an update split into its radial and
tangential parts, and B12's verdict."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import torch

from normlab.analysis.jacobians.against_autograd import PRINTED_JACOBIAN, FormulaCheck
from normlab.analysis.jacobians.closed_forms import radial_tangential
from normlab.analysis.jacobians.epsilon import gap_per_eps
from normlab.analysis.jacobians.null_space import StructureCheck
from normlab.analysis.jacobians.one_over_r import exact_scaling_error, rms_where_broken
from normlab.study import decide
from normlab.study.findings import Finding
from normlab.study.key_numbers import DIMENSIONLESS, KeyNumber
from normlab.study.present import table

B12_KEY = KeyNumber("relative error of the essay's printed Jacobian", DIMENSIONLESS)

RADIAL_COLUMNS = ["radial kept", "tangential error", "output change along y"]


def radial_table(dims, tokens: int, generator: torch.Generator) -> pd.DataFrame:
    """`radial_tangential` for random offset tokens and random changes."""
    rows = []
    for d in dims:
        for _ in range(tokens):
            x = torch.randn(d, generator=generator, dtype=torch.float64) + torch.randn(
                (), generator=generator, dtype=torch.float64
            )
            v = torch.randn(d, generator=generator, dtype=torch.float64)
            rows.append({"d": d, **radial_tangential(x, v)})
    return pd.DataFrame(rows)


@dataclass
class RadialCheck:
    radial: pd.DataFrame  # radial_table
    machine_tol: float

    @property
    def worst(self) -> pd.Series:
        return self.radial[RADIAL_COLUMNS].max()

    @property
    def removed(self) -> bool:
        return bool(self.worst["radial kept"] < self.machine_tol)

    @property
    def tangential_passed(self) -> bool:
        return bool(self.worst["tangential error"] < self.machine_tol)

    @property
    def moves_on_sphere(self) -> bool:
        return bool(self.worst["output change along y"] < self.machine_tol)


def radial_summary_table(check: RadialCheck, dims):
    return table(
        pd.DataFrame(
            {
                "quantity": [
                    "share of the radial part kept, ‖J v_r‖/(‖J‖‖v_r‖)",
                    "tangential part: ‖J v_t − v_t/r‖ / ‖v_t/r‖",
                    "output change along y: |y·Jv| / (‖y‖‖Jv‖)",
                ],
                "worst over tokens": check.worst.values,
                "sd over tokens": check.radial[RADIAL_COLUMNS].std().values,
            }
        ),
        caption=f"RMSNorm's Jacobian (ε = 0) applied to the radial and tangential parts of random changes, "
        f"{len(check.radial)} tokens, d ∈ {dims}.",
    )


def b12_finding(
    formulas: FormulaCheck,
    structure: StructureCheck,
    scaling: pd.DataFrame,
    eps_effect: pd.DataFrame,
    jacobian_gap: float,
    radial: RadialCheck,
    dims,
    machine_tol: float,
    wrong_tol: float,
) -> Finding:
    """B12: the exact Jacobian, the 1/r law, the removed scale direction and LayerNorm's extra projection
    against `machine_tol`; a caveat when the printed form is off by more than `wrong_tol` (the key number).
    `jacobian_gap` is `mean_projection_gap` of the zero-mean heatmap."""
    printed, exact, layer = formulas.printed_jacobian_error, formulas.exact_jacobian_error, formulas.layer_norm_error
    scaling_error, null_kept, worst = exact_scaling_error(scaling), structure.null_kept, radial.worst
    finding = Finding(
        decide(
            exact < machine_tol
            and layer < machine_tol
            and scaling_error < machine_tol
            and null_kept["RMS: J x"] < machine_tol
            and structure.rank_ok,
            caveat=printed > wrong_tol,
        ),
        f"The printed (1/r)(I − x̂x̂ᵀ) is off by {printed:.1f} (relative max error): since ‖x̂‖² = d the exact "
        f"Jacobian is (1/r)(I − x̂x̂ᵀ/d), matching autograd to {exact:.0e}. The projection, the exact 1/r law "
        f"(error {scaling_error:.0e}) and LayerNorm's extra projection J_LN = J_RMS(Px)·P all hold. It removes the "
        f"radial part of a change (kept ≤ {float(worst['radial kept']):.0e}) and passes the tangential part as v/r, "
        f"so an update can only turn the normalised vector: the essay's 'the update does not change its direction' "
        f"is backwards.",
        {
            "printed_form_error": printed,
            "exact_form_error": exact,
            "layer_norm_form_error": layer,
            "one_over_r_error_eps0": scaling_error,
            "rms_scale_leak": null_kept["RMS: J x"],
            "rms_keeps_mean_direction_min": structure.rms_keeps_ones,
            "rms_scale_leak_with_eps_1e-6": structure.eps_scale_leak,
            "one_over_r_broken_below_rms_eps_1e-6": rms_where_broken(scaling),
            "eps_free_gap_per_eps_ratio": gap_per_eps(eps_effect),
            "zero_mean_difference_vs_11T_over_d": jacobian_gap,
            "tolerance": machine_tol,
            "wrong_threshold": wrong_tol,
            "dims": dims,
            "radial_part_kept_max": float(worst["radial kept"]),
            "tangential_part_error_max": float(worst["tangential error"]),
            "output_change_along_y_max": float(worst["output change along y"]),
            "essay_radial_removed_right": radial.removed,
            "essay_direction_unchanged_right": False if radial.tangential_passed and radial.moves_on_sphere else None,
        },
        key_number=printed,
        threshold=wrong_tol,
        spread=float(formulas.sd[PRINTED_JACOBIAN]),
        **B12_KEY.fields(),
        reads=("machine_tol", "wrong_tol"),
    )
    finding.scale = b12_scale(finding)
    finding.headline = b12_headline(finding)
    return finding


def b12_scale(b12: Finding) -> str:
    """Where the Jacobians were checked: the widths, in float64."""
    dims = b12.evidence.get("dims") or []
    widths = " and ".join(str(int(d)) for d in dims)
    return f"at widths {widths}, in float64" if widths else "in float64"


def b12_headline(b12: Finding) -> str | None:
    """The opening page's sentence on B12 (at most 35 words); None without a key number or threshold."""
    k, t = b12.key_number, b12.threshold
    if k is None or t is None:
        return None
    wrong = k > t
    return (
        f"Checked {b12.scale or b12_scale(b12)}, the essay's printed RMSNorm Jacobian (1/r)(I−x̂x̂ᵀ) is "
        f"{'off from' if wrong else 'within'} autograd by {B12_KEY.format(k)} (relative error), "
        f"{'beyond' if wrong else 'inside'} the {B12_KEY.limit(t)} tolerance"
        + (": its structure holds, not the printed formula." if b12.verdict == "holds with caveats" and wrong else ".")
    )
