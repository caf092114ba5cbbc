"""Section "Small-batch inference (B10)": latencies at 1-16 rows, and B10."""

from __future__ import annotations

import pandas as pd

from normlab.analysis.speed.hardware import sources, weigh
from normlab.analysis.speed.ratio import describe_ranges, saving_ranges
from normlab.analysis.speed.runs import unstable_cases
from normlab.bench import report
from normlab.study import decide, design
from normlab.study.findings import Finding
from normlab.study.key_numbers import SHARE, KeyNumber

B10_KEY = KeyNumber("median share of LayerNorm's latency RMSNorm saves at 1–16 rows", SHARE)


def few_percent() -> tuple[float, float]:
    """Article B's "a few percent" (B10) as the design registers it, read as 1%-10%."""
    return design.value("B10", "few_percent")


def small_batch_ratios(df: pd.DataFrame) -> pd.DataFrame:
    ratios = report.ln_rms_ratios(df)
    return ratios[(ratios["study"] == "small-batch") & (ratios["mode"] == "alloc")]


def _rows_text(ratios: pd.DataFrame) -> str:
    low, high = int(ratios["rows"].min()), int(ratios["rows"].max())
    return f"{low} row{'s' if low > 1 else ''}" if low == high else f"{low}-{high} rows"


def _b10(df: pd.DataFrame) -> Finding:
    """B10: in small-batch inference the pass RMS saves is a few percent of throughput."""
    ratios = small_batch_ratios(df)
    if ratios.empty:
        return Finding(
            "not testable here",
            "No small-batch case was timed stably in this run; the small-batch study times it.",
            {"unstable_cases": unstable_cases(df)},
            **B10_KEY.fields(),
        )
    few = few_percent()
    ranges = saving_ranges(ratios)
    median = float(ratios["saving"].median())
    spread = float(ratios["saving_sd"].median())
    inside = few[0] <= median <= few[1]
    nearest = min(few, key=lambda edge: abs(edge - median))
    outside = sum(not few[0] <= r["median"] <= few[1] for r in ranges.values())
    return Finding(
        decide(inside, caveat=inside and outside > 0),
        # the first sentence (the ledger's): the key number against 'a few percent'; per implementation after it
        f"At {_rows_text(ratios)} RMSNorm saves a median {median:+.1%} of LayerNorm's latency over {len(ratios)} "
        f"stable points, {'inside' if inside else 'outside'} the {few[0]:.0%}–{few[1]:.0%} read as "
        f"'a few percent'"
        + (f", though {outside} of {len(ranges)} implementations' medians lie outside" if inside and outside else "")
        + f". Per implementation: {describe_ranges(ranges)}; sd {spread:.0%}.",
        {
            "per_implementation": ranges,
            "median_saving": median,
            "saving_sd": spread,
            "few_percent": few,
            "unstable_cases": unstable_cases(df),
        },
        key_number=median,
        threshold=nearest,
        spread=spread,
        **B10_KEY.fields(),
        reads=("few_percent",),
    )


def b10(df, *, gpu=None) -> Finding:
    """B10 on each hardware (see `_b10`), weighed."""
    return weigh([(m, _b10(m.frame)) for m in sources(df, gpu)])


SMALL_BATCH_COLUMNS = ["implementation", "dtype", "rows", "d", "t_LN (µs)", "t_RMS (µs)", "ratio_ln_over_rms"]


def latencies(small: pd.DataFrame) -> pd.DataFrame:
    return small.assign(**{"t_LN (µs)": small["t_ln_s"] * 1e6, "t_RMS (µs)": small["t_rms_s"] * 1e6})


def small_batch_frame(ratios: pd.DataFrame) -> pd.DataFrame:
    """This run's small-batch latencies of both norms per implementation, with the saving and its sd."""
    small = ratios[ratios["study"] == "small-batch"]
    return latencies(small)[[*SMALL_BATCH_COLUMNS, "saving", "saving_sd"]]
