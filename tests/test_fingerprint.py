"""The chapter order comes from _toc.yml, and a chapter's fingerprint covers the package modules it imports."""

import json

import nbformat
import pytest

from normlab.study import paths, run

TOC = "format: jb-book\nroot: build/pages/intro\nparts:\n  - caption: Chapters\n    chapters:\n{entries}"


def _toc(tmp_path, *names):
    path = tmp_path / "_toc.yml"
    path.write_text(TOC.format(entries="".join(f"      - file: build/executed/{name}\n" for name in names)))
    return path


def _reads(monkeypatch, inputs: dict[str, list[str]], reads: dict[str, list[str]]) -> None:
    """Chapters with these INPUTS whose notebooks read these chapters' results."""
    monkeypatch.setattr(run, "INPUTS", inputs)
    monkeypatch.setattr(run, "results_read", lambda name: reads.get(name, []))


def test_run_order_puts_each_chapter_after_those_it_reads_and_otherwise_keeps_reading_order(tmp_path, monkeypatch):
    _reads(monkeypatch, {"a": [], "b": ["data/x.csv"], "c": [], "d": []}, {"b": ["d"], "d": ["a"]})
    toc = _toc(tmp_path, "a", "b", "c", "d")
    assert run.book_order(toc) == ("a", "b", "c", "d")
    assert run.run_order(toc) == ("a", "c", "d", "b")


def test_a_chapter_reads_the_results_its_notebook_loads(tmp_path, monkeypatch):
    assert run.dependencies("quality") == ["realmodels", "geometry"] and run.dependencies("landscape") == []
    assert "results:geometry" in run.inputs_of("jacobians")
    monkeypatch.setattr(paths, "NOTEBOOKS", tmp_path)
    (tmp_path / "odd.py").write_text("chapter = 'geometry'\nload_evidence(chapter, 'B3', results_dir)\n")
    with pytest.raises(run.ChapterOrderError, match=r"odd.py:2: load_evidence's first argument must be a chapter"):
        run.dependencies("odd")


def test_the_books_own_order_lists_every_chapter_once_after_its_upstream_chapters():
    order = run.run_order()
    assert sorted(order) == sorted(run.book_order()) == sorted(run.INPUTS)
    for name in order:
        assert all(order.index(upstream) < order.index(name) for upstream in run.dependencies(name)), name


def test_a_chapter_missing_from_inputs_or_a_cycle_is_a_clear_error(tmp_path, monkeypatch):
    _reads(monkeypatch, {"a": [], "b": []}, {"b": ["a"]})
    with pytest.raises(run.ChapterOrderError, match=r"_toc.yml lists chapter\(s\) c that INPUTS .* does not"):
        run.run_order(_toc(tmp_path, "a", "b", "c"))

    _reads(monkeypatch, {"a": [], "b": [], "c": [], "d": []}, {"b": ["c"], "c": ["d"], "d": ["b"]})
    with pytest.raises(run.ChapterOrderError, match=r"form a cycle \(b reads c reads d reads b\)"):
        run.run_order(_toc(tmp_path, "a", "b", "c", "d"))

    _reads(monkeypatch, {"a": []}, {"a": ["gone"]})
    with pytest.raises(
        run.ChapterOrderError, match=r"chapter a reads the results of gone .* not a chapter of _toc.yml"
    ):
        run.run_order(_toc(tmp_path, "a"))

    with pytest.raises(run.ChapterOrderError, match=r"lists chapter\(s\) a more than once"):
        run.book_order(_toc(tmp_path, "a", "a"))
    with pytest.raises(AttributeError, match=r"ORDER is gone: call run_order\(\)"):
        run.ORDER  # noqa: B018


