"""A verdict's recorded rule comes from its one home, the registered design (data/design.toml, [claims.ID] test):
`Results.record` writes the claim's test and the thresholds the finding reads, with their registered values and
units, and refuses a claim whose design states no test."""

from __future__ import annotations

import dataclasses
import json

import pytest

from normlab.analysis.shared.scale_rule import RULE
from normlab.study import design
from normlab.study.findings import Finding, rule_text
from normlab.study.key_numbers import NATS_PER_BYTE
from normlab.study.results import Results
from normlab.study.trained import ArmLosses

# both arms trained well below the byte frequencies' entropy, so the did-it-train rule leaves each verdict as it is
TRAINED = ArmLosses({"rms": 2.0, "layer": 2.0}, {"rms": 5.5, "layer": 5.5}, 3.11)


def _finding(**fields) -> Finding:
    return Finding(
        "holds",
        "The interval lies inside the margin.",
        {},
        meaning="paired difference",
        unit=NATS_PER_BYTE,
        arms=TRAINED,
        **fields,
    )


def test_the_recorded_rule_is_the_designs_test_and_the_thresholds_read(tmp_path):
    results = Results("quality", "smoke", tmp_path)
    entry = results.record("B17", _finding(reads=("spread_limit", "margin")))
    test = design.load().claim("B17").test
    assert entry["rule"] == (
        f"{test}. Thresholds: spread_limit = 10 factor between blocks' gradient norms; margin = 0.02 nats per byte."
    )
    saved = json.loads(results.save().read_text())["claims"][0]
    assert saved["rule"] == entry["rule"] and saved["reads"] == ["spread_limit", "margin"]


def test_a_rule_shows_ranges_tables_and_pure_numbers_as_registered():
    assert rule_text("B10", ("few_percent",)).endswith("few_percent = 0.01 to 0.1 fraction of LayerNorm's latency.")
    a4 = rule_text("A4", ("invariance_tol", "visible_change"))
    assert a4.endswith("Thresholds: invariance_tol = 1e-09; visible_change = float32 0.001, bfloat16 0.1.")
    # a value `g` would round is shown with every digit
    assert "alpha_floor = 7.62939453125e-07 " in rule_text("V1", ("alpha_floor",))
    assert rule_text("A1") == design.load().claim("A1").test + "."  # no threshold read: the test alone


def test_a_weighed_verdict_shows_the_runs_rule_after_the_claims(tmp_path):
    entry = Results("quality", "smoke", tmp_path).record("A9", _finding(reads=("margin",), runs_rule=RULE))
    assert entry["rule"] == f"{rule_text('A9', ('margin',))} {RULE}"


def test_a_claim_without_a_registered_test_is_refused_naming_it_and_the_file(tmp_path, monkeypatch):
    committed = design.load()
    untested = dataclasses.replace(committed.claim("A9"), test="  ")
    blank = dataclasses.replace(committed, claims={**committed.claims, "A9": untested})
    monkeypatch.setattr(design, "load", lambda path=None: blank)
    results = Results("quality", "smoke", tmp_path)
    with pytest.raises(design.DesignError, match=r"claim A9 has no registered test in .*design\.toml.*\[claims\.A9\]"):
        results.record("A9", _finding(reads=("margin",)))
    assert results.claims == []  # nothing half-recorded
    results.record("B7", _finding())  # another claim's test still stands


def test_a_threshold_the_claim_does_not_register_is_refused_when_recorded(tmp_path):
    with pytest.raises(design.DesignError, match="claim A9 has no threshold 'spread_limit'"):
        Results("quality", "smoke", tmp_path).record("A9", _finding(reads=("spread_limit",)))
