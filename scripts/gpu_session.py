"""One GPU lease, fully used: every step a lent CUDA machine should run, in priority order, into $OUT.

    python3 scripts/gpu_session.py [--part kernels|device|all] [--out DIR] [--dry-run]   (--part kernels by default)
                                   [--steps a,b] [--limit STEP=SECONDS]

No make, no install: it runs on the machine's own Python (3.12, torch, triton, pytest), with src/ on the path.
A lease is 15 minutes, at most 10 per call: run it as calls of at most 10 minutes each, `--part device` (under 4
minutes; the one to run first where the question is how fast the kernels are) and `--part kernels` (under 4).
Steps, each with its own time limit; one that fails or runs out of time does not stop the next:

  kernels   correctness       scripts/gpu_correctness.py: 8192 rows x d = 4096..65536, bf16/fp32/mixed, +-residual,
                              forward and backward, NaN-poisoned outputs, against float64
            persistent-tests  tests/test_triton_persistent.py on CUDA, pytest-xdist over the CPU cores
            memcheck          scripts/gpu_memcheck.py: compute-sanitizer once at small shapes, or why it cannot
            sweep             scripts/gpu_sweep.py: the kernel variants side by side with a copy (the tuning table)
            bench             python -m normlab.bench --profile gpu: triton, torch, torch.compile, Liger; bf16, fp32
  device    device            python -m normlab.bench.device: device time per call (CUDA-graph replay, L2 flushed
                              between replays), host time per call on its own, each against a same-size copy_;
                              triton, torch native, torch.compile, Liger; RMSNorm and LayerNorm, forward and
                              forward+backward, bf16 and fp32, 8192 x 4096/8192/16384 first

What comes back: at most 8 files directly under DIR ($OUT, else build/gpu-session), no folders:
  summary.json       each step's exit status, seconds, limit and last line, rewritten after every step
  correctness.jsonl, sweep.jsonl, bench.jsonl, device.jsonl   one record per case, flushed as it is made
  gpu-bench.json     the bench's whole document (the shape of data/gpu-bench-N.json), when it finishes
  logs.tar.gz        every step's log and the test report, re-packed after every step
(`--part all` is the kernels and the device parts, when one call has the time for both.)
A step cut short keeps every record it wrote. Logs are written under /tmp first; the carried wheels
(Liger-Kernel, from build/gpu-carry/: `make gpu-carry`) are unpacked to /tmp, never under DIR.

The compile report and the peer grids need no GPU and run here (`make compile-check`, `make test`).

Without CUDA it says so and exits with status 2, except with --dry-run: every step then runs at a tiny
size on the CPU, in Triton's interpreter, in seconds, to check the session and its DIR contract end to end.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CARRY = REPO / "build" / "gpu-carry"
SCRATCH = Path(tempfile.gettempdir()) / "normlab-gpu-session"
BENCH_IMPLEMENTATIONS = ("triton", "torch", "compile", "liger")
MAX_FILES = 8
PARTS = {"kernels": ("correctness", "persistent-tests", "memcheck", "sweep", "bench"), "device": ("device",)}
PARTS["all"] = PARTS["kernels"] + PARTS["device"]
STEPS = PARTS["all"]  # every step --steps may name
# Seconds per step on one H200; the kernels part sums to 230 s (under 4 minutes), the device part to 230 s.
LIMITS = {"correctness": 45, "persistent-tests": 30, "memcheck": 20, "sweep": 75, "bench": 60, "device": 230}
DEVICE_MARGIN_S = 30  # the device bench starts no case this close to its step's limit


@dataclass(frozen=True)
class Step:
    name: str
    command: list[str]
    timeout_s: float


@dataclass
class Outcome:
    name: str
    command: str
    exit_status: int | None  # None: stopped at its time limit
    seconds: float
    timed_out: bool
    limit_s: float
    last_line: str


def steps(out: Path, logs: Path, dry_run: bool, limits: dict[str, float]) -> dict[str, Step]:
    """Every step by name; a dry run's are the same programs at a tiny size."""
    python = sys.executable
    dry = ["--dry-run"] if dry_run else []
    workers = "2" if dry_run else str(min(16, os.cpu_count() or 1))
    persistent = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", workers]
    persistent += ["tests/test_triton_persistent.py", f"--junitxml={logs / 'persistent-tests.xml'}"]
    if dry_run:  # the bookkeeping tests alone: the whole file is tests/test_triton_persistent.py in make test
        persistent += ["-k", "persistent_programs"]
    bench = [python, "-m", "normlab.bench", "--no-progress", "--profile", "gpu"]
    bench += ["--output", str(out / "gpu-bench.json"), "--records", str(out / "bench.jsonl")]
    if dry_run:  # the gpu grid's peer alone, on CPU: its cases are skipped with their reason, nothing is timed
        bench += ["--device", "cpu", "--backend", "liger"]
    else:
        bench += [arg for name in BENCH_IMPLEMENTATIONS for arg in ("--backend", name)]
        bench += ["--dtype", "bfloat16", "--dtype", "float32"]
    # it stops starting cases before its limit kills it (a dry run's interpreter cases are few: no budget)
    sweep_budget = 300.0 if dry_run else max(5.0, limits["sweep"] - 10)
    commands = {
        "correctness": [python, "scripts/gpu_correctness.py", "--out", str(out / "correctness.jsonl"), *dry],
        "persistent-tests": persistent,
        "memcheck": [python, "scripts/gpu_memcheck.py", "--out", str(logs / "memcheck.json")],
        "sweep": [python, "scripts/gpu_sweep.py", "--out", str(out / "sweep.jsonl"), "--budget-s", str(sweep_budget)]
        + dry,
        "bench": bench,
        "device": [
            python,
            "-m",
            "normlab.bench.device",
            "--out",
            str(out / "device.jsonl"),
            "--budget-s",
            str(300.0 if dry_run else max(5.0, limits["device"] - DEVICE_MARGIN_S)),
        ]
        + dry,  # fmt: skip
    }
    # A dry run's limits are loose (a small CPU shared with other work, and the interpreter) unless --limit set one.
    limit = lambda name: limits[name] if not dry_run or limits[name] != LIMITS[name] else 300  # noqa: E731
    return {name: Step(name, command, limit(name)) for name, command in commands.items()}


