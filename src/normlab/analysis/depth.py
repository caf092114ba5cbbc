"""The depth chapter's measurements: pre-LN vs post-LN, RMSNorm vs LayerNorm, as depth grows.

At initialisation (`init_profile`): per block, the gradient norm of the block's weight matrices
(the comparison of Xiong et al. 2020, "On Layer Normalization in the Transformer Architecture",
ICML: at initialisation the gradient of the last layer's weights is large and roughly independent
of the depth L for post-LN, and shrinks like 1/sqrt(L) for pre-LN), the norm of the residual stream,
and the mean pairwise cosine similarity between different tokens' representations.

Xiong et al. analyse an initialisation without depth scaling; the study's GPT scales its residual
projections by 1/sqrt(2*depth) (GPT-2 style), which changes the pre-LN picture. `init_profile` can
measure either (`depth_scaled_init`).

Short training (`train_grid`) records, per run, whether it diverged, whether it learned more than the
byte frequencies (final validation loss below the corpus's unigram entropy), and how far it got.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from normlab.analysis.shared.paired import paired_difference
from normlab.analysis.shared.parity import equivalence_verdict, interval_text
from normlab.analysis.shared.runs import flat_eval_every
from normlab.gpt.model import GPT, GPTConfig
from normlab.study import decide
from normlab.study.findings import Finding

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


def validate_depths(depths, name: str = "depths") -> list[int]:
    """A non-empty list of positive ints, sorted and deduplicated; anything else is a clear ValueError."""
    if isinstance(depths, (int, str)) or not hasattr(depths, "__iter__"):
        raise ValueError(f"{name} must be a list of positive ints such as [2, 4, 8], got {depths!r}")
    depths = list(depths)
    if not depths:
        raise ValueError(f"{name} is empty; give at least one positive depth, e.g. [2, 4, 8]")
    bad = [d for d in depths if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d <= 0]
    if bad:
        raise ValueError(f"{name} must hold positive ints only; these are not: {bad!r}")
    return sorted({int(d) for d in depths})


def block_weight_names(block) -> dict[str, list[str]]:
    """Weight-matrix parameter names of a block, grouped as 'attn', 'mlp', and 'mlp.down' (Xiong's W^{2,l})."""
    names = {"attn": [], "mlp": [], "mlp.down": []}
    for name, p in block.named_parameters():
        if p.dim() < 2:
            continue
        if name.startswith("attn."):
            names["attn"].append(name)
        elif name.startswith("mlp."):
            names["mlp"].append(name)
            if name == "mlp.down.weight":
                names["mlp.down"].append(name)
    return names


def mean_pairwise_cosine(x: torch.Tensor) -> float:
    """Mean cosine similarity between different tokens of the same sequence, averaged over the batch. x: (B, T, d)."""
    unit = F.normalize(x.double(), dim=-1)
    gram = unit @ unit.transpose(1, 2)
    T = x.shape[1]
    if T < 2:
        raise ValueError("need at least two tokens per sequence to compare tokens")
    off_diagonal = gram.sum(dim=(1, 2)) - gram.diagonal(dim1=1, dim2=2).sum(-1)
    return float((off_diagonal / (T * (T - 1))).mean())


def _undo_depth_scaling(model: GPT) -> None:
    # Re-draw the residual projections at the same std as every other matrix (Xiong et al.'s setting).
    for module in model.modules():
        if getattr(module, "is_residual_projection", False):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)


def init_profile(
    depths,
    configs: dict[str, dict],
    tokens: torch.Tensor,
    *,
    width: int = 64,
    heads: int = 4,
    seeds=(0,),
    depth_scaled_init: bool = False,
) -> pd.DataFrame:
    """Per-layer measurements at initialisation.

    `configs` maps a label to GPTConfig overrides (norm, placement, ...); `tokens` is a (B, T+1) LongTensor
    of real text (inputs are tokens[:, :-1], targets tokens[:, 1:]). One row per (config, depth, seed, layer)
    with: grad_norm (all weight matrices of the block), grad_attn, grad_mlp, grad_mlp_down, and at the block's
    output: residual_norm (mean per-token L2 norm) and token_cosine. Layer 0 rows hold the embeddings'
    stream statistics (no block gradients).
    """
    depths = validate_depths(depths)
    if not configs:
        raise ValueError("configs is empty; give at least one, e.g. {'pre-rms': {'norm': 'rms', 'placement': 'pre'}}")
    if tokens.dim() != 2 or tokens.shape[1] < 3:
        raise ValueError(f"tokens must be (batch, time+1) with time >= 2, got shape {tuple(tokens.shape)}")
    x, y = tokens[:, :-1], tokens[:, 1:]
    rows = []
    for (label, overrides), depth, seed in itertools.product(configs.items(), depths, seeds):
        torch.manual_seed(seed)
        cfg = GPTConfig(context=x.shape[1], width=width, depth=depth, heads=heads, **overrides)
        model = GPT(cfg)
        if not depth_scaled_init:
            _undo_depth_scaling(model)
        with model.capture_residual_stream() as stream:
            _, loss = model(x, targets=y)
        loss.backward()
        params = dict(model.named_parameters())
        for layer, h in enumerate(stream):
            row = {
                "config": label,
                "depth": depth,
                "seed": seed,
                "layer": layer,
                "residual_norm": float(h.double().norm(dim=-1).mean()),
                "token_cosine": mean_pairwise_cosine(h),
            }
            if layer > 0:
                block = model.blocks[layer - 1]
                groups = block_weight_names(block)
                prefix = f"blocks.{layer - 1}."

                def norm_of(names):
                    return math.sqrt(sum(float(params[prefix + n].grad.double().pow(2).sum()) for n in names))

                row.update(
                    grad_norm=norm_of(groups["attn"] + groups["mlp"]),
                    grad_attn=norm_of(groups["attn"]),
                    grad_mlp=norm_of(groups["mlp"]),
                    grad_mlp_down=norm_of(groups["mlp.down"]),
                )
            rows.append(row)
    return pd.DataFrame(rows)


