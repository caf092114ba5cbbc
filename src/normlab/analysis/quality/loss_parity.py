"""Section "Loss parity (A9) and coinciding curves (B7, first half)": the paired RMSNorm − LayerNorm
differences of the final and the whole-curve validation loss, and A9's verdict.

A9's pairs grew after looks (`A9_LOOKS`), so its verdict is read off an anytime-valid confidence sequence
(`normlab.analysis.shared.sequential`), not off the t-interval, which is kept beside it for comparison only. B7's
whole-curve difference comes from the same runs, so it is read off the same kind of sequence."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from normlab.analysis.quality.profiles import NORMS
from normlab.analysis.quality.training import hardware_label, parameter_count
from normlab.analysis.shared.paired import interval_text, paired_difference
from normlab.analysis.shared.parity import equivalence_verdict
from normlab.analysis.shared.sequential import looks_text, sequence_difference
from normlab.study import design
from normlab.study.findings import Finding
from normlab.study.key_numbers import NATS_PER_BYTE, KeyNumber, within
from normlab.study.present import significant

A9_KEY = KeyNumber("farthest end of the 95% confidence sequence of final loss, RMSNorm − LayerNorm", NATS_PER_BYTE)

# The pair counts at which the cpu profile's A9 interval was read (git history of quality/profiles.py): 6, then 12
# after an inconclusive interval, then 24 after another. The confidence sequence stays valid under these looks, and
# tests/test_looks_coverage.py simulates exactly them.
A9_LOOKS = design.looks("A9")  # (6, 12, 24), registered in data/design.toml


@dataclass
class LossParity:
    curves: pd.DataFrame  # validation loss: one row per (norm, seed, step)
    final: dict[str, list[float]]  # final validation loss per seed, per norm
    curve: dict[str, list[float]]  # validation loss averaged over every evaluation after the start
    diverged: list[tuple[str, int]]
    final_pair: dict | None  # paired RMSNorm − LayerNorm final loss, confidence sequence; None when a run diverged
    final_fixed_n: dict | None  # the same difference's t-interval: valid only for pairs fixed before any look
    curve_pair: dict | None  # the same confidence sequence for the whole-curve mean (B7)
    last_drop: float  # how much the loss still fell over the last 10% of the steps, mean over runs
    initial_loss: float
    final_loss: float


def loss_parity(runs: dict[tuple[str, int], dict], margin: float) -> LossParity:
    """The paired differences RMSNorm − LayerNorm of the final and the whole-curve validation loss."""
    diverged = [key for key, run in runs.items() if run["diverged"]]
    curves = pd.DataFrame(
        [
            {"norm": norm, "seed": seed, "step": step, "val_loss": loss}
            for (norm, seed), run in runs.items()
            for step, loss in run["val"]
        ]
    )
    seeds = sorted({seed for _, seed in runs})
    final = {norm: [runs[(norm, s)]["final_val_loss"] for s in seeds] for norm in NORMS}
    curve = {norm: [float(np.mean([v for st, v in runs[(norm, s)]["val"] if st > 0])) for s in seeds] for norm in NORMS}
    if diverged:
        final_pair = final_fixed_n = curve_pair = None
    else:
        final_pair = final_loss_pair(final["layer"], final["rms"], margin)
        final_fixed_n = paired_difference(final["layer"], final["rms"], margin)
        curve_pair = sequence_difference(curve["layer"], curve["rms"], margin)  # B7: A9's runs, so A9's looks
    drops = pd.DataFrame([{"norm": n, "seed": s, "drop": r["final_drop"]} for (n, s), r in runs.items()])
    return LossParity(
        curves=curves,
        final=final,
        curve=curve,
        diverged=diverged,
        final_pair=final_pair,
        final_fixed_n=final_fixed_n,
        curve_pair=curve_pair,
        last_drop=float(drops["drop"].mean()),
        initial_loss=float(curves[curves.step == 0].val_loss.mean()),
        final_loss=float(np.mean(final["layer"] + final["rms"])),
    )


def final_loss_pair(layer: list[float], rms: list[float], margin: float) -> dict:
    """A9's paired difference RMSNorm − LayerNorm of final losses, per seed, under its confidence sequence."""
    return sequence_difference(layer, rms, margin)


def farthest_end_key(pair: dict | None) -> dict:
    """An equivalence verdict's key number, the end of `pair`'s band farthest from 0, with the mean's standard error
    as its spread; both None when a run diverged and no number decided."""
    if pair is None:
        return {"key_number": None, "spread": None}
    return {"key_number": max(abs(pair["ci_low"]), abs(pair["ci_high"])), "spread": pair["standard_error"]}


def final_loss_verdict(parity: LossParity) -> tuple[str, str]:
    """A9's verdict from the paired final loss, and the interval in words (a diverged run: does not hold)."""
    if parity.final_pair is None:
        return "does not hold", f"{len(parity.diverged)} run(s) diverged: {parity.diverged}"
    return equivalence_verdict(parity.final_pair), interval_text(parity.final_pair, NATS_PER_BYTE)


