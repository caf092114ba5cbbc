"""The gains of a small GPT: scaling them at one norm location, and the rescale symmetry pre-LN does have.

The helpers take any model exposing `norms()`, so they are tested on a tiny stand-in. In pre-LN the gain alone is not
scale invariant; what is, is the pair (gain·a, next linear/a) (Kunin et al. 2021, "Neural Mechanics", ICLR).
"""

from __future__ import annotations

import contextlib

import numpy as np
import pandas as pd
import torch


def norm_locations(model) -> dict[str, list]:
    """Group a model's norm modules by what they feed.

    pre-LN: norm1 -> 'attention input', norm2 -> 'MLP input', plus 'final'. post-LN: the norms sit on the
    trunk, so norm1 -> 'trunk after attention' (it feeds the MLP) and norm2 -> 'trunk after MLP' (it feeds
    the next block, and the head after the last block). Other norms keep their own names.
    """
    post = getattr(getattr(model, "cfg", None), "placement", "pre") == "post"
    labels = {
        "norm1": "trunk after attention" if post else "attention input",
        "norm2": "trunk after MLP" if post else "MLP input",
        "q_norm": "queries and keys (QK-norm)",
        "k_norm": "queries and keys (QK-norm)",
    }
    locations: dict[str, list] = {}
    for name, module in model.norms():
        leaf = name.rsplit(".", 1)[-1]
        key = labels.get(leaf, "final" if "final" in name else name)
        locations.setdefault(key, []).append(module)
    return locations


@contextlib.contextmanager
def scaled_gains(modules, factor: float):
    """Temporarily multiply the gain (`weight`) of each module by `factor`; LayerNorm's bias is left alone."""
    saved = [m.weight.detach().clone() for m in modules]
    try:
        with torch.no_grad():
            for m in modules:
                m.weight.mul_(factor)
        yield
    finally:
        with torch.no_grad():
            for m, w in zip(modules, saved):
                m.weight.copy_(w)


@torch.no_grad()
def gain_sensitivity(model, batches, factors, locations: dict | None = None) -> pd.DataFrame:
    """Loss on fixed batches with the gains at one location multiplied by each factor, all other gains untouched.

    `batches` is a list of (inputs, targets). Returns rows of location, factor, loss and the change from the
    unscaled loss (nats/token).
    """
    factors = [float(a) for a in factors]
    if not factors or min(factors) <= 0:
        raise ValueError(f"factors must be a non-empty list of positive numbers, got {factors!r}")
    locations = norm_locations(model) if locations is None else locations
    was_training = model.training
    model.eval()

    def mean_loss() -> float:
        return float(np.mean([float(model(x, targets=y)[1]) for x, y in batches]))

    base = mean_loss()
    rows = []
    for where, modules in locations.items():
        for a in factors:
            with scaled_gains(modules, a):
                loss = mean_loss()
            rows.append({"location": where, "factor": a, "loss": loss, "delta_loss": loss - base})
    model.train(was_training)
    return pd.DataFrame(rows)


def gain_rms(model) -> dict[str, float]:
    """RMS of each norm's gain (||g|| / sqrt(d)), keyed by the norm's name."""
    return {name: float(m.weight.detach().pow(2).mean().sqrt()) for name, m in model.norms() if m.weight is not None}


# ---- the symmetry that pre-LN does have (Kunin et al. 2021) ------------------------------------------


def following_linears(model) -> dict[str, list]:
    """For a pre-LN GPT: each norm's name -> the linear layers that read its output directly.

    norm1 feeds the attention's qkv projection, norm2 the MLP's input projections, the final norm the head.
    These are the pairs (gain, next linear) for which scaling the gain by a and the linear's input columns by
    1/a leaves the function unchanged (Kunin et al. 2021, "Neural Mechanics", ICLR: a rescale symmetry).
    """
    if getattr(getattr(model, "cfg", None), "placement", "pre") != "pre":
        raise ValueError("following_linears needs a pre-LN model: in post-LN the norm's output also feeds the trunk")
    if getattr(model.cfg, "tie_embeddings", False):
        raise ValueError(
            "with tied embeddings the head is also the embedding table, so the final norm has no free next layer"
        )
    pairs = {}
    for name, _ in model.norms():
        leaf = name.rsplit(".", 1)[-1]
        if name == "final_norm":
            pairs[name] = [model.lm_head]
        elif leaf == "norm1":
            pairs[name] = [model.blocks[int(name.split(".")[1])].attn.qkv]
        elif leaf == "norm2":
            mlp = model.blocks[int(name.split(".")[1])].mlp
            pairs[name] = [mlp.gate, mlp.up] if mlp.kind == "swiglu" else [mlp.up]
        # QK-norm's q_norm and k_norm feed the attention logits, not a linear layer: they have no partner.
    return pairs


