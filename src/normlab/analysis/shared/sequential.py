"""Paired differences judged by an anytime-valid 95% confidence sequence: for a claim whose pairs grew after looks.

A t-interval is valid for a number of pairs fixed before any look. When pairs are added because an interval came out
inconclusive, and the verdict is read each time, stopping at the first interval that fits inside the margin makes a
false "no difference" more likely than 5% (tests/test_looks_coverage.py measures how much). A confidence sequence
holds the true mean with probability 95% at every number of pairs at once, so looking after each batch of pairs, and
stopping whenever, keeps its coverage.

The sequence is Lai's (1976, "On confidence sequences", Ann. Statist. 4(2) 265-280; restated as the "scale-invariant
t-mixture" in Wang and Ramdas 2023, "Anytime-valid t-tests and confidence sequences for Gaussian means with unknown
variance") for the mean of normal differences with an unknown spread. For a candidate mean mu, with y_i = d_i - mu
over n pairs and r = (sum y)^2 / sum y^2, the likelihood ratio of the scale-free part of the data (y / |y_1|), with the
standardised effect (mean - mu) / sd mixed over a normal prior of variance tau^2, is

    M_n(mu) = (1 + n tau^2)^(-1/2) * (1 - tau^2 r / (1 + n tau^2))^(-n/2),

a nonnegative martingale with M_1 = 1 when mu is the true mean. By Ville's inequality it exceeds 1/alpha at some n
with probability at most alpha, so {mu : M_n(mu) < 1/alpha} is a (1 - alpha) confidence sequence. Solved for mu it is
the sample mean ± a half-width (`sequence_half_width`); it is wider than the t-interval at the same n (about 1.6 times
at 24 pairs), which is the price of being allowed to look.

The verdict is read off the sequence at the pairs actually run exactly as off an interval
(`paired.interval_outcome`), and `sequence_difference` returns the same fields as `paired.paired_difference` (and
`paired.paired_or_none(a, b, margin, sequence_difference)` its None for a diverged run), so the
chapters' verdict functions and `paired.interval_text` take either.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from normlab.analysis.shared.paired import check_margin, checked_pairs, interval_outcome

ALPHA = 0.05

# The prior variance of the standardised effect (mean difference over its sd) that the mixture averages over. Fixed
# once for every claim, before any result was read under this method: a unit normal on the effect, the textbook
# default, not tuned to the pairs any chapter ran (a value tuned to the observed runs would void the guarantee).
MIXTURE_VARIANCE = 1.0

SEQUENCE_NAME = "95% confidence sequence"


def sequence_half_width(pairs: int, sum_of_squares: float, alpha: float = ALPHA, tau2: float = MIXTURE_VARIANCE):
    """Half-width of the (1 - alpha) confidence sequence after `pairs` pairs whose differences have this sum of squared
    deviations from their mean; infinite while too few pairs exist for any bound."""
    if pairs < 1 or sum_of_squares < 0:
        raise ValueError(f"need at least one pair and a non-negative sum of squares, got {pairs} and {sum_of_squares}")
    # M_n(mu) < 1/alpha  <=>  r < bound, with r <= n always (Cauchy-Schwarz); bound >= n leaves every mu inside.
    bound = (1 - (alpha**2 / (1 + pairs * tau2)) ** (1 / pairs)) * (1 + pairs * tau2) / tau2
    if bound >= pairs:
        return math.inf
    return math.sqrt(bound * sum_of_squares / (pairs * (pairs - bound)))


def sequence_difference(a: Sequence[float], b: Sequence[float], margin: float) -> dict:
    """Mean of b - a over pairs, its anytime-valid 95% confidence sequence, and the verdict against `margin` (> 0);
    the fields of `paired.paired_difference`, with `interval` naming the sequence."""
    check_margin(margin)
    a, b = checked_pairs(a, b)
    diffs = [y - x for x, y in zip(a, b)]
    n = len(diffs)
    mean = sum(diffs) / n
    sum_of_squares = sum((d - mean) ** 2 for d in diffs)
    sd = math.sqrt(sum_of_squares / (n - 1))
    half = sequence_half_width(n, sum_of_squares)
    outcome = interval_outcome(mean - half, mean + half, margin)
    return {
        "pairs": n,
        "mean_difference": mean,
        "ci_low": mean - half,
        "ci_high": mean + half,
        "half_width": half,
        "sd_of_differences": sd,
        "standard_error": sd / math.sqrt(n),
        "margin": margin,
        "outcome": outcome,
        "interval": SEQUENCE_NAME,
        "method": "anytime-valid confidence sequence (Lai 1976, normal mixture over the standardised effect, "
        f"tau^2 = {MIXTURE_VARIANCE:g})",
        "interval_fits_margin": half < margin,
        "differences": diffs,
    }


def looks_text(looks: Sequence[int], unit: str = "pairs") -> str:
    """'6, 12 and 24 pairs': the sizes at which a claim's verdict was read, for the chapter's disclosure."""
    sizes = [str(n) for n in looks]
    return (", ".join(sizes[:-1]) + " and " + sizes[-1] if len(sizes) > 1 else sizes[0]) + f" {unit}"