def common_evidence(corpus, settings: dict, device: str, margin: float, parity: LossParity) -> dict:
    """The numbers every paired verdict of the chapter carries: the corpus, the sizes (`parameters`: the LayerNorm
    model's, the scale a sentence names), the hardware, and how far training got."""
    return {
        "corpus_sha256": corpus.sha256,
        "python": corpus.python_version,
        "steps": settings["steps"],
        "pairs": len(parity.final["layer"]),  # the complete pairs: fewer than the design's where runs are missing
        "width": settings["width"],
        "depth": settings["depth"],
        "parameters": parameter_count(settings),
        "device": device,
        "hardware": hardware_label(device),
        "margin_nats": margin,
        "initial_val_loss": parity.initial_loss,
        "final_val_loss": parity.final_loss,
        "unigram_entropy_nats": corpus.unigram_entropy_nats,
        "loss_drop_last_10pct_steps": parity.last_drop,
        "diverged_runs": len(parity.diverged),
    }


def parity_paragraph(parity: LossParity) -> str:
    verdict, text = final_loss_verdict(parity)
    return (
        f"Over the last 10% of the steps the validation loss still fell by {parity.last_drop:.4f} {NATS_PER_BYTE} on "
        f"average (from {parity.initial_loss:.2f} at the start to {parity.final_loss:.3f}), so the runs had flattened.\n\n"
        f"**A9 verdict: {verdict}.** Final validation loss, RMSNorm − LayerNorm: {text}."
        + (f"\n\n{looks_paragraph(parity.final_fixed_n)}" if parity.final_fixed_n else "")
    )


def looks_paragraph(fixed_n: dict) -> str:
    """The disclosure of A9's looks, with the t-interval that the looks invalidate, for comparison."""
    return (
        f"*The looks taken.* This verdict's pairs were not fixed in advance: on the cpu profile the interval was read "
        f"at {looks_text(A9_LOOKS)}, and pairs were added each time it came out inconclusive. A 95% t-interval read "
        'that way says "no difference" too often when the true difference lies at the margin, so the verdict is read '
        "off an anytime-valid 95% confidence sequence (Lai 1976), which keeps its coverage however many looks are "
        "taken, at the price of a wider band. The t-interval, valid only had the pairs been fixed before any look, "
        f"would have been {interval_text(fixed_n, NATS_PER_BYTE, margin=False)}."
    )


def a9_finding(parity: LossParity, margin: float, common: dict, resume: dict, ladder: dict | None = None) -> Finding:
    """A9 holds when the whole 95% confidence sequence of the paired final-loss difference lies inside ±margin. The scale
    ladder (`ladder_evidence`), when given, is recorded beside it as evidence; the verdict is this size's."""
    verdict, text = final_loss_verdict(parity)
    pair = parity.final_pair
    return Finding(
        verdict,
        f"Final validation loss RMSNorm − LayerNorm = {text}, after {common['steps']} steps (loss still fell "
        f"{parity.last_drop:.4f} {NATS_PER_BYTE} over the last 10%).",
        {
            **common,
            "paired_final_loss": pair,
            "paired_final_loss_t_interval": parity.final_fixed_n,
            "looks_pairs": list(A9_LOOKS),
            "final_loss_layer": parity.final["layer"],
            "final_loss_rms": parity.final["rms"],
            "resume_max_abs_loss_difference": resume["difference"],
            "resume_matches": resume["matches"],
            **({"scale_ladder": ladder} if ladder is not None else {}),
        },
        **farthest_end_key(pair),
        threshold=margin,
        **A9_KEY.fields(),
        rule=f"Holds when the whole 95% confidence sequence (anytime-valid: the pairs grew after looks) of the paired "
        f"final-loss difference lies inside ±{A9_KEY.limit(margin)}; not testable when it is wider than that; does not "
        "hold when it lies outside.",
    )


def millions(parameters: float) -> str:
    """A model size in millions of parameters, to two significant figures: '0.23'."""
    return significant(parameters / 1e6, 2)


def a9_scale(a9: Finding) -> str:
    """Where A9's number comes from, read off its evidence: ' at 0.23 million parameters on <hardware>'; '' for what a
    record does not carry."""
    e = a9.evidence
    where = f" at {millions(e['parameters'])} million parameters" if e.get("parameters") else ""
    return where + (f" on {e['hardware']}" if e.get("hardware") else "")


def a9_ladder(a9: Finding) -> str:
    """' Across the scale ladder, 0.015–0.67 million parameters, the difference grows.' from the ladder A9 carries as
    evidence; '' without one."""
    ladder = a9.evidence.get("scale_ladder") or {}
    sizes = [rung["parameters"] for rung in ladder.get("rungs", ())]
    if len(sizes) < 2:
        return ""
    trend = ladder.get("trend")
    moves = (
        "this run cannot tell how the difference moves" if trend in (None, "cannot tell") else f"the difference {trend}"
    )
    return f" Across the scale ladder, {millions(min(sizes))}–{millions(max(sizes))} million parameters, {moves}."


def a9_headline(a9: Finding) -> str | None:
    """The opening page's sentence on A9, from the (weighed) finding, in its key number's unit and naming the model
    size and hardware it was measured at (and the scale ladder's span); None without a key number or threshold."""
    k, t = a9.key_number, a9.threshold
    if k is None or t is None:
        return None
    key = KeyNumber.of(a9)
    return (
        f"Trained in pairs, small GPTs with RMSNorm and with LayerNorm reach validation losses that differ by at most "
        f"{key.format(k)} (the paired 95% confidence sequence){a9_scale(a9)}, "
        f"{'inside' if within(k, t) else 'beyond'} the margin of ±{key.limit(t)} for no difference"
        + {
            "holds": ": equal quality at this scale, as article A says.",
            "not testable here": ": too few pairs in this build to call them equal or different.",
            "does not hold": ": their quality differs.",
        }.get(a9.verdict, ".")
        + a9_ladder(a9)
    )
