"""Evidence for the speed claims, computed from a benchmark results frame.

Each function takes the measured frame (and the thresholds the chapter
states) and returns `Finding(verdict, summary, evidence)`. The verdicts come
from the numbers in that frame, never from text typed beforehand.

The literature facts they are set against are constants here, each with its
source, so a reader can check them in one place (see data/paper_speed.md).

The articles' speed claims are about GPUs. Each claim function takes this
run's cases and, optionally, a GPU run (`gpu`, a `provenance.Measured`: this
run if it ran on a GPU, else a committed one). It judges the claim on each
hardware by the same rule, and `weigh` makes one verdict of them: the GPU's
decides where it could test the claim; a "holds" there becomes "holds with
caveats" if another hardware's own verdict is "does not hold". The summary
names the hardware behind every number. With no GPU run, the CPU decides alone.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from normlab import bench
from normlab.bench import provenance, report
from normlab.bench.provenance import Measured
from normlab.study import decide, paths
from normlab.study.findings import Finding, finite_or_none
from normlab.study.present import table

# Zhang & Sennrich (2019), "Root Mean Square Layer Normalization", NeurIPS 32,
# arXiv:1910.07467. The abstract's range (checked against the abstract's text):
# RMSNorm "reduces the running time by 7%~64% on different models".
PAPER_SAVING_RANGE = (0.07, 0.64)
ARTICLE_A8_RANGE = (0.10, 0.50)  # article A: "according to the original paper, 10% to 50% faster"
ARTICLE_B6_RANGE = (0.07, 0.64)  # article B: "about 7%~64%"
FEW_PERCENT = (0.01, 0.10)  # article B's "a few percent" (B10), read as 1%-10%


@dataclass(frozen=True)
class PaperRow:
    source: str  # table and caption, as transcribed
    model: str
    norm: str  # "RMSNorm" or "pRMSNorm"
    saving: float  # share of LayerNorm's running time removed

    @property
    def speedup(self) -> float:
        """How many times as fast: a saving s is a speed-up of 1 / (1 - s)."""
        return 1.0 / (1.0 - self.saving)


# The per-table running-time savings of Zhang & Sennrich (2019), from two independent
# transcriptions of the PDF (issue 10), NOT checked against the paper itself here:
# see data/paper_speed.md for what was and was not checked. Table 3 is given as a
# range over its rows; its two ends are kept as two rows.
PAPER_ROWS = (
    PaperRow("Table 2 (RNNSearch, TensorFlow; caption sets p = 6.25%)", "RNNSearch (TF)", "RMSNorm", 0.247),
    PaperRow("Table 3 (lowest row of the table's range)", "not given in the transcription", "RMSNorm", 0.11),
    PaperRow("Table 3 (highest row of the table's range)", "not given in the transcription", "RMSNorm", 0.34),
    PaperRow("Table 4 (Transformer)", "Transformer", "RMSNorm", 0.069),
    PaperRow("Table 6", "not given in the transcription", "RMSNorm", 0.151),
    PaperRow("Table 8 (order embedding, image-caption retrieval)", "order embedding", "RMSNorm", 0.408),
    PaperRow("Table 8 (order embedding, image-caption retrieval)", "order embedding", "pRMSNorm", 0.639),
    PaperRow("Table 10 (CIFAR-10 classification)", "ConvPool-CNN-C", "RMSNorm", 0.205),
)

# Narang et al. (2021), "Do Transformer Modifications Transfer Across Implementations and
# Applications?", EMNLP: T5-base with RMS Norm against the vanilla (LayerNorm-style)
# Transformer, as transcribed in issue 10 (not checked against the paper here).
NARANG_T5_BASE = {"loss_rms": 1.821, "loss_vanilla": 1.838, "steps_per_s_rms": 3.68, "steps_per_s_vanilla": 3.50}


def _pct(value: float) -> str:
    return f"{value:+.0%}" if abs(value) >= 0.005 else f"{value:+.1%}"


def saving_ranges(ratios: pd.DataFrame) -> dict[str, dict]:
    """Per implementation: the median saving over the shapes given, its spread, and how many points."""
    summary = report.implementation_summary(ratios)
    return {
        row["implementation"]: {"median": row["median saving"], "sd": row["saving sd"], "points": int(row["points"])}
        for _, row in summary.iterrows()
    }


def describe_ranges(ranges: dict[str, dict]) -> str:
    return "; ".join(f"{name} {_pct(r['median'])} ± {abs(r['sd']):.0%}" for name, r in sorted(ranges.items()))


def training_subset(ratios: pd.DataFrame) -> pd.DataFrame:
    """The rows of an `ln_rms_ratios` frame at the training-like batch: the forward d sweep and forward+backward (allocating)."""
    return ratios[ratios["study"].isin(["sweep", "backward"]) & (ratios["mode"] == "alloc")]


def training_ratios(df: pd.DataFrame) -> pd.DataFrame:
    """LN/RMS ratios at the training-like batch: the forward d sweep and the forward+backward cases (allocating calls)."""
    return training_subset(report.ln_rms_ratios(df))


def small_batch_ratios(df: pd.DataFrame) -> pd.DataFrame:
    ratios = report.ln_rms_ratios(df)
    return ratios[(ratios["study"] == "small-batch") & (ratios["mode"] == "alloc")]


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


def unstable_cases(df: pd.DataFrame) -> list[str]:
    """One line per case the harness could not believe after re-measuring (left out of every summary)."""
    bad = report.unstable(df)
    return [
        f"{r.study} {r.norm} {r.implementation} {r.dtype} {r.rows}x{r.d} {r.mode}: {r.unstable_reason}"
        for r in bad.itertuples()
    ]


# ---------------------------------------------------------------- which hardware decides


def as_measured(source) -> Measured:
    """A bare frame (this run, hardware unnamed) or a `Measured` run, as a `Measured`."""
    if isinstance(source, Measured):
        return source
    return Measured(frame=source, hardware="this run", label="this run", on_gpu=False, source="this run")


def gpu_evidence(live: Measured, committed: list[Measured]) -> list[Measured]:
    """The GPU runs the verdicts weigh, the deciding one first: this run if it ran on a GPU, else every committed GPU
    run, the most recently measured first (a later run may time more backends; the others check it)."""
    if live.on_gpu:
        return [live]
    return sorted((m for m in committed if m.on_gpu), key=lambda m: m.started, reverse=True)


def where(m: Measured) -> str:
    """'the NVIDIA H200 (gpu-bench.json, commit 2253ce8a1b2c)' or "this run's Xeon (2 cores)"."""
    if m.hardware == "this run":
        return "this run"
    if m.source == "this run":
        return f"this run's {m.hardware}"
    return f"the {m.hardware} ({m.source}, commit {m.commit})"


def _sources(df, gpu) -> list[Measured]:
    """This run, then the GPU runs to weigh (`gpu`: one `Measured`, a list of them, deciding one first, or None)."""
    live = as_measured(df)
    gpus = [] if gpu is None else [gpu] if isinstance(gpu, Measured) else list(gpu)
    return [live] + [m for m in gpus if m is not live and m.frame is not live.frame]


def _key(m: Measured, parts) -> str:
    """The hardware's name, with the run's source where two runs share one kind of hardware."""
    twins = sum(other.hardware == m.hardware for other, _ in parts)
    return m.hardware if twins == 1 else f"{m.hardware} [{m.source}]"


def weigh(parts: list[tuple[Measured, Finding]]) -> Finding:
    """One verdict from the same rule applied on each hardware.

    The first GPU run's verdict decides where it could test the claim (the articles' speed claims are about GPUs);
    otherwise the first run that could. A "holds" becomes "holds with caveats" where another run's own verdict
    (this run's, or another GPU run's) is "does not hold". Key number, threshold and spread are the deciding run's.
    """
    if len(parts) == 1:
        m, f = parts[0]
        if m.hardware == "this run":
            return f
        return replace(f, summary=f"On {where(m)}: {f.summary}", evidence=dict(f.evidence, decided_on=_key(m, parts)))
    testable = [(m, f) for m, f in parts if f.verdict != "not testable here"] or parts
    deciding, decided = next(((m, f) for m, f in testable if m.on_gpu), testable[0])
    others = [(m, f) for m, f in parts if m is not deciding]
    against = [m for m, f in others if f.verdict == "does not hold"]
    verdict = "holds with caveats" if decided.verdict == "holds" and against else decided.verdict
    text = [f"On {where(deciding)}, which decides: {decided.summary}"]
    # the other runs in one clause each (their full sentences stay in the evidence and on the chapter's GPU section)
    text += [
        f"On {where(m)} alone the verdict would be '{f.verdict}'"
        + (
            "."
            if f.key_number is None
            else f" (key number {f.key_number:.3g} vs {f.threshold:.3g}"
            + ("" if f.spread is None else f", spread {f.spread:.2g}")
            + ")."
        )
        for m, f in others
    ]
    if verdict != decided.verdict:
        text.append(f"The result on {' and '.join(where(m) for m in against)} adds the caveat.")
    evidence = dict(
        decided.evidence,
        decided_on=_key(deciding, parts),
        by_hardware={
            _key(m, parts): {
                "source": m.source,
                "verdict": f.verdict,
                "key_number": f.key_number,
                "threshold": f.threshold,
                "spread": f.spread,
                "summary": f.summary,
                "evidence": f.evidence,
            }
            for m, f in parts
        },
    )
    rule = (
        (decided.rule or "") + " Hardware: the newest GPU run decides where it could test the claim; its 'holds' "
        "becomes 'holds with caveats' where another run's own verdict (CPU or GPU) is 'does not hold'."
    ).strip()
    return Finding(
        verdict,
        " ".join(text),
        evidence,
        key_number=decided.key_number,
        threshold=decided.threshold,
        spread=decided.spread,
        rule=rule,
    )


# ---------------------------------------------------------------- the literature


def paper_rows_frame() -> pd.DataFrame:
    """The paper's per-table rows, with each saving also written as the speed-up it is."""
    return pd.DataFrame(
        [
            {
                "source": r.source,
                "model": r.model,
                "norm": r.norm,
                "time saving": r.saving,
                "speed-up (×)": r.speedup,
                "faster by": r.speedup - 1,
            }
            for r in PAPER_ROWS
        ]
    )


