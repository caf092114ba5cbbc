"""Run the study's notebooks through papermill.

    python -m normlab.study.run [--profile auto|smoke|cpu|gpu] [--force] [NOTEBOOK ...]

Notebooks live as jupytext percent scripts in notebooks/. Each is converted to
.ipynb, executed with its `parameters` cell overridden (profile, results_dir),
and written to build/executed/, its results JSON to build/results/.

A notebook is re-executed only when its source, its parameters or the
package's code changed: the fingerprint of all three is stored beside the
executed copy.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

from . import paths

PROFILES = ("smoke", "cpu", "gpu", "auto")
# Run order: a chapter that reads another's evidence (results:NAME in INPUTS) runs after it.
ORDER = ("ecosystem", "geometry", "jacobians", "realmodels", "quality", "depth", "gain", "speed", "landscape")
# Reading order of the book (the table of contents); may differ from the run order.
BOOK_ORDER = ("ecosystem", "geometry", "jacobians", "speed", "quality", "depth", "gain", "realmodels", "landscape")


class NotebookFailed(RuntimeError):
    pass


def available_notebooks() -> list[str]:
    present = {p.stem for p in paths.NOTEBOOKS.glob("*.py")}
    return [name for name in ORDER if name in present] + sorted(present - set(ORDER))


def resolve_profile(profile: str) -> str:
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; valid profiles: {', '.join(PROFILES)}")
    if profile != "auto":
        return profile
    import torch

    return "gpu" if torch.cuda.is_available() else "cpu"


def fingerprint(name: str, parameters: dict) -> str:
    digest = hashlib.sha256()
    digest.update((paths.NOTEBOOKS / f"{name}.py").read_bytes())
    digest.update(json.dumps(parameters, sort_keys=True).encode())
    for source in sorted(paths.PACKAGE.rglob("*.py")):
        digest.update(str(source.relative_to(paths.PACKAGE)).encode())
        digest.update(source.read_bytes())
    return digest.hexdigest()


def execute(
    name: str,
    profile: str = "auto",
    *,
    executed_dir: Path | None = None,
    results_dir: Path | None = None,
    force: bool = False,
    log_output: bool = False,
) -> dict:
    """Execute one notebook (unless cached) and return its results JSON as a dict."""
    import jupytext
    import nbformat
    import papermill

    valid = available_notebooks()
    if name not in valid:
        raise ValueError(f"unknown notebook {name!r}; valid notebooks: {', '.join(valid)}")
    profile = resolve_profile(profile)
    executed_dir = Path(executed_dir or paths.EXECUTED).resolve()
    results_dir = Path(results_dir or paths.RESULTS).resolve()
    executed_dir.mkdir(parents=True, exist_ok=True)
    results_dir.mkdir(parents=True, exist_ok=True)

    parameters = {"profile": profile, "results_dir": str(results_dir)}
    stamp = fingerprint(name, parameters)
    output = executed_dir / f"{name}.ipynb"
    stamp_file = executed_dir / f"{name}.fingerprint"
    result_file = results_dir / f"{name}.json"
    if not force and output.exists() and result_file.exists() and stamp_file.exists() and stamp_file.read_text() == stamp:
        print(f"[{name}] unchanged since last run ({profile}); using cached output")
        return json.loads(result_file.read_text())

    notebook = jupytext.read(paths.NOTEBOOKS / f"{name}.py")
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    notebook.metadata["language_info"] = {"name": "python"}
    source = executed_dir / f"{name}.source.ipynb"
    nbformat.write(notebook, source)
    stamp_file.unlink(missing_ok=True)
    result_file.unlink(missing_ok=True)
    print(f"[{name}] executing with profile {profile}")
    started = time.perf_counter()
    try:
        papermill.execute_notebook(
            str(source),
            str(output),
            parameters=parameters,
            kernel_name="python3",
            cwd=str(paths.ROOT),
            progress_bar=True,
            log_output=log_output,
        )
    except papermill.PapermillExecutionError as error:
        result_file.unlink(missing_ok=True)  # a half-run notebook's verdicts must not reach the ledger
        raise NotebookFailed(
            f"notebook {name!r} failed in cell {error.cell_index} (execution count {error.exec_count}): "
            f"{error.ename}: {error.evalue}\nexecuted copy with the traceback: {output}"
        ) from None
    finally:
        source.unlink(missing_ok=True)
    if not result_file.exists():
        raise NotebookFailed(f"notebook {name!r} ran but wrote no results to {result_file}; it must call results.save()")
    stamp_file.write_text(stamp)
    print(f"[{name}] done in {time.perf_counter() - started:.0f} s")
    return json.loads(result_file.read_text())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="*", help=f"default: all ({', '.join(available_notebooks())})")
    parser.add_argument("--profile", default="auto", help=f"one of {', '.join(PROFILES)}")
    parser.add_argument("--force", action="store_true", help="re-execute even when nothing changed")
    args = parser.parse_args(argv)
    valid = available_notebooks()
    unknown = [name for name in args.notebooks if name not in valid]
    if unknown or args.profile not in PROFILES:
        problem = f"unknown notebook(s) {unknown}; valid notebooks: {', '.join(valid)}" if unknown else (
            f"unknown profile {args.profile!r}; valid profiles: {', '.join(PROFILES)}")
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        for name in args.notebooks or valid:
            execute(name, args.profile, force=args.force)
    except (ValueError, NotebookFailed) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2 if isinstance(error, ValueError) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
