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
- with `trace_dyt` as well, a DyT model's trace at the same points (`dyt_trace_point`): each DyT layer's α, the
  last hidden state's RMS, each DyT layer's saturated share and the gradient reaching the blocks;
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
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from normlab.gpt.corpus import load_corpus
from normlab.gpt.experiments import drop_one_losses
from normlab.gpt.model import GPT, GPTConfig
from normlab.gpt.train import TrainConfig, compare_step_times
from normlab.gpt.train import train as train_model
from normlab.norms.dyt import DyT, authors_alpha_init
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
    trace_dyt: bool = False,
    tag: dict | None = None,
) -> dict:
    corpus = load_corpus()
    device = train.get("device") or worker_device()
    tcfg = TrainConfig(**{**train, "progress": False, "device": device})
    mcfg = GPTConfig(**model)
    batches = probe_batches(corpus, mcfg, probe_batch, probe_count, device)
    if trace_dyt and not probe_every:
        raise ValueError("trace_dyt records the DyT layers between training segments: set probe_every > 0 too")
    if probe_every:

        def probe(net, step):
            point = {"step": step, "max_logit": max_attention_logit(net, batches[0][0])}
            return {**point, "dyt": dyt_trace_point(net, *batches[0])} if trace_dyt else point

        initial = probe(_initial_model(mcfg, tcfg, device), 0)
        result, trace = _train_probed(mcfg, tcfg, corpus, probe_every, probe)
        trace = [initial] + trace
    else:
        result, trace = train_model(mcfg, tcfg, corpus), []
    dyt_trace = [{"step": point["step"], **point.pop("dyt")} for point in trace if "dyt" in point]
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
        "dyt_trace": dyt_trace,
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


def saturated_share(alpha: torch.Tensor, x: torch.Tensor) -> float:
    """Share of the inputs x of a DyT layer with scalar alpha at which float32's tanh'(αx) = 1 − tanh²(αx) is
    exactly 0: there the layer passes no gradient at all to its input."""
    z = alpha.detach().float() * x.detach().float()
    return float((1 - torch.tanh(z) ** 2 == 0).float().mean())


def dyt_saturation(model: GPT, x: torch.Tensor, y: torch.Tensor) -> dict:
    """Where a DyT model sits on tanh's curve: per DyT layer, the share of its inputs at which float32's
    tanh'(αx) = 1 − tanh²(αx) is exactly 0, and the mean |gradient| then reaching the blocks' matrices.

    A DyT layer whose every input is saturated passes no gradient at all to what lies below it; when that
    layer is the final one, only the final layer's own parameters and the output head can still learn.
    """
    shares: dict[str, float] = {}
    hooks = []
    for name, module in model.named_modules():
        if isinstance(module, DyT):

            def record(mod, inputs, output, name=name):
                shares[name] = saturated_share(mod.alpha, inputs[0])

            hooks.append(module.register_forward_hook(record))
    if not hooks:
        raise ValueError("dyt_saturation needs a model with DyT layers (norm='dyt')")
    try:
        gradient = block_gradient_scale(model, x, y)
    finally:
        for hook in hooks:
            hook.remove()
    return {"saturated_share": shares, "block_gradient": gradient}