def depth_exponents(profile: pd.DataFrame, column: str = "grad_mlp_down") -> pd.DataFrame:
    """Per config: the exponent k of last-layer `column` ~ depth^k (log-log least squares over seeds' means)."""
    last = profile[profile["layer"] == profile["depth"]]
    means = last.groupby(["config", "depth"])[column].mean().reset_index()
    rows = []
    for label, part in means.groupby("config"):
        if part["depth"].nunique() < 2:
            k = float("nan")
        else:
            k = float(np.polyfit(np.log(part["depth"]), np.log(part[column]), 1)[0])
        rows.append({"config": label, "exponent": k})
    return pd.DataFrame(rows)


def gradient_spread(profile: pd.DataFrame, column: str = "grad_norm") -> pd.DataFrame:
    """Per config and depth: first-block / last-block gradient norm (seed mean) and max/min over blocks."""
    blocks = profile[profile["layer"] > 0]
    means = blocks.groupby(["config", "depth", "layer"])[column].mean().reset_index()
    rows = []
    for (label, depth), part in means.groupby(["config", "depth"]):
        part = part.sort_values("layer")
        values = part[column].to_numpy()
        rows.append(
            {
                "config": label,
                "depth": depth,
                "first_over_last": values[0] / values[-1],
                "max_over_min": values.max() / values.min(),
            }
        )
    return pd.DataFrame(rows)


def run_outcome(result, unigram_entropy: float) -> dict:
    """Summarise one TrainResult: diverged, trained (beyond byte frequencies), final and best validation loss."""
    val = result.val["val_loss"].to_numpy(dtype=float)
    final = float(val[-1]) if len(val) else math.nan
    finite = val[np.isfinite(val)]
    diverged = bool(result.diverged) or not math.isfinite(final) or (len(finite) > 0 and final > finite[0])
    losses = result.history["loss"].to_numpy(dtype=float)
    return {
        "diverged": diverged,
        "trained": (not diverged) and final < unigram_entropy,
        "final_val_loss": final,
        "initial_val_loss": float(val[0]) if len(val) else math.nan,
        "best_train_loss": float(np.nanmin(losses)) if len(losses) else math.nan,
        "steps_done": int(result.steps_done),
    }


def job_outcome(out: dict, unigram_entropy: float) -> dict:
    """`run_outcome` for the plain dict a `normlab.analysis.shared.runs.train_job` returns."""
    val = np.array([v for _, v in out["val"]], dtype=float)
    final = float(val[-1]) if len(val) else math.nan
    finite = val[np.isfinite(val)]
    diverged = bool(out["diverged"]) or not math.isfinite(final) or (len(finite) > 0 and final > finite[0])
    return {
        "diverged": diverged,
        "trained": (not diverged) and final < unigram_entropy,
        "final_val_loss": final,
        "initial_val_loss": float(val[0]) if len(val) else math.nan,
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
) -> pd.DataFrame:
    """Train every entry of `grid` in parallel worker processes (`normlab.runtime.parallel.run_parallel`), one row per run.

    Entries are dicts with optional `label`, model overrides under `model` and train overrides under `train`;
    `base_model`/`base_train` are GPTConfig/TrainConfig keyword dicts.
    """
    from normlab.analysis.shared.runs import train_job
    from normlab.runtime.parallel import run_parallel

    if not grid:
        raise ValueError("grid is empty; give at least one run")
    jobs = [
        dict(model={**base_model, **entry.get("model", {})}, train={**base_train, **entry.get("train", {})})
        for entry in grid
    ]
    outputs = run_parallel(train_job, jobs, devices=devices, desc=desc)
    return pd.DataFrame(
        [
            {
                "label": entry.get("label", ""),
                **entry.get("model", {}),
                **entry.get("train", {}),
                **job_outcome(out, unigram_entropy),
            }
            for entry, out in zip(grid, outputs)
        ]
    )


def train_grid(grid: list[dict], base_model: GPTConfig, base_train, corpus, *, progress=None) -> pd.DataFrame:
    """Train every entry of `grid` (dicts with optional keys: label, model overrides under 'model',
    train overrides under 'train') and return one row per run with its `run_outcome` and settings."""
    from normlab.gpt.train import train

    if not grid:
        raise ValueError("grid is empty; give at least one run")
    entropy = corpus.unigram_entropy_nats
    rows = []
    iterator = grid if progress is None else progress(grid)
    for entry in iterator:
        mcfg = replace(base_model, **entry.get("model", {}))
        tcfg = replace(base_train, **entry.get("train", {}))
        result = train(mcfg, tcfg, corpus)
        row = {
            "label": entry.get("label", ""),
            **entry.get("model", {}),
            **entry.get("train", {}),
            **run_outcome(result, entropy),
        }
        rows.append(row)
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- the chapter: sizes, studies and verdicts

