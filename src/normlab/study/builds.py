"""Builds made on other machines, committed under data/builds/, held against this build claim by claim.

Each folder data/builds/<commit>-<machine>/ holds the unchanged build/results/*.json of one `make book`. A build
of this build's profile is compared per claim: both verdicts, both key numbers, their difference against the
run-to-run spread of a difference (√(s₁² + s₂²) from the two spreads), flagged where a verdict differs or where
the key number moved by more than twice that spread (the ~95% band the ledger's fragility rule uses). A build of
another profile ran another design: it is listed under its own heading, never compared.

A build from another commit is compared only for the chapters whose code is unchanged since. The committed files
carry no chapter fingerprints, so a chapter counts as changed when `git diff --name-only` between that commit
and this build's commit of the chapter touches a file it reads: its notebook, the package files its stamp in
build/executed/<chapter>.fingerprint records (the whole package without one), its data inputs, or a chapter
whose results it reads (normlab.study.run.inputs_of).
"""

from __future__ import annotations

import fnmatch
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from normlab.runtime.code_identity import git_changed_files
from normlab.runtime.elsewhere import ProvenanceError, machine_of, read_build
from normlab.study import paths
from normlab.study.key_numbers import format_spread, format_value

BAND = 2.0  # a key number moved when |difference| > BAND · √(s₁² + s₂²)

# A committed build the page must not show: the one reader's refusal (normlab.runtime.elsewhere), naming the file,
# the field and the fix.
BuildError = ProvenanceError


@dataclass(frozen=True)
class CommittedBuild:
    name: str  # the folder's name
    folder: Path
    runs: tuple[dict, ...]
    profile: str
    commit: str

    @property
    def machine(self) -> str:
        return machine_of(self.runs[0])


@dataclass(frozen=True)
class ClaimComparison:
    claim_id: str
    chapter: str
    this: dict | None  # this build's verdict record
    theirs: dict | None  # the committed build's
    changed: bool = False  # the chapter's code changed between the two commits: shown, not compared

    @property
    def difference(self) -> float | None:
        a, b = (self.this or {}).get("key_number"), (self.theirs or {}).get("key_number")
        return None if a is None or b is None else float(b) - float(a)

    @property
    def spread_of_difference(self) -> float | None:
        a, b = (self.this or {}).get("spread"), (self.theirs or {}).get("spread")
        return None if a is None or b is None else math.hypot(float(a), float(b))

    @property
    def verdict_differs(self) -> bool:
        return bool(self.this and self.theirs) and self.this["verdict"] != self.theirs["verdict"]

    @property
    def moved(self) -> bool:
        """The key number moved beyond the run-to-run spread (never for a claim either build did not judge)."""
        difference, spread = self.difference, self.spread_of_difference
        return difference is not None and spread is not None and abs(difference) > BAND * spread


@dataclass
class BuildComparison:
    build: CommittedBuild
    rows: list[ClaimComparison]
    changed_chapters: list[str]
    how_changed: str  # how the changed chapters were found, for the page
    unjudged: list[str] = field(default_factory=list)  # claims judged in one build only

    @property
    def compared(self) -> list[ClaimComparison]:
        return [r for r in self.rows if not r.changed and r.this and r.theirs]


def load_builds(builds_dir: Path | None = None) -> list[CommittedBuild]:
    """Every committed build, each read by the one reader of results made elsewhere (`read_build`: every file's
    provenance checked, one profile, one commit and one machine per build)."""
    builds_dir = Path(builds_dir or paths.ROOT / "data" / "builds")
    builds = []
    for folder in sorted(p for p in builds_dir.glob("*") if p.is_dir()) if builds_dir.is_dir() else []:
        runs = tuple(dict(run.document, _file=str(run.path)) for run in read_build(folder))
        builds.append(CommittedBuild(folder.name, folder, runs, runs[0]["profile"], runs[0]["git_commit"]))
    return builds


def owned_records(runs) -> dict[str, dict]:
    """Claim ID -> the verdict record and its chapter (evidence-only records, verdict None, are parts, not verdicts)."""
    return {
        record["id"]: dict(record, notebook=run["notebook"])
        for run in runs
        for record in run["claims"]
        if record.get("verdict") is not None
    }