def narang_row() -> dict:
    n = NARANG_T5_BASE
    speedup = n["steps_per_s_rms"] / n["steps_per_s_vanilla"]
    return {**n, "speedup": speedup, "saving": 1 - 1 / speedup, "loss_difference": n["loss_rms"] - n["loss_vanilla"]}


def model_level_part(quality: dict | None, realmodels: dict | None) -> dict:
    """What the quality and realmodels chapters measured at model level, read from their evidence records.

    The quality chapter's step-time ratio gives a measured whole-model saving; the
    realmodels chapter's record gives the norms' share of a real model's time.
    A chapter that has not run shows as missing, never as a number.
    """
    part = {
        "quality_ran": quality is not None,
        "realmodels_ran": realmodels is not None,
        "model_saving": None,
        "model_saving_sd": None,
        "quality_summary": None,
        "realmodels_summary": None,
        "norm_share_of_model_time": None,
    }
    if quality is not None:
        evidence = quality.get("evidence", {})
        part["quality_summary"] = quality.get("summary")
        ratio = evidence.get("step_time_ratio_rms_over_layer")
        if isinstance(ratio, (int, float)):
            part["model_saving"] = 1.0 - float(ratio)
        # the ratio's sd is the saving's sd (saving = 1 - ratio); the quality chapter calls it "spread"
        spread = next(
            (evidence[k] for k in ("step_time_ratio_sd", "step_time_ratio_spread", "spread") if k in evidence), None
        )
        if isinstance(spread, (int, float)):
            part["model_saving_sd"] = float(spread)
    if realmodels is not None:
        part["realmodels_summary"] = realmodels.get("summary")
        for key, value in realmodels.get("evidence", {}).items():
            if "share" in key and isinstance(value, (int, float)) and 0 <= value <= 1:
                part["norm_share_of_model_time"] = float(value)
                part["norm_share_key"] = key
                break
    return part


