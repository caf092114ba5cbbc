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
from dataclasses import replace

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from normlab.gpt.model import GPT, GPTConfig

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
