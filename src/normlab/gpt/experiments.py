"""The training chapters' experiments as batched runs: many paired models trained at once, torch alone.

Each experiment is a list of `Batch`es, one `train_batched` call each (members of one shape, one training
recipe), whose members are tagged with what the chapters key a run by (norm, placement, seed, label, ...).
`run_experiment` trains them and returns plain records (lists and dicts of numbers), which the GPU study
(`normlab.study.gpu`) writes to JSON and the chapters read back with their own verdict rules
(`normlab.analysis.shared.gpu_study`). Nothing here judges a claim.

Two profiles: `tiny` (seconds on a CPU, to test the whole path) and `gpu` (one H200, under 8 minutes; the
sizing is `estimated_flops` per experiment against an assumed throughput, in `SIZING` below).

The experiments, by the claims they feed:
- `quality` (A9, B7): RMSNorm/LayerNorm pairs at the chapter's design, wider, deeper and longer;
- `ladder` (the quality chapter's scale ladder): pairs at two sizes above the CPU rungs;
- `placement_depth` (B17, B18): {pre, post} x {RMSNorm, LayerNorm} pairs at two depths, and each without
  warm-up at the base and the stress learning rates;
- `ablation` (B19): the LLaMA-style model, its norm swapped, its placement swapped, both swapped;
- `placements` (V2), `depth_scaling` (V4), `width` (V1, V3): the landscape chapter's deep, deepest and small
  scales, with its learning-rate grids, in the chapter's own record format (`tag`, `model`, `stream_rms`,
  `drop_one`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import torch

from normlab.gpt import gpu_sizes
from normlab.gpt.batched import plan_memory, train_batched
from normlab.gpt.corpus import Corpus
from normlab.gpt.model import GPT, GPTConfig
from normlab.gpt.run_record import run_record
from normlab.gpt.train import TrainConfig
from normlab.runtime.profiles import lookup_profile

# Kernel launches: small deep models are launch-bound on a GPU. Per step and stack (members of one config), about
# 60 launches per block for the vmapped forward and backward and 8 per parameter tensor for the per-member gradient
# norms, clipping and the multi-tensor AdamW; each costs about 6 µs of host time. Judgements, like the throughput.
LAUNCHES_PER_BLOCK = 60
LAUNCHES_PER_TENSOR = 8
SECONDS_PER_LAUNCH = 6e-6
# What one H200 is assumed to sustain on these small float32 (TF32 matmul) models trained K at once: about 8%
# of its dense TF32 peak, since each matrix product is small and the step has many small kernels. A judgement,
# not a measurement: the study records each experiment's seconds, against which the next sizing can be checked.
ASSUMED_FLOPS_PER_SECOND = 4e13
GPU_BUDGET_SECONDS = 8 * 60
# The share of the budget the gpu profile may plan to use: the rest covers the assumption being wrong, start-up,
# compilation of the kernels, the CPU-side statistics and the drop-one probes.
PLANNED_SHARE = 0.85

LLAMA = {"norm": "rms", "placement": "pre", "mlp": "swiglu", "positions": "rope"}
ABLATION_SWAPS = {  # the depth chapter's labels; mlp and positions swaps change shapes and are not batched here
    "llama": {},
    "rms→layer": {"norm": "layer"},
    "pre→post": {"placement": "post"},
    "rms→layer + pre→post": {"norm": "layer", "placement": "post"},
}
PLACEMENTS = ("pre", "post", "peri", "post-sublayer")
SMALL_VARIANTS = {"rms": dict(norm="rms"), "dyt": dict(norm="dyt"), "rms+qk": dict(norm="rms", qk_norm=True)}

PROFILES = {
    "tiny": dict(
        quality=dict(width=16, depth=2, heads=2, context=16, batch_size=4, steps=10, lr=1e-2, warmup_steps=2, seeds=3),
        ladder=dict(
            rungs=[dict(width=16, depth=2, heads=2), dict(width=32, depth=2, heads=2)],
            context=16,
            batch_size=4,
            steps=10,
            lr=1e-2,
            warmup_steps=2,
            seeds=2,
        ),
        placement_depth=dict(
            depths=[2, 3],
            width=16,
            heads=2,
            context=16,
            batch_size=4,
            steps=10,
            lr=3e-3,
            warmup_steps=2,
            seeds=2,
            stress_lrs=[3e-2],
            no_warmup_depths=[2],
        ),
        ablation=dict(depth=2, width=16, heads=2, context=16, batch_size=4, steps=10, lr=3e-3, warmup_steps=2, seeds=2),
        landscape=dict(
            small=dict(width=16, depth=2, heads=2, context=16),
            small_train=dict(steps=10, batch_size=4, warmup_steps=2, lr=1e-2),
            lr_grid=[1e-2, 1e-1],
            qk_lr_grid=[1e-2, 1e-1, 1.0],
            qk_seeds=2,
            seeds=2,
            grid_seeds=1,
            deep_grid_seeds=1,
            deep=dict(width=16, depth=3, heads=2, context=16),
            deep_train=dict(steps=10, batch_size=4, warmup_steps=2, lr=1e-2),
            deep_lr_grid=[1e-2, 1e-1],
            deepest=dict(width=16, depth=4, heads=2, context=16),
            deepest_train=dict(steps=10, batch_size=4, warmup_steps=2, lr=1e-2),
        ),
    ),
    # One H200, under 8 minutes: `sizing("gpu")` gives each experiment's estimated FLOPs, launches and seconds
    # (the table is in normlab.study.gpu's docstring). The quality and landscape designs are the chapters' own gpu
    # profiles (normlab.gpt.gpu_sizes).
    "gpu": dict(
        quality=gpu_sizes.QUALITY,
        # ~3M and ~12M parameters, with the quality experiment's ~6.6M between them (the CPU rungs stop at ~1M)
        ladder=dict(
            rungs=[dict(width=192, depth=6, heads=4), dict(width=384, depth=6, heads=6)],
            context=128,
            batch_size=8,
            steps=600,
            lr=2e-3,
            warmup_steps=60,
            seeds=8,
        ),
        # the no-warm-up runs at the first depth only: at 48 blocks a step is launch-bound, four stacks deep
        placement_depth=dict(
            depths=[24, 48],
            width=128,
            heads=4,
            context=128,
            batch_size=8,
            steps=300,
            lr=1e-3,
            warmup_steps=30,
            seeds=8,
            stress_lrs=[1e-2],
            no_warmup_depths=[24],
        ),
        ablation=dict(
            depth=8, width=128, heads=4, context=128, batch_size=8, steps=600, lr=2e-3, warmup_steps=60, seeds=12
        ),
        landscape=gpu_sizes.LANDSCAPE,
    ),
}
# The least pairs of each paired experiment outside the tiny profile: the chapters' own minimums for the same claims.
MINIMUM_PAIRS = {"quality.seeds": 5, "ladder.seeds": 3, "placement_depth.seeds": 5, "ablation.seeds": 5}
# In the order they run: the verdicts nearest a decision first (A9, then B18 and B19, then V2 and V4), so a run
# cut short keeps the ones that matter most.
EXPERIMENTS = ("quality", "placement_depth", "ablation", "placements", "depth_scaling", "ladder", "width")
CLAIMS = {
    "quality": ("A9", "B7"),
    "ladder": ("A9",),
    "placement_depth": ("B17", "B18"),
    "ablation": ("B19",),
    "placements": ("V2",),
    "depth_scaling": ("V4",),
    "width": ("V1", "V3"),
}


@dataclass
class Batch:
    """One train_batched call: members of one shape and one training recipe, each with the tag it is keyed by."""

    configs: list[GPTConfig]
    seeds: list[int]
    train: TrainConfig
    tags: list[dict]
    stream_statistics: bool = False  # the hidden-state RMS per layer at the end (V2, V4's growth)
    drop_one: bool = False  # each block's contribution at the end (V4)


@dataclass
class Experiment:
    name: str
    claims: tuple[str, ...]
    settings: dict
    batches: list[Batch] = field(default_factory=list)


def _train_config(sizes: dict, device: str, **extra) -> TrainConfig:
    steps = sizes["steps"]
    if steps < 10 or steps % 10:
        raise ValueError(f"steps must be a multiple of 10 so that an evaluation falls at 90% of the run, got {steps}")
    return TrainConfig(
        steps=steps,
        batch_size=sizes["batch_size"],
        lr=sizes["lr"],
        warmup_steps=sizes["warmup_steps"],
        eval_every=steps // 10,
        eval_batches=sizes.get("eval_batches", 4),
        stream_every=0,
        progress=False,
        device=device,
        **extra,
    )


def _members(base: GPTConfig, variants: dict[str, dict], seeds, **tag) -> tuple[list, list, list]:
    """Every seed once per variant, the variant varying fastest (a pair shares its batches)."""
    configs, member_seeds, tags = [], [], []
    for seed in seeds:
        for label, overrides in variants.items():
            configs.append(replace(base, **overrides))
            member_seeds.append(seed)
            tags.append({**tag, "label": label, **overrides, "seed": seed})
    return configs, member_seeds, tags


def _paired(sizes: dict, shape: dict, device: str, seeds, variants, **tag) -> Batch:
    base = GPTConfig(context=sizes["context"], **shape)
    configs, member_seeds, tags = _members(base, variants, seeds, **tag)
    return Batch(configs, member_seeds, _train_config(sizes, device), tags)


NORM_PAIR = {"layer": {"norm": "layer"}, "rms": {"norm": "rms"}}


def quality(sizes: dict, device: str) -> Experiment:
    shape = {k: sizes[k] for k in ("width", "depth", "heads")}
    return Experiment(
        "quality", CLAIMS["quality"], sizes, [_paired(sizes, shape, device, range(sizes["seeds"]), NORM_PAIR)]
    )


def ladder(sizes: dict, device: str) -> Experiment:
    batches = [
        _paired(sizes, rung, device, range(sizes["seeds"]), NORM_PAIR, rung=index)
        for index, rung in enumerate(sizes["rungs"])
    ]
    return Experiment("ladder", CLAIMS["ladder"], sizes, batches)


def placement_depth(sizes: dict, device: str) -> Experiment:
    four = {f"{p}-{n}": {"placement": p, "norm": n} for p in ("pre", "post") for n in ("rms", "layer")}
    batches = []
    for depth in sizes["depths"]:
        shape = dict(width=sizes["width"], depth=depth, heads=sizes["heads"])
        batches.append(_paired(sizes, shape, device, range(sizes["seeds"]), four, depth=depth, setting="paired"))
        if depth not in sizes.get("no_warmup_depths", sizes["depths"]):
            continue
        for lr in [sizes["lr"]] + list(sizes["stress_lrs"]):
            batch = _paired({**sizes, "lr": lr, "warmup_steps": 0}, shape, device, [0], four, depth=depth)
            batch.tags = [{**t, "setting": "no warm-up", "lr": lr} for t in batch.tags]
            batches.append(batch)
    return Experiment("placement_depth", CLAIMS["placement_depth"], sizes, batches)


def ablation(sizes: dict, device: str) -> Experiment:
    shape = dict(width=sizes["width"], depth=sizes["depth"], heads=sizes["heads"], **LLAMA)
    batch = _paired(sizes, shape, device, range(sizes["seeds"]), ABLATION_SWAPS)
    return Experiment("ablation", CLAIMS["ablation"], sizes, [batch])


def _landscape_batches(settings: dict, scale: str, variants: dict, grid, grid_seeds, device, **options) -> list:
    """The landscape chapter's design on one scale: every seed at the reference learning rate, and the first
    `grid_seeds` seeds at the rest of the grid; one batch per learning rate."""
    train = settings[f"{scale}_train"]
    reference = train["lr"]
    batches = []
    for lr in [reference] + [g for g in grid if g != reference]:
        seeds = range(settings["seeds"]) if lr == reference else range(grid_seeds)
        sizes = {**train, "lr": lr, "context": settings[scale]["context"]}
        shape = {k: v for k, v in settings[scale].items() if k != "context"}
        batch = _paired(sizes, shape, device, seeds, variants)
        batch.tags = [
            {"scale": scale, "label": t["label"], "lr": lr, "seed": t["seed"], **variants[t["label"]]}
            for t in batch.tags
        ]
        for key, value in options.items():
            setattr(batch, key, value)
        batches.append(batch)
    return batches


def placements(settings: dict, device: str) -> Experiment:
    variants = {p: {"placement": p} for p in PLACEMENTS}
    batches = _landscape_batches(
        settings,
        "deep",
        variants,
        settings["deep_lr_grid"],
        settings["deep_grid_seeds"],
        device,
        stream_statistics=True,
    )
    return Experiment("placements", CLAIMS["placements"], settings, batches)


def depth_scaling(settings: dict, device: str) -> Experiment:
    # LayerNorm Scaling without GPT-2's scaled initialisation, as Sun et al. apply it (arXiv 2502.05795, footnote 1)
    variants = {"pre": {"depth_scaling": False}, "1/√l": {"depth_scaling": True, "init": "unscaled"}}
    batches = _landscape_batches(settings, "deepest", variants, [], 0, device, stream_statistics=True, drop_one=True)
    return Experiment("depth_scaling", CLAIMS["depth_scaling"], settings, batches)


def width(settings: dict, device: str) -> Experiment:
    batches = _landscape_batches(settings, "small", SMALL_VARIANTS, settings["lr_grid"], settings["grid_seeds"], device)
    return Experiment("width", CLAIMS["width"], settings, batches)


_BUILDERS = {
    "quality": lambda p, d: quality(p["quality"], d),
    "ladder": lambda p, d: ladder(p["ladder"], d),
    "placement_depth": lambda p, d: placement_depth(p["placement_depth"], d),
    "ablation": lambda p, d: ablation(p["ablation"], d),
    "placements": lambda p, d: placements(p["landscape"], d),
    "depth_scaling": lambda p, d: depth_scaling(p["landscape"], d),
    "width": lambda p, d: width(p["landscape"], d),
}


def experiments(profile: str, device: str = "cpu", only: list[str] | None = None) -> list[Experiment]:
    """The profile's experiments, in the study's order (or the ones named in `only`)."""
    sizes = lookup_profile(PROFILES, profile, owner="the GPU study", minimum_pairs=MINIMUM_PAIRS)
    names = list(EXPERIMENTS) if only is None else list(only)
    unknown = [n for n in names if n not in EXPERIMENTS]
    if unknown:
        raise ValueError(f"unknown experiment(s) {', '.join(unknown)}; valid experiments: {', '.join(EXPERIMENTS)}")
    return [_BUILDERS[name](sizes, device) for name in names]


# ---- sizing -------------------------------------------------------------------------------------------------


def batch_flops(batch: Batch) -> float:
    """Estimated floating-point operations of one batch: 6·N per token for the forward and backward of N
    parameters, plus the causal attention (6·depth·context·width per token), per step and member, and the
    evaluations' forwards (2·N per token)."""
    cfg, tcfg = batch.configs[0], batch.train
    with torch.random.fork_rng(devices=[]):
        parameters = GPT(cfg).num_parameters()
    tokens = tcfg.batch_size * cfg.context
    per_token = 6 * parameters + 6 * cfg.depth * cfg.context * cfg.width
    evaluations = (tcfg.steps // tcfg.eval_every + 1) * tcfg.eval_batches * tokens * 2 * parameters
    return len(batch.configs) * (tcfg.steps * tokens * per_token + evaluations)


def estimated_flops(experiment: Experiment) -> float:
    return sum(batch_flops(b) for b in experiment.batches)


def batch_launch_seconds(batch: Batch) -> float:
    """Estimated host time of the kernel launches: per step, each stack (distinct config) launches its own."""
    stacks = {tuple(c.to_dict().items()): c for c in batch.configs}
    with torch.random.fork_rng(devices=[]):
        tensors = len(list(GPT(batch.configs[0]).parameters()))
    per_stack = LAUNCHES_PER_BLOCK * batch.configs[0].depth + LAUNCHES_PER_TENSOR * tensors
    return batch.train.steps * len(stacks) * per_stack * SECONDS_PER_LAUNCH


def estimated_seconds(experiment: Experiment) -> float:
    """The FLOPs at ASSUMED_FLOPS_PER_SECOND plus the launches (they overlap a little; counted apart, to be safe)."""
    return estimated_flops(experiment) / ASSUMED_FLOPS_PER_SECOND + sum(
        batch_launch_seconds(b) for b in experiment.batches
    )


def sizing(profile: str) -> list[dict]:
    """Per experiment: models, estimated FLOPs and seconds (`estimated_seconds`)."""
    rows = []
    for experiment in experiments(profile):
        flops = estimated_flops(experiment)
        rows.append(
            {
                "experiment": experiment.name,
                "models": sum(len(b.configs) for b in experiment.batches),
                "batches": len(experiment.batches),
                "pflop": flops / 1e15,
                "launch_seconds": sum(batch_launch_seconds(b) for b in experiment.batches),
                "seconds": estimated_seconds(experiment),
            }
        )
    return rows


def check_memory(experiment_list: list[Experiment], memory_limit_bytes: int | None = None) -> None:
    """Refuse, before anything trains, a batch whose K members do not fit: the error names the experiment,
    the largest K that fits and what to change."""
    for experiment in experiment_list:
        for index, batch in enumerate(experiment.batches):
            plan = plan_memory(batch.configs, batch.train, batch.seeds, memory_limit_bytes=memory_limit_bytes)
            if not plan.fits:
                gib = 2**30
                raise MemoryError(
                    f"experiment {experiment.name!r}, batch {index}: K={plan.members} models need about "
                    f"{plan.needed / gib:.3g} GiB, but {plan.usable / gib:.3g} GiB is usable on {plan.where}; at most "
                    f"K={plan.largest_k} fit: lower the pairs or seeds of {experiment.name!r} in "
                    f"normlab.gpt.experiments.PROFILES, or train on a device with more memory"
                )


# ---- running ------------------------------------------------------------------------------------------------


@torch.no_grad()
def drop_one_losses(model: GPT, batches) -> list[float]:
    """Validation loss with each block in turn replaced by the identity, minus the full model's (nats); the
    landscape chapter's measure, here so that a torch-only machine can take it."""
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


PROBE_SEED = 20_000  # the landscape chapter's probe batches: a generator of their own


def _record(result, tag: dict, batch: Batch, corpus: Corpus, device: str) -> dict:
    record = {
        "tag": tag,
        "model": result.model_config,
        "train": {k: result.train_config[k] for k in ("steps", "batch_size", "lr", "warmup_steps", "seed")},
        **run_record(result),
    }
    diverged = record["diverged"]
    if batch.stream_statistics:
        record["stream_rms"] = [(int(r["step"]), int(r["layer"]), float(r["rms"])) for r in result.stream_rows]
    if batch.drop_one:
        cfg = GPTConfig(**result.model_config)
        generator = torch.Generator().manual_seed(PROBE_SEED)
        probes = [corpus.batch("val", 8, cfg.context, generator, device) for _ in range(4)]
        model = result.model.to(device)
        record["drop_one"] = None if diverged else drop_one_losses(model, probes)
        result.model.to("cpu")
    return record


def run_experiment(experiment: Experiment, corpus: Corpus, *, memory_limit_bytes: int | None = None) -> dict:
    """Train every batch of `experiment` and return its records, with the seconds it took."""
    started = time.perf_counter()
    runs = []
    for batch in experiment.batches:
        trained = train_batched(
            batch.configs,
            batch.train,
            corpus,
            batch.seeds,
            memory_limit_bytes=memory_limit_bytes,
            stream_statistics=batch.stream_statistics,
        )
        runs += [_record(r, tag, batch, corpus, batch.train.device) for r, tag in zip(trained.runs, batch.tags)]
    return {
        "claims": list(experiment.claims),
        "settings": experiment.settings,
        "runs": runs,
        "seconds": time.perf_counter() - started,
        "models": len(runs),
        "estimated_pflop": estimated_flops(experiment) / 1e15,
    }
