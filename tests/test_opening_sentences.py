"""The opening page's sentences read against the results they were written from: each names the scale it was
measured at, carries its key number and threshold as the record holds them, and says no more than its interval.

`check_sentence` is the check; it runs on hand-made records (each way a sentence can go wrong) and on every headline
record of the session's smoke run. The ledger refuses a verdict whose rule reads a quantity the design does not
register, naming the claim (the last tests).
"""

from __future__ import annotations

import json
import re

import pytest

from normlab.study import design, ledger
from normlab.study.key_numbers import KeyNumber
from normlab.study.pages.opening import HEADLINE_WORDS, HEADLINES
from normlab.study.results import LedgerError
from smoke_book import chapter
from test_summary_wording import summary_problems

# The claims whose sentences must name their scale. A9 and V1 are worded by their own chapters' current work (the
# quality chapter's confirmation, the landscape chapter); their number and threshold are still checked here.
SCALED = ("Q2", "Q3", "Q4", "Q5", "B1", "B12", "B17", "B18")
CHAPTERS = ("ecosystem", "geometry", "jacobians", "depth", "gain", "realmodels", "quality", "speed", "landscape")
CI = re.compile(r"95% CI ([+\-−]?[0-9.]+(?:e[+\-]?\d+)?)\.\.([+\-−]?[0-9.]+(?:e[+\-]?\d+)?)")
UNDECIDED_WORDS = ("across", "too uncertain", "undecided", "cannot tell")


def _numbers(value) -> list[float]:
    if isinstance(value, dict):
        return [n for v in value.values() for n in _numbers(v)]
    if isinstance(value, (list, tuple)):
        return [n for v in value for n in _numbers(v)]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return [float(value)]
    return []


def check_sentence(record: dict, *, scaled: bool) -> list[str]:
    """What is wrong with a headline record's sentence, as a list of problems (empty when it is sound)."""
    sentence, problems = record["headline"], []
    key = KeyNumber.of(record)
    k, t = record.get("key_number"), record.get("threshold")
    if k is not None and key.format(k) not in sentence:
        problems.append(f"its key number {key.format(k)} is not in the sentence")
    if t is not None and key.limit(t) not in sentence:
        problems.append(f"its threshold {key.limit(t)} is not in the sentence")
    if scaled:
        scale = record.get("scale")
        if not scale:
            problems.append("it records no scale")
        elif scale not in sentence:
            problems.append(f"its scale {scale!r} is not in the sentence")
    measured = _numbers(record.get("evidence"))
    for low_text, high_text in CI.findall(sentence):
        low, high = (float(x.replace("−", "-")) for x in (low_text, high_text))
        for text, value in ((low_text, low), (high_text, high)):
            places = len(text.split(".")[1].split("e")[0]) if "." in text else 0
            if not any(abs(n - value) <= 0.5 * 10**-places + 1e-12 for n in measured):
                problems.append(f"its interval bound {text} is in none of the record's numbers")
        if t is not None and (low < abs(t) < high or low < -abs(t) < high):
            if not any(word in sentence for word in UNDECIDED_WORDS):
                problems.append(f"its interval {low_text}..{high_text} crosses ±{t:g} but the sentence decides")
    return problems


def _record(**change) -> dict:
    base = {
        "id": "B18",
        "verdict": "not testable here",
        "key_number": -0.0296,
        "threshold": 0.02,
        "meaning": "paired final loss",
        "unit": "nats per byte",
        "scale": "depth 12, width 32, 300 steps, 5 pairs",
        "evidence": {"pair": {"ci_low": -0.19541, "ci_high": 0.13613}},
        "headline": "With the norm on the trunk (post-LN; depth 12, width 32, 300 steps, 5 pairs), the loss differs by "
        "-0.0296 nats per byte, 95% CI -0.1954..+0.1361, too uncertain to judge against the margin of ±0.02 nats "
        "per byte.",
    }
    return base | change


def test_a_sound_sentence_passes():
    assert check_sentence(_record(), scaled=True) == []


