"""One training run as a picklable job, for `normlab.runtime.parallel.run_parallel`.

`train_job(model=..., train=...)` builds the configs from plain dicts, trains
on the study corpus and returns plain data (no model object unless asked
for its weights), so that worker processes can send it back. It runs on the
device the worker was pinned to (`normlab.runtime.parallel.worker_device`).

`final_drop` is how much the validation loss still fell over the last 10% of
the steps: a run whose loss has flattened has a drop near zero, one cut
short a large one. It needs an evaluation at 90% of the run, which
`flat_eval_every` arranges.
"""

from __future__ import annotations

import math

import torch

from normlab.gpt.corpus import load_corpus
from normlab.gpt.model import GPTConfig
from normlab.gpt.train import TrainConfig, train
from normlab.runtime.cluster import configured_scheduler
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


def final_drop(val, steps: int) -> float:
    """Validation loss at 90% of the run minus at its end (nats): how much it still fell at the end."""
    at = dict(zip(val["step"].tolist(), val["val_loss"].tolist()))
    mark = int(round(0.9 * steps))
    if mark not in at or steps not in at:
        return math.nan
    return float(at[mark] - at[steps])


def train_job(model: dict, train: dict, *, keep_weights: bool = False, history_columns=("loss",)) -> dict:
    """Train GPTConfig(**model) with TrainConfig(**train) on the study corpus; return what the chapters read.

    Keys: final_val_loss, initial_val_loss, final_drop, diverged, steps_done, median_step_time, val (list of
    (step, val_loss)), history (the requested per-step columns; "prefix*" takes every column so named), corpus_sha256, and with
    `keep_weights` the trained state_dict (on CPU).
    """
    corpus = load_corpus()
    device = train.get("device") or worker_device()
    tcfg = TrainConfig(**{"progress": False, **train, "device": device})
    mcfg = GPTConfig(**model)
    result = train_(mcfg, tcfg, corpus)
    val = result.val
    out = {
        "final_val_loss": result.final_val_loss,
        "initial_val_loss": float(val["val_loss"].iloc[0]) if len(val) else math.nan,
        "final_drop": final_drop(val, tcfg.steps) if not result.diverged else math.nan,
        "diverged": bool(result.diverged) or not math.isfinite(result.final_val_loss),
        "steps_done": int(result.steps_done),
        "median_step_time": result.median_step_time() if len(result.history) else math.nan,
        "val": [(int(s), float(v)) for s, v in zip(val["step"], val["val_loss"])],
        "history": {
            c: result.history[c].tolist()
            for c in result.history.columns
            if c in history_columns or any(p.endswith("*") and c.startswith(p[:-1]) for p in history_columns)
        },
        "corpus_sha256": result.corpus_sha256,
    }
    if keep_weights:
        out["state_dict"] = {k: v.detach().cpu() for k, v in result.model.state_dict().items()}
    return out


train_ = train  # the job's keyword `train` shadows the function inside train_job
