"""Verdicts, B18 (with post-LN, RMSNorm's deep-signal decay is worse than LayerNorm's): the paired
post-RMSNorm − post-LayerNorm final loss and two measures at initialisation."""

from __future__ import annotations

from pathlib import Path

from normlab.analysis.depth.initialisation import INIT_NAMES, InitStudy
from normlab.analysis.depth.training_at_depth import TrainingStudy, final_losses, pair_spread
from normlab.analysis.shared.paired import interval_text, paired_or_none
from normlab.analysis.shared.parity import equivalence_verdict
from normlab.runtime import elsewhere
from normlab.study import sample_size
from normlab.study.findings import Finding
from normlab.study.key_numbers import NATS_PER_BYTE, KeyNumber

B18_KEY = KeyNumber("paired final loss, post-LN RMSNorm − post-LN LayerNorm", NATS_PER_BYTE)

# B18 has no published measurement to hold ours against.
B18_UNSOURCED = (
    "No published study compares post-RMSNorm with post-LayerNorm at depth: the verdict rests on this book's "
    "measurement alone."
)


def b18_measures(init: InitStudy, training: TrainingStudy, margin: float) -> dict:
    """Post-LN, RMSNorm against LayerNorm: the paired final loss (RMSNorm − LayerNorm) and, at the deepest
    depth under Xiong's initialisation, the first/last-block gradient ratio and the last layer's token cosine."""
    runs, deepest, spreads = training.paired, init.deepest, init.spreads[False]

    def at_deepest(config: str, column: str) -> float:
        return float(spreads[(spreads["config"] == config) & (spreads["depth"] == deepest)][column].mean())

    frame = init.frame
    top = frame[(frame["depth"] == deepest) & (frame["layer"] == deepest) & (frame["init"] == INIT_NAMES[False])]
    return {
        "pair": paired_or_none(
            final_losses(runs, placement="post", norm="layer"), final_losses(runs, placement="post", norm="rms"), margin
        ),
        "ratio_rms": at_deepest("post-rms", "first_over_last"),
        "ratio_ln": at_deepest("post-layer", "first_over_last"),
        "cos_rms": float(top[top["config"] == "post-rms"]["token_cosine"].mean()),
        "cos_ln": float(top[top["config"] == "post-layer"]["token_cosine"].mean()),
    }


def b18_init_worse(measures: dict, *, ratio_drop: float, cosine_rise: float) -> bool:
    """RMSNorm worse at initialisation: its first/last gradient ratio smaller by more than `ratio_drop` (a
    share) or its last-layer token cosine higher by more than `cosine_rise`."""
    m = measures
    return (m["ratio_rms"] < (1 - ratio_drop) * m["ratio_ln"]) or (m["cos_rms"] > m["cos_ln"] + cosine_rise)


def b18_verdict(measures: dict, *, ratio_drop: float, cosine_rise: float) -> str:
    """Holds if RMSNorm is worse beyond the margin in training and on one initialisation measure (training alone:
    with caveats); does not hold if the paired interval lies inside the margin; not testable if it is wider."""
    pair = measures["pair"]
    if pair is None:
        return "not testable here"
    training = equivalence_verdict(pair)  # "holds" here means *no* difference, which refutes B18
    if pair["outcome"] == "different" and pair["mean_difference"] > 0:
        worse = b18_init_worse(measures, ratio_drop=ratio_drop, cosine_rise=cosine_rise)
        return "holds" if worse else "holds with caveats"
    return "does not hold" if training in ("holds", "does not hold") else "not testable here"


def b18_paragraph(b18: Finding, measures: dict, *, deep: int, deepest: int) -> str:
    """B18's verdict paragraph: the measured numbers, and the verdict as `b18` records it."""
    m = measures
    return (
        f"Paired final loss, post-RMSNorm − post-LayerNorm at depth {deep}: {interval_text(m['pair'], NATS_PER_BYTE)}. At initialisation "
        f"(depth {deepest}): first/last-block gradient ratio {m['ratio_rms']:.3f} (RMSNorm) vs {m['ratio_ln']:.3f} "
        f"(LayerNorm); last-layer token cosine {m['cos_rms']:.3f} vs {m['cos_ln']:.3f}. {B18_UNSOURCED}\n\n"
        f"**B18 verdict: {b18.verdict}.**"
    )


