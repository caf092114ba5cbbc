"""What a run was made on: hardware, versions and commit, for the results contract."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo; "unknown x86_64 CPU" where it reports none, so that no page shows
    an empty name or a bare architecture."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and line.split(":", 1)[1].strip():
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return " ".join(part for part in ("unknown", platform.machine(), "CPU") if part)


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
    cores = f" ({hw['cpu_cores']} cores)" if hw.get("cpu_cores") else ""
    return f"{hw.get('cpu') or 'unknown CPU'}{cores}" + (f", {hw['gpu']}" if hw.get("gpu") else "")


def this_build(device: str | None = None) -> str:
    """ "this build's CPU" or "this build's GPU": how an opening-page sentence names the machine its number was
    measured on. A model's name runs from two words to six ("Intel(R) Xeon(R) Platinum 8480+"), and a sentence with
    a word limit must not grow with it; the page's "Where these numbers come from" names the model.

    `device`: the torch device the number was measured on; without it, a GPU where this machine has one."""
    on_gpu = _machine()["gpu"] is not None if device is None else str(device).startswith("cuda")
    return f"this build's {'GPU' if on_gpu else 'CPU'}"


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
