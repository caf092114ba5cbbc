"""The runner's cache sees every input a chapter reads, and a failed or interrupted chapter leaves nothing to render."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from normlab.analysis import __main__ as command
from normlab.study import paths, run

CHEAP = """# %% tags=["parameters", "remove-cell"]
profile = "smoke"
results_dir = "build/results"

# %%
import os, sys
from pathlib import Path
from normlab.study import Finding, Results, decide
rows = Path("data/cheap.csv").read_text().split()
print("noise on stderr", file=sys.stderr)
print(f"{len(rows)} rows")
results = Results("cheap", profile, results_dir)
results.record("A6", Finding(decide(len(rows) > 1), f"{len(rows)} rows", {"rows": len(rows)}, meaning="rows", unit="rows"))
results.save()

# %%
if os.environ.get("CHEAP_FAIL"):
    raise RuntimeError("deliberate failure")
"""


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A copy of the parts of the checkout the ecosystem chapter reads, plus a second cheap chapter."""
    root = tmp_path / "repo"
    (root / "notebooks").mkdir(parents=True)
    (root / "data").mkdir()
    shutil.copy(paths.NOTEBOOKS / "ecosystem.py", root / "notebooks")
    shutil.copy(paths.ROOT / "data" / "model_families.csv", root / "data")
    shutil.copy(paths.CLAIMS, root / "data" / "claims.md")
    shutil.copy(paths.ROOT / "data" / "design.toml", root / "data")  # a verdict's recorded rule is its design's
    (root / "notebooks" / "cheap.py").write_text(CHEAP)
    (root / "data" / "cheap.csv").write_text("a\nb\n")
    for name, value in {
        "ROOT": root,
        "NOTEBOOKS": root / "notebooks",
        "BUILD": root / "build",
        "EXECUTED": root / "build" / "executed",
        "RESULTS": root / "build" / "results",
    }.items():
        monkeypatch.setattr(paths, name, value)
    # The fingerprint hashes a snapshot of the package, so that edits to the real one while the test runs
    # (several people work in one checkout) do not look like input changes.
    shutil.copytree(paths.PACKAGE, tmp_path / "package", ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(paths, "PACKAGE", tmp_path / "package")
    (root / "_toc.yml").write_text(
        "format: jb-book\nroot: build/pages/intro\nchapters:\n"
        "  - file: build/executed/ecosystem\n  - file: build/executed/cheap\n"
    )
    monkeypatch.setitem(run.INPUTS, "cheap", ["data/cheap.csv", "data/gpu-bench*.json"])
    return root


def _report(capsys) -> dict[str, str]:
    out = capsys.readouterr().out
    return {
        name: ("cached" if f"[{name}] unchanged" in out else "executed" if f"[{name}] executing" in out else "?")
        for name in ("ecosystem", "cheap")
    }


def test_editing_a_data_file_reruns_that_chapter_and_only_it(repo, capsys):
    assert command.main(["--profile", "smoke"]) == 0
    assert _report(capsys) == {"ecosystem": "executed", "cheap": "executed"}
    families = json.loads((repo / "build/results/ecosystem.json").read_text())
    assert command.main(["--profile", "smoke"]) == 0
    assert _report(capsys) == {"ecosystem": "cached", "cheap": "cached"}

    csv = repo / "data" / "model_families.csv"
    lines = csv.read_text().splitlines(keepends=True)
    csv.write_text("".join(line for line in lines if not line.startswith(("mpt,", "falcon,"))))  # two families fewer
    assert command.main(["--profile", "smoke"]) == 0
    assert _report(capsys) == {"ecosystem": "executed", "cheap": "cached"}
    after = json.loads((repo / "build/results/ecosystem.json").read_text())
    count = lambda data: next(c for c in data["claims"] if c["id"] == "B1")["evidence"]["families_after_2019"]  # noqa: E731
    assert count(after) < count(families)

    # A committed GPU result appearing (absent -> present) re-runs the chapter that reads it, and only it.
    (repo / "data" / "gpu-bench.json").write_text("{}")
    assert command.main(["--profile", "smoke"]) == 0
    assert _report(capsys) == {"ecosystem": "cached", "cheap": "executed"}
    # FORCE=<chapter> re-runs that chapter even when nothing changed.
    assert command.main(["--profile", "smoke", "--force-chapters", "ecosystem"]) == 0
    assert _report(capsys) == {"ecosystem": "executed", "cheap": "cached"}


def test_upstream_results_are_an_input_of_the_chapter_that_reads_them(repo, monkeypatch):
    monkeypatch.setattr(run, "results_read", lambda name: ["ecosystem"] if name == "cheap" else [])
    results = repo / "build" / "results"
    results.mkdir(parents=True)
    absent = run.fingerprint("cheap", {"profile": "smoke"}, results)
    (results / "ecosystem.json").write_text(
        json.dumps({"profile": "smoke", "claims": [{"id": "B1", "x": 1}], "started": "t0"})
    )
    present = run.fingerprint("cheap", {"profile": "smoke"}, results)
    (results / "ecosystem.json").write_text(
        json.dumps({"profile": "smoke", "claims": [{"id": "B1", "x": 1}], "started": "t1"})
    )
    assert absent != present == run.fingerprint("cheap", {"profile": "smoke"}, results)  # timestamps do not count
    (results / "ecosystem.json").write_text(json.dumps({"profile": "smoke", "claims": [{"id": "B1", "x": 2}]}))
    assert run.fingerprint("cheap", {"profile": "smoke"}, results) != present


def test_executed_chapter_has_no_terminal_or_machine_residue(repo):
    run.execute("cheap", "smoke")
    executed = nbformat.read(repo / "build" / "executed" / "cheap.ipynb", as_version=4)
    assert run.residue(executed) == []
    injected = next(c for c in executed.cells if "injected-parameters" in c.metadata.get("tags", []))
    assert 'results_dir = "build/results"' in injected.source and str(repo) not in injected.source
    outputs = [o for c in executed.cells for o in c.get("outputs", [])]
    assert any("2 rows" in o.get("text", "") for o in outputs)  # stdout stays; stderr went
    assert str(repo) not in json.dumps(executed.metadata)


def test_residue_finds_what_scrub_removes():
    cell = nbformat.v4.new_code_cell("x")
    cell.metadata["tags"] = ["injected-parameters"]
    cell.outputs = [
        nbformat.v4.new_output("stream", name="stderr", text="warn"),
        nbformat.v4.new_output("stream", name="stdout", text=f"{paths.ROOT}/x and 3.1it/s]"),
        nbformat.v4.new_output("display_data", data={"text/plain": "/usr/lib/python3/site-packages/t.py"}),
    ]
    notebook = nbformat.v4.new_notebook(cells=[cell])
    assert len(run.residue(notebook)) == 5
    assert run.scrub(notebook) == ["cell 0: dropped 3 output(s) the page must not show, first: stderr 'warn'"]
    assert run.residue(notebook) == []


def test_failed_or_interrupted_chapter_leaves_nothing_renderable(repo, monkeypatch):
    executed, results = repo / "build" / "executed", repo / "build" / "results"
    run.execute("cheap", "smoke")
    assert (executed / "cheap.ipynb").exists() and (results / "cheap.json").exists()

    monkeypatch.setenv("CHEAP_FAIL", "1")
    with pytest.raises(
        run.NotebookFailed,
        match=r"RuntimeError: deliberate failure.*build/failed/cheap.ipynb.*"
        r"make notebooks FORCE=cheap",
    ):
        run.execute("cheap", "smoke", force=True)
    for stale in (executed / "cheap.ipynb", executed / "cheap.fingerprint", results / "cheap.json"):
        assert not stale.exists(), stale
    assert (repo / "build" / "failed" / "cheap.ipynb").exists()

    import papermill

    def interrupted(source, output, **kwargs):
        shutil.copy(source, output)  # a half-written executed copy, as papermill leaves one
        raise KeyboardInterrupt

    monkeypatch.delenv("CHEAP_FAIL")
    run.execute("cheap", "smoke")
    monkeypatch.setattr(papermill, "execute_notebook", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run.execute("cheap", "smoke", force=True)
    assert not (executed / "cheap.ipynb").exists() and not (results / "cheap.json").exists()
    assert not list((repo / "build" / "running").glob("*.ipynb"))


def test_bare_build_on_a_fresh_clone_stops_with_a_message_naming_make_book(tmp_path):
    for name in ("_config.yml", "_toc.yml", "book", "notebooks", "data"):
        source = paths.ROOT / name
        (shutil.copytree if source.is_dir() else shutil.copy2)(source, tmp_path / name)
    result = subprocess.run(
        [str(Path(sys.executable).parent / "jupyter-book"), "build", "."],
        cwd=tmp_path,
        env=dict(os.environ, NORMLAB_ROOT=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode != 0
    message = [line for line in result.stderr.splitlines() if line.startswith("normlab:")]
    assert len(message) == 1 and "make book" in message[0], result.stdout[-2000:] + result.stderr[-2000:]
    assert not (tmp_path / "_build" / "html" / "index.html").exists()


def test_book_check_names_missing_unlisted_and_stale_chapters(repo):
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "normlab_check", Path(__file__).parents[1] / "book/_ext/normlab_check.py"
    )
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    (repo / "_toc.yml").write_text(
        "format: jb-book\nroot: build/pages/intro\nchapters:\n"
        "  - file: build/executed/cheap\n  - file: build/pages/ledger\n"
    )
    found = check.problems(repo)
    assert "build/pages/intro.md is missing: run `make ledger` (or `make book`)" in found
    assert "notebooks/ecosystem.py is not in _toc.yml: add `- file: build/executed/ecosystem`" in found
    assert any(p.startswith("chapter 'cheap' is missing: it has not been executed") for p in found)

    (repo / "notebooks" / "ecosystem.py").unlink()
    run.execute("cheap", "smoke")
    (repo / "build" / "pages").mkdir()
    for page in ("intro", "ledger"):
        (repo / "build" / "pages" / f"{page}.md").write_text("# page\n")
    assert check.problems(repo) == []
    (repo / "data" / "cheap.csv").write_text("a\nb\nc\n")
    assert check.problems(repo) == [
        "chapter 'cheap' is stale (its notebook, the package or its inputs changed since it ran): run `make book`"
    ]