# What was seen before B18's decision was registered (data/design.toml's change log), for its caveats; the page says
# the same in its own words.
B18_LOOKED = (
    "the cpu profile's pairs (seeds 0-4) are the pilot whose spread sized the registered decision (2026-12-03), and "
    "their outcome (not testable here at fbce4a0) was seen before it; the decision itself has not run"
)


def b18_finding(
    measures: dict,
    *,
    deep: int,
    deepest: int,
    margin: float,
    ratio_drop: float,
    cosine_rise: float,
    scale: str | None = None,
    decision: str | None = None,
) -> Finding:
    m, pair = measures, measures["pair"]
    return Finding(
        b18_verdict(m, ratio_drop=ratio_drop, cosine_rise=cosine_rise),
        f"Post-LN at depth {deep}: paired final loss RMSNorm − LayerNorm {interval_text(pair, NATS_PER_BYTE)}. At init (depth {deepest}) "
        f"first/last gradient ratio {m['ratio_rms']:.3f} vs {m['ratio_ln']:.3f}, last-layer token cosine "
        f"{m['cos_rms']:.3f} vs {m['cos_ln']:.3f}. " + B18_UNSOURCED,
        {
            "train_depth": deep,
            "paired_post_rms_minus_layer": pair,
            "deepest_init_depth": deepest,
            "post_rms_first_over_last": m["ratio_rms"],
            "post_layer_first_over_last": m["ratio_ln"],
            "post_rms_token_cosine": m["cos_rms"],
            "post_layer_token_cosine": m["cos_ln"],
            "init_worse": b18_init_worse(m, ratio_drop=ratio_drop, cosine_rise=cosine_rise),
            "margin_nats": margin,
            "scale": scale,
            "decision": decision,
        },
        key_number=pair["mean_difference"] if pair else None,
        threshold=margin,
        spread=pair_spread(pair),
        **B18_KEY.fields(),
        caveats=(B18_LOOKED,),
        reads=("margin", "ratio_drop", "cosine_rise"),
        scale=scale,
    )


def b18_headline(b18: Finding) -> str | None:
    """The opening page's sentence on B18 (at most 35 words), from the (weighed) finding; None without a key number or
    threshold. What would decide it and that no published study compares the two stay on the chapter."""
    k, t = b18.key_number, b18.threshold
    if k is None or t is None:
        return None
    key = KeyNumber.of(b18)
    margin = key.limit(t)
    # the verdict reads the paired interval, so the sentence names it where the finding carries it
    pair = b18.evidence.get("paired_post_rms_minus_layer") or {}
    interval = f" (95% CI {pair['ci_low']:+.4f}..{pair['ci_high']:+.4f})" if "ci_low" in pair else ""
    scale = f"; {b18.evidence['scale']}" if b18.evidence.get("scale") else ""
    return (
        f"In post-LN{scale and f' ({scale[2:]})'}, RMSNorm's final loss minus LayerNorm's is {key.signed(k)}{interval}"
        + {
            "not testable here": f", too uncertain to judge against ±{margin}.",
            "does not hold": f", not beyond +{margin}: RMSNorm's deep-signal decay is no worse.",
            "holds": f", beyond +{margin}: RMSNorm fares worse, as the essay says.",
            "holds with caveats": f", beyond +{margin} in training, but not at initialisation.",
        }.get(b18.verdict, ".")
    )


# ---- what would decide B18: the registered design ([claims.B18.decision]) --------------------------------------


class DecisionError(ValueError):
    """A registered decision whose numbers do not follow from its inputs; the message names both."""


def pilot_spread(decision: dict, root: Path) -> float:
    """The sd of the paired differences in the pilot build the decision names (its record and evidence key), read by
    the one reader of results made elsewhere (`normlab.runtime.elsewhere`: its provenance checked)."""
    pilot = decision["pilot"]
    record = elsewhere.claim_record(root / pilot["build"] / pilot["record"], "B18") or {}
    return float(record["evidence"][pilot["evidence"]]["sd_of_differences"])


