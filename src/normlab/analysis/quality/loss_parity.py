"""Section "Loss parity (A9) and coinciding curves (B7, first half)": the paired RMSNorm − LayerNorm
differences of the final and the whole-curve validation loss, and A9's verdict.

The runs trained here are A9's registered confirmation (`normlab.analysis.shared.confirmation`): fresh seeds in a
number fixed before they ran, so their 95% t-interval is valid and alone decides. The pilot (seeds 0-23, whose pairs
grew after looks, `design.looks("A9")`) is shown beside it from its committed build, under the confidence sequence its
looks require, and decides nothing. B7's whole-curve difference comes from the same runs."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from normlab.analysis.quality.profiles import NORMS
from normlab.analysis.quality.training import hardware_label, parameter_count
from normlab.analysis.shared import confirmation
from normlab.analysis.shared.paired import interval_text, paired_difference
from normlab.analysis.shared.sequential import looks_text
from normlab.runtime.environment import this_build
from normlab.study import design, sample_size
from normlab.study.findings import Finding
from normlab.study.key_numbers import NATS_PER_BYTE, KeyNumber, within
from normlab.study.present import significant
from normlab.study.trained import ArmLosses

A9_KEY = KeyNumber(
    "farthest end of the confirmation's 95% t-interval of final loss, RMSNorm − LayerNorm", NATS_PER_BYTE
)


# What was seen before each registration (data/design.toml's change log), for the verdict's caveats; the page says
# the same in its own words.
A9_LOOKED = (
    "the pilot's outcome (seeds 0-23, read at 6, 12 and 24 pairs) was seen before the confirmation was registered "
    "(2026-12-03); no confirmation run was seen"
)
B7_LOOKED = (
    "its loss half was decided on A9's pilot (holds with caveats at fbce4a0) before the confirmation was registered "
    "(2026-12-03); no confirmation run was seen"
)
NORM_NAMES = {"rms": "RMSNorm", "layer": "LayerNorm"}


@dataclass
class LossParity:
    curves: pd.DataFrame  # validation loss: one row per (norm, seed, step)
    final: dict[str, list[float]]  # final validation loss per seed, per norm
    curve: dict[str, list[float]]  # validation loss averaged over every evaluation after the start
    diverged: list[tuple[str, int]]
    final_pair: dict | None  # paired RMSNorm − LayerNorm final loss, 95% t-interval; None when a run diverged
    curve_pair: dict | None  # the same for the whole-curve mean (B7)
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
        final_pair = curve_pair = None
    else:
        final_pair = final_loss_pair(final["layer"], final["rms"], margin)
        curve_pair = paired_difference(curve["layer"], curve["rms"], margin)  # B7: A9's runs
    drops = pd.DataFrame([{"norm": n, "seed": s, "drop": r["final_drop"]} for (n, s), r in runs.items()])
    return LossParity(
        curves=curves,
        final=final,
        curve=curve,
        diverged=diverged,
        final_pair=final_pair,
        curve_pair=curve_pair,
        last_drop=float(drops["drop"].mean()),
        initial_loss=float(curves[curves.step == 0].val_loss.mean()),
        final_loss=float(np.mean(final["layer"] + final["rms"])),
    )


def arm_losses(parity: LossParity, entropy: float, scale: str) -> ArmLosses:
    """Each norm's mean final and step-0 validation loss over its seeds beside the corpus's unigram `entropy`: the
    arms A9, B7, B5 and B16 read (`normlab.study.trained`)."""
    start = parity.curves[parity.curves.step == 0].groupby("norm").val_loss.mean() if len(parity.curves) else {}
    return ArmLosses(
        final={norm: float(np.mean(parity.final[norm])) if parity.final[norm] else float("nan") for norm in NORMS},
        initial={norm: float(start[norm]) for norm in NORMS if norm in start},
        entropy=entropy,
        scale=scale,
        names=NORM_NAMES,
    )


def final_loss_pair(layer: list[float], rms: list[float], margin: float) -> dict:
    """A9's paired difference RMSNorm − LayerNorm of final losses, per seed, with its 95% t-interval: the pairs are
    the confirmation's, fixed before they ran."""
    return paired_difference(layer, rms, margin)


