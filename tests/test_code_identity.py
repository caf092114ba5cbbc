"""Evidence tied to the code that produced it: a committed file's code against the tree, and the label it gives.

The package is a small temporary git repository here, so that a kernel file can change under a committed result.
"""

import hashlib
import subprocess
import sys

import pandas as pd
import pytest

from normlab.analysis.speed import hardware
from normlab.bench import provenance
from normlab.runtime import code_identity as C
from normlab.study import paths
from normlab.study.findings import Finding
from normlab.study.key_numbers import DIMENSIONLESS
from normlab.study.results import Results

KERNEL = "norms/backends/triton/norm_kernels.py"
HARNESS = "bench/harness.py"
MEASURED = C.BENCH_CODE


def _git(folder, *args) -> str:
    return subprocess.run(["git", *args], cwd=folder, capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def package(tmp_path):
    """A package with one kernel and one harness file, committed: (its folder, the commit)."""
    root = tmp_path / "repo"
    package = root / "src" / "normlab"
    for relative, text in ((KERNEL, "BLOCK = 1024\n"), (HARNESS, "REPEATS = 50\n"), ("gpt/model.py", "W = 1\n")):
        (package / relative).parent.mkdir(parents=True, exist_ok=True)
        (package / relative).write_text(text)
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "measured")
    return package, _git(root, "rev-parse", "HEAD")


def test_an_unchanged_tree_gives_no_label(package):
    folder, commit = package
    check = C.check_code({"git_commit": commit}, MEASURED, folder)
    assert check.changed == () and check.caveat is None


def test_a_changed_kernel_file_since_the_commit_gives_the_stale_code_label(package):
    folder, commit = package
    (folder / KERNEL).write_text("BLOCK = 2048  # the persistent grid\n")
    (folder / "gpt" / "model.py").write_text("W = 2\n")  # outside what the bench measured: not named
    check = C.check_code({"git_commit": commit}, MEASURED, folder)
    assert check.changed == (KERNEL,)
    assert check.caveat == (
        f"measured at {commit[:7]}; since then 1 file of the Triton kernels changed, not yet re-measured"
    )


def test_the_label_names_each_changed_part_and_counts_the_files(package):
    folder, commit = package
    (folder / KERNEL).write_text("BLOCK = 2048\n")
    (folder / HARNESS).write_text("REPEATS = 100\n")
    caveat = C.check_code({"git_commit": commit}, MEASURED, folder).caveat
    assert "2 files of the Triton kernels and the benchmark harness changed" in caveat


def test_a_dirty_commit_without_fingerprint_cannot_be_identified(package):
    folder, commit = package
    caveat = C.check_code({"git_commit": commit + "-dirty"}, MEASURED, folder).caveat
    assert caveat.startswith(f"measured at {commit[:7]}-dirty: ") and "cannot be identified" in caveat


def test_without_git_or_without_the_commit_the_code_cannot_be_identified(package, tmp_path, monkeypatch):
    folder, commit = package
    unknown = C.check_code({"git_commit": "f" * 40}, MEASURED, folder)
    assert unknown.unidentified and "cannot be identified" in unknown.caveat
    tarball = tmp_path / "unpacked"  # no .git above it
    (tarball / "norms").mkdir(parents=True)
    assert "cannot be identified" in C.check_code({"git_commit": commit}, MEASURED, tarball).caveat
    monkeypatch.setenv("PATH", str(tmp_path / "no-git-here"))  # git itself absent: no crash either
    assert "cannot be identified" in C.check_code({"git_commit": commit}, MEASURED, folder).caveat


def test_a_fingerprint_decides_without_git_and_names_what_changed(package, tmp_path):
    folder, _ = package
    ran = {KERNEL: hashlib.sha256((folder / KERNEL).read_bytes()).hexdigest()}
    # the commit is not in this history: the fingerprint alone says the code is the same
    assert C.check_code({"git_commit": "f" * 40, C.FINGERPRINT_KEY: ran}, MEASURED, folder).caveat is None
    (folder / KERNEL).write_text("BLOCK = 4096\n")
    check = C.check_code({"git_commit": "f" * 40, C.FINGERPRINT_KEY: ran}, MEASURED, folder)
    assert check.changed == (KERNEL,) and "the Triton kernels changed" in check.caveat


