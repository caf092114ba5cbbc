"""The landscape at a glance: every variant's paired loss against its baseline, its step-time ratio and its
usable learning-rate range, in one table (`summary_frame`) that the summary figure draws.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from normlab.analysis.landscape.method import Landscape
from normlab.analysis.landscape.profiles import SMALL_VARIANTS
from normlab.gpt.model import GPTConfig
from normlab.gpt.train import compare_step_times

BASELINE = "RMSNorm (baseline)"
SUMMARY_VARIANTS = {  # name: (scale, label, model options)
    "LayerNorm": ("small", "layer", dict(norm="layer")),
    "DyT (authors' recipe)": ("small", "dyt-authors", SMALL_VARIANTS["dyt-authors"]),
    "DyT, RMSNorm final": ("small", "dyt-rmsfinal", SMALL_VARIANTS["dyt-rmsfinal"]),
    "QK-norm": ("small", "rms+qk", dict(qk_norm=True)),
    "post-LN": ("deep", "post", dict(placement="post")),
    "Peri-LN": ("deep", "peri", dict(placement="peri")),
    "OLMo 2 (post-sublayer)": ("deep", "post-sublayer", dict(placement="post-sublayer")),
    "LayerNorm Scaling": ("deepest", "1/√l", dict(depth_scaling=True)),
}


# The authors' DyT recipe is paired with RMSNorm under its own AdamW, as in V1.
SUMMARY_BASELINE = {"dyt-authors": "rms-authors", "dyt-rmsfinal": "rms-authors"}


def step_times(settings: dict, corpus, device: str = "cpu") -> pd.DataFrame:
    """Training-step times of the baseline and every variant, all at the small scale, timed in alternation."""
    configs = {BASELINE: GPTConfig(**settings["small"])}
    configs.update(
        {name: GPTConfig(**{**settings["small"], **model}) for name, (_, _, model) in SUMMARY_VARIANTS.items()}
    )
    return compare_step_times(
        configs,
        corpus,
        batch_size=settings["small_train"]["batch_size"],
        repeats=settings["timing_repeats"],
        device=device,
    )


def summary_frame(study: Landscape, timings: pd.DataFrame) -> pd.DataFrame:
    """Per variant: the paired final-loss difference to the baseline at its scale, the step-time ratio at the small
    scale (median, and the IQR of the per-repeat ratio), and the usable learning-rate range."""
    P = study.settings
    medians = timings.groupby("model").step_time.median()
    rows = []
    for name, (scale, label, _) in SUMMARY_VARIANTS.items():
        paired = study.versus(scale, SUMMARY_BASELINE.get(label, "rms" if scale == "small" else "pre"), label)
        if scale in ("small", "deep"):
            rng = study.usable_range(scale, label, summary_pair(scale, label))
        else:
            rng = {"lr_low": None, "lr_high": None, "unusable_above": None}
        ratios = []
        for r in range(P["timing_repeats"]):
            one = timings[timings.repeat == r].set_index("model").step_time
            ratios.append(one[name] / one[BASELINE])
        rows.append(
            {
                "variant": name,
                "scale": f"{scale} ({P[scale]['depth']} blocks, width {P[scale]['width']})",
                "loss − baseline": paired["mean_difference"] if paired else None,
                "95% low": paired["ci_low"] if paired else None,
                "95% high": paired["ci_high"] if paired else None,
                "step-time ratio": float(medians[name] / medians[BASELINE]),
                "ratio IQR": float(np.subtract(*np.percentile(ratios, [75, 25]))),
                "usable LR from": rng["lr_low"],
                "usable LR to": rng["lr_high"],
            }
        )
    return pd.DataFrame(rows)


def summary_pair(scale: str, label: str) -> tuple[str, str]:
    """The grid baseline a summary variant's usable range is judged with (RMSNorm's grid also for the DyT recipe,
    whose own baseline runs at the reference learning rate only), and the variant."""
    return ({"small": "rms", "deep": "pre"}[scale], label)


def baseline_ranges(study: Landscape) -> list[dict | None]:
    """The baseline's usable LR range beside each summary variant, judged within the same pair (None at the
    deepest, run at one LR)."""
    ranges = []
    for scale, label, _ in SUMMARY_VARIANTS.values():
        pair = summary_pair(scale, label) if scale in ("small", "deep") else None
        ranges.append(study.usable_range(scale, pair[0], pair) if pair else None)
    return ranges
