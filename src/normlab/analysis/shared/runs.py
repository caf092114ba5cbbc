"""One training run as a picklable job, for `normlab.runtime.parallel.run_parallel`.

`train_job(model=..., train=...)` builds the configs from plain dicts, trains
on the study corpus and returns plain data (no model object unless asked
for its weights), so that worker processes can send it back. It runs on the
device the worker was pinned to (`normlab.runtime.parallel.worker_device`).

Its record is `normlab.gpt.run_record.run_record` (the study's one meaning of
"diverged", and `final_drop`, how much the loss still fell over the last 10%
of the steps), plus the step time, the requested history columns and, if
asked, the path of a file holding the weights (`job_record`). `final_drop` needs an evaluation at 90% of
the run, which `flat_eval_every` arranges.
"""

from __future__ import annotations

import math

import torch

from normlab.gpt.corpus import load_corpus
from normlab.gpt.model import GPTConfig
from normlab.gpt.run_record import run_record
from normlab.gpt.train import TrainConfig, train
from normlab.runtime.cluster import configured_scheduler
from normlab.runtime.jobs import save_weights
from normlab.runtime.parallel import worker_device


def training_devices(profile: str) -> list[str] | None:
    """The GPUs the trainings run on, one run per GPU; None (the CPU workers) outside the gpu profile. With a
    cluster set (`NORMLAB_SCHEDULER`), the GPUs are its workers', not this machine's: run_parallel sends each job to
    one of them, and refuses a cluster that has none."""
    if profile == "gpu" and configured_scheduler():
        return ["cuda:0"]  # each GPU worker sees its own GPU as cuda:0
    gpus = torch.cuda.device_count() if profile == "gpu" else 0
    if profile == "gpu" and not gpus:
        raise ValueError("the gpu profile needs CUDA; run with profile='cpu' on this machine")
    return [f"cuda:{i}" for i in range(gpus)] or None


def flat_eval_every(steps: int) -> int:
    """An evaluation interval that lands on 90% of `steps` (and on the end): steps/10, when that divides."""
    if steps < 10 or steps % 10:
        raise ValueError(
            f"steps must be a multiple of 10 (>= 10) so that an evaluation falls at 90% of the run, got {steps}"
        )
    return steps // 10


def train_job(model: dict, train: dict, *, keep_weights: bool = False, history_columns=("loss",)) -> dict:
    """Train GPTConfig(**model) with TrainConfig(**train) on the study corpus; return what the chapters read.

    Keys: final_val_loss, initial_val_loss, final_drop, diverged, steps_done, median_step_time, val (list of
    (step, val_loss)), history (the requested per-step columns; "prefix*" takes every column so named), corpus_sha256, and with
    `keep_weights` weights_path: the file holding the trained state_dict (`normlab.runtime.jobs.load_weights`).
    """
    corpus = load_corpus()
    device = train.get("device") or worker_device()
    tcfg = TrainConfig(**{"progress": False, **train, "device": device})
    return job_record(
        train_(GPTConfig(**model), tcfg, corpus), keep_weights=keep_weights, history_columns=history_columns
    )


def job_record(result, *, keep_weights: bool = False, history_columns=("loss",)) -> dict:
    """`run_record(result)` with the median step time, the requested history columns and, with `keep_weights`,
    the path of the trained state_dict: the record every chapter job returns, pool or batched. The weights go to a
    file (`normlab.runtime.jobs.save_weights`), not through the result's pickle."""
    out = {
        **run_record(result),
        "median_step_time": result.median_step_time() if result.history_rows else math.nan,
        "history": {
            c: result.history[c].tolist()
            for c in result.history.columns
            if c in history_columns or any(p.endswith("*") and c.startswith(p[:-1]) for p in history_columns)
        },
    }
    if keep_weights:
        out["weights_path"] = save_weights(result.model.state_dict())
    return out


train_ = train  # the job's keyword `train` shadows the function inside train_job
