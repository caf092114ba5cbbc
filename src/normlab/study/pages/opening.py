"""The opening page: the hand-written prose of book/intro.md with this build's findings spliced in.

One sentence per headline claim (`HEADLINES`, the reading order), each the `headline` that the claim's chapter
wrote from the key number, threshold and verdict it recorded (at most `HEADLINE_WORDS` words); a headline claim this
build did not judge gives none. A sentence carries no caveat, provenance or history: it links to its claim's section,
where the chapter gives them, and says how many caveats wait there.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from normlab.runtime.code_identity import BENCH_CODE
from normlab.runtime.elsewhere import ProvenanceError, bench_files
from normlab.runtime.environment import machine_name
from normlab.study import multiplicity
from normlab.study.claims import PENDING, VERDICT_BADGES, Claim
from normlab.study.pages.markdown import warning_box
from normlab.study.results import VERDICTS, LedgerError, is_fragile, verdicts


def split_intro(text: str) -> tuple[str, str]:
    marker = "<!-- findings -->"
    if marker in text:
        head, tail = text.split(marker, 1)
        tail = re.sub(r"^\s*<!--.*?-->", "", tail, count=1, flags=re.S)  # the note for editors stays in the source
        return head.rstrip() + "\n", tail.lstrip()
    return text.rstrip() + "\n", ""


def committed_gpu_runs(data_dir: Path) -> list[str]:
    """'NVIDIA H200, measured 2026-11-30 11:01 UTC (gpu-bench.json)' for each GPU run committed under data/, read by
    the one reader of results made elsewhere (`normlab.runtime.elsewhere`)."""
    try:
        runs = bench_files(data_dir)
    except ProvenanceError as error:
        raise LedgerError(str(error)) from None
    described = []
    for run in runs:
        hardware, started = run.hardware.get("gpu") or "an unnamed GPU", str(run.document.get("started", ""))
        caveat = run.code(BENCH_CODE).caveat
        described.append(
            f"{hardware}, measured {started[:16].replace('T', ' ')} UTC ({run.path.name}"
            + (f"; **{caveat}**" if caveat else "")
            + ")"
        )
    return described


NO_HEADLINES = (
    "No chapter behind the headline findings has run in this build; the {ref}`ledger <ledger>` lists what has."
)


# The opening page's findings, in reading order: speed, quality, real models, the ecosystem, the mathematics,
# depth and the landscape. Each claim's chapter writes its sentence onto the finding it records (`headline`).
HEADLINES = ("Q2", "Q3", "A9", "Q4", "Q5", "B1", "B12", "B17", "B18", "V1")

# The most words a headline may take: its number, unit, scale and verdict in plain terms; the rest is its chapter's.
HEADLINE_WORDS = 35


def caveats_pointer(caveats) -> str:
    """'; 2 caveats in the chapter' for a verdict's caveats, or '' without any: the caveats themselves stay on the
    claim's chapter (and the ledger's list), one click away."""
    if not caveats:
        return ""
    return f"; {len(caveats)} caveat{'s' if len(caveats) > 1 else ''} in the chapter"


def findings_sentences(table: dict[str, dict]) -> list[str]:
    """The headline each chapter wrote for a claim in `HEADLINES`, in that order, each ending with a link to it.

    A claim that is missing or pending, or whose chapter wrote no headline (it measured no key number or threshold
    in this build), gives no sentence.
    """
    sentences = []
    for claim_id in HEADLINES:
        record = (table.get(claim_id) or {}).get("record")
        if record is None or not record.get("headline"):
            continue
        where = f"{{ref}}`{claim_id} <{record['section']}>`" if record.get("section") else claim_id
        sentences.append(
            f"{record['headline']} ({where}: {VERDICT_BADGES[record['verdict']]}{caveats_pointer(record.get('caveats'))})"
        )
    return sentences


# A verdict as the verb of its count's sentence: "11 hold", "1 holds", "3 are not testable here".
_PLURAL = {"holds": "hold", "holds with caveats": "hold with caveats", "does not hold": "do not hold"}


def _verb(verdict: str, count: int) -> str:
    if verdict in _PLURAL:
        return verdict if count == 1 else _PLURAL[verdict]
    return f"{'is' if count == 1 else 'are'} {verdict}"


def _counted(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def render_intro(
    claims: list[Claim],
    runs: list[dict],
    *,
    prose: str,
    figure: str,
    warning: str | None = None,
    gpu_runs: list[str] = (),
    checked_on: str = "",
    family: multiplicity.FamilyTable | None = None,
) -> str:
    """The opening page: the hand-written prose of book/intro.md with the findings of this build spliced in.

    gpu_runs: the committed GPU runs the speed chapter weighs beside this build's own (committed_gpu_runs).
    checked_on: how many machines the verdicts were checked on (builds.CrossMachine.sentence).
    family: the registered family of paired readings on this build (multiplicity.family_table): one sentence says
    how many survive the family's rule and which verdicts it left undecided."""
    table = verdicts(claims, runs)
    counts = Counter(slot["record"]["verdict"] if slot["record"] else PENDING for slot in table.values())
    judged = [slot["record"] for slot in table.values() if slot["record"]]
    fragile = [r["id"] for r in judged if is_fragile(r)]
    head, tail = split_intro(prose)
    tally = _counted([f"**{counts[v]}** {_verb(v, counts[v])}" for v in (*VERDICTS, PENDING) if counts.get(v)])
    sentences = findings_sentences(table)
    lines = [
        head,
        *warning_box(warning),
        "## What we found",
        "",
        *([f"- {sentence}" for sentence in sentences] or [NO_HEADLINES]),
        "",
        "Each sentence is written from the number its chapter measured in this build (or read from a committed GPU "
        "run that the chapter names), the threshold the chapter stated before measuring, and the verdict it computed; "
        "the link after it leads to the measurement"
        + (
            ", where the chapter states the caveats counted after it (such as a committed GPU file that measured code "
            "this tree has since changed)."
            if any(r.get("caveats") for r in judged)
            else "."
        ),
        "",
        f"Of the {len(claims)} claims, {tally}. "
        f"{len(fragile)} of the {len(judged)} verdicts are fragile (a repeat run could flip them)"
        + (f": {', '.join(fragile)}." if fragile else ".")
        + " The {ref}`ledger <ledger>` gives every claim with its key number, threshold and spread, each in its unit.",
        "",
        *(
            [multiplicity.summary_sentence(family, "the {ref}`family's rule <family-rule>`"), ""]
            if family is not None
            else []
        ),
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
    machines = sorted({machine_name(r["hardware"]) for r in runs})
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
