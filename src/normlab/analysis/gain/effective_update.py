"""Section "Effective update under the rescale symmetry: Adam against SGD": B15's part (2).

One optimizer step's change of E = W·diag(g) after the (g·a, W/a) rescale, and the power of a it follows.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import torch

from normlab.analysis.gain.measures import fit_power_law
from normlab.analysis.gain.rescaling import effective_update
from normlab.gpt.model import GPT, GPTConfig


def update_batch(corpus, settings: dict, seed: int = 5):
    """The one training batch every optimizer step of the effective-update study uses."""
    return corpus.batch("train", settings["batch"], settings["context"], torch.Generator().manual_seed(seed))


def effective_update_study(
    model_kw: dict, batch, factors, *, seeds: int = 3, optimizers=(("sgd", 0.1), ("adam", 1e-3))
) -> pd.DataFrame:
    """One optimizer step's change of E = W·diag(g) under each rescale a, on freshly initialised pre-LN GPTs.

    Model `seed` is initialised from torch's global generator seeded with `seed`; each optimizer steps it
    from the same batch.
    """
    rows = []
    for seed in range(seeds):
        torch.manual_seed(seed)
        fresh = GPT(GPTConfig(**model_kw))
        for optimizer, lr in optimizers:
            rows.append(effective_update(fresh, batch, factors, optimizer=optimizer, lr=lr).assign(seed=seed))
    return pd.concat(rows, ignore_index=True)


UPDATE_VIA_W, UPDATE_VIA_G = "exponent via W (a ≥ 1)", "exponent via g"


def update_exponents(updates: pd.DataFrame) -> pd.DataFrame:
    """Per optimizer and seed: the power of a that the W-part (fitted for a ≥ 1) and the g-part follow."""
    return pd.DataFrame(
        [
            {
                "optimizer": opt,
                "seed": seed,
                UPDATE_VIA_W: fit_power_law(part[part.factor >= 1].factor, part[part.factor >= 1].via_W),
                UPDATE_VIA_G: fit_power_law(part.factor, part.via_g),
            }
            for (opt, seed), part in updates.groupby(["optimizer", "seed"])
        ]
    )


@dataclass
class UpdateScaling:
    adam_exponent: float  # mean over seeds of Adam's W-part exponent
    adam_exponent_sd: float
    sgd_exponent: float  # mean over seeds of SGD's W-part exponent
    linear_under_adam: bool


def update_scaling(exponents: pd.DataFrame, *, tolerance: float) -> UpdateScaling:
    """Part (2) of B15: Adam's W-part exponent within `tolerance` of 1 means "linearly scales" holds."""
    adam_w = exponents[exponents.optimizer == "adam"][UPDATE_VIA_W]
    sgd_w = float(exponents[exponents.optimizer == "sgd"][UPDATE_VIA_W].mean())
    adam_exponent, adam_exponent_sd = float(adam_w.mean()), float(adam_w.std())
    return UpdateScaling(adam_exponent, adam_exponent_sd, sgd_w, abs(adam_exponent - 1) <= tolerance)


def exponent_summary(exponents: pd.DataFrame) -> pd.DataFrame:
    """Mean and sd over seeds of both fitted exponents, one row per optimizer."""
    return (
        exponents.groupby("optimizer")[[UPDATE_VIA_W, UPDATE_VIA_G]]
        .agg(["mean", "std"])
        .pipe(lambda d: d.set_axis([f"{a}, {b}" for a, b in d.columns], axis=1))
        .reset_index()
    )
