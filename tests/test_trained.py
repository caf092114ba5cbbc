"""Did each arm train? The rule `Results.record` applies to every trained claim (normlab.study.trained), the design's
refusal of a trained claim without its minimum, and the claims table's refusal of a row split by a bare `|`."""

from __future__ import annotations

import math

import pytest

from normlab.study import design
from normlab.study.claims import parse_claims
from normlab.study.design import DesignError
from normlab.study.findings import Finding
from normlab.study.results import Results
from normlab.study.trained import ArmLosses
from test_design import B7, MINIMAL, _parse

ENTROPY = 3.1122  # the byte frequencies' entropy of the cpu corpus's validation text (build 2fea7bb)


def _v7(derf: float, dyt: float, verdict: str = "does not hold") -> Finding:
    arms = ArmLosses(
        final={"v7-rms": 2.30, "v7-dyt": dyt, "v7-derf": derf},
        initial={"v7-rms": 5.55, "v7-dyt": 5.55, "v7-derf": 5.55},
        entropy=ENTROPY,
        scale="width 32, 200 steps",
        names={"v7-rms": "RMSNorm", "v7-dyt": "DyT", "v7-derf": "Derf"},
    )
    headline = "Derf ends 0.787 nats per byte worse than RMSNorm."
    return Finding(verdict, "Derf − RMSNorm +0.787.", {}, 0.787, 0.03, 0.01, "m", "nats per byte", headline, arms=arms)


def test_a_comparison_with_arms_that_did_not_train_is_not_a_verdict_on_the_norm(tmp_path):
    record = Results("landscape", "smoke", tmp_path).record("V7", _v7(3.1220, 3.1220), "landscape-derf")
    assert record["verdict"] == "not testable here"
    assert record["summary"].startswith(
        "Not a verdict on the norm: 2 of its 3 arms did not train (width 32, 200 steps)."
    )
    assert (
        " The nearest, DyT, ended at 3.1220 nats per byte, less than the registered 0.25 below the byte "
        in (record["summary"])
    )
    assert "Derf − RMSNorm +0.787." in record["summary"]  # the measurement stays, after the rule's sentence
    assert record["headline"] is None  # no opening-page sentence on a comparison that is no finding about a norm
    arms = record["evidence"]["arms_trained"]["arms"]
    assert arms["Derf"]["trained"] is False and arms["RMSNorm"]["trained"] is True
    assert math.isclose(arms["RMSNorm"]["below_entropy"], ENTROPY - 2.30)
    assert record["evidence"]["arms_trained"]["minimum_below_entropy"] == design.load().value("V7", "trained_minimum")


def test_arms_that_trained_leave_the_chapter_s_verdict_as_it_is(tmp_path):
    record = Results("landscape", "smoke", tmp_path).record("V7", _v7(2.35, 2.40), "landscape-derf")
    assert record["verdict"] == "does not hold" and record["summary"] == "Derf − RMSNorm +0.787."
    assert all(arm["trained"] for arm in record["evidence"]["arms_trained"]["arms"].values())


def test_one_arm_just_short_of_the_minimum_is_caught_and_a_diverged_arm_did_not_train():
    minimum = 0.25
    arms = ArmLosses({"a": ENTROPY - minimum + 1e-6, "b": ENTROPY - minimum - 1e-6, "c": math.nan}, {}, ENTROPY)
    assert arms.untrained(minimum) == ["a", "c"]
    assert arms.sentence(minimum).startswith("2 of its 3 arms did not train. The nearest, a, ended at ")
    assert ArmLosses({"c": math.nan, "b": 2.0}, {}, ENTROPY).sentence(minimum) == "c diverged, so it did not train"


def test_where_the_design_says_the_failure_is_the_answer_the_verdict_stands_and_says_so(tmp_path):
    entry = design.load().claim("V1")
    assert entry.untrained_answers  # V1: DyT without tuning
    arms = ArmLosses({"rms": 2.31, "dyt": 3.082}, {}, ENTROPY, "234k parameters, 200 steps", {"dyt": "DyT"})
    finding = Finding("does not hold", "DyT − RMSNorm +0.76.", {}, 0.76, 0.03, 0.1, "m", "nats per byte", arms=arms)
    record = Results("landscape", "smoke", tmp_path).record("V1", finding, "landscape-dyt")
    assert record["verdict"] == "does not hold"
    assert record["summary"].startswith("DyT did not train (234k parameters, 200 steps). It ended at 3.0820 nats")
    assert "below the byte frequencies' entropy of 3.1122. V1 claims DyT" in record["summary"]


def test_a_trained_claim_s_finding_without_its_arms_is_refused_naming_the_claim(tmp_path):
    finding = Finding("holds", "A9 inside the margin.", {}, 0.01, 0.02, 0.004, "m", "nats per byte")
    with pytest.raises(ValueError, match=r"claim A9 trains models .* pass arms=ArmLosses"):
        Results("quality", "smoke", tmp_path).record("A9", finding, "quality-parity")


@pytest.mark.parametrize(
    "bad, message",
    [
        (dict(final={}), "at least one arm"),
        (dict(entropy=math.nan), "entropy must be a positive number"),
        (dict(initial={"x": 5.5}), "names arm"),
    ],
)
def test_impossible_arm_losses_are_refused(bad, message):
    with pytest.raises(ValueError, match=message):
        ArmLosses(**({"final": {"a": 2.0}, "initial": {}, "entropy": ENTROPY} | bad))


def test_every_trained_claim_of_the_committed_design_registers_its_minimum():
    registered = design.load()
    trained = [c for c in registered.claims.values() if c.trains]
    assert trained and all(registered.value(c.id, "trained_minimum") > 0 for c in trained)


def test_a_trained_claim_without_a_minimum_is_refused_at_load_naming_it(tmp_path):
    without = MINIMAL.replace("[claims.A9.thresholds.trained_minimum]", "[claims.A9.thresholds.unused]")
    with pytest.raises(DesignError, match=r"claim A9 trains models but registers no minimum for 'did each arm train'"):
        _parse(tmp_path, without + B7)


def test_a_claims_row_split_by_a_bare_bar_is_refused_naming_the_row(tmp_path):
    header = "| ID | Claim (paraphrase) | Original (abridged) |\n|---|---|---|\n"
    good = tmp_path / "good.md"
    good.write_text(header + "| V6 | tracking saturation (\\|αx\\| > 2) | source |\n", encoding="utf-8")
    assert parse_claims(good)[0].text == "tracking saturation (|αx| > 2)"
    bad = tmp_path / "bad.md"
    bad.write_text(header + "| A1 | fine | source |\n| V6 | tracking saturation (|αx| > 2) | source |\n")
    with pytest.raises(ValueError, match=r"bad.md:4: claim V6's row has 5 cells against its header's 3"):
        parse_claims(bad)
