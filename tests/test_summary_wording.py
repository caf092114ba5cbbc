"""The ledger's summaries (each summary's first sentence: `ledger_page.first_sentences(summary, 1)`) at most
`SUMMARY_WORDS` words, and worded as their verdicts: a decided verdict never called undecided or untestable, a
"does not hold" that never says "holds", a "not testable here" that says why.

`summary_problems` is the check; it runs on hand-made records and on every judged record of the session's smoke run
(the analysis functions' own output, in tests/test_opening_sentences.py, which reads that run).
"""

from __future__ import annotations

import re

import pytest

from normlab.study.pages.ledger_page import SUMMARY_WORDS, first_sentences

WHY_NOT_TESTABLE = (
    "undecided",
    "too uncertain",
    "too few",
    "too wide",
    "absent",
    "not measured",
    "could not",
    "cannot",
    "did not train",  # normlab.study.trained: an arm that did not train decides nothing about a norm
    "they did not train",
    "not decided",  # normlab.study.multiplicity: a reading that did not survive the family's rule
)


def summary_problems(record: dict) -> list[str]:
    lead, verdict, problems = first_sentences(record["summary"], 1), record["verdict"], []
    words = len(lead.removesuffix(" …").split())
    if words > SUMMARY_WORDS:
        problems.append(f"its ledger summary runs {words} words, over {SUMMARY_WORDS}")
    text = record["summary"].lower()
    if verdict in ("holds", "holds with caveats", "does not hold"):
        for word in ("undecided", "not testable"):
            if word in lead.lower():
                problems.append(f"a decided verdict ('{verdict}') whose summary says '{word}'")
    if verdict == "does not hold" and re.search(r"\bholds\b", lead.lower().replace("does not hold", "")):
        problems.append("a verdict that does not hold, summarised as 'holds'")
    if verdict == "holds" and "does not hold" in lead.lower():
        problems.append("a verdict that holds, summarised as 'does not hold'")
    if verdict == "not testable here" and not any(why in text for why in WHY_NOT_TESTABLE):
        problems.append("a verdict not testable here whose summary does not say why")
    return problems


def _record(verdict="holds", summary="The printed form is off by 5.7 (relative error). More detail here."):
    return {"id": "B12", "verdict": verdict, "summary": summary}


def test_a_short_summary_that_agrees_with_its_verdict_passes():
    assert summary_problems(_record()) == []
    assert (
        summary_problems(_record("not testable here", "The loss differs by +0.05 (95% CI -0.1..+0.2), undecided."))
        == []
    )


@pytest.mark.parametrize(
    "record, problem",
    [
        (_record(summary=" ".join(["word"] * 41) + ". Detail."), "its ledger summary runs 41 words"),
        (_record("holds with caveats", "The ablation is undecided at these pairs."), "a decided verdict"),
        (_record("does not hold", "The structure holds at 1e-16."), "a verdict that does not hold"),
        (_record("holds", "It does not hold for one channel."), "a verdict that holds"),
        (_record("not testable here", "The loss differs by +0.05."), "a verdict not testable here"),
    ],
)
def test_a_summary_that_runs_long_or_contradicts_its_verdict_is_caught(record, problem):
    assert any(p.startswith(problem) for p in summary_problems(record))


def test_the_detail_after_the_first_sentence_stays_with_the_chapter():
    long = "Verdict sentence at 4e-16. Detail " + " ".join(["detail"] * 60) + "."
    assert summary_problems(_record(summary=long)) == []  # the ledger shows the first sentence; the chapter, all
