"""The one rule that makes a verdict of the same claim judged on several runs: this build's CPU run and the GPU runs
(a committed or live GPU bench for the speed chapter).

The rule is fixed before any run is read, by the design, never by what the runs found:

1. **The run that answers** is the largest-scale run that meets its registered pairs: a run whose `pairs` reach its
   `registered_pairs` (the pairs or seeds its design registers for the claim), and that measured the claim's cases
   at all (`measured`: the speed chapter's "not testable here", no case of the claim timed on that hardware). A run
   with no registered pairs meets them by what it measured. With none meeting them, the first run given (this
   build's) answers.
2. **At one scale**, of several runs that are not one sample (two GPU files from different code, say), the one
   whose code can be identified answers, then the one whose code this tree still has, then the first in the order
   given (file name). Never the narrower interval: picking the narrower of two random intervals favours the run
   whose spread was underestimated.
3. **The verdict is the answering run's own**, unchanged, whichever way the others point. Where another run's own
   verdict differs from it (both a verdict on the claim, "not testable here" is none), in either direction, the
   verdict carries the caveat "depends on scale: 'holds' on <one run>, 'does not hold' on <the other>" (at one
   scale: "differs between runs at one scale: …"). A GPU "does not hold" against a CPU "holds" is treated exactly
   as the reverse.
4. **Every run is shown**: its verdict, key number and pairs in the evidence (`by_run`) and in `side_by_side`'s
   table; a run that does not answer is never dropped.
5. **Code:** a run whose code this tree has since changed, or whose code cannot be identified, carries its code
   caveat (`normlab.runtime.code_identity`) on every verdict it answers or puts a "depends on scale" caveat on.

`registered_pairs` is an explicit field so that a registered design can supply it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from normlab.study.design import THIS_BUILD
from normlab.study.findings import Finding

UNTESTED = "not testable here"
RULE = (
    "Runs: the largest-scale run that meets its registered pairs answers (this build's run where none does; at one "
    "scale, the run whose code is identifiable, then the first by name), never the narrower interval; its own "
    "verdict stands, and where another run's own verdict differs, in either direction, it carries a 'depends on "
    "scale' caveat naming both."
)


@dataclass(frozen=True)
class Run:
    """One run's own verdict on a claim, with what the rule needs to know about the run (not about its result)."""

    where: str  # the run as the page names it
    finding: Finding
    scale: int  # larger answers first: 0 this build's CPU run, 1 a GPU run
    pairs: int | None = None  # the pairs (or seeds) this run has for the claim
    registered_pairs: int | None = None  # the pairs its design registers for it to answer; None: no such bar
    measured: bool = True  # whether it measured the claim's cases at all
    caveat: str | None = None  # its code caveat: its code is not this tree's, or cannot be identified
    identified: bool = True  # whether the code it ran can be identified
    key: str | None = None  # its name in the evidence, where `where` is too long (default: `where`)
    short: str | None = None  # its name in a summary's first sentence (`answer(lead_first=True)`; default: `where`)
    build: str = THIS_BUILD  # which of the design's answering builds it is (normlab.study.design.ANSWERING_BUILDS)

    @property
    def name(self) -> str:
        return self.key or self.where

    @property
    def meets_registration(self) -> bool:
        if not self.measured:
            return False
        return self.registered_pairs is None or (self.pairs is not None and self.pairs >= self.registered_pairs)

    @property
    def testable(self) -> bool:
        return self.finding.verdict != UNTESTED


def answering(runs: Sequence[Run]) -> Run:
    """The run that answers (the module docstring's points 1 and 2)."""
    if not runs:
        raise ValueError("no run to answer the claim: pass at least this build's run")
    meeting = [(i, run) for i, run in enumerate(runs) if run.meets_registration]
    if not meeting:
        return runs[0]
    return min(meeting, key=lambda p: (-p[1].scale, not p[1].identified, p[1].caveat is not None, p[0]))[1]


def disagreement(answer: Run, other: Run) -> str | None:
    """The caveat another run's differing verdict puts on the answering one, or None where they agree."""
    a, o = answer.finding.verdict, other.finding.verdict
    if a == o or not answer.testable or not other.testable:
        return None
    head = "depends on scale" if other.scale != answer.scale else "differs between runs at one scale"
    return f"{head}: '{a}' on {answer.where}, '{o}' on {other.where}"


def _number(f: Finding) -> str:
    if f.key_number is None:
        return ""
    text = f" (key number {f.key_number:.3g}" + ("" if f.threshold is None else f" vs {f.threshold:.3g}")
    return text + ("" if f.spread is None else f", spread {f.spread:.2g}") + ")"


