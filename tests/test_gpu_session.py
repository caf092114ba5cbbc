"""scripts/gpu_session.py, the prepared GPU lease: its dry run end to end and the $OUT contract (at most 8 files,
no folders), a step killed mid-way keeping what it wrote, and the refusal without CUDA."""

import json
import os
import re
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pytest
import torch

from normlab.bench.records import read_json_lines

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "gpu_session.py"
KERNEL_STEPS = ["correctness", "persistent-tests", "memcheck", "sweep", "bench"]


def _run(*args, env=None):
    env = dict(os.environ if env is None else env, PYTHONPATH=str(REPO / "src"))
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=1500)


def _session_module():
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import gpu_session
    finally:
        sys.path.remove(str(SCRIPT.parent))
    return gpu_session


def _the_out_contract_holds(out: Path) -> list[str]:
    """At most 8 plain files directly under out, nothing deeper: what the GPU machine returns whole."""
    entries = list(out.iterdir())
    assert len(entries) <= 8 and all(p.is_file() for p in entries), sorted(p.name for p in entries)
    return sorted(p.name for p in entries)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: the refusal cannot be seen")
def test_without_cuda_it_says_so_and_runs_nothing(tmp_path):
    done = _run("--out", str(tmp_path / "session"))
    assert done.returncode == 2
    assert "no CUDA device" in done.stderr and "--dry-run" in done.stderr
    assert not (tmp_path / "session").exists()


def test_the_dry_run_runs_every_kernel_step_in_priority_order_within_the_out_contract(tmp_path):
    out = tmp_path / "session"
    done = _run("--dry-run", "--part", "kernels", env=dict(os.environ, OUT=str(out)))  # $OUT
    summary = json.loads((out / "summary.json").read_text())
    assert [s["name"] for s in summary["steps"]] == KERNEL_STEPS, done.stdout + done.stderr
    failed = {s["name"]: s["last_line"] for s in summary["steps"] if s["exit_status"] != 0}
    assert not failed and done.returncode == 0, failed
    assert summary["dry_run"] and "contract_broken" not in summary
    names = _the_out_contract_holds(out)
    assert names == sorted(
        ["summary.json", "logs.tar.gz", "correctness.jsonl", "sweep.jsonl", "bench.jsonl", "gpu-bench.json"]
    )
    with tarfile.open(out / "logs.tar.gz") as archive:
        logged = set(archive.getnames())
    assert {f"logs/{name}.txt" for name in KERNEL_STEPS} <= logged and "logs/memcheck.json" in logged

    correctness = read_json_lines(out / "correctness.jsonl")
    cases = [r for r in correctness if r["type"] == "case"]
    assert cases and all(r["ok"] for r in cases) and correctness[-1] == {"type": "finished", "failures": 0}
    assert {r["precision"] for r in cases} == {"bf16", "fp32", "bf16 x, fp32 weights"}
    assert all({"y", "dx", "dweight"} <= set(r["outputs"]) for r in cases)

    sweep = read_json_lines(out / "sweep.jsonl")
    variants = [r for r in sweep if r["type"] == "variant"]
    assert {r["variant"] for r in variants} >= {
        "table", "stages-1", "one-tile-4w", "one-tile-8w", "reload", "onchip-weight-per-tile", "grouped-2", "grouped-4"
    }  # fmt: skip
    assert all(r["agrees"] for r in variants), [r for r in variants if not r["agrees"]]
    assert sweep[-1]["type"] == "finished" and sweep[-1]["disagreements"] == 0

    bench = json.loads((out / "gpu-bench.json").read_text())
    liger = [r for r in bench["records"] if r["implementation"] == "liger"]
    assert liger and all(r["status"] == "skipped" and r["reason"] for r in liger)  # a reason, never a crash
    assert len([r for r in read_json_lines(out / "bench.jsonl") if "implementation" in r]) == len(bench["records"])


# A step that writes a record, flushed, then hangs: its time limit must end it (and its own children) and keep
# the record, as a real step's JSON lines are kept.
SLOW_STEP = """
import subprocess, sys, time
from normlab.bench.records import JsonLines
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
records = JsonLines(sys.argv[1])
records.write({"type": "provenance"})
records.write({"type": "case", "n": 1})
print(f"wrote 2 records; child-pid {child.pid}", flush=True)
time.sleep(600)
"""


