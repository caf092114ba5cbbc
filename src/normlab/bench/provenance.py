"""Committed benchmark results (GPU runs made elsewhere), found and labelled with where and when they were measured.

The chapter shows these beside its live CPU run. Nothing is estimated: no
file, no GPU rows.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from . import harness, report


def find_committed(data_dir: str | Path, pattern: str = "gpu-bench*.json") -> list[Path]:
    return sorted(Path(data_dir).glob(pattern))


def label(document: dict) -> str:
    """'NVIDIA H200 (torch 2.11, triton 3.6), 2026-01-01T00:00:00+00:00, commit abc123def456'."""
    hw, v = document["hardware"], document["versions"]
    where = hw.get("gpu") or f"{hw.get('cpu')} ({hw.get('cpu_cores')} cores)"
    commit = (document.get("git_commit") or "unknown")[:12]
    return (f"{where} (torch {v.get('torch')}, triton {v.get('triton')}), profile {document['profile']}, "
            f"measured {document['started']}, commit {commit}")


def load_committed(data_dir: str | Path) -> list[tuple[str, pd.DataFrame]]:
    """(label, frame) for every committed results file, in name order."""
    out = []
    for path in find_committed(data_dir):
        document = harness.load(path)
        out.append((f"{label(document)} [{path.name}]", report.frame(document)))
    return out
