"""Build the claims ledger, the opening page and the reproducibility page from the results JSON.

    python -m normlab.study.ledger [--allow-mixed]

Every claim ID in data/claims.md appears exactly once, with at most one
verdict: the one its owning chapter recorded. Evidence that other chapters
recorded for it (verdict None, from `Results.record_evidence`) is listed as
parts beside that verdict, never as a verdict. A claim no chapter has judged
is shown as pending. Each key number is shown in its unit with what it
measures (`KEY_NUMBERS`, one entry per claim), and each summary is cut at
two sentences (the chapter keeps it whole).

The opening page tells the findings: one sentence per headline claim
(`HEADLINES`), each written from the key number, threshold and verdict its
chapter recorded; a headline claim this build did not judge gives none.

The ledger refuses, with exit status 2 and a message naming the file and the
fix, anything that would publish a wrong or stale verdict: a results file that
is not valid JSON or lacks a key, an unknown claim ID or verdict, two verdicts
for one ID, or results from different profiles or commits (unless
--allow-mixed, and then every generated page says so). Pages are written only
after every check has passed, each by an atomic rename, so a refused build
leaves the previous pages as they were.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from normlab.study import builds, paths
from normlab.study.claims import PENDING, VERDICT_BADGES, Claim, parse_claims
from normlab.study.present import overrides_text, significant
from normlab.study.results import VERDICTS, is_fragile

RUN_KEYS = ("notebook", "profile", "hardware", "versions", "git_commit", "started", "finished", "claims")
RECORD_KEYS = ("id", "verdict", "summary", "evidence")


@dataclass(frozen=True)
class KeyNumber:
    """What a claim's key number measures, so that the ledger and the opening page can say it with its unit.

    `unit` is printed after the number; "%" means a share, recorded as a fraction and shown as a percent.
    `measured_if` names an evidence entry that is None when the chapter fell back to another key number
    (`fallback`, a `KeyNumber` of its own), as A5 does when no fused pair was timed.
    """

    meaning: str
    unit: str = ""
    measured_if: str | None = None
    fallback: KeyNumber | None = None

    def format(self, value, *, trim: bool = False) -> str:
        """The value in this unit; `trim` drops trailing zeros, for thresholds stated as round numbers."""
        if value is None:
            return "—"
        if self.unit != "%" and float(value).is_integer() and abs(value) < 1e6:
            shown = str(int(value))  # a count (parameters, ops, families) or a round threshold
        else:
            shown = significant(100 * float(value), 2) if self.unit == "%" else _number(value)
        if trim and "." in shown:
            mantissa, _, exponent = shown.partition("e")
            shown = mantissa.rstrip("0").rstrip(".") + (f"e{exponent}" if exponent else "")
        if self.unit == "%":
            return f"{shown}%"
        return f"×{shown}" if self.unit == "×" else f"{shown} {self.unit}".rstrip()

    def format_spread(self, value) -> str:
        """A spread in the key number's unit; a spread of a ratio is a plain number, not a factor."""
        return _number(value) if self.unit == "×" else self.format(value)