def _op_level_auto(df: pd.DataFrame) -> tuple[float | None, float | None, int]:
    """Median saving of backend="auto" (what a user gets) over the stable training-batch points, and its spread."""
    ratios = training_ratios(df)
    auto = ratios[ratios["implementation"] == "auto"]
    if auto.empty:
        return None, None, 0
    return float(auto["saving"].median()), float(auto["saving_sd"].median()), len(auto)


def _measured_text(kind: str, saving: float | None, sd: float | None) -> str:
    if saving is None:
        return f"{kind}: nothing stable was measured"
    spread_text = "sd not recorded" if finite_or_none(sd) is None else f"sd {abs(sd):.0%}"
    speedup = 1 / (1 - saving) - 1
    # slower by t_rms / t_ln - 1, which is minus the saving
    pace = f"{speedup:.0%} faster" if speedup >= 0 else f"{-saving:.0%} slower"
    return f"{kind}: a {_pct(saving)} saving ({spread_text}), i.e. RMSNorm {pace}"


def a8_b6(df, model_level: dict | None = None, *, gpu=None) -> tuple[Finding, Finding]:
    """A8 ("per the original paper, 10%-50% faster") and B6 ("the paper found 7%-64%") against the paper's rows and this run.

    Rule (A8): the citation part turns on the share of the paper's RMSNorm rows whose speed-up (the claim says
    "faster") lies in 10%-50%: at least half, or it does not hold. It holds outright only if every measurement
    also lies in 10%-50% as a speed-up: this run's (model-level step time if the quality chapter ran, else the
    op-level auto saving) and, where a GPU run is weighed, the op-level auto saving on that GPU; otherwise with caveats.
    Rule (B6): the range is the abstract's, but its top (64%) is pRMSNorm; the key number is the largest
    RMSNorm-only row against the claimed 64%. A RMSNorm top below 64% gives "holds with caveats".
    """
    model_level = model_level or model_level_part(None, None)
    live, *elsewhere = _sources(df, gpu)
    rows = [r for r in PAPER_ROWS if r.norm == "RMSNorm"]
    speedups = [r.speedup - 1 for r in rows]
    savings = [r.saving for r in rows]
    share_speedup = sum(ARTICLE_A8_RANGE[0] <= s <= ARTICLE_A8_RANGE[1] for s in speedups) / len(rows)
    share_saving = sum(ARTICLE_A8_RANGE[0] <= s <= ARTICLE_A8_RANGE[1] for s in savings) / len(rows)
    op_saving, op_sd, op_points = _op_level_auto(live.frame)
    here = "this run" if live.hardware == "this run" else where(live)
    measured, measured_sd, measured_kind = op_saving, op_sd, f"op-level auto on {here}, forward and forward+backward"
    if model_level.get("model_saving") is not None:
        # the quality chapter trains on the machine that runs the book, so this run's hardware
        measured, measured_sd, measured_kind = (
            model_level["model_saving"],
            model_level.get("model_saving_sd"),
            f"model-level step time (quality chapter, on {here})",
        )
    parts = [(measured_kind, measured, measured_sd)]
    gpu_runs = []
    for m in elsewhere:
        saving, sd, points = _op_level_auto(m.frame)
        parts.append((f"op-level auto on {where(m)}", saving, sd))
        gpu_runs.append(
            {
                "gpu_hardware": m.hardware,
                "gpu_source": m.source,
                "gpu_op_level_auto_saving": saving,
                "gpu_op_level_auto_saving_sd": sd,
                "gpu_op_level_points": points,
                "gpu_per_implementation": saving_ranges(training_ratios(m.frame)),
            }
        )
    # the newest GPU run's numbers at the top level; every GPU run's in gpu_runs
    evidence_gpu = dict(gpu_runs[0], gpu_runs=gpu_runs) if gpu_runs else {}
    speedups_measured = [None if s is None else 1 / (1 - s) - 1 for _, s, _ in parts]
    in_range = any(x is not None for x in speedups_measured) and all(
        x is not None and ARTICLE_A8_RANGE[0] <= x <= ARTICLE_A8_RANGE[1] for x in speedups_measured
    )
    measured_speedup = speedups_measured[0]
    narang = narang_row()
    evidence = {
        "paper_rows": [
            {"source": r.source, "norm": r.norm, "saving": r.saving, "speedup": r.speedup} for r in PAPER_ROWS
        ],
        "paper_rows_checked_against": "two transcriptions (issue 10), not the PDF",
        "abstract_range": PAPER_SAVING_RANGE,
        "rms_rows_speedup_share_in_10_50": share_speedup,
        "rms_rows_saving_share_in_10_50": share_saving,
        "measured_saving": measured,
        "measured_saving_sd": measured_sd,
        "measured_kind": measured_kind,
        "measured_speedup": measured_speedup,
        "op_level_auto_saving": op_saving,
        "op_level_auto_saving_sd": op_sd,
        "op_level_points": op_points,
        "model_level": model_level,
        "narang_t5_base": narang,
        **evidence_gpu,
    }
    texts = [_measured_text(kind, s, sd) for kind, s, sd in parts]
    if measured is None:
        texts[0] = f"no stable auto case and no model-level step time were measured on {here}"
    measured_text = "; ".join(texts)
    if evidence_gpu and evidence_gpu["gpu_per_implementation"]:
        measured_text += (
            f" (on {where(elsewhere[0])}, per implementation: "
            f"{describe_ranges(evidence_gpu['gpu_per_implementation'])})"
        )
    a8 = Finding(
        decide(share_speedup >= 0.5, caveat=not in_range),
        f"The paper's RMSNorm rows save 6.9%-40.8% of LayerNorm's time ({share_saving:.0%} of 7 rows within 10-50% as savings, "
        f"{share_speedup:.0%} as speed-ups, since a 40.8% saving is 1.69x as fast); {measured_text}; Narang et al.'s T5-base: "
        f"{narang['speedup'] - 1:+.1%} steps/s.",
        evidence,
        key_number=share_speedup,
        threshold=0.5,
        spread=0.0,
        rule="Citation: at least half the paper's RMSNorm rows within 10-50% as speed-ups; 'holds' also needs every "
        "measured speed-up (this run's, and the GPU run's where one is weighed) within 10-50%. The paper rows are "
        "fixed numbers, so their spread is 0.",
    )
    rms_top = max(savings)
    b6 = Finding(
        decide(abs(PAPER_SAVING_RANGE[0] - min(savings)) < 0.01, caveat=rms_top < ARTICLE_B6_RANGE[1] - 0.01),
        f"7%-64% is the abstract's range, but RMSNorm's own rows span {min(savings):.1%}-{rms_top:.1%}: the 63.9% is pRMSNorm "
        f"(Table 8), and these are whole-model time savings (a 64% saving is 2.8x as fast); {measured_text}; Narang et al.'s "
        f"T5-base: loss {narang['loss_rms']} vs {narang['loss_vanilla']}, {narang['speedup'] - 1:+.1%} steps/s.",
        dict(evidence, rms_top_row=rms_top, rms_bottom_row=min(savings)),
        key_number=rms_top,
        threshold=ARTICLE_B6_RANGE[1],
        spread=0.0,
        rule="The range's bottom must match an RMSNorm row (7% vs 6.9%); a top reached only by pRMSNorm gives a caveat. "
        "Model-level measurements (quality, realmodels) are reported beside it.",
    )
    return a8, b6


