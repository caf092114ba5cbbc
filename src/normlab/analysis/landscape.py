"""The normalisation landscape (V1-V4): one picklable training job and the measures the chapter reads.

`landscape_run(model=..., train=..., probe_every=..., drop_one=...)` trains
GPTConfig(**model) with TrainConfig(**train) on the study corpus through
`normlab.gpt.train.train` and returns plain data:

- the outcome (diverged / trained / final and initial validation loss, how
  much the loss still fell over the last 10% of the steps);
- per-layer hidden-state RMS through training (from train's stream table);
- per-layer gradient norms (before clipping, from train's history);
- with `probe_every`, the largest attention logit through training: the run is
  trained in segments of `probe_every` steps through train's own checkpoints,
  and the model is probed between segments. A resumed run reproduces the
  uninterrupted one exactly (the quality chapter tests this), so probing does
  not change the run;
- with `drop_one`, each block's contribution: the validation loss with that
  block replaced by the identity, minus the full model's.

The summaries (`usable_lr_range`, `later_half_share`, `growth_ratio`) are
pure functions of those records, tested on their own.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import torch

from normlab.gpt.corpus import load_corpus
from normlab.gpt.model import GPT, GPTConfig
from normlab.gpt.train import TrainConfig
from normlab.gpt.train import train as train_model
from normlab.runtime.parallel import worker_device

PROBE_SEED = 20_000  # probe batches: a generator of their own, apart from training and train's own evaluation


def probe_batches(corpus, cfg: GPTConfig, batch_size: int, count: int, device: str) -> list:
    generator = torch.Generator().manual_seed(PROBE_SEED)
    return [corpus.batch("val", batch_size, cfg.context, generator, device) for _ in range(count)]


@torch.no_grad()
def max_attention_logit(model: GPT, x: torch.Tensor) -> float:
    """Largest causal pre-softmax attention logit over all blocks and heads for input ids x."""
    was_training = model.training
    model.eval()
    with model.capture_max_attention_logit() as per_block:
        model(x)
    model.train(was_training)
    return float(max(per_block))


@torch.no_grad()
def drop_one_losses(model: GPT, batches) -> list[float]:
    """Validation loss with each block in turn replaced by the identity, minus the full model's (nats)."""
    was_training = model.training
    model.eval()

    def loss() -> float:
        return sum(float(model(x, y)[1]) for x, y in batches) / len(batches)

    full = loss()
    changes = []
    for block in model.blocks:
        handle = block.register_forward_hook(lambda module, args, output: args[0])
        try:
            changes.append(loss() - full)
        finally:
            handle.remove()
    model.train(was_training)
    return changes


def _train_probed(mcfg: GPTConfig, tcfg: TrainConfig, corpus, every: int, probe) -> tuple:
    """Train in segments of `every` steps through checkpoints; `probe(model, step)` between segments."""
    trace = []
    with tempfile.TemporaryDirectory() as folder:
        segmented = replace(
            tcfg, checkpoint_path=str(Path(folder) / "run.ckpt"), checkpoint_every=0, interrupt_after=every
        )
        while True:
            result = train_model(mcfg, segmented, corpus)
            trace.append(probe(result.model, result.steps_done))
            if not result.interrupted:
                return result, trace


