"""Section "Centring added to a model trained without it": every RMSNorm of SmolLM2 becomes a LayerNorm with the
same gain, and the next-token loss is compared on the held-out chunks, paired by chunk: centring at every norm,
everywhere but on the first token, and at one norm at a time."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import pandas as pd
import torch
from torch import nn

from normlab.analysis.realmodels.load import SmolLM2Run
from normlab.analysis.realmodels.stream import site_of, stream_depth
from normlab.analysis.realmodels.variants import chunk_losses, first_token_apart_modules, installed, variant_modules
from normlab.analysis.shared.paired import interval_text, paired_difference
from normlab.norms.huggingface import find_norms
from normlab.runtime.progress import terminal_progress
from normlab.study.key_numbers import NATS_PER_TOKEN
from normlab.study.present import table


@torch.no_grad()
def per_norm_effects(
    model: nn.Module, chunks: torch.Tensor, *, backend: str = "torch", batch: int = 4, progress=None
) -> list[dict]:
    """Centring added at one norm at a time: the mean loss change over `chunks` for each norm."""
    base = chunk_losses(model, chunks, batch)
    names = list(find_norms(model))
    rows = []
    for name in names if progress is None else progress(names, desc="one norm at a time"):
        with installed(model, variant_modules(model, backend, convert="layer_norm", only=[name])):
            losses = chunk_losses(model, chunks, batch)
        diffs = [b - a for a, b in zip(base, losses)]
        rows.append(
            {
                "norm": name,
                "depth": stream_depth(name, len(names) // 2),
                "loss_change": statistics.fmean(diffs),
                "sd_over_chunks": statistics.stdev(diffs) if len(diffs) > 1 else 0.0,
            }
        )
    return rows


@dataclass
class CentringAdded:
    base_losses: list[float]  # per loss chunk, the model as trained
    layer_losses: list[float]  # every RMSNorm a LayerNorm with the same gain
    apart_losses: list[float]  # the same, except on the first token of each chunk
    added: dict  # paired_difference(base, layer)
    added_apart: dict  # paired_difference(base, apart)
    sweep: pd.DataFrame  # centring at one norm at a time: norm, depth, loss_change, sd_over_chunks, site
    sweep_chunks: int
    sweep_length: int
    margin: float

    @property
    def top_norms(self) -> pd.DataFrame:
        """The three single-norm effects largest in size."""
        return self.sweep.reindex(self.sweep["loss_change"].abs().sort_values(ascending=False).index).head(3)


def measure_centring_added(run: SmolLM2Run, batch: int, margin: float) -> CentringAdded:
    model = run.model
    base_losses = chunk_losses(model, run.loss_chunks, batch)
    with installed(model, variant_modules(model, "torch", convert="layer_norm")):
        layer_losses = chunk_losses(model, run.loss_chunks, batch)
    with installed(model, first_token_apart_modules(model, "torch")):
        apart_losses = chunk_losses(model, run.loss_chunks, batch)
    added = paired_difference(base_losses, layer_losses, margin)
    added_apart = paired_difference(base_losses, apart_losses, margin)
    sweep = pd.DataFrame(per_norm_effects(model, run.sweep_chunks, batch=batch, progress=terminal_progress))
    sweep["site"] = [site_of(d, run.blocks) for d in sweep["depth"]]
    return CentringAdded(
        base_losses,
        layer_losses,
        apart_losses,
        added,
        added_apart,
        sweep,
        sweep_chunks=run.sweep_chunks.shape[0],
        sweep_length=run.sweep_chunks.shape[1],
        margin=margin,
    )


def loss_table(result: CentringAdded, length: int):
    def row(variant, losses, difference):
        return {
            "variant": variant,
            "mean loss (nats/token)": statistics.fmean(losses),
            "change": difference["mean_difference"],
            "95% CI low": difference["ci_low"],
            "95% CI high": difference["ci_high"],
            f"outcome vs {result.margin} margin": difference["outcome"],
        }

    as_trained = {"mean_difference": 0.0, "ci_low": None, "ci_high": None, "outcome": "—"}
    return table(
        pd.DataFrame(
            [
                row("RMSNorm (as trained)", result.base_losses, as_trained),
                row("LayerNorm at every norm", result.layer_losses, result.added),
                row("LayerNorm except on the first token", result.apart_losses, result.added_apart),
            ]
        ),
        digits=3,
        caption=f"SmolLM2 loss on {len(result.base_losses)} held-out chunks of {length} tokens, paired by chunk.",
    )


def centring_added_paragraph(result: CentringAdded) -> str:
    return (
        f"Adding centring everywhere changes the loss by {interval_text(result.added, NATS_PER_TOKEN, margin=False)}: "
        f"**{result.added['outcome']}** against the ±{result.margin} {NATS_PER_TOKEN} margin. Leaving the first token uncentred gives "
        f"{interval_text(result.added_apart, NATS_PER_TOKEN, margin=False)}. One norm at a time ({{numref}}`fig-realmodels-per-norm`, "
        f"{result.sweep_chunks} chunks of {result.sweep_length} tokens), the largest effects come "
        + ", ".join(f"`{r.norm}` ({r.loss_change:+.4f})" for r in result.top_norms.itertuples())
        + f"; the sum of the single-norm effects is {result.sweep['loss_change'].sum():+.4f} {NATS_PER_TOKEN}."
    )
