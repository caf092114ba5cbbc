"""Section "Does the difference change with the model's size?": the scale ladder, A9's paired difference at
several model sizes, and the trend from the smallest rung to the largest (evidence for A9)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from normlab.analysis.quality.loss_parity import LossParity, loss_parity
from normlab.analysis.quality.profiles import NORMS
from normlab.analysis.quality.training import hardware_label, parameter_count, train_many
from normlab.analysis.shared.missing_runs import RunGaps
from normlab.analysis.shared.parity import t975
from normlab.study.key_numbers import NATS_PER_BYTE

# Narang et al. 2021, "Do Transformer Modifications Transfer Across Implementations and Applications?" (EMNLP
# 2021, arXiv:2102.11972), main results table, T5-base: RMS Norm's final loss 1.821 against the vanilla
# Transformer's 1.838, about 220M parameters. As transcribed in issue 19 and data/paper_speed.md; not checked
# against the paper (no copy of it could be read here). Their loss is T5's span-corruption loss per token, not
# nats per byte: the point shows the size of a difference the literature calls real, not a comparable value.
NARANG_T5_BASE = {
    "parameters": 220e6,
    "difference": 1.821 - 1.838,  # RMSNorm − LayerNorm, the ladder's sign: RMSNorm lower
    "label": "Narang et al. 2021, T5-base (as transcribed in the issue, unverified)",
}


T_INTERVAL = "95% t-interval"  # a rung's band when its pairs were fixed before any look
LADDER_COLUMNS = ("label", "parameters", "mean_difference", "ci_low", "ci_high", "half_width", "pairs", "hardware")


def rung_settings(settings: dict, rung: dict) -> dict:
    """The chapter's settings with one ladder rung's model size and pairs (its steps too, if the rung sets them)."""
    return {**settings, **rung}


def ladder_point(settings: dict, parity: LossParity, hardware_name: str) -> dict:
    """One rung: the paired final-loss difference RMSNorm − LayerNorm with its 95% t-interval (every rung's pairs,
    the chapter's own size's included, A9's confirmation, were set before any of them was read), and the model's
    size."""
    pair = parity.final_pair
    if pair is None:
        raise ValueError(
            f"ladder rung width={settings['width']} depth={settings['depth']}: run(s) {parity.diverged} diverged, "
            f"so it has no paired difference; lower the rung's lr or steps, or drop the rung"
        )
    return {
        "label": f"width {settings['width']}, depth {settings['depth']}",
        "parameters": parameter_count(settings),
        "width": settings["width"],
        "depth": settings["depth"],
        "steps": settings["steps"],
        "pairs": pair["pairs"],
        "mean_difference": pair["mean_difference"],
        "ci_low": pair["ci_low"],
        "ci_high": pair["ci_high"],
        "half_width": pair["half_width"],
        "interval": pair.get("interval", T_INTERVAL),
        "standard_error": pair["standard_error"],
        "last_drop": parity.last_drop,
        "hardware": hardware_name,
    }


LADDER_GAPS = "Each rung is compared on its complete pairs, and a rung left with fewer than two is left out."


def scale_ladder_runs(settings: dict, devices: list[str] | None, margin: float) -> tuple[list[dict], RunGaps]:
    """Train every ladder rung of the profile as pairs (same seeds, initial weights and batches per pair) and
    return one `ladder_point` per rung, with the runs missing from any rung (`RunGaps`). The chapter's own size is
    not among them: its pairs are already trained. A rung left with fewer than two complete pairs has no interval,
    and is left out.

    Budget (cpu profile, 2 cores, the pool: two single-threaded trainings at a time). Median step times measured
    alone at load average ~10, LayerNorm / RMSNorm: width 128 depth 5 (1.06M) 0.89 / 0.75 s, width 112 depth 4
    (669k) 0.46 / 0.53 s, the chapter's width 64 depth 4 (235k) 0.30 / 0.20 s and 0.30 / 0.43 s, width 16 depth 2
    (15k) 0.063 / 0.072 s. Scaled to the 0.073 s step of a quiet machine's chapter run, 4 pairs x 600 steps at 669k
    take about 5 min and 6 pairs at 15k about 1 min; 3 pairs at 1.06M would have taken about 7 min alone. The cpu
    profile dropped its 669k rung on 2026-12-08 (its profile says why)."""
    device = devices[0] if devices else "cpu"
    # the largest rung's jobs first, so that the small ones fill the workers' idle time at the end
    rungs = sorted((rung_settings(settings, rung) for rung in settings["ladder"]), key=parameter_count, reverse=True)
    trained = train_many(rungs, devices, keep_weights=False)
    points = [
        ladder_point(s, loss_parity(runs, margin), hardware_label(device))
        for s, runs in zip(rungs, trained)
        if len(runs) >= 2 * len(NORMS)
    ]
    gaps = sum((runs.gaps for runs in trained), RunGaps())
    return sorted(points, key=lambda point: point["parameters"]), gaps


def _checked_extra_point(point: dict, index: int) -> dict:
    missing = [key for key in LADDER_COLUMNS if key not in point]
    if missing:
        raise ValueError(f"gpu_rungs[{index}] lacks {missing}: each extra rung needs {list(LADDER_COLUMNS)}")
    if not isinstance(point["hardware"], str) or not point["hardware"].strip():
        raise ValueError(f"gpu_rungs[{index}] has no hardware label: say what it was measured on, e.g. 'NVIDIA H200'")
    numbers = [point[key] for key in LADDER_COLUMNS if key not in ("label", "hardware")]
    if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in numbers) or point["parameters"] <= 0:
        raise ValueError(f"gpu_rungs[{index}] ({point['label']}): every number must be finite, parameters > 0")
    if (
        point["pairs"] < 2
        or point["half_width"] < 0
        or not point["ci_low"] <= point["mean_difference"] <= point["ci_high"]
    ):
        raise ValueError(f"gpu_rungs[{index}] ({point['label']}): needs >= 2 pairs and ci_low <= mean <= ci_high")
    return dict(point)


def ladder_table(points: list[dict], gpu_rungs: list[dict] = ()) -> pd.DataFrame:
    """Every rung, smallest model first: this run's points and any extra ones (a committed GPU study's rungs),
    each labelled with the hardware it was measured on. Extra rungs are checked: a clear error names what is missing."""
    extra = [_checked_extra_point(point, k) for k, point in enumerate(gpu_rungs)]
    if len(points) + len(extra) < 2:
        raise ValueError("a scale ladder needs at least two rungs")
    table = pd.DataFrame([*points, *extra])
    return table.sort_values("parameters", kind="stable").reset_index(drop=True)


@dataclass
class LadderTrend:
    outcome: str  # "shrinks", "grows", "stays within the margin" or "cannot tell"
    change: float  # largest rung's mean difference minus the smallest's
    change_low: float  # its 95% interval
    change_high: float
    all_inside: bool  # every rung's interval inside ±margin
    sentence: str


def _standard_error(row) -> float:
    # this run's rungs record it (a confidence sequence's half-width is no t multiple of it); a committed rung's
    # t-interval gives it back
    recorded = row.get("standard_error")
    return (
        float(recorded)
        if recorded is not None and math.isfinite(recorded)
        else row["half_width"] / t975(row["pairs"] - 1)
    )


def ladder_trend(table: pd.DataFrame, margin: float) -> LadderTrend:
    """How the paired difference moves from the smallest rung to the largest, by the rule the chapter states:
    the change (largest − smallest mean difference, Welch 95% interval) excludes zero: the difference *shrinks*
    when the largest rung's |mean| is the smaller, else it *grows*; the change's interval holds zero and every
    rung's interval lies inside ±margin: it *stays within the margin*; otherwise the run *cannot tell*."""
    small, large = table.iloc[0], table.iloc[-1]
    se_small, se_large = _standard_error(small), _standard_error(large)
    se = math.hypot(se_small, se_large)
    change = float(large["mean_difference"] - small["mean_difference"])
    if se > 0:
        df = se**4 / (se_small**4 / (small["pairs"] - 1) + se_large**4 / (large["pairs"] - 1))
        half = t975(max(df, 1.0)) * se
    else:
        half = 0.0
    low, high = change - half, change + half
    all_inside = bool(((table.ci_low > -margin) & (table.ci_high < margin)).all())
    moved = low > 0 or high < 0
    if moved:
        outcome = "shrinks" if abs(large["mean_difference"]) < abs(small["mean_difference"]) else "grows"
    else:
        outcome = "stays within the margin" if all_inside else "cannot tell"
    span = f"from {small['parameters'] / 1e3:,.0f}k to {large['parameters'] / 1e3:,.0f}k parameters"
    moved_text = f"it moved by {change:+.4f} {NATS_PER_BYTE} (95% CI {low:+.4f}..{high:+.4f})"
    inside_text = f"every rung's interval lies inside ±{margin:g} {NATS_PER_BYTE}"
    if outcome in ("shrinks", "grows"):
        tail = f", and {inside_text}" if all_inside else ""
        sentence = f"As the model grows {span}, the difference **{outcome}**: {moved_text}{tail}."
    elif outcome == "stays within the margin":
        sentence = (
            f"As the model grows {span}, the difference **stays within the margin**: {inside_text}, and {moved_text}."
        )
    else:
        widest = table.loc[(table.ci_high - table.ci_low).idxmax()]
        sentence = (
            f"As the model grows {span}, this run **cannot tell** whether the difference shrinks or grows: {moved_text}, "
            f"and the interval at {widest['label']} ({widest['ci_low']:+.4f}..{widest['ci_high']:+.4f}) is not inside "
            f"±{margin:g} {NATS_PER_BYTE}; more pairs per rung would decide it."
        )
    return LadderTrend(outcome, change, low, high, all_inside, sentence)