# The one home of each claim's key-number meaning: the chapters record the number, this says what it is.
# tests/test_opening_page.py checks that every claim in data/claims.md has an entry.
KEY_NUMBERS: dict[str, KeyNumber] = {
    "A1": KeyNumber("max abs difference, the formula vs F.layer_norm (float64)"),
    "A2": KeyNumber("max abs difference, ε outside vs PyTorch's ε inside"),
    "A3": KeyNumber("median |per-token mean| of RMSNorm's output"),
    "A4": KeyNumber("LayerNorm's largest output change under shifts (float64, max abs)"),
    "A5": KeyNumber(
        "median share of LayerNorm's time RMSNorm saves, both fused",
        "%",
        measured_if="fused_median_saving",
        fallback=KeyNumber("full-size ops LayerNorm's composite runs beyond RMSNorm's", "ops"),
    ),
    "A6": KeyNumber("parameters LayerNorm holds beyond RMSNorm's", "parameters"),
    "A7": KeyNumber("effective passes over memory, best LayerNorm − best RMSNorm", "passes"),
    "A8": KeyNumber("share of the paper's RMSNorm rows within 10–50% as speed-ups", "%"),
    "A9": KeyNumber("farthest end of the 95% interval of final loss, RMSNorm − LayerNorm", "nats"),
    "A10": KeyNumber("best implementation's share of copy bandwidth, training batch", "%"),
    "A11": KeyNumber("named families (of 3) not measured as RMSNorm", "families"),
    "B1": KeyNumber("share of the listed families released after 2019 that use RMSNorm", "%"),
    "B2": KeyNumber("max abs difference, the formulas vs PyTorch (float64)"),
    "B3": KeyNumber("relative error of J_LN = J_RMS(Px)·P"),
    "B4": KeyNumber("RMSNorm's output change under a one-σ shift (max abs, unit-RMS output)"),
    "B5": KeyNumber("share of the residual stream's energy in the common offset, last block", "%"),
    "B6": KeyNumber("top of RMSNorm's own rows in the paper, share of time saved", "%"),
    "B7": KeyNumber("ratio of step times, RMSNorm / LayerNorm"),
    "B8": KeyNumber("effective passes over memory, best LayerNorm − best RMSNorm", "passes"),
    "B9": KeyNumber("|passes, Welford LayerNorm − chunked RMSNorm| (untimed: LayerNorm's extra reductions)", "passes"),
    "B10": KeyNumber("median share of LayerNorm's latency RMSNorm saves at 1–16 rows", "%"),
    "B11": KeyNumber("how much LayerNorm's output shrinks when σ² ≤ ε", "%"),
    "B12": KeyNumber("relative error of the essay's printed Jacobian"),
    "B13": KeyNumber("relative error of the essay's printed ∂ℓ/∂x"),
    "B14": KeyNumber("largest |g − Pearson r| over channels"),
    "B15": KeyNumber("paired final-loss change under strong decay of the gain", "nats"),
    "B16": KeyNumber("paired loss change when the all-ones dimension is removed", "nats"),
    "B17": KeyNumber("largest ratio of pre-LN per-block gradient norms at the deepest depth", "×"),
    "B18": KeyNumber("paired final loss, post-LN RMSNorm − post-LN LayerNorm", "nats"),
    "B19": KeyNumber("norm × placement interaction in paired final loss", "nats"),
    "Q1": KeyNumber("RMS below which the ε placement shows in float32 (ε = 1e-6)"),
    "Q2": KeyNumber("|median share of LayerNorm's time RMSNorm saves|, both fused", "%"),
    "Q3": KeyNumber("best share of full RMSNorm's time pRMSNorm saves", "%"),
    "Q4": KeyNumber("SmolLM2-135M's loss change, every RMSNorm → LayerNorm", "nats"),
    "Q5": KeyNumber("norms' share of SmolLM2-135M's prefill time", "%"),
    "V1": KeyNumber("paired final loss, DyT − RMSNorm", "nats"),
    "V2": KeyNumber("hidden-RMS growth relative to pre-LN's, weaker placement", "×"),
    "V3": KeyNumber("rise of the highest usable learning rate with QK-norm", "decades"),
    "V4": KeyNumber("change in the later half's share of the drop-one loss under 1/√l"),
}


def key_number_of(record: dict) -> KeyNumber:
    """The meaning of this record's key number (its fallback where the chapter could not measure the first)."""
    meaning = KEY_NUMBERS[record["id"]]
    evidence = record.get("evidence") or {}
    if meaning.measured_if and meaning.fallback and evidence.get(meaning.measured_if, 0) is None:
        return meaning.fallback
    return meaning


def key_cell(record: dict) -> str:
    """'5.9% vs 10%: *|median share of LayerNorm's time RMSNorm saves|, both fused*' for the ledger's table."""
    if record.get("key_number") is None:
        return "—"
    meaning = key_number_of(record)
    threshold = meaning.format(record.get("threshold"), trim=True)
    return f"{meaning.format(record['key_number'])} vs {threshold}: *{meaning.meaning}*"


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


class LedgerError(ValueError):
    """A results file the ledger must not publish; the message names the file and the fix."""


