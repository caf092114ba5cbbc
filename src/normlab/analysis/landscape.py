"""The normalisation landscape (V1-V4): the chapter's runs, the measures it reads, and its findings.

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

The chapter's profiles (`PROFILES`), its jobs (`landscape_jobs`, `run_jobs`) and the lookups its analyses share
(`Landscape`: pick runs, pair them by seed, usable learning-rate ranges) follow; then one function per claim
(`dyt_claim`, `placement_claim`, `qk_claim`, `depth_claim`), each returning a `ClaimOutcome`: the `Finding` the
chapter records and the verdict paragraph it shows, judged against the margins the chapter passes in.
"""

from __future__ import annotations

import copy
import math
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from normlab.gpt.corpus import load_corpus
from normlab.gpt.model import GPT, GPTConfig
from normlab.gpt.train import TrainConfig, compare_step_times
from normlab.gpt.train import train as train_model
from normlab.runtime.parallel import run_parallel, worker_device
from normlab.study.findings import Finding
from normlab.study.present import significant
from normlab.study.results import decide

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


# ---- the chapter's profiles and runs ---------------------------------------------------------------------

PROFILES = {
    # seconds: proves the pipeline, not the claims
    "smoke": dict(
        small=dict(width=16, depth=2, heads=2, context=16),
        small_train=dict(steps=20, batch_size=4, warmup_steps=2, lr=1e-2),
        lr_grid=[1e-2, 1e-1],
        seeds=2,
        grid_seeds=1,
        deep_grid_seeds=1,
        alphas=[0.5, 2.0],
        alpha_widths=[16, 32],
        deep=dict(width=16, depth=3, heads=2, context=16),
        deep_train=dict(steps=20, batch_size=4, warmup_steps=2, lr=1e-2),
        deep_lr_grid=[1e-2, 1e-1],
        deepest=dict(width=16, depth=4, heads=2, context=16),
        deepest_train=dict(steps=20, batch_size=4, warmup_steps=2, lr=1e-2),
        timing_repeats=3,
        workers=None,
        devices=None,
    ),
    # 2 CPU cores: sized for under 12 minutes on a quiet machine, both cores busy with one-thread runs (77 runs:
    # 68 measured about 7 minutes' worth, and the second DyT variant adds 9 of the cheapest, small runs; a first
    # sizing with 96 runs at 200-250 steps and 24 blocks measured about 15 minutes' worth)
    "cpu": dict(
        small=dict(width=64, depth=4, heads=4, context=64),
        small_train=dict(steps=200, batch_size=16, warmup_steps=20, lr=5e-3),
        lr_grid=[5e-3, 1.5e-2, 5e-2, 1.5e-1],
        seeds=3,
        grid_seeds=2,
        deep_grid_seeds=1,
        alphas=[0.1, 0.5, 2.0],
        alpha_widths=[32, 64],
        deep=dict(width=32, depth=12, heads=4, context=64),
        deep_train=dict(steps=150, batch_size=16, warmup_steps=15, lr=5e-3),
        deep_lr_grid=[5e-3, 1.5e-2, 5e-2],
        deepest=dict(width=32, depth=16, heads=4, context=64),
        deepest_train=dict(steps=150, batch_size=16, warmup_steps=15, lr=5e-3),
        timing_repeats=15,
        workers=None,
        devices=None,
    ),
    # one H200, sized for about 10 minutes: eight one-thread worker processes share the GPU (these models are
    # far too small to fill it alone); the same design at 4-8x the width and 2-3x the steps
    "gpu": dict(
        small=dict(width=256, depth=6, heads=4, context=128),
        small_train=dict(steps=600, batch_size=32, warmup_steps=60, lr=3e-3),
        lr_grid=[1e-3, 3e-3, 1e-2, 3e-2, 1e-1],
        seeds=4,
        grid_seeds=2,
        deep_grid_seeds=2,
        alphas=[0.1, 0.25, 0.5, 1.0, 2.0],
        alpha_widths=[128, 256],
        deep=dict(width=128, depth=16, heads=4, context=128),
        deep_train=dict(steps=500, batch_size=32, warmup_steps=50, lr=3e-3),
        deep_lr_grid=[1e-3, 3e-3, 1e-2, 3e-2],
        deepest=dict(width=128, depth=32, heads=4, context=128),
        deepest_train=dict(steps=500, batch_size=32, warmup_steps=50, lr=3e-3),
        timing_repeats=30,
        workers=None,
        devices=["cuda:0"] * 8,
    ),
}

# "dyt" is the DyT authors' recipe for language models (a learnable sqrt(width) scale on the embeddings, the model's
# default with norm="dyt"); "dyt-plain" is DyT dropped in for every norm and nothing else.
SMALL_VARIANTS = {
    "rms": dict(norm="rms"),
    "layer": dict(norm="layer"),
    "dyt": dict(norm="dyt"),
    "dyt-plain": dict(norm="dyt", embedding_scale=False),
    "rms+qk": dict(qk_norm=True),
}
PLACEMENTS = ("pre", "post", "peri", "post-sublayer")
SCALES = ("small", "deep", "deepest")
SCALE_COST = {"small": 1, "deep": 3, "deepest": 6}  # relative run time, to start the longest runs first


def profile_settings(profile: str) -> dict:
    """The profile's settings (a copy), checked for what the chapter's design needs."""
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {sorted(PROFILES)}, got {profile!r}")
    settings = copy.deepcopy(PROFILES[profile])
    for scale, grid_name in (("small", "lr_grid"), ("deep", "deep_lr_grid")):
        if settings[f"{scale}_train"]["lr"] not in settings[grid_name]:
            raise ValueError(f"profile {profile!r}: the {scale} reference learning rate must lie on {grid_name}")
    if settings["seeds"] < 2 or max(settings["grid_seeds"], settings["deep_grid_seeds"]) > settings["seeds"]:
        raise ValueError("paired intervals need at least 2 seeds, and grid seeds <= seeds")
    if profile != "smoke" and settings["deep"]["depth"] < 12:
        raise ValueError("V2 needs at least 12 blocks, where placement matters")
    return settings