def test_a_step_killed_mid_way_keeps_what_it_wrote_and_the_next_step_still_runs(tmp_path, monkeypatch):
    gpu_session = _session_module()
    real_steps = gpu_session.steps

    def with_a_hanging_sweep(out, logs, dry_run, limits):
        found = real_steps(out, logs, dry_run, limits)
        command = [sys.executable, "-c", SLOW_STEP, str(out / "sweep.jsonl")]
        return found | {"sweep": gpu_session.Step("sweep", command, limits["sweep"])}

    monkeypatch.setattr(gpu_session, "steps", with_a_hanging_sweep)
    monkeypatch.setenv("PYTHONPATH", str(REPO / "src"))
    out = tmp_path / "session"
    status = gpu_session.main(["--dry-run", "--out", str(out), "--steps", "sweep,memcheck", "--limit", "sweep=8"])
    summary = json.loads((out / "summary.json").read_text())
    sweep, memcheck = summary["steps"]
    assert status == 1 and sweep["timed_out"] and sweep["exit_status"] is None and 8 <= sweep["seconds"] < 60
    assert memcheck["name"] == "memcheck" and memcheck["exit_status"] == 0  # the next step ran
    assert read_json_lines(out / "sweep.jsonl") == [{"type": "provenance"}, {"type": "case", "n": 1}]
    _the_out_contract_holds(out)
    with tarfile.open(out / "logs.tar.gz") as archive:
        log = archive.extractfile("logs/sweep.txt").read().decode()
    assert "wrote 2 records" in log and "stopped: over its 8 s limit" in log
    child = int(re.search(r"child-pid (\d+)", log).group(1))
    assert _ended(child)  # the step's own child was ended with it (its process group)


def _ended(pid: int, wait_s: float = 5.0) -> bool:
    """Whether `pid` is gone or a zombie: an orphan is reparented to PID 1, which in some containers never reaps
    it, so a killed process can stay listed in state Z."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            os.kill(pid, 0)
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (ProcessLookupError, FileNotFoundError):
            return True
        if state == "Z" or time.monotonic() > deadline:
            return state == "Z"
        time.sleep(0.1)


def test_a_bad_limit_or_step_is_refused_naming_the_choices(tmp_path):
    done = _run("--dry-run", "--out", str(tmp_path), "--limit", "sweeep=3")
    assert done.returncode != 0 and "STEP one of correctness" in done.stderr
    done = _run("--dry-run", "--out", str(tmp_path), "--steps", "compile")
    assert done.returncode != 0 and "unknown step(s) compile" in done.stderr


def test_carried_wheels_are_unpacked_to_scratch_never_under_out(tmp_path, monkeypatch):
    gpu_session = _session_module()
    carry = tmp_path / "carry"
    carry.mkdir()
    with zipfile.ZipFile(carry / "fakepeer-1.0-py3-none-any.whl", "w") as wheel:
        wheel.writestr("fakepeer/__init__.py", "NAME = 'carried'\n")
    monkeypatch.setattr(gpu_session, "CARRY", carry)
    site = tmp_path / "scratch" / "site-packages"
    env = gpu_session.environment(dry_run=True, site=site)
    paths = env["PYTHONPATH"].split(os.pathsep)
    assert paths[0] == str(REPO / "src") and paths[1] == str(site)
    found = subprocess.run(
        [sys.executable, "-c", "import fakepeer; print(fakepeer.NAME)"], env=env, capture_output=True, text=True
    )
    assert found.stdout.strip() == "carried", found.stderr
    assert gpu_session.SCRATCH.parent == Path(os.environ.get("TMPDIR", "/tmp")) or "tmp" in str(gpu_session.SCRATCH)
    monkeypatch.setattr(gpu_session, "CARRY", tmp_path / "empty")
    assert gpu_session.carried_site_packages(tmp_path / "site2") is None


def test_the_kernel_and_device_parts_fit_four_minutes_each_and_all_ten():
    gpu_session = _session_module()
    kernels = sum(gpu_session.LIMITS[name] for name in gpu_session.PARTS["kernels"])
    device = sum(gpu_session.LIMITS[name] for name in gpu_session.PARTS["device"])
    assert kernels < 240 and device < 240 and kernels + device <= 570  # 10 minutes less the call's own start
    assert gpu_session.PARTS["all"] == gpu_session.PARTS["kernels"] + gpu_session.PARTS["device"]
    assert gpu_session.PARTS["kernels"][:2] == ("correctness", "persistent-tests")  # priority order
