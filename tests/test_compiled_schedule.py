"""The compiled schedule of the configurations the tuning table picks, read from Triton's sm_90 output (no GPU).

normlab.bench.compiled_schedule.schedule (behind scripts/compile_kernels_sm90.py --schedule and the speed chapter's
"Predicted from the compiled code") compiles, for 8192 rows of d = 4096, 8192 and 16384 in bf16 and fp32,
RMSNorm's and LayerNorm's forward and backward as launch.py launches them, and reads the TTGIR and ptxas's log:
registers, spills, shared memory, CTAs per SM, whether the persistent loop keeps the next row's loads in flight
while it works on this one, the bytes a row moves from HBM and L2, and whether a row's reduction layout changes
with the row count. It compiles in a fresh process: the kernels must be defined without TRITON_INTERPRET, which
this test session's conftest sets.

Every persistent loop must keep the next loads in flight (the on-chip kernels' row loops, the chunked kernels' one
loop over (row, pass, chunk) steps), the table must not start more programs per SM than fit, nothing may spill and
no row's reduction may depend on the batch. Outside the target widths, the configurations that once spilled or did
not fit are compiled again and held to neither.
"""

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from normlab.analysis.speed import compiled
from normlab.bench import compiled_schedule

ROOT = Path(__file__).resolve().parents[1]


TARGETS = dict(widths=[4096, 8192, 16384], dtypes=["bf16", "fp32"], rows=8192)


def _compiled(**arguments) -> dict:
    result = compiled_schedule.schedule(**arguments)
    if "unavailable" in result:
        pytest.skip(f"no sm_90 compilation here: {result['unavailable']}")
    return result


@pytest.fixture(scope="module")
def schedule():
    return _compiled(**TARGETS)


def test_every_target_configuration_compiles(schedule):
    assert not [p for p in schedule["problems"] if p.startswith("FAIL")]
    assert len(schedule["records"]) == 2 * 2 * 3 * 2 * 2  # kinds, directions, widths, dtypes, flag sets


def test_no_spills_and_the_table_fits(schedule):
    for r in schedule["records"]:
        assert r["spill_stores"] == 0 and r["spill_loads"] == 0, r
        assert 1 <= r["programs_per_sm"] <= r["ctas_per_sm"], r


def test_rows_reduce_the_same_at_any_batch_size(schedule):
    assert all(r["batch_invariant"] for r in schedule["records"])


def test_every_persistent_loop_keeps_the_next_loads_in_flight(schedule):
    for r in schedule["records"]:
        assert r["overlap"], r
        assert max(r["buffers"]) >= 2 or r["kernel"] == "backward_chunked", r  # its one buffer is read at the top
        assert max(r["async_waits"]) > 0 and r["chunk_loop_overlap"] == [], r


def test_a_forward_whose_two_buffers_do_not_fit_goes_chunked(schedule):
    # Two buffers of a 16K row of fp32 x and of its residual would take 256 KiB (launch._forward_onchip_limit)
    chunked = {(r["kind"], r["dtype"], r["flags"]) for r in schedule["records"]
               if r["direction"] == "forward" and r["path"] == "chunked"}  # fmt: skip
    assert chunked == {("rms", "fp32", "fused"), ("layer", "fp32", "fused")}
    assert all(r["d"] == 16384 for r in schedule["records"] if r["direction"] == "forward" and r["path"] == "chunked")


def test_a_chunked_kernels_rows_in_flight_between_its_passes_fit_in_l2(schedule):
    chunked = [r for r in schedule["records"] if r["path"] == "chunked"]
    assert chunked and all(r["rows_fit_in_l2"] and 0 < r["l2_working_set_bytes"] <= 50e6 for r in chunked)
    # past L2, the later passes read from HBM, and the prediction says so: a 64K fp32 row re-read by 132 programs
    wide = _compiled(cases=[("rms", "backward", 65536, "fp32", "plain")])["records"][0]
    assert not wide["rows_fit_in_l2"] and wide["l2_working_set_bytes"] > 50e6


def test_the_weight_is_loaded_once_per_program_on_chip(schedule):
    for r in schedule["records"]:
        if r["path"] == "onchip":
            assert not r["weight_per_row"], r


def test_on_chip_forwards_move_a_row_from_l2_once(schedule):
    for r in schedule["records"]:
        if r["path"] == "onchip" and r["direction"] == "forward":
            assert r["l2_bytes_per_row"] <= 1.05 * r["hbm_bytes_per_row"], r


# The configurations that spilled or started more programs per SM than fit after the pipelined loops came in
# (6b7e1fd; the whole --schedule range, d 64..65536, had 6 spills and 14 misfits): packed on-chip forward tiles
# with a residual, and chunked forwards whose ptxas register target was higher occupancy than the table starts.
REGRESSIONS = [
    ("rms", "forward", 64, "bf16", "fused"),
    ("rms", "forward", 256, "fp32", "fused"),
    ("rms", "forward", 1024, "fp16", "fused"),
    ("rms", "forward", 32768, "fp16", "plain"),
    ("layer", "forward", 32768, "bf16 x, fp32 w", "fused"),
    ("layer", "forward", 65536, "bf16 x, fp32 w", "plain"),
]


