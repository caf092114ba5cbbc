"""The page of what is contested: rendered from data/contested.toml and this build's verdicts, never typed ones."""

import random

import pytest

from normlab.study import contested
from normlab.study.claims import PENDING, VERDICT_BADGES, Claim, parse_claims
from normlab.study.results import VERDICTS, LedgerError, verdicts

CLAIMS = [Claim("A9", "Accuracy is almost unchanged"), Claim("V3", "QK-norm removes the instability")]

QUESTION = """
[[question]]
key = "qk-norm"
title = "Whether small models need QK-norm"
contested = "One study says small models diverge; another says QK-norm is not enough."
sides = ["It removes a real instability", "It is not enough"]
claims = {claims}

[[question.source]]
side = 1
authors = "Wortsman et al."
title = "Small-scale proxies"
arxiv = "2309.14322"
year = 2023
says = "Small models show the instability at high learning rates."
checked = "the abstract"

[[question.source]]
side = {second_side}
authors = "The essay"
title = "Why mean subtraction can be dropped"
venue = "article B"
year = 2024
says = "{says}"
checked = "the article"
"""


def _text(claims='["A9", "V3"]', second_side=2, says="Nothing more is needed."):
    return QUESTION.format(claims=claims, second_side=second_side, says=says)


def _table(records):
    """The verdicts table the ledger hands the page: records as the chapter 'quality' wrote them."""
    run = {"notebook": "quality", "profile": "smoke", "claims": records}
    return verdicts(CLAIMS, [run])


def _record(claim_id, verdict, summary):
    return {"id": claim_id, "verdict": verdict, "summary": summary, "evidence": {}, "section": "quality-loss"}


def test_page_shows_each_verdict_and_first_sentence_from_the_results_and_pending_where_none():
    verdict = random.choice(VERDICTS)
    number = random.randint(100, 999)
    questions = contested.parse(_text(), {"A9", "V3"})
    table = _table([_record("A9", verdict, f"Measured {number} nats. A second sentence stays in the chapter.")])
    page = contested.render_contested(questions, CLAIMS, table)
    row = next(line for line in page.splitlines() if line.startswith("| A9 |"))
    assert VERDICT_BADGES[verdict] in row and f"Measured {number} nats." in row
    assert "second sentence" not in page
    assert "{ref}`quality <quality-loss>`" in row
    pending = next(line for line in page.splitlines() if line.startswith("| V3 |"))
    assert VERDICT_BADGES[PENDING] in pending and "no chapter of this build has judged it yet" in pending
    # the standing is counted from the verdicts: one judged of two, one pending
    is_ = {"holds": "holds", "holds with caveats": "holds with caveats", "does not hold": "does not hold"}
    said = is_.get(verdict, "is not testable here")
    assert f"This build judged 1 of its 2 claims: 1 {said}; 1 is pending." in page
    # the sources, under their sides, with the arXiv link and where their words were read
    first, second = page.index("**It removes a real instability**"), page.index("**It is not enough**")
    wortsman = page.index("[arXiv 2309.14322](https://arxiv.org/abs/2309.14322), 2023")
    assert first < wortsman < second < page.index("*Why mean subtraction can be dropped* (article B, 2024)")
    assert "*Read in: the abstract.*" in page
    assert page.startswith("(contested)=\n# What is contested")


def test_standing_counts_several_verdicts_and_none():
    table = _table([_record("A9", "holds", "One."), _record("V3", "holds", "Two.")])
    assert contested.standing(("A9", "V3"), table) == "This build judged all 2 of its claims: 2 hold."
    assert contested.standing(("A9",), _table([])) == "This build has judged its one claim yet."
    assert contested.standing(("A9", "V3"), _table([])) == "This build has judged none of its 2 claims yet."


def test_a_claim_id_that_is_not_a_claim_is_refused_naming_the_question():
    with pytest.raises(LedgerError, match=r"question 'qk-norm' names V99, which is not a claim in data/claims.md"):
        contested.parse(_text(claims='["A9", "V99"]'), {"A9", "V3"})


@pytest.mark.parametrize(
    "text, refusal",
    [
        (_text(second_side=3), r"question 'qk-norm', source 2 .*side = 3, but the question has 2 side"),
        (_text(second_side=1), r"question 'qk-norm': side\(s\) \[2\] have no source"),
        (_text(claims='["A9", "A9"]'), r"lists A9 more than once"),
        (_text(claims="[]"), r"claims must list the claim IDs"),
        (_text().replace('venue = "article B"\n', ""), r"give the source's arxiv id, or its venue"),
        (_text().replace('"2309.14322"', '"arXiv:2309"'), r"is not an arXiv id"),
        (_text().replace('says = "Small models', 'says = "  "\n#'), r"`says` is missing or empty"),
        (_text() + _text(), r"question 'qk-norm' appears twice"),
        ("title = 1", r"holds no \[\[question\]\] tables"),
        ("[[question", r"is not valid TOML"),
    ],
)
def test_malformed_questions_are_refused(text, refusal):
    with pytest.raises(contested.ContestedError, match=refusal):
        contested.parse(text, {"A9", "V3"})


class _Design:
    """The one method of the parsed design that the page uses: a registered source number, or the design's refusal."""

    def source_number(self, claim_id, name):
        if (claim_id, name) != ("V3", "lr_ratio"):
            raise KeyError(f"claim {claim_id} registers no source number {name!r}")
        return {"value": 1.5, "unit": "ratio", "where": "abstract"}


def test_a_quoted_source_number_is_the_designs_copy_as_the_checked_role():
    questions = contested.parse(_text(says="A {V3.lr_ratio} times higher rate."), {"A9", "V3"})
    page = contested.render_contested(questions, CLAIMS, _table([]), registered=_Design())
    assert "A {source}`V3.lr_ratio=1.5` times higher rate." in page
    questions = contested.parse(_text(says="A {V3.other} times higher rate."), {"A9", "V3"})
    with pytest.raises(contested.ContestedError, match=r"quotes \{V3.other\}: .*registers no source number"):
        contested.render_contested(questions, CLAIMS, _table([]), registered=_Design())


def test_the_committed_questions_name_only_registered_claims_and_cite_each_side():
    questions = contested.load()
    known = {c.id for c in parse_claims()}
    assert questions and all(set(q.claims) <= known for q in questions)
    assert all({s.side for s in q.sources} == set(range(1, len(q.sides) + 1)) for q in questions)
