"""Section "Weight decay on the gains of the small GPT": B15's part (4), the paired decay sweep against its margin."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from normlab.analysis.shared.paired import paired_or_none


@dataclass
class DecaySweep:
    pairs: dict  # gain decay -> paired_difference against no decay (finite sweeps only)
    timescales: dict  # gain decay -> ηλT
    gain_paths: pd.DataFrame  # mean RMS of the gains per step, decay and seed
    final_gain: pd.Series  # final gain RMS per decay, mean over seeds
    strongest: float | None  # the strongest decay with a finite sweep
    sensitive: bool  # its interval lies wholly beyond the margin
    insensitive: bool  # its interval lies wholly inside the margin
    loss_drop: float  # mean loss fall over the last 10% of steps
    margin: float

    def final_gain_at(self, decay) -> float:
        return float(self.final_gain.get(decay, math.nan))

    @property
    def key_pair(self) -> dict | None:
        return self.pairs.get(self.strongest) if self.strongest is not None else None


def finite_final(run: dict) -> float:
    """A run's final validation loss, NaN where it diverged: what the paired comparison may average."""
    return math.nan if run["diverged"] else run["final_val_loss"]


def decay_sweep(decay_runs: dict, settings: dict, *, margin: float) -> DecaySweep:
    """Part (4) of B15: the paired final-loss change from decaying the gains, against `margin` (nats per byte).

    A decay whose runs diverged (the study's one meaning, `normlab.gpt.run_record`) is left out: `paired_or_none`
    gives no pair for it, and `strongest` is then the strongest decay left.
    """
    decays = [wd for wd in settings["gain_decays"] if wd > 0]
    seeds = sorted({seed for _, seed in decay_runs})  # the complete seeds: a missing run leaves its seed out
    final = {wd: [finite_final(decay_runs[(wd, s)]) for s in seeds] for wd in settings["gain_decays"]}
    pairs = {wd: pair for wd in decays if (pair := paired_or_none(final[0.0], final[wd], margin)) is not None}
    timescales = {wd: settings["lr"] * wd * settings["sweep_steps"] for wd in decays}
    gain_paths = pd.concat(
        [
            pd.DataFrame(
                {
                    "step": np.arange(1, len(next(iter(out["history"].values()), [])) + 1),
                    "gain_rms": np.mean([v for v in out["history"].values()], axis=0) / math.sqrt(settings["width"]),
                    "gain_decay": wd,
                    "seed": seed,
                }
            )
            for (wd, seed), out in decay_runs.items()
            if out["history"]
        ],
        ignore_index=True,
    )
    final_gain = gain_paths.groupby(["gain_decay", "seed"]).last()["gain_rms"].groupby("gain_decay").mean()
    strongest = max(pairs) if pairs else None
    sensitive = strongest is not None and pairs[strongest]["outcome"] == "different"
    insensitive = strongest is not None and pairs[strongest]["outcome"] == "equivalent"
    loss_drop = float(np.nanmean([out["final_drop"] for out in decay_runs.values()]))
    return DecaySweep(pairs, timescales, gain_paths, final_gain, strongest, sensitive, insensitive, loss_drop, margin)


def decay_frame(sweep: DecaySweep) -> pd.DataFrame:
    """One row per decay: ηλT, the paired loss change with its interval and outcome, and the final gain RMS."""
    return pd.DataFrame(
        [
            {
                "λ_g": wd,
                "ηλT": sweep.timescales[wd],
                "Δ loss (nats per byte)": p["mean_difference"],
                "95% CI low": p["ci_low"],
                "95% CI high": p["ci_high"],
                "outcome": p["outcome"],
                "final gain RMS": sweep.final_gain_at(wd),
            }
            for wd, p in sweep.pairs.items()
        ]
    )
