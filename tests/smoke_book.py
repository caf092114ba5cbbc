"""Every chapter executed once per test session at the smoke profile, in a copy of the checkout under build/smoke-book/.

The browser test builds the book from this run, and the per-chapter tests read its executed notebooks and results
instead of executing each chapter again. The copy holds the book's sources and the package, so a test never replaces
a cpu- or gpu-profile book in build/ and _build/, and edits made to the checkout while it runs do not reach it
halfway. The copy's executed chapters persist between sessions, and the runner re-executes only the chapters whose
inputs changed (the runner's own caching, tested in test_study.py and test_pipeline.py).

Under pytest-xdist the test modules that read this run (`READERS`) go to one worker as one scope (the scheduler in
conftest.py), so one worker runs the chapters while the other runs the rest; a file lock keeps two sessions from
writing the copy at once. (xdist's own `--dist loadgroup` does not group with pytest 9: it renames `item._nodeid`,
which pytest 9 no longer has; so the scheduler reads `READERS`, the one list of them.)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from normlab.study import paths

ROOT = paths.ROOT / "build" / "smoke-book"
SOURCES = ("_config.yml", "_toc.yml", "book", "notebooks", "data", "src")
VENV_BIN = Path(sys.executable).parent
READERS = (
    "tests/test_book_browser.py",
    "tests/test_notebook_ecosystem.py",
    "tests/test_notebook_landscape.py",
    "tests/test_notebook_quality.py",
    "tests/test_notebook_realmodels.py",
    "tests/test_notebooks_dynamics.py",
    "tests/test_notebooks_math.py",
    "tests/test_opening_sentences.py",
)


@dataclass(frozen=True)
class Chapter:
    """One chapter of the session's smoke run: its results JSON and its executed notebook."""

    results: dict
    notebook: dict
    root: Path  # the copy the chapter ran in: no page may show this machine path


def _sync(root: Path) -> None:
    """Copy the book's sources into the smoke copy, leaving its build/ (the cached executions) in place."""
    for name in SOURCES:
        target = root / name
        if target.is_dir():
            shutil.rmtree(target)
        source = paths.ROOT / name
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "seeds", "*.egg-info"))
        else:
            shutil.copy2(source, target)
    shutil.rmtree(root / "_build", ignore_errors=True)


def step(command: list[str], root: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    """Run a command in the copy, with the copy's package importable and the copy as NORMLAB_ROOT."""
    # The copy's package shadows the editable install (PYTHONPATH comes before site-packages' .pth entries).
    env = dict(os.environ, NORMLAB_ROOT=str(root), PYTHONPATH=str(root / "src"))
    return subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=timeout)


def run_chapters(root: Path = ROOT) -> Path:
    """Sync the copy and run every chapter at the smoke profile (cached ones are reused); return the copy."""
    from filelock import FileLock

    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root.parent / "smoke-book.lock")):
        _sync(root)
        # The runner exits 1 when an input changed while it ran (in a checkout where others edit the package, that
        # happens); a further pass re-runs only what changed.
        for _ in range(3):
            chapters = step([str(VENV_BIN / "python"), "-m", "normlab.analysis", "--profile", "smoke"], root)
            if chapters.returncode != 1 or "changed while this run went on" not in chapters.stderr:
                break
    assert chapters.returncode == 0, chapters.stdout[-3000:] + chapters.stderr[-3000:]
    return root


def chapter(root: Path, name: str) -> Chapter:
    """The results and executed notebook of chapter `name` from the session's smoke run in `root`."""
    results = root / "build" / "results" / f"{name}.json"
    executed = root / "build" / "executed" / f"{name}.ipynb"
    missing = [str(p.relative_to(root)) for p in (results, executed) if not p.exists()]
    assert not missing, f"the smoke run in {root} left no {' or '.join(missing)}: see its runner output"
    return Chapter(json.loads(results.read_text()), json.loads(executed.read_text()), root)
