"""Did each arm train? The gain chapter's trained arms, each arm's mean final and step-0 validation loss beside the
byte frequencies' entropy (`normlab.study.trained.ArmLosses`), for B15's decay sweep and V5's placement arms; and
the table that shows them on the page, read from the recorded finding (`Results.record` applies the rule)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from normlab.study.trained import ArmLosses


def _mean(values: list[float]) -> float:
    """The mean over seeds; NaN where any run diverged (NaN), so that a diverged arm counts as not trained."""
    return float(np.mean(values)) if values and all(math.isfinite(v) for v in values) else math.nan


def _key(arm) -> str:
    """An arm's label in the record: a decay as written (30, not 30.0), any other label as it is."""
    return f"{arm:g}" if isinstance(arm, float) else str(arm)


def arm_losses(runs: dict, arms, names: dict, *, entropy: float, scale: str) -> ArmLosses:
    """`runs`: {(arm, seed): run record}, complete seeds only; `arms`: the arms in order. A diverged run's final
    loss is NaN."""
    seeds = sorted({seed for _, seed in runs})
    final, initial = {}, {}
    for arm in arms:
        records = [runs[(arm, seed)] for seed in seeds]
        final[_key(arm)] = _mean([math.nan if r["diverged"] else r["final_val_loss"] for r in records])
        initial[_key(arm)] = _mean([r["initial_val_loss"] for r in records])
    return ArmLosses(final, initial, entropy, scale=scale, names={_key(arm): names[arm] for arm in arms})


def sweep_arms(decay_runs: dict, settings: dict, entropy: float) -> ArmLosses:
    """B15's decay sweep: one arm per gain decay λ_g (the undecayed arm included), pre-LN GPT at the sweep's size."""
    decays = settings["gain_decays"]
    names = {wd: "the undecayed arm" if wd == 0 else f"λ_g = {wd:g}" for wd in decays}
    scale = (
        f"pre-LN GPT, width {settings['width']}, depth {settings['depth']}, {settings['sweep_steps']} steps, "
        f"mean over {len({seed for _, seed in decay_runs})} seeds"
    )
    return arm_losses(decay_runs, decays, names, entropy=entropy, scale=scale)


def placement_arms(runs: dict, sizes: dict, labels: dict, entropy: float) -> ArmLosses:
    """V5's three arms (no gain decayed, input norms' gains decayed, output norms'), Peri-LN GPT at `sizes`."""
    scale = (
        f"Peri-LN GPT, width {sizes['width']}, depth {sizes['depth']}, {sizes['steps']} steps, mean over "
        f"{len({seed for _, seed in runs})} seeds"
    )
    return arm_losses(runs, list(labels), labels, entropy=entropy, scale=scale)


def trained_frame(entry: dict) -> pd.DataFrame:
    """One row per arm of a recorded finding (`Results.record`'s entry): its final and step-0 loss, how far below
    the byte frequencies' entropy it ended, and whether that is at least the registered minimum."""
    record = entry["evidence"]["arms_trained"]
    return pd.DataFrame(
        [
            {
                "arm": arm,
                "final val loss (nats per byte)": losses["final_val_loss"],
                "step-0 val loss": losses["initial_val_loss"],
                "byte frequencies' entropy": record["unigram_entropy_nats"],
                "below the entropy": losses["below_entropy"],
                f"trained (≥ {record['minimum_below_entropy']:g} below)": "yes" if losses["trained"] else "no",
            }
            for arm, losses in record["arms"].items()
        ]
    )
