"""Section "Forward: is the gain scale invariant, and what is?": B15's part (1), the gains scaled in trained models."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import torch

from normlab.analysis.gain.rescaling import gain_sensitivity, rescale_symmetry


def validation_batches(corpus, settings: dict, count: int = 4, seed: int = 777) -> list:
    """Fixed validation batches, the same for every scaled model."""
    generator = torch.Generator().manual_seed(seed)
    return [corpus.batch("val", settings["batch"], settings["context"], generator) for _ in range(count)]


@dataclass
class ForwardCheck:
    sensitivity: pd.DataFrame  # loss change per model, location and gain multiplier
    by_location: pd.Series  # largest relative loss change at the near multipliers, per (model, location)
    holds: bool  # every location below the threshold
    threshold: float
    symmetry: pd.DataFrame  # the pre-LN model under the (gain·a, next linear/a) rescale
    symmetry_max: float  # its largest |Δ loss|


def forward_check(gpt: dict, batches, factors, *, threshold: float, near=(0.5, 2.0)) -> ForwardCheck:
    """Part (1) of B15: does scaling one location's gains by a factor in `near` move the loss by < `threshold`?

    The loss change is relative to the model's unscaled loss; the rescale symmetry of the pre-LN model is
    measured alongside (it should move the loss only by float32 rounding).
    """
    sensitivity = pd.concat(
        [gain_sensitivity(gpt[p], batches, factors).assign(model=f"{p}-LN RMSNorm") for p in gpt], ignore_index=True
    )
    base_losses = {
        m: float(sensitivity[(sensitivity["model"] == m) & (sensitivity["factor"] == 1)]["loss"].mean())
        for m in sensitivity["model"].unique()
    }
    close = sensitivity[sensitivity["factor"].isin(list(near))].copy()
    close["relative"] = close["delta_loss"].abs() / close["model"].map(base_losses)
    by_location = close.groupby(["model", "location"])["relative"].max()
    holds = bool((by_location < threshold).all())
    symmetry = rescale_symmetry(gpt["pre"], batches, factors)
    symmetry_max = float(symmetry["delta_loss_rescaled_pair"].abs().max())
    return ForwardCheck(sensitivity, by_location, holds, threshold, symmetry, symmetry_max)


def forward_text(check: ForwardCheck) -> str:
    """The forward section's conclusion, with the worst location and the symmetry's largest change."""
    worst = check.by_location.idxmax()
    return (
        f"Scaling one location's gains by 0.5 or 2 changes the loss by up to {check.by_location.max():.1%} (at "
        f"{worst[1]}, {worst[0]}); the forward pass is {'barely' if check.holds else 'clearly'} affected. With the "
        f"next linear layer scaled by 1/a as well, the loss changes by at most {check.symmetry_max:.1e} nats per byte (float32 "
        f"rounding): that is the symmetry pre-LN has."
    )


def symmetry_frame(symmetry: pd.DataFrame) -> pd.DataFrame:
    """The symmetry table as the chapter shows it: the gain alone against the rescaled (gain, next linear) pair."""
    return symmetry[["factor", "delta_loss_gain_alone", "delta_loss_rescaled_pair"]].rename(
        columns={
            "factor": "a",
            "delta_loss_gain_alone": "Δ loss, every gain × a",
            "delta_loss_rescaled_pair": "Δ loss, gain × a and next linear × 1/a",
        }
    )