def carried_site_packages(site: Path) -> Path | None:
    """Unpack the carried wheels (pure-Python ones, such as Liger-Kernel's) into `site`; None if none."""
    wheels = sorted(CARRY.glob("*.whl"))
    if not wheels:
        return None
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(site)
    return site


def environment(dry_run: bool, site: Path) -> dict:
    env = dict(os.environ)
    paths = [str(REPO / "src")]
    if carried_site_packages(site) is not None:
        paths.append(str(site))
    env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["TRITON_INTERPRET"] = "1" if dry_run else "0"  # tests/conftest.py sets it only when absent
    return env


def run_step(step: Step, logs: Path, env: dict) -> Outcome:
    """Run one step in its own process group, so that its time limit ends its workers too (pytest-xdist's)."""
    started = time.perf_counter()
    log_path = logs / f"{step.name}.txt"
    with open(log_path, "w") as log:
        log.write("$ " + " ".join(step.command) + "\n")
        log.flush()
        process = subprocess.Popen(
            step.command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            status, timed_out = process.wait(timeout=step.timeout_s), False
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            status, timed_out = None, True
            log.write(f"\nstopped: over its {step.timeout_s:.0f} s limit\n")
    lines = [line for line in log_path.read_text(errors="replace").splitlines() if line.strip()]
    return Outcome(
        step.name,
        " ".join(step.command),
        status,
        round(time.perf_counter() - started, 1),
        timed_out,
        step.timeout_s,
        lines[-1][:300] if lines else "",
    )


def pack_logs(out: Path, logs: Path) -> None:
    """All logs as one archive under out, replaced in one rename (a kill mid-write keeps the previous one)."""
    partial = out / ".logs.tar.gz.partial"
    with tarfile.open(partial, "w:gz") as archive:
        for path in sorted(logs.iterdir()):
            archive.add(path, arcname=f"logs/{path.name}")
    os.replace(partial, out / "logs.tar.gz")


def write_summary(out: Path, outcomes: list[Outcome], header: dict) -> None:
    files = sorted(p.name for p in out.iterdir() if not p.name.startswith("."))
    document = header | {"steps": [asdict(o) for o in outcomes], "files": files}
    if len(files) + ("summary.json" not in files) > MAX_FILES or any((out / f).is_dir() for f in files):
        document["contract_broken"] = f"more than {MAX_FILES} files, or a folder, under {out}"
    partial = out / ".summary.json.partial"
    partial.write_text(json.dumps(document, indent=1) + "\n")
    os.replace(partial, out / "summary.json")


def _limits(overrides: list[str]) -> dict[str, float]:
    limits = dict(LIMITS)
    for item in overrides:
        name, _, seconds = item.partition("=")
        if name not in limits or not seconds:
            raise SystemExit(f"--limit {item!r}: give STEP=SECONDS, STEP one of {', '.join(limits)}")
        limits[name] = float(seconds)
    return limits


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--part",
        choices=tuple(PARTS),
        default="kernels",
        help="kernels (< 4 min, the default), device (< 4), all (kernels and device)",
    )
    parser.add_argument("--steps", help=f"run only these steps, comma-separated, of: {', '.join(STEPS)}")
    parser.add_argument("--limit", action="append", default=[], help="STEP=SECONDS, replacing a step's limit")
    parser.add_argument("--out", default=os.environ.get("OUT") or str(REPO / "build" / "gpu-session"))
    parser.add_argument("--dry-run", action="store_true", help="every step at a tiny size on CPU (the interpreter)")
    args = parser.parse_args(argv)
    names = args.steps.split(",") if args.steps else list(PARTS[args.part])
    unknown = [n for n in names if n not in STEPS]
    if unknown:
        parser.error(f"unknown step(s) {', '.join(unknown)}; valid: {', '.join(STEPS)}")
    limits = _limits(args.limit)
    import torch

    if not args.dry_run and not torch.cuda.is_available():
        print(
            "gpu_session: no CUDA device here (torch.cuda.is_available() is False); this session is for a GPU "
            "machine. To check its steps on this CPU, run it with --dry-run.",
            file=sys.stderr,
        )
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    run = Path(tempfile.mkdtemp(prefix="run-", dir=_scratch()))  # this run's logs and unpacked wheels
    logs = run / "logs"
    logs.mkdir()
    device = torch.cuda.get_device_name() if torch.cuda.is_available() and not args.dry_run else "cpu"
    header = {"dry_run": args.dry_run, "device": device, "part": args.part, "steps_asked": names}
    header["started"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    env = environment(args.dry_run, run / "site-packages")
    by_name = steps(out, logs, args.dry_run, limits)
    outcomes = []
    for name in names:
        outcome = run_step(by_name[name], logs, env)
        outcomes.append(outcome)
        if name == "device":
            header["predictions"] = score_predictions(out / "device.jsonl", logs)
        pack_logs(out, logs)
        write_summary(out, outcomes, header)  # after every step: a session cut short keeps its record
        status = f"stopped at its {outcome.limit_s:.0f} s limit" if outcome.timed_out else f"exit {outcome.exit_status}"
        print(f"{name:17s} {status:28s} {outcome.seconds:7.1f} s  {outcome.last_line[:90]}", flush=True)
    print(f"{'total':17s} {'':28s} {sum(o.seconds for o in outcomes):7.1f} s   -> {out}")
    return 0 if all(o.exit_status == 0 for o in outcomes) else 1


def score_predictions(device_jsonl: Path, logs: Path) -> dict:
    """The device bench's cases beside the registered predictions (data/speed-predictions.toml); a registration
    whose kernel fingerprint differs from the code timed is reported as a mismatch and not scored. The lines go to
    logs/predictions.txt and the summary's `predictions`."""
    registry = REPO / "data" / "speed-predictions.toml"
    if not device_jsonl.exists() or not registry.exists():
        return {"status": "not scored: no device records or no registered predictions"}
    try:
        sys.path.insert(0, str(REPO / "src"))
        from normlab.bench import speed_model

        scored = speed_model.score_file(device_jsonl, registry)
    except Exception as error:  # the session goes on; the summary says why
        return {"status": f"not scored: {type(error).__name__}: {error}"[:300]}
    lines = speed_model.score_text(scored)
    (logs / "predictions.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)
    return scored["summary"]


def _scratch() -> Path:
    SCRATCH.mkdir(parents=True, exist_ok=True)
    return SCRATCH


if __name__ == "__main__":
    sys.exit(main())
