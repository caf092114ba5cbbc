"""V3, QK-norm and the learning-rate range, under Wortsman et al.'s protocol: the small model with and without
QK-norm over a learning-rate grid wide enough to reach divergence (`qk_lr_grid`, 1.5e-3 to 1.5 on the cpu profile),
every point on `qk_seeds` seeds. Their LR sensitivity (`lr_sensitivity`: the mean over the grid of min(final loss,
initial loss) − the best final loss) per seed and variant (`sensitivity_rows`), the largest attention logit at the
end of training (`final_logits`), each seed's stable (non-diverging) range (`stable_range_table`), and the verdict
on the paired reduction of sensitivity (`qk_claim`) with its paragraph (`qk_paragraph`). Divergence is the run
record's (`normlab.gpt.run_record`).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from normlab.analysis.landscape.method import Landscape, verdict_lead
from normlab.analysis.shared.paired import paired_or_none
from normlab.study.findings import Finding
from normlab.study.key_numbers import NATS_PER_BYTE, KeyNumber
from normlab.study.present import significant
from normlab.study.results import decide
from normlab.study.verdict_rules import ABOVE, ACROSS, BELOW, side_of

QK_COMPARED = ("rms", "rms+qk")
QK_NAMES = {"rms": "no QK-norm", "rms+qk": "QK-norm"}
V3_KEY = KeyNumber("reduction of LR sensitivity with QK-norm (Wortsman et al.), without minus with", NATS_PER_BYTE)


def qk_grid(settings: dict) -> list[float]:
    """V3's wide grid; a design without one (a GPU study committed before it existed) has the small grid."""
    return list(settings.get("qk_lr_grid", settings["lr_grid"]))


def qk_seed_count(settings: dict) -> int:
    return int(settings.get("qk_seeds", settings["grid_seeds"]))


def _final_logit(study: Landscape, label: str, lr: float) -> float | None:
    rs = [
        r
        for r in study.runs
        if r["tag"]["scale"] == "small"
        and r["tag"]["label"] == label
        and r["tag"]["lr"] == lr
        and r["tag"]["seed"] == 0
        and r["max_logit"]
    ]
    return rs[0]["max_logit"][-1]["max_logit"] if rs else None


def final_logits(study: Landscape) -> pd.DataFrame:
    """The largest attention logit at the end of training (seed 0), with and without QK-norm, per learning rate."""
    return pd.DataFrame(
        [
            {
                "learning rate": lr,
                "largest logit, no QK-norm": _final_logit(study, "rms", lr),
                "largest logit, QK-norm": _final_logit(study, "rms+qk", lr),
            }
            for lr in qk_grid(study.settings)
        ]
    )


def lr_sensitivity(finals: list[float], initials: list[float], diverged: list[bool]) -> float:
    """Wortsman et al.'s LR sensitivity over one grid: the mean of min(final loss, initial loss) − the best final
    loss on the grid. A diverged run (the run record's rule) counts at its initial loss, as min(·, initial) caps
    a blown-up one; NaN when every run diverged (there is no best loss)."""
    if not (len(finals) == len(initials) == len(diverged)) or not finals:
        raise ValueError("lr_sensitivity needs one final loss, initial loss and divergence flag per grid point")
    capped = [
        float(init) if (d or not math.isfinite(final)) else min(float(final), float(init))
        for final, init, d in zip(finals, initials, diverged)
    ]
    trained = [float(f) for f, d in zip(finals, diverged) if not d and math.isfinite(f)]
    if not trained:
        return math.nan
    return float(np.mean(capped)) - min(trained)


def sensitivity_rows(study: Landscape) -> pd.DataFrame:
    """Per seed of the wide grid and variant: the LR sensitivity, the best loss and where, and how many grid points
    diverged. A seed that lacks a grid point (a run failed every attempt) is left out."""
    grid, seeds = qk_grid(study.settings), range(qk_seed_count(study.settings))
    width = study.settings["small"]["width"]
    by_point = {
        (r["tag"]["label"], r["tag"]["seed"], r["tag"]["lr"]): r
        for r in study.runs
        if r["tag"]["scale"] == "small"
        and r["tag"]["label"] in QK_COMPARED
        and r["model"]["width"] == width
        and r["tag"].get("reference_alpha", True)
    }
    rows = []
    for seed in seeds:
        for label in QK_COMPARED:
            runs = [by_point.get((label, seed, lr)) for lr in grid]
            if any(r is None for r in runs):
                continue
            finals = [r["final_val_loss"] for r in runs]
            initials = [r["initial_val_loss"] for r in runs]
            diverged = [bool(r["diverged"]) for r in runs]
            trained = [(f, lr) for f, lr, d in zip(finals, grid, diverged) if not d and math.isfinite(f)]
            best = min(trained) if trained else (math.nan, None)
            rows.append(
                {
                    "seed": seed,
                    "model": QK_NAMES[label],
                    "label": label,
                    "LR sensitivity": lr_sensitivity(finals, initials, diverged),
                    "best loss": best[0],
                    "best LR": best[1],
                    "diverged points": sum(diverged),
                    "first diverging LR": next((lr for lr, d in zip(grid, diverged) if d), None),
                }
            )
    return pd.DataFrame(rows)


