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


def parse_claims(path: Path = paths.CLAIMS) -> list[Claim]:
    """Claims from the table rows (`| A1 | paraphrase | original |`) and the Q bullets (`- Q1: text`)."""
    claims = []
    for line in path.read_text(encoding="utf-8").splitlines():
        row = re.match(r"^\|\s*([ABV]\d+)\s*\|\s*(.+?)\s*\|", line)
        question = re.match(r"^-\s*(Q\d+):\s*(.+)$", line)
        match = row or question
        if match:
            claims.append(Claim(match.group(1), match.group(2).strip()))
    ids = [c.id for c in claims]
    duplicates = [i for i, n in Counter(ids).items() if n > 1]
    if duplicates:
        raise ValueError(f"{path} lists claim IDs more than once: {duplicates}")
    return claims
