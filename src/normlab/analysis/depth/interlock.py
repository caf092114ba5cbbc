"""Verdicts, B19 (the parts interlock; replacing one means re-validating the rest): the LLaMA style against one
swap at a time and one double swap, and the interaction of norm and placement.

The seeds trained here are B19's registered confirmation (`normlab.analysis.shared.confirmation`): fresh seeds in a
number fixed before they ran, whose 95% t-interval of the interaction alone decides. The pilot (seeds 0-13, which
grew after a look, `design.looks("B19")`) is shown beside it from its committed build, under the confidence sequence
its looks require."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from normlab.analysis.depth.training_at_depth import TrainingStudy, final_losses, pair_spread
from normlab.analysis.shared import confirmation, missing_runs
from normlab.analysis.shared.paired import interval_text, paired_or_none
from normlab.analysis.shared.sequential import looks_text
from normlab.study import design
from normlab.study.findings import Finding
from normlab.study.key_numbers import NATS_PER_BYTE, KeyNumber

B19_KEY = KeyNumber("norm × placement interaction in paired final loss", NATS_PER_BYTE)

SINGLE_SWAPS = ["rms→layer", "swiglu→gelu", "rope→learned", "pre→post"]


DOUBLE_SWAP = "rms→layer + pre→post"


INTERACTION_SWAPS = ("rms→layer", "pre→post", DOUBLE_SWAP)  # with the LLaMA style: the 2x2 the interaction reads


@dataclass
class Ablation:
    swaps: dict[
        str, dict | None
    ]  # per swap run: the paired final-loss change against the LLaMA style, None if diverged
    interaction: dict | None  # paired Δ(double) − Δ(norm) − Δ(placement), None if a run diverged or was not run
    stress_diverged: pd.Series  # per swap label: diverged at the stress learning rate (empty without stress runs)
    base: pd.DataFrame  # the ablation runs at the base learning rate
    absent: tuple[str, ...] = ()  # swaps of the design this run did not train

    @property
    def interaction_absent(self) -> list[str]:
        """The swaps the interaction needs that this run did not train."""
        return [s for s in INTERACTION_SWAPS if s in self.absent]


def ablation_study(training: TrainingStudy, margin: float) -> Ablation:
    """Each swap's paired change against the LLaMA style of the same seed, and the norm × placement interaction.
    A swap absent from the runs is skipped and listed in `absent`; without one of INTERACTION_SWAPS there is no
    interaction."""
    runs = training.ablation
    base = runs[runs["setting"] == "base lr"]
    labels = set(base["label"])
    if "llama" not in labels:
        raise ValueError(
            "the ablation has no 'llama' runs at the base learning rate, so no swap can be paired against the LLaMA "
            f"style; the runs' labels are {sorted(labels)}: train the LLaMA-style model with the same seeds"
        )
    stress = runs[runs["setting"] == "stress lr"].set_index("label")
    llama = final_losses(base, label="llama")
    design = SINGLE_SWAPS + [DOUBLE_SWAP]
    absent = tuple(s for s in design if s not in labels)
    swaps = {s: paired_or_none(llama, final_losses(base, label=s), margin) for s in design if s not in absent}
    interaction = None
    if not any(s in absent for s in INTERACTION_SWAPS):
        norm_l, place_l, double_l = (final_losses(base, label=s) for s in INTERACTION_SWAPS)
        interaction = interaction_pair(llama, norm_l, place_l, double_l, margin)
    stress_diverged = stress["diverged"] if len(stress) else pd.Series(dtype=bool)
    return Ablation(swaps=swaps, interaction=interaction, stress_diverged=stress_diverged, base=base, absent=absent)


def interaction_pair(llama, norm_swap, placement_swap, double_swap, margin: float) -> dict | None:
    """Per seed, Δ(double) − Δ(norm) − Δ(placement) = (double + llama) − (norm + placement), with its 95%
    t-interval (the confirmation's seeds were fixed before they ran); None when a run diverged."""
    return paired_or_none(
        [a + b for a, b in zip(norm_swap, placement_swap)], [d + l for d, l in zip(double_swap, llama)], margin
    )


def swap_table(ablation: Ablation) -> pd.DataFrame:
    stressed = ablation.stress_diverged
    return pd.DataFrame(
        [
            {
                "swap": s,
                f"Δ vs LLaMA ({NATS_PER_BYTE})": p["mean_difference"] if p else math.nan,
                "95% CI low": p["ci_low"] if p else math.nan,
                "95% CI high": p["ci_high"] if p else math.nan,
                "outcome": p["outcome"] if p else "diverged",
                "diverges at stress lr": bool(stressed.loc[s]) if s in stressed.index else None,
            }
            for s, p in ablation.swaps.items()
        ]
    )


def interaction_text(ablation: Ablation) -> str:
    if ablation.interaction is not None:
        return interval_text(ablation.interaction, NATS_PER_BYTE)
    missing = ablation.interaction_absent
    return f"not computable ({', '.join(missing)} not run)" if missing else "not computable (a run diverged)"


def absent_text(ablation: Ablation) -> str:
    """'' when every swap was run; else the sentence naming the ones that were not."""
    return f" Not run here: {', '.join(ablation.absent)}." if ablation.absent else ""


def diverged_names(ablation: Ablation) -> list[str]:
    """'swiglu→gelu seed 1004' for each diverged run of the ablation at the base learning rate."""
    return missing_runs.diverged_names(ablation.base, "label")


def b19_paragraph(b19: Finding, ablation: Ablation, registered: confirmation.RegisteredConfirmation | None) -> str:
    """B19's verdict paragraph: the interaction, the swaps not run, and the verdict as `b19` records it; with the
    confirmation, the pilot's looks and how the confirmation was sized."""
    text = (
        f"Interaction of the norm and placement swaps: {interaction_text(ablation)}.{absent_text(ablation)}"
        f"{confirmation.resolution_sentence(b19, NATS_PER_BYTE)}\n\n**B19 verdict: {b19.verdict}.**"
    )
    if registered is None:
        return text
    # The seed counts at which the pilot's interaction was read (git history of depth/profiles.py): 5, then 14 after
    # an inconclusive interval; tests/test_looks_coverage.py simulates these looks and the two-stage procedure.
    looks = design.looks("B19")  # (5, 14), registered in data/design.toml
    return (
        f"{text}\n\n*The pilot's looks.* The pilot's seeds were not fixed in advance: its interaction was read at "
        f"{looks_text(looks, 'seeds')}, and seeds were added after the first came out inconclusive, so it is read "
        "off an anytime-valid 95% confidence sequence (Lai 1976), valid under its looks but wide. "
        f"{confirmation.design_paragraph(registered)}"
    )


# What was seen before B19's confirmation was registered (data/design.toml's change log), for its caveats.
B19_LOOKED = (
    "the pilot's outcome (seeds 0-13, read at 5 and 14 seeds; does not hold at fbce4a0) was seen before the "
    "confirmation was registered (2026-12-03); no confirmation run was seen"
)


def b19_finding(
    ablation: Ablation,
    *,
    depth: int,
    steps: int,
    seeds: int,
    margin: float,
    registered: confirmation.RegisteredConfirmation | None = None,
) -> Finding:
    """B19 from the interaction's interval; with the `registered` confirmation (this build's seeds), the pilot's
    sequence is recorded beside it (the chapter judges its completeness: `PairsLeft.judge`)."""
    interaction = ablation.interaction
    singles = ", ".join(
        f"{s} {p['mean_difference']:+.3f}" if p else f"{s} diverged"
        for s, p in ablation.swaps.items()
        if s in SINGLE_SWAPS
    )
    return Finding(
        design.registered_verdict("B19", {"interaction": interaction}),
        f"Interaction of the norm and placement swaps at depth {depth}: {interaction_text(ablation)}. Single swaps "
        f"vs LLaMA style: {singles} {NATS_PER_BYTE}.{absent_text(ablation)}",
        {
            "depth": depth,
            "steps": steps,
            "seeds": seeds,
            "interaction": interaction,
            **(confirmation.evidence(registered, "B19", registered.pilot_pair("B19")) if registered else {}),
            "swaps": dict(ablation.swaps),
            "stress_diverged": {s: bool(d) for s, d in ablation.stress_diverged.items()},
            "absent_swaps": list(ablation.absent),
            "margin_nats": margin,
            "loss_drop_last_10pct": float(ablation.base["final_drop"].mean()),
        },
        key_number=interaction["mean_difference"] if interaction else None,
        threshold=margin,
        spread=pair_spread(interaction),
        **B19_KEY.fields(),
        caveats=(B19_LOOKED,) if registered else (),
        reads=("margin",),
    )
