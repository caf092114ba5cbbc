"""The study's independent jobs on a Dask cluster: connecting, checking its workers, and its executor.

Set `NORMLAB_SCHEDULER` to a scheduler's address (`tcp://host:8786`) or to a
scheduler file (`--scheduler-file` of `dask scheduler`; any value naming a
file or ending in `.json`), and `run_parallel` sends its jobs there instead of
to this machine's pool. `distributed` is imported here only, and only then:
with the variable unset nothing of Dask is loaded.

A scheduler that does not answer is an error within `CONNECT_TIMEOUT_S`
seconds that names the address, never a wait and never a quiet fall back to
the local pool. GPU jobs ask for one unit of the `GPU` worker resource: start
one worker per GPU, each seeing only its own (`CUDA_VISIBLE_DEVICES`), with
`--resources GPU=1`; a cluster with no such worker is refused before any job
is sent.
"""

from __future__ import annotations

import os
from pathlib import Path

SCHEDULER_VARIABLE = "NORMLAB_SCHEDULER"
CONNECT_TIMEOUT_S = 10
GPU_RESOURCE = "GPU"


def configured_scheduler() -> str | None:
    """The scheduler `NORMLAB_SCHEDULER` names, or None (this machine's pool)."""
    return os.environ.get(SCHEDULER_VARIABLE, "").strip() or None


def _import_distributed():
    try:
        import distributed
    except ImportError as error:
        raise ImportError(
            f"{SCHEDULER_VARIABLE} is set but Dask's `distributed` is not installed; "
            "pip install 'normlab[cluster]', or unset the variable to run on this machine"
        ) from error
    return distributed


def connect(scheduler: str, timeout: float | None = None):
    """A `distributed.Client` of the scheduler at this address or in this scheduler file."""
    distributed = _import_distributed()
    timeout = CONNECT_TIMEOUT_S if timeout is None else timeout
    is_file = scheduler.endswith(".json") or Path(scheduler).is_file()
    if is_file and not Path(scheduler).is_file():
        raise FileNotFoundError(
            f"{SCHEDULER_VARIABLE}={scheduler} names a scheduler file that does not exist; "
            "start the scheduler with `dask scheduler --scheduler-file` that path first"
        )
    where = dict(scheduler_file=scheduler) if is_file else dict(address=scheduler)
    try:
        return distributed.Client(**where, timeout=timeout, set_as_default=False)
    except (OSError, TimeoutError) as error:
        raise ConnectionError(
            f"no Dask scheduler answered at {scheduler} within {timeout:g} s ({error}); start it "
            f"(`dask scheduler`) and its workers, or unset {SCHEDULER_VARIABLE} to run on this machine"
        ) from error


def gpu_workers(client) -> list[str]:
    """The addresses of the workers that offer the GPU resource."""
    workers = client.scheduler_info(n_workers=-1)["workers"]
    return [address for address, info in workers.items() if info.get("resources", {}).get(GPU_RESOURCE, 0) >= 1]


def require_gpu_workers(client) -> None:
    """Refuse, before any job is sent, a cluster where no worker offers a GPU."""
    if not gpu_workers(client):
        workers = client.scheduler_info(n_workers=-1)["workers"]
        offered = {address: info.get("resources", {}) for address, info in workers.items()}
        raise RuntimeError(
            f"these jobs need a GPU but no worker of the cluster at {client.scheduler.address} offers one "
            f"(workers and their resources: {offered or 'none'}); start one worker per GPU with "
            f"`dask worker --resources {GPU_RESOURCE}=1` and CUDA_VISIBLE_DEVICES set to that GPU"
        )


def cluster_executor(client, *, gpu: bool):
    """`client`'s concurrent.futures executor; GPU jobs each hold one GPU resource. Jobs are not pure: a job sent
    again after a failure is a new task, not the failed one's cached result."""
    if gpu:
        require_gpu_workers(client)
        return client.get_executor(pure=False, resources={GPU_RESOURCE: 1})
    return client.get_executor(pure=False)
