"""Section "Cheaper arithmetic (A5)": A5, judged where both norms are fused (equal memory traffic).

What "fused" means is defined here (`fused_pairs`, `single_kernel`); the section on memory bounds uses it too."""

from __future__ import annotations

import pandas as pd

from normlab.analysis.speed.hardware import sources, weigh
from normlab.analysis.speed.passes import composite_census
from normlab.analysis.speed.ratio import training_ratios
from normlab.bench import report
from normlab.bench.provenance import Measured
from normlab.study import decide, design
from normlab.study.findings import Finding
from normlab.study.key_numbers import SHARE, KeyNumber

# A5's key number is the fused saving; with no fused pair timed, the verdict turns on the op counts instead.
A5_KEY = KeyNumber("median share of LayerNorm's time RMSNorm saves, both fused", SHARE)
A5_UNTIMED_KEY = KeyNumber("full-size ops LayerNorm's composite runs beyond RMSNorm's", "ops")


def single_kernel(df: pd.DataFrame) -> set[tuple[str, str, str]]:
    """(implementation, direction, dtype) whose forward runs as one op for both norms, by the profiler census of the run."""
    cen = report.census(df)
    if cen.empty:
        return set()
    cen = cen[(cen["study"] == "sweep") & (cen["direction"] == "forward")]
    one = cen[cen["profiler_count"] == 1]
    both = one.groupby(["implementation", "direction", "dtype"])["norm"].agg(set)
    return {key for key, norms in both.items() if {"layer", "rms"} <= norms}


def fused_pairs(
    ratios: pd.DataFrame, slack: float = 1.5, *, one_op: set | None = None, memory_bound: float | None = None
) -> pd.DataFrame:
    """Rows where both norms ran fused, so they move the same bytes.

    Fused means: both at close to the minimum passes (effective passes <= slack x minimum), or, given `one_op`
    (from `single_kernel`) and `memory_bound`, both one kernel per call and each reaching at least
    `memory_bound` of copy bandwidth (so the time is the memory traffic, not the launch). A GPU kernel can
    be fused and bandwidth bound while still short of the copy's bandwidth; the second test counts it.
    """
    minimum = ratios["direction"].map({"forward": 2, "forward+backward": 5})
    near_copy = (ratios["effective_passes_ln"] <= slack * minimum) & (ratios["effective_passes_rms"] <= slack * minimum)
    if one_op and memory_bound is not None:
        keys = list(zip(ratios["implementation"], ratios["direction"], ratios["dtype"]))
        kernel = pd.Series([key in one_op for key in keys], index=ratios.index, dtype=bool)
        bound = (ratios["fraction_of_copy_ln"] >= memory_bound) & (ratios["fraction_of_copy_rms"] >= memory_bound)
        near_copy = near_copy | (kernel & bound)
    return ratios[near_copy]


def _a5(df: pd.DataFrame, equal_time: float, one_op=None, memory_bound=None) -> Finding:
    """A5: LN costs more to compute. Structural part from the traced composites; timing part from fused pairs."""
    census = composite_census(df)
    ln_ops = [
        v["ops"] for k, v in census.items() if k.startswith("layer/") and k.split("/")[1] in ("reference", "eager")
    ]
    rms_ops = [
        v["ops"] for k, v in census.items() if k.startswith("rms/") and k.split("/")[1] in ("reference", "eager")
    ]
    fused = fused_pairs(training_ratios(df), one_op=one_op, memory_bound=memory_bound)
    # The median over fused points, because one stalled point on a shared CPU can push its ratio far out.
    fused_gap = float(fused["saving"].median()) if not fused.empty else None  # None: not measured in this run
    gap_sd = float(fused["saving_sd"].median()) if not fused.empty else None
    more_work = bool(ln_ops and rms_ops and min(ln_ops) > max(rms_ops))
    hidden = fused.empty or fused_gap < equal_time
    return Finding(
        decide(more_work, caveat=hidden),
        # the first sentence (the ledger's) carries both tests and the key number; which implementations, the spread
        # and the reductions follow it
        f"LayerNorm's composite runs {min(ln_ops) if ln_ops else '?'} full-size ops to RMSNorm's "
        f"{max(rms_ops) if rms_ops else '?'}, "
        + (
            "but no implementation ran both norms fused in this run, so whether that costs time is untested here. "
            "LayerNorm reduces twice, RMSNorm once."
            if fused.empty
            else f"but where both are fused RMSNorm saves a median {fused_gap:+.1%} of LayerNorm's time"
            + (
                ": RMSNorm is not faster there, so the extra arithmetic does not show."
                if fused_gap <= -equal_time
                else f", under {equal_time:.0%}: the extra arithmetic hides under the memory traffic."
                if hidden
                else f", at least {equal_time:.0%}: the arithmetic shows in the time."
            )
            + f" Fused: {', '.join(sorted(set(fused['implementation'])))} (sd {gap_sd:.1%}); LayerNorm reduces twice, "
            "RMSNorm once."
        ),
        {
            "composite_ops_ln": ln_ops,
            "composite_ops_rms": rms_ops,
            "fused_median_saving": fused_gap,
            "fused_saving_sd": gap_sd,
            "equal_time_threshold": equal_time,
            "census": census,
        },
        # with no fused pair timed, the verdict turns on the op counts alone (a trace: the same on every call)
        key_number=fused_gap
        if fused_gap is not None
        else (float(min(ln_ops) - max(rms_ops)) if ln_ops and rms_ops else None),
        threshold=equal_time if fused_gap is not None else design.value("A5", "one_more_op"),
        spread=gap_sd if fused_gap is not None else 0.0,
        **(A5_KEY if fused_gap is not None else A5_UNTIMED_KEY).fields(),
        reads=("equal_time", "one_more_op"),
    )


def fusion(m: Measured, memory_bound: float | None) -> dict:
    return {"one_op": single_kernel(m.frame) if memory_bound is not None else None, "memory_bound": memory_bound}


def a5(df, equal_time: float, *, memory_bound: float | None = None, gpu=None) -> Finding:
    """A5 on each hardware (see `_a5`), weighed. `memory_bound`: also count one-kernel pairs at that share of copy as fused."""
    return weigh([(m, _a5(m.frame, equal_time, **fusion(m, memory_bound))) for m in sources(df, gpu)])
