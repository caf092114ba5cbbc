"""Check the results files, then build the claims ledger, the opening page, the reproducibility page, the page of
what is contested (normlab.study.contested) and the summary figure from them.

    python -m normlab.study.ledger [--allow-mixed]

Every claim ID in data/claims.md appears exactly once, with at most one verdict: the one its owning chapter
recorded (`normlab.study.results.verdicts`). The pages (`normlab.study.pages`) read each record as data: the key
number's `meaning` and `unit` and the opening page's `headline` come from the chapter that decided the claim, so
nothing here knows a claim's evidence.

The ledger refuses, with exit status 2 and a message naming the file and the fix, anything that would publish a
wrong or stale verdict: a results file that is not valid JSON or lacks a key, an unknown claim ID or verdict, two
verdicts for one ID, a design (data/design.toml) that lacks a claim's unit, basis or pairs, or whose thresholds or
pairs disagree with what a chapter used, or whose family of paired readings ([multiplicity]) names an unknown claim or
reading, or results from different profiles or commits (unless --allow-mixed, and then every
generated page says so). Pages are written only after every check has passed, each by an atomic rename, so a
refused build leaves the previous pages as they were.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from normlab.study import builds, contested, design, multiplicity, paths
from normlab.study.claims import parse_claims
from normlab.study.pages.design_page import render_design
from normlab.study.pages.ledger_page import render_ledger
from normlab.study.pages.opening import committed_gpu_runs, render_intro
from normlab.study.pages.reproducibility import render_reproducibility
from normlab.study.pages.summary_figure import summary_figure
from normlab.study.results import LedgerError, check_consistent, fix_for, load_results, verdicts


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
    design_path: Path | None = None,
    contested_path: Path | None = None,
    allow_mixed: bool = False,
) -> dict:
    """Check every results file against the contract and the registered design, then write ledger.md, design.md,
    intro.md, reproducibility.md, contested.md and the summary figure.

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
                    f"failed, was interrupted or is under way); {fix_for(name)}"
                )
    warning = check_consistent(runs, allow_mixed=allow_mixed)
    table = verdicts(claims, runs)
    # The registered design: a claim lacking a unit, a basis or its pairs, a chapter run whose pairs differ from it,
    # or a verdict judged against a threshold it does not hold is refused, naming the claim and both values.
    try:
        registered = design.parse(Path(design_path or design.DESIGN), {c.id for c in claims})
        design.check_runs(runs, registered)
    except design.DesignError as error:
        raise LedgerError(str(error)) from None
    # The registered multiplicity rule over the family of paired readings, as the design page and the opening show
    # it; each chapter's records already carry its verdicts (Results.record applies the rule).
    try:
        registered_family = multiplicity.parse(Path(design_path or design.DESIGN), {c.id for c in claims})
    except multiplicity.FamilyError as error:
        raise LedgerError(str(error)) from None
    family = multiplicity.family_table(runs, registered_family) if registered_family else None
    # The contested questions (data/contested.toml) beside this build's verdicts: a claim ID that is not in
    # data/claims.md, or a quoted source number the design does not hold, is refused (a LedgerError), naming it.
    contested_page = contested.render_contested(
        contested.load(contested_path, claims), claims, verdicts(claims, runs), registered=registered, warning=warning
    )
    # The committed builds are inputs of these pages: a new one changes the reproducibility page and the opening's.
    try:
        committed = builds.load_builds(builds_dir or data_dir / "builds")
        machines = builds.cross_machine(runs, committed, executed_dir=executed_dir)
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
            pages_dir / "contested.md": contested_page.encode(),
            pages_dir / "design.md": render_design(registered, [c.id for c in claims], family).encode(),
            pages_dir / "reproducibility.md": render_reproducibility(
                runs, warning=warning, other_machines=machines.render(), builds=committed
            ).encode(),
            pages_dir / "intro.md": render_intro(
                claims,
                runs,
                prose=Path(intro_path).read_text(encoding="utf-8"),
                figure=figure_name,
                warning=warning,
                gpu_runs=committed_gpu_runs(data_dir),
                checked_on=machines.sentence(),
                family=family,
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