def farthest_end_key(pair: dict | None) -> dict:
    """An equivalence verdict's key number, the end of `pair`'s band farthest from 0, with the mean's standard error
    as its spread; both None when a run diverged and no number decided."""
    if pair is None:
        return {"key_number": None, "spread": None}
    return {"key_number": max(abs(pair["ci_low"]), abs(pair["ci_high"])), "spread": pair["standard_error"]}


def diverged_names(parity: LossParity) -> list[str]:
    """'rms seed 1003' for each diverged run."""
    return [f"{norm} seed {seed}" for norm, seed in parity.diverged]


def a9_reading(parity: LossParity) -> tuple[str, str]:
    """A9's verdict by its registered rules (a diverged run: does not hold; under a confirmation a diverged run leaves
    it incomplete instead, and `PairsLeft.judge` makes that not testable), and the interval in words."""
    verdict = design.registered_verdict("A9", {"paired_final_loss": parity.final_pair})
    if parity.final_pair is None:
        return verdict, f"{len(parity.diverged)} run(s) diverged: {', '.join(diverged_names(parity))}"
    return verdict, interval_text(parity.final_pair, NATS_PER_BYTE)


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


def parity_paragraph(parity: LossParity, registered: confirmation.RegisteredConfirmation | None) -> str:
    """The section's verdict paragraph. With the `registered` confirmation, the verdict as it decides (incomplete:
    not testable), and the account of the pilot's looks and of the confirmation that replaced them."""
    verdict, text = a9_reading(parity)
    flattened = (
        f"Over the last 10% of the steps the validation loss still fell by {parity.last_drop:.4f} {NATS_PER_BYTE} on "
        f"average (from {parity.initial_loss:.2f} at the start to {parity.final_loss:.3f}), so the runs had flattened."
    )
    if registered is None:
        return f"{flattened}\n\n**A9 verdict: {verdict}.** Final validation loss, RMSNorm − LayerNorm: {text}."
    reason = confirmation.incomplete(len(parity.final["rms"]), registered.pairs, diverged_names(parity))
    incomplete = f"; the confirmation is incomplete ({reason}) and does not decide on fewer pairs than registered"
    return (
        f"{flattened}\n\n**A9 verdict: {confirmation.NOT_TESTABLE if reason else verdict}.** Final validation loss, "
        f"RMSNorm − LayerNorm, on the confirmation: {text}{incomplete if reason else ''}. At {registered.pairs} pairs "
        f"and the pilot's spread this design resolves a margin of ±{registered.resolvable_margin('A9'):.4f} "
        f"{NATS_PER_BYTE} at 90% power.\n\n{looks_paragraph()} {confirmation.design_paragraph(registered)}"
    )


def figure_rows(parity: LossParity, registered: confirmation.RegisteredConfirmation | None) -> list:
    """The paired-differences figure's rows: with a confirmation, each claim's pilot above its confirmation."""
    if registered is None:
        return [("final loss (A9)", parity.final_pair), ("whole curve (B7)", parity.curve_pair)]
    return [
        ("pilot: final loss (A9)", registered.pilot_pair("A9")),
        ("confirmation: final loss (A9)", parity.final_pair),
        ("pilot: whole curve (B7)", registered.pilot_pair("B7")),
        ("confirmation: whole curve (B7)", parity.curve_pair),
    ]


CLUSTER_WORKERS = 32  # a cluster size to price, the README's example: one single-threaded Dask worker per core


def literature_paragraph(
    registered: confirmation.RegisteredConfirmation, literature: float, wall_seconds: float, workers: int
) -> str:
    """How many pairs a margin as fine as the literature's difference would need at the pilot's spread, and what
    they would cost, from this build's measured wall time for the confirmation on `workers` workers."""
    pairs = sample_size.confirmation_pairs(registered.design.pilot_sd["A9"], literature, registered.design.power)
    per_pair = wall_seconds * workers / registered.pairs  # CPU-seconds a pair cost here, both of its trainings
    here = confirmation.cost_hours(pairs, per_pair, workers)
    cluster = confirmation.cost_hours(pairs, per_pair, CLUSTER_WORKERS)
    return (
        f"*How fine could it go?* A margin of ±{literature:g} {NATS_PER_BYTE}, the literature's own difference, would "
        f"need {pairs} pairs at the pilot's spread for the same power. The confirmation's {registered.pairs} pairs "
        f"took {wall_seconds / 60:.1f} minutes on {workers} workers here ({per_pair:.0f} CPU-seconds a pair), so "
        f"{pairs} pairs would take about {here:.1f} hours on this machine, or {cluster:.1f} hours on a Dask cluster of "
        f"{CLUSTER_WORKERS} such single-threaded workers."
    )