# ---------------------------------------------------------------- the claims


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
        f"LayerNorm's composite runs {min(ln_ops) if ln_ops else '?'} full-size ops to RMSNorm's {max(rms_ops) if rms_ops else '?'} "
        f"(two reductions against one); "
        + (
            "no implementation ran both norms fused in this run, so whether the extra arithmetic costs time "
            "when the traffic is equal is untested here."
            if fused.empty
            else f"where both are fused ({', '.join(sorted(set(fused['implementation'])))}) RMSNorm saves a median {fused_gap:+.1%} "
            f"(sd {gap_sd:.1%}) of LayerNorm's time"
            + (
                ", so RMSNorm is not faster there: the extra arithmetic does not show in the time."
                if fused_gap <= -equal_time
                else ": the extra arithmetic hides under the memory traffic."
                if hidden
                else ", so the arithmetic shows in the time."
            )
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
        threshold=equal_time if fused_gap is not None else 1.0,
        spread=gap_sd if fused_gap is not None else 0.0,
        rule="Holds if LN's composite has more ops; a caveat if, where both are fused, the median saving is below the "
        "equal-time threshold (the arithmetic does not show in the time). Key number: the fused median saving, or, "
        "with no fused pair timed, LN's extra ops.",
    )


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
    chunk_text = (
        "the chunked kernels (rows too long for the chip) were not timed here: that needs a GPU"
        if chunked_extra is None
        else f"with rows too long for the chip, two-pass LN makes {two_pass:.2f} passes, Welford {welford:.2f}, RMS {rms_chunked:.2f}"
    )
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
    gap_text = (
        f"the best LayerNorm ({ln_impl}) takes {ln_best:.2f} effective passes and the best RMSNorm ({rms_impl}) "
        f"{rms_best:.2f} (a copy is 2; one extra pass adds 1)"
    )
    persistent_text = (
        "so with rows held on chip LayerNorm needs no extra pass"
        if not holds_persistent
        else "so LayerNorm's best implementation does make an extra pass"
    )
    common = dict(
        key_number=finite_or_none(gap),
        threshold=extra_pass,
        spread=finite_or_none(gap_sd),
        rule="Holds if the best LN makes at least EXTRA_PASS more effective passes than the best RMS, with rows on "
        "chip and with chunked rows; one of the two gives a caveat.",
    )
    if verdict == "not testable here":
        text = "Every training-batch forward case of one of the norms was unstable in this run, so no pass count can be compared."
        return Finding(verdict, text, evidence), Finding(verdict, text, evidence)
    a7 = Finding(verdict, f"At the training batch {gap_text}, {persistent_text}; {chunk_text}.", evidence, **common)
    b8 = Finding(
        verdict,
        f"Kernel level: {gap_text}, {persistent_text}; passes RMSNorm saves otherwise come from unfused composites "
        f"(see the census) or chunked two-pass statistics ({chunk_text}).",
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
            f"Welford LN runs at {welford:.2f} passes against chunked RMS at {rms_chunked:.2f}."
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
        threshold=welford_equal if timed else 1.0,
        # a traced op count is the same on every call (spread 0); a timed pass count has no repeat spread recorded here
        spread=None if timed else 0.0,
        rule="Holds if the traces show 2 reductions for LN and 1 for RMS and (when timed) Welford's passes are within "
        "WELFORD_EQUAL of RMS's; untimed Welford gives a caveat. Key number: reductions LN − RMS (untimed) or the "
        "Welford−RMS pass gap (timed).",
    )


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
        )
    return Finding(
        decide(bound, caveat=not small_bound),
        f"At the training batch the best implementation reaches {best_fraction:.0%} of copy bandwidth "
        f"({'bandwidth bound' if bound else 'below the bandwidth-bound threshold'}); at {rows} row(s) the best reaches "
        f"{small_fraction:.1%} of the training-batch copy bandwidth ({'also bandwidth bound' if small_bound else 'latency bound'}); the bias is "
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
        rule="Holds if the best implementation reaches MEMORY_BOUND of copy bandwidth at the training batch; a caveat if "
        "small batches fall below it (latency bound).",
    )


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
        )
    ranges = saving_ranges(ratios)
    median = float(ratios["saving"].median())
    spread = float(ratios["saving_sd"].median())
    inside = FEW_PERCENT[0] <= median <= FEW_PERCENT[1]
    nearest = min(FEW_PERCENT, key=lambda edge: abs(edge - median))
    return Finding(
        decide(
            inside, caveat=inside and any(not FEW_PERCENT[0] <= r["median"] <= FEW_PERCENT[1] for r in ranges.values())
        ),
        f"At {_rows_text(ratios)} RMSNorm saves a median {_pct(median)} "
        f"(sd {spread:.0%}) of LayerNorm's latency over {len(ratios)} stable points; per implementation: {describe_ranges(ranges)}.",
        {
            "per_implementation": ranges,
            "median_saving": median,
            "saving_sd": spread,
            "few_percent": FEW_PERCENT,
            "unstable_cases": unstable_cases(df),
        },
        key_number=median,
        threshold=nearest,
        spread=spread,
        rule="Holds if the median small-batch saving over stable points lies in 1%-10%; a caveat if some implementation's "
        "median lies outside. Threshold shown: the nearer edge of 1%-10%.",
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
        )
    median = float(fused["saving"].median())  # median: robust to one stalled point on a shared CPU
    spread = float(fused["saving_sd"].median())
    gap = abs(median)
    unfused_median = float(unfused["saving"].median()) if not unfused.empty else None
    return Finding(
        decide(gap < equal_time),
        f"Where both norms are fused ({describe_ranges(saving_ranges(fused))}) RMSNorm saves a median "
        f"{_pct(median)} (sd {spread:.1%}) of LayerNorm's time over {len(fused)} points, against a median "
        f"{_pct(unfused_median) if unfused_median is not None else 'n/a'} for the unfused ones.",
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
        rule="Holds (fusion leaves no advantage worth the name) if |median fused saving| is below EQUAL_TIME.",
    )