def test_former_spills_and_misfits_are_gone():
    result = _compiled(cases=REGRESSIONS, rows=8192)
    assert not [p for p in result["problems"] if p.startswith("FAIL")]
    assert len(result["records"]) == len(REGRESSIONS)
    for r in result["records"]:
        assert r["spill_stores"] == 0 and r["spill_loads"] == 0, r
        assert 1 <= r["programs_per_sm"] <= r["ctas_per_sm"], r


def test_a_small_list_compiles_in_a_fresh_process_with_every_column(schedule):
    # the module fixture ran in a fresh process from this interpreted session; so does a two-case list
    assert os.environ.get("TRITON_INTERPRET") == "1"
    result = _compiled(cases=[("rms", "forward", 4096, "bf16", "plain"), ("layer", "backward", 4096, "fp32", "fused")])
    assert result["target"] == "sm_90" and result["triton"] and result["rows"] == 8192
    assert [(r["kind"], r["direction"], r["flags"]) for r in result["records"]] == [
        ("rms", "forward", "plain"),
        ("layer", "backward", "fused"),
    ]
    for r in result["records"]:
        assert {key for key, _ in compiled_schedule.SCHEDULE_COLUMNS} <= set(r)
        assert r["registers"] > 0 and r["hbm_bytes_per_row"] > 0 and 0 < r["predicted_fraction"] <= 1
    frame = compiled.schedule_frame(result, compiled.measured_fractions(pd.DataFrame(), result["rows"]))
    assert list(frame["measured on a GPU"]) == ["no GPU run"] * 2
    assert "Of the 2 configurations compiled for sm_90" in compiled.summary_text(frame)


def test_the_cli_prints_the_table_and_fails_on_a_problem(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    report = tmp_path / "schedule.json"
    command = [sys.executable, str(ROOT / "scripts" / "compile_kernels_sm90.py"), "--schedule", "--widths", "4096",
               "--dtypes", "bf16", "--flags", "plain", "--report", str(report)]  # fmt: skip
    run = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    if "nothing compiled for sm_90" in run.stderr:
        pytest.skip(run.stderr.strip())
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "4 configurations compiled for sm_90 (0 problems)" in run.stdout and report.exists()
    assert run.stdout.splitlines()[0].split()[:4] == ["kind", "dir", "d", "dtype"]


def test_without_the_cuda_backend_nothing_compiles_and_one_sentence_says_why(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton.backends.nvidia.compiler", None)  # import fails, as without the backend
    reason = compiled_schedule.unavailable()
    assert reason.startswith("Triton's CUDA backend cannot be imported here") and reason.endswith(".")
    result = compiled_schedule.schedule([4096], ["bf16"])
    assert result["records"] == [] and result["unavailable"] == reason
    text = compiled.unavailable_text(result)
    assert text.count(". ") == 0 and "sm_90" in text and reason in text
    assert compiled.unavailable_text(dict(records=[])) is None


def test_a_missing_ptxas_is_said_in_one_sentence(monkeypatch):
    nvidia = pytest.importorskip("triton.backends.nvidia.compiler")

    def missing(*_):
        raise RuntimeError("Cannot find ptxas")

    monkeypatch.setattr(nvidia, "get_ptxas", missing)
    assert compiled_schedule.unavailable() == "Triton's ptxas cannot be found here (RuntimeError: Cannot find ptxas)."


def test_measured_fractions_sit_beside_the_plain_forward_only():
    gpu_stable = pd.DataFrame(
        dict(study="sweep", implementation="triton", direction="forward", mode="alloc", rows=8192, norm=["rms", "layer"],
             d=4096, dtype="bfloat16", fraction_of_copy=[0.612, 0.55], run="gpu-bench.json")
    )  # fmt: skip
    measured = compiled.measured_fractions(gpu_stable, 8192)
    records = [
        dict(kind=kind, direction=direction, d=4096, dtype="bf16", flags=flags, registers=64, spill_stores=0,
             spill_loads=0, ctas_per_sm=2, overlap=True, hbm_bytes_per_row=16400.0, l2_bytes_per_row=16900.0,
             predicted_fraction=0.99)
        for kind in ("rms", "layer") for direction in ("forward", "backward") for flags in ("plain", "fused")
    ]  # fmt: skip
    frame = compiled.schedule_frame(dict(records=records), measured)
    column = frame["measured (gpu-bench.json)"]
    assert list(column[(frame["direction"] == "forward") & ~frame["fused"]]) == [0.61, 0.55]
    assert set(column[(frame["direction"] == "backward") | frame["fused"]]) == {compiled.NOT_MEASURED}
    # a GPU run that timed no Triton kernel still has its column, "not measured" throughout
    other = compiled.schedule_frame(dict(records=records), measured.iloc[:0], ["gpu-synthetic.json"])
    assert set(other["measured (gpu-synthetic.json)"]) == {compiled.NOT_MEASURED}
