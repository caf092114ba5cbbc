"""Run independent jobs (trainings, measurements) in parallel: on this machine's worker processes, or on a cluster.

One worker per core, one thread per worker: on a 2-core machine two
single-threaded trainings finish in about the time of one, where two
threads competing inside one process measured several times slower. On a
GPU machine, pass `devices` and each worker is pinned to one GPU.

With `NORMLAB_SCHEDULER` set (or a Dask `Client` or any executor passed as
`executor`), the same jobs go to that cluster instead (`normlab.runtime.cluster`);
with neither, nothing of Dask is imported. Both paths run each job through
`normlab.runtime.jobs.run_job`, which sets its threads, device and expected
corpus, and records where it ran.

Jobs must be picklable and `function` importable by name (a function defined
in a module, not in a notebook cell): local workers are started with "spawn",
which is safe with torch's thread pools where "fork" can deadlock. The
workers stay up for the next call with the same workers and devices, until
the process exits (or `close_pools`).

Results come back in job order, whatever order the workers finish in. A job
that fails is sent again, up to `retries` more times; one that fails every
time is missing, and never stops the others; a local worker that dies (os._exit,
the OOM killer) costs the jobs it held one attempt, in a fresh pool. With `missing="raise"` (the
default) the call then raises `MissingRuns`, naming each missing job, once
every other job has finished; with `missing="keep"` it returns, with a
`MissingRun` in each missing job's place.
"""

from __future__ import annotations

import json
import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, BrokenExecutor, Executor, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass

from normlab.runtime.jobs import (
    DEVICE_VARIABLE,
    JobSettings,
    note_machines,
    run_job,
    study_corpus_sha256,
    weights_folder,
    worker_device,
)
from normlab.runtime.progress import terminal_progress

__all__ = ["JobResults", "MissingRun", "MissingRuns", "close_pools", "default_workers", "run_parallel", "worker_device"]

RETRIES = 2  # a job is tried at most 1 + RETRIES times: a node lost mid-run costs a retry, not the sweep


def default_workers() -> int:
    return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class MissingRun:
    """The place of a job that failed every attempt; `errors` holds each attempt's error, in order."""

    name: str
    errors: tuple[str, ...]


class JobResults(list):
    """The jobs' results in job order, with `provenance` (where each ran; None where missing), `missing`
    (the jobs that failed every attempt, by name) and `where` they were sent."""

    def __init__(self, results, names, provenance, where: str = "in this machine's pool"):
        super().__init__(results)
        self.names = list(names)
        self.provenance = list(provenance)
        self.where = where  # "on the cluster", "in this machine's pool" or "in this process", for the pages

    @property
    def missing(self) -> dict[str, MissingRun]:
        return {r.name: r for r in self if isinstance(r, MissingRun)}

    def machines(self) -> list[dict]:
        """Each distinct place the jobs ran (host, hardware, torch, device), once, in order of first use."""
        seen: dict[str, dict] = {}
        for entry in self.provenance:
            if entry is not None:
                seen.setdefault(json.dumps(entry, sort_keys=True, default=str), entry)
        return list(seen.values())


class MissingRuns(RuntimeError):
    """Some jobs failed every attempt; the others finished and are in `results` (a `JobResults`)."""

    def __init__(self, desc: str, results: JobResults):
        self.results = results
        missing = results.missing
        lines = [f"  {name}: {run.errors[-1]}" for name, run in missing.items()]
        super().__init__(
            f"{desc}: {len(missing)} of {len(results)} jobs failed every attempt and are missing:\n" + "\n".join(lines)
        )


class _InPlace(Executor):
    """Runs each job at submission, in this process: one worker needs no process (and keeps tracebacks simple)."""

    def submit(self, fn, /, *args, **kwargs):
        future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as error:
            future.set_exception(error)
        return future


def _init_worker(device_queue) -> None:
    # The one thing a per-job wrapper cannot do in a pool: hold each worker process to its own GPU.
    if device_queue is not None:
        os.environ[DEVICE_VARIABLE] = device_queue.get()


