import math

import pytest

from evidence import evidence_numbers
from smoke_book import chapter


@pytest.mark.parametrize("name, claims", [("depth", {"B17", "B18", "B19", "V8"}), ("gain", {"B15"})])
def test_dynamics_notebooks_smoke(smoke_book, name, claims):
    result = chapter(smoke_book, name).results
    recorded = {c["id"]: c for c in result["claims"]}
    assert claims <= set(recorded)
    for claim in claims:
        numbers = list(evidence_numbers(recorded[claim]["evidence"]))
        assert numbers and all(math.isfinite(n) for n in numbers), claim
    if name == "gain":
        effective = recorded["B15"]["evidence"]["effective_lr"]
        assert effective["sgd_exponent_gain"] == pytest.approx(-2.0, abs=0.15)
        assert effective["adam_exponent_gain"] == pytest.approx(-1.0, abs=0.15)
        assert recorded["B15"]["evidence"]["wd_schedule"]["li_arora_max_angle_rad"] < 1e-9
        update = recorded["B15"]["evidence"]["effective_update"]
        assert update["adam_exponent_via_W"] == pytest.approx(1.0, abs=0.05)
        assert update["sgd_exponent_via_W"] == pytest.approx(2.0, abs=0.05)
        assert recorded["B15"]["evidence"]["forward"]["symmetry_max_abs_delta_loss"] < 1e-4
    else:
        for claim in ("B18", "B19"):
            assert recorded[claim]["threshold"] == recorded[claim]["evidence"]["margin_nats"] == 0.02
        interaction = recorded["B19"]["evidence"]["interaction"]
        assert interaction is None or interaction["pairs"] == recorded["B19"]["evidence"]["seeds"]
        # every verdict carries the arms it reads beside the entropy; an untrained arm makes it not testable here,
        # except B17's runs without warm-up, whose failure to train is its registered answer
        for claim in claims:
            arms = recorded[claim]["evidence"]["arms_trained"]["arms"]
            paired = {name: arm for name, arm in arms.items() if "without warm-up" not in name}
            if not all(arm["trained"] for arm in paired.values()):
                assert recorded[claim]["verdict"] == "not testable here", claim
        assert any("without warm-up" in name for name in recorded["B17"]["evidence"]["arms_trained"]["arms"])
        assert "removed from step 0" in recorded["V8"]["summary"]
