"""Where the invariance is exact: W_q and W_k under QK-norm, scaled, differentiated and trained with plain SGD.

With QK-norm each head's query and key are RMS-normalised right after the projection, so every row block of
W_q (and of W_k) that makes one head is exactly scale invariant: q(a·W_q) = q(W_q) up to the norm's epsilon.
van Laarhoven 2017's law then applies as derived: the gradient scales as 1/a and is orthogonal to W_q, so a plain
SGD step turns W_q by atan(η·S/‖W_q‖²), S = ‖∇W_q‖·‖W_q‖ being the gradient on the unit sphere.
On the same model, `gain_pair_contrast` sets the pre-LN gain alone beside the pair (g·a, W/a), whose invariance is exact.
"""

from __future__ import annotations

import math

import pandas as pd
import torch
import torch.nn.functional as F

from normlab.analysis.gain.measures import angle
from normlab.analysis.gain.rescaling import apply_rescale, following_linears, scaled_gains
from normlab.gpt.model import GPT, GPTConfig

QK_EXACT_EPS = 1e-30  # so small beside E[q²] (~1e-2 at init) that float64 sees no epsilon at all
QK_PROJECTIONS = ("W_q", "W_k")


def qk_norm_model(model_kw: dict, *, seed: int = 0, eps: float = QK_EXACT_EPS) -> GPT:
    """A freshly initialised pre-LN GPT with QK-norm, in float64; `eps` is every norm's epsilon.

    The same `seed` gives the same weights whatever `eps` is, so the exact model and the default-ε one are a pair.
    """
    torch.manual_seed(seed)
    return GPT(GPTConfig(**model_kw, qk_norm=True, norm_eps=eps)).double()


def projection_rows(model, projection: str) -> list[torch.Tensor]:
    """Views of each block's W_q or W_k: the first or second width-row block of the fused qkv weight."""
    if projection not in QK_PROJECTIONS:
        raise ValueError(f"projection must be one of {QK_PROJECTIONS}, got {projection!r}")
    if not getattr(getattr(model, "cfg", None), "qk_norm", False):
        raise ValueError(
            "W_q and W_k are scale invariant only under QK-norm; build the model with GPTConfig(qk_norm=True)"
        )
    width, offset = model.cfg.width, QK_PROJECTIONS.index(projection)
    return [block.attn.qkv.weight[offset * width : (offset + 1) * width] for block in model.blocks]


def flat_projection(model, projection: str = "W_q", grad: bool = False) -> torch.Tensor:
    """Every block's W_q (or W_k), or its gradient, as one detached flat vector."""
    rows = projection_rows(model, projection)
    if grad:
        width, offset = model.cfg.width, QK_PROJECTIONS.index(projection)
        rows = [block.attn.qkv.weight.grad[offset * width : (offset + 1) * width] for block in model.blocks]
    return torch.cat([r.detach().flatten() for r in rows])


@torch.no_grad()
def scale_projections(model, factor: float, projections=QK_PROJECTIONS) -> None:
    """In place: multiply W_q and/or W_k of every block by `factor`."""
    for projection in projections:
        for rows in projection_rows(model, projection):
            rows.mul_(factor)


def _loss64(model, batch) -> torch.Tensor:
    # GPT.forward takes its loss in float32; the exactness checks need the float64 logits' own loss.
    x, y = batch
    logits = model(x)[0]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def _positive_factors(factors) -> list[float]:
    factors = [float(a) for a in factors]
    if not factors or min(factors) <= 0:
        raise ValueError(f"factors must be a non-empty list of positive numbers, got {factors!r}")
    return factors


@torch.no_grad()
def qk_forward_invariance(model, batch, factors) -> pd.DataFrame:
    """Largest |Δ logit| after scaling W_q, W_k or both by each factor, against the unscaled model."""
    import copy

    model.eval()
    base = model(batch[0])[0]
    rows = []
    for a in _positive_factors(factors):
        for scaled in (("W_q",), ("W_k",), QK_PROJECTIONS):
            scaled_model = copy.deepcopy(model)
            scale_projections(scaled_model, a, scaled)
            change = float((scaled_model(batch[0])[0] - base).abs().max())
            rows.append({"factor": a, "scaled": " and ".join(scaled), "max_abs_delta_logit": change})
    return pd.DataFrame(rows)


def qk_gradient_law(model, batch, factors) -> pd.DataFrame:
    """‖∇W_q‖ and ‖∇W_k‖ with both scaled by each factor a; ‖∇‖·a should not depend on a.

    Also the cosine between ∇W_q and W_q, which scale invariance forces to 0 (Euler: ⟨∇L(w), w⟩ = 0).
    """
    import copy

    rows = []
    for a in _positive_factors(factors):
        scaled = copy.deepcopy(model)
        scale_projections(scaled, a)
        scaled.zero_grad()
        _loss64(scaled, batch).backward()
        grad_q, grad_k = flat_projection(scaled, "W_q", grad=True), flat_projection(scaled, "W_k", grad=True)
        w_q = flat_projection(scaled, "W_q")
        rows.append(
            {
                "factor": a,
                "grad_norm_q": float(grad_q.norm()),
                "grad_norm_k": float(grad_k.norm()),
                "grad_norm_q_times_a": float(grad_q.norm()) * a,
                "cosine_grad_q_with_q": float(grad_q @ w_q / (grad_q.norm() * w_q.norm())),
            }
        )
    return pd.DataFrame(rows)


