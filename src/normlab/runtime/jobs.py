"""One job as every executor runs it: its thread count, device and corpus, and where it ran.

`run_job` is what a worker of the local pool and a Dask worker both call, so
that the two paths set up a training the same way: one thread (or the count
asked for), no progress bars, the device the worker holds, and the corpus
SHA-256 the driver trains on. It returns the job's own result beside its
provenance (host, hardware with the `cpp` kernel's build target, torch
version, device), so a sweep spread over several machines can say where each
part ran.

The expected corpus is the study corpus this process loaded (`note_study_corpus`,
called by `normlab.gpt.corpus.load_corpus`), unless the caller names another. It
travels as the environment variable `CORPUS_SHA256_VARIABLE` for the job's
duration; `load_corpus` refuses other bytes while it is set. Everything the wrapper changes is restored afterwards, so a
job run in the driver's own process leaves that process as it was.
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache

CORPUS_SHA256_VARIABLE = "NORMLAB_CORPUS_SHA256"
DEVICE_VARIABLE = "NORMLAB_DEVICE"


_study_corpus: dict[str, str] = {}  # "sha256": of the study corpus this process loaded, once it has


def note_study_corpus(sha256: str) -> None:
    _study_corpus["sha256"] = sha256


def study_corpus_sha256() -> str | None:
    """The SHA-256 of the study corpus this process has loaded, or None before it loads one."""
    return _study_corpus.get("sha256")


@dataclass(frozen=True)
class JobSettings:
    """How to run each job: `threads` None leaves the process's thread setting alone (a job run in place)."""

    threads: int | None = 1
    device: str | None = None  # None: the worker's own (`worker_device`), else this one
    corpus_sha256: str | None = None  # None: no corpus check


@dataclass(frozen=True)
class JobOutcome:
    result: object
    provenance: dict


def worker_device(default: str = "cpu") -> str:
    """The device this job runs on (`cuda:k`), or `default` outside a job that was given one."""
    return os.environ.get(DEVICE_VARIABLE, default)


@lru_cache(maxsize=1)
def _machine() -> dict:
    # Once per process: the cpp build target asks the compiler, which takes a subprocess or two.
    import torch

    from normlab.runtime.environment import hardware

    return {"host": platform.node(), "hardware": hardware(), "torch": torch.__version__}


def job_provenance(device: str) -> dict:
    """Where a job ran: host, hardware (with `cpp_kernel_build`, the C++ kernel's resolved -march), torch, device."""
    return {**_machine(), "device": device}


# Every machine this process's jobs ran on, by its provenance less the device, with how many jobs ran there: what a
# chapter's results file lists (`normlab.study.results.Results`), so that a sweep spread over nodes says where.
_jobs_by_machine: dict[str, dict] = {}


def note_machines(provenance) -> None:
    """Count each job of a finished map on its machine (`job_provenance` entries; None for a missing job)."""
    for entry in provenance:
        if entry is not None:
            machine = {key: value for key, value in entry.items() if key != "device"}
            key = json.dumps(machine, sort_keys=True, default=str)
            _jobs_by_machine.setdefault(key, {**machine, "jobs": 0})["jobs"] += 1


def jobs_by_machine() -> dict[str, int]:
    """A snapshot of the counts, for `machines_since`."""
    return {key: machine["jobs"] for key, machine in _jobs_by_machine.items()}


def machines_since(snapshot: dict[str, int]) -> list[dict]:
    """Each machine that ran jobs since `snapshot`, in order of first use, with `jobs`: how many it ran since."""
    return [
        {**machine, "jobs": machine["jobs"] - snapshot.get(key, 0)}
        for key, machine in _jobs_by_machine.items()
        if machine["jobs"] > snapshot.get(key, 0)
    ]


@contextmanager
def _environment(values: dict[str, str]):
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextmanager
def _threads(count: int | None):
    if count is None:
        yield
        return
    import torch

    saved = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


def run_job(function: Callable, job: dict, settings: JobSettings) -> JobOutcome:
    """`function(**job)` under `settings`, with this process's provenance."""
    device = settings.device or worker_device()
    values = {DEVICE_VARIABLE: device}
    if settings.threads is not None:
        values |= {"NORMLAB_NO_PROGRESS": "1", "OMP_NUM_THREADS": str(settings.threads)}
    if settings.corpus_sha256:
        values[CORPUS_SHA256_VARIABLE] = settings.corpus_sha256
    with _environment(values), _threads(settings.threads):
        if device.startswith("cuda"):
            import torch

            torch.cuda.set_device(device)
        result = function(**job)
    return JobOutcome(result, job_provenance(device))
