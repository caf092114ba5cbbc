"""Build the claims ledger and the reproducibility page from the results JSON.

    python -m normlab.study.ledger

Every claim ID in data/claims.md appears exactly once; a claim no results file
covers is shown as pending. Nothing here is typed by hand: verdicts, numbers
and provenance all come from build/results/*.json.
"""
from __future__ import annotations

import json
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from . import paths
from .results import VERDICTS

PENDING = "pending"
VERDICT_BADGES = {
    "holds": "✅ holds",
    "holds with caveats": "⚠️ holds with caveats",
    "does not hold": "❌ does not hold",
    "not testable here": "➖ not testable here",
    PENDING: "⏳ pending",
}


@dataclass(frozen=True)
class Claim:
    id: str
    text: str


def parse_claims(path: Path = paths.CLAIMS) -> list[Claim]:
    """Claims from the table rows (`| A1 | paraphrase | original |`) and the Q bullets (`- Q1: text`)."""
    claims = []
    for line in path.read_text(encoding="utf-8").splitlines():
        row = re.match(r"^\|\s*([AB]\d+)\s*\|\s*(.+?)\s*\|", line)
        question = re.match(r"^-\s*(Q\d+):\s*(.+)$", line)
        match = row or question
        if match:
            claims.append(Claim(match.group(1), match.group(2).strip()))
    ids = [c.id for c in claims]
    duplicates = [i for i, n in Counter(ids).items() if n > 1]
    if duplicates:
        raise ValueError(f"{path} lists claim IDs more than once: {duplicates}")
    return claims


def load_results(results_dir: Path = paths.RESULTS) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(results_dir.glob("*.json"))]


def primary_records(claims: list[Claim], runs: list[dict]) -> dict[str, dict]:
    """The one record per claim ID that the ledger shows.

    A claim may be touched by several notebooks; the first notebook in book
    order that records it is the primary one, the others are listed as
    further evidence.
    """
    from .run import ORDER

    known = {c.id for c in claims}
    rank = {name: i for i, name in enumerate(ORDER)}
    records: dict[str, dict] = {}
    for run in sorted(runs, key=lambda r: rank.get(r["notebook"], len(rank))):
        for record in run["claims"]:
            if record["id"] not in known:
                raise ValueError(f"notebook {run['notebook']} records unknown claim {record['id']!r}")
            if record["verdict"] not in VERDICTS:
                raise ValueError(f"notebook {run['notebook']} gives {record['id']} an invalid verdict {record['verdict']!r}")
            entry = dict(record, notebook=run["notebook"], profile=run["profile"])
            if record["id"] in records:
                records[record["id"]].setdefault("also", []).append(entry)
            else:
                records[record["id"]] = entry
    return records


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _link(record: dict) -> str:
    if record.get("section"):
        return f"{{ref}}`{record['notebook']} <{record['section']}>`"
    return f"{{doc}}`{record['notebook']} <../executed/{record['notebook']}>`"


def render_ledger(claims: list[Claim], runs: list[dict]) -> str:
    records = primary_records(claims, runs)
    counts = Counter(records[c.id]["verdict"] if c.id in records else PENDING for c in claims)
    lines = [
        "(ledger)=",
        "# The claims ledger",
        "",
        "Generated from the results files of this build; nothing on this page is typed by hand. "
        "Each verdict was computed in the linked notebook from numbers measured in that run.",
        "",
        "| verdict | claims |",
        "|---|---|",
    ]
    for verdict in (*VERDICTS, PENDING):
        lines.append(f"| {VERDICT_BADGES[verdict]} | {counts.get(verdict, 0)} |")
    lines += ["", f"**{len(claims)} claims in all.**", "", "| ID | claim | verdict | key number | measured in |", "|---|---|---|---|---|"]
    for claim in claims:
        record = records.get(claim.id)
        if record is None:
            lines.append(f"| {claim.id} | {_cell(claim.text)} | {VERDICT_BADGES[PENDING]} | no notebook tests this yet | — |")
            continue
        where = _link(record)
        for extra in record.get("also", []):
            where += f"; also {_link(extra)} ({extra['verdict']})"
        lines.append(
            f"| {claim.id} | {_cell(claim.text)} | {VERDICT_BADGES[record['verdict']]} "
            f"| {_cell(record['summary'])} | {where} |"
        )
    return "\n".join(lines) + "\n"


def render_reproducibility(runs: list[dict]) -> str:
    lines = [
        "# Reproducibility",
        "",
        "Every chapter was executed by papermill in this build. This is what each run was made on.",
        "",
        "| notebook | profile | hardware | python | torch | triton | commit | started | finished |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        hw = run["hardware"]
        machine = f"{hw['cpu']} ({hw['cpu_cores']} cores)" + (f", {hw['gpu']}" if hw.get("gpu") else "")
        v = run["versions"]
        lines.append(
            f"| {run['notebook']} | {run['profile']} | {_cell(machine)} | {v['python']} | {v['torch']} "
            f"| {v['triton']} | `{(run['git_commit'] or 'unknown')[:12]}` | {run['started']} | {run['finished']} |"
        )
    lines += [
        "",
        "To rebuild everything: `make book` (profile `auto`: `gpu` when CUDA is present, else `cpu`), "
        "or `make book PROFILE=smoke` for a quick preview. The corpus and every seed are fixed in the notebooks.",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    claims = parse_claims()
    runs = load_results()
    paths.PAGES.mkdir(parents=True, exist_ok=True)
    (paths.PAGES / "ledger.md").write_text(render_ledger(claims, runs), encoding="utf-8")
    (paths.PAGES / "reproducibility.md").write_text(render_reproducibility(runs), encoding="utf-8")
    tested = len(primary_records(claims, runs))
    print(f"ledger: {tested} of {len(claims)} claims have verdicts, from {len(runs)} results files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
