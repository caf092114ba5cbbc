"""The gain chapter's trainings: the pre-LN and post-LN models the forward section scales, and the decay sweep."""

from __future__ import annotations

from normlab.analysis.gain.profiles import PAIRS, model_settings
from normlab.analysis.shared.missing_runs import CompletedRuns, PairsLeft, complete_pairs, completed, registered_pairs
from normlab.analysis.shared.runs import flat_eval_every, train_job
from normlab.gpt.model import GPT, GPTConfig
from normlab.runtime.jobs import load_weights
from normlab.runtime.parallel import MissingRun, MissingRuns, run_parallel

PLACEMENTS = ("pre", "post")  # the two models kept for the forward scan


def training_jobs(settings: dict) -> tuple[list[dict], list[tuple[float, int]]]:
    """The chapter's trainings: a pre-LN and a post-LN model kept for the forward scan, then the decay sweep.

    The sweep's runs are keyed (gain weight decay, seed); runs of one seed differ only in the gains' decay.
    """
    sweep_steps = settings["sweep_steps"]
    model_kw = model_settings(settings)
    train_kw = dict(
        steps=settings["trained_steps"],
        batch_size=settings["batch"],
        lr=settings["lr"],
        warmup_steps=settings["trained_steps"] // 10,
        eval_every=0,
        eval_batches=2,
        stream_every=0,
        seed=0,
    )
    decay_kw = dict(
        steps=sweep_steps,
        batch_size=settings["batch"],
        lr=settings["lr"],
        warmup_steps=sweep_steps // 10,
        eval_every=flat_eval_every(sweep_steps),
        eval_batches=4,
        stream_every=0,
    )
    jobs = [dict(model={**model_kw, "placement": p}, train=train_kw, keep_weights=True) for p in ("pre", "post")]
    decay_keys = [(wd, seed) for seed in range(settings["seeds"]) for wd in settings["gain_decays"]]
    jobs += [
        dict(
            model=model_kw, train={**decay_kw, "seed": seed, "gain_weight_decay": wd}, history_columns=("gain_norm/*",)
        )
        for wd, seed in decay_keys
    ]
    return jobs, decay_keys


def run_names(settings: dict) -> list[str]:
    """How the page names each training if it goes missing, in `training_jobs`' order."""
    _, decay_keys = training_jobs(settings)
    return [f"{p}-LN kept model" for p in PLACEMENTS] + [f"gain decay {wd:g} seed {seed}" for wd, seed in decay_keys]


def train_models(settings: dict, devices=None) -> tuple[dict, dict]:
    """Run every training in parallel workers: the trained pre-LN and post-LN GPTs, and the sweep's outputs
    ({(gain decay, seed): run}, a `CompletedRuns`). A sweep run that failed every attempt leaves its seed out, and
    the sweep's `gaps` name it; the forward scan cannot do without either kept model, so a missing one stops the
    chapter (`MissingRuns`, naming it)."""
    jobs, decay_keys = training_jobs(settings)
    outputs = run_parallel(
        train_job, jobs, devices=devices, desc="gain runs", names=run_names(settings), missing="keep"
    )
    if any(isinstance(out, MissingRun) for out in outputs[: len(PLACEMENTS)]):
        raise MissingRuns("gain runs (the forward scan needs both kept models)", outputs)
    model_kw = model_settings(settings)
    gpt = {}
    for placement, out in zip(PLACEMENTS, outputs[: len(PLACEMENTS)]):
        gpt[placement] = GPT(GPTConfig(**model_kw, placement=placement))
        gpt[placement].load_state_dict(load_weights(out["weights_path"]))
    everything = completed(outputs, [*PLACEMENTS, *decay_keys])  # the kept models are complete by now
    sweep = CompletedRuns({key: everything[key] for key in decay_keys if key in everything}, everything.gaps)
    return gpt, complete_pairs(sweep, settings["gain_decays"])


def sweep_left(decay_runs, settings: dict) -> PairsLeft:
    """What missing runs left of the decay sweep: its complete seeds against the registered pairs."""
    seeds = len({seed for _, seed in decay_runs})
    return PairsLeft(decay_runs.gaps, seeds, registered_pairs(settings["seeds"], PAIRS["seeds"]))
