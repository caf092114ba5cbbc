"""Run independent jobs (trainings, measurements) in parallel worker processes.

One worker per core, one thread per worker: on a 2-core machine two
single-threaded trainings finish in about the time of one, where two
threads competing inside one process measured several times slower. On a
GPU machine, pass `devices` and each worker is pinned to one GPU.

Jobs must be picklable and `function` importable by name (a function defined
in a module, not in a notebook cell): workers are started with "spawn", which
is safe with torch's thread pools where "fork" can deadlock.

Results come back in job order, whatever order the workers finish in. A job
that raises stops the whole map with that job named in the error.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed

from normlab.runtime.progress import terminal_progress


def default_workers() -> int:
    return max(1, os.cpu_count() or 1)


def _init_worker(threads: int, device_queue) -> None:
    os.environ["NORMLAB_NO_PROGRESS"] = "1"
    os.environ["OMP_NUM_THREADS"] = str(threads)
    import torch

    torch.set_num_threads(threads)
    if device_queue is not None:
        device = device_queue.get()
        os.environ["NORMLAB_DEVICE"] = device
        if device.startswith("cuda"):
            torch.cuda.set_device(device)


def worker_device(default: str = "cpu") -> str:
    """The device this worker was pinned to (`cuda:k`), or `default` outside a pinned worker."""
    return os.environ.get("NORMLAB_DEVICE", default)


def run_parallel(
    function: Callable,
    jobs: Sequence[dict],
    *,
    workers: int | None = None,
    threads_per_worker: int = 1,
    devices: Sequence[str] | None = None,
    desc: str = "runs",
) -> list:
    """`[function(**job) for job in jobs]`, computed by `workers` processes; a terminal progress bar counts jobs."""
    jobs = list(jobs)
    if not all(isinstance(job, dict) for job in jobs):
        raise TypeError("each job must be a dict of keyword arguments for the function")
    if workers is not None and workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if threads_per_worker < 1:
        raise ValueError(f"threads_per_worker must be >= 1, got {threads_per_worker}")
    if not jobs:
        return []
    workers = min(len(devices) if devices else (workers or default_workers()), len(jobs))
    if workers == 1 and not devices:
        # No process to start: run in place (and keep tracebacks and the caller's thread setting simple).
        bar = terminal_progress(total=len(jobs), desc=desc)
        out = []
        for job in jobs:
            out.append(function(**job))
            bar.update()
        bar.close()
        return out
    context = multiprocessing.get_context("spawn")
    device_queue = None
    if devices:
        device_queue = context.Manager().Queue()
        for device in devices[:workers]:
            device_queue.put(device)
    results: list = [None] * len(jobs)
    bar = terminal_progress(total=len(jobs), desc=desc)
    with ProcessPoolExecutor(
        max_workers=workers, mp_context=context, initializer=_init_worker, initargs=(threads_per_worker, device_queue)
    ) as pool:
        futures = {pool.submit(function, **job): index for index, job in enumerate(jobs)}
        try:
            for future in as_completed(futures):
                index = futures[future]
                try:
                    results[index] = future.result()
                except Exception as error:
                    raise RuntimeError(f"{desc}: job {index} ({jobs[index]}) failed: {error!r}") from error
                bar.update()
        except BaseException:
            for future in futures:
                future.cancel()
            raise
        finally:
            bar.close()
    return results
