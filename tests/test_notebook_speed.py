"""The speed chapter runs end to end at smoke profile and records every speed claim from its own numbers.

A tiny synthetic GPU results file (made here, in a temporary folder, never
committed) exercises the chapter's GPU path: its section, and verdicts that
weigh it beside the live run. A second run with no GPU file checks that the
chapter still works on this run alone.
"""

from __future__ import annotations

import json
import math

import pytest

from evidence import evidence_numbers
from normlab.bench import harness
from normlab.runtime.code_identity import FINGERPRINT_KEY
from normlab.study.results import VERDICTS
from normlab.study.run import execute

CHANGED_KERNEL = "norms/backends/triton/norm_kernels.py"
STALE = "since then 1 file of the Triton kernels changed, not yet re-measured"
SPEED_CLAIMS = {"A5", "A7", "A8", "A10", "B6", "B8", "B9", "B10", "Q2", "Q3"}


def _execute(root, gpu_dir):
    mp = pytest.MonkeyPatch()
    mp.setenv("NORMLAB_GPU_BENCH_DIR", str(gpu_dir))
    try:
        return execute("speed", "smoke", executed_dir=root / "ex", results_dir=root / "res", force=True)
    finally:
        mp.undo()


@pytest.fixture(scope="module")
def speed_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("speed")
    gpu_dir = root / "gpu"
    gpu_dir.mkdir()
    tiny = harness.run("smoke", backends=["torch", "eager"], dtypes=["float32"], progress=False, census=True)
    tiny["hardware"] = dict(tiny["hardware"], gpu="Synthetic Test GPU")
    tiny["profile"] = "gpu"
    # as if a Triton kernel file had changed since this file was measured
    tiny[FINGERPRINT_KEY] = {**tiny[FINGERPRINT_KEY], CHANGED_KERNEL: "0" * 64}
    harness.save(tiny, gpu_dir / "gpu-bench-synthetic.json")
    return _execute(root, gpu_dir), root, tiny


@pytest.fixture(scope="module")
def cpu_only_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("speed-cpu-only")
    (root / "no-gpu").mkdir()
    return _execute(root, root / "no-gpu"), root


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


def test_every_verdict_records_its_key_number_threshold_and_spread(speed_run):
    result, _, _ = speed_run
    for claim in result["claims"]:
        if claim["verdict"] == "not testable here":
            continue
        assert claim["key_number"] is not None and claim["threshold"] is not None, claim["id"]
        assert claim["spread"] is None or claim["spread"] >= 0
        assert claim["rule"], claim["id"]


def test_a8_and_b6_are_judged_on_the_papers_rows_and_say_what_model_level_part_is_missing(speed_run):
    result, _, _ = speed_run
    a8 = next(c for c in result["claims"] if c["id"] == "A8")
    b6 = next(c for c in result["claims"] if c["id"] == "B6")
    assert a8["key_number"] == pytest.approx(4 / 7) and a8["threshold"] == 0.5
    assert b6["key_number"] == pytest.approx(0.408) and "pRMSNorm" in b6["summary"]
    # the quality and realmodels chapters did not run into this results folder: their parts show as missing
    assert a8["evidence"]["model_level"]["quality_ran"] is False
    assert a8["evidence"]["narang_t5_base"]["steps_per_s_rms"] == 3.68


def _outputs(notebook):
    text = []
    for cell in notebook["cells"]:
        for output in cell.get("outputs", []) if cell["cell_type"] == "code" else []:
            text.append("".join(output.get("text", "")))
            for value in output.get("data", {}).values():
                text.append("".join(value) if isinstance(value, list) else str(value))
    return "".join(text)


def test_chapter_shows_committed_gpu_rows_with_their_provenance(speed_run):
    _, root, tiny = speed_run
    executed = _outputs(json.loads((root / "ex" / "speed.ipynb").read_text()))
    assert "measured on Synthetic Test GPU" in executed
    assert tiny["started"] in executed
    assert "not yet measured" not in executed


def test_chapter_shows_forward_backward_against_two_copies_and_no_progress_bars(speed_run):
    _, root, _ = speed_run
    executed = _outputs(json.loads((root / "ex" / "speed.ipynb").read_text()))
    assert "÷ copy again" in executed and "fraction of copy bandwidth" in executed
    assert "it/s]" not in executed and "case/s" not in executed and str(root) not in executed


