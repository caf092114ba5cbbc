"""The chapter's runs: one training run as plain data (`landscape_run`), every run of the design as jobs
(`landscape_jobs`), and the parallel workers that train them (`run_jobs`).

`landscape_run(model=..., train=..., probe_every=..., drop_one=...)` trains
GPTConfig(**model) with TrainConfig(**train) on the study corpus through
`normlab.gpt.train.train` and returns plain data:

- the outcome: the study's run record (`normlab.gpt.run_record`: diverged,
  final and initial validation loss, how much the loss still fell over the
  last 10% of the steps) and whether it trained beyond byte frequencies;
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
  block replaced by the identity, minus the full model's;
- with `saturation_bound` (V6), a DyT model's share of DyT inputs with |αx| above it after training, on the first
  probe batch (`bounded_share`);
- with `train_loss_every`, the training loss in evaluation mode after training (V7, the Derf authors' measure of
  fit) over every `train_loss_every`-th batch the run trained on (`training_batches`);
- with `train_bytes` (V6), the run trains on the first `train_bytes` bytes of the corpus's training split alone
  (`training_prefix`), as Verma's subsets are the first 1M and 10M tokens of WikiText-103's, and is validated on the
  same validation text as every other run; the record keeps the size and the prefix's SHA-256.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from dataclasses import replace

import torch

from normlab.analysis.landscape.probes import bounded_share, dyt_trace_point, max_attention_logit, probe_batches
from normlab.analysis.landscape.profiles import (
    DERF_ARMS,
    DERF_SEED_BASE,
    DERF_TRAIN,
    MAX_LOGIT_PROBED,
    PLACEMENTS,
    REFERENCE_LR_ONLY,
    REGIME_ARMS,
    REGIME_SEED_BASE,
    REGIME_TRAIN,
    REGIME_WARMUP_SHARE,
    SCALE_COST,
    SMALL_VARIANTS,
    VARIANT_TRAIN,
    derf_arm,
    is_dyt,
    paired_seeds,
    regime_arm,
    small_variant,
)
from normlab.analysis.shared.missing_runs import RunGaps
from normlab.gpt.corpus import load_corpus
from normlab.gpt.model import GPT, GPTConfig
from normlab.gpt.run_record import run_record
from normlab.gpt.train import TrainConfig, evaluate
from normlab.gpt.train import train as train_model
from normlab.norms.dyt import authors_alpha_init
from normlab.runtime.parallel import MissingRun, run_parallel, worker_device


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


def training_batches(corpus, mcfg: GPTConfig, tcfg: TrainConfig, every: int) -> list:
    """The batches a run of `tcfg` trained on at steps every, 2·every, ...: train draws one batch a step from a
    generator seeded with the run's seed (both trainers), so the same draws give the same batches."""
    if isinstance(every, bool) or not isinstance(every, int) or not 1 <= every <= tcfg.steps:
        raise ValueError(f"training_batches needs every between 1 and the run's {tcfg.steps} steps, got {every!r}")
    generator = torch.Generator().manual_seed(tcfg.seed)
    batches = []
    for step in range(1, tcfg.steps + 1):
        batch = corpus.batch("train", tcfg.batch_size, mcfg.context, generator)
        if step % every == 0:
            batches.append(tuple(t.to(tcfg.device) for t in batch))
    return batches


def training_prefix(corpus, size: int):
    """The corpus with its training split cut to its first `size` bytes (the validation split, the byte frequencies
    and the corpus's SHA-256 unchanged: every run is validated on the same text and read against the same entropy)."""
    if isinstance(size, bool) or not isinstance(size, int) or not 0 < size <= corpus.train.numel():
        raise ValueError(
            f"training_prefix needs a size between 1 and the {corpus.train.numel()} training bytes, got {size!r}"
        )
    return replace(corpus, train=corpus.train[:size].clone())