def test_covered_files_add_lazy_imports_parent_packages_and_the_cpp_source():
    cpp = run.covered_files({"normlab.norms.backends.cpp": "norms/backends/cpp/__init__.py"})
    assert "norms/backends/cpp/rms_norm.cpp" in cpp
    # The cpp backend imports normlab.norms.backends.compiled inside a function, which a worker may run.
    assert {"__init__.py", "norms/__init__.py", "norms/backends/compiled.py"} <= set(cpp)
    # Importing normlab.runtime.progress runs normlab/__init__.py (the norm library), but nothing of gpt or bench.
    progress = set(run.covered_files({"normlab.runtime.progress": "runtime/progress.py"}))
    assert {"runtime/progress.py", "runtime/__init__.py", "__init__.py", "norms/functional.py"} <= progress
    assert not any(f.startswith(("gpt/", "bench/", "study/", "analysis/")) for f in progress), progress
    # The depth analysis imports its worker's train_job inside a function: a run_parallel worker runs it.
    depth = run.covered_files({"normlab.analysis.depth.training_at_depth": "analysis/depth/training_at_depth.py"})
    assert {"analysis/shared/runs.py", "gpt/train.py"} <= set(depth)


PROBE = """# %% tags=["parameters"]
profile = "smoke"
results_dir = "build/results"

# %%
import json
from pathlib import Path
from normlab import alpha

print(alpha.VALUE)
written = Path(results_dir, "probe.json").write_text(json.dumps({"notebook": "probe", "profile": profile}))
"""


@pytest.fixture
def probe(tmp_path, monkeypatch):
    """A one-cell chapter in a scratch checkout that imports normlab.alpha from a fake two-module package."""
    package = tmp_path / "fake" / "normlab"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "alpha.py").write_text("VALUE = 1\n")
    (package / "beta.py").write_text("VALUE = 2\n")
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "probe.py").write_text(PROBE)
    _toc(tmp_path, "probe")
    for name, value in {
        "ROOT": tmp_path,
        "NOTEBOOKS": tmp_path / "notebooks",
        "EXECUTED": tmp_path / "build" / "executed",
        "RESULTS": tmp_path / "build" / "results",
        "PACKAGE": package,
    }.items():
        monkeypatch.setattr(paths, name, value)
    monkeypatch.setattr(run, "INPUTS", {"probe": []})
    monkeypatch.setenv("PYTHONPATH", str(package.parent))  # the chapter's kernel imports the fake package
    return package


def _ran(capsys) -> str:
    out = capsys.readouterr().out
    return "cached" if "[probe] unchanged" in out else "executed" if "[probe] executing" in out else out


def test_an_edit_reruns_a_chapter_only_when_it_touches_a_module_the_chapter_imported(probe, tmp_path, capsys):
    executed = tmp_path / "build" / "executed"
    parameters = {"profile": "smoke", "results_dir": "build/results"}
    # Before its first run a chapter has no module list, and every module of the package counts.
    before = run.fingerprint("probe", parameters)
    (probe / "beta.py").write_text("VALUE = 3\n")
    assert run.fingerprint("probe", parameters) != before

    run.execute("probe", "smoke")
    assert _ran(capsys) == "executed"
    stamp = json.loads((executed / "probe.fingerprint").read_text())
    assert stamp["modules"] == {"normlab": "__init__.py", "normlab.alpha": "alpha.py"}
    assert stamp["files"] == ["__init__.py", "alpha.py"]
    # The cell that recorded them is not in the executed copy: the page is the chapter's cells alone.
    page = nbformat.read(executed / "probe.ipynb", as_version=4)
    assert [c.source.splitlines()[-1] for c in page.cells if c.cell_type == "code"][-1].startswith("written = ")
    assert run.RECORD_TAG not in json.dumps(page) and "_normlab_record_modules" not in json.dumps(page)
    assert not list((tmp_path / "build" / "running").glob("probe*"))

    (probe / "beta.py").write_text("VALUE = 4\n")  # not imported by the chapter
    (probe / "unused.py").write_text("NEW = 1\n")  # a module appearing that the chapter does not import
    run.execute("probe", "smoke")
    assert _ran(capsys) == "cached"
    assert run.restamp(["probe"]) == []

    (probe / "alpha.py").write_text("VALUE = 5\n")  # imported by the chapter
    assert run.restamp(["probe"]) == ["probe"]
    run.execute("probe", "smoke")
    assert _ran(capsys) == "executed"
    assert [o.get("text") for o in nbformat.read(executed / "probe.ipynb", as_version=4).cells[-1].outputs] == ["5\n"]
