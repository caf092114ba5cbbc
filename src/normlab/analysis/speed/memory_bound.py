"""Section "Memory bound, and what fusion leaves of the difference (A10, Q2)"."""

from __future__ import annotations

import math

import pandas as pd

from normlab.analysis.speed.arithmetic import fused_pairs, fusion
from normlab.analysis.speed.hardware import deciding_machine, sources, weigh
from normlab.analysis.speed.passes import composite_census
from normlab.analysis.speed.ratio import describe_ranges, pct, saving_ranges, training_ratios
from normlab.analysis.speed.runs import unstable_cases
from normlab.bench import report
from normlab.study import decide
from normlab.study.findings import Finding, finite_or_none
from normlab.study.key_numbers import SHARE, KeyNumber, within

A10_KEY = KeyNumber("best implementation's share of copy bandwidth, training batch", SHARE)
Q2_KEY = KeyNumber("|median share of LayerNorm's time RMSNorm saves|, both fused", SHARE)


def _a10(df: pd.DataFrame, memory_bound: float) -> Finding:
    """A10: norms are bandwidth bound, and RMSNorm's missing bias and intermediates suit that."""
    ok = report.stable(df)
    train = ok[(ok["study"] == "sweep") & (ok["norm"] != "copy") & (ok["mode"] == "alloc")]
    per_impl = (
        train.groupby(["norm", "implementation"])["fraction_of_copy"].median()
        if not train.empty
        else pd.Series(dtype=float)
    )
    best_fraction = float(per_impl.max()) if not per_impl.empty else float("nan")
    best_sd = float("nan")
    if not per_impl.empty:
        norm, impl = per_impl.idxmax()
        chosen = train[(train["norm"] == norm) & (train["implementation"] == impl)]
        rel = (
            ((chosen["relative_sd"] ** 2 + chosen["copy_relative_sd"] ** 2) ** 0.5).median()
            if "relative_sd" in chosen
            else float("nan")
        )
        best_sd = best_fraction * float(rel)
    small = ok[(ok["study"] == "small-batch") & (ok["norm"] != "copy")]
    # a few-kilobyte copy is itself latency bound, so small batches are held against the memory limit:
    # the fastest copy bandwidth measured at the training batch
    limit = (
        float(ok[(ok["norm"] == "copy") & (ok["study"] == "sweep")]["copy_bandwidth_gbs"].max())
        if not train.empty
        else float("nan")
    )
    small_fraction = float(small["bandwidth_gbs"].max()) / limit if not small.empty else float("nan")
    rows = int(small["rows"].min()) if not small.empty else 1
    d = int(small["d"].min()) if not small.empty else 4096
    # bytes the bias adds at that batch: one d-vector against 2*rows*d activations plus the weight
    bias_share = 1 / (2 * rows + 2)
    census = composite_census(df)
    bound = best_fraction >= memory_bound
    small_bound = small_fraction >= memory_bound
    ln_composite = [v["traced_passes"] for k, v in census.items() if k.startswith("layer/") and v["ops"] > 1]
    rms_composite = [v["traced_passes"] for k, v in census.items() if k.startswith("rms/") and v["ops"] > 1]
    intermediates = (
        f"unfused composites move {min(ln_composite):.0f} (LN) vs {min(rms_composite):.0f} (RMS) passes, "
        f"fused ones 2 each"
        if ln_composite and rms_composite
        else "no unfused composite was traced"
    )
    if math.isnan(best_fraction):
        return Finding(
            "not testable here",
            "No stable training-batch forward case was timed in this run.",
            {"unstable_cases": unstable_cases(df)},
            **A10_KEY.fields(),
        )
    return Finding(
        decide(bound, caveat=not small_bound),
        # the first sentence (the ledger's): both tests against the threshold; the bias and the composites follow
        f"At the training batch the best implementation reaches {best_fraction:.0%} of copy bandwidth, "
        f"{'bandwidth bound' if bound else 'short of'} ({memory_bound:.0%} or more); at {rows} row(s) the best reaches "
        f"{small_fraction:.1%} of it, {'also bandwidth bound' if small_bound else 'latency bound'}. The bias is "
        f"{bias_share:.0%} of the bytes at {rows} row(s) and ~0 at 8192; {intermediates}.",
        {
            "best_fraction_training": best_fraction,
            "best_fraction_sd": best_sd,
            "best_small_batch_fraction_of_memory_limit": small_fraction,
            "memory_limit_gbs": limit,
            "small_rows": rows,
            "small_d": d,
            "bias_share_small_batch": bias_share,
            "memory_bound_threshold": memory_bound,
            "composites": census,
        },
        key_number=finite_or_none(best_fraction),
        threshold=memory_bound,
        spread=finite_or_none(best_sd),
        **A10_KEY.fields(),
        reads=("memory_bound",),
    )


