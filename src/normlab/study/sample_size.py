"""How many pairs a registered confirmation needs: the power of the chapters' fixed-N equivalence test.

The chapters decide a paired equivalence claim by the 95% Student-t interval of the mean paired difference lying
wholly inside ±margin (`normlab.analysis.shared.paired`): two one-sided tests at 2.5% a side. For n pairs whose
differences are normal with mean δ and spread σ, the interval is d̄ ± t·s/√n, so the test passes when
|d̄| < margin − t·s/√n. With d̄ ~ N(δ, σ²/n) and (n−1)s²/σ² ~ χ²(n−1) independent,

    P(pass) = E_s[ Φ((margin − h(s) − δ)·√n/σ) − Φ((−margin + h(s) − δ)·√n/σ) ]⁺,   h(s) = t·s/√n,

integrated here over the χ² density on a log grid (`pass_probability`). It uses the same t quantiles as the
chapters (`t975`, rounded down, 1.96 past 30 degrees of freedom), so the power is that of the rule the chapters
apply, not of an idealised one. `confirmation_pairs` is the smallest n that reaches a registered power at a
registered true difference; `smallest_margin` the narrowest margin that n pairs resolve at that power.

Only the pilot's spread enters: sizing on the pilot's mean would make the confirmation depend on the very estimate
it is meant to check.
"""

from __future__ import annotations

import math

import numpy as np

ALPHA = 0.05  # the chapters' intervals are 95%: the only level this module's quantiles serve

# Two-sided 95% quantiles of Student's t, t_{0.975}(df), for df = 1..30 (standard table values).
_T975 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)
_GRID = 2001  # points of the χ² integral: the power is then exact to about 1e-6, far below any registered step
MOST_PAIRS = 100_000


def t975(df: float) -> float:
    """t_{0.975} for (possibly fractional, Welch) degrees of freedom: rounded down (conservative); 1.96 past 30."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    return _T975[int(df) - 1] if df <= 30 else 1.96


def _check(sd: float, margin: float, true_difference: float = 0.0, power: float | None = None) -> None:
    for name, value in (("sd", sd), ("margin", margin)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    if not math.isfinite(true_difference) or abs(true_difference) >= margin:
        raise ValueError(
            f"the true difference {true_difference!r} must lie strictly inside ±{margin:g}: at or beyond the margin "
            "no number of pairs makes 'no difference' likely, and it should not"
        )
    if power is not None and not 0 < power < 1:
        raise ValueError(f"power must lie strictly between 0 and 1, got {power!r}")


_ERFC = np.frompyfunc(math.erfc, 1, 1)


def _phi(x: np.ndarray) -> np.ndarray:
    """The standard normal distribution function, elementwise (numpy has no erfc of its own)."""
    return 0.5 * _ERFC(-x / math.sqrt(2.0)).astype(float)


def pass_probability(
    pairs: int, sd: float, margin: float, true_difference: float = 0.0, one_sided: bool = False
) -> float:
    """The chance that the 95% t-interval of `pairs` normal differences (mean `true_difference`, spread `sd`) lies
    wholly inside ±margin. At a true difference on the margin this is the test's false "no difference" rate.
    `one_sided`: the chance that it lies wholly below +margin (a rule that reads the interval against +margin
    alone, as V4's does: its upper end is a one-sided 2.5% test)."""
    if isinstance(pairs, bool) or not isinstance(pairs, int) or pairs < 2:
        raise ValueError(f"pairs must be an int >= 2 (a spread needs two), got {pairs!r}")
    for name, value in (("sd", sd), ("margin", margin)):
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    df = pairs - 1
    # v = (n−1)s²/σ² on a log grid: the density times dv/dlog v is smooth even where χ²(1) is infinite at 0
    log_v = np.linspace(math.log(1e-12 * df), math.log(df + 14 * math.sqrt(2 * df) + 60), _GRID)
    v = np.exp(log_v)
    weight = np.exp((df / 2) * log_v - v / 2 - (df / 2) * math.log(2) - math.lgamma(df / 2))
    half = t975(df) * sd * np.sqrt(v / df) / math.sqrt(pairs)
    se = sd / math.sqrt(pairs)
    below = _phi((margin - half - true_difference) / se)
    inside = below if one_sided else np.clip(below - _phi((-margin + half - true_difference) / se), 0, 1)
    return float(np.clip(np.trapezoid(inside * weight, log_v), 0.0, 1.0))


def confirmation_pairs(
    sd: float, margin: float, power: float, true_difference: float = 0.0, one_sided: bool = False
) -> int:
    """The fewest pairs whose 95% t-interval lies inside ±margin (`one_sided`: wholly below +margin) with
    probability `power` when the differences have spread `sd` and mean `true_difference`."""
    _check(sd, margin, true_difference, power)
    low, high = 2, 2
    while pass_probability(high, sd, margin, true_difference, one_sided) < power:
        low, high = high, high * 2
        if high > MOST_PAIRS:
            raise ValueError(f"more than {MOST_PAIRS} pairs would be needed (sd {sd:g}, margin ±{margin:g})")
    while low < high:  # the pass probability grows with the pairs: bisect for the first that reaches `power`
        middle = (low + high) // 2
        low, high = (
            (middle + 1, high)
            if pass_probability(middle, sd, margin, true_difference, one_sided) < power
            else (low, middle)
        )
    return high


def smallest_margin(pairs: int, sd: float, power: float = 0.9, one_sided: bool = False) -> float:
    """The narrowest margin that `pairs` pairs of spread `sd` resolve as "no difference" (`one_sided`: as below
    +margin) with probability `power` when the true difference is 0: the finest a design of that size can decide."""
    _check(sd, 1.0, 0.0, power)
    low, high = 0.0, sd
    while pass_probability(pairs, sd, high, one_sided=one_sided) < power:
        high *= 2
    for _ in range(40):  # bisection to 1e-12 of the spread: far below the three digits a sentence prints
        middle = (low + high) / 2
        low, high = (
            (middle, high) if pass_probability(pairs, sd, middle, one_sided=one_sided) < power else (low, middle)
        )
    return high
