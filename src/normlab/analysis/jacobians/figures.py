"""The Jacobians chapter's figures, each drawn from what the modules of `normlab.analysis.jacobians` return."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
import torch


def errors_figure(errors: pd.DataFrame, machine_tol: float):
    """Each closed form's error against autograd, one dot per token, beside the tolerance (fig-jacobians-errors)."""
    fig, ax = plt.subplots(figsize=(8, 4.5))
    sns.stripplot(data=errors, y="form", x="plotted error", hue="d", palette="viridis", ax=ax, size=4, jitter=0.25)
    ax.set_xscale("log")
    ax.axvline(machine_tol, color="black", ls="--", lw=1, label=f"machine-precision tolerance {machine_tol:g}")
    ax.set_xlabel("max |formula − autograd| / max |autograd| (dimensionless)")
    ax.set_ylabel("")
    ax.set_title("Closed forms vs autograd, float64")
    ax.legend(loc="center right", fontsize=8, title="d / tolerance")
    fig.tight_layout()
    return fig


def heatmaps_figure(panels: dict[str, torch.Tensor]):
    """One heatmap per matrix, on a symmetric colour scale (fig-jacobians-heatmaps)."""
    fig, axes = plt.subplots(1, len(panels), figsize=(17, 4))
    for ax, (title, matrix) in zip(axes, panels.items()):
        limit = float(matrix.abs().max())
        image = ax.imshow(matrix.numpy(), cmap="RdBu_r", vmin=-limit, vmax=limit)
        fig.colorbar(image, ax=ax, shrink=0.7, label="entry (dimensionless)")
        ax.grid(False)
        ax.set_xticks(range(0, matrix.shape[1], 5))
        ax.set_yticks(range(0, matrix.shape[0], 5))
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("input feature j")
        ax.set_ylabel("output feature i")
    fig.tight_layout()
    return fig


def scaling_figure(scaling: pd.DataFrame, eps_typical: float):
    """a·‖∂ℓ/∂x(a·x)‖ / ‖∂ℓ/∂x(x)‖ against the scaled input's RMS, ε = 0 and ε = eps_typical (fig-jacobians-scaling)."""
    fig, ax = plt.subplots(figsize=(7, 4))
    sns.lineplot(
        data=scaling.assign(eps=scaling.eps.map({0.0: "ε = 0", eps_typical: f"ε = {eps_typical:g}"})),
        x="rms of a·x",
        y="ratio",
        hue="eps",
        style="d",
        markers=True,
        ax=ax,
    )
    ax.set_xscale("log")
    ax.axvline(math.sqrt(eps_typical), color="grey", ls=":", lw=1, label="RMS = √ε")
    ax.set_xlabel("RMS of the scaled input a·x (input units)")
    ax.set_ylabel("a·‖∂ℓ/∂x(a·x)‖ / ‖∂ℓ/∂x(x)‖ (1 = exact 1/r law)")
    ax.set_title("Gradient norm × input scale")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def eps_figure(eps_effect: pd.DataFrame, ratios):
    """The ε-free Jacobian's gap to the true one against ε / statistic, with the line gap = ε / statistic
    (fig-jacobians-eps)."""
    fig, ax = plt.subplots(figsize=(7, 4))
    sns.lineplot(data=eps_effect, x="ε / statistic", y="relative gap", hue="norm", style="d", ax=ax)
    ax.plot(ratios, ratios, color="black", ls=":", lw=1, label="gap = ε / statistic")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("ε divided by mean(x²) (RMSNorm) or σ² (LayerNorm)")
    ax.set_ylabel("max |J_ε-free − J_ε| / max |J_ε|")
    ax.set_title("Error of ignoring ε in the Jacobian")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def gain_fit_figure(trajectory: torch.Tensor, slopes: torch.Tensor, pearson: torch.Tensor):
    """Left: the gain's descent, each channel towards its least-squares slope (dotted). Right: learned gain,
    slope and Pearson correlation per channel (fig-jacobians-gain)."""
    d = trajectory.shape[1]
    steps_axis = np.arange(trajectory.shape[0])
    fig, axes = plt.subplots(1, 2, figsize=(13, 4))
    for i in range(d):
        axes[0].plot(steps_axis, trajectory[:, i].numpy(), lw=1.2, label=f"channel {i}")
        axes[0].axhline(float(slopes[i]), color=axes[0].lines[-1].get_color(), ls=":", lw=1)
    axes[0].set_xlabel("gradient-descent step on g")
    axes[0].set_ylabel("gain g_i (dimensionless)")
    axes[0].set_title("g converges to the per-channel least-squares slope (dotted)")
    axes[0].legend(fontsize=7, ncol=2)
    comparison = pd.DataFrame(
        {
            "channel": np.arange(d),
            "learned g": trajectory[-1].numpy(),
            "least-squares slope Σx̂t/Σx̂²": slopes.numpy(),
            "Pearson r(x̂, t)": pearson.numpy(),
        }
    )
    long = comparison.melt(id_vars="channel", var_name="quantity", value_name="value")
    sns.barplot(data=long, x="channel", y="value", hue="quantity", ax=axes[1])
    axes[1].set_xlabel("channel i")
    axes[1].set_ylabel("value (dimensionless)")
    axes[1].set_title("learned gain vs slope vs correlation")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    return fig