def test_a_fingerprint_that_matches_no_tree_is_labelled(package):
    folder, commit = package
    foreign = {KERNEL: "0" * 64, "norms/backends/triton/gone.py": "1" * 64}
    check = C.check_code({"git_commit": commit, C.FINGERPRINT_KEY: foreign}, MEASURED, folder)
    assert check.changed == tuple(sorted(foreign)) and "2 files of the Triton kernels changed" in check.caveat
    empty = C.check_code({"git_commit": commit, C.FINGERPRINT_KEY: {}}, MEASURED, folder)
    assert "cannot be identified" in empty.caveat


def test_the_fingerprint_of_a_run_hashes_every_normlab_module_it_imported():
    fingerprint = C.loaded_source()
    assert "runtime/code_identity.py" in fingerprint and "study/results.py" in fingerprint
    module = sys.modules["normlab.runtime.code_identity"].__file__
    assert fingerprint["runtime/code_identity.py"] == hashlib.sha256(open(module, "rb").read()).hexdigest()
    assert C.changed_files(fingerprint) == []  # this tree is the tree it ran


def test_a_chapter_results_file_records_its_fingerprint(tmp_path):
    results = Results("speed", "smoke", tmp_path)
    results.record("A5", Finding("holds", "One sentence.", {}, meaning="m", unit=DIMENSIONLESS, caveats=["a caveat"]))
    document = results.to_dict()
    assert document[C.FINGERPRINT_KEY] and C.check_code(document, MEASURED).caveat is None
    assert document["claims"][0]["caveats"] == ["a caveat"]
    with pytest.raises(ValueError, match="list of clauses"):
        results.record("A7", Finding("holds", "One.", {}, meaning="m", unit=DIMENSIONLESS, caveats="one string"))


# ---- the speed verdicts a committed file decides ----------------------------------------------------------


def _gpu_run(caveat):
    return provenance.Measured(
        frame=pd.DataFrame(), hardware="NVIDIA H200", label="H200", on_gpu=True, source="gpu-bench.json", caveat=caveat
    )


def _finding(verdict):
    return Finding(verdict, f"It {verdict}.", {}, 0.05, 0.1, 0.01, meaning="m", unit=DIMENSIONLESS)


def test_a_verdict_decided_by_a_stale_gpu_file_carries_its_label():
    live = hardware.as_measured(pd.DataFrame())
    stale = "measured at 12a0522; since then 13 files of the Triton kernels changed, not yet re-measured"
    weighed = hardware.weigh([(live, _finding("holds")), (_gpu_run(stale), _finding("holds"))])
    assert weighed.caveats == (f"gpu-bench.json (NVIDIA H200): {stale}",)
    alone = hardware.weigh([(_gpu_run(stale), _finding("holds"))])
    assert alone.caveats == weighed.caveats
    fresh = hardware.weigh([(live, _finding("holds")), (_gpu_run(None), _finding("holds"))])
    assert fresh.caveats == ()
    # the GPU could not test it: this run answers, and the stale file takes no part in the verdict
    untested = hardware.weigh([(live, _finding("holds")), (_gpu_run(stale), _finding("not testable here"))])
    assert untested.verdict == "holds" and untested.caveats == ()
    # a fresh GPU run answers "holds"; a stale one's "does not hold" is a caveat on it, and labels it
    newer = provenance.Measured(
        frame=pd.DataFrame(), hardware="NVIDIA H200", label="H200", on_gpu=True, source="gpu-bench-3.json"
    )
    against = hardware.weigh(
        [(live, _finding("holds")), (newer, _finding("holds")), (_gpu_run(stale), _finding("does not hold"))]
    )
    assert against.verdict == "holds" and weighed.caveats[0] in against.caveats
    assert any(c.startswith("differs between runs at one scale: 'holds'") for c in against.caveats)


@pytest.mark.skipif(C.git_changed_files("HEAD", MEASURED) is None, reason="needs this checkout's git history")
def test_the_two_committed_bench_files_are_labelled_against_this_tree():
    by_name = {m.source: m for m in provenance.committed(paths.ROOT / "data")}
    assert "measured at 12a0522; since then" in by_name["gpu-bench.json"].caveat
    assert "the Triton kernels" in by_name["gpu-bench.json"].caveat
    assert "12a0522-dirty" in by_name["gpu-bench-2.json"].caveat
    assert "cannot be identified" in by_name["gpu-bench-2.json"].caveat
