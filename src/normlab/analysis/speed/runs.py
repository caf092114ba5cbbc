"""The speed chapter's run: this run's benchmark, saved, and the committed GPU runs its verdicts weigh."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from normlab import bench
from normlab.analysis.speed.hardware import gpu_evidence
from normlab.bench import provenance, report
from normlab.bench.provenance import Measured
from normlab.study import paths


def unstable_cases(df: pd.DataFrame) -> list[str]:
    """One line per case the harness could not believe after re-measuring (left out of every summary)."""
    bad = report.unstable(df)
    return [
        f"{r.study} {r.norm} {r.implementation} {r.dtype} {r.rows}x{r.d} {r.mode}: {r.unstable_reason}"
        for r in bad.itertuples()
    ]


def gpu_results_dir() -> Path:
    """Where committed GPU results live: data/, or NORMLAB_GPU_BENCH_DIR (the tests point it elsewhere)."""
    return Path(os.environ.get("NORMLAB_GPU_BENCH_DIR", paths.ROOT / "data"))


@dataclass
class SpeedRun:
    """This run's benchmark and the GPU runs its verdicts weigh."""

    document: dict  # the benchmark's results document (results contract)
    bench_file: Path  # where it was saved
    df: pd.DataFrame  # one row per case
    where: str  # the hardware and torch version, for the page
    unstable: list  # one line per case left unstable
    timed: pd.DataFrame  # the cases that were timed
    live: Measured  # this run, with its hardware
    gpu_runs: list  # the GPU runs to weigh, in `hardware.gpu_evidence`'s order (empty: this run answers alone)

    @property
    def gpu(self) -> Measured | None:
        return self.gpu_runs[0] if self.gpu_runs else None


def measure(profile: str, bench_dir: Path, committed_dir: Path) -> SpeedRun:
    """Run the benchmark at `profile`, save it under `bench_dir`, and gather the committed GPU runs."""
    document = bench.run(profile)
    bench_file = bench.save(document, Path(bench_dir) / f"speed-{profile}.json")
    df = report.frame(document)
    hw = document["hardware"]
    where = f"{hw['gpu'] or hw['cpu']} ({hw['cpu_cores']} CPU cores), torch {document['versions']['torch']}"
    unstable = unstable_cases(df)
    timed = report.measured(df)
    live = provenance.measured(document)
    committed = provenance.committed(committed_dir)
    return SpeedRun(document, bench_file, df, where, unstable, timed, live, gpu_evidence(live, committed))


def run_name(m: Measured, live: Measured) -> str:
    return "this run" if m is live else m.source
