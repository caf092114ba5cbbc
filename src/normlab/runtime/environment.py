"""What a run was made on: hardware, versions and commit, for the results contract."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# The vector extensions that decide which code paths PyTorch's CPU kernels and -march=native builds take.
SIMD_FLAGS = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_bf16",
    "avx_vnni",
    "amx_tile",
    "amx_bf16",
    "neon",
    "asimd",
    "sve",
)


def cpu_instruction_set() -> dict:
    """The CPU's SIMD extensions and the one PyTorch dispatches to: results from two machines agree bit for bit
    only where the same kernels ran, and this is what picks them."""
    import torch

    flags: set[str] = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                flags.update(line.split(":", 1)[1].split())
    except OSError:
        pass
    return {
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "simd": [flag for flag in SIMD_FLAGS if flag in flags],
    }


def _machine() -> dict:
    """The CPU, its cores and the GPU if any: what names a machine."""
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {"cpu": cpu_model(), "cpu_cores": os.cpu_count(), "gpu": gpu}


def hardware() -> dict:
    from normlab.norms.backends import cpp

    return {**_machine(), "cpu_instruction_set": cpu_instruction_set(), "cpp_kernel_build": cpp.build_info()}


def machine_name(recorded: dict | None = None) -> str:
    """'AMD EPYC 7B13 (2 cores), NVIDIA H200': a run's machine as the pages and the chapters' sentences name it.

    `recorded` is a results file's `hardware` entry; without it, this machine's."""
    hw = _machine() if recorded is None else recorded
    return f"{hw.get('cpu', '?')} ({hw.get('cpu_cores', '?')} cores)" + (f", {hw['gpu']}" if hw.get("gpu") else "")


def versions() -> dict:
    import torch

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return {"python": sys.version.split()[0], "torch": torch.__version__, "triton": triton_version}


def git_commit(cwd: Path | None = None) -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd, capture_output=True, text=True
        ).stdout.strip()
        return out + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None
