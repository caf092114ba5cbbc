"""One rule for the family of verdicts read from paired intervals: Holm's step-down over their levels.

Each chapter reads its paired intervals at 95% (`normlab.analysis.shared.paired`). Read one at a time, each may call
a difference real by chance 5% of the time; over a family of m such readings the chance that at least one does is
up to 1 − 0.95^m. Holm's step-down procedure (Holm 1979) keeps that family-wise error at most α for any dependence
between the readings, and rejects at least what Bonferroni rejects; a false-discovery-rate rule would allow a share
of the family's findings to be false, which a ledger of verdicts read one by one should not.

A reading's level is the smallest two-sided level at which its Student-t interval still reads as the chapter read it
at 95% (interval inversion): the interval d̄ ± t_{1−α/2}·se over n pairs

- lies wholly inside ±margin ("equivalent") while t_{1−α/2}·se < margin − |d̄|: level 2·P(T_{n−1} > (margin − |d̄|)/se);
- lies wholly beyond one side of the margin ("different") while t·se < |d̄| − margin: level 2·P(T > (|d̄| − margin)/se);
- excludes zero while t·se < |d̄|: level 2·P(T > |d̄|/se).

At 95% the reading holds exactly when its level is at most 0.05, so the levels order the family as the chapters'
intervals do. An interval the chapter found inconclusive concluded nothing: its level is the smaller of the two
conclusions', above 0.05, and it stays in the family (the family is every registered reading, fixed before the runs,
not the ones that came out significant).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

EQUIVALENT, DIFFERENT, INCONCLUSIVE = "equivalent", "different", "inconclusive"
READINGS = ("margin", "zero")  # against ±margin (equivalent or different), or against 0 (excludes it or not)


def _continued_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularised incomplete beta function (modified Lentz's method)."""
    tiny, eps = 1e-300, 1e-15
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    value = d
    for m in range(1, 500):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            value *= c * d
        if abs(c * d - 1.0) < eps:
            break
    return value


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularised incomplete beta function."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _continued_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _continued_fraction(b, a, 1.0 - x) / b


def t_survival(t: float, df: float) -> float:
    """P(T > t) for Student's t with `df` degrees of freedom."""
    if not df > 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df!r}")
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    tail = 0.5 * _incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return tail if t >= 0 else 1.0 - tail


def interval_level(mean: float, standard_error: float, pairs: int, reading: str, margin: float | None = None) -> float:
    """The smallest two-sided level at which the t-interval of `pairs` paired differences (mean `mean`, standard
    error `standard_error`) still reads as it does at 95% (see the module's docstring)."""
    if reading not in READINGS:
        raise ValueError(f"reading must be one of {READINGS}, got {reading!r}")
    if isinstance(pairs, bool) or not isinstance(pairs, int) or pairs < 2:
        raise ValueError(f"pairs must be an int >= 2 (a spread needs two), got {pairs!r}")
    if not (math.isfinite(mean) and math.isfinite(standard_error) and standard_error >= 0):
        raise ValueError(f"mean and standard error must be finite (se >= 0), got {mean!r} and {standard_error!r}")
    if reading == "margin" and not (margin is not None and math.isfinite(margin) and margin > 0):
        raise ValueError(f"a reading against the margin needs a positive finite margin, got {margin!r}")
    distance = abs(mean) if reading == "zero" else abs(abs(mean) - margin)
    if standard_error == 0:
        return 0.0 if distance > 0 else 1.0
    return min(1.0, 2.0 * t_survival(distance / standard_error, pairs - 1))


@dataclass(frozen=True)
class Reading:
    """One registered reading of the family: a claim's deciding interval, where it is in the claim's evidence, and
    its level."""

    claim_id: str
    evidence: str  # the path of the interval in the claim's evidence, keys joined by "/"
    reading: str
    level: float
    outcome: str  # equivalent, different, inconclusive (margin readings) or excludes zero / includes zero


def reading_of(claim_id: str, evidence_path: str, interval: dict, reading: str) -> Reading:
    """A paired interval as `normlab.analysis.shared.paired.paired_difference` records it, read as registered."""
    missing = [key for key in ("pairs", "mean_difference", "sd_of_differences") if interval.get(key) is None]
    if reading == "margin" and interval.get("margin") is None:
        missing.append("margin")
    if missing:
        raise ValueError(
            f"{claim_id}: the interval at {evidence_path!r} records no {', '.join(missing)}; the family rule needs "
            "them to compute its level (record the interval with paired_difference)"
        )
    pairs = int(interval["pairs"])
    se = float(interval["sd_of_differences"]) / math.sqrt(pairs)
    level = interval_level(float(interval["mean_difference"]), se, pairs, reading, interval.get("margin"))
    if reading == "zero":
        outcome = "excludes zero" if interval["ci_low"] > 0 or interval["ci_high"] < 0 else "includes zero"
    else:
        outcome = interval.get("outcome") or INCONCLUSIVE
    return Reading(claim_id, evidence_path, reading, level, outcome)


def holm(levels: dict[str, float], alpha: float) -> dict[str, float]:
    """Holm's adjusted levels: a reading survives the family's rule when its adjusted level is at most `alpha`.

    With the m levels in ascending order p(1) <= ... <= p(m), the i-th adjusted level is the running maximum of
    min(1, (m − j + 1)·p(j)) over j <= i; ties keep their order, which does not change any adjusted level."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie strictly between 0 and 1, got {alpha!r}")
    bad = {name: level for name, level in levels.items() if not (0.0 <= level <= 1.0)}
    if bad:
        raise ValueError(f"levels must lie in [0, 1]; got {bad}")
    ordered = sorted(levels, key=levels.get)
    m, running, adjusted = len(ordered), 0.0, {}
    for rank, name in enumerate(ordered):
        running = max(running, min(1.0, (m - rank) * levels[name]))
        adjusted[name] = running
    return adjusted


def evidence_at(evidence: dict, path: str):
    """The value at `path` (keys joined by "/") in a claim's evidence, or a KeyError naming the missing key."""
    node = evidence
    for key in path.split("/"):
        if not isinstance(node, dict) or key not in node:
            raise KeyError(f"the evidence has no {key!r} on the way to {path!r}")
        node = node[key]
    return node
