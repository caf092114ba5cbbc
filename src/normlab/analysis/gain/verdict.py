"""Section "Verdict for B15": the four parts combined by the chapter's rule into its finding (`b15_finding`), and
the paragraph that shows it (`b15_paragraph`), which reads the parts and the verdict from that finding."""

from __future__ import annotations

from normlab.analysis.gain.effective_update import UpdateScaling
from normlab.analysis.gain.exact_toy import ToyChecks, equilibrium_row
from normlab.analysis.gain.forward import ForwardCheck
from normlab.analysis.gain.qk_norm import QKLaw, qk_evidence, qk_sentence
from normlab.analysis.gain.weight_decay import DecaySweep
from normlab.analysis.shared.paired import interval_text
from normlab.study import decide
from normlab.study.findings import Finding
from normlab.study.key_numbers import NATS_PER_BYTE, KeyNumber

B15_KEY = KeyNumber("paired final-loss change under strong decay of the gain", NATS_PER_BYTE)


def b15_parts(forward: ForwardCheck, scaling: UpdateScaling, toy: ToyChecks, sweep: DecaySweep) -> dict:
    """The four parts of B15, each already judged against its own threshold."""
    return {
        "forward_invariance": forward.holds,
        "linear_under_adam": bool(scaling.linear_under_adam),
        "wd_as_schedule_scale_invariant": bool(toy.holds),
        "sensitive_to_gain_decay": bool(sweep.sensitive),
    }


def b15_verdict(parts: dict) -> str:
    """All four parts: holds; two or three: holds with caveats; fewer: does not hold."""
    passed = sum(parts.values())
    return decide(passed >= 2, caveat=passed < 4)


def _parts_held(parts: dict) -> str:
    return f"{sum(parts.values())}/4 parts hold"


# each part as the summary names the ones that fail
PART_NAMES = {
    "forward_invariance": "forward invariance",
    "linear_under_adam": "Adam's linear scaling",
    "wd_as_schedule_scale_invariant": "decay as a schedule",
    "sensitive_to_gain_decay": "sensitivity to gain decay",
}


def _sweep_text(sweep: DecaySweep, *, margin: bool = False) -> str:
    """The strongest decay's paired loss change; with `margin`, its interval and pairs against the margin alone (the
    summary's first sentence), else with the finest resolvable margin and why it is undecided."""
    if sweep.strongest is None:
        return "the decay sweep diverged"
    pair = sweep.pairs[sweep.strongest]
    change = (
        f"{interval_text(pair, NATS_PER_BYTE, margin=False)} against ±{sweep.margin:g}"
        + (", undecided" if pair and pair.get("outcome") == "inconclusive" else "")
        if margin and pair is not None
        else interval_text(pair, NATS_PER_BYTE)
    )
    return (
        f"λ_g = {sweep.strongest:g} (ηλT = {sweep.timescales[sweep.strongest]:.0f}) changes the final loss by {change}"
    )


