"""The landscape chapter's figures, each drawn from the runs or tables its section modules return."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import FuncFormatter, NullFormatter

from normlab.analysis.landscape.dyt import final_dyt_layer
from normlab.study.present import significant

V1_LABELS = {
    "rms": "RMSNorm",
    "rms-authors": "RMSNorm,\nauthors' AdamW",
    "layer": "LayerNorm",
    "dyt-authors": "DyT,\nauthors' recipe",
    "dyt-rmsfinal": "DyT,\nRMSNorm final",
    "dyt": "DyT,\nstudy's recipe",
    "dyt-plain": "DyT plain",
}
V1_GRID = ("rms", "layer", "dyt-authors", "dyt-rmsfinal")  # the V1 variants run over the learning-rate grid


def dyt(frame: pd.DataFrame, settings: dict, entropy: float):
    """V1: each norm's final loss at the reference LR per seed; the authors' α₀ sensitivity on two widths; the LR
    grid."""
    F, P = frame, settings
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
    ref = F[
        (F.scale == "small")
        & (F.lr == P["small_train"]["lr"])
        & (F.width == P["small"]["width"])
        & F.label.isin(list(V1_LABELS))
        & F.reference_alpha
        & (F.seed < P["seeds"])  # V3's wide grid trains RMSNorm on more seeds; the paired seeds are the design's
    ]
    for seed, g in ref.groupby("seed"):
        g = g.set_index("label").loc[list(V1_LABELS)]
        axes[0].plot(range(len(V1_LABELS)), g.final, "o-", alpha=0.7, label=f"seed {seed}")
    axes[0].axhline(entropy, ls=":", c="grey", label="unigram entropy")
    axes[0].set_xticks(range(len(V1_LABELS)), list(V1_LABELS.values()), rotation=45, ha="right", fontsize=7)
    axes[0].set(ylabel="final validation loss (nats/byte)", title="paired seeds, reference LR")
    axes[0].legend(fontsize=7)
    alpha_rows = F[(F.scale == "small") & (F.label == "dyt-authors") & (F.lr == P["small_train"]["lr"]) & (F.seed == 0)]
    for i, width in enumerate(P["alpha_widths"]):
        g = alpha_rows[alpha_rows.width == width].sort_values("alpha")
        axes[1].plot(g.alpha, g.final, "o-", color=f"C{i}", label=f"DyT, width {width}")
        base = F[
            (F.scale == "small")
            & (F.label == "rms-authors")
            & (F.width == width)
            & (F.seed == 0)
            & (F.lr == P["small_train"]["lr"])
        ]
        label = f"RMSNorm, authors' AdamW, width {width}"
        axes[1].axhline(float(base.final.iloc[0]), ls="--", color=f"C{i}", lw=1, label=label)
    axes[1].set(
        xscale="log",
        xlabel="initial α of the norms not before attention (that one: 4×)",
        ylabel="final validation loss",
        title="α₀ sensitivity, authors' recipe (seed 0)",
    )
    axes[1].legend(fontsize=7)
    grid = F[
        (F.scale == "small")
        & (F.width == P["small"]["width"])
        & F.reference_alpha
        & (F.seed < P["grid_seeds"])
        & F.lr.isin(P["lr_grid"])
        & F.label.isin(V1_GRID)
    ]
    for label, g in grid.groupby("label"):
        g = g[~g.diverged].groupby("lr").final.mean()
        axes[2].plot(g.index, g.values, "o-", label=V1_LABELS[label].replace("\n", " "))
    axes[2].axhline(entropy, ls=":", c="grey", label="unigram entropy")
    axes[2].set(xscale="log", xlabel="peak learning rate", ylabel="final validation loss", title="learning-rate grid")
    axes[2].legend(fontsize=7)
    fig.tight_layout()
    return fig


def dyt_trace(runs_by_label: dict[str, dict]):
    """V1 through training, one run per variant: the final DyT layer's saturated share, the last hidden state's RMS,
    each DyT layer's α (the final DyT layer's thick), and the mean gradient reaching the blocks' matrices."""
    fig, axes = plt.subplots(1, 4, figsize=(15, 3.6))
    for i, (label, run) in enumerate(runs_by_label.items()):
        trace = run["dyt_trace"]
        if not trace:
            continue
        name, color = V1_LABELS.get(label, label).replace("\n", " "), f"C{i}"
        steps = [p["step"] for p in trace]
        final = final_dyt_layer(trace[-1])
        axes[0].plot(steps, [100 * p["saturated_share"][final] for p in trace], "o-", ms=3, color=color, label=name)
        axes[1].plot(steps, [p["final_hidden_rms"] for p in trace], "o-", ms=3, color=color, label=name)
        for layer in trace[0]["alpha"]:
            thick = layer == final
            axes[2].plot(
                steps,
                [p["alpha"][layer] for p in trace],
                "-",
                lw=2.2 if thick else 0.7,
                alpha=1.0 if thick else 0.5,
                color=color,
                label=name if thick else None,
            )
        axes[3].plot(steps, [p["block_gradient"] for p in trace], "o-", ms=3, color=color, label=name)
    axes[0].set(xlabel="training step", ylabel="% of inputs with tanh′ = 0", title="final DyT layer, saturated")
    axes[0].set_ylim(-3, 103)
    axes[1].set(yscale="log", xlabel="training step", ylabel="RMS", title="last hidden state (final norm's input)")
    axes[2].set(yscale="log", xlabel="training step", ylabel="α", title="α of every DyT layer (thick: final)")
    axes[3].set_yscale("symlog", linthresh=1e-10)
    axes[3].set(xlabel="training step", ylabel="mean |gradient|", title="gradient reaching the blocks")
    for ax in axes:
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def _stream(runs: list[dict]) -> pd.DataFrame:
    return pd.DataFrame([row for r in runs for row in r["stream_rms"]], columns=["step", "layer", "rms"])