def stable_range_table(study: Landscape) -> pd.DataFrame:
    """Per seed of the wide grid, with and without QK-norm: the learning rates at which the run did not diverge
    (the run record's rule) and the first one above them that diverged."""
    ranges = study.stable_ranges(
        "small", QK_COMPARED, grid=qk_grid(study.settings), seeds=range(qk_seed_count(study.settings))
    )
    return pd.DataFrame(
        [
            {
                "seed": int(seed),
                "model": QK_NAMES[label],
                "stable from": r["lr_low"],
                "stable to": r["lr_high"],
                "first diverging LR": r["fails_at"],
            }
            for (label, seed), r in sorted(ranges.items(), key=lambda item: (item[0][1], item[0][0]))
        ]
    )


def sensitivity_verdict(
    instability: bool, reduction: dict | None, *, sensitivity_margin: float, seeds: int, min_seeds: int
) -> tuple[str, str | None]:
    """The verdict on the paired reduction of LR sensitivity, and why it is fragile (None when it is not): not
    testable without an instability on the grid or without an interval; holds when the interval lies above
    +margin, does not hold when it lies entirely below it, not testable (fragile) when it spans it. Fewer seeds
    than `min_seeds` mark a decided verdict fragile."""
    if not instability:
        return "not testable here", None
    if reduction is None:
        return "not testable here", "fragile: no paired interval (fewer than two complete seeds)"
    few = f"fragile: {seeds} seeds, fewer than the {min_seeds} registered" if seeds < min_seeds else None
    side = side_of(reduction, sensitivity_margin)
    if side == ABOVE:
        return decide(True), few
    if side == BELOW:
        return "does not hold", few
    return "not testable here", f"fragile: the interval spans the +{sensitivity_margin:g} margin"


