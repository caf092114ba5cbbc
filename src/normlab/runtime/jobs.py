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

Weights a job keeps do not travel back in its result: `save_weights` writes them to the driver's weights folder
(`WEIGHTS_VARIABLE`, carried to the job like the corpus hash) and the result holds the file's path, which the
chapter reads with `load_weights`. The folder is `NORMLAB_WEIGHTS_DIR` where set (on a cluster: one every node
shares), else a temporary folder of the driver's, removed when it exits.
"""

from __future__ import annotations

import atexit
import json
import os
import platform
import shutil
import tempfile
import uuid
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache

CORPUS_SHA256_VARIABLE = "NORMLAB_CORPUS_SHA256"
DEVICE_VARIABLE = "NORMLAB_DEVICE"
WEIGHTS_VARIABLE = "NORMLAB_WEIGHTS_DIR"


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
    weights_folder: str | None = None  # where the job saves the weights it keeps (`save_weights`)


@lru_cache(maxsize=1)
def weights_folder() -> str:
    """Where this driver's jobs write the weights they keep: `NORMLAB_WEIGHTS_DIR`, else a temporary folder of
    this process, removed at its exit."""
    if os.environ.get(WEIGHTS_VARIABLE):
        return os.environ[WEIGHTS_VARIABLE]
    folder = tempfile.mkdtemp(prefix="normlab-weights-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def save_weights(state_dict: dict) -> str:
    """Write `state_dict` (on CPU) to a new file in the driver's weights folder and return its path."""
    import torch

    folder = os.environ.get(WEIGHTS_VARIABLE) or weights_folder()
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{uuid.uuid4().hex}.pt")
    torch.save({name: tensor.detach().cpu() for name, tensor in state_dict.items()}, path)
    return path


def load_weights(path: str) -> dict:
    """The state_dict a job saved at `path` (`save_weights`), on CPU."""
    import torch

    if not os.path.exists(path):
        raise FileNotFoundError(
            f"no weights at {path}: a job on another machine wrote them to its own disk; set {WEIGHTS_VARIABLE} to a "
            "folder every node of the cluster shares"
        )
    return torch.load(path, map_location="cpu", weights_only=True)


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
    if settings.weights_folder:
        values[WEIGHTS_VARIABLE] = settings.weights_folder
    with _environment(values), _threads(settings.threads):
        if device.startswith("cuda"):
            import torch

            torch.cuda.set_device(device)
        result = function(**job)
    return JobOutcome(result, job_provenance(device))
