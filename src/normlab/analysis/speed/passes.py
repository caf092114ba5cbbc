"""Section "Passes over memory: counted, not assumed (A7, B8, B9)": the pass census and the pass verdicts.

Each claim is judged on each hardware by the same rule and weighed by `hardware.weigh`."""

from __future__ import annotations

import math

import pandas as pd

from normlab.analysis.speed.hardware import sources, weigh
from normlab.bench import report
from normlab.study import decide, design
from normlab.study.findings import Finding, finite_or_none
from normlab.study.key_numbers import KeyNumber

PASS_GAP_KEY = KeyNumber("effective passes over memory, best LayerNorm − best RMSNorm", "passes")  # A7 and B8
B9_KEY = KeyNumber("|passes, Welford LayerNorm − chunked RMSNorm| (untimed: LayerNorm's extra reductions)", "passes")


def best_passes(
    df: pd.DataFrame, norm: str, study: str = "sweep", dtype: str = "float32", d: int | None = None
) -> tuple[float, str, float]:
    """The fewest effective passes any implementation of `norm` made (training batch, forward), which, and its sd."""
    ok = report.stable(df)
    pick = ok[(ok["norm"] == norm) & (ok["study"] == study) & (ok["dtype"] == dtype) & (ok["mode"] == "alloc")]
    if d is not None:
        pick = pick[pick["d"] == d]
    if pick.empty:
        return float("nan"), "none", float("nan")
    per_impl = pick.groupby("implementation")["effective_passes"].median()
    best = str(per_impl.idxmin())
    chosen = pick[pick["implementation"] == best]
    if "relative_sd" in chosen:
        # passes = 2 t / t_copy: relative sd of the case and of its copy, combined
        rel = ((chosen["relative_sd"] ** 2 + chosen.get("copy_relative_sd", 0.0) ** 2) ** 0.5).median()
        sd = float(per_impl.min() * rel)
    else:
        sd = float("nan")
    return float(per_impl.min()), best, sd


def composite_census(df: pd.DataFrame) -> dict:
    """Traced passes and reductions of the unfused composites, per norm and implementation (forward, fp32)."""
    cen = report.census(df)
    out = {}
    if cen.empty:
        return out
    # the plain norms of the d sweep (the partial study's census is pRMSNorm, a different computation)
    fwd = cen[(cen["study"] == "sweep") & (cen["dtype"] == "float32") & cen["traced_passes"].notna()]
    for row in fwd.itertuples():
        out[f"{row.norm}/{row.implementation}"] = {
            "traced_passes": row.traced_passes,
            "ops": len(row.traced_ops),
            "reductions": getattr(row, "traced_reductions", None),
            "profiler_ops": row.profiler_count,
            "ops_agree": row.ops_agree,
        }
    return out


def chunked_passes(df: pd.DataFrame) -> dict[str, float]:
    ok = report.stable(df)
    pick = ok[ok["study"] == "chunked"]
    return {name: float(g["effective_passes"].median()) for name, g in pick.groupby("implementation")}


def _a7_b8(df: pd.DataFrame, extra_pass: float, chunked_df: pd.DataFrame | None = None) -> tuple[Finding, Finding]:
    """A7/B8: LN needs one more pass over memory than RMS. Best effective passes per norm; chunked kernels if measured.

    `chunked_df`: committed (GPU) results to take the chunked kernels from when this run has none.
    """
    ln_best, ln_impl, ln_sd = best_passes(df, "layer")
    rms_best, rms_impl, rms_sd = best_passes(df, "rms")
    chunked = chunked_passes(df) or (chunked_passes(chunked_df) if chunked_df is not None else {})
    two_pass = chunked.get("triton chunked two-pass")
    welford = chunked.get("triton chunked welford")
    rms_chunked = chunked.get("triton chunked")
    chunked_extra = None if two_pass is None or rms_chunked is None else two_pass - rms_chunked
    holds_persistent = ln_best - rms_best >= extra_pass
    holds_chunked = chunked_extra is not None and chunked_extra >= extra_pass
    verdict = decide(holds_persistent or holds_chunked, caveat=not (holds_persistent and holds_chunked))
    if math.isnan(ln_best - rms_best) and chunked_extra is None:
        verdict = "not testable here"  # every forward case of one norm was unstable in this run
    gap = ln_best - rms_best
    gap_sd = (ln_sd**2 + rms_sd**2) ** 0.5
    evidence = {
        "best_ln_passes": ln_best,
        "best_ln_implementation": ln_impl,
        "best_rms_passes": rms_best,
        "best_rms_implementation": rms_impl,
        "extra_pass_threshold": extra_pass,
        "chunked_passes": chunked,
        "passes_gap": gap,
        "passes_gap_sd": gap_sd,
        "composites": composite_census(df),
    }
    persistent_text = (
        "so with rows held on chip LayerNorm needs no extra pass"
        if not holds_persistent
        else "so LayerNorm's best implementation does make an extra pass"
    )
    common = dict(
        key_number=finite_or_none(gap),
        threshold=extra_pass,
        spread=finite_or_none(gap_sd),
        **PASS_GAP_KEY.fields(),
        reads=("extra_pass",),  # A7's and B8's (same_as) alike
    )
    if verdict == "not testable here":
        text = "Every training-batch forward case of one of the norms was unstable in this run, so no pass count can be compared."
        return tuple(Finding(verdict, text, evidence, **PASS_GAP_KEY.fields()) for _claim in ("A7", "B8"))
    # the first sentence (the ledger's): both pass gaps against the threshold; the implementations and what a pass is
    # worth follow it
    lead = (
        f"With rows on chip LayerNorm's best takes {ln_best:.2f} effective passes to RMSNorm's {rms_best:.2f} "
        f"({gap:+.2f}, where {extra_pass:g} counts as an extra pass)"
        + (
            "; chunked kernels, for rows too long for the chip, were not timed here."
            if chunked_extra is None
            else f"; chunked, two-pass LayerNorm takes {two_pass:.2f} to RMSNorm's {rms_chunked:.2f}."
        )
    )
    detail = (
        f" At the training batch the best LayerNorm is {ln_impl}, the best RMSNorm {rms_impl} (a copy is 2 passes; "
        f"one extra pass adds 1), {persistent_text}"
        + (
            ": the chunked kernels need a GPU."
            if chunked_extra is None
            else f"; with rows too long for the chip, Welford LayerNorm makes {welford:.2f} passes."
            if welford is not None
            else "."
        )
    )
    a7 = Finding(verdict, lead + detail, evidence, **common)
    b8 = Finding(
        verdict,
        f"Kernel level: {lead[:1].lower()}{lead[1:]}{detail} Passes RMSNorm saves otherwise come from unfused "
        "composites (see the census) or chunked two-pass statistics.",
        evidence,
        **common,
    )
    return a7, b8


