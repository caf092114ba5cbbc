"""The results contract: one JSON file per notebook run, written by the chapters and read by the pages.

A notebook builds a `Results`, records one entry per claim it tests with a
verdict computed from its own measurements, and saves. The ledger is built
from these files only: `load_results` reads and checks them, `check_consistent`
refuses a mixture of profiles or commits, and `verdicts` gives each claim its
owner's record and the parts other chapters measured.
"""

from __future__ import annotations

import json
import math
import numbers
import sys
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

from normlab.runtime.code_identity import FINGERPRINT_KEY, loaded_source
from normlab.runtime.environment import git_commit, hardware, versions
from normlab.runtime.jobs import jobs_by_machine, machines_since
from normlab.study import design, multiplicity, paths, trained
from normlab.study.claims import Claim
from normlab.study.findings import Finding, rule_text

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


def _check_key_number_stated(claim_id: str, meaning, unit, headline) -> None:
    """Refuse a verdict whose key number the ledger could not show: it reads meaning and unit from the record."""
    fix = (
        "pass them on the chapter's Finding, e.g. `Finding(..., **KeyNumber(meaning, unit).fields())` with "
        "normlab.study.key_numbers (DIMENSIONLESS for a pure number, SHARE for a fraction shown as a percent, "
        "FACTOR for a ratio shown as ×, POINTS for a change of a share, NATS_PER_BYTE or NATS_PER_TOKEN for a loss)"
    )
    if not isinstance(meaning, str) or not meaning.strip():
        raise ValueError(
            f"claim {claim_id}: no sentence says what its key number measures (meaning={meaning!r}); {fix}"
        )
    if not isinstance(unit, str) or not unit.strip():
        raise ValueError(f"claim {claim_id}: its key number has no unit (unit={unit!r}); {fix}")
    if headline is not None and (not isinstance(headline, str) or not headline.strip()):
        raise ValueError(f"claim {claim_id}: its headline must be a sentence or None, got {headline!r}")


