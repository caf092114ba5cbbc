"""A claim's verdict from its registered readings by its declared rules (normlab.study.verdict_rules)."""

import itertools

import pytest

from normlab.study import design, verdict_rules
from normlab.study.findings import rule_text

READINGS = [{"evidence": "a_minus_b", "reading": "plus_margin"}, {"evidence": "gap", "reading": "zero"}]
RULES = [
    {"verdict": "does not hold", "when": {"a_minus_b": "above"}},
    {"verdict": "holds", "when": {"a_minus_b": "below", "gap": "below"}},
    {"verdict": "holds with caveats", "when": {"a_minus_b": "below"}},
]


def declared(**table):
    return verdict_rules.parse("X1", {"readings": READINGS, "verdict_rules": RULES, **table}, "design: claim X1")


def interval(low, high, margin=0.02):
    return {"ci_low": low, "ci_high": high, "margin": margin}


@pytest.mark.parametrize(
    "a_minus_b, gap, verdict",
    [
        (interval(0.03, 0.05), interval(-0.02, -0.01), "does not hold"),
        (interval(-0.01, 0.01), interval(-0.02, -0.01), "holds"),
        (interval(-0.01, 0.01), interval(-0.01, 0.01), "holds with caveats"),
        (interval(-0.01, 0.01), None, "holds with caveats"),  # only the first reading is needed by default
        (interval(0.01, 0.03), interval(-0.02, -0.01), "not testable here"),  # across +margin: no rule applies
        (interval(0.02, 0.03), interval(-0.02, -0.01), "not testable here"),  # an end on the line is across it
        (None, interval(-0.02, -0.01), "not testable here"),  # a run diverged
    ],
)
def test_the_first_rule_that_applies_decides(a_minus_b, gap, verdict):
    rules = declared()
    found = verdict_rules.outcomes("X1", rules, {"a_minus_b": a_minus_b, "gap": gap})
    assert verdict_rules.decide(rules, found) == verdict


def test_a_needed_reading_without_an_interval_leaves_the_claim_not_testable():
    rules = declared(verdict_needs=["a_minus_b", "gap"])
    found = verdict_rules.outcomes("X1", rules, {"a_minus_b": interval(-0.01, 0.01), "gap": None})
    assert verdict_rules.decide(rules, found) == "not testable here"


@pytest.mark.parametrize(
    "table, message",
    [
        ({"verdict_rules": [{"verdict": "holds", "when": {"other": "below"}}]}, "'other', which is not among"),
        ({"verdict_rules": [{"verdict": "holds", "when": {"a_minus_b": "inside"}}]}, "plus_margin reading is one of"),
        ({"verdict_rules": [{"verdict": "probably", "when": {"a_minus_b": "below"}}]}, "gives verdict 'probably'"),
        ({"verdict_rules": [{"verdict": "holds", "when": {}}]}, "has no condition"),
        ({"verdict_rules": []}, "non-empty list"),
        ({"verdict_needs": ["nothing"]}, "verdict_needs names ['nothing']"),
        ({"readings": []}, "declares verdict_rules but no readings"),
    ],
)
def test_rules_that_cannot_be_applied_are_refused_naming_the_claim(table, message):
    with pytest.raises(verdict_rules.RuleError, match="claim X1") as refused:
        declared(**table)
    assert message in str(refused.value)


def test_a_reading_the_analysis_did_not_measure_is_refused_naming_it():
    with pytest.raises(verdict_rules.RuleError, match=r"claim X1 reads \['gap'\]"):
        verdict_rules.outcomes("X1", declared(), {"a_minus_b": interval(-0.01, 0.01)})


def test_a_claim_without_verdict_rules_has_no_registered_verdict():
    with pytest.raises(design.DesignError, match="claim B12 declares no verdict_rules"):
        design.registered_verdict("B12", {})


def test_every_declared_rule_set_reaches_each_of_its_verdicts_and_renders_into_the_ledgers_rule():
    """Over every combination of outcomes, each registered claim's rules give every verdict they name (no rule is
    shadowed by an earlier one), and the ledger's rule text carries the rendered rules."""
    registered = design.load()
    ruled = [claim_id for claim_id, entry in registered.claims.items() if entry.verdict_rules is not None]
    assert ruled
    for claim_id in ruled:
        rules = registered.claim(claim_id).verdict_rules
        space = [(*verdict_rules.OUTCOMES[kind], None) for kind in rules.readings.values()]
        reached = {verdict_rules.decide(rules, dict(zip(rules.readings, combo))) for combo in itertools.product(*space)}
        assert {rule.verdict for rule in rules.rules} <= reached, claim_id
        assert verdict_rules.rule_text(rules) in rule_text(claim_id)