def test_bench_results_written_beside_the_results_not_into_them(speed_run):
    _, root, _ = speed_run
    assert [p.name for p in (root / "res").glob("*.json")] == ["speed.json"]
    document = json.loads((root / "bench" / "speed-smoke.json").read_text())
    assert document["schema"] == harness.SCHEMA and document["records"]


def test_verdicts_weigh_the_gpu_run_and_name_the_hardware_of_each_number(speed_run):
    result, _, _ = speed_run
    for claim in result["claims"]:
        assert "Synthetic Test GPU" in claim["summary"], claim["id"]
    weighed = [c for c in result["claims"] if "by_run" in c["evidence"]]
    assert {c["id"] for c in weighed} == SPEED_CLAIMS - {"A8", "B6"}
    for claim in weighed:
        assert "Synthetic Test GPU" in claim["evidence"]["by_run"], claim["id"]
        assert len(claim["evidence"]["by_run"]) == 2
        decided = claim["evidence"]["by_run"][claim["evidence"]["decided_on"]]
        assert decided["key_number"] == claim["key_number"], claim["id"]
    a8 = next(c for c in result["claims"] if c["id"] == "A8")
    assert a8["evidence"]["gpu_hardware"] == "Synthetic Test GPU"


def test_every_verdict_the_stale_gpu_file_decides_says_so_on_the_page(speed_run):
    result, root, _ = speed_run
    decided_there = [c for c in result["claims"] if c["evidence"].get("decided_on") == "Synthetic Test GPU"]
    assert decided_there
    for claim in decided_there + [c for c in result["claims"] if c["id"] == "A8"]:
        assert any(STALE in caveat for caveat in claim["caveats"]), claim["id"]
    executed = _outputs(json.loads((root / "ex" / "speed.ipynb").read_text()))
    assert "**Stale code:** measured at" in executed and f"{STALE}." in executed


def test_a_fresh_run_carries_no_code_caveat(cpu_only_run):
    result, _ = cpu_only_run
    assert all(claim["caveats"] == [] for claim in result["claims"])


def _figures(notebook):
    """(figure name, has an image) for every cell with a captioned figure."""
    out = []
    for cell in notebook["cells"]:
        figure = cell.get("metadata", {}).get("mystnb", {}).get("figure")
        if figure:
            images = [o for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
            out.append((figure["name"], bool(figure.get("caption")), bool(images)))
    return out


def test_gpu_figures_are_drawn_and_captioned(speed_run):
    _, root, _ = speed_run
    figures = _figures(json.loads((root / "ex" / "speed.ipynb").read_text()))
    names = {name for name, _, _ in figures}
    assert {"fig-speed-gpu-ratio", "fig-speed-gpu-bandwidth"} <= names
    assert all(captioned and drawn for _, captioned, drawn in figures)


def test_without_a_gpu_file_the_chapter_decides_on_this_run_alone(cpu_only_run):
    result, root = cpu_only_run
    assert sorted(c["id"] for c in result["claims"]) == sorted(SPEED_CLAIMS)
    for claim in result["claims"]:
        assert claim["verdict"] in VERDICTS
        assert "by_run" not in claim["evidence"] and "gpu_hardware" not in claim["evidence"], claim["id"]
        assert "GPU run" not in claim["summary"]
    notebook = json.loads((root / "ex" / "speed.ipynb").read_text())
    executed = _outputs(notebook)
    assert "No GPU run is committed" in executed
    assert all(captioned and drawn for _, captioned, drawn in _figures(notebook))
    assert "it/s]" not in executed and str(root) not in executed


def _compiled_section(executed: str) -> bool:
    """True where the section shows the compiled table; False where it says in one sentence that nothing compiled."""
    if "Nothing was compiled for sm_90 on this machine" in executed:
        return False
    assert "configurations compiled for sm_90" in executed and "predicted fraction of copy" in executed
    assert "a prediction, not a measurement" in executed
    return True


def test_the_compiled_schedule_stands_beside_the_gpu_files_measurements(speed_run):
    _, root, _ = speed_run
    executed = _outputs(json.loads((root / "ex" / "speed.ipynb").read_text()))
    if _compiled_section(executed):
        # the synthetic GPU file timed no Triton kernel: its column says so on every row
        assert "measured (gpu-bench-synthetic.json)" in executed and "not measured" in executed


def test_without_a_gpu_file_the_compiled_schedule_says_no_gpu_measured_it(cpu_only_run):
    _, root = cpu_only_run
    executed = _outputs(json.loads((root / "ex" / "speed.ipynb").read_text()))
    if _compiled_section(executed):
        assert "measured on a GPU" in executed and "no GPU run" in executed