def _why(answer: Run, runs: Sequence[Run]) -> str:
    if not answer.meets_registration:
        return "this build's run: no run meets its registered pairs"
    if answer.registered_pairs is not None:
        return f"the largest scale that meets its registered pairs, with {answer.pairs} of {answer.registered_pairs}"
    if any(run.registered_pairs is not None for run in runs):
        return "the largest scale that meets its registered pairs"
    return "the largest scale that measured the claim's cases"


def _not_answering(run: Run, answer: Run) -> str:
    if not run.measured:
        return "could not measure it"
    if not run.meets_registration:
        return f"has {run.pairs or 0} of the {run.registered_pairs} pairs its design registers, so it does not answer"
    if run.scale < answer.scale:
        return "is the smaller scale"
    return "is shown beside it (at one scale, the run whose code is identifiable answers, then the first by name)"


def answer(runs: Sequence[Run], *, lead_first: bool = False) -> Finding:
    """One finding from the same claim judged on each of `runs`, this build's first (the module docstring's rule).

    The summary opens on the answering run and why it answers, then its own summary; with `lead_first`, on that
    run's short name and its own summary, so that the summary's first sentence (the ledger's) is the answering run's
    first sentence, and why it answers follows it."""
    chosen = answering(runs)
    decided = chosen.finding
    others = [run for run in runs if run is not chosen]
    if lead_first:
        text = [f"On {chosen.short or chosen.where}: {decided.summary}"]
        if others:
            where = chosen.where[:1].upper() + chosen.where[1:]
            text.append(f"{where} answers ({_why(chosen, runs)}).")
    else:
        why = f", which answers ({_why(chosen, runs)})" if others else ""
        text = [f"On {chosen.where}{why}: {decided.summary}"]
    text += [
        f"On {run.where}, which {_not_answering(run, chosen)}, the verdict is '{run.finding.verdict}'"
        f"{_number(run.finding)}."
        for run in others
    ]
    differing = [(run, disagreement(chosen, run)) for run in others]
    differing = [(run, caveat) for run, caveat in differing if caveat]
    code = [run.caveat for run in (chosen, *(run for run, _ in differing)) if run.caveat]
    caveats = tuple(dict.fromkeys([*decided.caveats, *(caveat for _, caveat in differing), *code]))
    by_run = {
        run.name: {
            "where": run.where,
            "verdict": run.finding.verdict,
            "key_number": run.finding.key_number,
            "threshold": run.finding.threshold,
            "spread": run.finding.spread,
            "pairs": run.pairs,
            "registered_pairs": run.registered_pairs,
            "answers": run is chosen,
            "build": run.build,
            "summary": run.finding.summary,
            "evidence": run.finding.evidence,
        }
        for run in runs
    }
    # the build that answered, which the ledger holds against the claim's registered answered_by
    evidence = dict(decided.evidence, decided_on=chosen.name, answered_by=chosen.build)
    if others:  # a run alone has nothing to show beside it
        evidence["by_run"] = by_run
    # the claim's own rule is its registered test (normlab.study.findings.rule_text); RULE, the study's rule for
    # several runs, is shown after it wherever the runs were weighed
    runs_rule = RULE if others else decided.runs_rule
    # one run's headline does not tell the combined verdict: the chapter writes it from this finding
    return replace(
        decided, summary=" ".join(text), evidence=evidence, runs_rule=runs_rule, headline=None, caveats=caveats
    )


def _cell(value) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _pairs(run: Run) -> str:
    if run.registered_pairs is None:
        return _cell(run.pairs)
    return f"{_cell(run.pairs)} of {run.registered_pairs}"


def side_by_side(claims: dict[str, tuple[Sequence[Run], Finding]]) -> str:
    """A markdown table: per claim, every run's own verdict, key number and pairs, which run answers, and the
    verdict with its 'depends on scale' caveat where the runs differ."""
    lines = [
        "| claim | run | its own verdict | key number | threshold | pairs (of registered) | answers | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for claim, (runs, combined) in claims.items():
        chosen = answering(runs)
        scale = any(c.startswith("depends on scale") for c in combined.caveats)
        apart = any(c.startswith("differs between runs") for c in combined.caveats)
        shown = combined.verdict + (" (depends on scale)" if scale else " (runs differ)" if apart else "")
        for run in runs:
            f = run.finding
            lines.append(
                f"| {claim} | {run.where} | {f.verdict} | {_cell(f.key_number)} | {_cell(f.threshold)} | "
                f"{_pairs(run)} | {'yes' if run is chosen else ''} | {shown if run is chosen else ''} |"
            )
    return "\n".join(lines)