def _fix(notebook: str) -> str:
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
        run = read_json_object(path, _fix(name))
        missing = [key for key in RUN_KEYS if key not in run]
        if missing:
            raise LedgerError(f"{path}: missing key(s) {', '.join(missing)}; {_fix(name)}")
        if run["notebook"] != name:
            raise LedgerError(
                f"{path}: records notebook {run['notebook']!r} but is named after {name!r}; "
                f"delete it and {_fix(run['notebook'])}"
            )
        if not isinstance(run["claims"], list) or not all(isinstance(c, dict) for c in run["claims"]):
            raise LedgerError(f"{path}: 'claims' must be a list of records; {_fix(name)}")
        for index, record in enumerate(run["claims"]):
            gaps = [key for key in RECORD_KEYS if key not in record]
            if gaps:
                label = record.get("id", f"record {index}")
                raise LedgerError(f"{path}: claim {label} lacks key(s) {', '.join(gaps)}; {_fix(name)}")
        run["_file"] = str(path)
        stamp = executed_dir / f"{name}.fingerprint"
        if stamp.exists():
            try:
                run["_checked_commit"] = json.loads(stamp.read_text()).get("checked_commit")
            except (json.JSONDecodeError, AttributeError):
                pass  # an old plain-text stamp: fall back to the commit the chapter ran at
        runs.append(run)
    return runs


def _commit(run: dict) -> str | None:
    return run.get("_checked_commit") or run.get("git_commit")


def check_consistent(runs: list[dict], *, allow_mixed: bool = False) -> str | None:
    """Refuse results from more than one profile or commit; with allow_mixed, return a warning for the pages.

    A chapter served from the runner's cache counts at the commit where the
    runner last confirmed its inputs unchanged: its results are then what
    that commit would produce.
    """
    profiles = sorted({run["profile"] for run in runs})
    commits = sorted({str(_commit(run)) for run in runs})
    if len(profiles) <= 1 and len(commits) <= 1:
        return None
    detail = "; ".join(f"{run['notebook']}: profile {run['profile']}, commit {str(_commit(run))[:12]}" for run in runs)
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
                    f"then {_fix(run['notebook'])}"
                )
            if verdict is not None and verdict not in VERDICTS:
                raise LedgerError(
                    f"{_where(run)}: notebook {run['notebook']} gives {claim_id} an invalid verdict "
                    f"{verdict!r} (valid: {', '.join(VERDICTS)}); {_fix(run['notebook'])}"
                )
            entry = dict(record, notebook=run["notebook"], profile=run["profile"], machine=_machine(run))
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


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _number(value) -> str:
    return significant(value)


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
    return key_number_of(record).format_spread(record["spread"])


def _warning_box(warning: str | None) -> list[str]:
    if not warning:
        return []
    return [":::{warning}", _cell(warning), ":::", ""]


def _overrides_box(runs: list[dict]) -> list[str]:
    """A warning naming each chapter that ran with an overridden design (SET=), with the values."""
    overridden = [f"{run['notebook']}: {overrides_text(run['overrides'])}" for run in runs if run.get("overrides")]
    if not overridden:
        return []
    return _warning_box(
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
        *_warning_box(warning),
        *_overrides_box(runs),
        "Generated from the results files of this build; nothing on this page is typed by hand. "
        "Each verdict was computed in the linked chapter from numbers measured in that run. "
        "Each claim has one owning chapter; parts measured elsewhere are listed beside its verdict. "
        "*Key number vs threshold* gives the number the verdict turns on, the value it was judged against and what "
        "the number measures; the spread is in the same unit. Summaries are cut at two sentences: the linked "
        "chapter gives each in full.",
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
                f"| {claim.id} | {_cell(claim.text)} | {VERDICT_BADGES[PENDING]} | — | — | — | {note} | {where} |"
            )
            continue
        where = _link(record) + (f"; parts: {part_links}" if parts else "")
        # The table keeps two sentences of the summary; the chapter shows all of it.
        lines.append(
            f"| {claim.id} | {_cell(claim.text)} | {VERDICT_BADGES[record['verdict']]} | {_cell(key_cell(record))} "
            f"| {_spread_cell(record)} | {_fragile_cell(record)} | {_cell(first_sentences(record['summary']))} "
            f"| {where} |"
        )
    lines += [":::"]
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
        lines += [f"| {cid} | {_link(part)} | {_cell(first_sentences(part['summary']))} |" for cid, part in parts]
    return "\n".join(lines) + "\n"


def _machine(run: dict) -> str:
    hw = run["hardware"]
    return f"{hw.get('cpu', '?')} ({hw.get('cpu_cores', '?')} cores)" + (f", {hw['gpu']}" if hw.get("gpu") else "")


def _instruction_set(run: dict) -> str:
    """'AVX2; C++ kernel g++ 12.2.0, -march=native = znver3': what decides whether two machines ran the same code."""
    hw = run["hardware"]
    isa, build = hw.get("cpu_instruction_set"), hw.get("cpp_kernel_build")
    if not isa:
        return "not recorded"
    text = isa["torch_cpu_capability"]
    if build and build.get("compiler"):
        version = (build.get("compiler_version") or "").split()[-1:]
        text += f"; C++ kernel {build['compiler']} {' '.join(version)}, -march=native = {build.get('native_arch')}"
    return text