def _q3(df: pd.DataFrame, worth_it: float, estimate_error: float) -> Finding:
    """Q3: does pRMSNorm (p = 6.25%) save time against full RMSNorm, in each implementation that has it?"""
    ok = report.stable(df)
    part = ok[ok["study"] == "partial"].copy()
    part["backend_name"] = part["implementation"].str.split(" ").str[0]
    part["variant"] = part["implementation"].str.split(" ", n=1).str[1]
    per_width = []  # one row per backend and shape timed both ways: the saving and its sd from the two cases' repeats
    for (backend, _rows, d), group in part.groupby(["backend_name", "rows", "d"]):
        times = group.set_index("variant")["median_s"]
        if "full" in times and len(times) == 2:
            fraction = times.drop("full").iloc[0] / times["full"]
            sd = float(fraction * (group["relative_sd"] ** 2).sum() ** 0.5) if "relative_sd" in group else float("nan")
            per_width.append({"backend": backend, "d": d, "saving": 1 - fraction, "sd": sd})
    per_width = pd.DataFrame(per_width, columns=["backend", "d", "saving", "sd"])
    savings = {b: float(g["saving"].median()) for b, g in per_width.groupby("backend")}
    spreads = {b: float(g["sd"].median()) for b, g in per_width.groupby("backend") if g["sd"].notna().any()}
    if not savings:
        return Finding(
            "not testable here",
            "No implementation with partial RMS was timed stably in this run.",
            {"unstable_cases": unstable_cases(df)},
        )
    share = sum(s >= worth_it for s in savings.values()) / len(savings)
    best = max(savings, key=savings.get)
    text = ", ".join(f"{b} {_pct(s)}" for b, s in sorted(savings.items()))
    return Finding(
        decide(share > 0, caveat=share < 1),
        f"pRMSNorm at p=6.25% saves {text} of full RMSNorm's time (median over d = {', '.join(str(int(d)) for d in sorted(set(per_width['d'])))}; Table 8 of the paper: 63.9% for pRMSNorm vs 40.8% "
        f"for RMSNorm, whole model); its RMS estimate deviates by {estimate_error:.1%} (relative, i.i.d. Gaussian rows), "
        f"and the normalise pass still reads every element.",
        {
            "saving_by_backend": savings,
            "saving_sd_by_backend": spreads,
            "worth_it_threshold": worth_it,
            "rms_estimate_relative_error": estimate_error,
        },
        key_number=savings[best],
        threshold=worth_it,
        spread=spreads.get(best),
        rule="Holds if every implementation with partial RMS saves at least WORTH_IT; some but not all gives a caveat. "
        "Key number: the best implementation's saving.",
    )


# ---------------------------------------------------------------- the claims, weighed across hardware


def _fusion(m: Measured, memory_bound: float | None) -> dict:
    return {"one_op": single_kernel(m.frame) if memory_bound is not None else None, "memory_bound": memory_bound}


def a5(df, equal_time: float, *, memory_bound: float | None = None, gpu=None) -> Finding:
    """A5 on each hardware (see `_a5`), weighed. `memory_bound`: also count one-kernel pairs at that share of copy as fused."""
    return weigh([(m, _a5(m.frame, equal_time, **_fusion(m, memory_bound))) for m in _sources(df, gpu)])


def q2(df, equal_time: float, *, memory_bound: float | None = None, gpu=None) -> Finding:
    """Q2 on each hardware (see `_q2`), weighed."""
    return weigh([(m, _q2(m.frame, equal_time, **_fusion(m, memory_bound))) for m in _sources(df, gpu)])


