"""Section "Where the invariance is exact: W_q and W_k under QK-norm": the law measured, judged and put in words.

It does not vote on B15: it says where the claim's premise, exact scale invariance, holds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd
import torch

from normlab.analysis.gain.measures import fit_power_law
from normlab.analysis.gain.qk_projections import (
    gain_pair_contrast,
    qk_forward_invariance,
    qk_gradient_law,
    qk_norm_model,
    qk_sgd_study,
)
from normlab.gpt.model import GPTConfig


@dataclass
class QKLaw:
    """B15's framing, measured where the invariance is exact (W_q, W_k under QK-norm) and where it is not (g)."""

    invariance: pd.DataFrame  # max |Δ logit| per factor and scaled projection (float64, ε negligible)
    invariance_max: float
    default_eps: float
    default_eps_change: float  # the same check with the chapter's usual ε, which breaks exactness
    gradient: pd.DataFrame  # ‖∇W_q‖, ‖∇W_k‖ and cos(∇W_q, W_q) per factor
    gradient_slope_q: float  # of log ‖∇W_q‖ on log a (theory −1)
    gradient_slope_k: float
    orthogonality_max: float  # largest |cos(∇W_q, W_q)| (theory 0)
    runs: pd.DataFrame  # the scaled SGD runs, step by step
    gaps: pd.DataFrame  # per factor: the loss gap between (a, η) and (1, η/a²)
    angular_slope: float  # first step's angular update on ‖W_q‖ (theory −2): every run starts at one direction
    effective_lr_slope: float  # angular update per unit sphere gradient on ‖W_q‖, every step (theory −2)
    run_mean_slope: float  # the angular update averaged over each run (the runs part ways, so not a test)
    effective_lr_ratio_max: float  # largest |measured / (η/‖W_q‖²) − 1| over every step
    trajectory_gap: float  # largest |Δ loss| between the paired runs
    contrast: pd.DataFrame  # per location and factor: the gain alone against the (g·a, W/a) pair
    gain_alone_min: float  # the location the gain alone moves least: its largest |Δ logit| over a ≠ 1
    pair_max: float  # largest |Δ logit| under the pair
    lr: float
    slope_tolerance: float
    invariance_tolerance: float
    holds: bool  # invariance, both gradient slopes, both angular slopes and the paired runs within tolerance
    contrast_holds: bool  # the gain alone moves the logits beyond the tolerance; the pair does not


def qk_law_holds(
    invariance_max: float,
    gradient_slopes,
    angular_slopes,
    trajectory_gap: float,
    *,
    slope_tolerance: float,
    invariance_tolerance: float,
) -> bool:
    """The law holds when the forward and the paired runs agree within `invariance_tolerance`, the gradient slopes
    are within `slope_tolerance` of −1 and the angular-update slopes within it of −2 (NaN fails)."""
    return bool(
        invariance_max <= invariance_tolerance
        and trajectory_gap <= invariance_tolerance
        and all(abs(k + 1) <= slope_tolerance for k in gradient_slopes)
        and all(abs(k + 2) <= slope_tolerance for k in angular_slopes)
    )


