"""The gain chapter's figures, each drawn from what the chapter's section modules return."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
from matplotlib.colors import LogNorm
from matplotlib.ticker import MaxNLocator, NullFormatter


def forward_figure(sensitivity: pd.DataFrame):
    """Δ validation loss against the gain multiplier, per norm location and model (fig-gain-forward)."""
    fig, ax = plt.subplots(figsize=(7, 4))
    sns.lineplot(data=sensitivity, x="factor", y="delta_loss", hue="location", style="model", marker="o", ax=ax)
    ax.set(xscale="log", xlabel="gain multiplier a (log scale)", ylabel="Δ validation loss (nats/byte)")
    ax.axhline(0, color="grey", lw=0.8)
    fig.tight_layout()
    return fig


def update_figure(updates: pd.DataFrame):
    """One step's relative change of E, through W and through g, against the rescale factor (fig-gain-update)."""
    long = updates.melt(
        id_vars=["optimizer", "factor", "seed"], value_vars=["via_W", "via_g"], var_name="path", value_name="change"
    )
    fig, ax = plt.subplots(figsize=(7, 4))
    sns.lineplot(data=long, x="factor", y="change", hue="optimizer", style="path", marker="o", ax=ax)
    ax.set(xscale="log", yscale="log", xlabel="rescale factor a of the gain", ylabel="‖ΔE‖ / ‖E‖ in one step")
    fig.tight_layout()
    return fig


def toy_figure(schedule: pd.DataFrame, smooth: pd.DataFrame, equilibrium: pd.DataFrame):
    """Li & Arora's two runs, then norm and angular update approaching the random-walk formulas (fig-gain-toy).

    `smooth` is the windowed equilibrium trajectories; the dotted lines are the random-walk predictions.
    """
    fig, ax = plt.subplots(1, 3, figsize=(15, 4))
    ax[0].plot(schedule["step"], schedule["norm_with_decay"], label="SGD + weight decay")
    ax[0].plot(schedule["step"], schedule["norm_scheduled"], label="SGD, growing LR, no decay")
    ax[0].set(xlabel="step", ylabel="‖W1‖", title="same directions, different norms")
    ax[0].legend(fontsize=8)
    sns.lineplot(data=smooth, x="step", y="norm", hue="optimizer", style="setting", ax=ax[1])
    sns.lineplot(data=smooth, x="step", y="angular_update", hue="optimizer", style="setting", ax=ax[2], legend=False)
    for _, check in equilibrium[equilibrium["setting"] == "random walk"].iterrows():
        ax[1].axhline(check["predicted_norm"], ls=":", lw=1, color="grey")
        ax[2].axhline(check["predicted_angular_update"], ls=":", lw=1, color="grey")
    ax[1].set(xlabel="step", ylabel="‖w‖", title="norm → equilibrium")
    ax[2].set(xlabel="step", ylabel="angular update per step (rad)", yscale="log", title="angular update")
    fig.tight_layout()
    return fig


def decay_figure(pairs: dict, timescales: dict, gain_paths: pd.DataFrame, margin: float):
    """Left: each decay's paired loss changes with mean and interval, against ±margin. Right: the gains' RMS.

    `pairs` maps a decay coefficient to its `paired_difference`; `timescales` maps it to ηλT (fig-gain-decay).
    """
    fig, ax = plt.subplots(1, 2, figsize=(13, 4))
    for row, (_wd, pair) in enumerate(pairs.items()):
        ax[0].scatter(pair["differences"], [row] * pair["pairs"], color="grey", s=12)
        ax[0].errorbar(
            [pair["mean_difference"]],
            [row],
            xerr=[[pair["half_width"]], [pair["half_width"]]],
            fmt="o",
            capsize=5,
            color="C0",
        )
    ax[0].axvspan(-margin, margin, color="green", alpha=0.15)
    ax[0].axvline(0, color="k", lw=0.8)
    ax[0].set(
        yticks=range(len(pairs)),
        yticklabels=[f"λ_g = {wd:g} (ηλT = {timescales[wd]:.1f})" for wd in pairs],
        xlabel="final validation loss, decayed − undecayed (nats/byte)",
    )
    sns.lineplot(
        data=gain_paths, x="step", y="gain_rms", hue="gain_decay", errorbar=("pi", 100), palette="viridis", ax=ax[1]
    )
    ax[1].set(yscale="log", xlabel="step", ylabel="mean RMS of the norm gains")
    fig.tight_layout()
    return fig