def a7_b8(df, extra_pass: float, chunked_df: pd.DataFrame | None = None, *, gpu=None) -> tuple[Finding, Finding]:
    """A7/B8 on each hardware (see `_a7_b8`), weighed. Each hardware's chunked kernels are its own; `chunked_df`
    lends chunked results to this run's judgement (a frame from elsewhere, when no `gpu` run is weighed)."""
    parts = [(m, _a7_b8(m.frame, extra_pass, chunked_df if i == 0 else None)) for i, m in enumerate(_sources(df, gpu))]
    return weigh([(m, a7) for m, (a7, _) in parts]), weigh([(m, b8) for m, (_, b8) in parts])


def b9(df, welford_equal: float, chunked_df: pd.DataFrame | None = None, *, gpu=None) -> Finding:
    """B9 on each hardware (see `_b9`), weighed."""
    return weigh(
        [(m, _b9(m.frame, welford_equal, chunked_df if i == 0 else None)) for i, m in enumerate(_sources(df, gpu))]
    )


def a10(df, memory_bound: float, *, gpu=None) -> Finding:
    """A10 on each hardware (see `_a10`), weighed."""
    return weigh([(m, _a10(m.frame, memory_bound)) for m in _sources(df, gpu)])


def b10(df, *, gpu=None) -> Finding:
    """B10 on each hardware (see `_b10`), weighed."""
    return weigh([(m, _b10(m.frame)) for m in _sources(df, gpu)])


def q3(df, worth_it: float, estimate_error: float, *, gpu=None) -> Finding:
    """Q3 on each hardware (see `_q3`), weighed."""
    return weigh([(m, _q3(m.frame, worth_it, estimate_error)) for m in _sources(df, gpu)])