def b18_decision(decision: dict, margin: float, root: Path) -> dict:
    """The registered decision checked against its inputs: the pilot's spread as its build recorded it and the pairs
    as `sample_size.confirmation_pairs` gives them from that spread alone; any other number is refused, naming both.
    Also the pairs at a true difference of half the margin and the margin the registered pairs resolve at the
    registered power. Its GPU estimate (`gpu_seconds`) is the registered number: the GPU study's sizing that made it
    was removed, unused, on 2026-12-05."""
    d = decision
    recorded = pilot_spread(d, root)
    if round(recorded, 6) != round(float(d["pilot_sd"]), 6):
        raise DecisionError(
            f"B18's decision registers pilot_sd {d['pilot_sd']}, but {d['pilot']['build']}/{d['pilot']['record']} "
            f"records {recorded:.6f}; register the recorded spread"
        )
    sd, power = float(d["pilot_sd"]), float(d["power"])
    pairs = sample_size.confirmation_pairs(sd, margin, power, float(d["true_difference"]))
    if pairs != d["pairs"]:
        raise DecisionError(
            f"B18's decision registers {d['pairs']} pairs, but its inputs (sd {sd}, margin ±{margin:g}, power {power}, "
            f"true difference {d['true_difference']}) give {pairs}; register {pairs}"
        )
    return {
        **d,
        "pilot_sd": sd,
        "pairs": pairs,
        "pairs_at_half_margin": sample_size.confirmation_pairs(sd, margin, power, margin / 2),
        "resolved_margin_at_pilot": sample_size.smallest_margin(d["pilot"]["pairs"], sd, power),
        "gpu_seconds": float(d["gpu_seconds"]),
        "cpu_hours": pairs * float(d["cpu_seconds_per_pair"]) / 2 / 3600,
        "margin": margin,
    }


def decision_scale(decision: dict) -> str:
    """'580 pairs at depth 12, width 32, 300 steps': the registered decision in a phrase."""
    m, t = decision["model"], decision["train"]
    return f"{decision['pairs']} pairs at depth {m['depth']}, width {m['width']}, {t['steps']} steps"


def run_scale(settings: dict, measures: dict) -> str:
    """The scale this run measured B18 at: 'depth 12, width 32, 300 steps, 5 pairs'."""
    pairs = measures["pair"]["pairs"] if measures["pair"] else 0
    return f"depth {settings['deep']}, width {settings['width']}, {settings['steps']} steps, {pairs} pairs"


def decision_paragraph(decision: dict) -> str:
    """What would decide B18, from the checked decision (`b18_decision`), as the page states it."""
    d, m, t = decision, decision["model"], decision["train"]
    last = d["first_seed"] + d["pairs"] - 1
    return (
        f"**What would decide B18.** At this chapter's scale (post-LN at depth {m['depth']}, width {m['width']}, "
        f"{t['steps']} steps) the pilot's {d['pilot']['pairs']} pairs have a spread of {d['pilot_sd']:.4f} nats per "
        f"byte (sd of the paired differences; its mean is no input). The fewest pairs whose 95% t-interval lies inside "
        f"±{d['margin']:g} with power {d['power']:g} at a true difference of 0 (two one-sided tests at 2.5% a side, "
        f"α {d['alpha']:g}) are **{d['pairs']}**; at a true difference of half the margin, {d['pairs_at_half_margin']}. "
        f"The pilot's {d['pilot']['pairs']} pairs resolve only a margin of ±{d['resolved_margin_at_pilot']:.2f} at that "
        f"power. On this 2-core CPU a pair costs about {d['cpu_seconds_per_pair']} core-seconds, so {d['pairs']} pairs "
        f"are about {d['cpu_hours']:.1f} hours, far beyond this chapter's share of the cpu book; they are registered as "
        f"a GPU run's design instead (`data/design.toml`, `[claims.B18.decision]`, registered {d['registered']}: "
        f"seeds {d['first_seed']}–{last}, fresh; about {d['gpu_seconds']:.0f} s on one H200 by the estimate registered "
        "with it). "
        f"No such run exists yet, so B18 stays undecided here."
    )