PROFILES = {
    "smoke": dict(
        init_depths=[1, 2, 4],
        init_width=32,
        init_context=16,
        init_batch=2,
        init_seeds=[0],
        deep=2,
        width=32,
        context=16,
        batch=4,
        steps=20,
        lr=3e-3,
        warmup=4,
        stress_lrs=[3e-2],
        seeds=2,
        ablation_seeds=2,
        ablation_depth=1,
        ablation_steps=20,
    ),
    # 2 cores: pre/post x RMS/Layer at depth 12 (5 pairs), a no-warm-up sweep, the ablation; ~120 runs. The ablation
    # has 14 seeds: B19's interaction at 5 pairs was −0.0045 nats (−0.039..+0.030) and needed about 15 to decide,
    # and its depth-4 runs are the cheapest in the chapter; B18's pairs would need ~900, beyond any CPU budget.
    "cpu": dict(
        init_depths=[2, 4, 8, 16, 32],
        init_width=48,
        init_context=32,
        init_batch=4,
        init_seeds=[0, 1],
        deep=12,
        width=32,
        context=32,
        batch=8,
        steps=300,
        lr=3e-3,
        warmup=30,
        stress_lrs=[1e-2, 3e-2],
        seeds=5,
        ablation_seeds=14,
        ablation_depth=4,
        ablation_steps=300,
    ),
    "gpu": dict(
        init_depths=[2, 4, 8, 16, 32, 64, 128],
        init_width=256,
        init_context=128,
        init_batch=16,
        init_seeds=[0, 1, 2],
        deep=24,
        width=256,
        context=128,
        batch=32,
        steps=1000,
        lr=1e-3,
        warmup=100,
        stress_lrs=[3e-3, 1e-2],
        seeds=8,
        ablation_seeds=8,
        ablation_depth=8,
        ablation_steps=1000,
    ),
}


def settings_for(profile: str) -> dict:
    """The chapter's sizes for `profile`, checked: a clear ValueError for a profile or a size that cannot work."""
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {list(PROFILES)}, got {profile!r}")
    settings = dict(PROFILES[profile])
    settings["init_depths"] = validate_depths(settings["init_depths"], "init_depths")
    validate_depths([settings["deep"], settings["ablation_depth"]], "deep/ablation_depth")
    if min(settings["seeds"], settings["ablation_seeds"]) < 5 and profile != "smoke":
        raise ValueError("paired verdicts need at least 5 pairs outside the smoke profile")
    return settings


# {pre, post} x {RMSNorm, LayerNorm}, the four models of the chapter.
CONFIGS = {
    f"{placement}-{norm}": {"norm": norm, "placement": placement}
    for placement in ("pre", "post")
    for norm in ("rms", "layer")
}
INIT_NAMES = {False: "Xiong (unscaled)", True: "GPT-2 (depth-scaled)"}


@dataclass
class InitStudy:
    frame: pd.DataFrame  # `init_profile` rows of both initialisations, with an `init` column naming it
    profiles: dict[bool, pd.DataFrame]  # the same, per initialisation (True: GPT-2's depth-scaled)
    exponents: dict[bool, pd.Series]  # fitted exponent of the last block's gradient against depth, per config
    spreads: dict[bool, pd.DataFrame]  # `gradient_spread` per initialisation
    deepest: int


def initialisation_study(settings: dict, corpus) -> InitStudy:
    """The four models at every depth on one fixed batch of validation text, under Xiong et al.'s unscaled
    initialisation and under GPT-2's depth-scaled one."""
    generator = torch.Generator().manual_seed(1234)
    x, y = corpus.batch("val", settings["init_batch"], settings["init_context"], generator)
    tokens = torch.cat([x, y[:, -1:]], dim=1)
    profiles = {}
    for scaled in (False, True):
        frame = init_profile(
            settings["init_depths"],
            CONFIGS,
            tokens,
            width=settings["init_width"],
            seeds=settings["init_seeds"],
            depth_scaled_init=scaled,
        )
        frame["init"] = INIT_NAMES[scaled]
        profiles[scaled] = frame
    return InitStudy(
        frame=pd.concat(profiles.values(), ignore_index=True),
        profiles=profiles,
        exponents={
            scaled: depth_exponents(profiles[scaled]).set_index("config")["exponent"] for scaled in (False, True)
        },
        spreads={scaled: gradient_spread(profiles[scaled]) for scaled in (False, True)},
        deepest=max(settings["init_depths"]),
    )


def exponent_table(init: InitStudy) -> pd.DataFrame:
    """Per config: the fitted exponent k of last-block gradient ∝ L^k under each initialisation."""
    xiong = init.exponents[False]
    return pd.DataFrame(
        {
            "config": xiong.index,
            "exponent, Xiong init": xiong.values,
            "exponent, GPT-2 init": init.exponents[True].reindex(xiong.index).values,
        }
    )


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
        for seed in range(settings["ablation_seeds"])
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
    runs = run_grid(everything, base_model, base_train, corpus.unigram_entropy_nats, devices=devices, desc="depth runs")
    runs["setting"] = ["base lr"] * len(grid) + [
        "stress lr" if e["train"].get("stress") else "base lr" for e in ablation_grid
    ]
    main = runs.iloc[: len(grid)].copy()
    ablation = runs.iloc[len(grid) :].copy()
    main["config"] = main["placement"] + "-" + main["norm"]
    return TrainingStudy(
        paired=main[main["label"] == "paired"], no_warmup=main[main["label"] == "no warm-up"], ablation=ablation
    )