def ladder_evidence(table: pd.DataFrame, trend: LadderTrend) -> dict:
    """The ladder's numbers as A9 evidence: one entry per rung and the trend."""
    return {
        "rungs": table.to_dict(orient="records"),
        "trend": trend.outcome,
        "change_largest_minus_smallest": trend.change,
        "change_ci": [trend.change_low, trend.change_high],
        "all_rungs_inside_margin": trend.all_inside,
        "reference_point": NARANG_T5_BASE,
    }


def ladder_display(table: pd.DataFrame) -> pd.DataFrame:
    """The ladder as the page shows it, each band named (a committed rung's is a t-interval)."""
    bands = table["interval"].fillna(T_INTERVAL) if "interval" in table else [T_INTERVAL] * len(table)
    return pd.DataFrame(
        {
            "model": table["label"],
            "parameters": table["parameters"].map(lambda p: f"{p / 1e3:,.0f}k"),
            "pairs": table["pairs"].astype(int).astype(str),
            f"RMSNorm − LayerNorm ({NATS_PER_BYTE})": table["mean_difference"].map(lambda v: f"{v:+.4f}"),
            "95% band": [
                f"{lo:+.4f}..{hi:+.4f} ({kind.removeprefix('95% ')})"
                for lo, hi, kind in zip(table.ci_low, table.ci_high, bands)
            ],
            "measured on": table["hardware"],
        }
    )