def qk_law_figure(runs: pd.DataFrame, gaps: pd.DataFrame, lr: float):
    """Left: W_q's angular update per SGD step against ‖W_q‖, log–log, the first step of each run large, with the
    slope −2 law through the first step at a = 1. Right: each factor's loss per step, the scaled run (line) and its
    (1, η/a²) pair (open circles) (fig-gain-qk).

    `runs` and `gaps` are `qk_sgd_study`'s two tables; `lr` is η.
    """
    fig, ax = plt.subplots(1, 2, figsize=(13, 4))
    shade, colours = LogNorm(runs["factor"].min(), runs["factor"].max()), plt.get_cmap("viridis")
    for factor, part in runs.groupby("factor"):
        colour = colours(shade(factor))
        later, first = part[part["step"] > 0], part[part["step"] == 0]
        ax[0].scatter(later["norm_q"], later["angular_update"], color=colour, s=8, alpha=0.4)
        ax[0].scatter(first["norm_q"], first["angular_update"], color=colour, s=40, label=f"a = {factor:g}")
        ax[1].plot(part["step"], part["loss"], color=colour, lw=1.5, label=f"a = {factor:g}")
        ax[1].plot(part["step"], part["paired_loss"], color=colour, ls="none", marker="o", mfc="none", ms=5)
    first = runs[runs["step"] == 0]
    anchor = first.iloc[(first["factor"] - 1).abs().argmin()]
    span = pd.Series([runs["norm_q"].min(), runs["norm_q"].max()])
    ax[0].plot(span, anchor["angular_update"] * (span / anchor["norm_q"]) ** -2, "k--", lw=1, label="slope −2")
    ax[0].set(
        xscale="log",
        yscale="log",
        xlabel="‖W_q‖ before the step (log scale)",
        ylabel="angular update of W_q per step (rad)",
        title=f"plain SGD, η = {lr:g}: first step large, later steps small",
    )
    # Label the starting norms themselves: a short log axis has one or no decade label of its own.
    ax[0].xaxis.set_minor_formatter(NullFormatter())
    ax[0].set_xticks(sorted(first["norm_q"]), [f"{v:.2g}" for v in sorted(first["norm_q"])])
    ax[0].legend(fontsize=8)
    gap = gaps["max_abs_delta_loss"].max()
    ax[1].xaxis.set_major_locator(MaxNLocator(integer=True))
    ax[1].set(xlabel="step", ylabel="training loss (nats/byte)", title=f"(a·W, η) against (W, η/a²): |Δ| ≤ {gap:.0e}")
    ax[1].legend(fontsize=8)
    fig.tight_layout()
    return fig


def placement_figure(effects: dict, gain_paths: pd.DataFrame, margin: float):
    """Left: the paired loss change from decaying only the input norms' gains and only the output norms', each seed
    a dot, mean and 95% interval, against ±margin. Right: the mean RMS of each kind of gain over training, per arm
    (fig-gain-decay-placement).

    `effects` maps "input"/"output" to its `paired_difference` against no gain decay (None where none was formed).
    """
    fig, ax = plt.subplots(1, 2, figsize=(13, 4))
    labels = []
    for row, (arm, pair) in enumerate(effects.items()):
        labels.append(f"{arm} norms' gains only")
        if pair is None:
            continue
        ax[0].scatter(pair["differences"], [row] * pair["pairs"], color="grey", s=12)
        ax[0].errorbar(
            [pair["mean_difference"]], [row], xerr=[[pair["half_width"]], [pair["half_width"]]], fmt="o", capsize=5
        )
    ax[0].axvspan(-margin, margin, color="green", alpha=0.15)
    ax[0].axvline(0, color="k", lw=0.8)
    ax[0].set(
        yticks=range(len(labels)),
        yticklabels=labels,
        ylim=(-0.6, len(labels) - 0.4),
        xlabel="final validation loss, decayed − no gain decayed (nats/byte)",
    )
    ax[0].xaxis.set_major_locator(MaxNLocator(6))
    if len(gain_paths):
        sns.lineplot(data=gain_paths, x="step", y="gain_rms", hue="arm", style="role", errorbar=("pi", 100), ax=ax[1])
        ax[1].legend(title="λ_g on / gains of", fontsize=8)
    ax[1].set(yscale="log", xlabel="step", ylabel="mean RMS of the gains")
    fig.tight_layout()
    return fig
