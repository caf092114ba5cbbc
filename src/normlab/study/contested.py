"""The page of what is contested: questions the literature still argues about, the sources on each side, and this
build's verdicts on the claims that bear on each.

The questions and their sources live in data/contested.toml; the verdicts come from this build's results files, as on
the ledger. Nothing here types a verdict: a claim that no chapter of this build judged shows as pending. A question
that names a claim ID missing from data/claims.md, a source on a side the question does not have, or a source without
its title, year or arXiv id (or venue, for the study's own articles) is refused, naming the question and the fix.

A source's text may quote a number that the design registers for a claim as `{ID.NAME}` (e.g. `{V6.small_budget}`):
the page writes it as the {source} role, which the book checks against the design's copy, so that number has one home.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import tomllib

from normlab.study import paths
from normlab.study.claims import PENDING, VERDICT_BADGES, Claim
from normlab.study.pages.ledger_page import _link, caveats_pointer, first_sentences
from normlab.study.pages.markdown import cell, warning_box
from normlab.study.pages.opening import _verb  # the opening page's verdict counts: '1 holds', '2 hold', '1 is …'
from normlab.study.prose import number_text
from normlab.study.results import VERDICTS, LedgerError

CONTESTED = paths.ROOT / "data" / "contested.toml"

_ARXIV = re.compile(r"^\d{4}\.\d{4,5}$")
_SOURCE_NUMBER = re.compile(r"\{([ABQV]\d+)\.([A-Za-z_][A-Za-z0-9_]*)\}")


class ContestedError(LedgerError):
    """data/contested.toml is malformed or names a claim that does not exist; the ledger refuses to build."""


@dataclass(frozen=True)
class Source:
    side: int  # 1-based index into the question's sides
    authors: str
    title: str
    year: int
    says: str
    checked: str  # where on the source's own pages its words were read
    arxiv: str | None = None
    venue: str | None = None


@dataclass(frozen=True)
class Question:
    key: str
    title: str
    contested: str
    sides: tuple[str, ...]
    sources: tuple[Source, ...]
    claims: tuple[str, ...]


def _text(table: dict, key: str, where: str) -> str:
    value = table.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ContestedError(f"{where}: `{key}` is missing or empty; give it as a non-empty string")
    return " ".join(value.split())


def _source(raw: dict, where: str, sides: int) -> Source:
    side = raw.get("side")
    if not isinstance(side, int) or isinstance(side, bool) or not 1 <= side <= sides:
        raise ContestedError(
            f"{where}: side = {side!r}, but the question has {sides} side(s); give side as a number from 1 to {sides}"
        )
    year = raw.get("year")
    if not isinstance(year, int) or isinstance(year, bool) or not 1900 <= year <= 2100:
        raise ContestedError(f"{where}: year = {year!r}; give the year of the version read, e.g. year = 2025")
    arxiv, venue = raw.get("arxiv"), raw.get("venue")
    if arxiv is not None and (not isinstance(arxiv, str) or not _ARXIV.match(arxiv)):
        raise ContestedError(f'{where}: arxiv = {arxiv!r} is not an arXiv id; write it as arxiv = "2503.10622"')
    if arxiv is None and not (isinstance(venue, str) and venue.strip()):
        raise ContestedError(f"{where}: give the source's arxiv id, or its venue where it has none")
    return Source(
        side=side,
        authors=_text(raw, "authors", where),
        title=_text(raw, "title", where),
        year=year,
        says=_text(raw, "says", where),
        checked=_text(raw, "checked", where),
        arxiv=arxiv,
        venue=" ".join(venue.split()) if isinstance(venue, str) else None,
    )


def parse(text: str, known: set[str], *, origin: str = "data/contested.toml") -> list[Question]:
    """The questions of a contested.toml text, each checked; `known` is the set of claim IDs in data/claims.md."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ContestedError(f"{origin} is not valid TOML ({error}); fix the syntax") from None
    raw_questions = document.get("question")
    if not isinstance(raw_questions, list) or not raw_questions:
        raise ContestedError(f"{origin} holds no [[question]] tables; add one per contested question")
    questions, seen = [], set()
    for number, raw in enumerate(raw_questions, start=1):
        key = raw.get("key")
        if not isinstance(key, str) or not re.fullmatch(r"[a-z][a-z0-9-]*", key):
            raise ContestedError(
                f'{origin}: question {number} has key = {key!r}; give it a short lower-case key, e.g. key = "qk-norm"'
            )
        where = f"{origin}, question {key!r}"
        if key in seen:
            raise ContestedError(f"{where} appears twice; give each question its own key")
        seen.add(key)
        sides = raw.get("sides")
        if not isinstance(sides, list) or len(sides) < 2 or not all(isinstance(s, str) and s.strip() for s in sides):
            raise ContestedError(f'{where}: sides must list at least two positions, e.g. sides = ["…", "…"]')
        claims = raw.get("claims")
        if not isinstance(claims, list) or not claims or not all(isinstance(c, str) for c in claims):
            raise ContestedError(f'{where}: claims must list the claim IDs whose verdicts bear on it, e.g. ["V3"]')
        unknown = [c for c in claims if c not in known]
        if unknown:
            raise ContestedError(
                f"{where} names {', '.join(unknown)}, which {'is not a claim' if len(unknown) == 1 else 'are not claims'}"
                " in data/claims.md; register the claim first, or drop it from the question's claims"
            )
        twice = [c for c, n in Counter(claims).items() if n > 1]
        if twice:
            raise ContestedError(f"{where} lists {', '.join(twice)} more than once; list each claim once")
        raw_sources = raw.get("source")
        if not isinstance(raw_sources, list) or not raw_sources:
            raise ContestedError(f"{where} has no [[question.source]] tables; name the sources on each side")
        sources = tuple(
            _source(s, f"{where}, source {i} ({s.get('title', 'untitled')})", len(sides))
            for i, s in enumerate(raw_sources, start=1)
        )
        empty = [i + 1 for i in range(len(sides)) if not any(s.side == i + 1 for s in sources)]
        if empty:
            raise ContestedError(f"{where}: side(s) {empty} have no source; name one, or drop the side")
        questions.append(
            Question(
                key=key,
                title=_text(raw, "title", where),
                contested=_text(raw, "contested", where),
                sides=tuple(" ".join(s.split()) for s in sides),
                sources=sources,
                claims=tuple(claims),
            )
        )
    return questions