def chapter_reads(chapter: str, executed_dir: Path, root: Path) -> tuple[list[str], list[str]]:
    """(path patterns relative to the repository, chapters whose results it reads) for one chapter."""
    from normlab.study.run import inputs_of

    try:
        package = paths.PACKAGE.relative_to(paths.ROOT).as_posix()
    except ValueError:  # the package is installed apart from the checkout: the repository's own layout
        package = "src/normlab"
    try:
        files = json.loads((executed_dir / f"{chapter}.fingerprint").read_text()).get("files")
    except (OSError, json.JSONDecodeError, AttributeError):
        files = None
    patterns = [f"notebooks/{chapter}.py"]
    patterns += [f"{package}/{f}" for f in files] if files else [f"{package}/*"]
    upstream = []
    for entry in inputs_of(chapter):
        if entry.startswith("results:"):
            upstream.append(entry.split(":", 1)[1])
        elif ":" not in entry and entry != "corpus":
            patterns.append(entry)
    return patterns, upstream


def changed_chapters(
    chapters: list[str],
    since: str,
    until: dict[str, str],
    *,
    executed_dir: Path | None = None,
    root: Path | None = None,
) -> tuple[list[str], str]:
    """The chapters whose code changed from commit `since` to this build's commit of each (`until`), and how found."""
    root = Path(root or paths.ROOT)
    executed_dir = Path(executed_dir or paths.EXECUTED)
    if since.endswith("-dirty"):
        return sorted(chapters), "that build ran from a modified working tree, so no chapter counts as unchanged"
    changed = set()
    reads = {chapter: chapter_reads(chapter, executed_dir, root) for chapter in chapters}
    for chapter in chapters:
        target = until.get(chapter) or ""
        # A chapter run from a modified tree is compared with the working tree, its nearest record of that code.
        files = git_changed_files(since, (), root, until=None if target.endswith("-dirty") else target or None)
        if files is None:
            return sorted(
                chapters
            ), f"git cannot compare commit {since[:12]} with this build's, so every chapter counts"
        patterns, _ = reads[chapter]
        if any(fnmatch.fnmatch(f, p) for f in files for p in patterns):
            changed.add(chapter)
    grew = True
    while grew:  # a chapter reading the results of a changed chapter changed too
        grew = False
        for chapter, (_, upstream) in reads.items():
            if chapter not in changed and changed & set(upstream):
                changed.add(chapter)
                grew = True
    return sorted(changed), (
        "from `git diff --name-only` between the two commits over each chapter's notebook, the package files its "
        "fingerprint stamp records, its data inputs and the chapters whose results it reads (the committed files "
        "carry no fingerprints of their own)"
    )


def _chapter_commit(run: dict) -> str:
    return str(run.get("_checked_commit") or run.get("git_commit") or "")


def compare(build: CommittedBuild, runs: list[dict], *, executed_dir: Path | None = None) -> BuildComparison:
    """This build's verdicts (`runs`, the ledger's results) against one committed build of the same profile."""
    if build.profile not in {run["profile"] for run in runs}:
        raise ValueError(f"{build.name} is a {build.profile} build; compare it only with a build of that profile")
    mine, theirs = owned_records(runs), owned_records(build.runs)
    until = {run["notebook"]: _chapter_commit(run) for run in runs}
    differing = sorted(chapter for chapter, commit in until.items() if commit != build.commit)
    changed, how = (
        changed_chapters(differing, build.commit, until, executed_dir=executed_dir) if differing else ([], "")
    )
    rows = []
    for claim_id in sorted(set(mine) | set(theirs), key=_claim_order):
        chapter = (mine.get(claim_id) or theirs.get(claim_id))["notebook"]
        rows.append(ClaimComparison(claim_id, chapter, mine.get(claim_id), theirs.get(claim_id), chapter in changed))
    unjudged = [r.claim_id for r in rows if not (r.this and r.theirs)]
    return BuildComparison(build, rows, changed, how, unjudged)


def _claim_order(claim_id: str) -> tuple[str, int]:
    return claim_id[0], int(claim_id[1:]) if claim_id[1:].isdigit() else 0