def looks_paragraph() -> str:
    """The disclosure of the pilot's looks, which is why the pilot cannot decide."""
    # The pair counts at which the pilot's A9 interval was read (git history of quality/profiles.py): 6, then 12 after
    # an inconclusive interval, then 24 after another. Those runs are now the pilot; tests/test_looks_coverage.py
    # simulates both the looks and the two-stage procedure that replaced them.
    looks = design.looks("A9")  # (6, 12, 24), registered in data/design.toml
    return (
        f"*The pilot's looks.* The pilot's pairs were not fixed in advance: on the cpu profile its interval was read "
        f"at {looks_text(looks)}, and pairs were added each time it came out inconclusive. Read that way a 95% "
        't-interval says "no difference" too often, so the pilot is read off an anytime-valid 95% confidence sequence '
        "(Lai 1976), valid under its looks but wide; it stayed undecided."
    )


def a9_finding(
    parity: LossParity,
    margin: float,
    common: dict,
    resume: dict,
    ladder: dict | None = None,
    registered: confirmation.RegisteredConfirmation | None = None,
) -> Finding:
    """A9 holds when the whole 95% t-interval of the paired final-loss difference lies inside ±margin. With the
    `registered` confirmation (this build's runs) the pilot's sequence is recorded beside it, and the chapter judges
    the finding by the confirmation's completeness (`PairsLeft.judge`); without (a GPU study's pairs, fixed in
    advance) the interval alone decides. The scale ladder (`ladder_evidence`), when given, is evidence."""
    verdict, text = a9_reading(parity)
    pair = parity.final_pair
    return Finding(
        verdict,
        f"Final validation loss RMSNorm − LayerNorm after {common['steps']} steps = {text}. The loss still fell "
        f"{parity.last_drop:.4f} {NATS_PER_BYTE} over the last 10% of training.",
        {
            **common,
            "paired_final_loss": pair,
            **(confirmation.evidence(registered, "A9", registered.pilot_pair("A9")) if registered else {}),
            "final_loss_layer": parity.final["layer"],
            "final_loss_rms": parity.final["rms"],
            "resume_max_abs_loss_difference": resume["difference"],
            "resume_matches": resume["matches"],
            **({"scale_ladder": ladder} if ladder is not None else {}),
        },
        **farthest_end_key(pair),
        threshold=margin,
        **A9_KEY.fields(),
        caveats=(A9_LOOKED,) if registered else (),
        reads=("margin",),
    )


def millions(parameters: float) -> str:
    """A model size in millions of parameters, to two significant figures: '0.23'."""
    return significant(parameters / 1e6, 2)


def a9_scale(a9: Finding) -> str:
    """Where A9's number comes from, read off its evidence: " at 0.23 million parameters on this build's CPU"; '' for
    what a record does not carry. The machine's model is the chapter's (`hardware`), not the sentence's."""
    e = a9.evidence
    where = f" at {millions(e['parameters'])} million parameters" if e.get("parameters") else ""
    return where + (f" on {this_build(e['device'])}" if e.get("device") else "")


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
    """The opening page's sentence on A9 (at most 35 words), from the (weighed) finding, in its key number's unit and
    naming the model size and hardware it was measured at; None without a key number or threshold. Which interval it
    is, the scale ladder and the caveats stay on the chapter (`a9_ladder`, the summary)."""
    k, t = a9.key_number, a9.threshold
    if k is None or t is None:
        return None
    key, scale = KeyNumber.of(a9), a9_scale(a9).strip()
    return (
        f"{scale[:1].upper() + scale[1:] + ', ' if scale else ''}{'RMSNorm' if scale else 'Small RMSNorm'} and LayerNorm GPTs reach validation losses at most "
        f"{key.format(k)} apart, {'inside' if within(k, t) else 'beyond'} the ±{key.limit(t)} margin"
        + {
            "holds": ": equal quality at this scale.",
            "not testable here": ": too few pairs to tell.",
            "does not hold": ": their quality differs.",
        }.get(a9.verdict, ".")
    )