def no_warmup_table(training: TrainingStudy) -> pd.DataFrame:
    return training.no_warmup[["config", "lr", "trained", "diverged", "final_val_loss"]].reset_index(drop=True)


def final_losses(frame: pd.DataFrame, **match) -> list[float]:
    """The final validation losses of the rows matching every `column=value`, in seed order."""
    part = frame
    for key, value in match.items():
        part = part[part[key] == value]
    return part.sort_values("seed")["final_val_loss"].tolist()


def paired_or_none(a: list[float], b: list[float], margin: float) -> dict | None:
    """`paired_difference(a, b, margin)`, or None when a run diverged (a non-finite loss)."""
    if not all(math.isfinite(v) for v in a + b):
        return None
    return paired_difference(a, b, margin)


def pair_spread(pair: dict | None) -> float | None:
    """The standard error of a paired mean difference, None without pairs."""
    return pair["sd_of_differences"] / math.sqrt(pair["pairs"]) if pair else None


def pair_text(pair: dict | None) -> str:
    return interval_text(pair) if pair else "not comparable (a run diverged)"


def b17_measures(init: InitStudy, training: TrainingStudy, settings: dict, margin: float) -> dict:
    """Pre-LN's worst block-to-block gradient ratio at the deepest depth (over both initialisations, and its
    spread seed by seed), how often each placement trained without warm-up, the paired pre − post final
    loss (RMSNorm) and the fitted depth exponents."""
    runs, deepest, exponents = training.paired, init.deepest, init.exponents
    spreads = init.spreads
    deep_pre = pd.concat(
        [
            spreads[s][(spreads[s]["depth"] == deepest) & spreads[s]["config"].str.startswith("pre")]
            for s in (False, True)
        ]
    )
    # Spread over seeds: the same key number (worst pre-LN block-to-block ratio at the deepest depth) seed by seed.
    per_seed = [
        max(
            float(g[(g["depth"] == deepest) & g["config"].str.startswith("pre")]["max_over_min"].max())
            for g in (gradient_spread(init.profiles[s][init.profiles[s]["seed"] == seed]) for s in (False, True))
        )
        for seed in settings["init_seeds"]
    ]
    nowarm = training.no_warmup
    return {
        "pre_spread": float(deep_pre["max_over_min"].max()),
        "pre_spread_sd": float(np.std(per_seed, ddof=1)) if len(per_seed) > 1 else None,
        "pre_rate": float(nowarm[nowarm["placement"] == "pre"]["trained"].mean()),
        "post_rate": float(nowarm[nowarm["placement"] == "post"]["trained"].mean()),
        "pair": paired_or_none(
            final_losses(runs, placement="post", norm="rms"), final_losses(runs, placement="pre", norm="rms"), margin
        ),
        "xiong_pre": float(np.mean([exponents[False][c] for c in ("pre-rms", "pre-layer")])),
        "xiong_post": float(np.mean([exponents[False][c] for c in ("post-rms", "post-layer")])),
        "gpt2_pre": float(np.mean([exponents[True][c] for c in ("pre-rms", "pre-layer")])),
        "gpt2_post": float(np.mean([exponents[True][c] for c in ("post-rms", "post-layer")])),
        "drop": float(runs["final_drop"].mean()),
    }


# What "undamped" can mean: the result the essay leans on bounds the gradient at initialisation only.
B17_UNDAMPED = (
    "'Undamped' is read against Xiong et al. 2020, whose statement is a bound at initialisation: there the trunk is "
    "an identity path, but the last layer's gradient in pre-LN still shrinks as 1/√L."
)
# B18 has no published measurement to hold ours against.
B18_UNSOURCED = (
    "No published study compares post-RMSNorm with post-LayerNorm at depth: the verdict rests on this book's "
    "measurement alone."
)


def b17_verdict(measures: dict, *, spread_limit: float, exponent_tolerance: float) -> str:
    """Holds when pre-LN's gradient spread is within ×`spread_limit` and pre-LN trains without warm-up at least
    as often as post-LN; caveat when post-LN trains as well, pre-LN's paired loss is not better, or Xiong's
    exponents (−0.5 pre-LN, 0 post-LN, each within `exponent_tolerance`) are not seen."""
    m, pair = measures, measures["pair"]
    xiong_match = abs(m["xiong_pre"] + 0.5) <= exponent_tolerance and abs(m["xiong_post"]) <= exponent_tolerance
    pre_better = pair is not None and pair["outcome"] == "different" and pair["mean_difference"] < 0
    holds = m["pre_spread"] <= spread_limit and m["pre_rate"] >= m["post_rate"] and m["pre_rate"] > 0
    return decide(holds, caveat=(m["post_rate"] >= m["pre_rate"]) or not pre_better or not xiong_match)