@dataclass
class CrossMachine:
    """This build against every committed build: those of its profile compared, the others listed apart."""

    runs: list[dict]
    comparisons: list[BuildComparison]
    other_profiles: list[CommittedBuild]

    def machines(self) -> list[str]:
        """The machines this build's verdicts were checked on: its own, then each compared build's."""
        machines = sorted({machine_of(run) for run in self.runs})
        for comparison in self.comparisons:
            if comparison.compared and comparison.build.machine not in machines:
                machines.append(comparison.build.machine)
        return machines

    def sentence(self) -> str:
        """The opening page's line on reproducibility, counted from the committed builds."""
        machines, compared = self.machines(), [r for c in self.comparisons for r in c.compared]
        if len(machines) <= 1:
            return (
                "The verdicts were checked on this build's machine only: no build of the same profile from another "
                "machine is committed under `data/builds/`."
            )
        same = sum(1 for r in compared if not r.verdict_differs)
        return (
            f"The verdicts were checked on {len(machines)} machines ({'; '.join(machines)}): of {len(compared)} "
            f"verdicts compared with the builds committed under `data/builds/`, {same} are identical. The "
            "reproducibility page compares them claim by claim."
        )

    def render(self) -> list[str]:
        """The reproducibility page's section, as Markdown lines, each key number in its claim's unit."""
        if not self.comparisons and not self.other_profiles:
            return []
        lines = [
            "## Other machines",
            "",
            "Builds committed under `data/builds/` (provenance in `data/README.md`), each the results of one "
            "`make book` on another machine. Per claim: this build's verdict and key number beside the committed "
            "build's, and their difference against the run-to-run spread of a difference, √(s₁² + s₂²) from both "
            f"builds' spreads. ⚠ marks a verdict that differs; ↕ a key number that moved by more than {BAND:g}× that "
            "spread.",
            "",
        ]
        for comparison in self.comparisons:
            lines += _render_comparison(comparison)
        profiles = ", ".join(f"`{p}`" for p in sorted({run["profile"] for run in self.runs}))
        for build in self.other_profiles:
            lines += [
                f"### {build.name}: profile `{build.profile}`, another design",
                "",
                f"{build.machine}, commit `{build.commit[:12]}`: {len(owned_records(build.runs))} verdicts at "
                f"profile `{build.profile}`, which this build (profile {profiles}) did not run. A profile sets the "
                "sizes, seeds and pairs, so its numbers are not compared with these.",
                "",
            ]
        return lines


def cross_machine(runs: list[dict], builds: list[CommittedBuild], *, executed_dir: Path | None = None) -> CrossMachine:
    """Compare `runs` with each committed build of their profile; a build of another profile is only listed."""
    profiles = {run["profile"] for run in runs}
    same = [b for b in builds if len(profiles) == 1 and b.profile in profiles]
    return CrossMachine(
        runs, [compare(build, runs, executed_dir=executed_dir) for build in same], [b for b in builds if b not in same]
    )


def _signed(text: str, value: float) -> str:
    return text if text.startswith(("-", "−")) or value < 0 else f"+{text}"


def _render_comparison(comparison: BuildComparison) -> list[str]:
    """One committed build against this one. Both key numbers of a claim are written in the unit this build's record
    states: a committed file from before verdicts carried their unit is read in this build's; a claim only that
    build judged, in its own unit if it states one, else as a plain number."""
    build, compared = comparison.build, comparison.compared
    same = sum(1 for r in compared if not r.verdict_differs)
    moved = [r.claim_id for r in compared if r.moved]
    differing = [r.claim_id for r in compared if r.verdict_differs]
    lines = [
        f"### {build.name}",
        "",
        f"{build.machine}, profile `{build.profile}`, commit `{build.commit[:12]}`. "
        f"**{len(compared)} verdicts compared, {same} identical**"
        + (f" (⚠ differ: {', '.join(differing)})" if differing else "")
        + f"; key numbers beyond the spread: {', '.join(moved) if moved else 'none'}.",
        "",
    ]
    if comparison.changed_chapters:
        lines += [
            f"Chapters whose code changed since `{build.commit[:12]}`, shown but not compared: "
            f"{', '.join(comparison.changed_chapters)} (found {comparison.how_changed}).",
            "",
        ]
    if comparison.unjudged:
        lines += [f"Judged in one of the two builds only: {', '.join(comparison.unjudged)}.", ""]
    lines += [
        "| claim | chapter | this build | key number | that build | key number | difference | spread of difference | |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in comparison.rows:
        mine, theirs = row.this or {}, row.theirs or {}
        unit = (mine or theirs).get("unit")
        flag = "code changed" if row.changed else ("⚠" if row.verdict_differs else "") + ("↕" if row.moved else "")
        difference, spread = row.difference, row.spread_of_difference
        lines.append(
            f"| {row.claim_id} | {row.chapter} | {mine.get('verdict', '—')} "
            f"| {format_value(mine.get('key_number'), unit)} "
            f"| {theirs.get('verdict', '—')} | {format_value(theirs.get('key_number'), unit)} "
            f"| {'—' if difference is None else _signed(format_spread(difference, unit), difference)} "
            f"| {'—' if spread is None else format_spread(spread, unit)} "
            f"| {flag} |"
        )
    return lines + [""]