def _train_probed(mcfg: GPTConfig, tcfg: TrainConfig, corpus, every: int, probe) -> tuple:
    """Train, calling `probe(model, step)` every `every` steps and after the last step (or the step that diverged)."""
    trace = []

    def on_step(row, model):
        if row["step"] % every == 0:
            trace.append(probe(model, row["step"]))

    result = train_model(mcfg, tcfg, corpus, on_step=on_step)
    if not trace or trace[-1]["step"] != result.steps_done:
        trace.append(probe(result.model, result.steps_done))
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
    train_loss_every: int = 0,
    saturation_bound: float | None = None,
    train_bytes: int | None = None,
    tag: dict | None = None,
) -> dict:
    corpus = load_corpus()
    if train_bytes is not None:
        corpus = training_prefix(corpus, train_bytes)
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
    record = run_record(result)
    diverged = record["diverged"]
    history = result.history
    grad_columns = sorted(
        (c for c in history.columns if c.startswith("grad_norm/blocks.")), key=lambda c: int(c.split(".")[-1])
    )
    out = {
        "tag": tag or {},
        "model": model,
        "train": {k: v for k, v in train.items() if k != "device"},
        **record,
        "trained": (not diverged) and record["final_val_loss"] < corpus.unigram_entropy_nats,
        "median_step_time": result.median_step_time() if len(history) else math.nan,
        "stream_rms": [
            (int(s), int(layer), float(rms))
            for s, layer, rms in zip(result.stream["step"], result.stream["layer"], result.stream["rms"])
        ],
        "grad_norms": [[float(v) for v in row] for row in history[grad_columns].to_numpy()] if grad_columns else [],
        "max_logit": trace,
        "dyt_trace": dyt_trace,
        "drop_one": drop_one_losses(result.model, batches) if drop_one and not diverged else None,
    }
    if saturation_bound is not None:
        out["saturated_share"] = None if diverged else bounded_share(result.model, batches[0][0], saturation_bound)
    if train_loss_every:
        fit = None if diverged else evaluate(result.model, training_batches(corpus, mcfg, tcfg, train_loss_every))
        out["train_loss_eval"] = fit
    if train_bytes is not None:
        out["train_bytes"] = train_bytes
        out["train_prefix_sha256"] = hashlib.sha256(corpus.train.numpy().tobytes()).hexdigest()
    return out


def _initial_model(mcfg: GPTConfig, tcfg: TrainConfig, device: str) -> GPT:
    torch.manual_seed(tcfg.seed)
    return GPT(mcfg).to(device)


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


def qk_points(settings: dict) -> list[tuple[float, int]]:
    """The (learning rate, seed) points at which V3's two variants train: the chapter's grid design (every seed at
    the reference learning rate, the grid seeds elsewhere on the grid) joined with V3's wide grid (Wortsman et al.'s
    protocol: every point on `qk_seeds` seeds), each point once, in the order of the grid design first."""
    ref = settings["small_train"]["lr"]
    points = [(ref, s) for s in range(settings["seeds"])]
    points += [(lr, s) for lr in settings["lr_grid"] if lr != ref for s in range(settings["grid_seeds"])]
    points += [(lr, s) for lr in settings["qk_lr_grid"] for s in range(settings["qk_seeds"])]
    return list(dict.fromkeys(points))


def landscape_jobs(settings: dict, device: str = "cpu") -> list[dict]:
    """Every training run of the chapter, as keyword arguments of `landscape_run`, in the chapter's order."""
    small_steps, small_width = settings["small_train"]["steps"], settings["small"]["width"]
    jobs = []
    for label in SMALL_VARIANTS:
        model = small_variant(label, small_width)
        if label in MAX_LOGIT_PROBED:
            # the largest attention logit is read on seed 0 alone (the figure and the table), so only seed 0 is
            # trained in probed segments; probing does not change a run (the quality chapter tests resuming)
            jobs += [
                _job(
                    settings,
                    device,
                    "small",
                    label,
                    model,
                    lr=lr,
                    seed=s,
                    probe_every=small_steps // 10 if s == 0 else 0,
                )
                for lr, s in qk_points(settings)
            ]
            continue
        probed = is_dyt(label)
        options = dict(probe_every=small_steps // 10 if probed else 0, **({"trace_dyt": True} if is_dyt(label) else {}))
        grid = [settings["small_train"]["lr"]] if label in REFERENCE_LR_ONLY else settings["lr_grid"]
        jobs += _grid_jobs(settings, device, "small", label, model, grid, settings["grid_seeds"], **options)
    for width in settings["alpha_widths"]:
        if width != small_width:
            # V1's α₀ sweep is read against RMSNorm under the same AdamW (the authors' baseline) at each width
            jobs.append(_job(settings, device, "small", "rms-authors", {"norm": "rms", "width": width}))
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
                # Sun et al. apply LayerNorm Scaling without GPT-2's scaled initialisation (abstract, footnote 1)
                dict(depth_scaling=True, init="unscaled") if scaled else dict(depth_scaling=False),
                seed=s,
                drop_one=True,
            )
            for s in paired_seeds(settings, "deepest")
        ]
    return jobs


