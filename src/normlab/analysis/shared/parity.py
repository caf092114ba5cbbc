"""Is one training recipe's final loss different from another's, beyond seed-to-seed noise?

`loss_parity(a, b)` compares two samples of final losses (one per seed):
the difference of means b - a with its 95% Welch t-interval, and the
seed-to-seed spread (the pooled standard deviation across seeds). Parity is
declared when |difference| is no larger than that spread: the two recipes
differ by less than re-running one of them with another seed does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from normlab.study.sample_size import t975  # noqa: F401  (the one t table; re-exported for the chapters)


def _mean_var(values: Sequence[float]) -> tuple[float, float]:
    n = len(values)
    mean = sum(values) / n
    return mean, sum((v - mean) ** 2 for v in values) / (n - 1)


def loss_parity(a: Sequence[float], b: Sequence[float]) -> dict[str, float | bool]:
    a, b = [float(v) for v in a], [float(v) for v in b]
    if len(a) < 2 or len(b) < 2:
        raise ValueError("loss_parity needs at least two seeds per recipe to measure a spread")
    if not all(math.isfinite(v) for v in a + b):
        raise ValueError("loss_parity got a non-finite loss: a run diverged; report it instead of averaging it")
    (mean_a, var_a), (mean_b, var_b) = _mean_var(a), _mean_var(b)
    se2_a, se2_b = var_a / len(a), var_b / len(b)
    se = math.sqrt(se2_a + se2_b)
    # Welch-Satterthwaite degrees of freedom; with zero variance in both the interval is a point.
    df = (se2_a + se2_b) ** 2 / (se2_a**2 / (len(a) - 1) + se2_b**2 / (len(b) - 1)) if se > 0 else math.inf
    half_width = t975(max(df, 1.0)) * se if se > 0 else 0.0
    spread = math.sqrt(((len(a) - 1) * var_a + (len(b) - 1) * var_b) / (len(a) + len(b) - 2))
    difference = mean_b - mean_a
    return {
        "mean_a": mean_a,
        "mean_b": mean_b,
        "difference": difference,
        "ci_low": difference - half_width,
        "ci_high": difference + half_width,
        "seed_spread": spread,
        "parity": abs(difference) <= spread,
        "relative_difference": difference / mean_a,
    }


def ratio_with_spread(
    numerator: Sequence[float], denominator: Sequence[float], *, resamples: int = 400, seed: int = 0
) -> dict[str, float]:
    """Median of per-repeat ratios numerator_i / denominator_i (repeats measured interleaved, so paired),
    and its spread: the standard deviation of that median over bootstrap resamples of the repeats."""
    import torch

    num, den = [float(v) for v in numerator], [float(v) for v in denominator]
    if len(num) != len(den) or len(num) < 3:
        raise ValueError(f"need the same number (>= 3) of paired repeats on each side, got {len(num)} and {len(den)}")
    if min(den) <= 0 or min(num) <= 0:
        raise ValueError("times must be positive")
    ratios = torch.tensor(num, dtype=torch.float64) / torch.tensor(den, dtype=torch.float64)
    generator = torch.Generator().manual_seed(seed)
    picks = torch.randint(0, len(ratios), (resamples, len(ratios)), generator=generator)
    medians = ratios[picks].median(dim=1).values
    return {
        "ratio": float(ratios.median()),
        "spread": float(medians.std()),
        "repeats": len(ratios),
        "ratio_q25": float(ratios.quantile(0.25)),
        "ratio_q75": float(ratios.quantile(0.75)),
    }


def equivalence_verdict(paired: dict) -> str:
    """The verdict a "no difference" claim gets from `paired.paired_difference`: holds only when the whole
    interval lies inside the margin; does not hold when it lies wholly outside; otherwise the run could not
    tell (interval wider than the margin, or straddling it): not testable here."""
    outcome = paired["outcome"]
    if outcome == "equivalent":
        return "holds"
    if outcome == "different":
        return "does not hold"
    return "not testable here"
