"""Pure functions of run records, tested on their own: usable learning-rate ranges, hidden growth, the later
half's share of the drop-one loss, and the paired non-inferiority reading every claim uses.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from normlab.study.verdict_rules import ABOVE, BELOW, side_of


def usable_lr_range(lrs: Sequence[float], trained: Sequence[bool]) -> dict:
    """The contiguous run of trained learning rates around the best-known one, on a sorted grid.

    Returns the lowest and highest usable LR, the span in decades, and the lowest LR at
    which the run failed above the usable range (None when none failed above it).
    """
    if len(lrs) != len(trained) or not lrs:
        raise ValueError("usable_lr_range needs one trained flag per learning rate, and at least one")
    pairs = sorted(zip(map(float, lrs), map(bool, trained)))
    ok = [lr for lr, t in pairs if t]
    if not ok:
        return {"lr_low": None, "lr_high": None, "decades": 0.0, "fails_at": pairs[0][0], "fraction_trained": 0.0}
    low = high = ok[0]
    for lr, t in pairs:
        if lr < low:
            continue
        if not t:
            break
        high = lr
    above = [lr for lr, t in pairs if lr > high and not t]
    return {
        "lr_low": low,
        "lr_high": high,
        "decades": math.log10(high / low),
        "fails_at": above[0] if above else None,
        "fraction_trained": sum(t for _, t in pairs) / len(pairs),
    }


def growth_ratio(stream_rms: Sequence[tuple], step: int | None = None) -> float:
    """Hidden RMS after the last block over that after the first block, at `step` (default: the last one)."""
    if not stream_rms:
        raise ValueError("no stream statistics recorded")
    step = max(s for s, _, _ in stream_rms) if step is None else step
    layers = {layer: rms for s, layer, rms in stream_rms if s == step}
    if len(layers) < 3:
        raise ValueError(f"need the stream at >= 2 blocks at step {step}, got layers {sorted(layers)}")
    return layers[max(layers)] / layers[1]


def later_half_share(drop_one: Sequence[float]) -> float:
    """Share of the total drop-one loss increase that the later half of the blocks accounts for."""
    values = [max(float(v), 0.0) for v in drop_one]  # a block whose removal helps contributes nothing
    if len(values) < 2:
        raise ValueError("need at least two blocks")
    total = sum(values)
    if total <= 0:
        return math.nan
    return sum(values[len(values) // 2 :]) / total


def non_inferiority(paired: dict | None) -> str:
    """Reads a paired interval of (variant − baseline) loss against +margin: 'no worse' when the whole
    interval lies below +margin, 'worse' when it lies above it, else 'undecided'."""
    if paired is None:
        return "undecided"
    return {BELOW: "no worse", ABOVE: "worse"}.get(side_of(paired, paired["margin"]), "undecided")


def usable_flags(final_losses: Sequence[float], diverged: Sequence[bool], best: float, tolerance: float) -> list[bool]:
    """A run is usable when it did not diverge and ended within `tolerance` nats of `best`."""
    if tolerance <= 0:
        raise ValueError(f"tolerance must be > 0 nats, got {tolerance}")
    return [(not d) and math.isfinite(v) and v <= best + tolerance for v, d in zip(final_losses, diverged)]
