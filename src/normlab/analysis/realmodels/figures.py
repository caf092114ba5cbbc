"""The real-models chapter's figures, each drawn from what its section modules return."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns


def along_ones_figure(stream: pd.DataFrame, width: int):
    """Along-ones energy share by depth, first token apart; the shared mean vector's share (fig-realmodels-along-ones)."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    axes[0].plot(stream["depth"], stream["along_ones_share"], marker=".", label="other tokens (mean)")
    axes[0].plot(stream["depth"], stream["along_ones_share_first_token"], marker=".", label="first token")
    axes[0].axhline(1 / width, color="grey", ls="--", lw=0.8, label="random direction, 1/d")
    axes[0].set(yscale="log", xlabel="depth (blocks)", ylabel="energy share along all-ones")
    axes[0].legend()
    axes[1].plot(stream["depth"], stream["shared_mean_share"], marker=".", label="‖shared mean‖² / mean ‖x‖²")
    axes[1].plot(
        stream["depth"], stream["shared_mean_along_ones"], marker=".", label="share of the shared mean along all-ones"
    )
    axes[1].set(yscale="log", xlabel="depth (blocks)", ylabel="share")
    axes[1].legend()
    fig.tight_layout()
    return fig


def outliers_figure(stream: pd.DataFrame):
    """Largest |x| on the first token and on the others, beside the RMS and the median (fig-realmodels-outliers)."""
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.plot(stream["depth"], stream["max_abs_first_token"], marker=".", label="max |x|, first token")
    ax.plot(stream["depth"], stream["max_abs_other_tokens"], marker=".", label="max |x|, other tokens")
    ax.plot(stream["depth"], stream["rms"], marker=".", label="RMS, other tokens")
    ax.plot(stream["depth"], stream["median_abs"], marker=".", label="median |x|")
    ax.set(yscale="log", xlabel="depth (blocks)", ylabel="magnitude")
    ax.legend()
    fig.tight_layout()
    return fig


def per_norm_figure(sweep: pd.DataFrame, margin: float):
    """Loss change with centring added at one norm, by depth and site, against ±margin (fig-realmodels-per-norm)."""
    fig, ax = plt.subplots(figsize=(9, 4))
    for site, group in sweep.groupby("site"):
        ax.errorbar(
            group["depth"], group["loss_change"], yerr=group["sd_over_chunks"], fmt="o", ms=4, capsize=2, label=site
        )
    ax.axhline(0, color="grey", lw=0.8)
    for edge in (-margin, margin):
        ax.axhline(edge, color="grey", lw=0.8, ls=":")
    ax.set(xlabel="depth of the norm (blocks)", ylabel="Δ loss (nats/token)")
    ax.legend()
    fig.tight_layout()
    return fig


def minilm_figure(shares: list[float], labels: list[str], cosines: list[float], threshold: float):
    """MiniLM's norm inputs along all-ones, and each text's cosine to the original (fig-realmodels-minilm)."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    axes[0].bar(labels, shares)
    axes[0].set(yscale="log", xlabel="norm", ylabel="energy share along all-ones")
    axes[0].tick_params(axis="x", rotation=60)
    sns.histplot(cosines, bins=20, ax=axes[1])
    axes[1].axvline(threshold, color="grey", ls="--", lw=0.8)
    axes[1].set(xlabel="cosine to the original embedding", ylabel="texts")
    fig.tight_layout()
    return fig


def time_figure(timing: pd.DataFrame, variants: list[str]):
    """Forward time of each variant relative to the model as loaded, prefill and decode (fig-realmodels-time)."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    for ax, phase in zip(axes, ("prefill", "decode")):
        part = timing[timing["phase"] == phase].set_index("variant").reindex(variants)
        ax.barh(part.index, part["ratio_to_baseline"], xerr=part["ratio_sd"], color=sns.color_palette()[0])
        ax.axvline(1, color="grey", lw=0.8)
        ax.set(xlabel=f"{phase}: time relative to as loaded", ylabel="")
    fig.tight_layout()
    return fig


def gradient_sinks_figure(per_norm: pd.DataFrame, tolerance: float):
    """V9 by depth, from the massive depth on (fig-realmodels-gradient-sinks): attention received, the gradient at
    the norms' outputs and at the residual stream, and the norms' measured attenuation ratio against 1/r's."""
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    if not len(per_norm) or per_norm["gradient_ratio"].isna().all():
        # a cut of the model too shallow for massive activations: the figure says so rather than drawing nothing
        for ax in axes:
            ax.text(0.5, 0.5, "no massive position in this cut of the model", ha="center", va="center")
            ax.set_axis_off()
        return fig
    attention = per_norm[per_norm["site"] == "attention input"]
    axes[0].plot(attention["depth"], attention["received_massive"], marker=".", label="massive positions")
    axes[0].plot(attention["depth"], attention["received_other"], marker=".", label="other tokens (mean)")
    axes[0].set(yscale="log", xlabel="block", ylabel="attention received (sum over later queries)")
    axes[0].legend()
    for site, style in (("attention input", "-"), ("MLP input", ":")):
        part = per_norm[per_norm["site"] == site]
        axes[1].plot(part["depth"], part["gradient_ratio"], ls=style, marker=".", label=f"|dL/dy|, {site} norm")
    axes[1].plot(
        per_norm["depth"],
        per_norm["grad_residual_massive"] / per_norm["grad_residual_other"],
        ls="--",
        marker=".",
        label="|dL/dx| at the residual stream",
    )
    axes[1].axhline(1, color="grey", lw=0.8)
    axes[1].set(yscale="log", xlabel="depth (blocks)", ylabel="gradient, massive / other tokens")
    axes[1].legend(fontsize="small")
    axes[2].plot(per_norm["depth"], per_norm["measured_ratio"], marker=".", label="measured attenuation ratio")
    axes[2].plot(per_norm["depth"], per_norm["predicted_ratio"], ls="--", label="r_other / r_massive (1/r)")
    axes[2].fill_between(
        per_norm["depth"],
        per_norm["predicted_ratio"] / tolerance,
        per_norm["predicted_ratio"] * tolerance,
        color="grey",
        alpha=0.2,
        label=f"within a factor {tolerance:g}",
    )
    axes[2].set(yscale="log", xlabel="depth (blocks)", ylabel="attenuation, massive / other tokens")
    axes[2].legend(fontsize="small")
    fig.tight_layout()
    return fig
