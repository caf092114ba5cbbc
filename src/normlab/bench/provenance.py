"""Committed benchmark results (GPU runs made elsewhere), found and labelled with where and when they were measured.

The chapter shows these beside its live CPU run. Nothing is estimated: no
file, no GPU rows. The files are read by the one reader of results made elsewhere (`normlab.runtime.elsewhere`). A committed file is checked against this tree's code
(`normlab.runtime.code_identity`): where the code it timed has changed since,
or cannot be identified, its `caveat` says so, and so does every verdict it answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from normlab.bench import report
from normlab.runtime.code_identity import BENCH_CODE, CodeCheck, check_code
from normlab.runtime.elsewhere import bench_files


@dataclass(frozen=True)
class Measured:
    """One benchmark run's cases with the hardware they were timed on, so every verdict can say where a number comes from."""

    frame: pd.DataFrame
    hardware: str  # "NVIDIA H200", or "Intel(R) Xeon(R) Processor (2 cores)" for a CPU-only run
    label: str  # hardware, versions, profile, time and commit, for a caption
    on_gpu: bool
    source: str  # "this run" or the committed file's name
    started: str = ""
    commit: str = ""
    caveat: str | None = None  # why its times may not describe this tree's code; None where they do
    code_identified: bool = True  # False where the code it timed cannot be identified (a '-dirty' file, say)

    @property
    def unstable_count(self) -> int:
        return len(report.unstable(self.frame))


def hardware_name(document: dict) -> str:
    hw = document["hardware"]
    return hw.get("gpu") or f"{hw.get('cpu')} ({hw.get('cpu_cores')} cores)"


def short_commit(document: dict) -> str:
    """The commit's first 12 hex digits, keeping a '-dirty' mark (a run made from a tree with uncommitted changes)."""
    commit = document.get("git_commit") or "unknown"
    return commit[:12] + ("-dirty" if commit.endswith("-dirty") else "")


def label(document: dict) -> str:
    """'NVIDIA H200 (torch 2.11, triton 3.6), 2026-01-01T00:00:00+00:00, commit abc123def456'."""
    v = document["versions"]
    commit = short_commit(document)
    return (
        f"{hardware_name(document)} (torch {v.get('torch')}, triton {v.get('triton')}), profile {document['profile']}, "
        f"measured {document['started']}, commit {commit}"
    )


def measured(document: dict, source: str = "this run") -> Measured:
    """A results document (live or loaded) as a `Measured`, its hardware read from the document itself."""
    # a gpu-profile document is a GPU run by what it was made for (the tests' synthetic one is timed on a CPU)
    on_gpu = document.get("device") == "cuda" or document.get("profile") == "gpu"
    code = CodeCheck("") if source == "this run" else check_code(document, BENCH_CODE)
    return Measured(
        frame=report.frame(document),
        hardware=hardware_name(document),
        label=label(document),
        on_gpu=on_gpu,
        source=source,
        started=str(document.get("started", "")),
        commit=short_commit(document),
        caveat=code.caveat,
        code_identified=code.unidentified is None,
    )


def committed(data_dir: str | Path) -> list[Measured]:
    """Every committed GPU bench (data/gpu-bench*.json), in name order, each read by the one reader of results made
    elsewhere (`normlab.runtime.elsewhere.bench_files`: its provenance checked, or refused naming the field)."""
    return [measured(run.document, source=run.path.name) for run in bench_files(data_dir)]


def load_committed(data_dir: str | Path) -> list[tuple[str, pd.DataFrame]]:
    """(label, frame) for every committed results file, in name order."""
    return [(f"{m.label} [{m.source}]", m.frame) for m in committed(data_dir)]