@torch.no_grad()
def _sgd_step(model, lr: float, projection_lr: float) -> None:
    """Plain SGD, with W_q and W_k (rows of the fused qkv weight) at their own learning rate."""
    width = model.cfg.width
    for p in model.parameters():
        if p.grad is not None:
            p.sub_(lr * p.grad)
    if projection_lr != lr:
        for block in model.blocks:
            weight = block.attn.qkv.weight
            weight[: 2 * width].sub_((projection_lr - lr) * weight.grad[: 2 * width])


def qk_sgd_run(model, batches, lr: float, *, factor: float = 1.0, projection_lr: float | None = None):
    """Plain SGD on every parameter from `model` with W_q and W_k scaled by `factor`, one step per batch.

    Per step: ‖W_q‖ before the step, W_q's angular update (rad), the sphere gradient S = ‖∇W_q‖·‖W_q‖, the
    effective learning rate (angular update / S, which theory puts at η/‖W_q‖² for W_q's own rate η) and the loss.
    """
    import copy

    if lr <= 0 or (projection_lr is not None and projection_lr <= 0):
        raise ValueError(f"learning rates must be positive, got lr={lr!r}, projection_lr={projection_lr!r}")
    rate = lr if projection_lr is None else projection_lr
    run = copy.deepcopy(model)
    scale_projections(run, factor)
    run.train()
    rows = []
    for step, batch in enumerate(batches):
        run.zero_grad()
        loss = _loss64(run, batch)
        loss.backward()
        before = flat_projection(run, "W_q")
        sphere_grad = float(flat_projection(run, "W_q", grad=True).norm() * before.norm())
        _sgd_step(run, lr, rate)
        turn = angle(before, flat_projection(run, "W_q"))
        rows.append(
            {
                "factor": factor,
                "step": step,
                "norm_q": float(before.norm()),
                "angular_update": turn,
                "sphere_grad": sphere_grad,
                "effective_lr": turn / sphere_grad if sphere_grad > 0 else math.nan,
                "predicted_effective_lr": rate / float(before.norm()) ** 2,
                "loss": float(loss.detach()),
            }
        )
    return pd.DataFrame(rows)


def qk_sgd_study(model, batches, factors, lr: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """For each a: SGD from (W_q·a, W_k·a, η) and, paired on the same batches, from (W_q, W_k, η/a² on them).

    For a scale-invariant w, a·w − η·∇L(w)/a = a·(w − (η/a²)·∇L(w)): the two runs are one trajectory, so their
    losses agree step for step. Returns the scaled runs' steps (with the paired run's loss as `paired_loss`) and,
    per factor, the largest loss gap.
    """
    runs, gaps = [], []
    for a in _positive_factors(factors):
        scaled = qk_sgd_run(model, batches, lr, factor=a)
        paired = qk_sgd_run(model, batches, lr, projection_lr=lr / a**2)
        runs.append(scaled.assign(paired_loss=paired["loss"].to_numpy()))
        gap = (scaled["loss"] - paired["loss"]).abs()
        gaps.append(
            {
                "factor": a,
                "max_abs_delta_loss": float(gap.max()),
                "loss_start": float(scaled["loss"].iloc[0]),
                "loss_end": float(scaled["loss"].iloc[-1]),
                "paired_loss_end": float(paired["loss"].iloc[-1]),
            }
        )
    return pd.concat(runs, ignore_index=True), pd.DataFrame(gaps)


@torch.no_grad()
def gain_pair_contrast(model, batch, factors) -> pd.DataFrame:
    """Per norm location and factor: largest |Δ logit| with the gains alone × a, and with (g·a, next linear/a).

    In a pre-LN model only the pair is a symmetry. `model` must be pre-LN (see `following_linears`).
    """
    import copy

    model.eval()
    base = model(batch[0])[0]
    pairs = following_linears(model)
    modules = dict(model.norms())
    locations: dict[str, list[str]] = {}
    for name in pairs:
        leaf = name.rsplit(".", 1)[-1]
        locations.setdefault({"norm1": "attention input", "norm2": "MLP input"}.get(leaf, "final"), []).append(name)
    rows = []
    for where, names in locations.items():
        for a in _positive_factors(factors):
            with scaled_gains([modules[n] for n in names], a):
                alone = float((model(batch[0])[0] - base).abs().max())
            rescaled = copy.deepcopy(model)
            apply_rescale(rescaled, a, names)
            pair = float((rescaled(batch[0])[0] - base).abs().max())
            rows.append({"location": where, "factor": a, "gain_alone": alone, "gain_and_next_linear": pair})
    return pd.DataFrame(rows)


# ---- the chapter, section by section ----------------------------------------------------------------
#
# The functions below are the gain chapter's steps, in the order the chapter runs them. Each takes the
# thresholds the chapter states in its prose as arguments, and the B15 verdict is built from their results.
