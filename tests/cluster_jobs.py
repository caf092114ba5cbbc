"""Jobs for tests/test_cluster.py, in a module of their own so that worker processes import them by name."""

import os
import time
from pathlib import Path

from normlab.analysis.shared.runs import train_job

# A chapter's training, as small as it comes: one layer, 16 wide, ten steps.
TINY_MODEL = dict(vocab_size=256, context=16, width=16, depth=1, heads=2)
TINY_TRAIN = dict(steps=10, batch_size=4, warmup_steps=1, eval_every=1, eval_batches=1, stream_every=0)


def tiny_training(seed: int) -> dict:
    """The chapter's `train_job` on the tiny configuration, without its step timings (the only numbers that
    are not a function of the job)."""
    out = train_job(model=TINY_MODEL, train={**TINY_TRAIN, "seed": seed})
    del out["median_step_time"]
    return out


def square(x: int) -> int:
    return x * x


def always_fails(x: int) -> int:
    raise RuntimeError(f"job {x} fails every time")


def dies_once(marker: str, x: int) -> dict:
    """Kills its own process (a node lost mid-run) the first time it is called with this marker, then trains."""
    if not Path(marker).exists():
        Path(marker).write_text("died once\n")
        os._exit(1)
    return tiny_training(x)


def records_the_run(marker: str) -> int:
    Path(marker).write_text("ran\n")
    return 0


def build_other_corpus(folder: str | None) -> None:
    """Make this process read the standard library from `folder` (a worker whose Python has other sources), or,
    with None, from its own again."""
    from normlab.gpt import corpus

    original = getattr(corpus, "_original_module_source", corpus.module_source)
    corpus._original_module_source = original
    corpus.module_source = original if folder is None else lambda name: Path(folder) / f"{name}.py"
    corpus.load_corpus.cache_clear()


def kills_its_worker_once(marker: str, seed: int) -> dict:
    """Ends its worker process abruptly (the OOM killer, a lost node) the first time it runs with this marker, then
    trains with its weights kept."""
    if not Path(marker).exists():
        Path(marker).write_text("killed its worker once\n")
        os._exit(1)
    return kept_weights(seed)


def kept_weights(seed: int) -> dict:
    """The tiny training with its weights kept: the record holds their file's path, not the weights."""
    out = train_job(model=TINY_MODEL, train={**TINY_TRAIN, "seed": seed}, keep_weights=True)
    del out["median_step_time"]
    return out


def worker_pid(x: int) -> int:
    return os.getpid()


def waits_for(marker: str, x: int) -> int:
    """Runs until `marker` exists: a job still busy when its call is interrupted."""
    while not Path(marker).exists():
        time.sleep(0.05)
    return x
