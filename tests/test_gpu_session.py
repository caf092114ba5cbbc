"""scripts/gpu_session.py, the prepared GPU session: its CPU path end to end, and its refusal without CUDA."""

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "gpu_session.py"
STEPS = ["kernel-tests", "peer-grids", "bandwidth", "bench", "compile"]


def _run(*args, env=None):
    env = dict(os.environ if env is None else env, PYTHONPATH=str(REPO / "src"))
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=1500)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: the refusal cannot be seen")
def test_without_cuda_it_says_so_and_runs_nothing(tmp_path):
    done = _run("--out", str(tmp_path / "session"))
    assert done.returncode == 2
    assert "no CUDA device" in done.stderr and "--dry-run" in done.stderr
    assert not (tmp_path / "session").exists()


def test_the_dry_run_runs_every_step_in_order_into_one_folder(tmp_path):
    out = tmp_path / "session"
    done = _run("--dry-run", env=dict(os.environ, OUT=str(out)))  # the folder from $OUT
    summary = json.loads((out / "summary.json").read_text())
    assert [step["name"] for step in summary["steps"]] == STEPS, done.stdout + done.stderr
    failed = {
        s["name"]: (out / f"{s['name']}.txt").read_text()[-1500:] for s in summary["steps"] if s["exit_status"] != 0
    }
    assert not failed and done.returncode == 0, failed
    assert summary["dry_run"] and all(step["seconds"] >= 0 and not step["timed_out"] for step in summary["steps"])
    bench = json.loads((out / "gpu-bench.json").read_text())
    liger = [r for r in bench["records"] if r["implementation"] == "liger"]
    assert liger and all(r["status"] == "skipped" and r["reason"] for r in liger)  # a reason, never a crash
    assert "on CPU" in bench["device_time_note"]
    assert json.loads((out / "gpu_bandwidth.json").read_text())["runs"]
    assert "total" in (out / "summary.txt").read_text()


def test_carried_wheels_are_unpacked_onto_the_path(tmp_path, monkeypatch):
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import gpu_session
    finally:
        sys.path.remove(str(SCRIPT.parent))
    carry = tmp_path / "carry"
    carry.mkdir()
    with zipfile.ZipFile(carry / "fakepeer-1.0-py3-none-any.whl", "w") as wheel:
        wheel.writestr("fakepeer/__init__.py", "NAME = 'carried'\n")
    monkeypatch.setattr(gpu_session, "CARRY", carry)
    env = gpu_session.environment(tmp_path / "out", dry_run=True)
    paths = env["PYTHONPATH"].split(os.pathsep)
    assert paths[0] == str(REPO / "src") and paths[1] == str(tmp_path / "out" / "site-packages")
    found = subprocess.run(
        [sys.executable, "-c", "import fakepeer; print(fakepeer.NAME)"], env=env, capture_output=True, text=True
    )
    assert found.stdout.strip() == "carried", found.stderr
    monkeypatch.setattr(gpu_session, "CARRY", tmp_path / "empty")
    assert gpu_session.carried_site_packages(tmp_path / "out2") is None
