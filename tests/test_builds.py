"""normlab.study.builds: committed builds from other machines, refused when they lack provenance, and compared."""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path

import pytest

from normlab.study import builds, paths
from normlab.study.builds import BuildError, cross_machine, load_builds
from normlab.study.key_numbers import SHARE

EPYC = paths.ROOT / "data" / "builds" / "fbce4a0-epyc-avx512"


def run(notebook="geometry", *, profile="cpu", commit="abc123", cpu="Some CPU", claims=None) -> dict:
    return {
        "notebook": notebook,
        "profile": profile,
        "hardware": {"cpu": cpu, "cpu_cores": 2, "gpu": None},
        "versions": {"python": "3.11", "torch": "2.13", "triton": "3.6"},
        "git_commit": commit,
        "started": "2026-12-01T00:00:00+00:00",
        "finished": "2026-12-01T00:01:00+00:00",
        "claims": claims if claims is not None else [record("A1", 0.5, 0.01)],
    }


def record(claim_id, key, spread, verdict="holds") -> dict:
    return {"id": claim_id, "verdict": verdict, "summary": ".", "evidence": {}, "key_number": key, "spread": spread}


def write_build(folder: Path, *runs: dict) -> Path:
    folder.mkdir(parents=True)
    for r in runs:
        (folder / f"{r['notebook']}.json").write_text(json.dumps(r))
    return folder


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda r: r.pop("hardware"), r"geometry\.json: lacks hardware"),
        (lambda r: r.update(git_commit=None), r"geometry\.json: lacks git_commit"),
        (lambda r: r.update(hardware={"cpu_cores": 2}), r"geometry\.json: its hardware names no CPU or GPU"),
        (lambda r: r.update(git_commit="not a commit"), r"geometry\.json: git_commit 'not a commit' does not parse"),
        (lambda r: r.update(profile=None), r"geometry\.json: lacks profile"),
        (lambda r: r.update(claims="none"), r"geometry\.json: 'claims' must be a list"),
    ],
)
def test_a_build_lacking_provenance_is_refused_naming_the_file(tmp_path, change, message):
    broken = run()
    change(broken)
    write_build(tmp_path / "b", broken)
    with pytest.raises(BuildError, match=message + r".*copy them again from that build, or remove"):
        load_builds(tmp_path)


def test_a_build_mixing_commits_or_machines_or_an_empty_one_is_refused(tmp_path):
    write_build(tmp_path / "commits", run(), run("depth", commit="def456"))
    with pytest.raises(BuildError, match=r"geometry\.json: git_commit 'abc123', but depth\.json has 'def456'"):
        load_builds(tmp_path)
    (tmp_path / "commits" / "depth.json").unlink()
    (tmp_path / "machines").mkdir()
    write_build(tmp_path / "machines" / "x", run(), run("depth", cpu="Another CPU"))
    with pytest.raises(BuildError, match=r"geometry\.json: made on Some CPU \(2 cores\), depth\.json on Another CPU"):
        load_builds(tmp_path / "machines")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "e").mkdir()
    with pytest.raises(BuildError, match=r"holds no results files"):
        load_builds(tmp_path / "empty")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "b").mkdir()
    (tmp_path / "bad" / "b" / "geometry.json").write_text("{truncated")
    with pytest.raises(BuildError, match=r"geometry\.json: not a JSON results file"):
        load_builds(tmp_path / "bad")


def test_a_build_of_another_profile_gets_its_own_heading_and_no_comparison(tmp_path):
    write_build(tmp_path / "smoke-build", run(profile="smoke"))
    machines = cross_machine([run(cpu="Here")], load_builds(tmp_path))
    assert machines.comparisons == [] and [b.name for b in machines.other_profiles] == ["smoke-build"]
    page = "\n".join(machines.render())
    assert "### smoke-build: profile `smoke`, another design" in page and "| claim |" not in page
    assert machines.machines() == ["Here (2 cores)"]
    assert "this build's machine only" in machines.sentence()


