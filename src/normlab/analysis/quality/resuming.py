"""Section "Interrupting and resuming": a training interrupted and resumed from a checkpoint against the
same training run straight through."""

from __future__ import annotations

import tempfile
from pathlib import Path

from normlab.analysis.quality.training import model_config
from normlab.gpt.model import GPTConfig
from normlab.gpt.train import TrainConfig, train


def resume_check(settings: dict, device: str, corpus, steps: int = 20, tolerance: float = 1e-6) -> dict:
    """Train once straight through and once interrupted and resumed from a checkpoint: the largest |loss
    difference| per step, and whether the resumed run has every step, in order, within `tolerance`."""
    resume_steps = min(steps, settings["steps"])
    config = dict(
        steps=resume_steps,
        batch_size=settings["batch_size"],
        lr=settings["lr"],
        warmup_steps=2,
        eval_every=5,
        eval_batches=2,
        stream_every=0,
        seed=7,
        device=device,
        progress=False,
    )
    model = GPTConfig(**model_config(settings, "rms"))
    whole = train(model, TrainConfig(**config), corpus)
    with tempfile.TemporaryDirectory() as folder:
        checkpoint = str(Path(folder) / "resume.ckpt")
        interrupted = TrainConfig(
            **config, checkpoint_path=checkpoint, checkpoint_every=5, interrupt_after=resume_steps // 2 + 1
        )
        train(model, interrupted, corpus)
        resumed = train(model, TrainConfig(**config, checkpoint_path=checkpoint, checkpoint_every=5), corpus)
    difference = float((whole.history.loss - resumed.history.loss).abs().max())
    in_order = resumed.history.step.tolist() == list(range(1, resume_steps + 1))
    return {"difference": difference, "matches": in_order and difference <= tolerance}


def resume_paragraph(resume: dict) -> str:
    return (
        f"Largest |loss difference| between the uninterrupted and the resumed run: {resume['difference']:.3g} nats per byte; "
        f"steps complete and in order: {'yes' if resume['matches'] else '**no**'}."
    )