def load(path: Path | None = None, claims: list[Claim] | None = None) -> list[Question]:
    """The questions of data/contested.toml, every claim ID checked against data/claims.md."""
    from normlab.study.claims import parse_claims

    path = Path(path or CONTESTED)
    known = {c.id for c in (claims if claims is not None else parse_claims())}
    return parse(path.read_text(encoding="utf-8"), known, origin=str(path.name))


def source_text(text: str, registered) -> str:
    """`text` with each `{ID.NAME}` written as the {source} role of the design's copy; `registered` is the parsed
    design (normlab.study.design.Design), whose source_number refuses a name it does not hold."""

    def role(match: re.Match) -> str:
        claim_id, name = match.groups()
        try:
            value = registered.source_number(claim_id, name)["value"]
        except Exception as error:  # the design's own message names the claim and the missing number
            raise ContestedError(f"data/contested.toml quotes {{{claim_id}.{name}}}: {error}") from None
        return f"{{source}}`{claim_id}.{name}={number_text(value)}`"

    return _SOURCE_NUMBER.sub(role, text)


def _citation(source: Source) -> str:
    where = (
        f"[arXiv {source.arxiv}](https://arxiv.org/abs/{source.arxiv}), {source.year}"
        if source.arxiv
        else f"{source.venue}, {source.year}"
    )
    return f"{source.authors}, *{source.title}* ({where})"


def standing(claim_ids: tuple[str, ...], table: dict[str, dict]) -> str:
    """'This build judged 3 of its 4 claims: 2 hold with caveats, 1 does not hold; 1 is pending.', from the verdicts."""
    verdicts = [table[c]["record"]["verdict"] for c in claim_ids if table[c]["record"]]
    total, counts = len(claim_ids), Counter(verdicts)
    if not verdicts:
        return "This build has judged " + ("its one claim" if total == 1 else f"none of its {total} claims") + " yet."
    if total == 1:
        return f"This build judged its one claim: it {_verb(verdicts[0], 1)}."
    judged = ", ".join(f"{counts[v]} {_verb(v, counts[v])}" for v in VERDICTS if counts[v])
    pending = total - len(verdicts)
    if not pending:
        return f"This build judged all {total} of its claims: {judged}."
    return f"This build judged {len(verdicts)} of its {total} claims: {judged}; {pending} {'is' if pending == 1 else 'are'} pending."


def render_contested(
    questions: list[Question],
    claims: list[Claim],
    table: dict[str, dict],
    *,
    registered=None,
    warning: str | None = None,
) -> str:
    """The page: per question, what is contested, the sources on each side, and this build's verdicts.

    `table` is normlab.study.results.verdicts(claims, runs): the verdict of each claim's owning chapter, or none.
    `registered` (the parsed design) is needed only where a source's text quotes a registered number.
    """
    texts = {c.id: c.text for c in claims}

    def says(text: str) -> str:
        return source_text(text, registered) if _SOURCE_NUMBER.search(text) else text

    lines = [
        "(contested)=",
        "# What is contested",
        "",
        *warning_box(warning),
        "Some questions this study touches are still argued in the literature. "
        "Each section states one, names the sources on each side and what each says, "
        "and sets this build's verdicts beside them. "
        "The sources' words were read on their own pages; where each was read is given after it. "
        "The verdicts are generated from this build's results, as on the {ref}`claims ledger <ledger>`. "
        "A claim that no chapter of this build judged shows as pending.",
        "",
        "| question | where this build stands |",
        "|---|---|",
    ]
    lines += [f"| {{ref}}`{cell(q.title)} <contested-{q.key}>` | {standing(q.claims, table)} |" for q in questions]
    for question in questions:
        lines += ["", f"(contested-{question.key})=", f"## {question.title}", "", question.contested, ""]
        for number, side in enumerate(question.sides, start=1):
            lines += [f"**{side}**", ""]
            lines += [
                f"- {_citation(s)}: {says(s.says)} *Read in: {s.checked}.*"
                for s in question.sources
                if s.side == number
            ]
            lines.append("")
        lines += [
            "**This build's evidence.** " + standing(question.claims, table),
            "",
            ":::{div} normlab-ledger",  # the ledger's wide, compact table style (book/_ext/normlab.css)
            "| ID | claim | verdict | what this build found | where measured |",
            "|---|---|---|---|---|",
        ]
        for claim_id in question.claims:
            record = table[claim_id]["record"]
            if record is None:
                parts = table[claim_id]["parts"]
                note = "no chapter of this build has judged it yet" + (" (only parts measured)" if parts else "")
                where = "; ".join(_link(p) for p in parts) or "—"
                lines.append(f"| {claim_id} | {cell(texts[claim_id])} | {VERDICT_BADGES[PENDING]} | {note} | {where} |")
                continue
            lines.append(
                f"| {claim_id} | {cell(texts[claim_id])} | {VERDICT_BADGES[record['verdict']]} "
                f"| {cell(first_sentences(record['summary'], 1) + caveats_pointer(record))} | {_link(record)} |"
            )
        lines.append(":::")
    return "\n".join(lines) + "\n"
