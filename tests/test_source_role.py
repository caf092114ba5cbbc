"""The book's {source} role: a source's number on a page must be the design's registered copy of it."""

import importlib.util
from pathlib import Path

import pytest

from normlab.study.design import DesignError
from normlab.study.prose import source

spec = importlib.util.spec_from_file_location("normlab_check", Path(__file__).parents[1] / "book/_ext/normlab_check.py")
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)

REGISTERED = {("V6", "small_gain"): {"value": 27.3, "unit": "percent", "where": "Verma 2026, Table 2"}}


def registered(claim_id, name):
    if (claim_id, name) not in REGISTERED:
        raise DesignError(f"claim {claim_id} registers no source number {name!r}")
    return REGISTERED[claim_id, name]


def test_a_number_equal_to_the_design_s_copy_renders_with_its_citation():
    assert check.source_number_problem("V6.small_gain=27.3", registered) == (
        "27.3",
        "Verma 2026, Table 2 (percent)",
        None,
    )
    assert check.source_number_problem(" V6.small_gain = 27.30 ", registered)[2] is None


@pytest.mark.parametrize(
    "text, message",
    [
        ("V6.small_gain=27.4", r"the page writes 27.4 but the design's copy of V6.small_gain is 27.3 percent \(Verma"),
        ("V6.large_gain=18.8", r"registers no source number 'large_gain'"),
        ("V6 small_gain 27.3", r"write it as \{source\}`ID.NAME=VALUE`"),
        ("V6.small_gain=", r"write it as"),
    ],
)
def test_a_number_that_differs_or_is_not_registered_is_a_problem_naming_both(text, message):
    import re

    problem = check.source_number_problem(text, registered)[2]
    assert problem is not None and re.search(message, problem), problem


def test_prose_writes_the_role_from_the_design(monkeypatch):
    from normlab.study import design

    monkeypatch.setattr(design, "source_number", registered)
    assert source("V6", "small_gain") == "{source}`V6.small_gain=27.3`"
    assert check.source_number_problem(source("V6", "small_gain")[9:-1], registered)[2] is None
