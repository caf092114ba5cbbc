"""The family rule's arithmetic: Student's t tail, each reading's level by interval inversion, Holm's adjustment."""

import math
import random

import pytest

from normlab.analysis.shared.paired import paired_difference
from normlab.study import multiplicity as M
from normlab.study.sample_size import t975


@pytest.mark.parametrize("df", [1, 2, 4, 9, 23, 30])
def test_t_survival_at_the_table_quantiles_is_two_and_a_half_percent(df):
    # the table's quantiles are rounded to 3 decimals: the tail there is 0.025 to that rounding
    assert M.t_survival(t975(df), df) == pytest.approx(0.025, abs=2e-4 if df > 1 else 1e-5)


def test_t_survival_is_symmetric_and_tends_to_the_normal():
    assert M.t_survival(0.0, 5) == pytest.approx(0.5, abs=1e-14)
    assert M.t_survival(-1.3, 7) == pytest.approx(1 - M.t_survival(1.3, 7), abs=1e-14)
    assert M.t_survival(1.959964, 1e7) == pytest.approx(0.025, abs=1e-6)
    assert M.t_survival(1.0, 1) == pytest.approx(0.25, abs=1e-12)  # Cauchy: 1/2 - atan(1)/pi
    assert M.t_survival(math.inf, 3) == 0.0


def test_a_level_is_at_most_five_percent_exactly_when_the_95_interval_decides():
    rng = random.Random(7)
    checked = 0
    for _ in range(400):
        pairs = rng.choice([3, 5, 12, 24])
        a = [rng.gauss(0, 1) for _ in range(pairs)]
        b = [x + rng.gauss(rng.uniform(-0.08, 0.08), 0.03) for x in a]
        interval = paired_difference(a, b, 0.02)
        se = interval["sd_of_differences"] / math.sqrt(pairs)
        distance = abs(abs(interval["mean_difference"]) - 0.02) / se
        if abs(distance - t975(pairs - 1)) < 0.01:  # on the table's rounding: either side is right
            continue
        level = M.reading_of("X", "d", interval, "margin").level
        assert (level <= 0.05) == (interval["outcome"] != M.INCONCLUSIVE), (interval, level)
        checked += 1
    assert checked > 350


def test_a_zero_reading_follows_the_interval_around_zero():
    interval = paired_difference([0.0, 0.0, 0.0, 0.0], [0.30, 0.31, 0.29, 0.30], 0.02)
    reading = M.reading_of("B16", "projection_paired", interval, "zero")
    assert reading.outcome == "excludes zero" and reading.level < 1e-4
    interval = paired_difference([0.0, 0.0, 0.0], [0.01, -0.02, 0.005], 0.02)
    reading = M.reading_of("B16", "projection_paired", interval, "zero")
    assert reading.outcome == "includes zero" and reading.level > 0.05


def test_holm_adjusts_as_the_textbook_example():
    adjusted = M.holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.005}, 0.05)
    assert adjusted == pytest.approx({"d": 0.02, "a": 0.03, "c": 0.06, "b": 0.06})
    assert M.holm({"only": 0.049}, 0.05) == {"only": 0.049}
    assert M.holm({}, 0.05) == {}


def test_holm_never_rejects_less_than_bonferroni_nor_more_than_unadjusted():
    rng = random.Random(3)
    for _ in range(200):
        levels = {str(i): rng.random() ** 3 for i in range(rng.randint(1, 15))}
        adjusted = M.holm(levels, 0.05)
        for name, level in levels.items():
            assert level <= adjusted[name] <= min(1.0, len(levels) * level) + 1e-15


@pytest.mark.parametrize(
    "call, refusal",
    [
        (lambda: M.holm({"a": 1.5}, 0.05), "levels must lie in"),
        (lambda: M.holm({"a": 0.1}, 0.0), "alpha must lie strictly"),
        (lambda: M.interval_level(0.1, 0.01, 1, "zero"), "pairs must be an int >= 2"),
        (lambda: M.interval_level(0.1, 0.01, 5, "margin"), "needs a positive finite margin"),
        (lambda: M.interval_level(math.nan, 0.01, 5, "zero"), "must be finite"),
        (lambda: M.interval_level(0.1, 0.01, 5, "sideways"), "reading must be one of"),
        (lambda: M.reading_of("A9", "paired", {"pairs": 3, "mean_difference": 0.1}, "margin"), "records no"),
        (lambda: M.evidence_at({"a": {"b": 1}}, "a/c"), "no 'c' on the way to 'a/c'"),
    ],
)
def test_bad_input_is_refused_naming_the_problem(call, refusal):
    with pytest.raises((ValueError, KeyError), match=refusal):
        call()
