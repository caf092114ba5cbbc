"""Paired comparisons with an equivalence margin stated before measuring.

Two training recipes are run as pairs that differ only in the factor under
test (same seed, same initialisation of every shared parameter, same
batches). The statistic is the per-pair difference d_i = b_i - a_i; its mean
gets a Student-t 95% interval. The verdict follows the two-one-sided-tests
logic, read off the interval:

- "equivalent":   the whole interval lies inside (-margin, +margin);
- "different":    the whole interval lies outside the margin on one side;
- "inconclusive": anything else. An interval wider than the margin cannot
  decide equivalence at all. No "pairs needed" is given: sized from the
  observed mean, it would invite the optional stopping that the registered
  design (data/design.toml) rules out for a fixed-size interval.

Every chapter pairs through this module: `paired_difference` computes,
`paired_or_none` is its one rule for a comparison that cannot be made (None
when a run diverged, i.e. a non-finite value, or fewer than two pairs exist;
sides of unequal length are a pairing error and raise), and `interval_text`
is the one way a sentence writes the result, None included.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from normlab.analysis.shared.parity import t975
from normlab.study.sample_size import smallest_margin
from normlab.study.verdict_rules import ABOVE, BELOW, INSIDE, against_margin

RESOLVING_POWER = 0.9  # the power at which a sentence states the finest margin its pairs could decide

EQUIVALENT, DIFFERENT, INCONCLUSIVE = "equivalent", "different", "inconclusive"


def checked_pairs(a: Sequence[float], b: Sequence[float]) -> tuple[list[float], list[float]]:
    """Both sides as floats, or a ValueError naming what makes them unusable as pairs."""
    a, b = [float(v) for v in a], [float(v) for v in b]
    if len(a) != len(b):
        raise ValueError(f"paired comparison needs the same number of runs on each side, got {len(a)} and {len(b)}")
    if len(a) < 2:
        raise ValueError("paired comparison needs at least two pairs to measure a spread")
    if not all(math.isfinite(v) for v in a + b):
        raise ValueError("paired comparison got a non-finite value: a run diverged; report it instead of averaging it")
    return a, b


def check_margin(margin: float) -> None:
    if not (isinstance(margin, (int, float)) and math.isfinite(margin) and margin > 0):
        raise ValueError(f"the equivalence margin must be a positive finite number, got {margin!r}")


def interval_outcome(low: float, high: float, margin: float) -> str:
    """The two-one-sided-tests reading of an interval [low, high] against ±margin (see the module's docstring)."""
    side = against_margin({"ci_low": low, "ci_high": high}, margin)
    return {INSIDE: EQUIVALENT, BELOW: DIFFERENT, ABOVE: DIFFERENT}.get(side, INCONCLUSIVE)


def paired_difference(a: Sequence[float], b: Sequence[float], margin: float) -> dict:
    """Mean of b - a over pairs, its 95% t-interval, and the equivalence verdict against `margin` (> 0)."""
    check_margin(margin)
    a, b = checked_pairs(a, b)
    diffs = [y - x for x, y in zip(a, b)]
    n = len(diffs)
    mean = sum(diffs) / n
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    half = t975(n - 1) * sd / math.sqrt(n)
    low, high = mean - half, mean + half
    outcome = interval_outcome(low, high, margin)
    return {
        "pairs": n,
        "mean_difference": mean,
        "ci_low": low,
        "ci_high": high,
        "half_width": half,
        "sd_of_differences": sd,
        "standard_error": sd / math.sqrt(n),  # of the mean difference: the run-to-run spread a key number carries
        "margin": margin,
        "outcome": outcome,
        "interval_fits_margin": 2 * half < 2 * margin,
        "differences": diffs,
    }


NOT_COMPARABLE = "not comparable (a run diverged, or fewer than two pairs ran)"


def paired_or_none(
    a: Sequence[float], b: Sequence[float], margin: float, compare: Callable[..., dict] = paired_difference
) -> dict | None:
    """`compare(a, b, margin)` (the t-interval, or `sequential.sequence_difference`), or None when a run diverged (a
    non-finite value) or fewer than two pairs exist: the caller reports that (`interval_text(None, unit)`) instead of
    averaging a non-finite loss."""
    a, b = list(a), list(b)
    if len(a) != len(b):
        raise ValueError(f"paired comparison needs the same number of runs on each side, got {len(a)} and {len(b)}")
    if len(a) < 2 or not all(math.isfinite(float(v)) for v in a + b):
        return None
    return compare(a, b, margin)


def resolvable_margin(paired: dict) -> float | None:
    """The narrowest margin a fixed-N t-interval of these pairs resolves at 90% power, at their observed spread;
    None for a confidence sequence (its width is not a fixed-N design's) or without a spread."""
    sd, pairs = paired.get("sd_of_differences"), paired.get("pairs", 0)
    if "interval" in paired or not sd or not math.isfinite(sd) or pairs < 2:
        return None
    return smallest_margin(int(pairs), float(sd), RESOLVING_POWER)


def resolvable_text(paired: dict) -> list[str]:
    """['finest margin at 90% power ±0.0196'], or [] where `resolvable_margin` is None."""
    finest = resolvable_margin(paired)
    return [] if finest is None else [f"finest margin at 90% power ±{finest:.3g}"]


def interval_text(paired: dict | None, unit: str, *, margin: bool = True) -> str:
    """'+0.0031 nats (95% CI -0.0042..+0.0104, margin ±0.02, 6 pairs)', plus why it is undecided when inconclusive;
    with `margin=False`, for a caller that states its own reading of the margin, the interval and pairs alone. A
    result naming its `interval` (a confidence sequence) is written under that name, and when undecided says that
    more pairs may be added.
    None (see `paired_or_none`) gives NOT_COMPARABLE."""
    if paired is None:
        return NOT_COMPARABLE
    name, low, high = paired.get("interval", "95% CI"), paired["ci_low"], paired["ci_high"]
    # a recorded result has been through JSON, where an unbounded sequence's infinite ends became None
    bounded = all(end is not None and math.isfinite(end) for end in (low, high))
    parts = [f"{name} {low:+.4f}..{high:+.4f}" if bounded else f"{name} not yet bounded"]
    parts += [f"margin ±{paired['margin']:g}", *resolvable_text(paired)] if margin else []
    parts.append(f"{paired['pairs']} pairs")
    text = f"{paired['mean_difference']:+.4f} {unit} ({', '.join(parts)})"
    if margin and paired["outcome"] == INCONCLUSIVE:
        # No "pairs needed" from the observed mean: sizing a second look on it is the optional stopping that the
        # registered design (data/design.toml) rules out for a fixed-size interval.
        text += (
            "; undecided: the sequence stays valid if pairs are added and it is read again"
            if "interval" in paired
            else "; undecided at these pairs"
            if abs(paired["mean_difference"]) < paired["margin"]
            # a sentence of its own, so that the ledger's one-sentence summary keeps the word and the chapter the why
            else ", undecided. The mean difference lies at or beyond the margin: more pairs could show a difference, "
            "none could show equivalence"
        )
    return text
