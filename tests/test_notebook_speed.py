"""The speed chapter runs end to end at smoke profile and records every speed claim from its own numbers.

A tiny synthetic GPU results file (made here, in a temporary folder, never
committed) exercises the chapter's GPU-provenance path.
"""
from __future__ import annotations

import json
import math

import pytest

from normlab.bench import harness
from normlab.study.results import VERDICTS
from normlab.study.run import execute

from evidence import evidence_numbers

SPEED_CLAIMS = {"A5", "A7", "A8", "A10", "B6", "B8", "B9", "B10", "Q2", "Q3"}


@pytest.fixture(scope="module")
def speed_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("speed")
    gpu_dir = root / "gpu"
    gpu_dir.mkdir()
    tiny = harness.run("smoke", backends=["torch"], dtypes=["float32"], progress=False, census=False)
    tiny["hardware"] = dict(tiny["hardware"], gpu="Synthetic Test GPU")
    tiny["profile"] = "gpu"
    harness.save(tiny, gpu_dir / "gpu-bench-synthetic.json")
    mp = pytest.MonkeyPatch()
    mp.setenv("NORMLAB_GPU_BENCH_DIR", str(gpu_dir))
    try:
        result = execute("speed", "smoke", executed_dir=root / "ex", results_dir=root / "res", force=True)
    finally:
        mp.undo()
    return result, root, tiny


def test_every_speed_claim_gets_one_valid_verdict_with_a_summary(speed_run):
    result, _, _ = speed_run
    assert result["notebook"] == "speed" and result["profile"] == "smoke"
    ids = [c["id"] for c in result["claims"]]
    assert sorted(ids) == sorted(SPEED_CLAIMS)
    for claim in result["claims"]:
        assert claim["verdict"] in VERDICTS
        assert claim["summary"] and claim["section"].startswith("speed-")


def test_evidence_numbers_are_finite(speed_run):
    result, _, _ = speed_run
    for claim in result["claims"]:
        numbers = list(evidence_numbers(claim["evidence"]))
        assert all(math.isfinite(n) for n in numbers), claim["id"]


def test_a8_citation_is_judged_against_the_papers_7_to_64_percent(speed_run):
    result, _, _ = speed_run
    a8 = next(c for c in result["claims"] if c["id"] == "A8")
    b6 = next(c for c in result["claims"] if c["id"] == "B6")
    assert a8["evidence"]["citation_accurate"] is False and a8["verdict"] != "holds"
    assert b6["evidence"]["citation_accurate"] is True
    assert a8["evidence"]["paper_range"] == [0.07, 0.64]
    # the measured range is an ordered, finite pair from this run
    assert a8["evidence"]["measured_saving_min"] <= a8["evidence"]["measured_saving_max"]


def test_chapter_shows_committed_gpu_rows_with_their_provenance(speed_run):
    _, root, tiny = speed_run
    notebook = json.loads((root / "ex" / "speed.ipynb").read_text())
    executed = "".join(
        "".join(output.get("text", "")) for cell in notebook["cells"] if cell["cell_type"] == "code"
        for output in cell.get("outputs", [])
    )
    assert "measured on Synthetic Test GPU" in executed
    assert tiny["started"] in executed
    assert "not yet measured" not in executed


def test_bench_results_written_beside_the_results_not_into_them(speed_run):
    _, root, _ = speed_run
    assert [p.name for p in (root / "res").glob("*.json")] == ["speed.json"]
    document = json.loads((root / "bench" / "speed-smoke.json").read_text())
    assert document["schema"] == harness.SCHEMA and document["records"]
