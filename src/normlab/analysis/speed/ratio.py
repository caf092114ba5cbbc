"""Section "The LayerNorm/RMSNorm time ratio, implementation by implementation": the LN/RMS ratios at the
training batch, and the per-implementation savings the verdicts quote."""

from __future__ import annotations

import pandas as pd

from normlab.bench import report


def pct(value: float) -> str:
    """A share as a signed percentage, with one decimal below half a percent (the verdicts' sentences)."""
    return f"{value:+.0%}" if abs(value) >= 0.005 else f"{value:+.1%}"


def saving_ranges(ratios: pd.DataFrame) -> dict[str, dict]:
    """Per implementation: the median saving over the shapes given, its spread, and how many points."""
    summary = report.implementation_summary(ratios)
    return {
        row["implementation"]: {"median": row["median saving"], "sd": row["saving sd"], "points": int(row["points"])}
        for _, row in summary.iterrows()
    }


def describe_ranges(ranges: dict[str, dict]) -> str:
    return "; ".join(f"{name} {pct(r['median'])} ± {abs(r['sd']):.0%}" for name, r in sorted(ranges.items()))


def training_subset(ratios: pd.DataFrame) -> pd.DataFrame:
    """The rows of an `ln_rms_ratios` frame at the training-like batch: the forward d sweep and forward+backward (allocating)."""
    return ratios[ratios["study"].isin(["sweep", "backward"]) & (ratios["mode"] == "alloc")]


def training_ratios(df: pd.DataFrame) -> pd.DataFrame:
    """LN/RMS ratios at the training-like batch: the forward d sweep and the forward+backward cases (allocating calls)."""
    return training_subset(report.ln_rms_ratios(df))


def forward_sweep(frame: pd.DataFrame) -> pd.DataFrame:
    """The forward cases at the training batch: the row-length sweep, allocating its output."""
    return frame[(frame["study"] == "sweep") & (frame["mode"] == "alloc")]
