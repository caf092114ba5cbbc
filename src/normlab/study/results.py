"""The results contract: one JSON file per notebook run.

A notebook builds a `Results`, records one entry per claim it tests with a
verdict computed from its own measurements, and saves. The ledger is built
from these files only.
"""
from __future__ import annotations

import json
import math
import numbers
from datetime import datetime, timezone
from pathlib import Path

from .environment import git_commit, hardware, versions

VERDICTS = ("holds", "holds with caveats", "does not hold", "not testable here")


def decide(holds: bool, *, caveat: bool = False) -> str:
    """Map measured pass/fail outcomes to a verdict string.

    `holds` is the claim's test against its stated threshold; `caveat` marks a
    claim that holds only in part of the regime measured.
    """
    if not holds:
        return "does not hold"
    return "holds with caveats" if caveat else "holds"


def _to_json(value):
    """Convert tensors, numpy scalars and arrays to plain JSON values; NaN/Inf become strings."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()
    if isinstance(value, dict):
        return {str(k): _to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_json(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        value = float(value)
        return value if math.isfinite(value) else repr(value)
    raise TypeError(f"evidence value of type {type(value).__name__} is not JSON-serialisable: {value!r}")


class Results:
    def __init__(self, notebook: str, profile: str, results_dir: str | Path = "build/results"):
        self.notebook = notebook
        self.profile = profile
        self.results_dir = Path(results_dir)
        self.started = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self.claims: list[dict] = []

    def record(self, claim_id: str, verdict: str, summary: str, evidence: dict, section: str | None = None) -> dict:
        """Record one claim's verdict. `section` is the MyST label of the notebook section that measured it."""
        if verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {verdict!r}")
        if any(c["id"] == claim_id for c in self.claims):
            raise ValueError(f"claim {claim_id} is already recorded in {self.notebook}")
        if not summary or not isinstance(summary, str):
            raise ValueError("summary must be a non-empty sentence with the key number")
        entry = {
            "id": claim_id,
            "verdict": verdict,
            "summary": summary,
            "evidence": _to_json(evidence),
            "section": section,
        }
        self.claims.append(entry)
        print(f"[{claim_id}] {verdict}: {summary}")
        return entry

    def to_dict(self) -> dict:
        return {
            "notebook": self.notebook,
            "profile": self.profile,
            "hardware": hardware(),
            "versions": versions(),
            "git_commit": git_commit(),
            "started": self.started,
            "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "claims": self.claims,
        }

    def save(self) -> Path:
        self.results_dir.mkdir(parents=True, exist_ok=True)
        path = self.results_dir / f"{self.notebook}.json"
        path.write_text(json.dumps(self.to_dict(), indent=2, allow_nan=False))
        return path