def _train_dict(settings: dict, scale: str, **extra) -> dict:
    base = dict(settings[f"{scale}_train"])
    steps = base["steps"]
    # eval every tenth of the run: the 90% point shows how much the loss still fell at the end
    return {**base, "eval_every": steps // 10, "stream_every": steps // 10, "eval_batches": 4, **extra}


def _job(settings: dict, device: str, scale: str, label: str, model: dict, *, lr=None, seed=0, **options) -> dict:
    train = _train_dict(settings, scale, seed=seed)
    if lr is not None:
        train["lr"] = lr
    if device != "cpu":
        train["device"] = device
    return dict(
        model={**settings[scale], **model},
        train=train,
        tag=dict(scale=scale, label=label, lr=train["lr"], seed=seed, **{k: v for k, v in model.items()}),
        **options,
    )


def _grid_jobs(settings, device, scale, label, model, grid, grid_seeds, **options) -> list[dict]:
    """Every seed at the reference learning rate, and the first `grid_seeds` seeds at the rest of the grid."""
    ref = settings[f"{scale}_train"]["lr"]
    out = [_job(settings, device, scale, label, model, lr=ref, seed=s, **options) for s in range(settings["seeds"])]
    out += [
        _job(settings, device, scale, label, model, lr=lr, seed=s, **options)
        for lr in grid
        if lr != ref
        for s in range(grid_seeds)
    ]
    return out


def landscape_jobs(settings: dict, device: str = "cpu") -> list[dict]:
    """Every training run of the chapter, as keyword arguments of `landscape_run`, in the chapter's order."""
    small_steps = settings["small_train"]["steps"]
    jobs = []
    for label, model in SMALL_VARIANTS.items():
        probe = small_steps // 10 if label in ("rms", "rms+qk") else 0
        jobs += _grid_jobs(
            settings, device, "small", label, model, settings["lr_grid"], settings["grid_seeds"], probe_every=probe
        )
    for width in settings["alpha_widths"]:
        widths = dict(width=width)
        if width != settings["small"]["width"]:
            jobs.append(_job(settings, device, "small", "rms", {"norm": "rms", **widths}))
        for alpha in settings["alphas"]:
            if width != settings["small"]["width"] or alpha != 0.5:
                jobs.append(_job(settings, device, "small", "dyt", {"norm": "dyt", "dyt_alpha": alpha, **widths}))
    for placement in PLACEMENTS:
        jobs += _grid_jobs(
            settings,
            device,
            "deep",
            placement,
            dict(placement=placement),
            settings["deep_lr_grid"],
            settings["deep_grid_seeds"],
        )
    for scaled in (False, True):
        jobs += [
            _job(
                settings,
                device,
                "deepest",
                "1/√l" if scaled else "pre",
                dict(depth_scaling=scaled),
                seed=s,
                drop_one=True,
            )
            for s in range(settings["seeds"])
        ]
    return jobs


def run_jobs(jobs: list[dict], settings: dict) -> list[dict]:
    """Run every job in parallel worker processes, longest first (so that no core idles at the end waiting on
    one deep run), and return the records in the jobs' order."""
    order = sorted(range(len(jobs)), key=lambda i: -SCALE_COST[jobs[i]["tag"]["scale"]])
    outputs = run_parallel(
        landscape_run,
        [jobs[i] for i in order],
        workers=settings["workers"],
        devices=settings["devices"],
        desc="landscape runs",
    )
    runs = [None] * len(jobs)
    for i, out in zip(order, outputs):
        runs[i] = out
    if len({r["corpus_sha256"] for r in runs}) != 1:
        raise RuntimeError("runs saw different corpora")
    return runs


# ---- the lookups every analysis shares -------------------------------------------------------------------


def frame_of(runs: list[dict]) -> pd.DataFrame:
    """One row per run: its scale, label, learning rate, seed, width, DyT's α₀, and its outcome."""
    rows = []
    for r in runs:
        t = r["tag"]
        rows.append(
            {
                "scale": t["scale"],
                "label": t["label"],
                "lr": t["lr"],
                "seed": t["seed"],
                "width": r["model"]["width"],
                "alpha": r["model"].get("dyt_alpha", 0.5) if t["label"].startswith("dyt") else None,
                "final": r["final_val_loss"],
                "diverged": r["diverged"],
                "final_drop": r["final_drop"],
                "step_time": r["median_step_time"],
            }
        )
    return pd.DataFrame(rows)


def finals(runs: list[dict]) -> list[float]:
    """Final validation losses, NaN for a run that diverged."""
    return [r["final_val_loss"] if not r["diverged"] else math.nan for r in runs]


def range_summary(ranges: dict, label: str) -> dict:
    """The usable learning-rate range of `label` over its grid seeds: the narrowest (lowest top, lowest bottom),
    and the lowest learning rate at which any seed failed above its range."""
    highs = [v["lr_high"] for (lab, _), v in ranges.items() if lab == label and v["lr_high"]]
    lows = [v["lr_low"] for (lab, _), v in ranges.items() if lab == label and v["lr_low"]]
    fails = [v["fails_at"] for (lab, _), v in ranges.items() if lab == label]
    return {
        "lr_low": min(lows) if lows else None,
        "lr_high": min(highs) if highs else None,
        "diverges_at": min([f for f in fails if f is not None], default=None),
        "decades": math.log10(min(highs) / min(lows)) if highs and lows else 0.0,
    }


class Landscape:
    """The chapter's runs, with the margins stated before measuring, and the lookups its analyses share."""

    def __init__(self, settings: dict, runs: list[dict], corpus, *, loss_margin: float, usable_tolerance: float):
        self.settings = settings
        self.runs = runs
        self.entropy = corpus.unigram_entropy_nats
        self.corpus_sha256 = corpus.sha256
        self.loss_margin = loss_margin
        self.usable_tolerance = usable_tolerance
        self.frame = frame_of(runs)

    def pick(self, scale: str, label: str, lr=None, width=None, alpha=None) -> list[dict]:
        """The runs of one variant at one learning rate, width and α₀ (defaults: the scale's reference), by seed."""
        lr = self.settings[f"{scale}_train"]["lr"] if lr is None else lr
        width = self.settings[scale]["width"] if width is None else width
        keep = []
        for r in self.runs:
            t = r["tag"]
            if (
                t["scale"] == scale
                and t["label"] == label
                and t["lr"] == lr
                and r["model"]["width"] == width
                and r["model"].get("dyt_alpha", 0.5) == (0.5 if alpha is None else alpha)
            ):
                keep.append(r)
        return sorted(keep, key=lambda r: r["tag"]["seed"])

    def versus(self, scale: str, baseline: str, variant: str, **kw) -> dict | None:
        """Paired final-loss difference variant − baseline over seeds; None where a run diverged."""
        a, b = self.pick(scale, baseline, **kw), self.pick(scale, variant, **kw)
        if [r["tag"]["seed"] for r in a] != [r["tag"]["seed"] for r in b]:
            raise RuntimeError(f"{variant} and {baseline} are not paired by seed")
        return paired_or_none(finals(a), finals(b), self.loss_margin)

    def lr_ranges(self, scale: str, labels, seeds) -> tuple[dict, float]:
        """Usable LR range per label and seed, usable judged against the best run at this scale."""
        F = self.frame
        part = F[
            (F.scale == scale) & F.label.isin(labels) & (F.width == self.settings[scale]["width"]) & F.seed.isin(seeds)
        ]
        part = part[part.alpha.isna() | (part.alpha == 0.5)]
        best = float(part.loc[~part.diverged, "final"].min())
        out = {}
        for (label, seed), g in part.groupby(["label", "seed"]):
            g = g.sort_values("lr")
            flags = usable_flags(g.final.tolist(), g.diverged.tolist(), best, self.usable_tolerance)
            out[(label, seed)] = usable_lr_range(g.lr.tolist(), flags)
        return out, best

    @cached_property
    def small_ranges(self) -> dict:
        return self.lr_ranges("small", list(SMALL_VARIANTS), range(self.settings["grid_seeds"]))[0]

    @cached_property
    def deep_ranges(self) -> dict:
        return self.lr_ranges("deep", list(PLACEMENTS), range(self.settings["deep_grid_seeds"]))[0]

    def usable_range(self, scale: str, label: str) -> dict:
        """`range_summary` of one variant on its scale's grid (small or deep)."""
        return range_summary({"small": self.small_ranges, "deep": self.deep_ranges}[scale], label)


@dataclass
class ClaimOutcome:
    """What the chapter makes of one claim: the finding it records, and the verdict paragraph it shows (the
    finding's sentence with what the runs say around it)."""

    finding: Finding
    paragraph: str


def overview(study: Landscape) -> str:
    """Model sizes, run count, corpus, divergences, and whether the loss flattened against the loss margin."""
    P, F, runs = study.settings, study.frame, study.runs
    still_falling = float(F.final_drop.dropna().median())
    sizes = {scale: GPT(GPTConfig(**P[scale])).num_parameters() for scale in SCALES}
    return (
        "Model sizes: "
        + ", ".join(
            f"{scale} {P[scale]['depth']} blocks × width {P[scale]['width']} = {sizes[scale]:,} parameters"
            for scale in sizes
        )
        + ". "
        f"{len(runs)} runs on corpus SHA-256 `{runs[0]['corpus_sha256'][:12]}…`; {int(F.diverged.sum())} diverged. "
        f"Over the last 10% of their steps the runs' validation loss still fell by a median of "
        f"{significant(still_falling)} nats: the loss has "
        f"{'flattened' if still_falling < study.loss_margin else 'not quite flattened'} "
        f"against the {study.loss_margin:g}-nat margin."
    )


def interval(paired: dict | None) -> str:
    """A paired difference as '<mean> nats (95% CI <low>..<high>)'."""
    return (
        f"{significant(paired['mean_difference'])} nats (95% CI {significant(paired['ci_low'])}.."
        f"{significant(paired['ci_high'])})"
        if paired
        else "not available (a run diverged)"
    )


def paired_row(name: str, scale: str, paired: dict | None) -> dict:
    if paired is None:
        return {
            "variant": name,
            "scale": scale,
            "mean difference": None,
            "95% low": None,
            "95% high": None,
            "outcome": "a run diverged",
        }
    return {
        "variant": name,
        "scale": scale,
        "mean difference": paired["mean_difference"],
        "95% low": paired["ci_low"],
        "95% high": paired["ci_high"],
        "outcome": non_inferiority(paired),
    }


# ---- V1: DyT in place of every norm ----------------------------------------------------------------------

DYT_PAIRS = {  # evidence key: (row name, baseline, variant), all at the small scale and reference learning rate
    "dyt_minus_rms": ("DyT − RMSNorm", "rms", "dyt"),
    "dyt_minus_layer": ("DyT − LayerNorm", "layer", "dyt"),
    "dyt_plain_minus_rms": ("DyT plain − RMSNorm", "rms", "dyt-plain"),
    "dyt_minus_dyt_plain": ("DyT − DyT plain (the embedding scale)", "dyt-plain", "dyt"),
    "layer_minus_rms": ("LayerNorm − RMSNorm", "rms", "layer"),
}


def dyt_pairs(study: Landscape) -> dict:
    """The paired final-loss differences V1 reads, keyed as in its evidence."""
    return {key: study.versus("small", baseline, variant) for key, (_, baseline, variant) in DYT_PAIRS.items()}


def dyt_pairs_table(pairs: dict) -> pd.DataFrame:
    return pd.DataFrame([paired_row(DYT_PAIRS[key][0], "small", paired) for key, paired in pairs.items()])


def alpha_sensitivity(study: Landscape) -> pd.DataFrame:
    """Per width: DyT's best α₀ and its loss, its loss at the default α₀ = 0.5, RMSNorm's loss, and how many α₀
    diverged (the recipe with the embedding scale, seed 0, reference learning rate)."""
    P, F = study.settings, study.frame
    rows = []
    for width in P["alpha_widths"]:
        g = F[
            (F.scale == "small")
            & (F.label == "dyt")
            & (F.width == width)
            & (F.seed == 0)
            & (F.lr == P["small_train"]["lr"])
        ]
        alphas_diverged = int(g.diverged.sum())
        g = g[~g.diverged]
        base = F[
            (F.scale == "small")
            & (F.label == "rms")
            & (F.width == width)
            & (F.seed == 0)
            & (F.lr == P["small_train"]["lr"])
        ]
        best = g.loc[g.final.idxmin()] if len(g) else None
        default = g[g.alpha == 0.5].final
        rows.append(
            {
                "width": width,
                "best α₀": None if best is None else float(best.alpha),
                "best DyT loss": None if best is None else float(best.final),
                "DyT loss at α₀=0.5": float(default.iloc[0]) if len(default) else None,
                "RMSNorm loss": float(base.final.iloc[0]),
                "α₀ values that diverged": alphas_diverged,
            }
        )
    return pd.DataFrame(rows)


def dyt_probes(settings: dict, corpus) -> dict:
    """What DyT's layers see and pass on: at initialisation, and in the trained recipe model (seed 0)."""
    # What DyT's first layer sees at initialisation: the embeddings (times the scale, with the recipe), whose RMS sets
    # where on tanh's curve it works.
    torch.manual_seed(0)
    init_model = GPT(GPTConfig(**settings["small"], norm="dyt"))
    embedding_rms = float(init_model.token_embedding.weight.detach().pow(2).mean().sqrt())
    scaled_embedding_rms = embedding_rms * float(init_model.embedding_scale.detach())
    # How much gradient reaches the blocks' matrices at initialisation, same seed and batch for each model: AdamW's
    # eps (1e-8) damps a gradient of that size instead of normalising it.
    batch_size = settings["small_train"]["batch_size"]
    grad_x, grad_y = probe_batches(corpus, GPTConfig(**settings["small"]), batch_size, 1, "cpu")[0]
    block_grad = {}
    for label in ("rms", "dyt", "dyt-plain"):
        torch.manual_seed(0)
        block_grad[label] = block_gradient_scale(
            GPT(GPTConfig(**settings["small"], **SMALL_VARIANTS[label])), grad_x, grad_y
        )
    # Where the trained DyT model sits on tanh's curve: seed 0 of the recipe at the reference learning rate, retrained
    # alone (same config, seed and batches as its run) so its weights can be probed.
    saturation = trained_dyt_saturation(dict(settings["small"], norm="dyt"), dict(settings["small_train"], seed=0))
    return {
        "embedding_rms": embedding_rms,
        "scaled_embedding_rms": scaled_embedding_rms,
        "block_grad": block_grad,
        "saturation": saturation,
    }


def learned(final: float, entropy: float) -> str:
    """How far a final loss got: past byte frequencies (the unigram entropy) by at least 0.25 nats, or not."""
    if final >= entropy:
        return "did not even reach byte frequencies"
    return "learned little beyond byte frequencies" if entropy - final < 0.25 else "learned context"


def dyt_claim(study: Landscape, pairs: dict, alphas: pd.DataFrame, probes: dict) -> ClaimOutcome:
    """V1 by non-inferiority of the recipe against RMSNorm at the study's loss margin; the caveats are LayerNorm
    (the same margin) and α₀'s tuning (the default more than the margin off the best, or best α₀ differing by width)."""
    P, margin, entropy = study.settings, study.loss_margin, study.entropy
    best_alphas = alphas["best α₀"].tolist()
    default_gap = (alphas["DyT loss at α₀=0.5"] - alphas["best DyT loss"]).max()
    tuning_matters = bool(default_gap > margin) or len(set(best_alphas)) > 1
    dyt_vs_rms, plain_vs_rms, dyt_vs_plain = (
        pairs[k] for k in ("dyt_minus_rms", "dyt_plain_minus_rms", "dyt_minus_dyt_plain")
    )
    v1_outcome = non_inferiority(dyt_vs_rms)
    v1_layer = non_inferiority(pairs["dyt_minus_layer"])
    if v1_outcome == "no worse":
        verdict = decide(True, caveat=tuning_matters or v1_layer != "no worse")
    elif v1_outcome == "worse":
        verdict = "does not hold"
    else:
        verdict = "not testable here"
    summary = (
        f"DyT with the embedding scale − RMSNorm final loss {interval(dyt_vs_rms)}, {v1_outcome} against a "
        f"+{margin} margin; best α₀ "
        + ", ".join(f"{significant(a, 2)} at width {w}" for w, a in zip(P["alpha_widths"], best_alphas))
        + ". "
        if dyt_vs_rms
        else "A DyT or RMSNorm run diverged at the reference learning rate, so no paired interval exists. "
    )
    summary += (
        f"Plain DyT − RMSNorm {interval(plain_vs_rms)}; the embedding scale's own effect, DyT − plain DyT, "
        f"{interval(dyt_vs_plain)}."
    )
    dyt_range, rms_range = study.usable_range("small", "dyt"), study.usable_range("small", "rms")
    plain_range = study.usable_range("small", "dyt-plain")
    embedding_rms, scaled_embedding_rms = probes["embedding_rms"], probes["scaled_embedding_rms"]
    block_grad, saturation = probes["block_grad"], probes["saturation"]
    final_saturated = saturation["saturated_share"]["final_norm"]
    dyt_final = float(np.nanmean(finals(study.pick("small", "dyt"))))
    plain_final = float(np.nanmean(finals(study.pick("small", "dyt-plain"))))
    rms_final = float(np.nanmean(finals(study.pick("small", "rms"))))
    evidence = {
        "embedding_rms_at_init": embedding_rms,
        "scaled_embedding_rms_at_init": scaled_embedding_rms,
        "dyt_mean_final_loss": dyt_final,
        "dyt_plain_mean_final_loss": plain_final,
        "rms_mean_final_loss": rms_final,
        "unigram_entropy_nats": entropy,
        "block_gradient_at_init": block_grad,
        "after_training_seed0": saturation,
        **pairs,
        "alpha_sensitivity": alphas.to_dict("records"),
        "default_alpha_gap_to_best": float(default_gap),
        "lr_range_dyt": dyt_range,
        "lr_range_dyt_plain": plain_range,
        "lr_range_rms": rms_range,
        "model": P["small"],
        "train": P["small_train"],
        "corpus_sha256": study.corpus_sha256,
        "margin": margin,
    }
    finding = Finding(
        verdict,
        summary,
        evidence,
        key_number=dyt_vs_rms["mean_difference"] if dyt_vs_rms else None,
        threshold=margin,
        spread=dyt_vs_rms["sd_of_differences"] if dyt_vs_rms else None,
        rule="Non-inferiority of the authors' LLM recipe (DyT in every norm, embeddings times a learnable √width): "
        f"holds when the 95% paired interval of DyT − RMSNorm lies below +{margin} nats at the baseline's learning "
        f"rate and α₀=0.5; caveat when it is not also below LayerNorm + {margin} or α₀ needs tuning (default α₀ more "
        f"than {margin} nats off the best, or the best α₀ differs between widths); does not hold when the interval "
        "lies above. Plain DyT (no embedding scale) is reported beside it, not judged.",
    )
    paragraph = (
        f"**Verdict (V1): {verdict}.** {summary} "
        f"Averaged over seeds, DyT with the embedding scale ends at {significant(dyt_final)} nats per byte and "
        f"{learned(dyt_final, entropy)}; plain DyT ends at {significant(plain_final)} and "
        f"{learned(plain_final, entropy)}; RMSNorm ends at {significant(rms_final)} (unigram entropy "
        f"{significant(entropy)}). At initialisation plain DyT's first "
        f"input is the embedding, RMS {significant(embedding_rms)}, where tanh(αx) ≈ αx, so it hands on a signal of "
        f"RMS about α₀·{significant(embedding_rms)} where RMSNorm hands on 1; the scale lifts that input to "
        f"{significant(scaled_embedding_rms)}. The mean gradient reaching the blocks' weight matrices at "
        f"initialisation is {significant(block_grad['rms'])} with RMSNorm, {significant(block_grad['dyt'])} with "
        f"the scale and {significant(block_grad['dyt-plain'])} without it. What stops training is measured after it: in "
        f"the trained recipe model (seed 0), {significant(100 * final_saturated, 2)}% of the final DyT layer's inputs "
        f"lie where float32's tanh′(αx) is exactly 0, and the mean gradient reaching the blocks' matrices is "
        f"{significant(saturation['block_gradient'])}. The residual stream, which no norm rescales here, grew until the "
        f"last DyT saturated; from then on no gradient passes below it, and only that layer's gain and bias and the "
        f"output head keep learning, which is why every α₀ and both variants stall at the same loss. "
        f"Usable learning rates reach {significant(dyt_range['lr_high'])} "
        f"with the scale, {significant(plain_range['lr_high'])} without it, and {significant(rms_range['lr_high'])} "
        f"for RMSNorm. "
        f"**What this scale can and cannot show:** a small model can show whether DyT trains at all without "
        f"re-tuning, whether the embedding scale is what makes it train, and how sensitive it is to α₀ and the "
        f"learning rate. It cannot show the paper's large-model parity: at width {P['small']['width']} the √width "
        f"scale is {significant(math.sqrt(P['small']['width']))}, not the 64 of a 4096-wide LLaMA, so the "
        f"embeddings still start well inside tanh's linear part; the runs are {P['small_train']['steps']} steps, "
        f"not billions of tokens; and α₀'s dependence on width was found at billions of parameters. The recipe "
        f"here also keeps DyT's bias and one α₀ for every norm, where the authors' LLaMA code uses none and three."
    )
    return ClaimOutcome(finding, paragraph)


# ---- V2: where the norm goes -----------------------------------------------------------------------------

OUTPUT_NORMED = ("peri", "post-sublayer")  # the placements that normalise each sublayer's output


def placement_measures(study: Landscape) -> dict:
    """Hidden growth (last block over first, end of training) per placement and seed, the output-normalising
    placements' growth relative to pre-LN's, the usable LR ranges, and the paired final loss against pre-LN."""
    growth = {}
    for placement in PLACEMENTS:
        growth[placement] = [
            growth_ratio(r["stream_rms"]) if not r["diverged"] else math.nan for r in study.pick("deep", placement)
        ]
    pre_growth = np.array(growth["pre"])
    relative = {p: np.array(growth[p]) / pre_growth for p in OUTPUT_NORMED}
    rel_mean = {p: float(np.nanmean(v)) for p, v in relative.items()}
    rel_sd = {p: float(np.nanstd(v, ddof=1)) if np.isfinite(v).sum() > 1 else math.nan for p, v in relative.items()}
    return {
        "growth": growth,
        "pre_growth": pre_growth,
        "relative_mean": rel_mean,
        "relative_sd": rel_sd,
        "worse": max(rel_mean, key=lambda p: rel_mean[p]),
        "ranges": {p: study.usable_range("deep", p) for p in PLACEMENTS},
        "versus_pre": {p: study.versus("deep", "pre", p) for p in ("post", "peri", "post-sublayer")},
    }


def placement_table(measures: dict) -> pd.DataFrame:
    growth, deep_range, placement_vs_pre = measures["growth"], measures["ranges"], measures["versus_pre"]
    return pd.DataFrame(
        [
            {
                "placement": p,
                "growth (last/first block)": float(np.nanmean(growth[p])),
                "growth sd over seeds": float(np.nanstd(growth[p], ddof=1))
                if np.isfinite(growth[p]).sum() > 1
                else None,
                "final loss − pre-LN": None
                if p == "pre" or placement_vs_pre[p] is None
                else placement_vs_pre[p]["mean_difference"],
                "usable LR from": deep_range[p]["lr_low"],
                "usable LR to": deep_range[p]["lr_high"],
                "diverges at": deep_range[p]["diverges_at"],
            }
            for p in PLACEMENTS
        ]
    )


def placement_claim(
    study: Landscape, measures: dict, *, pre_growth_needed: float, max_relative_growth: float
) -> ClaimOutcome:
    """V2: needs pre-LN's growth >= `pre_growth_needed`; holds when both output-normalising placements grow at most
    `max_relative_growth` times as much as pre-LN (the worse judged) with a usable LR range at least as wide."""
    P = study.settings
    rel_mean, rel_sd, worse = measures["relative_mean"], measures["relative_sd"], measures["worse"]
    deep_range = measures["ranges"]
    pre_growth_mean = float(np.nanmean(measures["pre_growth"]))
    wider_or_equal = all(
        (deep_range[p]["lr_high"] or 0) >= (deep_range["pre"]["lr_high"] or 0)
        and (deep_range[p]["lr_low"] or math.inf) <= (deep_range["pre"]["lr_low"] or math.inf)
        for p in OUTPUT_NORMED
    )
    strictly_wider = any(deep_range[p]["decades"] > deep_range["pre"]["decades"] for p in OUTPUT_NORMED)
    if not math.isfinite(rel_mean[worse]) or pre_growth_mean < pre_growth_needed:
        verdict = "not testable here"
    elif rel_mean[worse] <= max_relative_growth and wider_or_equal:
        verdict = decide(True, caveat=not strictly_wider)
    else:
        verdict = "does not hold"
    summary = (
        f"Pre-LN's hidden RMS grows {significant(pre_growth_mean)}× from the first to the last of "
        f"{P['deep']['depth']} blocks; {worse} (the weaker of Peri-LN and OLMo 2's) grows "
        f"{significant(rel_mean[worse])}× as much (threshold {max_relative_growth:g}), usable LR up to "
        f"{significant(deep_range[worse]['lr_high'])} vs pre-LN's {significant(deep_range['pre']['lr_high'])}."
    )
    finding = Finding(
        verdict,
        summary,
        {
            "growth": measures["growth"],
            "relative_growth_mean": rel_mean,
            "relative_growth_sd": rel_sd,
            "lr_ranges": deep_range,
            "paired_loss_vs_pre": measures["versus_pre"],
            "model": P["deep"],
            "train": P["deep_train"],
            "lr_grid": P["deep_lr_grid"],
            "corpus_sha256": study.corpus_sha256,
        },
        key_number=rel_mean[worse] if math.isfinite(rel_mean[worse]) else None,
        threshold=max_relative_growth,
        spread=rel_sd[worse] if math.isfinite(rel_sd[worse]) else None,
        rule=f"Needs pre-LN growth >= {pre_growth_needed:g}x (else not testable here); holds when both Peri-LN and "
        f"OLMo 2's placement have growth <= {max_relative_growth:g}x pre-LN's and a usable LR range at least as wide "
        "(caveat when neither is strictly wider).",
    )
    too_little = (
        f"Pre-LN hidden growth stays under the {pre_growth_needed:g}× the claim presupposes, so the comparison cannot "
        "be made as planned. "
    )
    paragraph = (
        f"**Verdict (V2): {verdict}.** {summary} "
        f"{too_little if pre_growth_mean < pre_growth_needed else ''}"
        f"Peri-LN grows {significant(rel_mean['peri'])}× and OLMo 2's placement {significant(rel_mean['post-sublayer'])}× "
        f"as much as pre-LN"
        + (
            ": each of their blocks adds a branch output normalised to a fixed RMS, where pre-LN's "
            "branches start small (GPT-2's scaled initialisation), which would explain why they grow more. "
            if min(rel_mean.values()) > 1
            else ". "
        )
        + f"**What this scale can and cannot show:** at "
        f"{P['deep']['depth']} blocks and a few hundred steps a small model shows the direction of hidden-state "
        f"growth and whether a placement trains over a wider range of learning rates; the massive activations and "
        f"loss spikes that motivated Peri-LN appear in billion-parameter runs over far longer training."
    )
    return ClaimOutcome(finding, paragraph)


# ---- V3: QK-norm and the learning-rate range -------------------------------------------------------------


def _final_logit(study: Landscape, label: str, lr: float) -> float | None:
    rs = [
        r
        for r in study.runs
        if r["tag"]["scale"] == "small"
        and r["tag"]["label"] == label
        and r["tag"]["lr"] == lr
        and r["tag"]["seed"] == 0
        and r["max_logit"]
    ]
    return rs[0]["max_logit"][-1]["max_logit"] if rs else None


def final_logits(study: Landscape) -> pd.DataFrame:
    """The largest attention logit at the end of training (seed 0), with and without QK-norm, per learning rate."""
    return pd.DataFrame(
        [
            {
                "learning rate": lr,
                "largest logit, no QK-norm": _final_logit(study, "rms", lr),
                "largest logit, QK-norm": _final_logit(study, "rms+qk", lr),
            }
            for lr in study.settings["lr_grid"]
        ]
    )


def qk_claim(study: Landscape, logit_rows: pd.DataFrame) -> ClaimOutcome:
    """V3: needs a failure without QK-norm on the grid; holds when QK-norm's highest usable LR is higher in every
    seed. The key number is the mean gain in decades, log10(highest usable LR with ÷ without), against 0."""
    P = study.settings
    small_ranges = study.small_ranges
    gains = []
    noqk_fails = False
    for seed in range(P["grid_seeds"]):
        a, b = small_ranges.get(("rms", seed)), small_ranges.get(("rms+qk", seed))
        noqk_fails = noqk_fails or a["fails_at"] is not None or a["lr_low"] is None
        # a range with no usable point counts as topping out half a decade below the grid
        high_a = a["lr_high"] or min(P["lr_grid"]) / 10**0.5
        high_b = b["lr_high"] or min(P["lr_grid"]) / 10**0.5
        gains.append(math.log10(high_b / high_a))
    gain_mean = float(np.mean(gains))
    gain_sd = float(np.std(gains, ddof=1)) if len(gains) > 1 else 0.0
    rms_range, qk_range = study.usable_range("small", "rms"), study.usable_range("small", "rms+qk")
    if not noqk_fails:
        verdict = "not testable here"
    elif gain_mean > 0 and min(gains) > 0:
        verdict = decide(True, caveat=qk_range["diverges_at"] is None)
    else:
        verdict = "does not hold"
    summary = (
        f"Highest usable LR without QK-norm {significant(rms_range['lr_high'])} (fails at "
        f"{significant(rms_range['diverges_at'])}), with QK-norm {significant(qk_range['lr_high'])} (fails at "
        f"{significant(qk_range['diverges_at'])}): a gain of {significant(gain_mean)} decades over "
        f"{len(gains)} seeds."
    )
    finding = Finding(
        verdict,
        summary,
        {
            "gain_decades_per_seed": gains,
            "lr_range_rms": rms_range,
            "lr_range_qk": qk_range,
            "final_max_logit": logit_rows.to_dict("records"),
            "qk_minus_rms_at_reference_lr": study.versus("small", "rms", "rms+qk"),
            "lr_grid": P["lr_grid"],
            "model": P["small"],
            "train": P["small_train"],
            "corpus_sha256": study.corpus_sha256,
        },
        key_number=gain_mean,
        threshold=0.0,
        spread=gain_sd,
        rule="Needs a failure without QK-norm on the grid (else not testable here); holds when QK-norm's highest "
        "usable LR is higher in every seed (caveat when QK-norm never fails on the grid, so the gain is a lower bound).",
    )
    paragraph = (
        f"**Verdict (V3): {verdict}.** {summary} **What this scale can and cannot show:** Wortsman et al. "
        f"designed this proxy for small models, so this is the claim small scale tests best. The runs here clip "
        f"gradients at norm 1 and decay weights, as the rest of the book does; both can hold off a divergence that "
        f"unclipped training would show, and a grid of half-decade steps locates the divergence point only to within "
        f"a factor of about 3."
    )
    return ClaimOutcome(finding, paragraph)


# ---- V4: the Curse of Depth and LayerNorm Scaling --------------------------------------------------------


def depth_claim(study: Landscape, *, curse_share: float) -> ClaimOutcome:
    """V4: the curse is present when pre-LN's later half carries at most `curse_share` of the drop-one loss; the
    remedy works when 1/√l raises that share (paired 95% interval above 0), with a caveat when its final loss is
    not within the study's loss margin; it does not hold when the interval lies below 0."""
    P = study.settings
    plain, scaled = study.pick("deepest", "pre"), study.pick("deepest", "1/√l")
    share_plain = [later_half_share(r["drop_one"]) if r["drop_one"] else math.nan for r in plain]
    share_scaled = [later_half_share(r["drop_one"]) if r["drop_one"] else math.nan for r in scaled]
    share_change = paired_or_none(share_plain, share_scaled, 0.05)
    scaling_loss = study.versus("deepest", "pre", "1/√l")
    curse = float(np.nanmean(share_plain))
    first_block = float(np.mean([r["drop_one"][0] for r in plain if r["drop_one"]]))
    first_share = float(
        np.mean(
            [
                max(r["drop_one"][0], 0) / max(sum(max(v, 0) for v in r["drop_one"]), 1e-12)
                for r in plain
                if r["drop_one"]
            ]
        )
    )
    growth_plain = float(np.nanmean([growth_ratio(r["stream_rms"]) for r in plain]))
    growth_scaled = float(np.nanmean([growth_ratio(r["stream_rms"]) for r in scaled]))
    loss_ok = non_inferiority(scaling_loss) == "no worse"
    if share_change is None or not math.isfinite(curse) or curse > curse_share:
        verdict = "not testable here"
    elif share_change["ci_low"] > 0:
        verdict = decide(True, caveat=not loss_ok)
    elif share_change["ci_high"] < 0:
        verdict = "does not hold"
    else:
        verdict = "not testable here"

    def shown(key: str, paired: dict | None) -> str:
        return significant(paired[key]) if paired else "—"

    summary = (
        f"At depth {P['deepest']['depth']} the later half of pre-LN's blocks carries {significant(curse)} of the "
        f"drop-one loss (curse threshold {curse_share:g}); 1/√l changes that share by "
        f"{shown('mean_difference', share_change)} (95% CI "
        f"{shown('ci_low', share_change)}..{shown('ci_high', share_change)}) "
        f"and the final loss by {shown('mean_difference', scaling_loss)} nats."
    )
    finding = Finding(
        verdict,
        summary,
        {
            "first_block_drop_loss": first_block,
            "first_block_share": first_share,
            "later_half_share_plain": share_plain,
            "later_half_share_scaled": share_scaled,
            "share_change": share_change,
            "final_loss_scaled_minus_plain": scaling_loss,
            "growth_plain": growth_plain,
            "growth_scaled": growth_scaled,
            "model": P["deepest"],
            "train": P["deepest_train"],
            "corpus_sha256": study.corpus_sha256,
        },
        key_number=share_change["mean_difference"] if share_change else None,
        threshold=0.0,
        spread=share_change["sd_of_differences"] if share_change else None,
        rule=f"Curse present when pre-LN's later half carries <= {100 * curse_share:g}% of the drop-one loss (else not "
        "testable here); holds when 1/sqrt(l) raises that share (paired 95% interval above 0), with a caveat when its "
        f"final loss is not within +{study.loss_margin} nats; does not hold when the interval lies below 0.",
    )
    unmoved = share_change and share_change["ci_low"] <= 0 <= share_change["ci_high"]
    paragraph = (
        f"**Verdict (V4): {verdict}.** {summary} "
        + (
            f"The curse shows at this scale (later half at or below {100 * curse_share:g}%)"
            if curse <= curse_share
            else "The curse does not show at this scale"
        )
        + f"; dropping the first block alone costs {significant(first_block)} nats ({significant(100 * first_share)}% "
        "of the total), "
        f"{'so the share mostly measures how special the first block is; ' if first_share > 0.5 else ''}"
        f"{'scaling did not move the share by a measurable amount' if unmoved else 'scaling moved the share'}. "
        f"Hidden RMS grows {significant(growth_plain)}× from the first "
        f"to the last block without scaling and {significant(growth_scaled)}× with it. **What this scale can and cannot "
        f"show:** Sun et al. found idle deep layers in models of 130M–7B parameters trained on billions of tokens; "
        f"{P['deepest']['depth']} narrow blocks trained for {P['deepest_train']['steps']} steps may not have reached "
        f"the regime where later layers collapse to identity, so an absent curse here is a null result, not a refutation."
    )
    return ClaimOutcome(finding, paragraph)


# ---- the landscape at a glance ---------------------------------------------------------------------------

BASELINE = "RMSNorm (baseline)"
SUMMARY_VARIANTS = {  # name: (scale, label, model options)
    "LayerNorm": ("small", "layer", dict(norm="layer")),
    "DyT (embedding scale)": ("small", "dyt", dict(norm="dyt")),
    "DyT plain": ("small", "dyt-plain", dict(norm="dyt", embedding_scale=False)),
    "QK-norm": ("small", "rms+qk", dict(qk_norm=True)),
    "post-LN": ("deep", "post", dict(placement="post")),
    "Peri-LN": ("deep", "peri", dict(placement="peri")),
    "OLMo 2 (post-sublayer)": ("deep", "post-sublayer", dict(placement="post-sublayer")),
    "LayerNorm Scaling": ("deepest", "1/√l", dict(depth_scaling=True)),
}


def step_times(settings: dict, corpus, device: str = "cpu") -> pd.DataFrame:
    """Training-step times of the baseline and every variant, all at the small scale, timed in alternation."""
    configs = {BASELINE: GPTConfig(**settings["small"])}
    configs.update(
        {name: GPTConfig(**{**settings["small"], **model}) for name, (_, _, model) in SUMMARY_VARIANTS.items()}
    )
    return compare_step_times(
        configs,
        corpus,
        batch_size=settings["small_train"]["batch_size"],
        repeats=settings["timing_repeats"],
        device=device,
    )


def summary_frame(study: Landscape, timings: pd.DataFrame) -> pd.DataFrame:
    """Per variant: the paired final-loss difference to the baseline at its scale, the step-time ratio at the small
    scale (median, and the IQR of the per-repeat ratio), and the usable learning-rate range."""
    P = study.settings
    medians = timings.groupby("model").step_time.median()
    rows = []
    for name, (scale, label, _) in SUMMARY_VARIANTS.items():
        paired = study.versus(scale, "rms" if scale == "small" else "pre", label)
        if scale in ("small", "deep"):
            rng = study.usable_range(scale, label)
        else:
            rng = {"lr_low": None, "lr_high": None, "diverges_at": None}
        ratios = []
        for r in range(P["timing_repeats"]):
            one = timings[timings.repeat == r].set_index("model").step_time
            ratios.append(one[name] / one[BASELINE])
        rows.append(
            {
                "variant": name,
                "scale": f"{scale} ({P[scale]['depth']} blocks, width {P[scale]['width']})",
                "loss − baseline": paired["mean_difference"] if paired else None,
                "95% low": paired["ci_low"] if paired else None,
                "95% high": paired["ci_high"] if paired else None,
                "step-time ratio": float(medians[name] / medians[BASELINE]),
                "ratio IQR": float(np.subtract(*np.percentile(ratios, [75, 25]))),
                "usable LR from": rng["lr_low"],
                "usable LR to": rng["lr_high"],
            }
        )
    return pd.DataFrame(rows)


def baseline_ranges(study: Landscape) -> list[dict | None]:
    """The baseline's usable LR range at each summary variant's scale (None at the deepest, run at one LR)."""
    baseline = {"small": "rms", "deep": "pre"}
    return [
        study.usable_range(scale, baseline[scale]) if scale in baseline else None
        for scale, _, _ in SUMMARY_VARIANTS.values()
    ]
