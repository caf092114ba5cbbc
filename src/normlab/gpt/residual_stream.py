"""Statistics of a transformer's residual stream, layer by layer.

They sit beside the model because the training loop records them (`train.measure_stream`);
the chapters' analyses (`analysis.shared.stream`) build on them.

For a token's stream vector x in R^d, write mu = mean(x) and sigma^2 = var(x)
(population). Then mean(x^2) = mu^2 + sigma^2 and

    ones_share = mu^2 / (mu^2 + sigma^2) = cos^2(angle between x and the all-ones vector),

the share of the vector's energy along the all-ones direction: the only part
LayerNorm removes and RMSNorm keeps. A "constant offset" in the sense of the
essay (B5) would show as a mu that is nearly the same for every token; the
`offset_share` measures the more general common offset, the per-channel mean
over tokens, in any direction: a shared vector that mean-centring does not
remove (it removes only each token's own component along the all-ones
direction). Outlier channels (massive activations) are measured apart from
both by `outlier_statistics`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch


def _flat_tokens(x: torch.Tensor) -> torch.Tensor:
    if not isinstance(x, torch.Tensor) or x.dim() < 2 or x.shape[-1] < 2:
        raise ValueError("a stream tensor must have shape (..., width) with width >= 2")
    return x.detach().reshape(-1, x.shape[-1]).double()


def token_means(x: torch.Tensor) -> torch.Tensor:
    """Per-token mean over channels, flattened over batch and time."""
    return _flat_tokens(x).mean(dim=-1)


def ones_share(x: torch.Tensor) -> torch.Tensor:
    """Per-token mu^2 / (mu^2 + sigma^2), flattened over batch and time; 0 for an all-zero token."""
    tokens = _flat_tokens(x)
    mean_square = tokens.pow(2).mean(dim=-1)
    share = tokens.mean(dim=-1).pow(2) / mean_square
    return torch.where(mean_square > 0, share, torch.zeros_like(share))


def layer_statistics(x: torch.Tensor) -> dict[str, float]:
    """Summary of one layer's stream tensor (..., width)."""
    tokens = _flat_tokens(x)
    mu = tokens.mean(dim=-1)
    mean_square = tokens.pow(2).mean(dim=-1)
    share = ones_share(x)
    offset = tokens.mean(dim=0)  # per-channel mean over tokens: the common offset
    mu_avg, mu_std = float(mu.mean()), float(mu.std(correction=0))
    return {
        "rms": float(mean_square.sqrt().mean()),
        "ones_share": float(share.mean()),
        "ones_share_median": float(share.median()),
        "token_mean_avg": mu_avg,
        "token_mean_std": mu_std,
        # Spread of mu across tokens relative to its size: near 0 for a constant offset.
        "token_mean_cv": mu_std / abs(mu_avg) if mu_avg != 0 else math.inf,
        # Fraction of tokens whose mu has the sign of the average mu: 1 for a constant offset, ~0.5 for noise.
        "token_mean_sign_agreement": float((torch.sign(mu) == math.copysign(1.0, mu_avg)).double().mean()),
        "offset_share": float(offset.pow(2).sum() / tokens.pow(2).sum(dim=-1).mean()),
        **outlier_statistics(tokens),
    }


def outlier_statistics(x: torch.Tensor) -> dict[str, float]:
    """Massive activations (Sun et al. 2024, "Massive Activations in Large Language Models"): a few channels
    whose magnitude dwarfs the rest, a third thing apart from the ones-direction share and the common offset.

    - `massive_ratio`: the largest |x| anywhere over the median |x| (Sun et al. call an activation massive
      at about 1000x the median in billion-parameter models);
    - `top_channel_share`: the share of the stream's energy in its single largest channel (1/width if even);
    - `offset_share_without_top`: the common-offset share with that channel left out, which says whether
      the common offset is one outlier channel or spread over many.
    """
    tokens = _flat_tokens(x)
    magnitude = tokens.abs()
    median = float(magnitude.median())
    energy = tokens.pow(2).mean(dim=0)  # per channel
    top = int(energy.argmax())
    rest = torch.ones(tokens.shape[-1], dtype=torch.bool)
    rest[top] = False
    kept = tokens[:, rest]
    return {
        "massive_ratio": float(magnitude.max()) / median if median > 0 else math.inf,
        "top_channel_share": float(energy[top] / energy.sum()) if energy.sum() > 0 else 0.0,
        "top_channel": top,
        "offset_share_without_top": float(kept.mean(dim=0).pow(2).sum() / kept.pow(2).sum(dim=-1).mean())
        if kept.pow(2).sum() > 0
        else 0.0,
    }


def stream_statistics(stream: Sequence[torch.Tensor]) -> list[dict]:
    """One record per stream position: layer 0 is the embeddings, layer i the output of block i-1."""
    if len(stream) == 0:
        raise ValueError("the stream is empty: run a forward inside model.capture_residual_stream() first")
    return [{"layer": i, **layer_statistics(x)} for i, x in enumerate(stream)]
