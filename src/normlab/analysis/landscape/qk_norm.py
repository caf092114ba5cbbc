"""V3, QK-norm and the learning-rate range: the largest attention logit at the end of training, each seed's
stable (non-diverging) learning-rate range (`stable_range_table`), and the verdict on the gain in highest stable
learning rate (`qk_claim`) with its paragraph (`qk_paragraph`). Failure means divergence, by the study's run record
(`normlab.gpt.run_record`); a run that trained to a worse loss is not a failure here.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from normlab.analysis.landscape.method import Landscape, verdict_lead
from normlab.analysis.shared.parity import t975
from normlab.study import design
from normlab.study.findings import Finding
from normlab.study.key_numbers import KeyNumber
from normlab.study.present import significant
from normlab.study.results import decide

QK_COMPARED = ("rms", "rms+qk")
V3_KEY = KeyNumber("rise of the highest stable (non-diverging) learning rate with QK-norm", "decades")


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


def _lowest_top(study: Landscape) -> float:
    # a seed stable at no grid point counts as topping out half a decade below the grid
    return min(study.settings["lr_grid"]) / 10**0.5


def stable_range_table(study: Landscape) -> pd.DataFrame:
    """Per grid seed, with and without QK-norm: the learning rates at which the run did not diverge (the run
    record's rule) and the first one above them that diverged."""
    ranges = study.stable_ranges("small", QK_COMPARED)
    names = {"rms": "no QK-norm", "rms+qk": "QK-norm"}
    return pd.DataFrame(
        [
            {
                "seed": int(seed),
                "model": names[label],
                "stable from": r["lr_low"],
                "stable to": r["lr_high"],
                "first diverging LR": r["fails_at"],
            }
            for (label, seed), r in sorted(ranges.items(), key=lambda item: (item[0][1], item[0][0]))
        ]
    )


def gain_interval(gains: list[float]) -> dict | None:
    """Mean gain in decades and its 95% t-interval over seeds; None with fewer than two seeds."""
    n = len(gains)
    if n < 2:
        return None
    mean = float(np.mean(gains))
    half = t975(n - 1) * float(np.std(gains, ddof=1)) / math.sqrt(n)
    return {"seeds": n, "mean": mean, "ci_low": mean - half, "ci_high": mean + half}


def _verdict(noqk_diverges: bool, gains: list[float], interval: dict | None, min_seeds: int, qk_diverges: bool):
    """The verdict, and why it is fragile (None when it is not)."""
    if not noqk_diverges:
        return "not testable here", None
    if len(gains) < min_seeds:
        fragile = f"fragile: {len(gains)} seeds, fewer than the {min_seeds} an interval needs here"
        if min(gains) > 0:
            return "holds with caveats", fragile
        if max(gains) <= 0:
            return "does not hold", fragile
        return "not testable here", fragile + ", and the seeds disagree"
    if interval["ci_low"] > 0:
        return decide(True, caveat=not qk_diverges), None
    if interval["ci_high"] <= 0:
        return "does not hold", None
    return "not testable here", "fragile: the interval of the gain spans 0"


def _range_text(r: dict) -> str:
    top = "nowhere" if r["lr_high"] is None else f"up to {significant(r['lr_high'])}"
    fails = "no divergence on the grid" if r["fails_at"] is None else f"diverges at {significant(r['fails_at'])}"
    return f"stable {top}, {fails}"


def qk_claim(study: Landscape, logit_rows: pd.DataFrame, *, min_seeds: int) -> Finding:
    """V3, failure meaning divergence (the run record's rule), not a loss gap. Needs a divergence without QK-norm
    on the grid (else not testable here). The gain per grid seed is log10(highest stable LR with ÷ without
    QK-norm); with at least `min_seeds` seeds it holds when the gain's 95% interval lies above 0 (caveat when
    QK-norm never diverges, so the gain is a lower bound) and does not hold when it lies at or below 0. With fewer
    seeds the verdict follows the seeds' agreement and says it is fragile."""
    if isinstance(min_seeds, bool) or not isinstance(min_seeds, int) or min_seeds < 2:
        raise ValueError(f"qk_claim: min_seeds must be an int >= 2 (an interval needs two seeds), got {min_seeds!r}")
    P = study.settings
    ranges = study.stable_ranges("small", QK_COMPARED)
    seeds = sorted({seed for _, seed in ranges})
    per_seed = {seed: (ranges[("rms", seed)], ranges[("rms+qk", seed)]) for seed in seeds}
    noqk_diverges = any(a["fails_at"] is not None or a["lr_low"] is None for a, _ in per_seed.values())
    qk_diverges = any(b["fails_at"] is not None or b["lr_low"] is None for _, b in per_seed.values())
    gains = [
        math.log10((b["lr_high"] or _lowest_top(study)) / (a["lr_high"] or _lowest_top(study)))
        for a, b in per_seed.values()
    ]
    interval = gain_interval(gains)
    verdict, fragile = _verdict(noqk_diverges, gains, interval, min_seeds, qk_diverges)
    gain_mean = float(np.mean(gains))
    gain_sd = float(np.std(gains, ddof=1)) if len(gains) > 1 else 0.0
    seed_text = "; ".join(
        f"seed {seed}: without QK-norm {_range_text(a)}, with it {_range_text(b)}" for seed, (a, b) in per_seed.items()
    )
    interval_said = (  # below min_seeds the verdict reads no interval, so the sentence prints none
        ""
        if interval is None or len(gains) < min_seeds
        else f", 95% interval {significant(interval['ci_low'])} to {significant(interval['ci_high'])}"
    )
    summary = (
        f"Failure here means divergence. {seed_text}. Gain in the highest stable LR with QK-norm: "
        f"{significant(gain_mean)} decades over {len(gains)} seeds{interval_said}"
        + (f" ({fragile})" if fragile else "")
        + "."
    )
    return Finding(
        verdict,
        summary,
        {
            "gain_decades_per_seed": gains,
            "gain_interval": interval,
            "fragile": fragile,
            "min_seeds": min_seeds,
            "stable_range_per_seed": {f"{label} seed {seed}": r for (label, seed), r in ranges.items()},
            "usable_range_rms": study.usable_range("small", "rms", QK_COMPARED),
            "usable_range_qk": study.usable_range("small", "rms+qk", QK_COMPARED),
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
        rule="Failure means divergence (a non-finite loss or gradient, or a final loss above the initial one). Needs "
        "a divergence without QK-norm on the grid (else not testable here); with at least "
        f"{min_seeds} grid seeds, holds when the 95% interval of the gain in highest stable LR lies above 0 (caveat "
        "when QK-norm never diverges, so the gain is a lower bound), does not hold when it lies at or below 0; with "
        "fewer seeds the verdict follows the seeds' agreement and is marked fragile.",
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
