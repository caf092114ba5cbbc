"""The geometry chapter's figures, each drawn from the data its section modules return."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import seaborn as sns

from normlab.analysis.geometry.eps_placement import RESOLUTION

SMALLEST_SHOWN = {"change": 1e-17, "gap": 1e-18}  # log axes: exact zeros are drawn at this floor


def invariance(changes, visible_change: dict[str, float]):
    """Largest output change under a shift (left) and a scale (right), per norm and dtype, with the visible bars."""
    grid = sns.relplot(
        data=changes.assign(**{"plotted change": changes["max change"].clip(lower=SMALLEST_SHOWN["change"])}),
        x="amount",
        y="plotted change",
        hue="norm",
        style="dtype",
        col="transform",
        kind="line",
        markers=True,
        height=3.8,
        aspect=1.2,
        facet_kws={"sharex": False},
    )
    for ax in grid.axes.flat:
        ax.set_xscale("log")
        ax.set_yscale("log")
        for level in visible_change.values():
            ax.axhline(level, color="grey", ls=":", lw=1)
        ax.set_ylabel("max |N(T x) − N(x)| (output units)")
    grid.axes.flat[0].set_xlabel("shift c (in units of the tokens' σ ≈ 1)")
    grid.axes.flat[1].set_xlabel("scale factor a (dimensionless)")
    return grid.figure


def spectrum(spectra, tokens: int, d: int, rank_threshold: float = 1e-10):
    """Singular values of the stacked outputs, relative to the largest, per norm."""
    fig, ax = plt.subplots(figsize=(7, 4))
    sns.lineplot(
        data=spectra.assign(
            **{"singular value / largest": spectra["singular value / largest"].clip(lower=SMALLEST_SHOWN["gap"])}
        ),
        x="index",
        y="singular value / largest",
        hue="norm",
        style="norm",
        markers=True,
        ax=ax,
    )
    ax.set_yscale("log")
    ax.axhline(rank_threshold, color="grey", ls=":", lw=1, label=f"rank threshold {rank_threshold:g}")
    ax.set_xlabel("singular value index (1 = largest)")
    ax.set_ylabel("σ_k / σ_1 (dimensionless)")
    ax.set_title(f"Outputs of {tokens} random tokens, d = {d}")
    ax.legend()
    fig.tight_layout()
    return fig


def placement(gaps):
    """ε inside against outside: relative gaps in float64 (left), share of stored outputs that differ (right)."""
    fig, axes = plt.subplots(1, 2, figsize=(13, 4))
    long = gaps.melt(
        id_vars=["eps", "RMS of x"], value_vars=["output gap", "gradient gap"], var_name="quantity", value_name="gap"
    )
    sns.lineplot(
        data=long.assign(gap=long.gap.clip(lower=SMALLEST_SHOWN["gap"])),
        x="RMS of x",
        y="gap",
        hue="eps",
        style="quantity",
        ax=axes[0],
    )
    smallest_rms = gaps["RMS of x"].iloc[0]
    for dtype_name, resolution in RESOLUTION.items():
        axes[0].axhline(resolution, color="grey", ls=":", lw=1)
        axes[0].annotate(f"{dtype_name} resolution", (smallest_rms, resolution), fontsize=8, va="bottom")
    axes[0].set_xscale("log")
    axes[0].set_yscale("log")
    axes[0].set_xlabel("RMS of the input x (input units)")
    axes[0].set_ylabel("max |inside − outside| / max |inside|")
    axes[0].set_title("ε inside vs outside the root, float64")
    axes[0].legend(loc="upper right", fontsize=8)
    shares = gaps.melt(
        id_vars=["eps", "RMS of x"],
        value_vars=["float32 elements differing", "bfloat16 elements differing"],
        var_name="dtype",
        value_name="share",
    )
    sns.lineplot(data=shares, x="RMS of x", y="share", hue="eps", style="dtype", ax=axes[1])
    axes[1].set_xscale("log")
    axes[1].set_xlabel("RMS of the input x (input units)")
    axes[1].set_ylabel("share of output elements that differ after rounding")
    axes[1].set_title("Is the difference visible in the stored output?")
    fig.tight_layout()
    return fig


def mean_dominated(b11, eps: float):
    """What ε does as the per-token noise shrinks (left), and the share of the output along 1 (right)."""
    fig, axes = plt.subplots(1, 2, figsize=(13, 4))
    sns.lineplot(
        data=b11.assign(**{"ε effect": b11["ε effect"].clip(lower=SMALLEST_SHOWN["gap"])}),
        x="noise s",
        y="ε effect",
        hue="norm",
        style="offset c",
        markers=True,
        ax=axes[0],
    )
    axes[0].set_xscale("log")
    axes[0].set_yscale("log")
    axes[0].axvline(math.sqrt(eps), color="grey", ls=":", lw=1, label="s = √ε")
    axes[0].set_xlabel("per-token noise s (input units; offset c in line style)")
    axes[0].set_ylabel("relative output change caused by ε")
    axes[0].set_title(f"What ε = {eps:g} does")
    sns.lineplot(
        data=b11[b11["offset c"] > 0].assign(**{"noise / offset": lambda f: f["noise s"] / f["offset c"]}),
        x="noise / offset",
        y="output share along 1",
        hue="norm",
        style="offset c",
        ax=axes[1],
    )
    axes[1].set_xscale("log")
    axes[1].set_xlabel("noise s / offset c (dimensionless)")
    axes[1].set_ylabel("share of output energy along 1")
    axes[1].set_title("How much of the output is the common offset")
    fig.tight_layout()
    return fig
