"""Statistics of a transformer's residual stream, layer by layer.

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
        if kept.pow(2).sum() > 0 else 0.0,
    }


def stream_statistics(stream: Sequence[torch.Tensor]) -> list[dict]:
    """One record per stream position: layer 0 is the embeddings, layer i the output of block i-1."""
    if len(stream) == 0:
        raise ValueError("the stream is empty: run a forward inside model.capture_residual_stream() first")
    return [{"layer": i, **layer_statistics(x)} for i, x in enumerate(stream)]


def write_mean_agreement(stream: Sequence[torch.Tensor]) -> dict[str, float]:
    """Do the blocks' writes to the stream move its mean together?

    Block i writes w_i = stream[i+1] - stream[i]. For each write, take its per-token mean m_i.
    Returns the average pairwise correlation (over tokens) between different blocks' m_i, and the
    fraction of blocks whose average m_i has the sign of the stream's total drift
    (mean of stream[-1] - stream[0]): 1 when every block pushes the offset the same way.
    """
    if len(stream) < 3:
        raise ValueError("need at least two blocks (three stream positions) to compare their writes")
    writes = [token_means(after) - token_means(before) for before, after in zip(stream[:-1], stream[1:])]
    m = torch.stack(writes)  # (blocks, tokens)
    centred = m - m.mean(dim=1, keepdim=True)
    norms = centred.norm(dim=1)
    corr = (centred @ centred.T) / torch.outer(norms, norms).clamp_min(1e-300)
    pairs = torch.triu_indices(len(writes), len(writes), offset=1)
    total_drift = float(m.sum(dim=0).mean())
    sign = math.copysign(1.0, total_drift)
    return {
        "write_mean_correlation": float(corr[pairs[0], pairs[1]].mean()),
        "write_mean_sign_agreement": float((torch.sign(m.mean(dim=1)) == sign).double().mean()),
        "total_mean_drift": total_drift,
    }


@torch.no_grad()
def mean_projection_effect(model, batches) -> dict[str, float]:
    """Validation loss as is, and with the per-token mean removed from every norm's input.

    `model` is a normlab GPT; `batches` a list of (x, y). The difference is the causal test of
    "the mean component carries no information the network uses".
    """
    was_training = model.training
    model.eval()
    try:
        plain = [float(model(x, y)[1]) for x, y in batches]
        with model.project_out_mean_before_norms():
            removed = [float(model(x, y)[1]) for x, y in batches]
    finally:
        model.train(was_training)
    loss, loss_removed = sum(plain) / len(plain), sum(removed) / len(removed)
    return {"loss": loss, "loss_mean_removed": loss_removed, "loss_increase": loss_removed - loss}


@torch.no_grad()
def stream_report(model, x: torch.Tensor) -> tuple[list[dict], dict[str, float]]:
    """Per-layer statistics of a GPT's residual stream on tokens `x`, and whether its blocks' writes
    move the mean together."""
    was_training = model.training
    model.eval()
    try:
        with model.capture_residual_stream() as stream:
            model(x)
    finally:
        model.train(was_training)
    return stream_statistics(stream), write_mean_agreement(stream)


def find_numbers(evidence, contains: str) -> dict[str, float]:
    """Every finite number in a (nested) evidence dict whose key path contains `contains`, keyed by that path.

    Owners combine evidence other chapters recorded; this reads it without depending on their exact layout.
    """
    found: dict[str, float] = {}

    def walk(value, path):
        if isinstance(value, dict):
            for key, item in value.items():
                walk(item, f"{path}.{key}" if path else str(key))
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            if contains in path:
                found[path] = float(value)

    walk(evidence or {}, "")
    return found