def test_verdicts_and_key_numbers_are_compared_against_the_spread_of_a_difference(tmp_path):
    theirs = [record("A1", 0.5, 0.01), record("A2", 1.0, 0.1), record("A3", 2.0, 0.1, verdict="does not hold")]
    write_build(tmp_path / "there", run(claims=theirs))
    # A1 moved by 0.1 against 2·√(0.01² + 0.01²) = 0.028: beyond. A2 by 0.2 against 2·0.141: within. A3's verdict.
    mine = [record("A1", 0.6, 0.01), record("A2", 1.2, 0.1), record("A3", 2.0, 0.1)]
    machines = cross_machine([run(cpu="Here", claims=mine)], load_builds(tmp_path))
    (comparison,) = machines.comparisons
    rows = {r.claim_id: r for r in comparison.rows}
    assert rows["A1"].moved and not rows["A1"].verdict_differs
    assert rows["A1"].spread_of_difference == pytest.approx(0.01 * 2**0.5)
    assert not rows["A2"].moved and rows["A3"].verdict_differs
    page = "\n".join(machines.render())
    assert "**3 verdicts compared, 2 identical** (⚠ differ: A3); key numbers beyond the spread: A1." in page
    assert machines.machines() == ["Here (2 cores)", "Some CPU (2 cores)"]
    assert "checked on 2 machines" in machines.sentence() and "of 3 verdicts compared" in machines.sentence()


def _git(*args, cwd):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def test_chapters_whose_code_changed_since_the_builds_commit_are_shown_not_compared(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    (repo / "notebooks").mkdir(parents=True)
    for name in ("geometry", "jacobians", "depth"):
        (repo / "notebooks" / f"{name}.py").write_text("# v1\n")
    _git("init", "-q", cwd=repo)
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "v1", "--allow-empty", cwd=repo)
    _git("add", ".", cwd=repo)
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "v1", cwd=repo)
    old = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    (repo / "notebooks" / "geometry.py").write_text("# v2\n")
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "v2", cwd=repo)
    new = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    monkeypatch.setattr(builds.paths, "ROOT", repo)
    monkeypatch.setattr(builds.paths, "PACKAGE", repo / "src" / "normlab")
    # jacobians reads geometry's results (its load_evidence call), so it changed too; depth is unchanged and compared.
    chapters = {"geometry": "A1", "jacobians": "B3", "depth": "B17"}
    theirs = [run(name, commit=old, claims=[record(cid, 1.0, 0.1)]) for name, cid in chapters.items()]
    write_build(tmp_path / "builds" / "old", *theirs)
    mine = [run(name, commit=new, cpu="Here", claims=[record(cid, 1.0, 0.1)]) for name, cid in chapters.items()]
    (comparison,) = cross_machine(mine, load_builds(tmp_path / "builds"), executed_dir=tmp_path).comparisons
    assert comparison.changed_chapters == ["geometry", "jacobians"]
    assert [r.claim_id for r in comparison.compared] == ["B17"]
    assert "git diff --name-only" in comparison.how_changed


def test_the_committed_epyc_build_against_itself_with_perturbed_numbers():
    (epyc,) = [b for b in load_builds() if b.folder == EPYC]
    assert epyc.profile == "cpu" and epyc.commit.startswith("fbce4a0") and "AVX512" in epyc.machine
    here = [copy.deepcopy(r) for r in epyc.runs]
    for r in here:
        r["hardware"] = {**r["hardware"], "cpu": "Development CPU"}
        for c in r["claims"]:
            if c["id"] == "Q5":
                c["key_number"] = 0.019  # the development build's 1.9%, against a spread of 0.09%
                c.update(meaning="norms' share of SmolLM2-135M's prefill time", unit=SHARE)  # as this build records
            if c["id"] == "B10":
                c["verdict"] = "holds"
    machines = cross_machine(here, [epyc])
    (comparison,) = machines.comparisons
    assert comparison.changed_chapters == [] and len(comparison.compared) == 39
    assert all("unit" not in c for r in epyc.runs for c in r["claims"])  # committed before verdicts carried units
    page = "\n".join(machines.render())
    assert "**39 verdicts compared, 38 identical** (⚠ differ: B10); key numbers beyond the spread: Q5." in page
    # the committed Q5 (no unit of its own) is written in this build's unit, beside this build's
    assert "| Q5 | realmodels | does not hold | 1.9% | does not hold | 1.1% | -0.83% |" in page
    assert "AMD EPYC (2 cores), AVX512" in machines.sentence() and "of 39 verdicts" in machines.sentence()
