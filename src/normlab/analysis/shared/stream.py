"""Analyses of the residual stream built on `normlab.gpt.residual_stream`'s per-layer statistics: do the blocks'
writes move the mean together, does the network use the mean component, and reading other chapters' numbers.

The per-layer statistics themselves (ones_share, offset_share, outliers) live in `normlab.gpt.residual_stream`, beside the
model, because the training loop records them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from normlab.gpt.residual_stream import stream_statistics, token_means


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


def deepest_value(evidence, *names) -> tuple[str, float] | None:
    """The first of `names` present in `evidence` as a number, or as a per-layer list (its last finite entry,
    the deepest layer): (name, value), or None when none is there."""
    for name in names:
        value = (evidence or {}).get(name)
        if isinstance(value, (list, tuple)):
            finite = [
                float(v) for v in value if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            ]
            if finite:
                return name, finite[-1]
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return name, float(value)
    return None
