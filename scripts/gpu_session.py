"""One prepared GPU session: every check a lent CUDA machine should run, in order, into one folder.

    python scripts/gpu_session.py [--out DIR] [--dry-run]      (make gpu-session; DIR defaults to $OUT, else
                                                               build/gpu-session)

Steps, each with its own time limit; a step that fails or runs out of time does not stop the later ones:
    kernel-tests   the Triton kernel, module and bad-input tests on CUDA tensors, with the real compiler
    peer-grids     tests/test_peer_grids.py on CUDA (they skip themselves where transformers is missing)
    bandwidth      scripts/gpu_bandwidth.py: achieved bandwidth of the launchers against a same-size copy
    bench          python -m normlab.bench --profile gpu with torch, torch.compile, normlab's triton and Liger-Kernel:
                   wall and device time per case, written as gpu-bench.json (the shape of data/gpu-bench-N.json)
    compile        scripts/compile_kernels_sm90.py: every kernel variant compiled for sm_90, registers and spills
Each step's output goes to DIR/<step>.txt; DIR/summary.json and DIR/summary.txt list each step's exit status
and seconds. The whole session is sized to stay under 8 minutes on one H200.

The device machine has its own Python, torch and triton, and no pip: nothing is installed. normlab comes from
src/ on PYTHONPATH; Liger-Kernel from the wheels carried in build/gpu-carry/ (`make gpu-carry` downloads them
here), unpacked by this script into DIR/site-packages and put on PYTHONPATH. Without the wheel the bench still
runs and its Liger cases say that liger-kernel is not installed.

Without CUDA it says so and exits with status 2, except with --dry-run: each step then runs at a tiny size on
the CPU in Triton's interpreter, to check the session end to end: the test steps collect their tests; the
bandwidth script runs d = 64; the bench lists the gpu grid's Liger cases, skipped on CPU with their reason;
the compile step only imports the kernels and parses its arguments (one variant per kernel takes minutes on a
small CPU).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CARRY = REPO / "build" / "gpu-carry"
KERNEL_TESTS = ["tests/test_triton_kernels.py", "tests/test_modules.py", "tests/test_bad_input.py"]
BENCH_IMPLEMENTATIONS = ["torch", "compile", "triton", "liger"]


@dataclass(frozen=True)
class Step:
    name: str
    command: list[str]
    timeout_s: int


@dataclass
class Outcome:
    name: str
    command: str
    exit_status: int | None  # None: stopped at its time limit
    seconds: float
    timed_out: bool


def steps(out: Path, dry_run: bool) -> list[Step]:
    """The session's steps; a dry run's are the same commands at a tiny size."""
    python = sys.executable
    pytest = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    collect = ["--collect-only"] if dry_run else []
    bench = [python, "-m", "normlab.bench", "--no-progress", "--output", str(out / "gpu-bench.json")]
    if dry_run:  # the gpu grid's peer alone, on CPU: its cases are skipped with their reason, nothing is timed
        bench += ["--profile", "gpu", "--device", "cpu", "--backend", "liger"]
    else:
        bench += ["--profile", "gpu"] + [arg for name in BENCH_IMPLEMENTATIONS for arg in ("--backend", name)]
    bandwidth = [python, "scripts/gpu_bandwidth.py", "--out", str(out / "gpu_bandwidth.json")]
    compile_report = [python, "scripts/compile_kernels_sm90.py"] + (["--help"] if dry_run else [])
    # The limits fit 8 minutes on one H200; a dry run's are loose, for a small CPU shared with other work.
    limit = (lambda seconds: 300) if dry_run else (lambda seconds: seconds)
    return [
        Step("kernel-tests", pytest + collect + KERNEL_TESTS + [f"--junitxml={out / 'kernel-tests.xml'}"], limit(150)),
        Step("peer-grids", pytest + collect + ["tests/test_peer_grids.py"], limit(60)),
        Step("bandwidth", bandwidth + (["--dry-run"] if dry_run else []), limit(45)),
        Step("bench", bench, limit(150)),
        Step("compile", compile_report, limit(60)),
    ]


def carried_site_packages(out: Path) -> Path | None:
    """Unpack the carried wheels (pure-Python ones, such as Liger-Kernel's) into out/site-packages; None if none."""
    wheels = sorted(CARRY.glob("*.whl"))
    if not wheels:
        return None
    site = out / "site-packages"
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(site)
    return site


def environment(out: Path, dry_run: bool) -> dict:
    env = dict(os.environ)
    paths = [str(REPO / "src")]
    site = carried_site_packages(out)
    if site is not None:
        paths.append(str(site))
    env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["TRITON_INTERPRET"] = "1" if dry_run else "0"  # tests/conftest.py sets it only when absent
    return env


def run_step(step: Step, out: Path, env: dict) -> Outcome:
    started = time.perf_counter()
    with open(out / f"{step.name}.txt", "w") as log:
        log.write("$ " + " ".join(step.command) + "\n")
        log.flush()
        try:
            done = subprocess.run(
                step.command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=step.timeout_s
            )
            status, timed_out = done.returncode, False
        except subprocess.TimeoutExpired:
            status, timed_out = None, True
            log.write(f"\nstopped: over its {step.timeout_s} s limit\n")
    return Outcome(step.name, " ".join(step.command), status, round(time.perf_counter() - started, 1), timed_out)


def write_summary(out: Path, outcomes: list[Outcome], dry_run: bool, device: str) -> None:
    (out / "summary.json").write_text(
        json.dumps({"dry_run": dry_run, "device": device, "steps": [asdict(o) for o in outcomes]}, indent=1)
    )
    lines = [f"{'dry run on ' if dry_run else ''}{device}"]
    for o in outcomes:
        status = f"stopped at {o.seconds:.0f} s (time limit)" if o.timed_out else f"exit {o.exit_status}"
        lines.append(f"  {o.name:13s} {status:28s} {o.seconds:7.1f} s")
    lines.append(f"  {'total':13s} {'':28s} {sum(o.seconds for o in outcomes):7.1f} s")
    (out / "summary.txt").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT") or str(REPO / "build" / "gpu-session"))
    parser.add_argument("--dry-run", action="store_true", help="each step at a tiny size on CPU (the interpreter)")
    args = parser.parse_args(argv)
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
    device = torch.cuda.get_device_name() if torch.cuda.is_available() and not args.dry_run else "cpu"
    env = environment(out, args.dry_run)
    outcomes = []
    for step in steps(out, args.dry_run):
        outcomes.append(run_step(step, out, env))
        write_summary(out, outcomes, args.dry_run, device)  # after every step: a session cut short keeps its record
        print(f"{step.name}: " + (open(out / "summary.txt").read().splitlines()[-2].strip()), flush=True)
    print((out / "summary.txt").read_text(), end="")
    return 0 if all(o.exit_status == 0 for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