def b17_paragraph(measures: dict, *, deepest: int, deep: int, spread_limit: float, exponent_tolerance: float) -> str:
    m = measures
    return (
        f"Pre-LN per-block gradients at depth {deepest} differ by at most ×{m['pre_spread']:.2f} (threshold "
        f"×{spread_limit:g}). Without warm-up at depth {deep}, pre-LN trained in {m['pre_rate']:.0%} of runs and "
        f"post-LN in {m['post_rate']:.0%}. Paired final loss, pre-LN − post-LN (RMSNorm): {pair_text(m['pair'])}. "
        f"Last-block gradient ∝ L^{m['xiong_pre']:.2f} (pre) and L^{m['xiong_post']:.2f} (post) under Xiong's "
        f"initialisation, L^{m['gpt2_pre']:.2f} (pre) under GPT-2's. Over the last 10% of the paired runs the loss "
        f"still fell {m['drop']:.4f} nats. {B17_UNDAMPED}\n\n"
        f"**B17 verdict: {b17_verdict(m, spread_limit=spread_limit, exponent_tolerance=exponent_tolerance)}.**"
    )


def b17_finding(
    measures: dict,
    *,
    deepest: int,
    deep: int,
    margin: float,
    spread_limit: float,
    exponent_tolerance: float,
    corpus_sha256: str,
) -> Finding:
    m = measures
    return Finding(
        b17_verdict(m, spread_limit=spread_limit, exponent_tolerance=exponent_tolerance),
        f"Pre-LN per-block gradient norms at depth {deepest} differ by at most ×{m['pre_spread']:.2f} (threshold "
        f"×{spread_limit:g}); without warm-up at depth {deep} pre-LN trained in {m['pre_rate']:.0%} of runs vs "
        f"post-LN {m['post_rate']:.0%}; paired pre − post final loss {pair_text(m['pair'])}; last-block gradient ~ "
        f"L^{m['xiong_pre']:.2f} (pre) vs Xiong et al.'s L^-0.5, L^{m['gpt2_pre']:.2f} under GPT-2 init. "
        + B17_UNDAMPED,
        {
            "deepest_init_depth": deepest,
            "train_depth": deep,
            "pre_ln_gradient_max_over_min": m["pre_spread"],
            "pre_trained_rate_no_warmup": m["pre_rate"],
            "post_trained_rate_no_warmup": m["post_rate"],
            "paired_pre_minus_post_rms": m["pair"],
            "exponent_pre_xiong_init": m["xiong_pre"],
            "exponent_post_xiong_init": m["xiong_post"],
            "exponent_pre_gpt2_init": m["gpt2_pre"],
            "exponent_post_gpt2_init": m["gpt2_post"],
            "loss_drop_last_10pct": m["drop"],
            "margin_nats": margin,
            "corpus_sha256": corpus_sha256,
        },
        key_number=m["pre_spread"],
        threshold=spread_limit,
        spread=m["pre_spread_sd"],
        rule=f"Pre-LN per-block gradient spread ≤ ×{spread_limit:g} and pre-LN trains without warm-up at least as "
        "often as post-LN; caveat when post-LN trains as well, pre-LN's paired loss is not better, or Xiong's "
        "exponents are not seen.",
    )


def b18_measures(init: InitStudy, training: TrainingStudy, margin: float) -> dict:
    """Post-LN, RMSNorm against LayerNorm: the paired final loss (RMSNorm − LayerNorm) and, at the deepest
    depth under Xiong's initialisation, the first/last-block gradient ratio and the last layer's token cosine."""
    runs, deepest, spreads = training.paired, init.deepest, init.spreads[False]

    def at_deepest(config: str, column: str) -> float:
        return float(spreads[(spreads["config"] == config) & (spreads["depth"] == deepest)][column].mean())

    frame = init.frame
    top = frame[(frame["depth"] == deepest) & (frame["layer"] == deepest) & (frame["init"] == INIT_NAMES[False])]
    return {
        "pair": paired_or_none(
            final_losses(runs, placement="post", norm="layer"), final_losses(runs, placement="post", norm="rms"), margin
        ),
        "ratio_rms": at_deepest("post-rms", "first_over_last"),
        "ratio_ln": at_deepest("post-layer", "first_over_last"),
        "cos_rms": float(top[top["config"] == "post-rms"]["token_cosine"].mean()),
        "cos_ln": float(top[top["config"] == "post-layer"]["token_cosine"].mean()),
    }


def b18_init_worse(measures: dict, *, ratio_drop: float, cosine_rise: float) -> bool:
    """RMSNorm worse at initialisation: its first/last gradient ratio smaller by more than `ratio_drop` (a
    share) or its last-layer token cosine higher by more than `cosine_rise`."""
    m = measures
    return (m["ratio_rms"] < (1 - ratio_drop) * m["ratio_ln"]) or (m["cos_rms"] > m["cos_ln"] + cosine_rise)


def b18_verdict(measures: dict, *, ratio_drop: float, cosine_rise: float) -> str:
    """Holds if RMSNorm is worse beyond the margin in training and on one initialisation measure (training alone:
    with caveats); does not hold if the paired interval lies inside the margin; not testable if it is wider."""
    pair = measures["pair"]
    if pair is None:
        return "not testable here"
    training = equivalence_verdict(pair)  # "holds" here means *no* difference, which refutes B18
    if pair["outcome"] == "different" and pair["mean_difference"] > 0:
        worse = b18_init_worse(measures, ratio_drop=ratio_drop, cosine_rise=cosine_rise)
        return "holds" if worse else "holds with caveats"
    return "does not hold" if training in ("holds", "does not hold") else "not testable here"


