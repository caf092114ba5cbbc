"""The Dask path's overhead beside this machine's pool: the same jobs through both, side by side, in one run.

Two kinds of job, each sent by `run_parallel` to the local pool (two spawned single-threaded workers, started by
the first call and kept for the next, as a chapter's calls keep them) and to a Dask `LocalCluster` of two
single-threaded worker processes (started once, before the timing, and printed apart):

- trainings: the quality chapter's smoke-size models (`train_job`), `--trainings` of them;
- empty jobs: `--empty` calls of a function that does nothing, which leaves only the cost of sending a job and
  gathering its result.

Each side runs `--rounds` times, in interleaved rounds (`normlab.runtime.interleaved.time_interleaved`, no warm-up),
and the medians are printed with their ratio (Dask / pool). The load average is printed too: on a shared machine the
numbers move with it.

    PYTHONPATH=src python scripts/dask_overhead.py [--trainings 8] [--steps 30] [--empty 200] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import time

from normlab.analysis.quality.profiles import NORMS, settings_for
from normlab.analysis.quality.training import model_config, train_config
from normlab.analysis.shared.runs import train_job
from normlab.runtime.interleaved import time_interleaved
from normlab.runtime.jobs import worker_device
from normlab.runtime.parallel import run_parallel

WORKERS = 2


def training_jobs(count: int, steps: int) -> list[dict]:
    s = {**settings_for("smoke"), "steps": steps, "warmup_steps": max(1, steps // 10)}
    return [dict(model=model_config(s, NORMS[i % 2]), train=train_config(s, i // 2)) for i in range(count)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trainings", type=int, default=8)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--empty", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    import distributed

    print(f"load average before: {os.getloadavg()[0]:.2f}")
    started = time.perf_counter()
    cluster = distributed.LocalCluster(n_workers=WORKERS, threads_per_worker=1, processes=True, dashboard_address=None)
    client = distributed.Client(cluster)
    print(f"Dask LocalCluster of {WORKERS} workers started in {time.perf_counter() - started:.2f} s (not timed below)")
    kinds = {
        "trainings": (train_job, training_jobs(args.trainings, args.steps)),
        "empty jobs": (worker_device, [dict(default="cpu")] * args.empty),
    }
    try:
        for kind, (function, jobs) in kinds.items():
            outputs = {}

            def through(side, function=function, jobs=jobs, **where):
                def send() -> None:
                    outputs[side] = run_parallel(function, jobs, desc="timing", **where)

                return send

            timed = time_interleaved(
                {"pool": through("pool", workers=WORKERS), "dask": through("dask", executor=client)},
                rounds=args.rounds,
                warmup=0,
            )
            pool, dask = timed.per_round("pool"), timed.per_round("dask")
            same = [strip(o) for o in outputs["pool"]] == [strip(o) for o in outputs["dask"]]
            (p, _), (d, _) = timed.median_and_sd("pool"), timed.median_and_sd("dask")
            print(
                f"{kind:>10} ({len(jobs)}): pool {p:6.2f} s  dask {d:6.2f} s  ratio dask/pool {d / p:.2f}  "
                f"(rounds: pool {', '.join(f'{x:.2f}' for x in pool)}; dask {', '.join(f'{x:.2f}' for x in dask)}; "
                f"same results: {same})"
            )
    finally:
        client.close()
        cluster.close()
    print(f"load average after: {os.getloadavg()[0]:.2f}")


def strip(output):
    """A result without its step timings, the only numbers that are not a function of the job."""
    return {k: v for k, v in output.items() if k != "median_step_time"} if isinstance(output, dict) else output


if __name__ == "__main__":
    main()