def summarise_qk_law(
    invariance: pd.DataFrame,
    default_eps_change: float,
    gradient: pd.DataFrame,
    runs: pd.DataFrame,
    gaps: pd.DataFrame,
    contrast: pd.DataFrame,
    *,
    lr: float,
    slope_tolerance: float,
    invariance_tolerance: float,
    default_eps: float = GPTConfig.norm_eps,
) -> QKLaw:
    """Fit the slopes and judge the law and the contrast from the measured tables."""
    first = runs[runs["step"] == 0]
    mean = runs.groupby("factor")[["norm_q", "angular_update"]].mean()
    moved = contrast[contrast["factor"] != 1.0]
    slopes = dict(
        gradient_slope_q=fit_power_law(gradient["factor"], gradient["grad_norm_q"]),
        gradient_slope_k=fit_power_law(gradient["factor"], gradient["grad_norm_k"]),
        angular_slope=fit_power_law(first["norm_q"], first["angular_update"]),
        effective_lr_slope=fit_power_law(runs["norm_q"], runs["effective_lr"]),
    )
    invariance_max = float(invariance["max_abs_delta_logit"].max())
    trajectory_gap = float(gaps["max_abs_delta_loss"].max())
    gain_alone_min = float(moved.groupby("location")["gain_alone"].max().min()) if len(moved) else math.nan
    pair_max = float(contrast["gain_and_next_linear"].max())
    holds = qk_law_holds(
        invariance_max,
        (slopes["gradient_slope_q"], slopes["gradient_slope_k"]),
        (slopes["angular_slope"], slopes["effective_lr_slope"]),
        trajectory_gap,
        slope_tolerance=slope_tolerance,
        invariance_tolerance=invariance_tolerance,
    )
    return QKLaw(
        invariance=invariance,
        invariance_max=invariance_max,
        default_eps=default_eps,
        default_eps_change=default_eps_change,
        gradient=gradient,
        orthogonality_max=float(gradient["cosine_grad_q_with_q"].abs().max()),
        runs=runs,
        gaps=gaps,
        run_mean_slope=fit_power_law(mean["norm_q"], mean["angular_update"]),
        effective_lr_ratio_max=float((runs["effective_lr"] / runs["predicted_effective_lr"] - 1).abs().max()),
        trajectory_gap=trajectory_gap,
        contrast=contrast,
        gain_alone_min=gain_alone_min,
        pair_max=pair_max,
        lr=lr,
        slope_tolerance=slope_tolerance,
        invariance_tolerance=invariance_tolerance,
        holds=holds,
        contrast_holds=bool(gain_alone_min > invariance_tolerance and pair_max <= invariance_tolerance),
        **slopes,
    )


def qk_law(settings: dict, corpus, *, slope_tolerance: float, invariance_tolerance: float, seed: int = 0) -> QKLaw:
    """The chapter's QK-norm section: a fresh float64 pre-LN GPT with QK-norm, W_q and W_k scaled by each factor.

    Forward invariance, the gradient law and the paired SGD runs are measured on it; the gain contrast on the
    same model, at the block norms and the final norm.
    """
    shape = settings["qk"]
    model_kw = dict(context=shape["context"], width=shape["width"], depth=shape["depth"], heads=4)
    generator = torch.Generator().manual_seed(seed + 11)
    batches = [corpus.batch("train", shape["batch"], shape["context"], generator) for _ in range(shape["steps"])]
    factors = settings["factors"]
    model = qk_norm_model(model_kw, seed=seed)
    usual = qk_norm_model(model_kw, seed=seed, eps=GPTConfig.norm_eps)
    runs, gaps = qk_sgd_study(model, batches, factors, shape["lr"])
    return summarise_qk_law(
        qk_forward_invariance(model, batches[0], factors),
        float(qk_forward_invariance(usual, batches[0], factors)["max_abs_delta_logit"].max()),
        qk_gradient_law(model, batches[0], factors),
        runs,
        gaps,
        gain_pair_contrast(model, batches[0], factors),
        lr=shape["lr"],
        slope_tolerance=slope_tolerance,
        invariance_tolerance=invariance_tolerance,
    )


def qk_frame(law: QKLaw) -> pd.DataFrame:
    """Each measured number of the QK-norm section beside what theory says and the tolerance it is held to."""
    slope, exact = f"±{law.slope_tolerance:g}", f"≤ {law.invariance_tolerance:.0e}"
    rows = [
        ("max |Δ logit|, W_q and/or W_k × a (float64)", law.invariance_max, "0", exact),
        (f"max |Δ logit|, the same with ε = {law.default_eps:g}", law.default_eps_change, "0", "(not held to)"),
        ("slope of log ‖∇W_q‖ on log a", law.gradient_slope_q, "−1", slope),
        ("slope of log ‖∇W_k‖ on log a", law.gradient_slope_k, "−1", slope),
        ("max |cos(∇W_q, W_q)|", law.orthogonality_max, "0", "(not held to)"),
        ("slope of log angular update on log ‖W_q‖, first step", law.angular_slope, "−2", slope),
        ("slope of log (angular update / S) on log ‖W_q‖, every step", law.effective_lr_slope, "−2", slope),
        ("max |(angular update / S) ÷ (η/‖W_q‖²) − 1|", law.effective_lr_ratio_max, "0", "(not held to)"),
        ("slope of the run-averaged angular update (runs part ways)", law.run_mean_slope, "−2", "(not held to)"),
        ("max |Δ loss|, SGD from (a·W, η) vs (W, η/a²)", law.trajectory_gap, "0", exact),
        ("max |Δ logit|, pair (g·a, W/a)", law.pair_max, "0", exact),
        (
            "max |Δ logit|, gains alone × a, least-moved location",
            law.gain_alone_min,
            "> 0",
            f"> {law.invariance_tolerance:.0e}",
        ),
    ]
    return pd.DataFrame(rows, columns=["check", "measured", "theory", "tolerance"])