def derf_jobs(settings: dict) -> list[dict]:
    """V7's runs: each arm at every registered seed (from DERF_SEED_BASE, not the chapter's), with the design's trainer
    (the compiled step; the reference at smoke) on the CPU, evaluation-mode training loss over every tenth batch trained on."""
    model, base = settings["derf"]["model"], settings["derf"]["train"]
    jobs = []
    for label in DERF_ARMS:
        for seed in range(DERF_SEED_BASE, DERF_SEED_BASE + settings["derf_seeds"]):
            train = {
                **_train_dict({"derf_train": base}, "derf"),
                **DERF_TRAIN,
                "step": settings["derf_step"],
                "seed": seed,
            }
            tag = dict(scale="small", label=label, lr=train["lr"], seed=seed, reference_alpha=True)
            jobs.append(
                dict(model={**model, **derf_arm(label, model["width"])}, train=train, tag=tag,
                     train_loss_every=max(1, base["steps"] // 10))
            )  # fmt: skip
    return jobs


def regime_jobs(settings: dict, bound: float) -> list[dict]:
    """V6's runs, as Verma ran them: RMSNorm and DyT (Verma's, `REGIME_ARMS`) at every registered seed (from
    REGIME_SEED_BASE), each for the same `regime_steps` steps of V1's batch, on a training set of each of
    `regime_sizes` bytes (a prefix of the corpus's) with SwiGLU, and on the largest with GELU; warm-up 40% of the steps
    then a constant rate, nanoGPT's AdamW; the design's trainer on the CPU; DyT's share of |αx| > `bound` at the end.
    Largest sets first (their GELU pair second)."""
    model, base = settings["regime"]["model"], settings["regime"]["train"]
    steps = settings["regime_steps"]
    sizes = sorted(settings["regime_sizes"], reverse=True)
    cells = [(size, "swiglu") for size in sizes]
    cells.insert(1, (sizes[0], "gelu"))
    every = max(1, steps // 10)
    jobs = []
    for size, mlp in cells:
        for label in REGIME_ARMS:
            for seed in range(REGIME_SEED_BASE, REGIME_SEED_BASE + settings["regime_seeds"]):
                train = {
                    "batch_size": base["batch_size"], "lr": base["lr"], "steps": steps,
                    "warmup_steps": max(1, round(REGIME_WARMUP_SHARE * steps)),
                    "eval_every": every, "stream_every": every, "eval_batches": 4,
                    **REGIME_TRAIN, "step": settings["regime_step"], "seed": seed,
                }  # fmt: skip
                arm = regime_arm(label, mlp)
                tag = dict(scale="small", label=label, lr=train["lr"], seed=seed, steps=steps, mlp=mlp,
                           train_bytes=size, batch_size=train["batch_size"], reference_alpha=True)  # fmt: skip
                jobs.append(dict(model={**model, **arm}, train=train, tag=tag, train_bytes=size,
                                 saturation_bound=bound if arm["norm"] == "dyt" else None))  # fmt: skip
    return jobs


def _alpha_points(settings: dict, runs: list[dict], width: int) -> list[tuple[float, float | None]]:
    """(α₀, final loss or None where the run diverged or is missing) of the authors' recipe at `width`, seed 0 and
    the reference learning rate, sorted by α₀."""
    ref = settings["small_train"]["lr"]
    points = {}
    for r in runs:
        t = r["tag"]
        if t["label"] == "dyt-authors" and t["seed"] == 0 and t["lr"] == ref and r["model"]["width"] == width:
            ok = "missing" not in r and not r["diverged"]
            points[float(r["model"]["dyt_alpha"])] = r["final_val_loss"] if ok else None
    return sorted(points.items())


def alpha_extension_jobs(settings: dict, runs: list[dict], device: str, *, step: float, floor: float) -> list[dict]:
    """V1's α₀ sweep extended (the design's `alpha_step`, `alpha_floor`): at each width whose best α₀ (seed 0, the
    reference learning rate) is the lowest swept, one run at that α₀ / `step`, unless that falls below `floor`."""
    jobs = []
    for width in settings["alpha_widths"]:
        points = _alpha_points(settings, runs, width)
        trained = [(alpha, loss) for alpha, loss in points if loss is not None]
        if not trained:
            continue
        best = min(trained, key=lambda point: point[1])[0]
        lowest = points[0][0]
        below = lowest / step
        if best == lowest and below >= floor * (1 - 1e-9):
            model = {**small_variant("dyt-authors", width, below), "width": width}
            jobs.append(_job(settings, device, "small", "dyt-authors", model, reference_alpha=False))
    return jobs


def extend_alpha_sweep(settings: dict, runs: list[dict], device: str, *, step: float, floor: float) -> list[dict]:
    """Train `alpha_extension_jobs` round after round until every width's best α₀ is interior or the floor is
    reached; returns the new runs (both widths of a round train in parallel)."""
    added: list[dict] = []
    while jobs := alpha_extension_jobs(settings, runs + added, device, step=step, floor=floor):
        added += run_jobs(jobs, settings)
    return added


def alpha_optimum(settings: dict, runs: list[dict], width: int) -> dict:
    """The sweep at `width`: the α₀ values swept, the best, and whether it is interior (a swept value on each
    side of it)."""
    points = _alpha_points(settings, runs, width)
    trained = [(alpha, loss) for alpha, loss in points if loss is not None]
    best = min(trained, key=lambda point: point[1])[0] if trained else None
    alphas = [alpha for alpha, _ in points]
    return {"alphas": alphas, "best": best, "interior": best is not None and alphas[0] < best < alphas[-1]}


def run_name(job: dict, settings: dict) -> str:
    """How the page names a run if it goes missing: 'small dyt-authors lr 0.003 seed 2', with its width and α₀
    where they are not the scale's own."""
    tag, model = job["tag"], job["model"]
    name = f"{tag['scale']} {tag['label']} lr {tag['lr']:g} seed {tag['seed']}"
    if model["width"] != settings[tag["scale"]]["width"]:
        name += f" width {model['width']}"
    if not tag.get("reference_alpha", True):
        name += f" α₀ {model['dyt_alpha']:g}"
    if "train_bytes" in tag:  # V6: its training set and MLP
        name += f" {tag['train_bytes']} bytes {tag['mlp']}"
    return name


def submission_order(jobs: list[dict]) -> list[int]:
    """The order `run_jobs` starts `jobs` in. Longest scale first, so that no core idles at the end waiting on one
    deep run; within a scale, the first run of each model before the second of any, so that two workers never compile
    the same model at once (on a fresh machine a compiled step's first compilation takes 20-40 s, longer than its
    run, and the second worker then finds it in inductor's cache)."""
    nth_of_its_model, seen = [], Counter()
    for job in jobs:
        model = json.dumps(job["model"], sort_keys=True)
        nth_of_its_model.append(seen[model])
        seen[model] += 1
    return sorted(range(len(jobs)), key=lambda i: (-SCALE_COST[jobs[i]["tag"]["scale"]], nth_of_its_model[i]))


def run_jobs(jobs: list[dict], settings: dict) -> list[dict]:
    """Run every job in parallel worker processes (in `submission_order`) and return the records in the jobs' order.
    A run that failed every attempt leaves, in its place, its `tag`, `model`, `missing` (its name) and `where` it
    failed, for `method.Landscape`."""
    order = submission_order(jobs)
    outputs = run_parallel(
        landscape_run,
        [jobs[i] for i in order],
        workers=settings["workers"],
        devices=settings["devices"],
        desc="landscape runs",
        names=[run_name(jobs[i], settings) for i in order],
        missing="keep",
    )
    where = getattr(outputs, "where", RunGaps.where)
    runs = [None] * len(jobs)
    for i, out in zip(order, outputs):
        if isinstance(out, MissingRun):
            out = {"tag": jobs[i]["tag"], "model": jobs[i]["model"], "missing": out.name, "where": where}
        runs[i] = out
    if len({r["corpus_sha256"] for r in runs if "missing" not in r}) > 1:
        raise RuntimeError("runs saw different corpora")
    return runs
