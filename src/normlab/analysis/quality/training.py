"""The chapter's paired trainings: the models' and the runs' configurations, the pool that trains both norms for
every seed, and the record each run leaves."""

from __future__ import annotations

import torch

from normlab.analysis.quality.profiles import NORMS
from normlab.analysis.shared.missing_runs import CompletedRuns, RunGaps, complete_pairs
from normlab.analysis.shared.runs import flat_eval_every, train_job
from normlab.gpt.model import GPT, GPTConfig
from normlab.runtime.environment import hardware
from normlab.runtime.parallel import MissingRun, run_parallel


def model_config(settings: dict, norm: str) -> dict:
    return dict(
        vocab_size=256,
        context=settings["context"],
        width=settings["width"],
        depth=settings["depth"],
        heads=settings["heads"],
        norm=norm,
    )


def parameter_count(settings: dict) -> int:
    """Parameters of the LayerNorm model of this size (RMSNorm's has no norm biases: width·(2·depth+1) fewer)."""
    with torch.random.fork_rng(devices=[]):  # counting builds a model; it must not move the caller's RNG
        return sum(p.numel() for p in GPT(GPTConfig(**model_config(settings, "layer"))).parameters())


def hardware_label(device: str) -> str:
    """'<CPU model> (<n> cores)' or the GPU's name: the label a ladder point carries."""
    info = hardware()
    return info["gpu"] if device.startswith("cuda") and info["gpu"] else f"{info['cpu']} ({info['cpu_cores']} cores)"


def train_config(settings: dict, seed: int) -> dict:
    steps = settings["steps"]
    return dict(
        steps=steps,
        batch_size=settings["batch_size"],
        lr=settings["lr"],
        warmup_steps=settings["warmup_steps"],
        eval_every=flat_eval_every(steps),
        eval_batches=settings["eval_batches"],
        stream_every=0,
        seed=seed,
    )


def norm_backend(settings: dict, norm: str) -> str:
    """The backend normlab's "auto" picks for `norm` in this chapter's model, on this machine."""
    return GPTConfig(**model_config(settings, norm)).norm_backend


def train_pairs(settings: dict, devices: list[str] | None, *, keep_weights: bool = True) -> CompletedRuns:
    """Both norms for every seed, keeping the trained weights: {(norm, seed): run}, each run as `train_job`
    returns it, one training per worker (or per GPU).

    A run that failed every attempt is missing: its pair is left out, and `gaps` names it
    (`normlab.analysis.shared.missing_runs`)."""
    return train_many([settings], devices, keep_weights=keep_weights)[0]


def seed_range(settings: dict) -> range:
    """The seeds a size trains: `seeds` of them from `first_seed` (A9's confirmation starts past its pilot's)."""
    first = settings.get("first_seed", 0)
    return range(first, first + settings["seeds"])


def run_names(keys: list[tuple[str, int]]) -> str:
    """'rms seed 3': how the pages name a missing job."""
    return ", ".join(f"{norm} seed {seed}" for norm, seed in keys)


def train_many(sizes: list[dict], devices: list[str] | None, *, keep_weights: bool) -> list[CompletedRuns]:
    """`train_pairs` for several settings (model sizes) in one pool, so its workers start once; in `sizes`' order,
    each with the gaps of its own size."""
    jobs, owners = [], []  # owners[j]: (which settings, the (norm, seed) keys job j trains)
    for index, settings in enumerate(sizes):
        for norm, seed in [(norm, seed) for seed in seed_range(settings) for norm in NORMS]:
            model, train = model_config(settings, norm), train_config(settings, seed)
            jobs.append(dict(model=model, train=train, keep_weights=keep_weights))
            owners.append((index, [(norm, seed)]))
    prefix = [f"width {s['width']}, depth {s['depth']}: " if len(sizes) > 1 else "" for s in sizes]
    names = [prefix[index] + run_names(keys) for index, keys in owners]
    outputs = run_parallel(train_job, jobs, devices=devices or None, desc="quality pairs", names=names, missing="keep")
    runs: list[dict] = [{} for _ in sizes]
    lost: list[list[str]] = [[] for _ in sizes]
    for (index, keys), name, output in zip(owners, names, outputs):
        if isinstance(output, MissingRun):
            lost[index].append(name)
        else:
            runs[index].update(zip(keys, [output]))
    where = getattr(outputs, "where", RunGaps.where)
    order = [[(norm, seed) for seed in seed_range(s) for norm in NORMS] for s in sizes]
    return [
        complete_pairs(
            CompletedRuns({key: found[key] for key in keys if key in found}, RunGaps(tuple(gone), where)), NORMS
        )
        for found, keys, gone in zip(runs, order, lost)
    ]
