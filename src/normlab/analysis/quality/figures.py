"""The quality chapter's figures, each drawn from what the modules of `normlab.analysis.quality` return.

Each function draws one figure with matplotlib and seaborn under the theme the chapter set, and returns it.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns


def loss_curves(curves: pd.DataFrame, unigram_entropy: float, initial_loss: float):
    """Validation loss per norm, mean ± sd over seeds, against the corpus's unigram entropy."""
    fig, ax = plt.subplots(figsize=(7, 4))
    sns.lineplot(data=curves, x="step", y="val_loss", hue="norm", errorbar="sd", ax=ax)
    ax.axhline(unigram_entropy, ls="--", c="grey", label="unigram entropy")
    ax.set(xlabel="training step", ylabel="validation loss (nats per byte)", ylim=(None, min(6.0, initial_loss + 0.2)))
    ax.legend()
    return fig


def paired_differences(rows: list[tuple[str, dict | None]], margin: float):
    """One row per (label, paired result): the per-seed differences, their mean and the band the result carries
    (`half_width`: a t-interval for the confirmation, the confidence sequence for the pilot), against the ±margin
    band. A row whose result is None (a run diverged) shows only its label."""
    fig, ax = plt.subplots(figsize=(7, 0.75 * len(rows) + 1.2))
    for row, (label, pair) in enumerate(rows):
        if pair is None:
            continue
        pilot = label.startswith("pilot")
        ax.scatter(pair["differences"], [row] * pair["pairs"], color="grey", s=10, alpha=0.6 if pilot else 1, zorder=2)
        ax.errorbar(
            [pair["mean_difference"]],
            [row],
            xerr=[[pair["half_width"]], [pair["half_width"]]],
            fmt="o",
            capsize=6,
            color="C1" if pilot else "C0",
            zorder=3,
        )
    ax.set(yticks=range(len(rows)), yticklabels=[label for label, _ in rows], ylim=(len(rows) - 0.5, -0.5))
    ax.axvspan(-margin, margin, color="green", alpha=0.15)
    ax.axvline(0, c="k", lw=0.8)
    ax.set(xlabel="RMSNorm − LayerNorm validation loss (nats per byte)")
    return fig


def step_times(timings: pd.DataFrame, speed: dict):
    """One box of step times per model, the median per-round ratio and its spread in the title."""
    fig, ax = plt.subplots(figsize=(5, 3))
    sns.boxplot(data=timings.assign(ms=timings.step_time * 1e3), x="model", y="ms", ax=ax)
    ax.set(
        xlabel="norm",
        ylabel="time per training step (ms)",
        title=f"RMS/Layer median ratio {speed['ratio']:.3f} ± {speed['spread']:.3f}",
    )
    return fig


STREAM_PANELS = (
    ("ones_share", "(a) all-ones share μ²/(μ²+σ²)"),
    ("offset_share", "(b) common offset share"),
    ("top_channel_share", "(c) largest channel's share"),
)


def stream_measures(stream: pd.DataFrame):
    """The three measures of 'the mean' along the stream, per norm, trained (solid) and at initialisation."""
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    for axis, (column, title) in zip(axes, STREAM_PANELS):
        sns.lineplot(
            data=stream,
            x="layer",
            y=column,
            hue="norm",
            style="stage",
            style_order=["trained", "init"],
            marker="o",
            errorbar="sd",
            ax=axis,
        )
        axis.set(xlabel="stream position (0 = embeddings)", ylabel="share of the stream's energy", title=title)
    for axis in axes[1:]:
        axis.get_legend().remove()
    plt.tight_layout()
    return fig


def minilm_shares(table: pd.DataFrame | None):
    """all-MiniLM-L6-v2's all-ones and common-offset shares per position; empty panels when it is not installed."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.5))
    if table is not None:
        sns.lineplot(data=table, x="layer", y="ones_share", hue="where", marker="o", ax=axes[0])
        sns.lineplot(data=table, x="layer", y="offset_share", hue="where", marker="s", ax=axes[1], legend=False)
    axes[0].set(xlabel="position", ylabel="share of energy", title="(a) all-ones share")
    axes[1].set(xlabel="position", ylabel="share of energy", title="(b) common offset share")
    plt.tight_layout()
    return fig


def scale_ladder(table: pd.DataFrame, margin: float, reference: dict):
    """The paired final-loss difference with its 95% interval against parameters (log axis), one marker per
    hardware, the ±margin band, and a reference point from the literature (`reference`: parameters, difference,
    label), marked without an interval since none was transcribed."""
    fig, ax = plt.subplots(figsize=(7, 4.8))
    for (hardware, rows), marker in zip(table.groupby("hardware", sort=False), "osD^v"):
        ax.errorbar(
            rows["parameters"],
            rows["mean_difference"],
            yerr=[rows["mean_difference"] - rows["ci_low"], rows["ci_high"] - rows["mean_difference"]],
            fmt=marker,
            capsize=5,
            label=f"measured on {hardware}",
        )
    ax.scatter(
        [reference["parameters"]],
        [reference["difference"]],
        marker="*",
        s=160,
        color="C3",
        zorder=3,
        label=reference["label"],
    )
    ax.axhspan(-margin, margin, color="green", alpha=0.15, label=f"margin ±{margin:g} nats/byte")
    ax.axhline(0, c="k", lw=0.8)
    ax.set_xscale("log")
    ax.set(xlabel="parameters (LayerNorm model)", ylabel="RMSNorm − LayerNorm final loss (nats per byte)")
    ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.22))
    fig.tight_layout()
    return fig
