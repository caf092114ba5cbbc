"""Section "Training at depth": the paired runs of the four models, the no-warm-up sweep and the LLaMA-style
ablation, trained in one pool, and the paired final losses the verdicts read.

Short training (`run_grid`, through the pool) records, per run, whether it diverged, whether it learned more than
the byte frequencies (final validation loss at least the registered trained_minimum below the corpus's unigram
entropy, `normlab.study.trained`'s rule), and how far it got."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from normlab.analysis.depth.profiles import PAIRS
from normlab.analysis.shared.missing_runs import PairsLeft, RunGaps, complete_rows, registered_pairs
from normlab.analysis.shared.runs import flat_eval_every
from normlab.gpt.run_record import run_record
from normlab.study import design
from normlab.study.trained import ArmLosses

LLAMA = {"norm": "rms", "placement": "pre", "mlp": "swiglu", "positions": "rope"}


# One LLaMA-style part swapped at a time, plus one double swap to look for an interaction.
ABLATIONS = {
    "llama": {},
    "rms→layer": {"norm": "layer"},
    "swiglu→gelu": {"mlp": "gelu"},
    "rope→learned": {"positions": "learned"},
    "pre→post": {"placement": "post"},
    "rms→layer + pre→post": {"norm": "layer", "placement": "post"},
}


def run_outcome(result, unigram_entropy: float, minimum: float = 0.0) -> dict:
    """Summarise one TrainResult: `job_outcome` of its run record, with the best training loss."""
    losses = result.history["loss"].to_numpy(dtype=float)
    best = float(np.nanmin(losses)) if len(losses) else math.nan
    return {**job_outcome(run_record(result), unigram_entropy, minimum), "best_train_loss": best}


def job_outcome(out: dict, unigram_entropy: float, minimum: float = 0.0) -> dict:
    """A run record (`normlab.gpt.run_record`, as `train_job` and the GPU study return it) with whether the run
    trained beyond byte frequencies: not diverged, and a final loss at least `minimum` below the unigram entropy
    (the chapter passes the registered trained_minimum, the did-it-train rule's)."""
    final, diverged = out["final_val_loss"], bool(out["diverged"])
    return {
        "diverged": diverged,
        "trained": (not diverged) and unigram_entropy - final >= minimum,
        "final_val_loss": final,
        "initial_val_loss": out["initial_val_loss"],
        "final_drop": out["final_drop"],
        "steps_done": out["steps_done"],
    }


def run_grid(
    grid: list[dict],
    base_model: dict,
    base_train: dict,
    unigram_entropy: float,
    *,
    devices=None,
    desc: str = "depth runs",
    names: list[str] | None = None,
    minimum: float = 0.0,
) -> tuple[pd.DataFrame, RunGaps]:
    """Train every entry of `grid` in parallel worker processes (`normlab.runtime.parallel.run_parallel`), one row per
    run that completed, with the runs that failed every attempt (named by `names`, one per entry).

    Entries are dicts with optional `label`, model overrides under `model` and train overrides under `train`;
    `base_model`/`base_train` are GPTConfig/TrainConfig keyword dicts.
    """
    from normlab.analysis.shared.runs import train_job
    from normlab.runtime.parallel import MissingRun, run_parallel

    if not grid:
        raise ValueError("grid is empty; give at least one run")
    jobs = [
        dict(model={**base_model, **entry.get("model", {})}, train={**base_train, **entry.get("train", {})})
        for entry in grid
    ]
    outputs = run_parallel(train_job, jobs, devices=devices, desc=desc, names=names, missing="keep")
    frame = pd.DataFrame(
        [
            {
                "entry": index,
                "label": entry.get("label", ""),
                **entry.get("model", {}),
                **entry.get("train", {}),
                **job_outcome(out, unigram_entropy, minimum),
            }
            for index, (entry, out) in enumerate(zip(grid, outputs))
            if not isinstance(out, MissingRun)
        ]
    )
    lost = tuple(out.name for out in outputs if isinstance(out, MissingRun))
    return frame, RunGaps(lost, getattr(outputs, "where", RunGaps.where))


def ablation_seed_range(settings: dict) -> range:
    """The ablation's seeds: `ablation_seeds` of them from `ablation_first_seed` (B19's confirmation starts past its
    pilot's seeds)."""
    first = settings.get("ablation_first_seed", 0)
    return range(first, first + settings["ablation_seeds"])


def training_grids(settings: dict) -> tuple[list[dict], list[dict]]:
    """The runs to train: the paired runs and the no-warm-up sweep of the four models at the training depth;
    and the LLaMA-style ablation (paired seeds at the base learning rate, one seed at the stress one)."""
    grid = [
        {"label": "paired", "model": {"norm": norm, "placement": placement}, "train": {"seed": seed}}
        for seed in range(settings["seeds"])
        for placement in ("pre", "post")
        for norm in ("rms", "layer")
    ]
    grid += [
        {"label": "no warm-up", "model": {"norm": norm, "placement": placement}, "train": {"lr": lr, "warmup_steps": 0}}
        for placement in ("pre", "post")
        for norm in ("rms", "layer")
        for lr in [settings["lr"]] + settings["stress_lrs"]
    ]
    steps = settings["ablation_steps"]
    ablation = [
        {
            "label": label,
            "model": {**LLAMA, **swap, "depth": settings["ablation_depth"]},
            "train": {"seed": seed, "steps": steps, "eval_every": flat_eval_every(steps), "warmup_steps": steps // 10},
        }
        for seed in ablation_seed_range(settings)
        for label, swap in ABLATIONS.items()
    ]
    ablation += [
        {
            "label": label,
            "model": {**LLAMA, **swap, "depth": settings["ablation_depth"]},
            "train": {
                "seed": 0,
                "steps": steps,
                "eval_every": flat_eval_every(steps),
                "lr": max(settings["stress_lrs"]),
                "warmup_steps": 0,
                "stress": True,
            },
        }
        for label, swap in ABLATIONS.items()
    ]
    return grid, ablation


@dataclass
class TrainingStudy:
    paired: pd.DataFrame  # the paired runs of the four models at the training depth, with a `config` column
    no_warmup: pd.DataFrame  # one seed of each without warm-up, at each learning rate
    ablation: pd.DataFrame  # the LLaMA-style ablation, `setting` "base lr" or "stress lr"
    # what runs that failed every attempt left of the paired runs (with the no-warm-up sweep) and of the ablation
    left: PairsLeft = PairsLeft(RunGaps(), 0, 0)
    ablation_left: PairsLeft = PairsLeft(RunGaps(), 0, 0)


def training_study(settings: dict, corpus, devices=None) -> TrainingStudy:
    """Every run of the chapter in one pool of parallel workers (`run_grid`)."""
    steps = settings["steps"]
    base_model = dict(context=settings["context"], width=settings["width"], depth=settings["deep"], heads=4)
    base_train = dict(
        steps=steps,
        batch_size=settings["batch"],
        lr=settings["lr"],
        warmup_steps=settings["warmup"],
        eval_every=flat_eval_every(steps),
        eval_batches=2,
        stream_every=0,
        seed=0,
    )
    grid, ablation_grid = training_grids(settings)
    # "stress" is not a TrainConfig field: strip it before the run, keep it on the row.
    everything = grid + [{**e, "train": {k: v for k, v in e["train"].items() if k != "stress"}} for e in ablation_grid]
    names = [run_name(entry) for entry in grid + ablation_grid]  # before the strip: "stress" names a run
    runs, gaps = run_grid(
        everything,
        base_model,
        base_train,
        corpus.unigram_entropy_nats,
        devices=devices,
        desc="depth runs",
        names=names,
        minimum=design.value("B17", "trained_minimum"),  # what "trained" means in B17's runs without warm-up
    )
    settings_of = ["base lr"] * len(grid) + [
        "stress lr" if e["train"].get("stress") else "base lr" for e in ablation_grid
    ]
    runs["setting"] = [settings_of[i] for i in runs["entry"]]
    main = runs[runs["entry"] < len(grid)].drop(columns="entry")
    ablation = runs[runs["entry"] >= len(grid)].drop(columns="entry")
    main["config"] = main["placement"] + "-" + main["norm"]
    # a pair (a seed's four models, or its LLaMA-style run and swaps) that lost a run is left out, as is a learning
    # rate of the no-warm-up sweep that lost one of its four models
    configs = [f"{p}-{n}" for p in ("pre", "post") for n in ("rms", "layer")]
    paired = complete_rows(main[main["label"] == "paired"], "seed", "config", configs)
    no_warmup = complete_rows(main[main["label"] == "no warm-up"], "lr", "config", configs)
    base = ablation[ablation["setting"] == "base lr"]
    ablation = pd.concat(
        [complete_rows(base, "seed", "label", ABLATIONS), ablation[ablation["setting"] == "stress lr"]]
    )
    main_lost = RunGaps(tuple(n for n in gaps.names if n in names[: len(grid)]), gaps.where)
    ablation_lost = RunGaps(tuple(n for n in gaps.names if n in names[len(grid) :]), gaps.where)
    return TrainingStudy(
        paired=paired,
        no_warmup=no_warmup,
        ablation=ablation,
        left=PairsLeft(main_lost, paired["seed"].nunique(), registered_pairs(settings["seeds"], PAIRS["seeds"])),
        ablation_left=PairsLeft(
            ablation_lost,
            complete_rows(base, "seed", "label", ABLATIONS)["seed"].nunique(),
            settings["ablation_seeds"],  # B19's confirmation decides on every registered seed, never on fewer
        ),
    )


def run_name(entry: dict) -> str:
    """How the page names a run of the grid if it goes missing: 'paired pre-rms seed 3', 'no warm-up post-layer lr
    0.01', 'ablation swiglu→gelu seed 2' or 'ablation pre→post at the stress lr'."""
    model, train = entry.get("model", {}), entry.get("train", {})
    if entry["label"] in ("paired", "no warm-up"):
        config = f"{model['placement']}-{model['norm']}"
        return f"{entry['label']} {config} " + (f"seed {train['seed']}" if "seed" in train else f"lr {train['lr']:g}")
    return f"ablation {entry['label']} " + ("at the stress lr" if train.get("stress") else f"seed {train['seed']}")


def no_warmup_table(training: TrainingStudy) -> pd.DataFrame:
    """The runs without warm-up, with the page's column names."""
    columns = {
        "config": "placement and norm",
        "lr": "peak learning rate",
        "trained": "trained",
        "diverged": "diverged",
        "final_val_loss": "final validation loss (nats per byte)",
    }
    return training.no_warmup[list(columns)].rename(columns=columns).reset_index(drop=True)


def final_losses(frame: pd.DataFrame, **match) -> list[float]:
    """The final validation losses of the rows matching every `column=value`, in seed order."""
    part = frame
    for key, value in match.items():
        part = part[part[key] == value]
    return part.sort_values("seed")["final_val_loss"].tolist()


def pair_spread(pair: dict | None) -> float | None:
    """The standard error of a paired mean difference, None without pairs."""
    return pair["standard_error"] if pair else None


CONFIG_NAMES = {
    "pre-rms": "pre-LN RMSNorm",
    "post-rms": "post-LN RMSNorm",
    "pre-layer": "pre-LN LayerNorm",
    "post-layer": "post-LN LayerNorm",
}


def arm_losses(arms: dict[str, pd.DataFrame], entropy: float, scale: str, names: dict[str, str], answers=()):
    """`ArmLosses` (`normlab.study.trained`) from each arm's runs (`arms`: label -> its rows, with final_val_loss and
    initial_val_loss): the mean over its seeds; an arm with no run, or a diverged one (a non-finite loss), is NaN,
    which did not train. `answers`: the arms whose failure to train answers the claim."""

    def mean(rows: pd.DataFrame, column: str) -> float:
        values = rows[column].astype(float) if len(rows) else pd.Series([math.nan])
        return float(values.mean()) if np.isfinite(values).all() else math.nan

    return ArmLosses(
        final={arm: mean(rows, "final_val_loss") for arm, rows in arms.items()},
        initial={arm: mean(rows, "initial_val_loss") for arm, rows in arms.items()},
        entropy=entropy,
        scale=scale,
        names=names,
        answers=tuple(answers),
    )


def paired_arms(training: TrainingStudy, configs) -> dict[str, pd.DataFrame]:
    """The paired runs (with warm-up) of each of `configs` ("post-rms", ...), by config."""
    return {config: training.paired[training.paired["config"] == config] for config in configs}


def no_warmup_arms(training: TrainingStudy) -> tuple[dict[str, pd.DataFrame], dict[str, str]]:
    """Each run without warm-up as its own arm ("no warm-up post-rms lr 0.01"), with the name a sentence gives it."""
    arms, names = {}, {}
    for (config, lr), rows in training.no_warmup.groupby(["config", "lr"], sort=True):
        label = f"no warm-up {config} lr {lr:g}"
        arms[label] = rows
        names[label] = f"{CONFIG_NAMES.get(config, config)} without warm-up at lr {lr:g}"
    return arms, names


# The ablation's arms that B19's interaction reads.
B19_ARMS = ("llama", "rms→layer", "pre→post", "rms→layer + pre→post")


def depth_arms(training: TrainingStudy, P: dict, entropy: float) -> dict[str, ArmLosses]:
    """The arms each trained claim of the chapter reads, as `ArmLosses`: "B17" (its paired runs, and each run
    without warm-up, whose failure to train is B17's measurement: design untrained_answers), "B18", "B19" (the
    ablation's arms its interaction reads) and "paired" (every paired configuration, for the page's table)."""
    deep = f"depth {P['deep']}, width {P['width']}, {P['steps']} steps"
    nowarm, nowarm_names = no_warmup_arms(training)
    base_lr = training.ablation[training.ablation["setting"] == "base lr"]
    return {
        "B17": arm_losses(
            {**paired_arms(training, ["pre-rms", "post-rms"]), **nowarm},
            entropy,
            deep,
            {**CONFIG_NAMES, **nowarm_names},
            answers=nowarm,
        ),
        "B18": arm_losses(paired_arms(training, ["post-rms", "post-layer"]), entropy, deep, CONFIG_NAMES),
        "B19": arm_losses(
            {label: base_lr[base_lr["label"] == label] for label in B19_ARMS},
            entropy,
            f"depth {P['ablation_depth']}, width {P['width']}, {P['ablation_steps']} steps",
            {"llama": "the LLaMA style"},
        ),
        "paired": arm_losses(paired_arms(training, list(CONFIG_NAMES)), entropy, deep, CONFIG_NAMES),
    }
