"""The results contract: one JSON file per notebook run.

A notebook builds a `Results`, records one entry per claim it tests with a
verdict computed from its own measurements, and saves. The ledger is built
from these files only.
"""

from __future__ import annotations

import json
import math
import numbers
import sys
from datetime import datetime, timezone
from pathlib import Path

from normlab.runtime.environment import git_commit, hardware, versions

VERDICTS = ("holds", "holds with caveats", "does not hold", "not testable here")


def decide(holds: bool, *, caveat: bool = False) -> str:
    """Map measured pass/fail outcomes to a verdict string.

    `holds` is the claim's test against its stated threshold; `caveat` marks a
    claim that holds only in part of the regime measured.
    """
    if not holds:
        return "does not hold"
    return "holds with caveats" if caveat else "holds"


def is_fragile(record: dict) -> bool | None:
    """True where the run-to-run spread could carry the key number across its threshold.

    Fragile when |key - threshold| <= 2*spread (about a 95% band for a
    standard deviation); None when the record lacks any of the three. It lives
    here, beside the contract that defines the three numbers, so that the
    ledger and the chapters' verdict tables apply one rule.
    """
    key, threshold, spread = record.get("key_number"), record.get("threshold"), record.get("spread")
    if key is None or threshold is None or spread is None:
        return None
    return abs(float(key) - float(threshold)) <= 2 * float(spread)


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
    def __init__(
        self, notebook: str, profile: str, results_dir: str | Path = "build/results", overrides: dict | None = None
    ):
        """`overrides`: the settings that replaced the profile's committed design for this run (SET= of the
        runner), recorded so that a verdict from an overridden design says so."""
        self.notebook = notebook
        self.profile = profile
        self.overrides = dict(overrides or {})
        self.results_dir = Path(results_dir)
        self.started = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self.claims: list[dict] = []

    def record(
        self,
        claim_id: str,
        verdict: str,
        summary: str,
        evidence: dict,
        section: str | None = None,
        *,
        key_number: float | None = None,
        threshold: float | None = None,
        spread: float | None = None,
        rule: str | None = None,
        meaning: str | None = None,
        unit: str | None = None,
        headline: str | None = None,
    ) -> dict:
        """Record the verdict of a claim this chapter owns.

        `section` is the MyST label of the notebook section that measured it.
        `key_number` is the measured number the verdict turns on, `threshold`
        the value it was judged against, and `spread` that number's run-to-run
        spread (a standard deviation over seeds or repeats measured in this
        run). The ledger marks the verdict fragile when the spread could carry
        the key number across the threshold. `rule` says, in one sentence, how
        the verdict follows from the number (and how parts from other chapters
        were combined).
        """
        if verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {verdict!r}")
        self._check_new(claim_id, summary)
        for name, value in (("key_number", key_number), ("threshold", threshold), ("spread", spread)):
            if value is not None and not (isinstance(value, numbers.Real) and math.isfinite(float(value))):
                raise ValueError(f"{name} for {claim_id} must be a finite number or None, got {value!r}")
        if spread is not None and float(spread) < 0:
            raise ValueError(f"spread for {claim_id} must be >= 0, got {spread!r}")
        entry = {
            "id": claim_id,
            "verdict": verdict,
            "summary": summary,
            "evidence": _to_json(evidence),
            "section": section,
            "key_number": None if key_number is None else float(key_number),
            "threshold": None if threshold is None else float(threshold),
            "spread": None if spread is None else float(spread),
            "rule": rule,
            "meaning": meaning,
            "unit": unit,
            "headline": headline,
        }
        self.claims.append(entry)
        print(f"[{claim_id}] {verdict}: {summary}", file=sys.__stderr__)
        return entry

    def record_evidence(self, claim_id: str, summary: str, evidence: dict, section: str | None = None) -> dict:
        """Record evidence for a claim another chapter owns: numbers, no verdict.

        The owning chapter reads this file (see `load_evidence`) and combines
        the parts by the rule it states; the ledger lists the part beside the
        owner's verdict.
        """
        self._check_new(claim_id, summary)
        entry = {
            "id": claim_id,
            "verdict": None,
            "summary": summary,
            "evidence": _to_json(evidence),
            "section": section,
        }
        self.claims.append(entry)
        return entry

    def _check_new(self, claim_id: str, summary: str) -> None:
        if any(c["id"] == claim_id for c in self.claims):
            raise ValueError(f"claim {claim_id} is already recorded in {self.notebook}")
        if not summary or not isinstance(summary, str):
            raise ValueError("summary must be a non-empty sentence with the key number")

    def to_dict(self) -> dict:
        return {
            "notebook": self.notebook,
            "profile": self.profile,
            "overrides": _to_json(self.overrides),
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


def load_evidence(notebook: str, claim_id: str, results_dir: str | Path = "build/results") -> dict | None:
    """The evidence record another chapter left for `claim_id`, or None when that chapter has not run.

    Owners that combine parts from other chapters call this; a missing part
    must show as missing in the owner's verdict, never be silently skipped.
    """
    path = Path(results_dir) / f"{notebook}.json"
    if not path.exists():
        return None
    try:
        run = json.loads(path.read_text())
        records = [c for c in run["claims"] if c["id"] == claim_id]
    except (json.JSONDecodeError, KeyError, TypeError) as error:
        raise ValueError(
            f"results file {path} is corrupt ({error}); rebuild it with `make notebooks FORCE={notebook}`"
        ) from None
    return records[0] if records else None
