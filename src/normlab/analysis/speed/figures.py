"""The speed chapter's figures, each drawn from the benchmark frames `normlab.bench.report` and the chapter's
section modules return. A figure with nothing to plot in a run says why, in words."""

from __future__ import annotations

import pandas as pd
import seaborn as sns

from normlab.study.present import empty_figure

D_LABEL = "row length d (features)"
RATIO_LABEL = "t_LayerNorm / t_RMSNorm (ratio)"


def ratio_figure(sweep: pd.DataFrame):
    """This run's LN/RMS time ratio per implementation across d, one line per dtype (fig-speed-ratio)."""
    if sweep.empty:
        return empty_figure("no stable forward case was timed for both norms in this run")
    grid = sns.relplot(
        data=sweep,
        x="d",
        y="ratio_ln_over_rms",
        hue="implementation",
        style="dtype",
        kind="line",
        markers=True,
        height=4,
        aspect=1.6,
    )
    grid.set(xscale="log", xlabel=D_LABEL, ylabel=RATIO_LABEL)
    grid.refline(y=1.0, color="grey")
    return grid.figure


def bandwidth_figure(cases: pd.DataFrame):
    """This run's fraction of copy bandwidth per implementation across d, one panel per norm (fig-speed-bandwidth)."""
    if cases.empty:
        return empty_figure("no stable forward case was timed in this run")
    grid = sns.relplot(
        data=cases,
        x="d",
        y="fraction_of_copy",
        hue="implementation",
        col="norm",
        style="dtype",
        kind="line",
        markers=True,
        height=3.8,
        aspect=1.2,
    )
    grid.set(xscale="log", xlabel=D_LABEL, ylabel="fraction of copy (clone) bandwidth")
    for ax in grid.axes.flat:
        ax.axhline(1.0, color="grey", lw=1)
    return grid.figure


def gpu_ratio_figure(gpu_sweep: pd.DataFrame, gpu_runs: list):
    """The GPU runs' LN/RMS ratios: one row of panels per run, one column per dtype (fig-speed-gpu-ratio).

    `gpu_runs` are the `Measured` runs behind the frame, the first-ranked one first; its hardware and every run's
    commit go in the title.
    """
    if gpu_sweep.empty:
        return empty_figure(
            "no GPU run is committed" if not gpu_runs else "no stable GPU forward case was timed for both norms"
        )
    grid = sns.relplot(
        data=gpu_sweep,
        x="d",
        y="ratio_ln_over_rms",
        hue="implementation",
        hue_order=sorted(gpu_sweep["implementation"].unique()),
        row="run",
        col="dtype",
        col_order=sorted(gpu_sweep["dtype"].unique(), reverse=True),
        kind="line",
        marker="o",
        height=3.2,
        aspect=1.3,
    )
    grid.set(xscale="log", xlabel=D_LABEL, ylabel=RATIO_LABEL)
    grid.refline(y=1.0, color="grey")
    grid.figure.suptitle(f"{gpu_runs[0].hardware}; commits: " + ", ".join(sorted({m.commit for m in gpu_runs})), y=1.02)
    return grid.figure


def gpu_bandwidth_figure(cases: pd.DataFrame, gpu_runs: list, memory_bound: float):
    """The GPU runs' fraction of copy bandwidth, per norm (columns) and run (rows), with `memory_bound` dotted
    (fig-speed-gpu-bandwidth)."""
    if cases.empty:
        return empty_figure("no GPU run is committed" if not gpu_runs else "no stable GPU forward case was timed")
    grid = sns.relplot(
        data=cases,
        x="d",
        y="fraction_of_copy",
        hue="implementation",
        hue_order=sorted(cases["implementation"].unique()),
        col="norm",
        row="run",
        style="dtype",
        kind="line",
        markers=True,
        height=3.2,
        aspect=1.3,
    )
    grid.set(xscale="log", xlabel=D_LABEL, ylabel="fraction of copy bandwidth")
    for ax in grid.axes.flat:
        ax.axhline(1.0, color="grey", lw=1)
        ax.axhline(memory_bound, color="grey", lw=1, ls=":")
    grid.figure.suptitle(f"{gpu_runs[0].hardware}", y=1.02)
    return grid.figure
