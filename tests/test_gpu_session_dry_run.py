"""The GPU session's device part (normlab.bench.device through scripts/gpu_session.py --part device), dry run on CPU:
the whole flow at tiny shapes, its files and every record's fields; and a run cut short keeping what it finished."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from normlab.bench import device
from normlab.bench.records import read_json_lines

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "gpu_session.py"
FIELDS = {"device_time_s", "host_time_s", "fraction_of_copy", "wall_time_s", "status", "reason"}


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    out = tmp_path_factory.mktemp("device-session")
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--dry-run", "--part", "device", "--out", str(out)],
        capture_output=True, text=True, env=env, timeout=900,
    )  # fmt: skip
    return done, out


def test_the_device_part_runs_alone_and_writes_its_files(session):
    done, out = session
    summary = json.loads((out / "summary.json").read_text())
    assert [s["name"] for s in summary["steps"]] == ["device"], done.stdout + done.stderr
    assert summary["steps"][0]["exit_status"] == 0 and done.returncode == 0, summary["steps"][0]["last_line"]
    assert sorted(p.name for p in out.iterdir()) == ["device.jsonl", "logs.tar.gz", "summary.json"]


def test_every_record_has_device_time_host_time_and_fraction_of_copy(session):
    _, out = session
    records = read_json_lines(out / "device.jsonl")
    assert records[0]["type"] == "provenance" and records[0]["schema"] == device.SCHEMA and records[0]["dry_run"]
    assert records[-1]["type"] == "finished" and records[-1]["error"] == 0 and records[-1]["not started"] == 0
    cases = [r for r in records if r["type"] == "case"]
    assert len(cases) == records[0]["cases"] == len(device.dry_run_cases())
    assert all(FIELDS <= set(r) for r in cases)
    ok = [r for r in cases if r["status"] == "ok"]
    assert {r["implementation"] for r in ok} == {"triton", "torch", "compile"}
    assert {(r["norm"], r["direction"], r["dtype"]) for r in ok if r["implementation"] == "triton"} == {
        (n, d, t) for n in device.NORMS for d in device.DIRECTIONS for t in device.DTYPES
    }
    for r in ok:
        assert r["device_time_s"] > 0 and r["host_time_s"] > 0 and r["fraction_of_copy"] > 0
        assert r["copy_device_time_s"] > 0 and r["bytes"] > 0
        # no device here: the stand-in says so on every record, and there is no CUDA wall time
        assert r["device_time_method"] == device.CPU_STAND_IN and r["wall_time_s"] is None
    skipped = [r for r in cases if r["status"] == "skipped"]
    assert all(r["reason"] and r["device_time_s"] is None and r["fraction_of_copy"] is None for r in skipped)
    assert {r["implementation"] for r in skipped} == {"liger", "compile"}  # liger: not here; compile: one only


def test_the_printed_lines_give_device_as_a_fraction_of_copy_and_host_time_apart(session):
    _, out = session
    import tarfile

    with tarfile.open(out / "logs.tar.gz") as archive:
        log = archive.extractfile("logs/device.txt").read().decode()
    timed = [line for line in log.splitlines() if "of copy" in line]
    assert timed and all("cpu stand-in" in line and "| host" in line for line in timed)


def test_a_run_out_of_budget_records_what_it_finished(tmp_path):
    cases = device.cases(widths=(32,), extra=(), rows=4, dtypes=("float32",), implementations=("torch",))
    out = tmp_path / "device.jsonl"
    counts = device.run(out, dry_run=True, budget_s=0.0, case_list=cases, echo=lambda line: None)
    records = read_json_lines(out)
    assert counts["not started"] == len(cases) and records[-1]["type"] == "finished"


def test_the_gpu_grid_covers_the_widths_first():
    grid = device.cases()
    first = grid[: len(grid) - 3 * 2 * 2 * len(device.IMPLEMENTATIONS)]
    assert {(c.rows, c.d) for c in first} == {(8192, d) for d in (4096, 8192, 16384)}
    assert {c.implementation for c in grid} == {"triton", "torch", "compile", "liger"}
    assert {c.direction for c in first} == set(device.DIRECTIONS) and {c.dtype for c in first} == set(device.DTYPES)