def _q2(df: pd.DataFrame, equal_time: float, one_op=None, memory_bound=None) -> Finding:
    """Q2: with both norms fused (one read, one write), how large is RMSNorm's advantage?"""
    ratios = training_ratios(df)
    fused = fused_pairs(ratios, one_op=one_op, memory_bound=memory_bound)
    unfused = ratios.drop(fused.index)
    if fused.empty:
        return Finding(
            "not testable here",
            "No implementation ran both norms fused in this run; the triton/compile backends would test it.",
            {"per_implementation": saving_ranges(ratios)},
            **Q2_KEY.fields(),
        )
    median = float(fused["saving"].median())  # median: robust to one stalled point on a shared CPU
    spread = float(fused["saving_sd"].median())
    gap = abs(median)
    unfused_median = float(unfused["saving"].median()) if not unfused.empty else None
    return Finding(
        decide(gap < equal_time),
        # the first sentence (the ledger's): the key number against the threshold; per implementation after it
        f"Where both norms are fused RMSNorm saves a median {median:+.1%} of LayerNorm's time over {len(fused)} "
        f"points, {'under' if gap < equal_time else 'not under'} the {equal_time:.0%} that counts as an advantage. "
        f"Per implementation: {describe_ranges(saving_ranges(fused))}; sd {spread:.1%}; the unfused ones save a median "
        f"{pct(unfused_median) if unfused_median is not None else 'n/a'}.",
        {
            "fused": saving_ranges(fused),
            "unfused": saving_ranges(unfused),
            "fused_median_abs_saving": gap,
            "fused_saving_sd": spread,
            "equal_time_threshold": equal_time,
        },
        key_number=gap,
        threshold=equal_time,
        spread=spread,
        **Q2_KEY.fields(),
        reads=("equal_time",),
    )


def q2(df, equal_time: float, *, memory_bound: float | None = None, gpu=None) -> Finding:
    """Q2 on each hardware (see `_q2`), weighed, with the opening page's sentence."""
    finding = weigh([(m, _q2(m.frame, equal_time, **fusion(m, memory_bound))) for m in sources(df, gpu)])
    finding.scale = q2_scale(finding)
    finding.headline = q2_headline(finding)
    return finding


def q2_scale(q2: Finding) -> str:
    """The deciding machine and how many fused cases at the training batch the median is over."""
    cases = sum(part.get("points", 0) for part in (q2.evidence.get("fused") or {}).values())
    over = f", median of {cases} training-batch cases" if cases else ""
    return f"on {deciding_machine(q2)}{over}"


def q2_headline(q2: Finding) -> str | None:
    """The opening page's sentence on Q2 (at most 35 words); None without a key number or threshold. It names the
    machine and the cases its number comes from; the other runs' numbers (`other_machines`), the commit and the
    caveats stay on the chapter."""
    k, t = q2.key_number, q2.threshold
    if k is None or t is None:
        return None
    key = KeyNumber.of(q2)
    return (
        f"Both fused, RMSNorm and LayerNorm differ by {key.format(k)} of LayerNorm's time {q2_scale(q2)}, "
        f"{'under' if within(k, t) else 'over'} the {key.limit(t)} counted as an advantage"
        + {"holds": ": not article A's 10–50%.", "does not hold": ": a real advantage remains."}.get(q2.verdict, ".")
    )


def a10(df, memory_bound: float, *, gpu=None) -> Finding:
    """A10 on each hardware (see `_a10`), weighed."""
    return weigh([(m, _a10(m.frame, memory_bound)) for m in sources(df, gpu)])