def render_reproducibility(runs: list[dict], *, warning: str | None = None, other_machines: list[str] = ()) -> str:
    """other_machines: the section comparing this build with the committed builds (builds.CrossMachine.render)."""
    lines = [
        "# Reproducibility",
        "",
        *_warning_box(warning),
        "Every chapter was executed by papermill for this build. This is what each run was made on. "
        "*Commit* is the commit the chapter ran at; *checked at* is the commit at which the runner last found its "
        "inputs (notebook, parameters, package code, data files, upstream results) unchanged and reused it.",
        "",
        "| notebook | profile | hardware | instruction set | python | torch | triton | commit | checked at | started "
        "| finished |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        v = run["versions"]
        lines.append(
            f"| {run['notebook']} | {run['profile']} | {_cell(_machine(run))} | {_cell(_instruction_set(run))} "
            f"| {v.get('python')} | {v.get('torch')} "
            f"| {v.get('triton')} | `{(run['git_commit'] or 'unknown')[:12]}` | `{str(_commit(run))[:12]}` "
            f"| {run['started']} | {run['finished']} |"
        )
    lines += [
        "",
        "To rebuild everything: `make book` (profile `auto`: `gpu` when CUDA is present, else `cpu`), "
        "or `make book PROFILE=smoke` for a quick preview; `make book FORCE=<chapter>` re-runs one chapter. "
        "The corpus and every seed are fixed in the notebooks.",
        "",
        *other_machines,
    ]
    return "\n".join(lines).rstrip() + "\n"


def _chapter_order(runs: list[dict]) -> list[str]:
    from normlab.study.run import book_order

    names = [r["notebook"] for r in runs]
    reading = book_order()
    return [n for n in reading if n in names] + sorted(set(names) - set(reading))


def summary_figure(claims: list[Claim], runs: list[dict], path: Path) -> None:
    """Verdict counts per chapter, one horizontal stacked bar each; written to `path` as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = verdicts(claims, runs)
    owners = _chapter_order(runs)
    rows = owners + ["(pending)"]
    counts = {row: Counter() for row in rows}
    for slot in table.values():
        record = slot["record"]
        counts[record["notebook"] if record else "(pending)"][record["verdict"] if record else PENDING] += 1
    rows = [row for row in rows if sum(counts[row].values())]
    colours = {
        "holds": "#2a9d8f",
        "holds with caveats": "#e9c46a",
        "does not hold": "#e76f51",
        "not testable here": "#8d99ae",
        PENDING: "#d9d9d9",
    }
    figure, axis = plt.subplots(figsize=(7, 0.45 * len(rows) + 1.4))
    left = [0] * len(rows)
    for verdict in (*VERDICTS, PENDING):
        widths = [counts[row][verdict] for row in rows]
        if any(widths):
            axis.barh(rows, widths, left=left, color=colours[verdict], label=verdict, edgecolor="white")
            left = [a + b for a, b in zip(left, widths)]
    axis.invert_yaxis()
    axis.set_xlabel("claims (count)")
    axis.xaxis.get_major_locator().set_params(integer=True)
    axis.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=5, frameon=False, fontsize=8)
    axis.spines[["top", "right"]].set_visible(False)
    figure.tight_layout()
    figure.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(figure)


def _split_intro(text: str) -> tuple[str, str]:
    marker = "<!-- findings -->"
    if marker in text:
        head, tail = text.split(marker, 1)
        tail = re.sub(r"^\s*<!--.*?-->", "", tail, count=1, flags=re.S)  # the note for editors stays in the source
        return head.rstrip() + "\n", tail.lstrip()
    return text.rstrip() + "\n", ""


def committed_gpu_runs(data_dir: Path) -> list[str]:
    """'NVIDIA H200, measured 2026-11-30 11:01 UTC (gpu-bench.json)' for each GPU run committed under data/."""
    described = []
    for path in sorted(Path(data_dir).glob("gpu-bench*.json")):
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
            hardware, started = document["hardware"].get("gpu") or "an unnamed GPU", document["started"]
        except (OSError, ValueError, KeyError, AttributeError) as error:
            raise LedgerError(
                f"{path}: not a readable GPU results file ({error}); re-run `make gpu-bench` on a GPU "
                f"machine, or remove it"
            ) from error
        described.append(f"{hardware}, measured {started[:16].replace('T', ' ')} UTC ({path.name})")
    return described


_NO_HEADLINES = (
    "No chapter behind the headline findings has run in this build; the {ref}`ledger <ledger>` lists what has."
)


def _value(record: dict, value) -> str:
    return key_number_of(record).format(value)


def _limit(record: dict, value) -> str:
    return key_number_of(record).format(value, trim=True)


def _signed(record: dict, value) -> str:
    text = _value(record, value)
    return text if text.startswith(("-", "—")) or float(value) == 0 else f"+{text}"


def _within(value, threshold) -> bool:
    return abs(float(value)) <= abs(float(threshold))


def _hardware(record: dict) -> str:
    """The machine whose run decided the verdict: the speed chapter's deciding GPU run, else this build's machine."""
    decided = (record.get("evidence") or {}).get("decided_on")
    if decided:
        return "the " + re.sub(r"\s*\[.*\]$", "", str(decided))
    return f"this build's {record.get('machine') or 'machine'}"


def _machines_span(record: dict) -> str:
    """'0.093%–5.9% across the 3 runs weighed; ' from the speed chapter's per-hardware key numbers, or ''."""
    per_hardware = (record.get("evidence") or {}).get("by_hardware") or {}
    keys = [float(part["key_number"]) for part in per_hardware.values() if part.get("key_number") is not None]
    if len(keys) < 2:
        return ""
    return f"{_value(record, min(keys))}–{_value(record, max(keys))} across the {len(keys)} runs weighed; "


def _q2(r: dict) -> str:
    k, t = r["key_number"], r["threshold"]
    return (
        f"Once both norms are fused, RMSNorm and LayerNorm differ by {_value(r, k)} of LayerNorm's time on "
        f"{_hardware(r)} (a median{'; ' + _machines_span(r).rstrip('; ') if _machines_span(r) else ''}), "
        f"{'under' if _within(k, t) else 'over'} the {_limit(r, t)} this book counts as an advantage"
        + {
            "holds": ": not the 10–50% that article A quotes.",
            "does not hold": ": fusion leaves RMSNorm a real advantage.",
        }.get(r["verdict"], ".")
    )


def _q3(r: dict) -> str:
    k, t = r["key_number"], r["threshold"]
    return (
        f"Partial RMSNorm, which estimates the RMS from a prefix of each row, saves at best {_value(r, k)} of full "
        f"RMSNorm's time on {_hardware(r)}, {'short of' if k < t else 'above'} the {_limit(r, t)} worth having"
        + {
            "holds": ", in every implementation that has it.",
            "holds with caveats": ", but not in every implementation that has it.",
            "does not hold": ": it does not save time.",
        }.get(r["verdict"], ".")
    )


def _a9(r: dict) -> str:
    k, t = r["key_number"], r["threshold"]
    return (
        f"Trained in pairs, small GPTs with RMSNorm and with LayerNorm reach validation losses that differ by at most "
        f"{_value(r, k)} (the paired 95% interval), {'inside' if _within(k, t) else 'beyond'} the margin of "
        f"±{_limit(r, t)} for no difference"
        + {
            "holds": ": equal quality, as article A says.",
            "not testable here": ": too few pairs in this build to call them equal or different.",
            "does not hold": ": their quality differs.",
        }.get(r["verdict"], ".")
    )


def _q4(r: dict) -> str:
    k, t = r["key_number"], r["threshold"]
    return (
        f"In SmolLM2-135M, a trained RMSNorm LLM, replacing every RMSNorm by a LayerNorm with the same gain changes "
        f"the held-out loss by {_signed(r, k)}, {'inside' if _within(k, t) else 'beyond'} the margin of ±{_limit(r, t)}"
        + {
            "holds": ": mean-centring matters in real trained models, here and in MiniLM.",
            "holds with caveats": ": centring matters in one of the two real models tested.",
            "does not hold": ": centring makes no measurable difference.",
        }.get(r["verdict"], ".")
    )


def _q5(r: dict) -> str:
    k, t = r["key_number"], r["threshold"]
    return (
        f"The norms take {_value(r, k)} of SmolLM2-135M's prefill time on {_hardware(r)}, "
        f"{'below' if k < t else 'above'} the {_limit(r, t)} low end of the papers' whole-model savings"
        + {
            "holds": ", in decoding too.",
            "holds with caveats": ", but not in decoding as well.",
            "does not hold": ": too small a share for the choice of norm to show end to end.",
        }.get(r["verdict"], ".")
    )


def _b1(r: dict) -> str:
    k, t = r["key_number"], r["threshold"]
    return (
        f"Of the model families released after 2019 that this book lists, {_value(r, k)} use RMSNorm, "
        f"{'short of' if k < t else 'above'} the {_limit(r, t)} that 'almost all' needs"
        + {
            "holds with caveats": ", although the families the essay names all do.",
            "does not hold": ", and not even all the families the essay names do.",
        }.get(r["verdict"], ".")
    )


def _b12(r: dict) -> str:
    k, t = r["key_number"], r["threshold"]
    wrong = k > t
    return (
        f"The essay's RMSNorm Jacobian (1/r)(I − x̂x̂ᵀ) is {'off by' if wrong else 'within'} a relative error of "
        f"{_value(r, k)} against autograd, {'beyond' if wrong else 'inside'} the {_limit(r, t)} that marks a formula "
        "as wrong"
        + (
            ": its structure, a projection scaled by 1/r, holds, but the formula as printed does not."
            if r["verdict"] == "holds with caveats" and wrong
            else "."
        )
    )


def _b17_training(evidence: dict) -> str:
    """The rule's other part, when it is what failed: pre-LN must train without warm-up at least as often."""
    pre, post = evidence.get("pre_trained_rate_no_warmup"), evidence.get("post_trained_rate_no_warmup")
    if pre is None or post is None:
        return ", but the verdict fails on training without warm-up"
    return f", but without warm-up pre-LN trained in {pre:.0%} of runs and post-LN in {post:.0%}"


def _b17(r: dict) -> str:
    k, t, e = r["key_number"], r["threshold"], r.get("evidence") or {}
    depth = f" at depth {e['deepest_init_depth']}" if e.get("deepest_init_depth") else ""
    slope = e.get("exponent_pre_xiong_init")
    return (
        f"In pre-LN at initialisation the per-block gradient norms{depth} stay within {_value(r, k)} of one another "
        f"({'inside' if k <= t else 'beyond'} the limit of {_limit(r, t)})"
        + (_b17_training(e) if r["verdict"] == "does not hold" and k <= t else "")
        + "; "
        + "the essay's 'undamped' rests on Xiong et al. 2020's bound at initialisation, under which the last layer's "
        "gradient shrinks as 1/√L" + (f" (measured here: L^{significant(slope, 2)})" if slope is not None else "") + "."
    )


def _b18(r: dict) -> str:
    k, t = r["key_number"], r["threshold"]
    spread = "" if r.get("spread") is None else f" (spread {key_number_of(r).format_spread(r['spread'])})"
    return (
        f"With the norm on the trunk (post-LN), RMSNorm's paired final loss minus LayerNorm's is {_signed(r, k)}"
        f"{spread}"
        + {
            "not testable here": f", too uncertain to judge against the margin of ±{_limit(r, t)}; no published "
            "study compares the two at depth, so this book's measurement is all there is.",
            "does not hold": f", inside the margin of ±{_limit(r, t)}: RMSNorm's deep-signal decay is no worse.",
            "holds": f", beyond the margin of ±{_limit(r, t)}: RMSNorm fares worse, as the essay says.",
            "holds with caveats": f", beyond the margin of ±{_limit(r, t)} in training, but not at initialisation.",
        }.get(r["verdict"], ".")
    )


def _v1(r: dict) -> str:
    k, t, e = r["key_number"], r["threshold"], r.get("evidence") or {}
    sentence = (
        f"Dynamic Tanh by its authors' LLaMA recipe ends {_value(r, abs(k))} {'worse' if k > 0 else 'better'} than "
        f"RMSNorm in paired final loss, {'beyond' if k > t else 'inside'} the margin of +{_limit(r, t)}"
    )
    saturated = (e.get("saturation") or {}).get("dyt-authors") or {}
    rmsfinal = e.get("dyt_rmsfinal_minus_rms") or {}
    if saturated.get("saturated") and rmsfinal.get("mean_difference") is not None:
        d = rmsfinal["mean_difference"]
        return (
            f"{sentence}: its final DyT layer saturates, and with an RMSNorm final norm instead DyT ends "
            f"{_value(r, abs(d))} {'worse' if d > 0 else 'better'} than RMSNorm."
        )
    return sentence + {
        "does not hold": ": at this scale it does not match a norm without tuning.",
        "holds": ": it matches RMSNorm without tuning.",
        "holds with caveats": ": it matches only with tuning.",
    }.get(r["verdict"], ".")


# The opening page's findings, in reading order: speed, quality, real models, the ecosystem, the mathematics,
# depth and the landscape. Each writes one sentence from its claim's key number, threshold and verdict.
HEADLINES = {
    "Q2": _q2,
    "Q3": _q3,
    "A9": _a9,
    "Q4": _q4,
    "Q5": _q5,
    "B1": _b1,
    "B12": _b12,
    "B17": _b17,
    "B18": _b18,
    "V1": _v1,
}


def findings_sentences(table: dict[str, dict]) -> list[str]:
    """One sentence per headline claim that a chapter judged in this build, each ending with a link to it.

    A claim that is missing, pending or lacks a key number or threshold gives no sentence.
    """
    sentences = []
    for claim_id, write in HEADLINES.items():
        record = (table.get(claim_id) or {}).get("record")
        if record is None or record.get("key_number") is None or record.get("threshold") is None:
            continue
        where = f"{{ref}}`{claim_id} <{record['section']}>`" if record.get("section") else claim_id
        sentences.append(f"{write(record)} ({where}: {VERDICT_BADGES[record['verdict']]})")
    return sentences


def render_intro(
    claims: list[Claim],
    runs: list[dict],
    *,
    prose: str,
    figure: str,
    warning: str | None = None,
    gpu_runs: list[str] = (),
    checked_on: str = "",
) -> str:
    """The opening page: the hand-written prose of book/intro.md with the findings of this build spliced in.

    gpu_runs: the committed GPU runs the speed chapter weighs beside this build's own (committed_gpu_runs).
    checked_on: how many machines the verdicts were checked on (builds.CrossMachine.sentence)."""
    table = verdicts(claims, runs)
    counts = Counter(slot["record"]["verdict"] if slot["record"] else PENDING for slot in table.values())
    judged = [slot["record"] for slot in table.values() if slot["record"]]
    fragile = [r["id"] for r in judged if is_fragile(r)]
    head, tail = _split_intro(prose)
    tally = ", ".join(f"**{counts[v]}** {v}" for v in (*VERDICTS, PENDING) if counts.get(v))
    sentences = findings_sentences(table)
    lines = [
        head,
        *_warning_box(warning),
        "## What we found",
        "",
        *([f"- {sentence}" for sentence in sentences] or [_NO_HEADLINES]),
        "",
        "Each sentence is written from the number its chapter measured in this build, the threshold the chapter "
        "stated before measuring, and the verdict it computed; the link after it leads to the measurement.",
        "",
        f"Of the {len(claims)} claims, {tally}. "
        f"{len(fragile)} of the {len(judged)} verdicts are fragile (a repeat run could flip them)"
        + (f": {', '.join(fragile)}." if fragile else ".")
        + " The {ref}`ledger <ledger>` gives every claim with its key number, threshold and spread, each in its unit.",
        "",
        f"```{{figure}} {figure}",
        ":name: fig-intro-verdicts",
        ":alt: verdict counts per chapter",
        "",
        "Verdicts per chapter, counted from this build's results. Each bar is one chapter; its colours split "
        "the claims that chapter owns by verdict, so the red and grey segments show where the articles' "
        "claims fail or could not be tested here.",
        "```",
        "",
    ]
    profiles = sorted({r["profile"] for r in runs})
    machines = sorted({_machine(r) for r in runs})
    lines += [
        "## Where these numbers come from",
        "",
        f"Profile {', '.join(f'`{p}`' for p in profiles) or '(none)'}, on {'; '.join(machines) or 'no machine'}. "
        "The reproducibility page lists each chapter's versions, commit and run times."
        + (f" {checked_on}" if checked_on else ""),
        "",
    ]
    if gpu_runs and any(r["notebook"] == "speed" for r in runs):
        lines += [
            "The speed chapter also weighs GPU runs of its benchmark made on another machine and committed under "
            "`data/` (provenance and checksums in `data/README.md`): " + "; ".join(gpu_runs) + ". Its verdicts "
            "say which machine each number comes from.",
            "",
        ]
    if tail:
        lines += [tail]
    return "\n".join(lines).rstrip() + "\n"


def _write_atomically(pages: dict[Path, bytes]) -> None:
    """Write every page to a temporary file first, then rename each into place."""
    staged = []
    try:
        for path, content in pages.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
            with os.fdopen(handle, "wb") as stream:
                stream.write(content)
            staged.append((temporary, path))
    except BaseException:
        for temporary, _ in staged:
            Path(temporary).unlink(missing_ok=True)
        raise
    for temporary, path in staged:
        os.replace(temporary, path)


def build(
    results_dir: Path | None = None,
    pages_dir: Path | None = None,
    *,
    executed_dir: Path | None = None,
    claims_path: Path | None = None,
    intro_path: Path | None = None,
    data_dir: Path | None = None,
    builds_dir: Path | None = None,
    allow_mixed: bool = False,
) -> dict:
    """Check every results file, then write ledger.md, intro.md, reproducibility.md and the summary figure.

    Folders default to paths.* looked up at call time (tests point them elsewhere).
    """
    results_dir = Path(results_dir or paths.RESULTS)
    pages_dir = Path(pages_dir or paths.PAGES)
    executed_dir = Path(executed_dir or paths.EXECUTED)
    intro_path = Path(intro_path or paths.ROOT / "book" / "intro.md")
    data_dir = Path(data_dir or paths.ROOT / "data")
    claims = parse_claims(claims_path or paths.CLAIMS)
    runs = load_results(results_dir, executed_dir)
    if not runs:
        raise LedgerError(f"no results files in {results_dir}; run the chapters first with `make notebooks`")
    if executed_dir.is_dir():
        # Results without a complete executed chapter: a run under way or killed, or a chapter since removed.
        for run in runs:
            name = run["notebook"]
            if not (paths.NOTEBOOKS / f"{name}.py").exists():
                raise LedgerError(
                    f"{run['_file']}: no chapter notebooks/{name}.py made it (removed or renamed?); delete the file"
                )
            if not (executed_dir / f"{name}.ipynb").exists():
                raise LedgerError(
                    f"{run['_file']}: chapter {name} has no executed copy in {executed_dir} (its run "
                    f"failed, was interrupted or is under way); {_fix(name)}"
                )
    warning = check_consistent(runs, allow_mixed=allow_mixed)
    table = verdicts(claims, runs)
    # The committed builds are inputs of these pages: a new one changes the reproducibility page and the opening's.
    try:
        machines = builds.cross_machine(
            runs, builds.load_builds(builds_dir or data_dir / "builds"), executed_dir=executed_dir
        )
    except builds.BuildError as error:
        raise LedgerError(str(error)) from None
    pages_dir.mkdir(parents=True, exist_ok=True)
    figure_name = "verdicts.png"
    handle, staged_figure = tempfile.mkstemp(dir=pages_dir, prefix=".verdicts.", suffix=".png")
    os.close(handle)
    try:
        summary_figure(claims, runs, Path(staged_figure))
        pages = {
            pages_dir / "ledger.md": render_ledger(claims, runs, warning=warning).encode(),
            pages_dir / "reproducibility.md": render_reproducibility(
                runs,
                warning=warning,
                other_machines=machines.render(
                    lambda r, v: key_number_of(r).format(v), lambda r, v: key_number_of(r).format_spread(v)
                ),
            ).encode(),
            pages_dir / "intro.md": render_intro(
                claims,
                runs,
                prose=Path(intro_path).read_text(encoding="utf-8"),
                figure=figure_name,
                warning=warning,
                gpu_runs=committed_gpu_runs(data_dir),
                checked_on=machines.sentence(),
            ).encode(),
        }
        _write_atomically(pages)
        os.replace(staged_figure, pages_dir / figure_name)
    finally:
        Path(staged_figure).unlink(missing_ok=True)
    return {
        "claims": len(claims),
        "judged": sum(1 for s in table.values() if s["record"]),
        "runs": len(runs),
        "mixed": warning is not None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--allow-mixed",
        action="store_true",
        help="publish results from different profiles or commits, with a warning on every page",
    )
    args = parser.parse_args(argv)
    from normlab.study.run import ChapterOrderError

    try:
        summary = build(allow_mixed=args.allow_mixed)
    except (LedgerError, ChapterOrderError) as error:
        print(f"ledger: error: {error}\nledger: the book's pages were left unchanged.", file=sys.stderr)
        return 2
    print(
        f"ledger: {summary['judged']} of {summary['claims']} claims have verdicts, from {summary['runs']} results files"
        + (" (MIXED profiles or commits, flagged on the pages)" if summary["mixed"] else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