def b18_paragraph(measures: dict, *, deep: int, deepest: int, ratio_drop: float, cosine_rise: float) -> str:
    m = measures
    return (
        f"Paired final loss, post-RMSNorm − post-LayerNorm at depth {deep}: {pair_text(m['pair'])}. At initialisation "
        f"(depth {deepest}): first/last-block gradient ratio {m['ratio_rms']:.3f} (RMSNorm) vs {m['ratio_ln']:.3f} "
        f"(LayerNorm); last-layer token cosine {m['cos_rms']:.3f} vs {m['cos_ln']:.3f}. {B18_UNSOURCED}\n\n"
        f"**B18 verdict: {b18_verdict(m, ratio_drop=ratio_drop, cosine_rise=cosine_rise)}.**"
    )


def b18_finding(
    measures: dict, *, deep: int, deepest: int, margin: float, ratio_drop: float, cosine_rise: float
) -> Finding:
    m, pair = measures, measures["pair"]
    return Finding(
        b18_verdict(m, ratio_drop=ratio_drop, cosine_rise=cosine_rise),
        f"Post-LN at depth {deep}: paired final loss RMSNorm − LayerNorm {pair_text(pair)}; at init (depth {deepest}) "
        f"first/last gradient ratio {m['ratio_rms']:.3f} vs {m['ratio_ln']:.3f}, last-layer token cosine "
        f"{m['cos_rms']:.3f} vs {m['cos_ln']:.3f}. " + B18_UNSOURCED,
        {
            "train_depth": deep,
            "paired_post_rms_minus_layer": pair,
            "deepest_init_depth": deepest,
            "post_rms_first_over_last": m["ratio_rms"],
            "post_layer_first_over_last": m["ratio_ln"],
            "post_rms_token_cosine": m["cos_rms"],
            "post_layer_token_cosine": m["cos_ln"],
            "init_worse": b18_init_worse(m, ratio_drop=ratio_drop, cosine_rise=cosine_rise),
            "margin_nats": margin,
        },
        key_number=pair["mean_difference"] if pair else None,
        threshold=margin,
        spread=pair_spread(pair),
        rule=f"Paired post-LN final loss RMSNorm − LayerNorm: beyond +{margin:g} nats (and worse at init) holds; "
        f"interval inside ±{margin:g} does not hold; wider than the margin: not testable here.",
    )


SINGLE_SWAPS = ["rms→layer", "swiglu→gelu", "rope→learned", "pre→post"]
DOUBLE_SWAP = "rms→layer + pre→post"
INTERACTION_SWAPS = ("rms→layer", "pre→post", DOUBLE_SWAP)  # with the LLaMA style: the 2x2 the interaction reads


@dataclass
class Ablation:
    swaps: dict[
        str, dict | None
    ]  # per swap run: the paired final-loss change against the LLaMA style, None if diverged
    interaction: dict | None  # paired Δ(double) − Δ(norm) − Δ(placement), None if a run diverged or was not run
    stress_diverged: pd.Series  # per swap label: diverged at the stress learning rate (empty without stress runs)
    base: pd.DataFrame  # the ablation runs at the base learning rate
    absent: tuple[str, ...] = ()  # swaps of the design this run did not train

    @property
    def interaction_absent(self) -> list[str]:
        """The swaps the interaction needs that this run did not train."""
        return [s for s in INTERACTION_SWAPS if s in self.absent]


def ablation_study(training: TrainingStudy, margin: float) -> Ablation:
    """Each swap's paired change against the LLaMA style of the same seed, and the norm × placement interaction.
    A swap absent from the runs is skipped and listed in `absent`; without one of INTERACTION_SWAPS there is no
    interaction."""
    runs = training.ablation
    base = runs[runs["setting"] == "base lr"]
    labels = set(base["label"])
    if "llama" not in labels:
        raise ValueError(
            "the ablation has no 'llama' runs at the base learning rate, so no swap can be paired against the LLaMA "
            f"style; the runs' labels are {sorted(labels)}: train the LLaMA-style model with the same seeds"
        )
    stress = runs[runs["setting"] == "stress lr"].set_index("label")
    llama = final_losses(base, label="llama")
    design = SINGLE_SWAPS + [DOUBLE_SWAP]
    absent = tuple(s for s in design if s not in labels)
    swaps = {s: paired_or_none(llama, final_losses(base, label=s), margin) for s in design if s not in absent}
    interaction = None
    if not any(s in absent for s in INTERACTION_SWAPS):
        norm_l, place_l, double_l = (final_losses(base, label=s) for s in INTERACTION_SWAPS)
        interaction = paired_or_none(
            [a + b for a, b in zip(norm_l, place_l)], [d + l for d, l in zip(double_l, llama)], margin
        )
    stress_diverged = stress["diverged"] if len(stress) else pd.Series(dtype=bool)
    return Ablation(swaps=swaps, interaction=interaction, stress_diverged=stress_diverged, base=base, absent=absent)


