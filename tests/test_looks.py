"""Every look disclosed: the change log's looks become a verdict's caveats (normlab.analysis.shared.looks)."""

from normlab.analysis.shared.looks import disclosed, looks
from normlab.study.findings import Finding


def test_a_claim_re_registered_after_its_numbers_were_seen_carries_that_look_as_a_caveat():
    v9 = disclosed(Finding("holds with caveats", "The sink is measured.", caveats=("4-bit file",)), "V9")
    assert v9.caveats[0] == "4-bit file"
    assert any(c.startswith("its design's test, key number (2026-12-07) was set after a look: ") for c in v9.caveats)


def test_the_did_it_train_minimum_is_a_look_only_for_claims_that_train():
    minimum = "thresholds.trained_minimum"
    assert any(c["field"].startswith(minimum) for c in looks("V1"))  # trains: registered after V1's arms were seen
    assert not any(c["field"].startswith(minimum) for c in looks("Q6"))  # a real model's measurement: no training
    assert all(not c["look"].lower().startswith("none") for claim in ("V1", "Q6", "V9") for c in looks(claim))
