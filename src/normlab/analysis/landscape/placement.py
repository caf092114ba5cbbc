"""V2, where the norm goes: hidden growth and usable learning rates of the four placements at the deep scale,
and the verdict (`placement_claim`) with its paragraph (`placement_paragraph`).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from normlab.analysis.landscape.method import Landscape, measured, verdict_lead
from normlab.analysis.landscape.profiles import PLACEMENTS
from normlab.analysis.landscape.summaries import growth_ratio
from normlab.study.findings import Finding
from normlab.study.key_numbers import FACTOR, KeyNumber
from normlab.study.present import significant
from normlab.study.results import decide

# V2's arms, the four placements at the deep scale, by the names the page gives them
PLACEMENT_NAMES = {"pre": "pre-LN", "post": "post-LN", "peri": "Peri-LN", "post-sublayer": "OLMo 2's"}

OUTPUT_NORMED = ("peri", "post-sublayer")  # the placements that normalise each sublayer's output
V2_KEY = KeyNumber("hidden-RMS growth relative to pre-LN's, weaker placement", FACTOR)


def placement_measures(study: Landscape) -> dict:
    """Hidden growth (last block over first, end of training) per placement and seed, the output-normalising
    placements' growth relative to pre-LN's, the usable LR ranges, and the paired final loss against pre-LN."""
    growth = {}
    for placement in PLACEMENTS:
        growth[placement] = [
            growth_ratio(r["stream_rms"]) if not r["diverged"] else math.nan for r in study.pick("deep", placement)
        ]
    pre_growth = np.array(growth["pre"])
    relative = {p: np.array(growth[p]) / pre_growth for p in OUTPUT_NORMED}
    rel_mean = {p: float(np.nanmean(v)) for p, v in relative.items()}
    rel_sd = {p: float(np.nanstd(v, ddof=1)) if np.isfinite(v).sum() > 1 else math.nan for p, v in relative.items()}
    return {
        "growth": growth,
        "pre_growth": pre_growth,
        "relative_mean": rel_mean,
        "relative_sd": rel_sd,
        "worse": max(rel_mean, key=lambda p: rel_mean[p]),
        "ranges": {p: study.usable_range("deep", p, PLACEMENTS) for p in PLACEMENTS},
        "versus_pre": {p: study.versus("deep", "pre", p) for p in ("post", "peri", "post-sublayer")},
    }


def placement_table(measures: dict) -> pd.DataFrame:
    growth, deep_range, placement_vs_pre = measures["growth"], measures["ranges"], measures["versus_pre"]
    return pd.DataFrame(
        [
            {
                "placement": p,
                "growth (last/first block)": float(np.nanmean(growth[p])),
                "growth sd over seeds": float(np.nanstd(growth[p], ddof=1))
                if np.isfinite(growth[p]).sum() > 1
                else None,
                "final loss − pre-LN": None
                if p == "pre" or placement_vs_pre[p] is None
                else placement_vs_pre[p]["mean_difference"],
                "usable LR from": deep_range[p]["lr_low"],
                "usable LR to": deep_range[p]["lr_high"],
                "first unusable LR above": deep_range[p]["unusable_above"],
            }
            for p in PLACEMENTS
        ]
    )


def placement_claim(
    study: Landscape, measures: dict, *, pre_growth_needed: float, max_relative_growth: float
) -> Finding:
    """V2: needs pre-LN's growth >= `pre_growth_needed`; holds when both output-normalising placements grow at most
    `max_relative_growth` times as much as pre-LN (the worse judged) with a usable LR range at least as wide."""
    P = study.settings
    rel_mean, rel_sd, worse = measures["relative_mean"], measures["relative_sd"], measures["worse"]
    deep_range = measures["ranges"]
    pre_growth_mean = float(np.nanmean(measures["pre_growth"]))
    wider_or_equal = all(
        (deep_range[p]["lr_high"] or 0) >= (deep_range["pre"]["lr_high"] or 0)
        and (deep_range[p]["lr_low"] or math.inf) <= (deep_range["pre"]["lr_low"] or math.inf)
        for p in OUTPUT_NORMED
    )
    strictly_wider = any(deep_range[p]["decades"] > deep_range["pre"]["decades"] for p in OUTPUT_NORMED)
    if not math.isfinite(rel_mean[worse]) or pre_growth_mean < pre_growth_needed:
        verdict = "not testable here"
    elif rel_mean[worse] <= max_relative_growth and wider_or_equal:
        verdict = decide(True, caveat=not strictly_wider)
    else:
        verdict = "does not hold"
    summary = (
        f"Pre-LN's hidden RMS grows {significant(pre_growth_mean)}× from the first to the last of "
        f"{P['deep']['depth']} blocks; {worse} (the weaker of Peri-LN and OLMo 2's) grows "
        f"{significant(rel_mean[worse])}× as much (threshold {max_relative_growth:g}), usable LR up to "
        f"{significant(deep_range[worse]['lr_high'])} vs pre-LN's {significant(deep_range['pre']['lr_high'])}."
    )
    return Finding(
        verdict,
        summary,
        {
            "growth": measures["growth"],
            "relative_growth_mean": rel_mean,
            "relative_growth_sd": rel_sd,
            "lr_ranges": deep_range,
            "paired_loss_vs_pre": measures["versus_pre"],
            "model": P["deep"],
            "train": P["deep_train"],
            "lr_grid": P["deep_lr_grid"],
            "corpus_sha256": study.corpus_sha256,
        },
        key_number=rel_mean[worse] if math.isfinite(rel_mean[worse]) else None,
        threshold=max_relative_growth,
        spread=rel_sd[worse] if math.isfinite(rel_sd[worse]) else None,
        meaning=V2_KEY.meaning,
        unit=V2_KEY.unit,
        arms=study.arms("deep", PLACEMENT_NAMES),
    )


def placement_paragraph(v2: Finding, *, pre_growth_needed: float) -> str:
    """V2's verdict paragraph: the finding's verdict and sentence, whether pre-LN grew the `pre_growth_needed` the
    claim presupposes, each output-normalising placement's growth, and what this scale can show, all read from its
    evidence."""
    e = v2.evidence
    pre_growth_mean = float(np.nanmean(np.array(e["growth"]["pre"], dtype=float)))
    rel_mean = {p: measured(v) for p, v in e["relative_growth_mean"].items()}
    depth = e["model"]["depth"]
    too_little = (
        f"Pre-LN hidden growth stays under the {pre_growth_needed:g}× the claim presupposes, so the comparison cannot "
        "be made as planned. "
    )
    return (
        verdict_lead("V2", v2)
        + (too_little if pre_growth_mean < pre_growth_needed else "")
        + f"Peri-LN grows {significant(rel_mean['peri'])}× and OLMo 2's placement "
        f"{significant(rel_mean['post-sublayer'])}× as much as pre-LN"
        + (
            ": each of their blocks adds a branch output normalised to a fixed RMS, where pre-LN's "
            "branches start small (GPT-2's scaled initialisation), which would explain why they grow more. "
            if min(rel_mean.values()) > 1
            else ". "
        )
        + f"**What this scale can and cannot show:** at {depth} blocks and a few hundred steps a small model shows the "
        "direction of hidden-state growth and whether a placement trains over a wider range of learning rates; the "
        "massive activations and loss spikes that motivated Peri-LN appear in billion-parameter runs over far longer "
        "training."
    )