@torch.no_grad()
def apply_rescale(model, factor: float, names=None) -> None:
    """In place: gain (and LayerNorm's bias) of each named norm times `factor`, its next linears' weights / `factor`."""
    pairs = following_linears(model)
    modules = dict(model.norms())
    for name in pairs if names is None else names:
        norm = modules[name]
        norm.weight.mul_(factor)
        if getattr(norm, "bias", None) is not None:
            norm.bias.mul_(factor)
        for linear in pairs[name]:
            linear.weight.div_(factor)


@torch.no_grad()
def rescale_symmetry(model, batches, factors) -> pd.DataFrame:
    """Loss with every (gain, next linear) pair rescaled by (a, 1/a), against the untouched model, and with the
    gains alone scaled by a (which pre-LN is *not* invariant to). One row per factor."""
    import copy

    was_training = model.training
    model.eval()

    def mean_loss(m) -> float:
        return float(np.mean([float(m(x, targets=y)[1]) for x, y in batches]))

    base = mean_loss(model)
    rows = []
    for a in [float(f) for f in factors]:
        paired, alone = copy.deepcopy(model), copy.deepcopy(model)
        apply_rescale(paired, a)
        for _, norm in alone.norms():
            norm.weight.mul_(a)
        rows.append(
            {
                "factor": a,
                "delta_loss_rescaled_pair": mean_loss(paired) - base,
                "delta_loss_gain_alone": mean_loss(alone) - base,
                "loss": base,
            }
        )
    model.train(was_training)
    return pd.DataFrame(rows)


def effective_update(model, batch, factors, *, optimizer: str = "adam", lr: float = 1e-3) -> pd.DataFrame:
    """How one optimizer step changes the function-level weight E = W·diag(g) of each next linear, after the
    (g·a, W/a) rescale that leaves the function itself unchanged.

    One step from the same batch for each factor a (fresh optimizer, no weight decay). The change of E splits into
    the part that comes through W's update (ΔW·diag(g)) and through g's (W·diag(Δg)); each is reported relative to
    ‖E‖ and summed over the model's (gain, linear) pairs. Gradients scale as a (for W) and 1/a (for g), so under SGD
    the two parts go as a² and a⁻²; Adam's step ignores gradient scale, so they go as a and a⁻¹.
    """
    import copy

    if optimizer not in ("sgd", "adam"):
        raise ValueError(f"optimizer must be 'sgd' or 'adam', got {optimizer!r}")
    x, y = batch
    rows = []
    for a in [float(f) for f in factors]:
        m = copy.deepcopy(model)
        apply_rescale(m, a)
        m.train()
        params = [p for p in m.parameters()]
        opt = torch.optim.SGD(params, lr=lr) if optimizer == "sgd" else torch.optim.Adam(params, lr=lr)
        pairs = following_linears(m)
        norms = dict(m.norms())
        before = {
            name: (norms[name].weight.detach().clone(), [l.weight.detach().clone() for l in pairs[name]])
            for name in pairs
        }
        opt.zero_grad()
        m(x, targets=y)[1].backward()
        opt.step()
        via_w = via_g = total = 0.0
        for name, (g0, weights0) in before.items():
            g1 = norms[name].weight.detach()
            for linear, w0 in zip(pairs[name], weights0):
                w1 = linear.weight.detach()
                e0 = (w0 * g0).double()
                via_w += float(((w1 - w0) * g0).double().norm() / e0.norm())
                via_g += float((w0 * (g1 - g0)).double().norm() / e0.norm())
                total += float(((w1 * g1).double() - e0).norm() / e0.norm())
        rows.append({"optimizer": optimizer, "factor": a, "via_W": via_w, "via_g": via_g, "total": total})
    return pd.DataFrame(rows)


# ---- where the invariance is exact: W_q and W_k under QK-norm -------------------------------------------
#
# With QK-norm each head's query and key are RMS-normalised right after the projection, so every row block of
# W_q (and of W_k) that makes one head is exactly scale invariant: q(a·W_q) = q(W_q) up to the norm's epsilon.
# van Laarhoven 2017's law then applies as derived: the gradient scales as 1/a and is orthogonal to W_q, so a plain
# SGD step turns W_q by atan(η·S/‖W_q‖²), S = ‖∇W_q‖·‖W_q‖ being the gradient on the unit sphere.
