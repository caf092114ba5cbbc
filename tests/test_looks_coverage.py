"""A9's and B19's whole procedure, looks included, simulated through the chapters' own decision code.

The pairs grew after inconclusive looks (A9: 6, 12, 24 pairs; B19: 5, 14 seeds), each look stopping the study when
it decided. With the true difference exactly at the ±0.02-nat margin, any decisive verdict is wrong: "no difference"
(A9 holds; B19 does not hold) and "beyond the margin" (A9 does not hold; B19 holds). The confidence sequence the
chapters now use must keep each below 5%; the old t-interval read at the same looks is shown to exceed its single-look
rate (2.5% a side), A9's false "holds" beyond 5%, so the test can tell the two apart. Spreads: the last cpu build's
per-pair sd of the differences (fbce4a0: A9 0.0224 nats over 24 pairs, B19's interaction 0.0249 over 14 seeds).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from normlab.analysis.depth import interlock
from normlab.analysis.quality import loss_parity
from normlab.analysis.shared.paired import paired_difference
from normlab.analysis.shared.parity import equivalence_verdict
from normlab.study import design

MARGIN = design.value("A9", "margin")  # the registered margin, which B19 shares (a test below checks)
A9_SD, B19_SD = 0.0224, 0.0249
STUDIES = 2_000  # per procedure under the confidence sequence: the minimum
NAIVE_STUDIES = 20_000  # the t-interval's rates lie near 5%: this many give a standard error of about 0.16%
SINGLE_LOOK_RATE = 0.025  # a 95% interval's chance of lying wholly on one side of a mean at its edge, one look
TEMPLATE = loss_parity.LossParity(pd.DataFrame(), {}, {}, [], None, None, None, 0.0, 0.0, 0.0)


def run_looks(differences: np.ndarray, looks, verdict_at) -> str:
    """The verdict the study ends with: read at each look, stopping at the first that is not 'not testable here'."""
    for n in looks:
        verdict = verdict_at(list(differences[:n]))
        if verdict != "not testable here":
            return verdict
    return verdict


def a9_verdict(differences: list[float]) -> str:
    """A9 through the quality chapter's code: the pair `loss_parity` builds, the verdict `final_loss_verdict` reads."""
    zeros = [0.0] * len(differences)
    parity = replace(TEMPLATE, final_pair=loss_parity.final_loss_pair(zeros, differences, MARGIN))
    return loss_parity.final_loss_verdict(parity)[0]


def b19_verdict(differences: list[float]) -> str:
    """B19 through the depth chapter's code: the LLaMA and single swaps at zero, the double swap carrying the
    interaction, paired by `interaction_pair` and judged by `b19_verdict`."""
    zeros = [0.0] * len(differences)
    pair = interlock.interaction_pair(zeros, zeros, zeros, differences, MARGIN)
    ablation = interlock.Ablation(swaps={}, interaction=pair, stress_diverged=pd.Series(dtype=bool), base=None)
    return interlock.b19_verdict(ablation)


def t_interval_verdict(differences: list[float]) -> str:
    """The verdict the chapters read before: the fixed-sample t-interval."""
    return equivalence_verdict(paired_difference([0.0] * len(differences), differences, MARGIN))


def verdict_rates(looks, sd: float, verdict_at, studies: int, seed: int) -> dict[str, float]:
    draws = np.random.default_rng(seed).normal(MARGIN, sd, size=(studies, looks[-1]))
    verdicts = pd.Series([run_looks(row, looks, verdict_at) for row in draws])
    return verdicts.value_counts(normalize=True).to_dict()


def test_a9_confidence_sequence_keeps_false_holds_below_five_percent_under_its_looks():
    rates = verdict_rates(loss_parity.A9_LOOKS, A9_SD, a9_verdict, STUDIES, seed=9)
    print(f"A9 under its looks, confidence sequence: {rates}")
    assert loss_parity.A9_LOOKS == (6, 12, 24)
    assert rates.get("holds", 0.0) <= 0.05 and rates.get("does not hold", 0.0) <= 0.05


def test_a9_t_interval_under_the_same_looks_says_holds_too_often():
    rates = verdict_rates(loss_parity.A9_LOOKS, A9_SD, t_interval_verdict, NAIVE_STUDIES, seed=9)
    print(f"A9 under its looks, t-interval: {rates}")
    assert rates.get("holds", 0.0) > 0.05


def test_b19_confidence_sequence_keeps_both_wrong_verdicts_below_five_percent_under_its_looks():
    rates = verdict_rates(interlock.B19_LOOKS, B19_SD, b19_verdict, STUDIES, seed=19)
    print(f"B19 under its looks, confidence sequence: {rates}")
    assert interlock.B19_LOOKS == (5, 14)
    assert design.value("B19", "margin") == MARGIN
    assert rates.get("holds with caveats", 0.0) <= 0.05 and rates.get("does not hold", 0.0) <= 0.05


def test_b19_t_interval_under_the_same_looks_exceeds_its_single_look_rate():
    rates = verdict_rates(interlock.B19_LOOKS, B19_SD, t_interval_verdict, NAIVE_STUDIES, seed=19)
    print(f"B19 under its looks, t-interval: {rates}")
    # B19's t-interval stays under 5% at these two looks (about 3.8% and 4.5%), but not under its own 2.5% a side.
    assert rates.get("holds", 0.0) > SINGLE_LOOK_RATE and rates.get("does not hold", 0.0) > SINGLE_LOOK_RATE