def qk_claim(study: Landscape, logit_rows: pd.DataFrame, *, min_seeds: int, sensitivity_margin: float) -> Finding:
    """V3 under Wortsman et al.'s protocol. Instability must show: a run without QK-norm diverges somewhere on the
    wide grid (the run record's rule), else not testable here. The key number is the paired reduction of LR
    sensitivity (without − with QK-norm) over the grid's seeds; its 95% t-interval holds above
    +`sensitivity_margin` and does not hold entirely below it (`sensitivity_verdict`). A design without the wide
    grid is not testable under this protocol."""
    if isinstance(min_seeds, bool) or not isinstance(min_seeds, int) or min_seeds < 2:
        raise ValueError(f"qk_claim: min_seeds must be an int >= 2 (an interval needs two seeds), got {min_seeds!r}")
    P = study.settings
    grid = qk_grid(P)
    rows = sensitivity_rows(study)
    wide = "qk_lr_grid" in P
    complete = sorted(set(rows.seed[rows.label == "rms"]) & set(rows.seed[rows.label == "rms+qk"])) if len(rows) else []
    sens = {
        label: [float(rows[(rows.label == label) & (rows.seed == s)]["LR sensitivity"].iloc[0]) for s in complete]
        for label in QK_COMPARED
    }
    reduction = paired_or_none(sens["rms+qk"], sens["rms"], sensitivity_margin) if wide else None
    diverged_without = int(rows[rows.label == "rms"]["diverged points"].sum()) if len(rows) else 0
    diverged_with = int(rows[rows.label == "rms+qk"]["diverged points"].sum()) if len(rows) else 0
    instability = wide and diverged_without > 0
    verdict, fragile = sensitivity_verdict(
        instability, reduction, sensitivity_margin=sensitivity_margin, seeds=len(complete), min_seeds=min_seeds
    )
    ranges = study.stable_ranges("small", QK_COMPARED, grid=grid, seeds=range(qk_seed_count(P)))
    tops = {label: [ranges[(label, s)]["lr_high"] for s in complete if (label, s) in ranges] for label in QK_COMPARED}
    gains = [
        math.log10((b or min(grid) / 10**0.5) / (a or min(grid) / 10**0.5)) for a, b in zip(tops["rms"], tops["rms+qk"])
    ]
    if not wide:
        lead = "This design trains no wide learning-rate grid, so V3 is not testable under Wortsman et al.'s protocol."
    elif reduction is None:
        lead = "Fewer than two seeds completed the wide grid on both sides, so no paired interval exists."
    else:
        # the first sentence (the ledger's): whether the grid shows an instability, and the key number against the
        # margin; the sensitivities themselves follow it
        reduced = (
            f"QK-norm's reduction of LR sensitivity is {reduction['mean_difference']:+.3f} {NATS_PER_BYTE} (95% CI "
            f"{reduction['ci_low']:+.3f}..{reduction['ci_high']:+.3f}, {reduction['pairs']} seeds) against a "
            f"+{sensitivity_margin:g} margin"
        )
        if not instability:
            lead = (
                f"No run without QK-norm diverged on {len(grid)} learning rates from {significant(grid[0])} to "
                f"{significant(grid[-1])}, so the instability to remove is absent; {reduced}."
            )
        else:
            spans = side_of(reduction, sensitivity_margin) == ACROSS
            lead = (
                f"Over {len(grid)} learning rates from {significant(grid[0])} to {significant(grid[-1])}, "
                f"{reduced}{', undecided' if spans else ''}."
            )
        lead += (
            f" LR sensitivity (mean of min(final, initial loss) − best loss) is "
            f"{significant(float(np.mean(sens['rms'])))} without QK-norm and "
            f"{significant(float(np.mean(sens['rms+qk'])))} with it."
        )
    summary = (
        f"{lead} Without QK-norm {diverged_without} of {len(grid) * len(complete)} grid runs diverged, with it "
        f"{diverged_with}"
        + (f"; the highest stable LR rises by {significant(float(np.mean(gains)))} decades on average" if gains else "")
        + (f" ({fragile})" if fragile else "")
        + "."
    )
    return Finding(
        verdict,
        summary,
        {
            "lr_sensitivity": {label: dict(zip(map(int, complete), v)) for label, v in sens.items()},
            "sensitivity_reduction": reduction,
            "sensitivity_per_seed": rows.drop(columns=["label"]).to_dict("records"),
            "diverged_without_qk": diverged_without,
            "diverged_with_qk": diverged_with,
            "instability_shows": instability,
            "fragile": fragile,
            "min_seeds": min_seeds,
            "gain_decades_per_seed": gains,
            "stable_range_per_seed": {f"{label} seed {seed}": r for (label, seed), r in ranges.items()},
            "usable_range_rms": study.usable_range("small", "rms", QK_COMPARED),
            "usable_range_qk": study.usable_range("small", "rms+qk", QK_COMPARED),
            "final_max_logit": logit_rows.to_dict("records"),
            "qk_minus_rms_at_reference_lr": study.versus("small", "rms", "rms+qk"),
            "qk_lr_grid": grid,
            "qk_seeds": qk_seed_count(P),
            "model": P["small"],
            "train": P["small_train"],
            "corpus_sha256": study.corpus_sha256,
        },
        key_number=reduction["mean_difference"] if reduction else None,
        threshold=sensitivity_margin,
        spread=reduction["standard_error"] if reduction else None,
        meaning=V3_KEY.meaning,
        unit=V3_KEY.unit,
        # V3's arms for the did-it-train rule, at the reference learning rate (the wide grid diverges by design)
        arms=study.arms("small", QK_NAMES),
    )


def qk_paragraph(v3: Finding) -> str:
    """V3's verdict paragraph: the finding's verdict and sentence, and what this scale can show."""
    e = v3.evidence
    grid = e["qk_lr_grid"]
    return verdict_lead("V3", v3) + (
        f"**What this scale can and cannot show:** Wortsman et al. designed this proxy for small models (their "
        "smallest have millions of parameters; they find the attention-logit instability there at high learning "
        "rates), so this is the claim small scale tests best. The runs here clip gradients at norm 1 and decay "
        "weights, as the rest of the book does, and train without z-loss; clipping can hold off a divergence that "
        f"unclipped training would show, and half-decade steps from {significant(grid[0])} to "
        f"{significant(grid[-1])} locate a divergence only to within a factor of about 3."
    )
