"""The depth chapter's figures, each drawn from what the modules of `normlab.analysis.depth` return.

Each function draws one figure with matplotlib and seaborn under the theme the chapter set, and returns it.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns


def xiong_gradients(init: pd.DataFrame):
    """Last block's MLP output gradient against depth, log-log, one panel per initialisation, with the shape of
    Xiong et al.'s pre-LN bound (∝ 1/√L) through pre-LN RMSNorm's shallowest point."""
    last = init[init["layer"] == init["depth"]]
    fig, ax = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for axis, (name, part) in zip(ax, last.groupby("init")):
        sns.lineplot(data=part, x="depth", y="grad_mlp_down", hue="config", marker="o", errorbar=("pi", 100), ax=axis)
        reference = part[part["config"] == "pre-rms"].groupby("depth")["grad_mlp_down"].mean()
        d0 = reference.index.min()
        axis.plot(
            reference.index, reference.loc[d0] * np.sqrt(d0 / reference.index), "k--", label="bound's shape, ∝ 1/√L"
        )
        axis.set(
            xscale="log", yscale="log", xlabel="depth L (blocks)", ylabel="‖∂loss/∂W_down‖, last block", title=name
        )
        axis.legend(fontsize=8)
    plt.tight_layout()
    return fig


def depth_profile(init: pd.DataFrame, deepest: int):
    """At the deepest depth, per block: gradient norm, residual-stream norm and token cosine."""
    at_depth = init[(init["depth"] == deepest) & (init["layer"] > 0)]
    stream = init[init["depth"] == deepest]
    fig, ax = plt.subplots(1, 3, figsize=(15, 4))
    sns.lineplot(data=at_depth, x="layer", y="grad_norm", hue="config", style="init", errorbar=("pi", 100), ax=ax[0])
    ax[0].set(
        yscale="log",
        xlabel="block",
        ylabel="gradient norm of the block's weights",
        title=f"per-block gradient, depth {deepest}",
    )
    sns.lineplot(
        data=stream,
        x="layer",
        y="residual_norm",
        hue="config",
        style="init",
        errorbar=("pi", 100),
        ax=ax[1],
        legend=False,
    )
    ax[1].set(xlabel="layer (0 = embeddings)", ylabel="mean ‖residual stream‖ per token", title="residual-stream norm")
    sns.lineplot(
        data=stream,
        x="layer",
        y="token_cosine",
        hue="config",
        style="init",
        errorbar=("pi", 100),
        ax=ax[2],
        legend=False,
    )
    ax[2].set(xlabel="layer (0 = embeddings)", ylabel="mean pairwise cosine between tokens", title="token similarity")
    ax[0].legend(fontsize=7)
    plt.tight_layout()
    return fig


def training_at_depth(paired: pd.DataFrame, no_warmup: pd.DataFrame, unigram_entropy: float, depth: int):
    """Final losses of the paired runs (a seed's runs joined) and, without warm-up, per learning rate."""
    fig, ax = plt.subplots(1, 2, figsize=(12, 4))
    sns.stripplot(data=paired, x="config", y="final_val_loss", hue="seed", ax=ax[0], size=6, jitter=False, legend=False)
    for _seed, part in paired.groupby("seed"):
        ax[0].plot(part["config"], part["final_val_loss"], color="grey", lw=0.5)
    ax[0].set(xlabel="configuration", ylabel="final validation loss (nats/byte)", title=f"depth {depth}, with warm-up")
    sns.pointplot(
        data=no_warmup.assign(final=no_warmup["final_val_loss"].clip(upper=6.0)),
        x="lr",
        y="final",
        hue="config",
        ax=ax[1],
    )
    ax[1].axhline(unigram_entropy, color="grey", ls=":")
    ax[1].set(
        xlabel="learning rate (no warm-up)", ylabel="final validation loss, clipped at 6", title="without warm-up"
    )
    plt.tight_layout()
    return fig


def ablation_effects(swaps: dict[str, dict | None], margin: float):
    """Each swap's paired final-loss change (dots: seeds; bar: mean and 95% interval) against the ±margin band;
    a swap whose runs diverged keeps its row, empty."""
    fig, ax = plt.subplots(figsize=(8, 3.6))
    for row, (_name, pair) in enumerate(swaps.items()):
        if pair is None:
            continue
        ax.scatter(pair["differences"], [row] * pair["pairs"], color="grey", s=12)
        ax.errorbar(
            [pair["mean_difference"]],
            [row],
            xerr=[[pair["half_width"]], [pair["half_width"]]],
            fmt="o",
            capsize=5,
            color="C0",
        )
    ax.axvspan(-margin, margin, color="green", alpha=0.15)
    ax.axvline(0, color="k", lw=0.8)
    ax.set(
        yticks=range(len(swaps)),
        yticklabels=list(swaps),
        xlabel="final validation loss, swap − LLaMA style (nats/byte)",
    )
    plt.tight_layout()
    return fig


def pre_logit_scale(curves: pd.DataFrame):
    """V8: over training, per arm (mean over seeds, band: the seeds' range), the validation loss, the RMS of the
    head's input (the last hidden state the logits are read from) and the RMS of the logits, the last two on a
    logarithmic axis."""
    fig, ax = plt.subplots(1, 3, figsize=(15, 4))
    panels = (
        ("val_loss", "validation loss (nats per byte)", "linear"),
        ("hidden_rms", "RMS of the head's input", "log"),
        ("logit_rms", "RMS of the logits", "log"),
    )
    for axis, (column, label, scale) in zip(ax, panels):
        data = curves.dropna(subset=[column])
        if column == "val_loss":
            data = data[data["step"] > 0]  # the untrained loss would flatten the curves
        sns.lineplot(data=data, x="step", y=column, hue="arm", marker="o", errorbar=("pi", 100), ax=axis)
        axis.set(xlabel="training step", ylabel=label, yscale=scale)
        axis.legend(fontsize=8)
    plt.tight_layout()
    return fig
