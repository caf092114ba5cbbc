"""The claims list (data/claims.md) and the badge each verdict shows, shared by the ledger and the chapters."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from normlab.study import paths

PENDING = "pending"
# Symbols from ordinary text fonts (DejaVu, Noto Sans), not colour emoji, which a plain Linux browser shows as boxes.
VERDICT_BADGES = {
    "holds": "✓ holds",
    "holds with caveats": "⚠ holds with caveats",
    "does not hold": "✗ does not hold",
    "not testable here": "– not testable here",
    PENDING: "… pending",
}


@dataclass(frozen=True)
class Claim:
    id: str
    text: str


# A table cell boundary: a `|` that is not escaped as `\|` (a claim's own bar, as in |αx|, is written `\|`).
CELL = re.compile(r"(?<!\\)\|")


def _cells(line: str) -> list[str]:
    return [cell.strip().replace("\\|", "|") for cell in CELL.split(line.strip())[1:-1]]


def parse_claims(path: Path = paths.CLAIMS) -> list[Claim]:
    """Claims from the table rows (`| A1 | paraphrase | original |`) and the Q bullets (`- Q1: text`).

    A row with more or fewer cells than its table's header (an unescaped `|` inside a claim's text splits its row,
    and every page that shows the claim would cut it there) is refused, naming the row."""
    claims, header = [], None
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.startswith("|"):
            header = None
            continue
        cells = _cells(line)
        if header is None:
            header = len(cells)
            continue
        row = re.match(r"^([ABV]\d+)$", cells[0]) if cells else None
        if row is None:
            continue
        if len(cells) != header:
            raise ValueError(
                f"{path}:{number}: claim {cells[0]}'s row has {len(cells)} cells against its header's {header}: a "
                "'|' inside its text splits the row; write it as '\\|'"
            )
        claims.append(Claim(cells[0], cells[1]))
    for line in path.read_text(encoding="utf-8").splitlines():
        question = re.match(r"^-\s*(Q\d+):\s*(.+)$", line)
        if question:
            claims.append(Claim(question.group(1), question.group(2).strip()))
    ids = [c.id for c in claims]
    duplicates = [i for i, n in Counter(ids).items() if n > 1]
    if duplicates:
        raise ValueError(f"{path} lists claim IDs more than once: {duplicates}")
    return claims