def dyt_trace_point(model: GPT, x: torch.Tensor, y: torch.Tensor) -> dict:
    """One point of a DyT run's trace: each DyT layer's α, the RMS of the last hidden state (the final norm's
    input), each DyT layer's `saturated_share`, and the mean |gradient| reaching the blocks' matrices
    (`block_gradient_scale`), all on the batch (x, y)."""
    if model.final_norm is None:
        raise ValueError("dyt_trace_point reads the final norm's input: use a placement with a final norm (pre-LN)")
    seen = {}
    handle = model.final_norm.register_forward_pre_hook(
        lambda module, args: seen.__setitem__("rms", float(args[0].detach().double().pow(2).mean().sqrt()))
    )
    try:
        saturation = dyt_saturation(model, x, y)
    finally:
        handle.remove()
    return {
        "alpha": {name: float(m.alpha.detach()) for name, m in model.named_modules() if isinstance(m, DyT)},
        "final_hidden_rms": seen["rms"],
        **saturation,
    }


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
        alphas=[0.2, 0.8],
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
    # 2 CPU cores: sized for under 14 minutes on a quiet machine, both cores busy with one-thread runs (86 runs:
    # 68 measured about 7 minutes' worth; the DyT variants of V1 add 18 of the cheapest, small runs, about 25
    # seconds of one core each; a first sizing with 96 runs at 200-250 steps and 24 blocks measured about 15
    # minutes' worth)
    "cpu": dict(
        small=dict(width=64, depth=4, heads=4, context=64),
        small_train=dict(steps=200, batch_size=16, warmup_steps=20, lr=5e-3),
        lr_grid=[5e-3, 1.5e-2, 5e-2, 1.5e-1],
        seeds=3,
        grid_seeds=2,
        deep_grid_seeds=1,
        alphas=[0.05, 0.2, 0.8],
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
        alphas=[0.05, 0.1, 0.2, 0.4, 0.8],
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

# V1's DyT variants. "dyt-authors" is the authors' LLaMA recipe (github.com/jiachenzhu/DyT, other_tasks/LLaMA): DyT
# without β in every norm, α₀ for the norm in front of attention apart from the others, by width
# (normlab.norms.dyt.authors_alpha_init), the embeddings times a learnable sqrt(width) (norm="dyt"'s default), and
# AdamW's decay on every parameter. "dyt-rmsfinal" keeps it in the blocks with an RMSNorm before the head, and
# "rms-authors" is RMSNorm under the same optimiser: the authors' own baseline, so that each of those pairs differs in
# the norm alone. "dyt" (β, α₀ = 0.5 everywhere, the scalars undecayed) and "dyt-plain" (the same without the
# embedding scale) are the study's earlier recipe: kept, at the reference learning rate only, because their pair
# measures what the embedding scale does.
AUTHORS_DYT = dict(norm="dyt", dyt_bias=False)  # plus the authors' α₀ for the width, filled in by `small_variant`
SMALL_VARIANTS = {
    "rms": dict(norm="rms"),
    "layer": dict(norm="layer"),
    "rms-authors": dict(norm="rms"),
    "dyt-authors": AUTHORS_DYT,
    "dyt-rmsfinal": dict(AUTHORS_DYT, final_norm_kind="rms"),
    "dyt": dict(norm="dyt"),
    "dyt-plain": dict(norm="dyt", embedding_scale=False),
    "rms+qk": dict(qk_norm=True),
}
AUTHORS_TRAIN = dict(weight_decay_on="all")  # their AdamW: decay 0.1 on every parameter (main_training_llama.py)
VARIANT_TRAIN = {label: AUTHORS_TRAIN for label in ("rms-authors", "dyt-authors", "dyt-rmsfinal")}
AUTHORS_ALPHA = ("dyt-authors", "dyt-rmsfinal")  # the variants whose α₀ is the authors' by width
REFERENCE_LR_ONLY = ("rms-authors", "dyt", "dyt-plain")  # paired at the reference learning rate, no grid
MAX_LOGIT_PROBED = ("rms", "rms+qk")  # V3 tracks their largest attention logit through training


def small_variant(label: str, width: int, alpha_other: float | None = None) -> dict:
    """The model options of a small-scale variant at this width. For the authors' recipe, α₀ is theirs for the
    width; `alpha_other` moves the α₀ of the norms not in front of attention, and the attention norm's with it,
    at the ratio the authors keep at every width (4 to 1)."""
    model = dict(SMALL_VARIANTS[label])
    if label in AUTHORS_ALPHA:
        attention, other = authors_alpha_init(width)
        if alpha_other is not None:
            attention, other = attention / other * alpha_other, alpha_other
        model.update(dyt_alpha_attention=attention, dyt_alpha=other)
    elif alpha_other is not None:
        raise ValueError(f"small_variant: only {AUTHORS_ALPHA} take an α₀ here, got {label!r}")
    return model


def is_dyt(label: str) -> bool:
    return label.startswith("dyt")


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
    for width in settings["alpha_widths"]:
        if authors_alpha_init(width)[1] not in settings["alphas"]:
            raise ValueError(f"profile {profile!r}: the authors' α₀ at width {width} must lie on alphas")
    if profile != "smoke" and settings["deep"]["depth"] < 12:
        raise ValueError("V2 needs at least 12 blocks, where placement matters")
    return settings


def _train_dict(settings: dict, scale: str, **extra) -> dict:
    base = dict(settings[f"{scale}_train"])
    steps = base["steps"]
    # eval every tenth of the run: the 90% point shows how much the loss still fell at the end
    return {**base, "eval_every": steps // 10, "stream_every": steps // 10, "eval_batches": 4, **extra}


def _job(
    settings: dict,
    device: str,
    scale: str,
    label: str,
    model: dict,
    *,
    lr=None,
    seed=0,
    reference_alpha=True,
    **options,
) -> dict:
    """`reference_alpha` marks a DyT run at its variant's own α₀ (False: a point of the α₀ sweep)."""
    train = _train_dict(settings, scale, seed=seed, **VARIANT_TRAIN.get(label, {}))
    if lr is not None:
        train["lr"] = lr
    if device != "cpu":
        train["device"] = device
    tag = dict(scale=scale, label=label, lr=train["lr"], seed=seed, reference_alpha=reference_alpha, **model)
    return dict(model={**settings[scale], **model}, train=train, tag=tag, **options)


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
    small_steps, small_width = settings["small_train"]["steps"], settings["small"]["width"]
    jobs = []
    for label in SMALL_VARIANTS:
        model = small_variant(label, small_width)
        probed = label in MAX_LOGIT_PROBED or is_dyt(label)
        options = dict(probe_every=small_steps // 10 if probed else 0, **({"trace_dyt": True} if is_dyt(label) else {}))
        grid = [settings["small_train"]["lr"]] if label in REFERENCE_LR_ONLY else settings["lr_grid"]
        jobs += _grid_jobs(settings, device, "small", label, model, grid, settings["grid_seeds"], **options)
    for width in settings["alpha_widths"]:
        if width != small_width:
            jobs.append(_job(settings, device, "small", "rms", {"norm": "rms", "width": width}))
        for alpha in settings["alphas"]:
            reference = alpha == authors_alpha_init(width)[1]
            if width != small_width or not reference:
                model = {**small_variant("dyt-authors", width, alpha), "width": width}
                jobs.append(_job(settings, device, "small", "dyt-authors", model, reference_alpha=reference))
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
    """One row per run: its scale, label, learning rate, seed, width, DyT's α₀ (the norms' not in front of
    attention) and whether it is its variant's own, and its outcome."""
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
                "alpha": r["model"].get("dyt_alpha", 0.5) if is_dyt(t["label"]) else None,
                "reference_alpha": t.get("reference_alpha", True),
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
        self._ranges: dict = {}

    def pick(self, scale: str, label: str, lr=None, width=None, alpha=None) -> list[dict]:
        """The runs of one variant at one learning rate, width and α₀ (defaults: the scale's reference learning
        rate and width, the variant's own α₀), by seed."""
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
                and (t.get("reference_alpha", True) if alpha is None else r["model"].get("dyt_alpha", 0.5) == alpha)
            ):
                keep.append(r)
        return sorted(keep, key=lambda r: r["tag"]["seed"])

    def versus(self, scale: str, baseline: str, variant: str, **kw) -> dict | None:
        """Paired final-loss difference variant − baseline over seeds; None where a run diverged."""
        a, b = self.pick(scale, baseline, **kw), self.pick(scale, variant, **kw)
        if [r["tag"]["seed"] for r in a] != [r["tag"]["seed"] for r in b]:
            raise RuntimeError(f"{variant} and {baseline} are not paired by seed")
        return paired_or_none(finals(a), finals(b), self.loss_margin)

    def ranges(self, scale: str, compared: Sequence[str]) -> dict:
        """Usable LR range per (label, seed) of the variants a claim compares, on its scale's grid seeds. Each run
        is judged against the best run among `compared` alone: a variant the claim does not involve (one trained
        under another optimiser, say) must not move the bar."""
        key = (scale, tuple(sorted(compared)))
        if key in self._ranges:
            return self._ranges[key]
        F = self.frame
        seeds = range(self.settings["grid_seeds" if scale == "small" else "deep_grid_seeds"])
        part = F[
            (F.scale == scale)
            & F.label.isin(compared)
            & (F.width == self.settings[scale]["width"])
            & F.seed.isin(seeds)
        ]
        part = part[part.reference_alpha]
        best = float(part.loc[~part.diverged, "final"].min())
        out = {}
        for (label, seed), g in part.groupby(["label", "seed"]):
            g = g.sort_values("lr")
            flags = usable_flags(g.final.tolist(), g.diverged.tolist(), best, self.usable_tolerance)
            out[(label, seed)] = usable_lr_range(g.lr.tolist(), flags)
        self._ranges[key] = out
        return out

    def usable_range(self, scale: str, label: str, compared: Sequence[str]) -> dict:
        """`range_summary` of one variant on its scale's grid, judged within the variants `compared`."""
        if label not in compared:
            raise ValueError(f"usable_range: {label!r} is not among the compared variants {tuple(compared)}")
        return range_summary(self.ranges(scale, compared), label)


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
    "dyt_minus_rms": ("DyT, authors' recipe − RMSNorm, same AdamW", "rms-authors", "dyt-authors"),
    "dyt_rmsfinal_minus_rms": ("DyT blocks, RMSNorm final − RMSNorm, same AdamW", "rms-authors", "dyt-rmsfinal"),
    "dyt_minus_dyt_rmsfinal": ("DyT final norm − RMSNorm final norm (DyT blocks)", "dyt-rmsfinal", "dyt-authors"),
    "dyt_minus_layer": ("DyT, authors' recipe − LayerNorm", "layer", "dyt-authors"),
    "rms_authors_minus_rms": ("RMSNorm: authors' AdamW − the study's", "rms", "rms-authors"),
    "dyt_study_minus_rms": ("DyT, study's recipe − RMSNorm", "rms", "dyt"),
    "dyt_minus_dyt_plain": ("study's DyT − DyT plain (the embedding scale)", "dyt-plain", "dyt"),
    "layer_minus_rms": ("LayerNorm − RMSNorm", "rms", "layer"),
}
TRACED = ("dyt-authors", "dyt-rmsfinal", "dyt")  # the DyT variants whose trace V1 reads and draws


def dyt_pairs(study: Landscape) -> dict:
    """The paired final-loss differences V1 reads, keyed as in its evidence."""
    return {key: study.versus("small", baseline, variant) for key, (_, baseline, variant) in DYT_PAIRS.items()}


def dyt_pairs_table(pairs: dict) -> pd.DataFrame:
    return pd.DataFrame([paired_row(DYT_PAIRS[key][0], "small", paired) for key, paired in pairs.items()])


def alpha_sensitivity(study: Landscape) -> pd.DataFrame:
    """Per width: the authors' recipe's best α₀ (of the norms not in front of attention; that one's is 4×) and its
    loss, its loss at the authors' α₀, RMSNorm's loss, and how many α₀ diverged (seed 0, reference learning rate)."""
    P, F = study.settings, study.frame
    rows = []
    for width in P["alpha_widths"]:
        g = F[
            (F.scale == "small")
            & (F.label == "dyt-authors")
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
        default = g[g.reference_alpha].final
        rows.append(
            {
                "width": width,
                "authors' α₀": authors_alpha_init(width)[1],
                "best α₀": None if best is None else float(best.alpha),
                "best DyT loss": None if best is None else float(best.final),
                "DyT loss at the authors' α₀": float(default.iloc[0]) if len(default) else None,
                "RMSNorm loss": float(base.final.iloc[0]),
                "α₀ values that diverged": alphas_diverged,
            }
        )
    return pd.DataFrame(rows)


def dyt_probes(settings: dict, corpus) -> dict:
    """What DyT's first layer sees at initialisation, and how much gradient reaches the blocks then."""
    # The embeddings (times the scale, with the recipe), whose RMS sets where on tanh's curve the first layer works.
    torch.manual_seed(0)
    init_model = GPT(GPTConfig(**settings["small"], norm="dyt"))
    embedding_rms = float(init_model.token_embedding.weight.detach().pow(2).mean().sqrt())
    scaled_embedding_rms = embedding_rms * float(init_model.embedding_scale.detach())
    # Same seed and batch for each model: AdamW's eps (1e-8) damps a gradient of that size instead of normalising it.
    batch_size = settings["small_train"]["batch_size"]
    grad_x, grad_y = probe_batches(corpus, GPTConfig(**settings["small"]), batch_size, 1, "cpu")[0]
    block_grad = {}
    for label in ("rms", "dyt-authors", "dyt", "dyt-plain"):
        torch.manual_seed(0)
        model = GPTConfig(**settings["small"], **small_variant(label, settings["small"]["width"]))
        block_grad[label] = block_gradient_scale(GPT(model), grad_x, grad_y)
    return {"embedding_rms": embedding_rms, "scaled_embedding_rms": scaled_embedding_rms, "block_grad": block_grad}


def _layer_order(name: str) -> tuple:
    """Module order of a norm's name: the blocks' norms by block and position, then the final norm."""
    pieces = name.split(".")
    return (math.inf,) if pieces[0] == "final_norm" else (int(pieces[1]), pieces[2])


def final_dyt_layer(point: dict) -> str:
    """The last DyT layer a trace point names: the final norm if it is DyT, else the last block's second norm."""
    return max(point["saturated_share"], key=_layer_order)


def saturation_onset(trace: Sequence[dict], threshold: float) -> dict:
    """A run's final DyT layer through its trace: its saturated share at the end, the first traced step at which
    the share reached `threshold` (None if it never did), and the last hidden RMS and block gradient at the end."""
    if not trace:
        raise ValueError("saturation_onset needs a trace with at least one point (run with trace_dyt=True)")
    layer = final_dyt_layer(trace[-1])
    reached = [p["step"] for p in trace if p["saturated_share"][layer] >= threshold]
    last = trace[-1]
    return {
        "layer": layer,
        "final_share": last["saturated_share"][layer],
        "onset_step": reached[0] if reached else None,
        "final_hidden_rms": last["final_hidden_rms"],
        "final_block_gradient": last["block_gradient"],
        "last_step": last["step"],
    }


def traced_saturation(runs: Sequence[dict], threshold: float) -> dict:
    """`saturation_onset` over the seeds of one variant: saturated when every seed's final DyT layer ends at or above
    `threshold`; the share's range over seeds, and the latest onset step (None unless every seed saturated)."""
    per_seed = [
        {"seed": r.get("tag", {}).get("seed", i), **saturation_onset(r["dyt_trace"], threshold)}
        for i, r in enumerate(runs)
        if r["dyt_trace"] and not r["diverged"]
    ]
    if not per_seed:
        return {"seeds": 0, "saturated": False, "layer": None, "share_low": None, "share_high": None,
                "onset_step": None, "per_seed": []}  # fmt: skip
    shares = [s["final_share"] for s in per_seed]
    onsets = [s["onset_step"] for s in per_seed]
    saturated = min(shares) >= threshold
    return {
        "seeds": len(per_seed),
        "saturated": saturated,
        "layer": per_seed[0]["layer"],
        "share_low": min(shares),
        "share_high": max(shares),
        "onset_step": max(onsets) if saturated else None,
        "per_seed": per_seed,
    }


def _percent(share: float) -> str:
    return f"{significant(100 * share, 2)}%"


def _percent_range(low: float, high: float) -> str:
    return _percent(low) if _percent(low) == _percent(high) else f"{_percent(low)}–{_percent(high)}"


def dyt_diagnosis(
    authors: dict, rmsfinal: dict, rmsfinal_vs_rms: dict | None, *, margin: float, threshold: float
) -> str:
    """The sentence that names the part of the authors' recipe that fails, from the measured numbers: whether the
    final DyT layer saturates (`traced_saturation` of the recipe, against `threshold`), and whether DyT in the blocks
    with an RMSNorm final norm is within `margin` nats of RMSNorm (the paired interval), and where its own last DyT
    layer sits."""
    if authors["seeds"] == 0:
        first = "No run of the authors' recipe finished with a trace, so its final DyT layer cannot be read"
    elif authors["saturated"]:
        first = (
            f"The part of the authors' recipe that fails is its final DyT layer: it saturates, with "
            f"{_percent_range(authors['share_low'], authors['share_high'])} of its inputs where float32's "
            f"tanh′(αx) is exactly 0 at the end (over {authors['seeds']} seeds), and at least "
            f"{_percent(threshold)} from step {authors['onset_step']} on"
        )
    else:
        first = (
            f"The authors' final DyT layer does not saturate: at most {_percent(authors['share_high'])} of its inputs "
            f"sit where tanh′(αx) is 0 at the end (threshold {_percent(threshold)}): it is not stuck on tanh's flat "
            "tails"
        )
    outcome = non_inferiority(rmsfinal_vs_rms)
    lead = "with an RMSNorm final norm, DyT in the blocks is"
    if rmsfinal_vs_rms is None:
        second = "with an RMSNorm final norm a run diverged, so there is no paired interval"
    elif outcome == "no worse":
        second = f"{lead} within the +{margin}-nat margin of RMSNorm ({interval(rmsfinal_vs_rms)})"
    elif outcome == "worse":
        second = (
            f"{lead} still worse than RMSNorm beyond the +{margin}-nat margin ({interval(rmsfinal_vs_rms)}), so the "
            "blocks' DyT layers fail too"
        )
    else:
        second = (
            f"{lead} neither within the +{margin}-nat margin of RMSNorm nor beyond it ({interval(rmsfinal_vs_rms)})"
        )
    if rmsfinal["seeds"]:
        second += (
            f", and its last DyT layer (the last block's) ends with "
            f"{_percent_range(rmsfinal['share_low'], rmsfinal['share_high'])} of its inputs saturated"
        )
    return f"{first}; {second}."


def trace_table(runs_by_label: dict[str, dict]) -> dict:
    """Each variant's trace, compact for the evidence: steps, α per DyT layer, the last hidden RMS, the final DyT
    layer's saturated share and the gradient reaching the blocks."""
    out = {}
    for label, run in runs_by_label.items():
        trace = run["dyt_trace"]
        if not trace:
            out[label] = None
            continue
        layer = final_dyt_layer(trace[-1])
        out[label] = {
            "final_dyt_layer": layer,
            "step": [p["step"] for p in trace],
            "alpha": {name: [p["alpha"][name] for p in trace] for name in trace[0]["alpha"]},
            "final_hidden_rms": [p["final_hidden_rms"] for p in trace],
            "final_layer_saturated_share": [p["saturated_share"][layer] for p in trace],
            "block_gradient": [p["block_gradient"] for p in trace],
        }
    return out


def traced_runs(study: Landscape, seed: int = 0) -> dict[str, dict]:
    """One run per traced DyT variant at the reference learning rate: the one of `seed`."""
    return {label: run for label in TRACED for run in study.pick("small", label) if run["tag"]["seed"] == seed}


def learned(final: float, entropy: float) -> str:
    """How far a final loss got: past byte frequencies (the unigram entropy) by at least 0.25 nats, or not."""
    if final >= entropy:
        return "did not even reach byte frequencies"
    return "learned little beyond byte frequencies" if entropy - final < 0.25 else "learned context"


def dyt_claim(
    study: Landscape, pairs: dict, alphas: pd.DataFrame, probes: dict, *, saturated_share: float
) -> ClaimOutcome:
    """V1 by non-inferiority of the authors' recipe against RMSNorm under the same optimiser, at the study's loss
    margin; the caveats are LayerNorm (the same margin) and α₀'s tuning (the authors' α₀ more than the margin off the
    best, or the best α₀ differing by width). The diagnosis sentence reads the traces against `saturated_share`."""
    P, margin, entropy = study.settings, study.loss_margin, study.entropy
    best_alphas = alphas["best α₀"].tolist()
    default_gap = (alphas["DyT loss at the authors' α₀"] - alphas["best DyT loss"]).max()
    tuning_matters = bool(default_gap > margin) or len(set(best_alphas)) > 1
    primary = pairs["dyt_minus_rms"]
    v1_outcome = non_inferiority(primary)
    v1_layer = non_inferiority(pairs["dyt_minus_layer"])
    if v1_outcome == "no worse":
        verdict = decide(True, caveat=tuning_matters or v1_layer != "no worse")
    elif v1_outcome == "worse":
        verdict = "does not hold"
    else:
        verdict = "not testable here"
    saturation = {label: traced_saturation(study.pick("small", label), saturated_share) for label in TRACED}
    diagnosis = dyt_diagnosis(
        saturation["dyt-authors"],
        saturation["dyt-rmsfinal"],
        pairs["dyt_rmsfinal_minus_rms"],
        margin=margin,
        threshold=saturated_share,
    )
    summary = (
        (
            f"DyT by the authors' LLaMA recipe − RMSNorm under the same AdamW, final loss {interval(primary)}: "
            f"{v1_outcome} against a +{margin} margin; best α₀ "
            + ", ".join(f"{significant(a, 2)} at width {w}" for w, a in zip(P["alpha_widths"], best_alphas))
            + ". "
        )
        if primary
        else "A DyT or RMSNorm run diverged at the reference learning rate, so no paired interval exists. "
    ) + diagnosis
    v1_compared = ("rms", "dyt-authors", "dyt-rmsfinal")
    ranges = {label: study.usable_range("small", label, v1_compared) for label in v1_compared}
    finals_by_label = {label: float(np.nanmean(finals(study.pick("small", label)))) for label in SMALL_VARIANTS}
    attention_alpha, other_alpha = authors_alpha_init(P["small"]["width"])
    evidence = {
        "embedding_rms_at_init": probes["embedding_rms"],
        "scaled_embedding_rms_at_init": probes["scaled_embedding_rms"],
        "mean_final_loss": finals_by_label,
        "unigram_entropy_nats": entropy,
        "block_gradient_at_init": probes["block_grad"],
        "authors_alpha_init": {"attention": attention_alpha, "other": other_alpha},
        "saturated_share_threshold": saturated_share,
        "saturation": {label: {k: v for k, v in s.items() if k != "per_seed"} for label, s in saturation.items()},
        "saturation_per_seed": {label: s["per_seed"] for label, s in saturation.items()},
        "trace_seed0": trace_table(traced_runs(study)),
        **pairs,
        "alpha_sensitivity": alphas.to_dict("records"),
        "default_alpha_gap_to_best": float(default_gap),
        "lr_range": ranges,
        "model": P["small"],
        "train": P["small_train"],
        "authors_train": AUTHORS_TRAIN,
        "corpus_sha256": study.corpus_sha256,
        "margin": margin,
    }
    finding = Finding(
        verdict,
        summary,
        evidence,
        key_number=primary["mean_difference"] if primary else None,
        threshold=margin,
        spread=primary["sd_of_differences"] if primary else None,
        rule="Non-inferiority of the DyT authors' LLaMA recipe (DyT without β in every norm, α₀ "
        f"{attention_alpha:g} in front of attention and {other_alpha:g} elsewhere, embeddings times a learnable "
        "√width, AdamW decay on every parameter) against RMSNorm under the same AdamW: holds when the 95% paired "
        f"interval of DyT − RMSNorm lies below +{margin} nats at the baseline's learning rate; caveat when it is not "
        f"also below LayerNorm + {margin} or α₀ needs tuning (the authors' α₀ more than {margin} nats off the best, or "
        "the best α₀ differs between widths); does not hold when the interval lies above. The diagnosis calls the "
        f"final DyT layer saturated when, in every seed, at least {_percent(saturated_share)} of its inputs end where "
        "float32's tanh′ is 0; DyT with an RMSNorm final norm is read against the same margin, not judged.",
    )
    paragraph = _dyt_paragraph(study, verdict, summary, probes, saturation, ranges, finals_by_label)
    return ClaimOutcome(finding, paragraph)


def _dyt_paragraph(study, verdict, summary, probes, saturation, ranges, finals_by_label) -> str:
    P, entropy = study.settings, study.entropy
    authors, embedding_rms = saturation["dyt-authors"], probes["embedding_rms"]
    block_grad = probes["block_grad"]
    end_gradient = (
        ", ".join(f"{significant(s['final_block_gradient'])} in seed {s['seed']}" for s in authors["per_seed"])
        if authors["per_seed"]
        else "not measured"
    )
    end_rms = {label: [s["final_hidden_rms"] for s in saturation[label]["per_seed"]] for label in saturation}
    rms_range = {
        label: f"{significant(min(v))}–{significant(max(v))}" if v else "not measured" for label, v in end_rms.items()
    }
    return (
        f"**Verdict (V1): {verdict}.** {summary} "
        f"Averaged over seeds, the authors' recipe ends at {significant(finals_by_label['dyt-authors'])} nats per byte "
        f"and {learned(finals_by_label['dyt-authors'], entropy)}; with an RMSNorm final norm at "
        f"{significant(finals_by_label['dyt-rmsfinal'])}; RMSNorm under the same AdamW at "
        f"{significant(finals_by_label['rms-authors'])} and under the study's at {significant(finals_by_label['rms'])} "
        f"(unigram entropy {significant(entropy)}). "
        f"At the end of training the last hidden state, the final norm's input, has RMS {rms_range['dyt-authors']} "
        f"with the authors' recipe and {rms_range['dyt-rmsfinal']} with an RMSNorm final norm, and the mean gradient "
        f"reaching the blocks' matrices in the authors' recipe is {end_gradient} (at initialisation "
        f"{significant(block_grad['dyt-authors'])}; RMSNorm's {significant(block_grad['rms'])}). "
        f"The study's earlier recipe (β, α₀ = 0.5 everywhere, the scalars undecayed) ends at "
        f"{significant(finals_by_label['dyt'])} and plain DyT, without the embedding scale, at "
        f"{significant(finals_by_label['dyt-plain'])}: the scale lifts the first layer's input from RMS "
        f"{significant(embedding_rms)} to {significant(probes['scaled_embedding_rms'])}. "
        f"Usable learning rates reach {significant(ranges['dyt-authors']['lr_high'])} with the authors' recipe, "
        f"{significant(ranges['dyt-rmsfinal']['lr_high'])} with an RMSNorm final norm and "
        f"{significant(ranges['rms']['lr_high'])} for RMSNorm. "
        f"**What this scale can and cannot show:** a small model can show whether the authors' recipe trains at all "
        f"at this width and learning rate, and which layer stops it. It cannot show their large-model parity: at "
        f"width {P['small']['width']} the √width scale is {significant(math.sqrt(P['small']['width']))}, not the 64 of "
        f"a 4096-wide LLaMA; the runs are {P['small_train']['steps']} steps, not billions of tokens; and the authors "
        f"give α₀ only for widths of 4096 and more, so the α₀ here is their narrowest model's, checked by the sweep."
    )


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
        "ranges": {p: study.usable_range("deep", p, PLACEMENTS) for p in PLACEMENTS},
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

QK_COMPARED = ("rms", "rms+qk")


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


def _failure(lr_range: dict) -> str:
    at = lr_range["diverges_at"]
    return "no failure on the grid" if at is None else f"fails at {significant(at)}"


def qk_claim(study: Landscape, logit_rows: pd.DataFrame) -> ClaimOutcome:
    """V3: needs a failure without QK-norm on the grid; holds when QK-norm's highest usable LR is higher in every
    seed. The key number is the mean gain in decades, log10(highest usable LR with ÷ without), against 0."""
    P = study.settings
    small_ranges = study.ranges("small", QK_COMPARED)
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
    rms_range, qk_range = (study.usable_range("small", label, QK_COMPARED) for label in QK_COMPARED)
    if not noqk_fails:
        verdict = "not testable here"
    elif gain_mean > 0 and min(gains) > 0:
        verdict = decide(True, caveat=qk_range["diverges_at"] is None)
    else:
        verdict = "does not hold"
    summary = (
        f"Highest usable LR without QK-norm {significant(rms_range['lr_high'])} ({_failure(rms_range)}), with "
        f"QK-norm {significant(qk_range['lr_high'])} ({_failure(qk_range)}): a gain of {significant(gain_mean)} "
        f"decades over {len(gains)} seeds."
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
    "DyT (authors' recipe)": ("small", "dyt-authors", SMALL_VARIANTS["dyt-authors"]),
    "DyT, RMSNorm final": ("small", "dyt-rmsfinal", SMALL_VARIANTS["dyt-rmsfinal"]),
    "QK-norm": ("small", "rms+qk", dict(qk_norm=True)),
    "post-LN": ("deep", "post", dict(placement="post")),
    "Peri-LN": ("deep", "peri", dict(placement="peri")),
    "OLMo 2 (post-sublayer)": ("deep", "post-sublayer", dict(placement="post-sublayer")),
    "LayerNorm Scaling": ("deepest", "1/√l", dict(depth_scaling=True)),
}


# The authors' DyT recipe is paired with RMSNorm under its own AdamW, as in V1.
SUMMARY_BASELINE = {"dyt-authors": "rms-authors", "dyt-rmsfinal": "rms-authors"}


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
        paired = study.versus(scale, SUMMARY_BASELINE.get(label, "rms" if scale == "small" else "pre"), label)
        if scale in ("small", "deep"):
            rng = study.usable_range(scale, label, summary_pair(scale, label))
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


def summary_pair(scale: str, label: str) -> tuple[str, str]:
    """The grid baseline a summary variant's usable range is judged with (RMSNorm's grid also for the DyT recipe,
    whose own baseline runs at the reference learning rate only), and the variant."""
    return ({"small": "rms", "deep": "pre"}[scale], label)


def baseline_ranges(study: Landscape) -> list[dict | None]:
    """The baseline's usable LR range beside each summary variant, judged within the same pair (None at the
    deepest, run at one LR)."""
    ranges = []
    for scale, label, _ in SUMMARY_VARIANTS.values():
        pair = summary_pair(scale, label) if scale in ("small", "deep") else None
        ranges.append(study.usable_range(scale, pair[0], pair) if pair else None)
    return ranges


# ---- weighing a committed GPU study ------------------------------------------------------------------------

GPU_EXPERIMENTS = {"V2": "placements", "V3": "width", "V4": "depth_scaling"}  # normlab.gpt.experiments' names
V1_NEEDS = ("rms-authors", "dyt-authors", "layer")  # V1's primary pair and its LayerNorm caveat
V1_NAMES = {
    "rms-authors": "RMSNorm under the authors' AdamW",
    "dyt-authors": "DyT by the authors' recipe",
    "layer": "LayerNorm",
}


def gpu_runs(outcome: dict, entropy: float) -> list[dict]:
    """A GPU experiment's records (normlab.gpt.experiments) as `landscape_run` records, judged by this chapter's
    own definitions: a run diverged when it blew up or ended above its initial loss, and trained when it did not
    diverge and ended below the unigram entropy. The GPU study trains K models at once, so a model has no step time
    of its own, and it probes no attention logits, gradients or DyT traces: those fields are empty."""
    runs = []
    for record in outcome["runs"]:
        val = [tuple(point) for point in record["val"]]
        final = float(record["final_val_loss"])
        diverged = bool(record["diverged"]) or not math.isfinite(final) or (len(val) > 1 and final > val[0][1])
        runs.append(
            {
                "tag": {**record["tag"], "reference_alpha": True},
                "model": record["model"],
                "train": record["train"],
                "diverged": diverged,
                "trained": (not diverged) and final < entropy,
                "final_val_loss": final,
                "initial_val_loss": record["initial_val_loss"],
                "final_drop": record["final_drop"],
                "steps_done": record["steps_done"],
                "median_step_time": math.nan,
                "val": val,
                "stream_rms": [tuple(row) for row in record.get("stream_rms", [])],
                "grad_norms": [],
                "max_logit": [],
                "dyt_trace": [],
                "drop_one": record.get("drop_one"),
                "corpus_sha256": record["corpus_sha256"],
            }
        )
    return runs


def gpu_landscape(outcome: dict, corpus, *, loss_margin: float, usable_tolerance: float) -> Landscape:
    """The chapter's lookups over one GPU experiment, at the GPU profile's own scales and grids, with the margins
    this chapter stated before measuring."""
    return Landscape(
        outcome["settings"],
        gpu_runs(outcome, corpus.unigram_entropy_nats),
        corpus,
        loss_margin=loss_margin,
        usable_tolerance=usable_tolerance,
    )


def placement_power(finding: Finding) -> float | None:
    """V2's power: the half-width of the 95% t-interval over seeds of the weaker output-normalising placement's
    growth relative to pre-LN's, over the threshold it is judged against; None with fewer than two finite seeds."""
    from normlab.analysis.shared.parity import t975

    evidence = finding.evidence
    means = evidence["relative_growth_mean"]
    finite = {p: m for p, m in means.items() if m is not None and math.isfinite(m)}
    if not finite or not finding.threshold:
        return None
    worse = max(finite, key=finite.get)
    ratios = np.array(evidence["growth"][worse], dtype=float) / np.array(evidence["growth"]["pre"], dtype=float)
    ratios = ratios[np.isfinite(ratios)]
    if len(ratios) < 2:
        return None
    half_width = t975(len(ratios) - 1) * float(np.std(ratios, ddof=1)) / math.sqrt(len(ratios))
    return half_width / finding.threshold


def depth_power(finding: Finding) -> float | None:
    """V4's power: the paired interval of the later-half share's change, half-width over its margin."""
    from normlab.analysis.shared.gpu_study import interval_power

    return interval_power(finding.evidence.get("share_change"))


def v1_not_on_gpu(outcome: dict | None) -> str:
    """Why the GPU study cannot weigh V1: what of the chapter's design its width experiment lacks."""
    if outcome is None:
        return "it did not finish the `width` experiment"
    labels = {r["tag"]["label"] for r in outcome["runs"]}
    lacking = [label for label in V1_NEEDS if label not in labels]
    if "alpha_widths" not in outcome["settings"]:
        lacking.append("α₀ sweep over two widths")
    shown = [V1_NAMES.get(item, item) for item in lacking]
    return "its width experiment trains " + (
        f"no {', no '.join(shown)}" if lacking else "the full design, which this chapter does not yet weigh"
    )


def landscape_gpu_claims(
    studies: list,
    corpus,
    cpu: dict,
    *,
    where: str,
    loss_margin: float,
    usable_tolerance: float,
    pre_growth_needed: float,
    max_relative_growth: float,
    curse_share: float,
) -> tuple[dict, str]:
    """V2, V3 and V4 weighed: each GPU experiment's runs judged by this chapter's own `placement_claim`, `qk_claim`
    and `depth_claim` with the margins stated before measuring, then combined with this run's finding by the shared
    rule (`gpu_study.weigh`). `cpu`: this run's findings by claim (V1 to V4). Returns the findings to record (V1
    unchanged: the GPU study does not train its design, and the text says why) and the markdown to show."""
    from normlab.analysis.shared import gpu_study as G

    if not studies:
        return dict(cpu), G.none_committed(GPU_EXPERIMENTS["V2"], studies)
    found = {claim: G.latest_with(studies, name) for claim, name in GPU_EXPERIMENTS.items()}
    combined, sides, notes = dict(cpu), {}, []
    for claim, study in found.items():
        if study is None:
            names = ", ".join(s.source for s in studies)
            notes.append(
                f"{claim}: not measured on GPU: the committed study ({names}) lacks the `{GPU_EXPERIMENTS[claim]}` "
                "experiment (listed as missing), so this run's verdict stands."
            )
            continue
        gpu = gpu_landscape(
            study.experiment(GPU_EXPERIMENTS[claim]), corpus, loss_margin=loss_margin, usable_tolerance=usable_tolerance
        )
        if claim == "V2":
            measures = placement_measures(gpu)
            finding = placement_claim(
                gpu, measures, pre_growth_needed=pre_growth_needed, max_relative_growth=max_relative_growth
            ).finding
            powers = (placement_power(cpu[claim]), placement_power(finding))
        elif claim == "V3":
            finding = qk_claim(gpu, final_logits(gpu)).finding
            powers = (None, None)  # "higher in every seed" has no interval: this run decides, the GPU may add a caveat
        else:
            finding = depth_claim(gpu, curse_share=curse_share).finding
            powers = (depth_power(cpu[claim]), depth_power(finding))
        cpu_side = G.Side(where, cpu[claim], powers[0], False)
        gpu_side = G.Side(study.label, finding, powers[1], True)
        sides[claim] = (cpu_side, gpu_side, G.weigh(cpu_side, gpu_side))
        combined[claim] = sides[claim][2]
    width = found["V3"]
    notes.insert(0, f"V1: not measured on GPU: {v1_not_on_gpu(width and width.experiment('width'))}.")
    table = G.side_by_side(sides) if sides else ""
    return combined, "\n\n".join(part for part in (table, " ".join(notes)) if part)
