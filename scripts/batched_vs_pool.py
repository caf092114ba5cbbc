"""Time K RMSNorm/LayerNorm pairs trained as one (normlab.gpt.batched) against today's two-worker pool.

The pool is what the quality chapter runs: `run_parallel(train_job, ...)`, one single-threaded training per
core. All sides train the quality chapter's models (its `cpu` profile, and a smaller size)
with the chapter's training settings, except for fewer steps, so that the comparison takes minutes.

Three sides per size: the pool; every pair as one in this process on one thread (half the pool's cores);
and the pairs split between two pool workers, each training its share as one (the pool's cores). Printed:
model-steps per second over the whole call (process start, evaluations and all) and in the steady state
(from the median step time), and each side's ratio to the pool. The machine's load average is printed
too: on a shared machine the numbers move with it.

    PYTHONPATH=src python scripts/batched_vs_pool.py [--steps 30] [--pairs 6] [--sizes cpu,small]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from normlab.analysis.quality import profiles, training
from normlab.analysis.shared.runs import train_job
from normlab.gpt.batched import paired_members, train_batched
from normlab.gpt.corpus import load_corpus
from normlab.gpt.model import GPTConfig
from normlab.gpt.train import TrainConfig
from normlab.runtime.parallel import run_parallel

WORKERS = 2  # the pool the chapter runs on the study's 2-core machine
SMALLER = dict(width=32, depth=2, heads=4, context=32, batch_size=8)  # the quality chapter's smoke size


def settings(size: str, steps: int, pairs: int) -> dict:
    base = dict(profiles.settings_for("cpu"))
    if size == "small":
        base.update(SMALLER)
    # warm-up scaled with the steps, as the profile's 60 of 600
    return {**base, "steps": steps, "warmup_steps": max(1, steps // 10), "seeds": pairs}


def time_pool(s: dict) -> dict:
    jobs = [
        dict(model=training.model_config(s, norm), train=training.train_config(s, seed))
        for seed in range(s["seeds"])
        for norm in profiles.NORMS
    ]
    started = time.perf_counter()
    outputs = run_parallel(train_job, jobs, workers=WORKERS, desc="pool")
    wall = time.perf_counter() - started
    median_step = statistics.median(out["median_step_time"] for out in outputs)
    return {
        "models": len(jobs),
        "wall_s": wall,
        "steps_per_s": len(jobs) * s["steps"] / wall,
        # WORKERS trainings in flight at once, each at its median step time
        "steady_steps_per_s": WORKERS / median_step,
    }


def _batched_config(s: dict, pair_seeds: list[int]) -> tuple[list[GPTConfig], list[int], TrainConfig]:
    configs, seeds = paired_members(GPTConfig(**training.model_config(s, "rms")), pair_seeds, norms=profiles.NORMS)
    return configs, seeds, TrainConfig(**{**training.train_config(s, 0), "progress": False})


def batched_job(s: dict, pair_seeds: list[int]) -> dict:
    """Train these pairs as one in this process (a pool worker: one thread); a job for run_parallel."""
    configs, seeds, train_config = _batched_config(s, pair_seeds)
    out = train_batched(configs, train_config, load_corpus(), seeds)
    return {"models": len(configs), "median_step_time": out.median_step_time()}


def time_batched(s: dict, corpus) -> dict:
    """Every pair as one, in this process, on one thread."""
    configs, seeds, train_config = _batched_config(s, list(range(s["seeds"])))
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        started = time.perf_counter()
        out = train_batched(configs, train_config, corpus, seeds)
        wall = time.perf_counter() - started
    finally:
        torch.set_num_threads(before)
    return {
        "models": len(configs),
        "wall_s": wall,
        "steps_per_s": len(configs) * s["steps"] / wall,
        "steady_steps_per_s": len(configs) / out.median_step_time(),
    }


def time_batched_pool(s: dict) -> dict:
    """The pairs split between the pool's workers, each worker training its share as one (same cores as the pool)."""
    pair_seeds = list(range(s["seeds"]))
    shares = [pair_seeds[w::WORKERS] for w in range(WORKERS) if pair_seeds[w::WORKERS]]
    started = time.perf_counter()
    outputs = run_parallel(
        batched_job, [dict(s=s, pair_seeds=share) for share in shares], workers=WORKERS, desc="batched pool"
    )
    wall = time.perf_counter() - started
    models = sum(out["models"] for out in outputs)
    return {
        "models": models,
        "wall_s": wall,
        "steps_per_s": models * s["steps"] / wall,
        "steady_steps_per_s": sum(out["models"] / out["median_step_time"] for out in outputs),
    }


def load() -> str:
    try:
        return " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="training steps per model (a multiple of 10)")
    parser.add_argument(
        "--pairs", type=int, default=profiles.settings_for("cpu")["seeds"], help="RMSNorm/LayerNorm pairs"
    )
    parser.add_argument("--sizes", default="cpu,small", help="comma-separated: cpu (the profile's model), small")
    args = parser.parse_args()
    corpus = load_corpus()
    print(f"{os.cpu_count()} CPUs, load average before: {load()}")
    for size in args.sizes.split(","):
        s = settings(size, args.steps, args.pairs)
        shape = {k: s[k] for k in ("width", "depth", "heads", "context", "batch_size")}
        sides = {
            "pool, 2 workers": time_pool(s),
            "batched, 1 process": time_batched(s, corpus),
            "batched, 2 workers": time_batched_pool(s),
        }
        pool = sides["pool, 2 workers"]
        print(f"\n{size}: {shape}, {args.pairs} pairs x {args.steps} steps; load average now {load()}")
        print(
            f"  {'':22s}{'steps/s, whole call':>21s}{'steps/s, steady':>17s}{'wall s':>9s}{'vs pool (whole, steady)':>26s}"
        )
        for name, side in sides.items():
            ratios = f"{side['steps_per_s'] / pool['steps_per_s']:.2f}, {side['steady_steps_per_s'] / pool['steady_steps_per_s']:.2f}"
            print(
                f"  {name:22s}{side['steps_per_s']:21.1f}{side['steady_steps_per_s']:17.1f}{side['wall_s']:9.1f}{ratios:>26s}"
            )
    print(f"\nload average after: {load()}")


if __name__ == "__main__":
    main()