@pytest.mark.parametrize(
    "change, problem",
    [
        (dict(scale="depth 24"), "its scale 'depth 24' is not in the sentence"),
        (dict(scale=None), "it records no scale"),
        (dict(key_number=-0.05), "its key number -0.0500 nats per byte is not in the sentence"),
        (dict(threshold=0.03), "its threshold 0.03 nats per byte is not in the sentence"),
        (dict(evidence={"pair": {"ci_low": -0.3, "ci_high": 0.1}}), "its interval bound -0.1954 is in none"),
    ],
)
def test_a_sentence_that_drops_or_invents_a_number_is_caught(change, problem):
    assert any(p.startswith(problem) for p in check_sentence(_record(**change), scaled=True))


def test_a_sentence_that_decides_on_an_interval_across_its_margin_is_caught():
    decided = _record(headline=_record()["headline"].replace("too uncertain to judge", "so no worse"))
    assert any("crosses ±0.02 but the sentence decides" in p for p in check_sentence(decided, scaled=True))


@pytest.fixture(scope="module")
def headline_records(smoke_book):
    records = {}
    for name in CHAPTERS:
        for record in chapter(smoke_book, name).results["claims"]:
            if record.get("verdict") and record.get("headline"):
                records[record["id"]] = record
    return records


def untrained_claims(smoke_book) -> set[str]:
    """The claims of the smoke run whose verdict the did-it-train rule made not testable here."""
    return {
        record["id"]
        for name in CHAPTERS
        for record in chapter(smoke_book, name).results["claims"]
        if record.get("verdict") == "not testable here"
        and not all(arm["trained"] for arm in (record["evidence"].get("arms_trained") or {}).get("arms", {}).values())
    }


def test_every_opening_sentence_reads_its_number_bound_and_scale_from_the_results(headline_records, smoke_book):
    problems = {
        claim: found
        for claim in HEADLINES
        if claim in headline_records and (found := check_sentence(headline_records[claim], scaled=claim in SCALED))
    }
    assert not problems, problems
    # every scaled claim has its sentence, but where an arm did not train (normlab.study.trained): that comparison
    # is no finding about a norm, and the opening page states none (the smoke run's arms train for seconds)
    assert set(SCALED) - set(headline_records) <= untrained_claims(smoke_book), sorted(
        set(SCALED) - set(headline_records)
    )


def test_every_opening_sentence_of_the_smoke_run_fits_in_the_word_limit(headline_records):
    over = {
        claim: len(headline_records[claim]["headline"].split())
        for claim in HEADLINES
        if claim in headline_records and len(headline_records[claim]["headline"].split()) > HEADLINE_WORDS
    }
    assert not over, over


def test_a_verdict_reading_a_quantity_the_design_does_not_register_is_refused_naming_the_claim(tmp_path):
    from test_study import _run

    registered = design.load()
    registered.check_reads("B17", ["spread_limit", "bound_slack", "margin"])
    with pytest.raises(design.DesignError, match=r"claim B17's verdict reads 'exponent_tolerance', which .* does not"):
        registered.check_reads("B17", ["spread_limit", "exponent_tolerance"])
    run = _run("geometry", "holds", threshold=1e-12)
    results, pages = tmp_path / "results", tmp_path / "pages"
    results.mkdir()
    run["claims"][0]["reads"] = ["formula_tol"]
    (results / "geometry.json").write_text(json.dumps(run))
    ledger.build(results, pages, executed_dir=tmp_path / "ex")
    run["claims"][0]["reads"] = ["formula_tol", "speedup"]
    (results / "geometry.json").write_text(json.dumps(run))
    with pytest.raises(
        LedgerError, match=r"geometry.json: claim A1's verdict reads 'speedup', which .* does not register for it"
    ):
        ledger.build(results, pages, executed_dir=tmp_path / "ex")


def test_every_ledger_summary_of_the_smoke_run_fits_and_agrees_with_its_verdict(smoke_book):
    """The ledger's summary of every judged claim: `summary_problems`."""
    records = [
        record
        for name in CHAPTERS
        for record in chapter(smoke_book, name).results["claims"]
        if record.get("verdict") is not None
    ]
    problems = {r["id"]: found for r in records if (found := summary_problems(r))}
    assert not problems, problems
