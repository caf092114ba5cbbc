"""Smoke runs of the geometry and Jacobian chapters (the session's smoke run), asserting on their results JSON."""

from __future__ import annotations

import math

import pytest

from evidence import evidence_numbers
from normlab.study import VERDICTS
from smoke_book import chapter


def _run(name, root):
    results = chapter(root, name).results
    assert results["notebook"] == name and results["profile"] == "smoke"
    return {claim["id"]: claim for claim in results["claims"]}


@pytest.fixture(scope="module")
def geometry(smoke_book):
    return _run("geometry", smoke_book)


@pytest.fixture(scope="module")
def jacobians(smoke_book, geometry):
    # geometry runs first into the same results folder (the runner's order): the Jacobian chapter combines its B3
    # evidence
    return _run("jacobians", smoke_book)


def _check_records(claims, expected_ids, evidence_only=()):
    assert set(claims) == expected_ids
    for claim in claims.values():
        assert claim["summary"] and claim["section"]
        numbers = list(evidence_numbers(claim["evidence"]))
        assert numbers, f"{claim['id']} has no numeric evidence"
        assert all(math.isfinite(n) for n in numbers), f"{claim['id']} has non-finite evidence"
        if claim["id"] in evidence_only:
            assert claim["verdict"] is None, f"{claim['id']} is judged in another chapter"
            continue
        assert claim["verdict"] in VERDICTS and claim["verdict"] != "not testable here"
        assert claim["key_number"] is not None and claim["threshold"] is not None, claim["id"]
        assert claim["spread"] is not None and claim["spread"] >= 0 and claim["rule"], claim["id"]


def test_geometry_chapter(geometry):
    _check_records(
        geometry, {"A1", "A2", "A3", "A4", "A6", "B2", "B3", "B4", "B11", "B16", "Q1"}, evidence_only=("B3", "B16")
    )
    # only the authors' PyTorch file puts epsilon outside the root
    assert geometry["A2"]["evidence"]["authors_implementations_with_eps_outside"].startswith("1 of 4")
    assert "inside" in geometry["Q1"]["evidence"]["sources"]["authors_tensorflow"]
    assert geometry["A1"]["verdict"] == "holds" and geometry["A1"]["evidence"]["max_abs_diff"] < 1e-12
    assert geometry["B2"]["verdict"] == "holds"
    # A2's ε-outside formula is not what torch computes
    assert geometry["A2"]["verdict"] == "holds with caveats" and geometry["A2"]["evidence"]["vs_torch"] > 1e-9
    assert geometry["B4"]["evidence"]["rms_shift_change_at_c_sigma"] > 0.5
    assert geometry["A4"]["evidence"]["ln_shift_limit_sigma"]["float64"] >= 1e4
    assert geometry["A4"]["evidence"]["ln_shift_limit_sigma"]["float32"] <= 1e5  # float32 rounding breaks it
    ranks, d = geometry["B16"]["evidence"]["ranks"], geometry["B16"]["evidence"]["d"]
    assert (ranks["LayerNorm"], ranks["RMSNorm"]) == (d - 1, d)
    params = geometry["A6"]["evidence"]["parameters"]
    assert params["torch.nn.LayerNorm"] == 2 * params["torch.nn.RMSNorm"]
    crossover = geometry["Q1"]["evidence"]["crossovers"]["eps=1e-06/float32"]["output"]
    assert 4 < crossover < 16  # ≈ ε / finfo(float32).eps = 8.4
    assert geometry["B11"]["verdict"] == "holds"


def test_jacobian_chapter(jacobians):
    _check_records(jacobians, {"B3", "B12", "B13", "B14"})
    b12 = jacobians["B12"]["evidence"]
    assert b12["exact_form_error"] < 1e-12 and b12["printed_form_error"] > 0.1
    assert b12["one_over_r_error_eps0"] < 1e-12
    assert jacobians["B12"]["verdict"] == "holds with caveats"
    b13 = jacobians["B13"]["evidence"]
    assert b13["gain_gradient_error"] < 1e-12 and b13["exact_input_gradient_error"] < 1e-12
    assert b13["printed_input_gradient_error"] > 0.1
    b3 = jacobians["B3"]
    assert b3["evidence"]["layer_norm_jacobian_error"] < 1e-12 and b3["evidence"]["geometry_part_present"] is True
    # geometry found float32 rounding breaking the shift invariance: the combined verdict carries that caveat
    assert b3["verdict"] == "holds with caveats" and b3["evidence"]["geometry_precision_caveat"] is True
    # the radial part of a change is removed, the tangential part passes: the essay's "direction unchanged" is wrong
    assert b12["radial_part_kept_max"] < 1e-12 and b12["tangential_part_error_max"] < 1e-12
    assert b12["essay_radial_removed_right"] is True and b12["essay_direction_unchanged_right"] is False
    assert jacobians["B14"]["evidence"]["fit_error_vs_slope"] < 1e-8
