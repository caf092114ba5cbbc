"""V3, QK-norm and the learning-rate range: the largest attention logit at the end of training, and the verdict
on the gain in highest usable learning rate (`qk_claim`) with its paragraph (`qk_paragraph`).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from normlab.analysis.landscape.method import Landscape, verdict_lead
from normlab.study import design
from normlab.study.findings import Finding
from normlab.study.key_numbers import KeyNumber
from normlab.study.present import significant
from normlab.study.results import decide

QK_COMPARED = ("rms", "rms+qk")
V3_KEY = KeyNumber("rise of the highest usable learning rate with QK-norm", "decades")


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
            for lr in study.settings["lr_grid"]
        ]
    )


def _failure(lr_range: dict) -> str:
    at = lr_range["diverges_at"]
    return "no failure on the grid" if at is None else f"fails at {significant(at)}"


def qk_claim(study: Landscape, logit_rows: pd.DataFrame) -> Finding:
    """V3: needs a failure without QK-norm on the grid; holds when QK-norm's highest usable LR is higher in every
    seed. The key number is the mean gain in decades, log10(highest usable LR with ÷ without), against 0."""
    P = study.settings
    small_ranges = study.ranges("small", QK_COMPARED)
    gains = []
    noqk_fails = False
    for seed in range(P["grid_seeds"]):
        a, b = small_ranges.get(("rms", seed)), small_ranges.get(("rms+qk", seed))
        noqk_fails = noqk_fails or a["fails_at"] is not None or a["lr_low"] is None
        # a range with no usable point counts as topping out half a decade below the grid
        high_a = a["lr_high"] or min(P["lr_grid"]) / 10**0.5
        high_b = b["lr_high"] or min(P["lr_grid"]) / 10**0.5
        gains.append(math.log10(high_b / high_a))
    gain_mean = float(np.mean(gains))
    gain_sd = float(np.std(gains, ddof=1)) if len(gains) > 1 else 0.0
    rms_range, qk_range = (study.usable_range("small", label, QK_COMPARED) for label in QK_COMPARED)
    if not noqk_fails:
        verdict = "not testable here"
    elif gain_mean > 0 and min(gains) > 0:
        verdict = decide(True, caveat=qk_range["diverges_at"] is None)
    else:
        verdict = "does not hold"
    summary = (
        f"Highest usable LR without QK-norm {significant(rms_range['lr_high'])} ({_failure(rms_range)}), with "
        f"QK-norm {significant(qk_range['lr_high'])} ({_failure(qk_range)}): a gain of {significant(gain_mean)} "
        f"decades over {len(gains)} seeds."
    )
    return Finding(
        verdict,
        summary,
        {
            "gain_decades_per_seed": gains,
            "lr_range_rms": rms_range,
            "lr_range_qk": qk_range,
            "final_max_logit": logit_rows.to_dict("records"),
            "qk_minus_rms_at_reference_lr": study.versus("small", "rms", "rms+qk"),
            "lr_grid": P["lr_grid"],
            "model": P["small"],
            "train": P["small_train"],
            "corpus_sha256": study.corpus_sha256,
        },
        key_number=gain_mean,
        threshold=design.value("V3", "wider_range"),
        spread=gain_sd,
        rule="Needs a failure without QK-norm on the grid (else not testable here); holds when QK-norm's highest "
        "usable LR is higher in every seed (caveat when QK-norm never fails on the grid, so the gain is a lower bound).",
        meaning=V3_KEY.meaning,
        unit=V3_KEY.unit,
    )


def qk_paragraph(v3: Finding) -> str:
    """V3's verdict paragraph: the finding's verdict and sentence, and what this scale can show."""
    return verdict_lead("V3", v3) + (
        "**What this scale can and cannot show:** Wortsman et al. designed this proxy for small models, so this is the "
        "claim small scale tests best. The runs here clip gradients at norm 1 and decay weights, as the rest of the "
        "book does; both can hold off a divergence that unclipped training would show, and a grid of half-decade steps "
        "locates the divergence point only to within a factor of about 3."
    )