def _b9(df: pd.DataFrame, welford_equal: float, chunked_df: pd.DataFrame | None = None) -> Finding:
    """B9: LN needs two statistics; Welford makes them one pass with two accumulators; RMS one of each."""
    census = composite_census(df)
    ln_red = [v["reductions"] for k, v in census.items() if k.startswith("layer/") and v["reductions"]]
    rms_red = [v["reductions"] for k, v in census.items() if k.startswith("rms/") and v["reductions"]]
    structure = bool(ln_red and rms_red and min(ln_red) == 2 and max(rms_red) == 1)
    chunked = chunked_passes(df) or (chunked_passes(chunked_df) if chunked_df is not None else {})
    welford, rms_chunked = chunked.get("triton chunked welford"), chunked.get("triton chunked")
    timed = welford is not None and rms_chunked is not None
    welford_matches = timed and abs(welford - rms_chunked) <= welford_equal
    key = abs(welford - rms_chunked) if timed else None
    return Finding(
        decide(structure and (welford_matches or not timed), caveat=not timed),
        "The traced composites reduce twice for LayerNorm (mean, then variance) and once for RMSNorm; "
        + (
            f"Welford LN runs at {welford:.2f} passes against chunked RMS at {rms_chunked:.2f}, "
            + (f"within {welford_equal:g}." if welford_matches else f"more than {welford_equal:g} apart.")
            if timed
            else "Welford's one-pass timing against RMS needs the GPU chunked kernels, not timed in this run."
        ),
        {
            "ln_reductions": ln_red,
            "rms_reductions": rms_red,
            "chunked_passes": chunked,
            "welford_equal_threshold": welford_equal,
        },
        key_number=key if timed else (float(min(ln_red) - max(rms_red)) if ln_red and rms_red else None),
        threshold=welford_equal if timed else design.value("B9", "one_more_op"),
        # a traced op count is the same on every call (spread 0); a timed pass count has no repeat spread recorded here
        spread=None if timed else 0.0,
        **B9_KEY.fields(),
        reads=("welford_equal", "one_more_op"),
    )


def a7_b8(df, extra_pass: float, chunked_df: pd.DataFrame | None = None, *, gpu=None) -> tuple[Finding, Finding]:
    """A7/B8 on each hardware (see `_a7_b8`), weighed. Each hardware's chunked kernels are its own; `chunked_df`
    lends chunked results to this run's judgement (a frame from elsewhere, when no `gpu` run is weighed)."""
    parts = [(m, _a7_b8(m.frame, extra_pass, chunked_df if i == 0 else None)) for i, m in enumerate(sources(df, gpu))]
    return weigh([(m, a7) for m, (a7, _) in parts]), weigh([(m, b8) for m, (_, b8) in parts])


def b9(df, welford_equal: float, chunked_df: pd.DataFrame | None = None, *, gpu=None) -> Finding:
    """B9 on each hardware (see `_b9`), weighed."""
    return weigh(
        [(m, _b9(m.frame, welford_equal, chunked_df if i == 0 else None)) for i, m in enumerate(sources(df, gpu))]
    )


CENSUS_COLUMNS = [
    "study",
    "norm",
    "implementation",
    "direction",
    "dtype",
    "traced_passes",
    "traced_count",
    "profiler_count",
    "ops_agree",
    "effective_passes",
]


def census_frame(df: pd.DataFrame) -> pd.DataFrame:
    """Traced passes and op counts (trace and profiler) of each composite, beside its timed effective passes."""
    census = report.census(df)
    return census if census.empty else census[CENSUS_COLUMNS]