def _rounding_text(value: float, template: str, zero: str) -> str:
    """A float64 rounding-sized number in prose: `zero` when it is exactly 0, else `template` with one figure."""
    return zero if value == 0 else template.format(value)


def qk_text(law: QKLaw) -> str:
    """The QK-norm section's conclusion, from its numbers."""
    worst = law.contrast[law.contrast["factor"] != 1.0].groupby("location")["gain_alone"].max()
    forward = _rounding_text(law.invariance_max, "by at most {:.0e}", "not at all")
    cosine = _rounding_text(law.orthogonality_max, "≤ {:.0e}", "= 0")
    paired = _rounding_text(law.trajectory_gap, "to within {:.0e} nats per byte", "exactly")
    pair = _rounding_text(law.pair_max, "by at most {:.0e}", "not at all")
    return (
        f"The law {'holds' if law.holds else 'does not hold'} within its tolerances. Scaling W_q and W_k by a moves "
        f"the float64 logits {forward} (with the usual ε = {law.default_eps:g}, by {law.default_eps_change:.0e}: ε "
        f"is what keeps it from being exact in practice). The gradient follows a^{law.gradient_slope_q:.3f} (W_q) "
        f"and a^{law.gradient_slope_k:.3f} (W_k), orthogonal to W_q (|cos| {cosine}); the first SGD step turns W_q "
        f"by ‖W_q‖^{law.angular_slope:.3f}, and per unit sphere gradient every step's turn is η/‖W_q‖² to within "
        f"{law.effective_lr_ratio_max:.2%}. Averaged over the whole run the slope is {law.run_mean_slope:.2f}: the "
        f"runs leave their shared start at different rates, so they no longer see the same gradient. Trained with "
        f"η/a² on W_q and W_k instead, the unscaled model follows the scaled one's losses {paired}. In the same "
        f"model, scaling a pre-LN gain alone moves the logits by up to {worst.min():.2f}–{worst.max():.2f} depending "
        f"on the location, while the pair (g·a, W/a) moves them {pair}."
    )


def qk_evidence(law: QKLaw) -> dict:
    """The QK-norm section's numbers for B15's evidence."""
    return {
        "max_abs_delta_logit_scaling_Wq_Wk_float64": law.invariance_max,
        f"max_abs_delta_logit_with_eps_{law.default_eps:g}": law.default_eps_change,
        "gradient_slope_Wq": law.gradient_slope_q,
        "gradient_slope_Wk": law.gradient_slope_k,
        "max_abs_cos_grad_Wq_with_Wq": law.orthogonality_max,
        "angular_update_slope_first_step": law.angular_slope,
        "effective_lr_slope_every_step": law.effective_lr_slope,
        "effective_lr_over_eta_per_norm_sq_max_rel_error": law.effective_lr_ratio_max,
        "angular_update_slope_run_mean": law.run_mean_slope,
        "paired_sgd_max_abs_delta_loss": law.trajectory_gap,
        "gain_alone_min_over_locations_max_abs_delta_logit": law.gain_alone_min,
        "gain_and_next_linear_max_abs_delta_logit": law.pair_max,
        "lr": law.lr,
        "slope_tolerance": law.slope_tolerance,
        "invariance_tolerance": law.invariance_tolerance,
        "law_holds": law.holds,
        "pair_not_gain_invariant": law.contrast_holds,
        "reference": "van Laarhoven 2017 (η/‖w‖² for SGD); Kunin et al. 2021 (the (g·a, W/a) symmetry)",
    }


def qk_sentence(law: QKLaw) -> str:
    """One sentence for B15's summary: where the claim's invariance is exact and where it is not."""
    forward = _rounding_text(law.invariance_max, "≤ {:.0e}", "exactly 0")
    pair = _rounding_text(law.pair_max, "≤ {:.0e}", "exactly 0")
    return (
        f"The invariance is exact for W_q and W_k under QK-norm (logits move {forward}; SGD's angular update goes as "
        f"‖W_q‖^{law.angular_slope:.2f}, the law η/‖w‖² {'holds' if law.holds else 'fails'}), not for a pre-LN gain "
        f"alone (logits move ≥ {law.gain_alone_min:.2f}) but for the pair (g·a, W/a) ({pair})."
    )