def b15_finding(
    forward: ForwardCheck,
    scaling: UpdateScaling,
    toy: ToyChecks,
    sweep: DecaySweep,
    qk: QKLaw,
    *,
    tolerance: float,
    corpus_sha256: str,
) -> Finding:
    """B15 from its four parts; the key number is the strongest decay's paired loss change, against the margin.

    The QK-norm law does not vote: it says where the claim's premise (exact scale invariance) holds, and the
    summary's second sentence reports it. The chapter adds the decay sweep's arms (`arms.sweep_arms`) before judging.
    """
    parts = b15_parts(forward, scaling, toy, sweep)
    key_pair = sweep.key_pair
    adam_toy = equilibrium_row(toy.equilibrium, "adamw", "toy chain")
    e = toy.exponents
    # the first sentence (the ledger's): the parts' count, which failed, and the key number; each part's number after it
    failed = [PART_NAMES[name] for name, held in parts.items() if not held]
    summary = (
        f"{_parts_held(parts)}"
        + (f" (failing: {', '.join(failed)})" if failed else "")
        + f": {_sweep_text(sweep, margin=True)}. Gains ×0.5/×2 move the pre-LN loss by up to "
        f"{forward.by_location.max():.1%}, and Adam's update of the next layer scales as "
        f"a^{scaling.adam_exponent:.2f} under the (g·a, W/a) symmetry. {qk_sentence(qk)}"
    )
    evidence = {
        "parts": parts,
        "forward": {
            "toy_max_abs_delta_loss": toy.invariance,
            "symmetry_max_abs_delta_loss": forward.symmetry_max,
            "relative_loss_change_at_a_0.5_or_2": {
                f"{m} / {loc}": float(v) for (m, loc), v in forward.by_location.items()
            },
        },
        "effective_update": {
            "adam_exponent_via_W": scaling.adam_exponent,
            "adam_exponent_sd": scaling.adam_exponent_sd,
            "sgd_exponent_via_W": scaling.sgd_exponent,
            "reference": "Kunin et al. 2021 rescale symmetry (g*a, W/a); SGD a^2, Adam a^1 derived",
        },
        "effective_lr": {
            "sgd_exponent_gain": e["sgd_g"],
            "sgd_exponent_W1": e["sgd_w"],
            "adam_exponent_gain": e["adam_g"],
            "adam_exponent_W1": e["adam_w"],
            "theory_minus2_minus1_holds": bool(toy.theory_holds),
            "sgd_direction_equivalence_rad": toy.equivalence_angle,
        },
        "wd_schedule": {
            "li_arora_max_angle_rad": toy.schedule_angle,
            "equilibrium": toy.equilibrium.drop(columns=["lr", "weight_decay"]).to_dict("records"),
            "tolerance": tolerance,
            "adamw_toy_norm_ratio": float(adam_toy["norm_ratio"]),
            "adamw_toy_angular_ratio": float(adam_toy["angular_ratio"]),
        },
        "decay_sweep": {
            "pairs": {str(wd): p for wd, p in sweep.pairs.items()},
            "eta_lambda_T": {str(k): v for k, v in sweep.timescales.items()},
            "final_gain_rms": {str(k): float(v) for k, v in sweep.final_gain.items()},
            "margin_nats": sweep.margin,
            "loss_drop_last_10pct": sweep.loss_drop,
            "sensitive": sweep.sensitive,
            "insensitive": sweep.insensitive,
        },
        "qk_norm_law": qk_evidence(qk),
        "corpus_sha256": corpus_sha256,
    }
    return Finding(
        b15_verdict(parts),
        summary,
        evidence,
        key_number=key_pair["mean_difference"] if key_pair else None,
        threshold=sweep.margin,
        spread=key_pair["standard_error"] if key_pair else None,
        meaning=B15_KEY.meaning,
        unit=B15_KEY.unit,
        reads=("forward_change", "exponent_tolerance", "tol", "angle_tolerance", "margin"),
    )


def b15_paragraph(
    b15: Finding, forward: ForwardCheck, scaling: UpdateScaling, toy: ToyChecks, sweep: DecaySweep, qk: QKLaw
) -> str:
    """The verdict paragraph the chapter shows: each part's number, where the invariance is exact, and the parts
    and verdict as `b15` records them."""
    parts, tolerance = b15.evidence["parts"], b15.evidence["wd_schedule"]["tolerance"]
    return (
        f"{_parts_held(parts)}. (1) Gains ×0.5 or ×2 change the loss by up to "
        f"{forward.by_location.max():.1%}; the (gain·a, linear/a) symmetry leaves it within {forward.symmetry_max:.0e}. "
        f"(2) Under the symmetry, Adam's one-step change of the next layer goes as a^{scaling.adam_exponent:.2f} (sd "
        f"{scaling.adam_exponent_sd:.2f}), SGD's as a^{scaling.sgd_exponent:.2f}. (3) Decay ≡ growing learning rate to "
        f"{toy.schedule_angle:.0e} rad on scale-invariant weights; equilibrium formulas "
        f"{'within' if parts['wd_as_schedule_scale_invariant'] else 'not within'} ±{tolerance:.0%}. "
        f"(4) {_sweep_text(sweep)}; loss still fell {sweep.loss_drop:.4f} {NATS_PER_BYTE} over the last 10% of steps. "
        f"With that decay the gains end at RMS "
        f"{sweep.final_gain_at(sweep.strongest):.3f} against {sweep.final_gain_at(0.0):.3f} undecayed: in pre-LN, "
        f"decay that has time to act shrinks what the next layer sees, a change of the function and not only of a "
        f"learning rate. {qk_sentence(qk)}\n\n**B15 verdict: {b15.verdict}.**"
    )