def judge(claim_id: str, finding: Finding) -> Finding:
    """The study's rules on one claim's finding, before it is shown or recorded: the finding as they leave it.

    - Did each arm train (`normlab.study.trained`): a claim whose design trains models must carry its arms' losses;
      an arm that did not train makes the comparison not testable here, unless the design says the failure answers
      the claim.
    - The family's rule (`normlab.study.multiplicity.judge`): a reading that decides at 95% alone but not over the
      family does not decide its claim.

    `Results.record` applies it to what it records; a chapter that shows a verdict before recording it judges it
    first, so that its page and the ledger agree. A finding already judged is returned as it is."""
    if finding.judged:
        return finding
    verdict, summary, headline, evidence = finding.verdict, finding.summary, finding.headline, dict(finding.evidence)
    registered = design.load()
    if registered.claim(claim_id).trains:
        if finding.arms is None:
            raise ValueError(
                f"claim {claim_id} trains models (data/design.toml: trains = true), so its finding must carry "
                "each arm's losses beside the byte frequencies' entropy: pass arms=ArmLosses(...) "
                "(normlab.study.trained) so that the did-it-train rule can read them"
            )
        trained_rule = trained.judge(claim_id, verdict, summary, headline, finding.arms, registered)
        verdict, summary, headline = trained_rule.verdict, trained_rule.summary, trained_rule.headline
        evidence["arms_trained"] = trained_rule.evidence
    caveats = tuple(finding.caveats)
    family = multiplicity.parse()
    if family is not None and verdict != "not testable here":
        ruled = multiplicity.judge(claim_id, verdict, summary, _to_json(evidence), family)
        if ruled.verdict == "not testable here":
            headline = None  # no opening-page sentence: what the rule leaves undecided is no finding to lead with
        verdict, summary, caveats = ruled.verdict, ruled.summary, (*caveats, *ruled.caveats)
    return replace(
        finding, verdict=verdict, summary=summary, headline=headline, caveats=caveats, evidence=evidence, judged=True
    )


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
        self._jobs_before = jobs_by_machine()  # the machines' job counts before this chapter's jobs

    def record(self, claim_id: str, finding: Finding, section: str | None = None) -> dict:
        """Record `finding`, the verdict of a claim this chapter owns, measured in the notebook section `section`
        (its MyST label). The finding's fields are documented on `normlab.study.findings.Finding`: the ledger marks
        the verdict fragile when its spread could carry its key number across its threshold, refuses threshold
        names in `reads` that the design does not register for the claim, and shows the key number by its `meaning`
        and `unit` (both required) without knowing the claim. Its "rule" is the registered design's
        (`normlab.study.findings.rule_text`): the claim's test and the thresholds the finding reads."""
        verdict, summary = finding.verdict, finding.summary
        if verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {verdict!r}")
        self._check_new(claim_id, summary)
        _check_key_number_stated(claim_id, finding.meaning, finding.unit, finding.headline)
        for name in ("key_number", "threshold", "spread"):
            value = getattr(finding, name)
            if value is not None and not (isinstance(value, numbers.Real) and math.isfinite(float(value))):
                raise ValueError(f"{name} for {claim_id} must be a finite number or None, got {value!r}")
        for name, what in (("caveats", "clauses"), ("reads", "threshold names")):
            if isinstance(getattr(finding, name), str):
                raise ValueError(
                    f"{name} for {claim_id} must be a list of {what}, got one string {getattr(finding, name)!r}"
                )
        if finding.spread is not None and float(finding.spread) < 0:
            raise ValueError(f"spread for {claim_id} must be >= 0, got {finding.spread!r}")
        judged = judge(claim_id, finding)
        # the finding as recorded, so that what a chapter shows after recording it is what the ledger shows
        for name in ("verdict", "summary", "headline", "caveats", "evidence", "judged"):
            setattr(finding, name, getattr(judged, name))
        verdict, summary, headline, caveats, evidence = (
            judged.verdict,
            judged.summary,
            judged.headline,
            judged.caveats,
            judged.evidence,
        )
        entry = {"id": claim_id, "verdict": verdict, "summary": summary, "evidence": _to_json(evidence)}
        entry["section"] = section
        for name in ("key_number", "threshold", "spread"):
            entry[name] = None if getattr(finding, name) is None else float(getattr(finding, name))
        # the rule from its one home, the registered design (refused, naming the claim and file, without a test)
        entry["rule"] = rule_text(claim_id, finding.reads, finding.runs_rule)
        for name in ("meaning", "unit"):
            entry[name] = getattr(finding, name)
        entry["headline"] = headline
        entry["caveats"] = [str(caveat) for caveat in caveats]
        entry["reads"] = [str(name) for name in finding.reads]
        entry["scale"] = finding.scale
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
        if not isinstance(summary, str) or not summary.strip():
            raise ValueError(
                f"claim {claim_id} in {self.notebook}: the summary must be a sentence with the key number, "
                f"got {summary!r}; write it on the chapter's Finding"
            )

    def to_dict(self) -> dict:
        return {
            "notebook": self.notebook,
            "profile": self.profile,
            "overrides": _to_json(self.overrides),
            "hardware": hardware(),
            "versions": versions(),
            # every machine this chapter's parallel jobs ran on (host, hardware with the cpp build, torch, jobs)
            "machines": _to_json(machines_since(self._jobs_before)),
            "git_commit": git_commit(),
            "started": self.started,
            "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            # the code this chapter ran (the modules imported by the time it saves), as a committed GPU file has it
            FINGERPRINT_KEY: loaded_source(),
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


# ---- reading: the results files the pages are built from ------------------------------------------------

RUN_KEYS = ("notebook", "profile", "hardware", "versions", "git_commit", "started", "finished", "claims")
RECORD_KEYS = ("id", "verdict", "summary", "evidence")


class LedgerError(ValueError):
    """A results file the ledger must not publish; the message names the file and the fix."""


def fix_for(notebook: str) -> str:
    """How to rebuild one chapter's results, for the refusals' messages."""
    return f"rebuild it with `make notebooks FORCE={notebook}` (or `make book FORCE={notebook}`)"


def _where(run: dict) -> str:
    return run.get("_file") or f"the results of {run.get('notebook', '?')}"


def read_json_object(path: Path, fix: str) -> dict:
    """A committed or generated JSON file that must hold one object; every refusal names the file and `fix`."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise LedgerError(
            f"{path}: not valid JSON ({error.msg} at line {error.lineno}, column {error.colno}); "
            f"the file is truncated or was edited by hand: {fix}"
        ) from None
    except UnicodeDecodeError:
        raise LedgerError(f"{path}: not UTF-8 text; {fix}") from None
    if not isinstance(document, dict):
        raise LedgerError(f"{path}: expected a JSON object, found {type(document).__name__}; {fix}")
    return document


def load_results(results_dir: Path = paths.RESULTS, executed_dir: Path | None = None) -> list[dict]:
    """Every results file, parsed and checked against the contract's shape.

    Each run gets `_file` (its path, for messages) and, when the runner left a
    stamp beside the executed notebook, `_checked_commit`: the commit at which
    the runner last confirmed the chapter's inputs unchanged.
    """
    results_dir = Path(results_dir)
    executed_dir = Path(executed_dir) if executed_dir is not None else results_dir.parent / "executed"
    runs = []
    for path in sorted(results_dir.glob("*.json")):
        name = path.stem
        run = read_json_object(path, fix_for(name))
        missing = [key for key in RUN_KEYS if key not in run]
        if missing:
            raise LedgerError(f"{path}: missing key(s) {', '.join(missing)}; {fix_for(name)}")
        if run["notebook"] != name:
            raise LedgerError(
                f"{path}: records notebook {run['notebook']!r} but is named after {name!r}; "
                f"delete it and {fix_for(run['notebook'])}"
            )
        if not isinstance(run["claims"], list) or not all(isinstance(c, dict) for c in run["claims"]):
            raise LedgerError(f"{path}: 'claims' must be a list of records; {fix_for(name)}")
        for index, record in enumerate(run["claims"]):
            gaps = [key for key in RECORD_KEYS if key not in record]
            if gaps:
                label = record.get("id", f"record {index}")
                raise LedgerError(f"{path}: claim {label} lacks key(s) {', '.join(gaps)}; {fix_for(name)}")
            if record["verdict"] is not None and not (record.get("meaning") and record.get("unit")):
                raise LedgerError(
                    f"{path}: claim {record['id']}'s verdict does not say what its key number measures or in which "
                    f"unit (a results file from before verdicts carried them); {fix_for(name)}"
                )
        run["_file"] = str(path)
        stamp = executed_dir / f"{name}.fingerprint"
        if stamp.exists():
            try:
                run["_checked_commit"] = json.loads(stamp.read_text()).get("checked_commit")
            except (json.JSONDecodeError, AttributeError):
                pass  # an old plain-text stamp: fall back to the commit the chapter ran at
        runs.append(run)
    return runs


def checked_commit(run: dict) -> str | None:
    """The commit a run counts at: where the runner last confirmed its inputs unchanged, else where it ran."""
    return run.get("_checked_commit") or run.get("git_commit")


def check_consistent(runs: list[dict], *, allow_mixed: bool = False) -> str | None:
    """Refuse results from more than one profile or commit; with allow_mixed, return a warning for the pages.

    A chapter served from the runner's cache counts at the commit where the
    runner last confirmed its inputs unchanged: its results are then what
    that commit would produce.
    """
    profiles = sorted({run["profile"] for run in runs})
    commits = sorted({str(checked_commit(run)) for run in runs})
    if len(profiles) <= 1 and len(commits) <= 1:
        return None
    detail = "; ".join(
        f"{run['notebook']}: profile {run['profile']}, commit {str(checked_commit(run))[:12]}" for run in runs
    )
    what = " and ".join(
        part
        for part in (
            f"{len(profiles)} profiles ({', '.join(profiles)})" if len(profiles) > 1 else "",
            f"{len(commits)} commits" if len(commits) > 1 else "",
        )
        if part
    )
    if not allow_mixed:
        raise LedgerError(
            f"the results in {Path(runs[0]['_file']).parent if runs[0].get('_file') else 'the results folder'} "
            f"come from {what} ({detail}). Re-run them together with one profile: `make notebooks PROFILE=<profile>` "
            f"(unchanged chapters are re-checked, not re-run; force one with FORCE=<chapter>), "
            f"or publish the mixture knowingly with `make book MIXED=1`."
        )
    return (
        f"These results mix {what}: {detail}. "
        "They were combined on purpose (`--allow-mixed`); numbers from different chapters may not be comparable."
    )


def verdicts(claims: list[Claim], runs: list[dict]) -> dict[str, dict]:
    """For each claim ID: {'record': the owner's verdict record or None, 'parts': evidence-only records}.

    Exactly one chapter owns each claim. Two verdict records for one ID are
    refused, naming both chapters; an unknown ID or verdict is refused, naming
    the file.
    """
    from normlab.study.run import run_order

    known = {c.id for c in claims}
    rank = {name: i for i, name in enumerate(run_order())}
    table: dict[str, dict] = {c.id: {"record": None, "parts": []} for c in claims}
    for run in sorted(runs, key=lambda r: (rank.get(r["notebook"], len(rank)), r["notebook"])):
        for record in run["claims"]:
            claim_id, verdict = record["id"], record["verdict"]
            if claim_id not in known:
                raise LedgerError(
                    f"{_where(run)}: notebook {run['notebook']} records unknown claim {claim_id!r} "
                    f"(valid IDs are in data/claims.md); fix the ID in notebooks/{run['notebook']}.py, "
                    f"then {fix_for(run['notebook'])}"
                )
            if verdict is not None and verdict not in VERDICTS:
                raise LedgerError(
                    f"{_where(run)}: notebook {run['notebook']} gives {claim_id} an invalid verdict "
                    f"{verdict!r} (valid: {', '.join(VERDICTS)}); {fix_for(run['notebook'])}"
                )
            entry = dict(record, notebook=run["notebook"], profile=run["profile"])
            slot = table[claim_id]
            if verdict is None:
                slot["parts"].append(entry)
            elif slot["record"] is not None:
                first = slot["record"]["notebook"]
                raise LedgerError(
                    f"claim {claim_id} has two verdicts: {first!r} says {slot['record']['verdict']!r} and "
                    f"{run['notebook']!r} says {verdict!r} ({_where(run)}). One chapter owns each claim: "
                    f"the other must record its part with results.record_evidence({claim_id!r}, ...) (no verdict), "
                    f"and the owner combine the parts by a stated rule; then `make notebooks FORCE={run['notebook']}`."
                )
            else:
                slot["record"] = entry
    return table
