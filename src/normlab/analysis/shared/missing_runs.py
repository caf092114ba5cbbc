"""Runs a chapter lost, by name, and what they do to its verdicts.

A training chapter asks `run_parallel(..., missing="keep", names=...)` for its runs, so that a job failing every
attempt leaves a `MissingRun` in its place instead of stopping the chapter. `completed` splits those outputs into
the runs that finished and a `RunGaps`: the missing runs' names and where they failed. The chapter drops every pair
that lost a member (`complete_pairs`), computes its verdicts from the complete pairs, and passes each verdict that
rests on those runs through `PairsLeft.judge`, the one call that judges a trained verdict by its runs. A claim with a
registered confirmation is judged by the confirmation's own rule (`confirmation.decided`: a run missing or diverged
leaves it short of its registered pairs, and it decides nothing), said once, with the missing runs named. Any other is
`judged`:

- the verdict stands, with a caveat naming the missing runs, while the complete pairs still number at least the
  registered ones (`registered_pairs`: the chapter's least pairs for a paired verdict, or the whole design at a
  pilot profile that registers fewer);
- otherwise it is "not testable here", saying how many pairs remain of how many registered.

`PairsLeft` holds the three for one paired design: its `judge` does the above, and its `paragraph` is the page's
sentence beside the verdicts (nothing when no run is missing).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

import pandas as pd

from normlab.analysis.shared import confirmation as confirmations
from normlab.runtime.parallel import MissingRun
from normlab.study.findings import Finding

NOT_TESTABLE = "not testable here"


@dataclass(frozen=True)
class RunGaps:
    """The runs that failed every attempt, by name, and where they ran ("on the cluster", "in this machine's pool")."""

    names: tuple[str, ...] = ()
    where: str = "in this machine's pool"

    def __bool__(self) -> bool:
        return bool(self.names)

    def __add__(self, other: RunGaps) -> RunGaps:
        return RunGaps(tuple(dict.fromkeys(self.names + other.names)), self.where if self else other.where)

    @property
    def caveat(self) -> str | None:
        """'2 runs failed on the cluster and are missing: rms seed 3, layer seed 3', or None without any."""
        if not self.names:
            return None
        count = len(self.names)
        runs, are = ("run", "is") if count == 1 else ("runs", "are")
        return f"{count} {runs} failed {self.where} and {are} missing: {', '.join(self.names)}"

    def paragraph(self, consequence: str) -> str:
        """The page's sentence on the missing runs and their `consequence` for the section; '' without any."""
        if not self.names:
            return ""
        return f"**Missing runs.** {self.caveat[0].upper()}{self.caveat[1:]}. {consequence}\n\n"


class CompletedRuns(dict):
    """{key: run} for the runs that completed, in the jobs' order, with `gaps`: the missing ones by name."""

    def __init__(self, runs: Mapping | Iterable = (), gaps: RunGaps = RunGaps()):
        super().__init__(runs)
        self.gaps = gaps


def completed(outputs: Sequence, keys: Sequence[Hashable]) -> CompletedRuns:
    """`run_parallel`'s outputs (missing="keep") keyed by `keys`, without the missing ones, which `gaps` names."""
    runs = {key: out for key, out in zip(keys, outputs, strict=True) if not isinstance(out, MissingRun)}
    lost = tuple(out.name for out in outputs if isinstance(out, MissingRun))
    return CompletedRuns(runs, RunGaps(lost, getattr(outputs, "where", RunGaps.where)))


def complete_pairs(runs: CompletedRuns, variants: Sequence[Hashable]) -> CompletedRuns:
    """`runs` keyed (variant, seed), keeping only the seeds for which every one of `variants` completed."""
    seeds = {seed for _, seed in runs}
    whole = {seed for seed in seeds if all((variant, seed) in runs for variant in variants)}
    return CompletedRuns({key: run for key, run in runs.items() if key[1] in whole}, runs.gaps)


def registered_pairs(designed: int, least: int) -> int:
    """The pairs a verdict needs to stand: the chapter's least pairs for a paired verdict, or, at a pilot profile
    designed with fewer, every pair of the design."""
    return min(designed, least)


