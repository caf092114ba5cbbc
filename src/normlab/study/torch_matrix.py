"""The torch-range matrix as a reader sees it: the cells' records (noxfile.py) gathered into data/torch-range.json,
and the table and sentence the README and the book's API page print from that file and torch_range.toml.

The README cannot run code, so its block between the markers is written by `nox -s matrix_table` and
tests/test_torch_range.py holds it equal to what `readme_block()` renders now; the API page renders it at build time.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from datetime import UTC, datetime
from pathlib import Path

from normlab.norms import torch_versions
from normlab.runtime import environment
from normlab.study import paths

MATRIX_FILE = paths.ROOT / "data" / "torch-range.json"
BEGIN = "<!-- torch-range: written by `nox -s matrix_table` from data/torch-range.json; do not edit by hand -->"
END = "<!-- /torch-range -->"


def cell_key(python: str, torch: str) -> tuple[str, tuple[int, int, int]]:
    return python, torch_versions.release(torch)


def gather(records_dir: Path) -> dict:
    """The cells' records (one JSON file each) with where and when they ran, in the matrix's order."""
    records = [json.loads(p.read_text()) for p in sorted(records_dir.glob("python*-torch*.json"))]
    records.sort(key=lambda r: cell_key(r["python"], r["torch_requested"]))
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=paths.ROOT).stdout
    return {
        "gathered": datetime.now(UTC).isoformat(timespec="seconds"),
        "git_commit": commit.strip() or None,
        "machine": environment.machine_name(),
        "cells": records,
    }


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def cell_text(record: dict) -> str:
    """'passed: 560 passed, 2 skipped; 6.3 min (tests 4.9); torch 2.6.0+cu124, triton 3.2.0'."""
    counts = [f"{record.get('passed', 0)} passed"]
    for key in ("failures", "errors", "skipped"):
        if record.get(key):
            counts.append(f"{record[key]} {'failed' if key == 'failures' else key}")
    installed = record.get("installed", {})
    versions = ", ".join(f"{name} {installed[name]}" for name in ("torch", "triton") if name in installed)
    timing = _minutes(record["seconds"])
    if "test_seconds" in record:
        timing += f" (tests {_minutes(record['test_seconds'])})"
    return f"{record['outcome']}: {', '.join(counts)}; {timing}; {versions}"


def table_rows(matrix: dict) -> tuple[list[str], list[list[str]]]:
    """(header, rows): a row per torch release of the range, a column per Python; a cell never run says so."""
    by_cell = {cell_key(r["python"], r["torch_requested"]): r for r in matrix["cells"]}
    pythons = torch_versions.RANGE["pythons"]
    header = ["torch", *(f"Python {p}" for p in pythons)]
    rows = []
    for torch in sorted(torch_versions.RANGE["torch"], key=torch_versions.release):
        cells = [by_cell.get(cell_key(p, torch)) for p in pythons]
        rows.append([torch, *(cell_text(c) if c else "not run" for c in cells)])
    return header, rows


def cells_run(matrix: dict) -> str:
    """'every cell' or '5 of the 8 cells': how much of the range the committed run covers."""
    expected = len(torch_versions.RANGE["pythons"]) * len(torch_versions.RANGE["torch"])
    ran = len({cell_key(r["python"], r["torch_requested"]) for r in matrix["cells"]})
    return "every cell" if ran == expected else f"{ran} of the {expected} cells"


def total_minutes(matrix: dict) -> float:
    return sum(r["seconds"] for r in matrix["cells"]) / 60


def cell_commits(matrix: dict) -> str:
    """'commit 1a2b3c4d5' or 'commits 1a2b3c4d5 (2.6.0 on 3.11), ...': what the cells' wheels were built from."""
    commits = sorted({r.get("git_commit") or "unknown" for r in matrix["cells"]})
    if len(commits) == 1:
        return f"commit `{commits[0]}`"
    named = []
    for commit in commits:
        cells = [f"{r['torch_requested']}/{r['python']}" for r in matrix["cells"] if r.get("git_commit") == commit]
        named.append(f"`{commit}` ({', '.join(cells)})")
    return "commits " + "; ".join(named)


def readme_block(matrix: dict) -> str:
    """The README's block: the range, the table, and what the whole run took."""
    header, rows = table_rows(matrix)
    sentence = (
        f"Tested: {torch_versions.tested_range()} (`src/normlab/norms/torch_range.toml`). `make test-torch-range` ran "
        f"{cells_run(matrix)}, {total_minutes(matrix):.0f} min of cells in all, by {matrix['gathered'][:10]} "
        f"({cell_commits(matrix)}; {matrix['machine']}; each time includes building normlab's wheel and installing "
        "torch from the local wheelhouse):"
    )
    lines = [
        BEGIN,
        textwrap.fill(sentence, width=116, break_on_hyphens=False),  # the README's lines stay readable in a terminal
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(row) + " |" for row in rows),
        END,
    ]
    return "\n".join(lines)


def replace_block(text: str, block: str) -> str:
    """`text` with its block between BEGIN and END (inclusive) replaced by `block`."""
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[:start] + block + text[end:]


def current_block(text: str) -> str:
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[start:end]


def read_matrix(path: Path = MATRIX_FILE) -> dict:
    return json.loads(path.read_text())
