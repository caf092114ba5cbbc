"""Golden files: exact bytes recorded once, compared only where everything that made them is the same.

A golden file records, beside its values, the environment they depend on (`environment(fields)`); its test calls
`compare_only_where_recorded` first, which skips, in one line, when the record lacks a field the comparison needs or
when a field differs here. Which fields a file needs is its own argument: the Triton interpreter's results depend on
the torch, Triton and NumPy releases and the architecture, but not on the CPU model (make test-portable runs them
with ATen's and NumPy's portable kernels too); a golden file of ATen's floats would need the exact CPU (`cpu_id`),
because ATen and oneDNN pick their kernels per CPU, and "AMD EPYC" names a family, not a kernel.
"""

from __future__ import annotations

import hashlib
import platform
from importlib import metadata
from pathlib import Path

import pytest


def cpu_id_of(cpuinfo: str) -> str:
    """Vendor, family, model, stepping, flags and cache size of the first CPU in a /proc/cpuinfo text, hashed."""
    first = cpuinfo.split("\n\n", 1)[0]
    wanted = ("vendor_id", "cpu family", "model", "stepping", "flags", "cache size")
    fields = dict(map(str.strip, line.split(":", 1)) for line in first.splitlines() if ":" in line)
    text = "\n".join(f"{key}:{fields.get(key, '')}" for key in wanted)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _cpu_id() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.is_file():
        return f"unknown ({platform.processor() or platform.machine()})"
    return cpu_id_of(cpuinfo.read_text())


def _cpu_capability() -> str:
    import torch

    return torch.backends.cpu.get_cpu_capability()


READERS = {
    "torch": lambda: metadata.version("torch"),
    "triton": lambda: metadata.version("triton"),
    "numpy": lambda: metadata.version("numpy"),
    "machine": platform.machine,
    "cpu_capability": _cpu_capability,
    "cpu_id": _cpu_id,
}


def environment(fields: tuple[str, ...]) -> dict[str, str]:
    return {field: READERS[field]() for field in fields}


def compare_only_where_recorded(name: str, recorded: dict | None, fields: tuple[str, ...]) -> None:
    """Skip, naming the field, unless `recorded` has every field and each equals this machine's value."""
    recorded = recorded or {}
    missing = [field for field in fields if field not in recorded]
    if missing:
        pytest.skip(f"{name} records no {', '.join(missing)}: it cannot say whether its bytes hold here")
    here = environment(fields)
    differing = [f"{f} {recorded[f]!r} there, {here[f]!r} here" for f in fields if recorded[f] != here[f]]
    if differing:
        pytest.skip(f"{name} was recorded elsewhere ({'; '.join(differing)}): its exact bytes hold only there")