def swap_table(ablation: Ablation) -> pd.DataFrame:
    stressed = ablation.stress_diverged
    return pd.DataFrame(
        [
            {
                "swap": s,
                "Δ vs LLaMA (nats)": p["mean_difference"] if p else math.nan,
                "95% CI low": p["ci_low"] if p else math.nan,
                "95% CI high": p["ci_high"] if p else math.nan,
                "outcome": p["outcome"] if p else "diverged",
                "diverges at stress lr": bool(stressed.loc[s]) if s in stressed.index else None,
            }
            for s, p in ablation.swaps.items()
        ]
    )


def b19_verdict(ablation: Ablation) -> str:
    """Interaction beyond the margin: holds with caveats (one pair of parts tested); inside: does not hold (the
    effects add up); wider, a run diverged, or a swap it needs not run: not testable here."""
    if ablation.interaction is None:
        return "not testable here"
    return {"equivalent": "does not hold", "different": "holds with caveats"}.get(
        ablation.interaction["outcome"], "not testable here"
    )


def interaction_text(ablation: Ablation) -> str:
    if ablation.interaction is not None:
        return interval_text(ablation.interaction)
    missing = ablation.interaction_absent
    return f"not computable ({', '.join(missing)} not run)" if missing else "not computable (a run diverged)"


def absent_text(ablation: Ablation) -> str:
    """'' when every swap was run; else the sentence naming the ones that were not."""
    return f" Not run here: {', '.join(ablation.absent)}." if ablation.absent else ""


def b19_paragraph(ablation: Ablation) -> str:
    return (
        f"Interaction of the norm and placement swaps: {interaction_text(ablation)}.{absent_text(ablation)}"
        f"\n\n**B19 verdict: {b19_verdict(ablation)}.**"
    )


def b19_finding(ablation: Ablation, *, depth: int, steps: int, seeds: int, margin: float) -> Finding:
    interaction = ablation.interaction
    singles = ", ".join(
        f"{s} {p['mean_difference']:+.3f}" if p else f"{s} diverged"
        for s, p in ablation.swaps.items()
        if s in SINGLE_SWAPS
    )
    return Finding(
        b19_verdict(ablation),
        f"Interaction of the norm and placement swaps at depth {depth}: {interaction_text(ablation)}; single swaps "
        f"vs LLaMA style: {singles} nats.{absent_text(ablation)}",
        {
            "depth": depth,
            "steps": steps,
            "seeds": seeds,
            "interaction": interaction,
            "swaps": dict(ablation.swaps),
            "stress_diverged": {s: bool(d) for s, d in ablation.stress_diverged.items()},
            "absent_swaps": list(ablation.absent),
            "margin_nats": margin,
            "loss_drop_last_10pct": float(ablation.base["final_drop"].mean()),
        },
        key_number=interaction["mean_difference"] if interaction else None,
        threshold=margin,
        spread=pair_spread(interaction),
        rule=f"Paired interaction Δ(norm+placement) − Δ(norm) − Δ(placement): beyond ±{margin:g} nats holds with "
        "caveats (one pair of parts tested); inside does not hold; wider: not testable here.",
    )


# ---------------------------------------------------------------- a committed GPU study, weighed beside this run

# The paired interval each verdict turns on, by its key in the finding's evidence: its half-width over the margin is
# the run's power (`gpu_study.weigh`). B17's only interval is the pre − post loss pair.
POWER_EVIDENCE = {"B17": "paired_pre_minus_post_rms", "B18": "paired_post_rms_minus_layer", "B19": "interaction"}
GPU_ABSENT_WHY = "they change the model's shapes, and the GPU study trains each batch of models at one shape"


def gpu_runs_frame(outcome: dict, unigram_entropy: float) -> pd.DataFrame:
    """One row per run of a GPU-study experiment: its tag (placement, norm, seed, depth, setting, label, lr) and
    `job_outcome` (the same reading of divergence and of 'trained' as this run's)."""
    if not outcome.get("runs"):
        raise ValueError("the GPU study's experiment has no runs; re-run it, or remove the file")
    return pd.DataFrame([{**r["tag"], **job_outcome(r, unigram_entropy)} for r in outcome["runs"]])


def gpu_training(outcome: dict, depth: int, unigram_entropy: float) -> TrainingStudy:
    """The GPU study's `placement_depth` runs at `depth` in the chapter's own frames (its ablation lives apart)."""
    runs = gpu_runs_frame(outcome, unigram_entropy)
    runs = runs[runs["depth"] == depth].assign(config=lambda f: f["placement"] + "-" + f["norm"])
    return TrainingStudy(
        paired=runs[runs["setting"] == "paired"],
        no_warmup=runs[runs["setting"] == "no warm-up"],
        ablation=pd.DataFrame(),
    )


def gpu_ablation(outcome: dict, unigram_entropy: float) -> TrainingStudy:
    """The GPU study's `ablation` runs (all at the base learning rate; it has no stress runs)."""
    runs = gpu_runs_frame(outcome, unigram_entropy).assign(setting="base lr")
    return TrainingStudy(paired=pd.DataFrame(), no_warmup=pd.DataFrame(), ablation=runs)