def placement(runs_by_placement: dict[str, list[dict]]):
    """V2: hidden RMS per block at the end, after the last block through training, and per-layer gradient norms."""
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for i, (name, rs) in enumerate(runs_by_placement.items()):
        stream = _stream(rs)
        if stream.empty:
            continue
        last = stream[stream.step == stream.step.max()].groupby("layer").rms.mean()
        axes[0].plot(last.index, last.values, "o-", ms=3, color=f"C{i}", label=name)
        top = stream[stream.layer == stream.layer.max()].groupby("step").rms.mean()
        axes[1].plot(top.index, top.values, color=f"C{i}", label=name)
        if rs and rs[0]["grad_norms"]:
            g = np.nanmean(np.array(rs[0]["grad_norms"], dtype=float), axis=0)
            axes[2].plot(range(1, len(g) + 1), g, "o-", ms=3, color=f"C{i}", label=name)
    axes[0].set(yscale="log", xlabel="block (0 = embeddings)", ylabel="hidden RMS", title="end of training")
    axes[1].set(
        yscale="log", xlabel="training step", ylabel="hidden RMS after the last block", title="through training"
    )
    axes[2].set(yscale="log", xlabel="block", ylabel="gradient norm", title="per-layer gradient norm")
    for ax in axes:
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def qk(runs: list[dict], sensitivity: pd.DataFrame, lr_grid: list[float], seeds: int):
    """V3. Left: Wortsman et al.'s curve, min(final loss, initial loss) over the wide grid, without (solid) and with
    (dashed) QK-norm, thin per seed and thick the mean; a diverged run counts at its initial loss. Right: the largest
    attention logit through training (seed 0), one colour per learning rate."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    styles = {"rms": ("-", "C0", "no QK-norm"), "rms+qk": ("--", "C3", "QK-norm")}
    for label, (style, color, name) in styles.items():
        curves = []
        for seed in range(seeds):
            point = {}
            for r in runs:
                t = r["tag"]
                if t["scale"] == "small" and t["label"] == label and t["seed"] == seed and t["lr"] in lr_grid:
                    final, initial = r["final_val_loss"], r["initial_val_loss"]
                    ok = not r["diverged"] and math.isfinite(final)
                    point[t["lr"]] = min(final, initial) if ok else initial
            if len(point) == len(lr_grid):
                curve = [point[lr] for lr in lr_grid]
                curves.append(curve)
                axes[0].plot(lr_grid, curve, style, color=color, lw=0.6, alpha=0.5)
        if curves:
            axes[0].plot(
                lr_grid, np.mean(curves, axis=0), style, color=color, lw=2.2, marker="o", label=f"{name}, mean"
            )
    axes[0].set(
        xscale="log",
        xlabel="peak learning rate",
        ylabel="min(final, initial) validation loss",
        title="LR sensitivity curve (thin: one seed)",
    )
    axes[0].legend(fontsize=7)
    colors = {lr: f"C{i}" for i, lr in enumerate(lr_grid)}
    for label, style in (("rms", "-"), ("rms+qk", "--")):
        for r in runs:
            t = r["tag"]
            if (
                t["scale"] == "small"
                and t["label"] == label
                and t["seed"] == 0
                and r["max_logit"]
                and t["lr"] in colors
            ):
                trace = pd.DataFrame(r["max_logit"])
                axes[1].plot(
                    trace.step,
                    trace.max_logit,
                    style,
                    color=colors[t["lr"]],
                    label=f"lr {significant(t['lr'], 2)}" if label == "rms" else None,
                )
    axes[1].set(
        yscale="log",
        xlabel="training step",
        ylabel="largest attention logit",
        title="seed 0; solid: no QK-norm, dashed: QK-norm",
    )
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    return fig


def depth(runs_by_label: dict[str, list[dict]]):
    """V4: drop-one contribution per block, hidden RMS per block at the end, and the paired final loss per seed.

    `runs_by_label` holds the plain model's runs first, then the scaled model's, each sorted by seed."""
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for i, (label, runs) in enumerate(runs_by_label.items()):
        rs = [r for r in runs if r["drop_one"] is not None]
        if rs:
            drop = np.mean([r["drop_one"] for r in rs], axis=0)
            axes[0].plot(range(1, len(drop) + 1), drop, "o-", ms=3, color=f"C{i}", label=label)
        stream = _stream(runs)
        last = stream[stream.step == stream.step.max()].groupby("layer").rms.mean()
        axes[1].plot(last.index, last.values, "o-", ms=3, color=f"C{i}", label=label)
    plain, scaled = runs_by_label.values()
    scaled_by_seed = {r["tag"]["seed"]: r for r in scaled}
    for run in plain:  # one line per seed both sides completed
        if run["tag"]["seed"] in scaled_by_seed:
            pair = [run["final_val_loss"], scaled_by_seed[run["tag"]["seed"]]["final_val_loss"]]
            axes[2].plot([0, 1], pair, "o-", color="0.4", alpha=0.6)
    axes[0].set_yscale("symlog", linthresh=1e-3)
    axes[0].yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axes[0].set(xlabel="block dropped", ylabel="loss increase (nats/byte)", title="drop-one contribution")
    axes[1].set(yscale="log", xlabel="block (0 = embeddings)", ylabel="hidden RMS", title="hidden growth")
    axes[2].set(
        xticks=[0, 1],
        xticklabels=["pre-LN", "1/√l"],
        ylabel="final validation loss",
        title="paired final loss (a line per seed)",
    )
    for ax in axes[:2]:
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def summary(table: pd.DataFrame, baselines: list[dict | None], loss_margin: float):
    """Every variant against the baseline: paired loss difference (shaded: ±margin), step-time ratio, usable LR
    range (grey: the baseline's at that scale, one entry of `baselines` per row of `table`)."""
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.5), sharey=True)
    y = np.arange(len(table))
    for i, row in table.iterrows():
        if row["loss − baseline"] is not None and not pd.isna(row["loss − baseline"]):
            axes[0].errorbar(
                row["loss − baseline"],
                i,
                xerr=[[row["loss − baseline"] - row["95% low"]], [row["95% high"] - row["loss − baseline"]]],
                fmt="o",
                capsize=4,
                color="C0",
            )
        axes[1].errorbar(row["step-time ratio"], i, xerr=row["ratio IQR"] / 2, fmt="s", capsize=4, color="C1")
        if pd.notna(row["usable LR from"]):
            axes[2].plot(
                [row["usable LR from"], row["usable LR to"]], [i, i], "-", lw=6, color="C2", solid_capstyle="butt"
            )
            axes[2].plot([row["usable LR from"], row["usable LR to"]], [i, i], "|", ms=12, color="C2")
        base = baselines[i]
        if base and base["lr_low"]:
            axes[2].plot([base["lr_low"], base["lr_high"]], [i - 0.25, i - 0.25], "-", lw=3, color="grey", alpha=0.6)
    axes[0].axvspan(-loss_margin, loss_margin, color="green", alpha=0.12)
    axes[0].axvline(0, color="k", lw=0.8)
    axes[0].set(yticks=y, yticklabels=table.variant, xlabel="final loss − baseline (nats/byte)")
    axes[1].axvline(1, color="k", lw=0.8)
    axes[1].set(xlabel="step time ÷ baseline's")
    axes[2].set(xscale="log", xlabel="usable peak learning rate")
    axes[0].invert_yaxis()
    fig.tight_layout()
    return fig


