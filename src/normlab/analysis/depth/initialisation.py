"""Section "At initialisation: gradients, residual norm and token similarity": the four models at every depth
on one batch of real text, under Xiong et al.'s Xavier initialisation and under GPT-2's depth-scaled one.

`init_profile` measures, per block, the gradient norm of the block's weight matrices, the norm of the residual
stream, and the mean pairwise cosine similarity between different tokens' representations.

The result the gradients are held against is Theorem 1 of Xiong et al. 2020, "On Layer Normalization in the
Transformer Architecture" (ICML): at initialisation, under Xavier initialisation, the Frobenius norm of the
gradient of the last FFN matrix W^{2,L} is bounded above by O(d·sqrt(ln d)) in post-LN and by O(d·sqrt(ln d / L))
in pre-LN. It is an upper bound with an unknown constant, not a rate: `xiong_bound` sets the constant at the
shallowest depth measured and asks whether the deeper depths lie under it.

The study's GPT scales its residual projections by 1/sqrt(2*depth) (GPT-2 style), which changes the pre-LN
picture. `init_profile` can measure either (`depth_scaled_init`)."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from normlab.analysis.depth.profiles import validate_depths
from normlab.gpt.model import GPT, GPTConfig


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
    """Per-layer measurements at initialisation: under Xavier initialisation (Xiong et al.'s), or with
    `depth_scaled_init` under GPT-2's.

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
        init = "gpt2" if depth_scaled_init else "xavier"
        cfg = GPTConfig(context=x.shape[1], width=width, depth=depth, heads=heads, init=init, **overrides)
        model = GPT(cfg)
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


# {pre, post} x {RMSNorm, LayerNorm}, the four models of the chapter.
CONFIGS = {
    f"{placement}-{norm}": {"norm": norm, "placement": placement}
    for placement in ("pre", "post")
    for norm in ("rms", "layer")
}


INIT_NAMES = {False: "Xavier (Xiong et al.)", True: "GPT-2 (depth-scaled)"}


# Theorem 1's dependence on the depth L at a fixed width: pre-LN's bound falls as L^-1/2, post-LN's does not move.
BOUND_EXPONENT = {"pre": -0.5, "post": 0.0}


def xiong_bound(profile: pd.DataFrame, column: str = "grad_mlp_down") -> pd.DataFrame:
    """Per config and depth: the last block's `column` (seed mean) against Xiong et al.'s bound with its constant
    set at the shallowest depth L0, where the bound passes through the seed mean: bound(L) = mean(L0) · (L / L0)^k,
    k from `BOUND_EXPONENT` by placement. `ratio` is the seed mean over the bound, a mean against a constant set
    from a mean (a single seed's gradient scatters by about a quarter at these batch sizes, at L0 as much as
    anywhere): above 1 at a deeper depth means the measured gradient lies above the bound's shape there."""
    last = profile[profile["layer"] == profile["depth"]]
    rows = []
    for label, part in last.groupby("config"):
        placement = label.split("-")[0]
        if placement not in BOUND_EXPONENT:
            raise ValueError(f"xiong_bound: Theorem 1 bounds pre-LN and post-LN only, not config {label!r}")
        means = part.groupby("depth")[column].mean()
        shallowest = int(means.index.min())
        for depth in means.index:
            bound = float(means.loc[shallowest]) * (depth / shallowest) ** BOUND_EXPONENT[placement]
            rows.append(
                {
                    "config": label,
                    "depth": int(depth),
                    "measured": float(means.loc[depth]),
                    "bound": bound,
                    "ratio": float(means.loc[depth]) / bound,
                }
            )
    return pd.DataFrame(rows)


def worst_bound_ratio(bounds: pd.DataFrame, placement: str) -> float | None:
    """The largest measured/bound ratio of one placement's configs at the depths above the shallowest (where the
    ratio is 1 by construction); None with a single depth, where the bound's shape cannot be tested."""
    part = bounds[bounds["config"].str.startswith(placement + "-")]
    deeper = part[part["depth"] > part["depth"].min()]
    return float(deeper["ratio"].max()) if len(deeper) else None


def bound_table(init: InitStudy) -> pd.DataFrame:
    """Under Xavier initialisation: per config and depth, the measured last-block gradient, the bound through the
    shallowest depth, and their ratio."""
    frame = xiong_bound(init.profiles[False])
    return frame.rename(
        columns={
            "measured": "‖∂loss/∂W_down‖, seed mean",
            "bound": "bound, constant set at the shallowest depth",
            "ratio": "measured ÷ bound",
        }
    )


@dataclass
class InitStudy:
    frame: pd.DataFrame  # `init_profile` rows of both initialisations, with an `init` column naming it
    profiles: dict[bool, pd.DataFrame]  # the same, per initialisation (True: GPT-2's depth-scaled)
    exponents: dict[bool, pd.Series]  # fitted exponent of the last block's gradient against depth, per config
    spreads: dict[bool, pd.DataFrame]  # `gradient_spread` per initialisation
    deepest: int


def initialisation_study(settings: dict, corpus) -> InitStudy:
    """The four models at every depth on one fixed batch of validation text, under Xiong et al.'s Xavier
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
    """Per config: the fitted exponent k of last-block gradient ∝ L^k under each initialisation (a description of
    the measured slope; Theorem 1 bounds the gradient, it does not give its rate)."""
    xiong = init.exponents[False]
    return pd.DataFrame(
        {
            "config": xiong.index,
            "exponent, Xavier init": xiong.values,
            "exponent, GPT-2 init": init.exponents[True].reindex(xiong.index).values,
        }
    )