def deciding_depth(outcome: dict, claim: str) -> int | None:
    """The deepest depth of a GPU `placement_depth` experiment with every run `claim`'s rule needs: paired runs of
    the four models (B17 and B18), and for B17 the no-warm-up runs as well."""
    tags = [r["tag"] for r in outcome["runs"]]
    usable = []
    for depth in sorted({t["depth"] for t in tags}):
        at = [t for t in tags if t["depth"] == depth]
        paired = {(t["placement"], t["norm"]) for t in at if t["setting"] == "paired"}
        nowarm = {t["placement"] for t in at if t["setting"] == "no warm-up"}
        if paired >= {(p, n) for p in ("pre", "post") for n in ("rms", "layer")} and (
            claim != "B17" or nowarm >= {"pre", "post"}
        ):
            usable.append(depth)
    return max(usable) if usable else None


def _gpu_placement_findings(study, init, settings, margin, b17_rule, b18_rule, corpus) -> tuple[dict, list[str]]:
    """B17 and B18 through the chapter's own measures on the GPU runs at their deciding depths; the
    initialisation half is this run's `init` (the GPU study trains only). Also a line per other depth."""
    outcome = study.experiment("placement_depth")
    entropy, findings, notes = corpus.unigram_entropy_nats, {}, []
    depths = sorted({r["tag"]["depth"] for r in outcome["runs"]})
    for claim in ("B17", "B18"):
        depth = deciding_depth(outcome, claim)
        if depth is None:
            notes.append(f"{claim} is not measured on GPU: {study.source} lacks runs its rule needs at every depth.")
            continue
        training = gpu_training(outcome, depth, entropy)
        if claim == "B17":
            numbers = b17_measures(init, training, settings, margin)
            findings[claim] = b17_finding(
                numbers, deepest=init.deepest, deep=depth, margin=margin, **b17_rule, corpus_sha256=corpus.sha256
            )
        else:
            numbers = b18_measures(init, training, margin)
            findings[claim] = b18_finding(numbers, deep=depth, deepest=init.deepest, margin=margin, **b18_rule)
        others = [
            f"at {d} blocks {pair_text(b18_measures(init, gpu_training(outcome, d, entropy), margin)['pair'])}"
            for d in depths
            if d != depth and claim == "B18"
        ]
        notes.append(
            f"{claim} on GPU is judged at {depth} blocks, the deepest with every run its rule needs"
            + (
                f"; its paired post-RMSNorm − post-LayerNorm loss is also measured {'; '.join(others)}"
                if others
                else ""
            )
            + "."
        )
    return findings, notes


def _gpu_ablation_finding(study, corpus, margin) -> tuple[Finding | None, list[str]]:
    outcome = study.experiment("ablation")
    ablation = ablation_study(gpu_ablation(outcome, corpus.unigram_entropy_nats), margin)
    why = f" ({GPU_ABSENT_WHY})" if ablation.absent else ""
    if ablation.interaction is None:
        reason = interaction_text(ablation).removeprefix("not computable ").strip("()")
        return None, [f"B19 is not measured on GPU: {reason}."]
    s = outcome["settings"]
    finding = b19_finding(ablation, depth=s["depth"], steps=s["steps"], seeds=s["seeds"], margin=margin)
    notes = [f"B19 on GPU: {', '.join(ablation.absent)} not run{why}."] if ablation.absent else []
    return finding, notes


def depth_claims(
    studies: list,
    cpu_findings: dict[str, Finding],
    *,
    init: InitStudy,
    settings: dict,
    margin: float,
    b17_rule: dict,
    b18_rule: dict,
    corpus,
    where: str,
) -> tuple[dict[str, Finding], str]:
    """B17, B18 and B19 weighed: the newest committed GPU study's runs through this chapter's own measures and
    findings, each combined with this run's finding (`cpu_findings`) by `gpu_study.weigh`. Returns the findings to
    record (this run's, unchanged, for a claim the study did not measure) and the markdown to show."""
    from normlab.analysis.shared import gpu_study

    if not studies:
        return dict(cpu_findings), gpu_study.none_committed("placement_depth", studies)
    gpu_findings, notes, sentences = {}, [], []
    study_of = {}
    for experiment in ("placement_depth", "ablation"):
        study = gpu_study.latest_with(studies, experiment)
        if study is None:
            sentences.append(gpu_study.none_committed(experiment, studies))
            continue
        if experiment == "placement_depth":
            found, said = _gpu_placement_findings(study, init, settings, margin, b17_rule, b18_rule, corpus)
        else:
            finding, said = _gpu_ablation_finding(study, corpus, margin)
            found = {} if finding is None else {"B19": finding}
        gpu_findings.update(found)
        study_of.update(dict.fromkeys(found, study))
        notes += said
    combined, sides = dict(cpu_findings), {}
    for claim, gpu in gpu_findings.items():
        mine = cpu_findings[claim]
        cpu_side = gpu_study.Side(
            where, mine, gpu_study.interval_power(mine.evidence.get(POWER_EVIDENCE[claim])), False
        )
        gpu_side = gpu_study.Side(
            study_of[claim].label, gpu, gpu_study.interval_power(gpu.evidence.get(POWER_EVIDENCE[claim])), True
        )
        combined[claim] = gpu_study.weigh(cpu_side, gpu_side)
        sides[claim] = (cpu_side, gpu_side, combined[claim])
    parts = [gpu_study.side_by_side(sides)] if sides else []
    parts += [" ".join(notes + sentences)] if notes or sentences else []
    return combined, "\n\n".join(parts)