def derf(runs_by_arm: dict[str, list[dict]], names: dict[str, str], entropy: float):
    """V7. Left: final validation loss per arm, one line per seed joining its paired runs. Right: each run's
    training loss in evaluation mode against its validation loss; the diagonal is a gap of zero."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    labels = list(runs_by_arm)
    finished = {
        label: [r for r in arm if "missing" not in r and not r["diverged"]] for label, arm in runs_by_arm.items()
    }
    seeds = sorted({r["tag"]["seed"] for arm in finished.values() for r in arm})
    for seed in seeds:
        ys = [
            next((r["final_val_loss"] for r in finished[label] if r["tag"]["seed"] == seed), np.nan) for label in labels
        ]
        left.plot(range(len(labels)), ys, marker="o", color="grey", alpha=0.7)
    left.axhline(entropy, color="black", linestyle=":", linewidth=1, label="byte-frequency entropy")
    left.set_xticks(range(len(labels)), [names[label] for label in labels], rotation=10)
    left.set_ylabel("final validation loss (nats/byte)")
    left.legend(fontsize=8)
    low, high = math.inf, -math.inf
    for i, label in enumerate(labels):
        fit = [r["train_loss_eval"] for r in finished[label] if r.get("train_loss_eval") is not None]
        val = [r["final_val_loss"] for r in finished[label] if r.get("train_loss_eval") is not None]
        right.scatter(fit, val, label=names[label], color=f"C{i}")
        if fit:
            low, high = min(low, *fit, *val), max(high, *fit, *val)
    if math.isfinite(low):
        right.plot([low, high], [low, high], color="black", linewidth=1, linestyle="--")
    right.set_xlabel("training loss, evaluation mode (nats/byte)")
    right.set_ylabel("final validation loss (nats/byte)")
    right.legend(fontsize=8)
    fig.tight_layout()
    return fig


def regime(cells: dict, margin: float):
    """V6. Left: DyT − RMSNorm final validation loss per seed against the training set's size in bytes (log scale;
    every run the same steps, so the smallest set is passed over most), SwiGLU on each set joined per seed, GELU on
    the largest beside it; the band is ±margin. Right: DyT's saturated share (|αx| > 2) at the end of each run, the
    same layout."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    budgets = sorted(size for size, mlp in cells if mlp == "swiglu")
    xs = [float(s) for s in budgets]

    def ok(run):
        return "missing" not in run and not run["diverged"]

    def per_seed(key):
        arms = cells[key]
        diff = [d["final_val_loss"] - r["final_val_loss"] if ok(d) and ok(r) else np.nan
                for r, d in zip(arms["v6-rms"], arms["v6-dyt"])]  # fmt: skip
        share = [d.get("saturated_share") if ok(d) else None for d in arms["v6-dyt"]]
        return diff, [np.nan if s is None else s for s in share]

    swiglu = [per_seed((s, "swiglu")) for s in budgets]
    gelu = per_seed((budgets[-1], "gelu"))
    for i in range(len(swiglu[0][0])):
        left.plot(xs, [cell[0][i] for cell in swiglu], marker="o", color="C0", alpha=0.7,
                  label="SwiGLU" if i == 0 else None)  # fmt: skip
        right.plot(xs, [cell[1][i] for cell in swiglu], marker="o", color="C0", alpha=0.7,
                   label="SwiGLU" if i == 0 else None)  # fmt: skip
    left.scatter([xs[-1] * 1.15] * len(gelu[0]), gelu[0], marker="s", color="C1", label="GELU", zorder=3)
    right.scatter([xs[-1] * 1.15] * len(gelu[1]), gelu[1], marker="s", color="C1", label="GELU", zorder=3)
    left.axhspan(-margin, margin, color="grey", alpha=0.2, label=f"±{margin:g} margin")
    left.axhline(0, color="black", linewidth=1)
    for ax in (left, right):
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())  # the decades alone: minor labels overlap
        ax.set_xlabel("training set (bytes; the same steps on each)")
        ax.legend(fontsize=8)
    left.set_ylabel("DyT − RMSNorm, final validation loss (nats/byte)")
    right.set_ylabel("DyT's inputs with |αx| > 2 (share)")
    right.set_ylim(0, max(0.05, np.nanmax([v for cell in swiglu for v in cell[1]] + gelu[1] + [0]) * 1.2))
    fig.tight_layout()
    return fig