def partial_rms_estimate_error(d: int, partial: float, rows: int = 512, seed: int = 0) -> float:
    """Median relative error of pRMSNorm's RMS (first ceil(p*d) features) against the full RMS, on i.i.d. Gaussian rows."""
    import torch

    from normlab.norms.validation import partial_size

    x = torch.randn(rows, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    k = partial_size(d, partial)
    estimate = x[:, :k].pow(2).mean(-1).sqrt()
    full = x.pow(2).mean(-1).sqrt()
    return float((estimate / full - 1).abs().median())


# ---------------------------------------------------------------- the chapter's page
#
# The speed chapter's steps: measure, then the tables and sentences it shows. A table that can be empty in a run
# (no GPU run committed, a study the profile skips) comes with the sentence the page shows instead.

BENCH_PROFILES = {"smoke": "smoke", "cpu": "cpu", "gpu": "gpu"}  # chapter profile -> benchmark profile


def bench_profile(profile: str) -> str:
    """The benchmark profile the chapter runs at `profile`."""
    if profile not in BENCH_PROFILES:
        raise ValueError(f"unknown profile {profile!r}; valid profiles: {', '.join(BENCH_PROFILES)}")
    return BENCH_PROFILES[profile]


def check_thresholds(equal_time: float, extra_pass: float, welford_equal: float, memory_bound: float, worth_it: float):
    """Each of the chapter's thresholds is a fraction in (0, 1); the error names the chapter's constant."""
    named = {
        "EQUAL_TIME": equal_time,
        "EXTRA_PASS": extra_pass,
        "WELFORD_EQUAL": welford_equal,
        "MEMORY_BOUND": memory_bound,
        "WORTH_IT": worth_it,
    }
    for name, value in named.items():
        if not 0 < value < 1:
            raise ValueError(f"{name} must lie in (0, 1), got {value}")


def gpu_results_dir() -> Path:
    """Where committed GPU results live: data/, or NORMLAB_GPU_BENCH_DIR (the tests point it elsewhere)."""
    return Path(os.environ.get("NORMLAB_GPU_BENCH_DIR", paths.ROOT / "data"))


@dataclass
class SpeedRun:
    """This run's benchmark and the GPU runs its verdicts weigh."""

    document: dict  # the benchmark's results document (results contract)
    bench_file: Path  # where it was saved
    df: pd.DataFrame  # one row per case
    where: str  # the hardware and torch version, for the page
    unstable: list  # one line per case left unstable
    timed: pd.DataFrame  # the cases that were timed
    live: Measured  # this run, with its hardware
    gpu_runs: list  # the GPU runs to weigh, the deciding one first (empty: this run decides alone)

    @property
    def gpu(self) -> Measured | None:
        return self.gpu_runs[0] if self.gpu_runs else None


def measure(profile: str, bench_dir: Path, committed_dir: Path) -> SpeedRun:
    """Run the benchmark at `profile`, save it under `bench_dir`, and gather the committed GPU runs."""
    document = bench.run(profile)
    bench_file = bench.save(document, Path(bench_dir) / f"speed-{profile}.json")
    df = report.frame(document)
    hw = document["hardware"]
    where = f"{hw['gpu'] or hw['cpu']} ({hw['cpu_cores']} CPU cores), torch {document['versions']['torch']}"
    unstable = unstable_cases(df)
    timed = report.measured(df)
    live = provenance.measured(document)
    committed = provenance.committed(committed_dir)
    return SpeedRun(document, bench_file, df, where, unstable, timed, live, gpu_evidence(live, committed))


def run_name(m: Measured, live: Measured) -> str:
    return "this run" if m is live else m.source


def _markdown(text: str):
    """Text the page shows as Markdown (IPython is needed only where a page is made)."""
    from IPython.display import Markdown

    return Markdown(text)


def table_or_note(frame: pd.DataFrame, note: str, *, caption: str | None = None):
    """The frame as a table, or `note` as Markdown where the run has nothing to put in it."""
    return _markdown(note) if frame.empty else table(frame, caption=caption)


def measurement_text(run: SpeedRun, agreement: pd.DataFrame) -> str:
    """Where and how long the benchmark ran, how many cases were re-measured or left unstable, and the GPU runs."""
    agreeing = int(agreement["agree within spread"].sum()) if not agreement.empty else 0
    timed, gpu = run.timed, run.gpu
    remeasured = int(timed.get("remeasured", pd.Series(dtype=bool)).fillna(False).astype(bool).sum())
    return (
        f"Measured on {run.where}, {run.document['started']}, in {run.document['wall_s']:.0f} s: {len(timed)} cases "
        f"timed, {remeasured} re-measured, **{len(run.unstable)} left unstable** and excluded; {agreeing} of "
        f"{len(agreement)} same-path pairs agree within their spread (the {{ref}}`same-path table "
        "<tab-speed-same-path>`). "
        + (
            f"The verdicts also weigh {len(run.gpu_runs)} GPU run(s), decided on {gpu.hardware}, "
            f"{'this run' if gpu is run.live else gpu.source} (commit {gpu.commit}; {{ref}}`speed-gpu`)."
            if gpu is not None
            else "No GPU run is committed, so the verdicts rest on this run alone."
        )
    )


CASE_COLUMNS = [
    "study",
    "norm",
    "implementation",
    "direction",
    "dtype",
    "rows",
    "d",
    "mode",
    "time (ms)",
    "sd (ms)",
    "fraction_of_copy",
    "effective_passes",
    "unstable",
]


def cases_frame(timed: pd.DataFrame) -> pd.DataFrame:
    """Every timed case: its median time and spread in ms, fraction of copy bandwidth and effective passes."""
    cases = timed.assign(
        **{"time (ms)": timed["median_s"] * 1e3, "sd (ms)": timed["median_s"] * timed.get("relative_sd", 0) * 1e3}
    )
    return cases[CASE_COLUMNS]


def skipped_text(df: pd.DataFrame, unstable: list) -> str:
    """One bullet per group of cases that could not be timed here, then one per case left unstable."""
    lines = [
        f"- **{r.status}** ({r.cases} cases: {r.implementations}; {r.studies}): {r.reason}"
        for r in report.skipped(df).itertuples()
    ] + [f"- **unstable**: {line}" for line in unstable]
    return "\n".join(lines or ["Every case was timed and stable."])


def forward_sweep(frame: pd.DataFrame) -> pd.DataFrame:
    """The forward cases at the training batch: the row-length sweep, allocating its output."""
    return frame[(frame["study"] == "sweep") & (frame["mode"] == "alloc")]


def forward_norm_cases(stable_cases: pd.DataFrame) -> pd.DataFrame:
    """The sweep's stable forward cases of the norms themselves (the copies left out)."""
    return stable_cases[
        (stable_cases["study"] == "sweep") & (stable_cases["norm"] != "copy") & (stable_cases["mode"] == "alloc")
    ]


def gpu_runs_text(gpu_runs: list, live: Measured) -> str:
    """Each GPU run the verdicts weigh: its hardware, backends, cases and how many stayed unstable."""
    if not gpu_runs:
        return (
            "**No GPU run is committed** (no `data/gpu-bench*.json`), so every verdict below rests on this "
            "run alone, and the GPU figures are empty."
        )
    lines = []
    for m in gpu_runs:
        timed_there = report.measured(m.frame)
        backends = ", ".join(sorted(timed_there["backend"].dropna().unique()))
        role = "decides the verdicts" if m is gpu_runs[0] else "checks them"
        lines.append(
            f"- **{run_name(m, live)}** ({role}): measured on {m.label}. Backends timed: {backends}. "
            f"{len(timed_there)} cases timed, **{m.unstable_count} left unstable** after re-measuring and "
            "excluded from every summary and verdict (listed, folded, at the end of this section)."
        )
    return "GPU runs weighed by the verdicts, the newest first:\n\n" + "\n".join(lines)


def gpu_frames(gpu_runs: list, live: Measured) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every GPU run's LN/RMS ratios and its stable cases, each row labelled with its run."""
    if not gpu_runs:
        return pd.DataFrame(columns=["study", "mode", "run"]), pd.DataFrame(columns=["study", "norm", "mode", "run"])
    ratios = pd.concat(
        [report.ln_rms_ratios(m.frame).assign(run=run_name(m, live)) for m in gpu_runs], ignore_index=True
    )
    stable = pd.concat([report.stable(m.frame).assign(run=run_name(m, live)) for m in gpu_runs], ignore_index=True)
    return ratios, stable


def gpu_sweep_text(gpu_sweep: pd.DataFrame) -> str:
    """Per GPU run, the median forward LN/RMS ratio over d of each implementation and dtype."""
    return "Forward at the training batch, the median t_LN/t_RMS over d, per GPU run: " + " ".join(
        f"**{run}**: {report.describe_medians(report.implementation_summary(group, by=('implementation', 'dtype')))}."
        for run, group in gpu_sweep.groupby("run", sort=False)
    )


def gpu_run_comparison(gpu_ratios: pd.DataFrame) -> pd.DataFrame:
    """Per implementation, direction and dtype at the training batch: each GPU run's median ratio and its sd."""
    return report.compare_runs(training_subset(gpu_ratios), by=("implementation", "direction", "dtype"))


def gpu_backward_display(gpu_ratios: pd.DataFrame, gpu: Measured | None):
    """The forward+backward LN/RMS grid per run, implementation, dtype and d, or the sentence saying there is none."""
    grid = (
        report.ratio_grid(gpu_ratios, "backward", rows=("implementation", "dtype", "run"))
        if gpu is not None
        else pd.DataFrame()
    )
    if grid.empty:
        return _markdown("No stable GPU forward+backward pair to show.")
    return table(
        grid,
        caption=f"GPU ({gpu.hardware}): forward+backward t_LN / t_RMS per implementation, "
        "dtype, run and d, at the training batch (stable cases; — : unstable).",
    )


SMALL_BATCH_COLUMNS = ["implementation", "dtype", "rows", "d", "t_LN (µs)", "t_RMS (µs)", "ratio_ln_over_rms"]


def _latencies(small: pd.DataFrame) -> pd.DataFrame:
    return small.assign(**{"t_LN (µs)": small["t_ln_s"] * 1e6, "t_RMS (µs)": small["t_rms_s"] * 1e6})


def gpu_small_batch_display(gpu_ratios: pd.DataFrame, gpu: Measured | None):
    """The GPU's small-batch latencies per implementation and run, or the sentence saying there are none."""
    small = gpu_ratios[gpu_ratios["study"] == "small-batch"]
    if small.empty:
        return _markdown("No stable GPU small-batch pair to show.")
    columns = [*SMALL_BATCH_COLUMNS[:4], "run", *SMALL_BATCH_COLUMNS[4:], "saving", "saving_sd"]
    return table(
        _latencies(small)
        .sort_values(["implementation", "dtype", "rows", "run"])[columns]
        .astype({"rows": str, "d": str}),  # shapes, not quantities: no significant-figure rounding
        caption=f"GPU ({gpu.hardware}): small-batch latency per implementation and run (stable cases).",
    )


def gpu_device_time_display(gpu_runs: list, live: Measured) -> list:
    """Per GPU run, wall time beside the kernels' own time (torch.profiler), and whether the host is what the
    call waits on; a sentence names the runs that carry no device time."""
    if not gpu_runs:
        return [_markdown("No GPU run is committed.")]
    frames, without = [], []
    for m in gpu_runs:
        cases = report.host_bound(m.frame)
        if cases.empty:
            without.append(f"**{run_name(m, live)}**")
        else:
            frames.append(cases.assign(run=run_name(m, live)))
    shown = []
    if without:
        shown.append(
            _markdown(
                f"{', '.join(without)} recorded wall time only (they predate the bench's device timing), so their "
                "host-bound and device-bound cases cannot be told apart; `make gpu-session` records both."
            )
        )
    if frames:
        cases = pd.concat(frames, ignore_index=True)
        cases = cases.assign(**{"wall (µs)": cases["median_s"] * 1e6, "device (µs)": cases["device_time_s"] * 1e6})
        columns = ["run", "study", "norm", "implementation", "direction", "dtype", "rows", "d", "wall (µs)"]
        shown.append(
            table(
                cases[[*columns, "device (µs)", "host_share", "host_bound"]].astype({"rows": str, "d": str}),
                caption="GPU: wall time and the sum of the case's GPU kernel durations per call (torch.profiler), "
                f"per run; host-bound: more than {report.HOST_BOUND_SHARE:.0%} of the wall time is spent outside "
                "kernels.",
            )
        )
    return shown


def gpu_chunked_display(gpu_stable: pd.DataFrame, gpu_runs: list, live: Measured) -> list:
    """The GPU's chunked and partial-RMSNorm cases (if any), then the GPU cases left unstable."""
    if not gpu_runs:
        return [_markdown("No GPU run is committed.")]
    shown = []
    chunked = gpu_stable[gpu_stable["study"].isin(["chunked", "partial"])]
    if not chunked.empty:
        columns = ["run", "study", "implementation", "rows", "d", "time (ms)", "fraction_of_copy", "effective_passes"]
        shown.append(
            table(
                chunked.assign(**{"time (ms)": chunked["median_s"] * 1e3})[columns].astype({"rows": str, "d": str}),
                caption=f"GPU ({gpu_runs[0].hardware}): chunked kernels (rows too long for one program) and full vs "
                "partial RMSNorm, forward, float32, per run (stable cases).",
            )
        )
    unstable = [f"- **unstable** ({run_name(m, live)}): {line}" for m in gpu_runs for line in unstable_cases(m.frame)]
    shown.append(_markdown("\n".join(unstable or ["Every GPU case was stable."])))
    return shown


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


def small_batch_frame(ratios: pd.DataFrame) -> pd.DataFrame:
    """This run's small-batch latencies of both norms per implementation, with the saving and its sd."""
    small = ratios[ratios["study"] == "small-batch"]
    return _latencies(small)[[*SMALL_BATCH_COLUMNS, "saving", "saving_sd"]]


def partial_frame(stable_cases: pd.DataFrame) -> pd.DataFrame:
    """Full against partial RMSNorm: time, fraction of copy bandwidth and effective passes."""
    partial = stable_cases[stable_cases["study"] == "partial"]
    return partial.assign(**{"time (ms)": partial["median_s"] * 1e3})[
        ["implementation", "rows", "d", "time (ms)", "fraction_of_copy", "effective_passes"]
    ]


def literature_frame() -> pd.DataFrame:
    """The paper's per-table rows and Narang et al.'s T5-base row, each saving also as a speed-up."""
    narang = narang_row()
    t5 = {
        "source": "Narang et al. 2021, T5-base (loss 1.821 vs 1.838)",
        "model": "T5-base",
        "norm": "RMS Norm",
        "time saving": narang["saving"],
        "speed-up (×)": narang["speedup"],
        "faster by": narang["speedup"] - 1,
    }
    return pd.concat([paper_rows_frame(), pd.DataFrame([t5])], ignore_index=True)


def model_level_text(model_level: dict, a8: Finding, b6: Finding) -> str:
    """The model-level parts read from the quality and realmodels chapters, then the A8 and B6 verdicts."""

    def part(name, ran, summary):
        return f"- {name}: " + (summary if ran else "**has not run**, so this part is missing from the verdict.")

    return "\n".join(
        [
            "Model-level parts read from the other chapters' evidence:",
            part(
                "quality chapter (step time, B6)",
                model_level["quality_ran"],
                model_level["quality_summary"] or "no summary",
            ),
            part(
                "realmodels chapter (norms' share of a real model's time)",
                model_level["realmodels_ran"],
                model_level["realmodels_summary"] or "no summary",
            ),
            "",
            f"**A8** — {a8.verdict}: {a8.summary}",
            "",
            f"**B6** — {b6.verdict}: {b6.summary}",
        ]
    )
