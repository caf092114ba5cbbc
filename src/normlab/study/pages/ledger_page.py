"""The claims ledger: every claim in data/claims.md once, with its owner's verdict, or pending.

Each key number is shown in the unit its chapter recorded, beside what it measures (the record's `meaning`); each
summary's first sentence (at most `SUMMARY_WORDS` words: the verdict, the test it read and its numbers; the chapter,
which the tests hold to that, shows the sentences after it) is followed by a pointer to the verdict's caveats, which the list under the table gives in full. Evidence that other
chapters recorded for a claim (verdict None) is listed as parts beside the verdict, never as one.
"""

from __future__ import annotations

import re
from collections import Counter

from normlab.study.claims import PENDING, VERDICT_BADGES, Claim
from normlab.study.key_numbers import KeyNumber, format_spread
from normlab.study.pages.markdown import cell, warning_box
from normlab.study.present import overrides_text
from normlab.study.results import VERDICTS, is_fragile, verdicts


def key_cell(record: dict) -> str:
    """'5.9% vs 10%: *|median share of LayerNorm's time RMSNorm saves|, both fused*' for the ledger's table."""
    if record.get("key_number") is None:
        return "—"
    key = KeyNumber.of(record)
    return f"{key.format(record['key_number'])} vs {key.limit(record.get('threshold'))}: *{key.meaning}*"


# The most words a summary may take: the verdict, the test it read and its numbers; the rest is its chapter's.
SUMMARY_WORDS = 40


def caveats_pointer(record: dict) -> str:
    """' **2 caveats** (below)' where the verdict has caveats, linked to the list under the table; '' without any."""
    caveats = record.get("caveats")
    if not caveats:
        return ""
    return f" **{{ref}}`{len(caveats)} caveat{'s' if len(caveats) > 1 else ''} <ledger-caveats>`**"


_ABBREVIATIONS = ("e.g.", "i.e.", "et al.", "vs.", "cf.", "Fig.", "Eq.", "No.")


def first_sentences(text: str, count: int = 2) -> str:
    """The first `count` sentences of `text`, with an ellipsis where more followed.

    A sentence ends at '.', '!' or '?' followed by a space and a capital letter (or by the end of the text),
    except after a common abbreviation, so that 'Xiong et al. 2020' and '0.5 nats' do not end one.
    """
    text = " ".join(str(text).split())
    ends = 0
    for match in re.finditer(r"[.!?](?=\s+[A-Z(\"“‘'*]|\s*$)", text):
        before = text[: match.end()]
        if before.endswith(_ABBREVIATIONS):
            continue
        ends += 1
        if ends == count:
            rest = text[match.end() :].strip()
            return before + (" …" if rest else "")
    return text


def _link(record: dict) -> str:
    if record.get("section"):
        return f"{{ref}}`{record['notebook']} <{record['section']}>`"
    return f"{{doc}}`{record['notebook']} <../executed/{record['notebook']}>`"


def _fragile_cell(record: dict) -> str:
    fragile = is_fragile(record)
    return "—" if fragile is None else ("**yes**" if fragile else "no")


def _spread_cell(record: dict) -> str:
    if record.get("spread") is None:
        return "—"
    return format_spread(record["spread"], record.get("unit"))


def overrides_box(runs: list[dict]) -> list[str]:
    """A warning naming each chapter that ran with an overridden design (SET=), with the values."""
    overridden = [f"{run['notebook']}: {overrides_text(run['overrides'])}" for run in runs if run.get("overrides")]
    if not overridden:
        return []
    return warning_box(
        "These chapters ran with their committed design overridden (SET=), and their verdicts answer that design: "
        + "; ".join(overridden)
        + "."
    )


