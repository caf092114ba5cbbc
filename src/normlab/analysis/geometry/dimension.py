"""Section "The dimension of the output set": the rank of many tokens' outputs, B16's geometric part."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from normlab.analysis.geometry.articles import random_tokens
from normlab.norms.reference import layer_norm_reference, rms_norm_reference


def singular_values(outputs: torch.Tensor) -> torch.Tensor:
    """Singular values of a (tokens, d) batch of outputs, divided by the largest."""
    values = torch.linalg.svdvals(outputs.double())
    return values / values[0]


def numerical_rank(outputs: torch.Tensor, rtol: float = 1e-10) -> int:
    return int((singular_values(outputs) > rtol).sum())


@dataclass
class OutputRank:
    outputs: dict[str, torch.Tensor]  # per norm, the stacked outputs of the random tokens
    ranks: dict[str, int]
    spectra: pd.DataFrame  # norm, index, singular value / largest
    mean_spread: dict[str, float]  # sd over tokens of the per-token output mean: the extra dimension RMSNorm keeps


def measure_output_rank(tokens: int, d: int, generator: torch.Generator) -> OutputRank:
    inputs = random_tokens(tokens, d, generator)
    outputs = {"LayerNorm": layer_norm_reference(inputs, eps=1e-5), "RMSNorm": rms_norm_reference(inputs, eps=1e-6)}
    spectra = pd.concat(
        [
            pd.DataFrame(
                {"norm": name, "index": np.arange(1, d + 1), "singular value / largest": singular_values(y).numpy()}
            )
            for name, y in outputs.items()
        ]
    )
    return OutputRank(
        outputs=outputs,
        ranks={name: numerical_rank(y) for name, y in outputs.items()},
        spectra=spectra,
        mean_spread={name: float(y.mean(-1).std()) for name, y in outputs.items()},
    )


def b16_geometric_part(rank: OutputRank) -> tuple[str, dict]:
    """B16's geometric part, as (summary, evidence): the quality chapter judges B16 with its training runs."""
    tokens, d = rank.outputs["RMSNorm"].shape
    ranks, spread = rank.ranks, rank.mean_spread
    summary = (
        f"Geometric part: the outputs of {tokens} random tokens have rank {ranks['RMSNorm']} under RMSNorm and "
        f"{ranks['LayerNorm']} under LayerNorm (d = {d}): one more dimension, the output mean (spread "
        f"{spread['RMSNorm']:.2f} vs {spread['LayerNorm']:.0e}); whether training uses or suppresses it is measured in "
        f"the quality chapter."
    )
    evidence = {
        "ranks": ranks,
        "d": d,
        "tokens": tokens,
        "output_mean_spread": spread,
        "rank_one_more": bool(ranks["LayerNorm"] == d - 1 and ranks["RMSNorm"] == d),
        "smallest_singular_value": {name: float(singular_values(y)[-1]) for name, y in rank.outputs.items()},
    }
    return summary, evidence