def judged(finding: Finding, gaps: RunGaps, *, pairs: int, registered: int) -> Finding:
    """`finding`, computed from `pairs` complete pairs, with the missing runs named among its caveats; "not
    testable here" when fewer than `registered` pairs remain. Unchanged when no run is missing."""
    if not gaps:
        return finding
    if pairs < registered:
        return not_testable(finding, gaps, shortfall(pairs, registered), complete_pairs=pairs)
    return named(finding, gaps, complete_pairs=pairs)


def named(finding: Finding, gaps: RunGaps, **evidence) -> Finding:
    """`finding` with the missing runs named among its caveats and in its evidence; unchanged without any."""
    if not gaps:
        return finding
    caveats = tuple(dict.fromkeys([*finding.caveats, gaps.caveat]))
    return replace(
        finding, caveats=caveats, evidence={**finding.evidence, "missing_runs": list(gaps.names), **evidence}
    )


def shortfall(pairs: int, registered: int) -> str:
    """'only 4 complete pairs remain of the 5 registered'."""
    remain = "complete pair remains" if pairs == 1 else "complete pairs remain"
    return f"only {pairs} {remain} of the {registered} registered"


def not_testable(finding: Finding, gaps: RunGaps, reason: str, **evidence) -> Finding:
    """`finding` made "not testable here" for `reason` ("only 4 complete pairs remain of the 5 registered"), its
    numbers kept as the completed runs measured them and the missing runs named among its caveats."""
    return named(
        replace(
            finding,
            verdict=NOT_TESTABLE,
            summary=f"Not testable here: {reason}. From the runs that completed: {finding.summary}",
        ),
        gaps,
        **evidence,
    )


@dataclass(frozen=True)
class PairsLeft:
    """What a chapter's missing runs left of one paired design: the `gaps`, the `pairs` complete, the `registered`
    ones a verdict needs (`registered_pairs`)."""

    gaps: RunGaps
    pairs: int
    registered: int

    def judge(
        self,
        finding: Finding,
        also: RunGaps = RunGaps(),
        *,
        confirmation: confirmations.RegisteredConfirmation | None = None,
        diverged: Sequence[str] = (),
    ) -> Finding:
        """`finding` judged by its runs, in one call. With the claim's registered `confirmation`, by its rule
        (`confirmation.decided`: fewer complete pairs than registered, or a run `diverged`, decides nothing), the
        missing runs named; without one, `judged` by these pairs. `also`: runs missing from evidence beside the
        verdict (named, never deciding)."""
        gaps = self.gaps + also
        if confirmation is None:
            return judged(finding, gaps, pairs=self.pairs, registered=self.registered)
        decided = confirmations.decided(finding, confirmation, pairs=self.pairs, diverged=list(diverged))
        return named(decided, gaps, complete_pairs=self.pairs)

    def paragraph(self) -> str:
        """The page's sentence on the missing runs: whether the verdicts resting on them still stand."""
        if self.pairs >= self.registered:
            consequence = (
                f"Each pair that lost a run is left out. The verdicts resting on these runs stand on the {self.pairs} "
                f"complete pairs, at least the {self.registered} registered, and name the missing runs."
            )
        else:
            consequence = (
                f"Each pair that lost a run is left out, and {shortfall(self.pairs, self.registered)}: the verdicts "
                "resting on these runs are not testable here, and the numbers below are the complete pairs'."
            )
        return self.gaps.paragraph(consequence)


def diverged_names(frame: pd.DataFrame | None, label: str) -> list[str]:
    """'swiglu→gelu seed 1004' for each run of `frame` (a row per run: its `label` column, `seed`, `diverged`) that
    diverged: the names `PairsLeft.judge` gives a confirmation."""
    if frame is None or not len(frame) or "diverged" not in frame:
        return []
    return [f"{getattr(row, label)} seed {row.seed}" for row in frame[frame["diverged"].astype(bool)].itertuples()]


def complete_rows(frame: pd.DataFrame, by: str, across: str, members: Iterable) -> pd.DataFrame:
    """The rows of `frame` whose `by` group (a seed) holds a row for each of `members` in column `across` (the
    variants): the complete pairs of a table from which missing runs' rows are absent."""
    wanted = set(members)
    whole = [key for key, group in frame.groupby(by) if wanted <= set(group[across])]
    return frame[frame[by].isin(whole)]