def render_ledger(claims: list[Claim], runs: list[dict], *, warning: str | None = None) -> str:
    table = verdicts(claims, runs)
    counts = Counter(slot["record"]["verdict"] if slot["record"] else PENDING for slot in table.values())
    judged = [slot["record"] for slot in table.values() if slot["record"]]
    fragile = [r["id"] for r in judged if is_fragile(r)]
    unmeasured = [r["id"] for r in judged if is_fragile(r) is None]
    lines = [
        "(ledger)=",
        "# The claims ledger",
        "",
        *warning_box(warning),
        *overrides_box(runs),
        "Generated from the results files of this build; nothing on this page is typed by hand. "
        "Each verdict was computed in the linked chapter from numbers measured in that run. "
        "Each claim has one owning chapter; parts measured elsewhere are listed beside its verdict. "
        "*Key number vs threshold* gives the number the verdict turns on, the value it was judged against and what "
        "the number measures; the spread is in the same unit. Each summary gives the verdict, the test it read and "
        "its numbers; the linked chapter gives the rest, and the caveats of each verdict are listed under the table.",
        "",
        f"**{len(fragile)} of {len(judged)} verdicts are fragile**"
        + (f" ({', '.join(fragile)})" if fragile else "")
        + ": their key number lies within twice its run-to-run spread of the threshold, so a repeat run could flip them."
        + (
            f" {len(unmeasured)} "
            + (
                "verdict records no spread or threshold, so its"
                if len(unmeasured) == 1
                else "verdicts record no spread or threshold, so their"
            )
            + " fragility is unknown (—)."
            if unmeasured
            else ""
        ),
        "",
        "| verdict | claims |",
        "|---|---|",
    ]
    for verdict in (*VERDICTS, PENDING):
        lines.append(f"| {VERDICT_BADGES[verdict]} | {counts.get(verdict, 0)} |")
    lines += [
        "",
        f"**{len(claims)} claims in all.**",
        "",
        ":::{div} normlab-ledger",  # styled wide and compact by book/_ext/normlab.css
        "| ID | claim | verdict | key number vs threshold | spread | fragile | summary | where measured |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for claim in claims:
        slot = table[claim.id]
        record, parts = slot["record"], slot["parts"]
        part_links = "; ".join(_link(p) for p in parts)
        if record is None:
            where = f"parts: {part_links}" if parts else "—"
            note = "no chapter has judged this yet" + (" (only parts measured)" if parts else "")
            lines.append(
                f"| {claim.id} | {cell(claim.text)} | {VERDICT_BADGES[PENDING]} | — | — | — | {note} | {where} |"
            )
            continue
        where = _link(record) + (f"; parts: {part_links}" if parts else "")
        # The table keeps two sentences of the summary; the chapter shows all of it.
        lines.append(
            f"| {claim.id} | {cell(claim.text)} | {VERDICT_BADGES[record['verdict']]} | {cell(key_cell(record))} "
            f"| {_spread_cell(record)} | {_fragile_cell(record)} "
            f"| {cell(first_sentences(record['summary'], 1) + caveats_pointer(record))} "
            f"| {where} |"
        )
    lines += [":::"]
    caveated = [
        (claim.id, table[claim.id]["record"]) for claim in claims if (table[claim.id]["record"] or {}).get("caveats")
    ]
    if caveated:
        lines += [
            "",
            "(ledger-caveats)=",
            "## Caveats",
            "",
            "What qualifies each verdict, as its chapter states it beside the verdict.",
            "",
        ]
        for cid, record in caveated:
            caveats = [c.rstrip(".") for c in record["caveats"]]
            # one caveat on its claim's line; several, one to a line under it, so that none runs into the next
            if len(caveats) == 1:
                lines.append(f"- **{cid}** ({_link(record)}): {caveats[0]}.")
            else:
                lines += [f"- **{cid}** ({_link(record)}):"] + [f"  - {caveat}." for caveat in caveats]
    parts = [(claim.id, part) for claim in claims for part in table[claim.id]["parts"]]
    if parts:
        lines += [
            "",
            "## Parts measured in other chapters",
            "",
            "Evidence without a verdict: the owning chapter reads it and combines it by the rule it states.",
            "",
            "| ID | measured in | further evidence |",
            "|---|---|---|",
        ]
        lines += [f"| {cid} | {_link(part)} | {cell(first_sentences(part['summary']))} |" for cid, part in parts]
    return "\n".join(lines) + "\n"