def _local_pool(workers: int, devices: Sequence[str] | None) -> Executor:
    context = multiprocessing.get_context("spawn")
    device_queue = None
    if devices:
        device_queue = context.Manager().Queue()
        for device in devices[:workers]:
            device_queue.put(device)
    return ProcessPoolExecutor(
        max_workers=workers, mp_context=context, initializer=_init_worker, initargs=(device_queue,)
    )


class _RenewingPool(Executor):
    """This machine's pool, started afresh when one of its workers dies (os._exit, the kernel's OOM killer).

    A dead worker breaks a ProcessPoolExecutor: every job it still held fails with BrokenProcessPool, and it takes
    no more. The pool cannot say which job killed the worker, so each job the broken pool held counts one failed
    attempt and is sent again, to the fresh pool, like any failed job.
    """

    def __init__(self, start: Callable[[], Executor]):
        self._start = start
        self._pool = start()
        self._pool_of: dict[Future, Executor] = {}

    def submit(self, fn, /, *args, **kwargs):
        future = self._pool.submit(fn, *args, **kwargs)
        self._pool_of[future] = self._pool
        return future

    def settle(self, future: Future) -> None:
        """Note that `future` is done; start a fresh pool if it broke the current one (the other jobs of a broken
        pool fail the same way, and are then sent to the fresh one)."""
        pool = self._pool_of.pop(future, None)
        if pool is self._pool and not future.cancelled() and isinstance(future.exception(), BrokenExecutor):
            self._pool.shutdown(wait=False)
            self._pool = self._start()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._pool.shutdown(wait=wait, cancel_futures=cancel_futures)


# This process's pools, kept from one run_parallel call to the next: starting two workers (spawn, then importing
# torch and normlab) measured 4.2 s per call on a quiet 2-core machine, and a chapter that trains in rounds pays it
# in every round. Jobs never shared anything but the worker process with the jobs before them, in one call or many.
_pools: dict[tuple, _RenewingPool] = {}


def _pool_key(workers: int, devices: Sequence[str] | None) -> tuple:
    return workers, tuple(devices or ())


def _kept_pool(workers: int, devices: Sequence[str] | None) -> _RenewingPool:
    key = _pool_key(workers, devices)
    if key not in _pools:
        _pools[key] = _RenewingPool(lambda: _local_pool(workers, devices))
    return _pools[key]


def _retire_pool(workers: int, devices: Sequence[str] | None) -> None:
    pool = _pools.pop(_pool_key(workers, devices), None)
    if pool is not None:
        pool.shutdown(wait=False, cancel_futures=True)


def close_pools() -> None:
    """Stop every kept pool's workers, to give their memory back (at exit, concurrent.futures stops them itself)."""
    while _pools:
        _pools.popitem()[1].shutdown(wait=True, cancel_futures=True)


def _job_name(desc: str, index: int, job: dict) -> str:
    text = repr(job)
    return f"{desc} #{index} {text if len(text) <= 160 else text[:157] + '...'}"