def landscape_run(
    model: dict,
    train: dict,
    *,
    probe_every: int = 0,
    drop_one: bool = False,
    probe_batch: int = 8,
    probe_count: int = 4,
    tag: dict | None = None,
) -> dict:
    corpus = load_corpus()
    device = train.get("device") or worker_device()
    tcfg = TrainConfig(**{**train, "progress": False, "device": device})
    mcfg = GPTConfig(**model)
    batches = probe_batches(corpus, mcfg, probe_batch, probe_count, device)
    if probe_every:

        def probe(net, step):
            return {"step": step, "max_logit": max_attention_logit(net, batches[0][0])}

        initial = {"step": 0, "max_logit": max_attention_logit(_initial_model(mcfg, tcfg, device), batches[0][0])}
        result, trace = _train_probed(mcfg, tcfg, corpus, probe_every, probe)
        trace = [initial] + trace
    else:
        result, trace = train_model(mcfg, tcfg, corpus), []
    val = result.val
    losses = val["val_loss"].tolist()
    steps = val["step"].tolist()
    final = float(losses[-1]) if losses else math.nan
    diverged = bool(result.diverged) or not math.isfinite(final) or (len(losses) > 1 and final > losses[0])
    history = result.history
    grad_columns = sorted(
        (c for c in history.columns if c.startswith("grad_norm/blocks.")), key=lambda c: int(c.split(".")[-1])
    )
    out = {
        "tag": tag or {},
        "model": model,
        "train": {k: v for k, v in train.items() if k != "device"},
        "diverged": diverged,
        "trained": (not diverged) and final < corpus.unigram_entropy_nats,
        "final_val_loss": final,
        "initial_val_loss": float(losses[0]) if losses else math.nan,
        "final_drop": _final_drop(steps, losses, tcfg.steps) if not diverged else math.nan,
        "steps_done": int(result.steps_done),
        "median_step_time": result.median_step_time() if len(history) else math.nan,
        "val": list(zip(map(int, steps), map(float, losses))),
        "stream_rms": [
            (int(s), int(layer), float(rms))
            for s, layer, rms in zip(result.stream["step"], result.stream["layer"], result.stream["rms"])
        ],
        "grad_norms": [[float(v) for v in row] for row in history[grad_columns].to_numpy()] if grad_columns else [],
        "max_logit": trace,
        "drop_one": drop_one_losses(result.model, batches) if drop_one and not diverged else None,
        "corpus_sha256": corpus.sha256,
    }
    return out


def _initial_model(mcfg: GPTConfig, tcfg: TrainConfig, device: str) -> GPT:
    torch.manual_seed(tcfg.seed)
    return GPT(mcfg).to(device)


def _final_drop(steps: Sequence[int], losses: Sequence[float], total: int) -> float:
    """Validation loss at (about) 90% of the run minus at its end: how much it still fell at the end."""
    if not steps or steps[-1] != total:
        return math.nan
    mark = min(steps, key=lambda s: abs(s - 0.9 * total))
    if mark == total:
        return math.nan
    return float(losses[steps.index(mark)] - losses[-1])


# ---- summaries ------------------------------------------------------------------------------------------


def usable_lr_range(lrs: Sequence[float], trained: Sequence[bool]) -> dict:
    """The contiguous run of trained learning rates around the best-known one, on a sorted grid.

    Returns the lowest and highest usable LR, the span in decades, and the lowest LR at
    which the run failed above the usable range (None when none failed above it).
    """
    if len(lrs) != len(trained) or not lrs:
        raise ValueError("usable_lr_range needs one trained flag per learning rate, and at least one")
    pairs = sorted(zip(map(float, lrs), map(bool, trained)))
    ok = [lr for lr, t in pairs if t]
    if not ok:
        return {"lr_low": None, "lr_high": None, "decades": 0.0, "fails_at": pairs[0][0], "fraction_trained": 0.0}
    low = high = ok[0]
    for lr, t in pairs:
        if lr < low:
            continue
        if not t:
            break
        high = lr
    above = [lr for lr, t in pairs if lr > high and not t]
    return {
        "lr_low": low,
        "lr_high": high,
        "decades": math.log10(high / low),
        "fails_at": above[0] if above else None,
        "fraction_trained": sum(t for _, t in pairs) / len(pairs),
    }


def growth_ratio(stream_rms: Sequence[tuple], step: int | None = None) -> float:
    """Hidden RMS after the last block over that after the first block, at `step` (default: the last one)."""
    if not stream_rms:
        raise ValueError("no stream statistics recorded")
    step = max(s for s, _, _ in stream_rms) if step is None else step
    layers = {layer: rms for s, layer, rms in stream_rms if s == step}
    if len(layers) < 3:
        raise ValueError(f"need the stream at >= 2 blocks at step {step}, got layers {sorted(layers)}")
    return layers[max(layers)] / layers[1]