def run_parallel(
    function: Callable,
    jobs: Sequence[dict],
    *,
    workers: int | None = None,
    threads_per_worker: int = 1,
    devices: Sequence[str] | None = None,
    desc: str = "runs",
    executor=None,
    retries: int = RETRIES,
    names: Sequence[str] | None = None,
    missing: str = "raise",
    corpus_sha256: str | None = None,
) -> JobResults:
    """`[function(**job) for job in jobs]`, computed by `workers` processes or a cluster; a terminal progress bar
    counts jobs.

    `executor`: a `distributed.Client` or a concurrent.futures executor to send the jobs to (default: the one
    `NORMLAB_SCHEDULER` names, else this machine's pool). `names`: one per job, for `missing` (default: `desc`, the
    index and the job). `corpus_sha256`: the training bytes every job must load, refused otherwise (default: the
    study corpus this process has loaded, if it has).
    """
    jobs = list(jobs)
    if not all(isinstance(job, dict) for job in jobs):
        raise TypeError("each job must be a dict of keyword arguments for the function")
    if workers is not None and workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if threads_per_worker < 1:
        raise ValueError(f"threads_per_worker must be >= 1, got {threads_per_worker}")
    if retries < 0:
        raise ValueError(f"retries must be >= 0, got {retries}")
    if missing not in ("raise", "keep"):
        raise ValueError(f"missing must be 'raise' or 'keep', got {missing!r}")
    names = list(names) if names is not None else [_job_name(desc, i, job) for i, job in enumerate(jobs)]
    if len(names) != len(jobs) or len(set(names)) != len(names):
        repeated = sorted({name for name in names if names.count(name) > 1})
        raise ValueError(
            f"names must give each of the {len(jobs)} jobs its own name, got {len(names)} names"
            + (f", with {', '.join(map(repr, repeated))} more than once" if repeated else "")
        )
    if not jobs:
        return JobResults([], [], [])
    corpus_sha256 = corpus_sha256 or study_corpus_sha256()

    client = None
    if executor is None:
        from normlab.runtime.cluster import configured_scheduler

        scheduler = configured_scheduler()
        if scheduler:
            from normlab.runtime.cluster import connect

            client = executor = connect(scheduler)
    try:
        if executor is not None:
            if hasattr(executor, "get_executor"):  # a Dask Client
                from normlab.runtime.cluster import cluster_executor

                executor = cluster_executor(executor, gpu=bool(devices))
            settings = JobSettings(threads_per_worker, "cuda:0" if devices else "cpu", corpus_sha256, weights_folder())
            return _gather(executor, function, jobs, names, settings, retries, missing, desc, "on the cluster")
        workers = min(len(devices) if devices else (workers or default_workers()), len(jobs))
        if workers == 1 and not devices:
            # threads None: a job run in place keeps the caller's thread setting
            settings = JobSettings(None, None, corpus_sha256, weights_folder())
            return _gather(_InPlace(), function, jobs, names, settings, retries, missing, desc, "in this process")
        pool = _kept_pool(workers, devices)
        try:
            return _gather(
                pool,
                function,
                jobs,
                names,
                JobSettings(threads_per_worker, None, corpus_sha256, weights_folder()),
                retries,
                missing,
                desc,
                "in this machine's pool",
            )
        except MissingRuns:
            raise  # every job has ended: the workers are free
        except BaseException:
            # an interrupted call leaves jobs running in the workers: the next call must not queue behind them
            _retire_pool(workers, devices)
            raise
    finally:
        if client is not None:
            client.close()


def _gather(executor, function, jobs, names, settings, retries, missing, desc, where) -> JobResults:
    results: list = [None] * len(jobs)
    provenance: list = [None] * len(jobs)
    errors: list[list[str]] = [[] for _ in jobs]
    bar = terminal_progress(total=len(jobs), desc=desc)
    pending: dict = {}
    try:
        for index, job in enumerate(jobs):
            pending[executor.submit(run_job, function, job, settings)] = index
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                index = pending.pop(future)
                if isinstance(executor, _RenewingPool):
                    executor.settle(future)
                try:
                    outcome = future.result()
                except Exception as error:
                    errors[index].append(f"{type(error).__name__}: {error}")
                    if len(errors[index]) <= retries:
                        pending[executor.submit(run_job, function, jobs[index], settings)] = index
                    else:
                        results[index] = MissingRun(names[index], tuple(errors[index]))
                        bar.update()
                    continue
                results[index], provenance[index] = outcome.result, outcome.provenance
                bar.update()
    except BaseException:
        for future in pending:
            future.cancel()
        raise
    finally:
        bar.close()
    note_machines(provenance)
    gathered = JobResults(results, names, provenance, where)
    if gathered.missing and missing == "raise":
        raise MissingRuns(desc, gathered)
    return gathered