def later_half_share(drop_one: Sequence[float]) -> float:
    """Share of the total drop-one loss increase that the later half of the blocks accounts for."""
    values = [max(float(v), 0.0) for v in drop_one]  # a block whose removal helps contributes nothing
    if len(values) < 2:
        raise ValueError("need at least two blocks")
    total = sum(values)
    if total <= 0:
        return math.nan
    return sum(values[len(values) // 2 :]) / total


def paired_or_none(a: Sequence[float], b: Sequence[float], margin: float) -> dict | None:
    """`paired_difference(a, b, margin)`, or None when a run diverged or fewer than two pairs exist
    (the caller reports that instead of averaging a non-finite loss)."""
    from normlab.analysis.shared.paired import paired_difference

    if len(a) < 2 or len(a) != len(b) or not all(math.isfinite(v) for v in list(a) + list(b)):
        return None
    return paired_difference(a, b, margin)


def non_inferiority(paired: dict | None) -> str:
    """Reads a paired interval of (variant − baseline) loss against +margin: 'no worse' when the whole
    interval lies below +margin, 'worse' when it lies at or above it, else 'undecided'."""
    if paired is None:
        return "undecided"
    if paired["ci_high"] < paired["margin"]:
        return "no worse"
    if paired["ci_low"] >= paired["margin"]:
        return "worse"
    return "undecided"


def usable_flags(final_losses: Sequence[float], diverged: Sequence[bool], best: float, tolerance: float) -> list[bool]:
    """A run is usable when it did not diverge and ended within `tolerance` nats of `best`."""
    if tolerance <= 0:
        raise ValueError(f"tolerance must be > 0 nats, got {tolerance}")
    return [(not d) and math.isfinite(v) and v <= best + tolerance for v, d in zip(final_losses, diverged)]


def block_gradient_scale(model: GPT, x: torch.Tensor, y: torch.Tensor) -> float:
    """Mean |gradient| over the blocks' weight matrices for one batch, the model left as it was.

    AdamW divides each gradient by its running RMS plus eps (1e-8 in torch): a gradient near eps is damped rather
    than normalised, so this number, at initialisation, says whether the blocks can start learning at all."""
    matrices = [p for name, p in model.named_parameters() if name.startswith("blocks.") and p.dim() >= 2]
    if not matrices:
        raise ValueError("the model has no block weight matrices to measure")
    grads = torch.autograd.grad(model(x, y)[1], matrices)
    total = sum(float(g.detach().abs().double().sum()) for g in grads)
    return total / sum(p.numel() for p in matrices)


def dyt_saturation(model: GPT, x: torch.Tensor, y: torch.Tensor) -> dict:
    """Where a DyT model sits on tanh's curve: per DyT layer, the share of its inputs at which float32's
    tanh'(αx) = 1 − tanh²(αx) is exactly 0, and the mean |gradient| then reaching the blocks' matrices.

    A DyT layer whose every input is saturated passes no gradient at all to what lies below it; when that
    layer is the final one, only the final layer's own parameters and the output head can still learn.
    """
    from normlab.norms.dyt import DyT

    shares: dict[str, float] = {}
    hooks = []
    for name, module in model.named_modules():
        if isinstance(module, DyT):

            def record(mod, inputs, output, name=name):
                z = mod.alpha.detach().float() * inputs[0].detach().float()
                shares[name] = float((1 - torch.tanh(z) ** 2 == 0).float().mean())

            hooks.append(module.register_forward_hook(record))
    if not hooks:
        raise ValueError("dyt_saturation needs a model with DyT layers (norm='dyt')")
    try:
        gradient = block_gradient_scale(model, x, y)
    finally:
        for hook in hooks:
            hook.remove()
    return {"saturated_share": shares, "block_gradient": gradient}


def trained_dyt_saturation(model: dict, train: dict, probe_batch: int = 8) -> dict:
    """Train GPTConfig(**model) as the chapter does, then measure `dyt_saturation` on a validation batch."""
    from normlab.gpt.corpus import load_corpus
    from normlab.gpt.train import TrainConfig
    from normlab.gpt.train import train as train_model

    corpus = load_corpus()
    mcfg = GPTConfig(**model)
    tcfg = TrainConfig(**{"progress": False, **train, "device": "cpu"})
    result = train_model(mcfg, tcfg, corpus)
    x, y = probe_batches(corpus, mcfg, probe_batch, 1, "cpu")[0]
    return {**dyt_saturation(result.model, x, y), "final_val_loss": result.final_val_loss}
