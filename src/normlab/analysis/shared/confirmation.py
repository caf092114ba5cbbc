"""A registered confirmation: the pilot's looks are spent, fresh seeds in a number fixed in advance decide.

A claim whose pairs grew after inconclusive looks (A9's 6, 12 and 24) can only be read off an interval that stays
valid under those looks, a confidence sequence, which is wide. The standard remedy is to call the runs so far a
pilot, register a confirmation before running it, with its number of pairs computed from the pilot's spread alone
(`normlab.study.sample_size.confirmation_pairs`, at a registered power and true difference), on seeds no earlier run
used, and let only the confirmation's fixed-N 95% t-interval decide. The pilot is shown beside it, never pooled.

`registered(claim)` reads the design's [claims.ID.confirmation] table and refuses, naming both numbers, a registered
N that differs from what its registered inputs give, and a pilot spread that differs from the one its committed
build recorded (seeds shared with the pilot are already refused by `normlab.study.design`). `decided` judges a
finding by the confirmation's completeness: a run missing or diverged leaves fewer pairs than registered, and the
verdict is then "not testable here", saying why, never decided on fewer pairs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import pandas as pd

from normlab.analysis.shared.paired import RESOLVING_POWER, interval_text
from normlab.analysis.shared.sequential import sequence_difference
from normlab.runtime import elsewhere
from normlab.study import design, paths
from normlab.study.design import Confirmation, DesignError
from normlab.study.findings import Finding
from normlab.study.sample_size import ALPHA, confirmation_pairs, pass_probability, smallest_margin

NOT_TESTABLE = "not testable here"
SD_TOLERANCE = 1e-4  # relative: the registered pilot spread is the recorded one, rounded to a few digits


@dataclass(frozen=True)
class RegisteredConfirmation:
    design: Confirmation
    margin: float  # the decided claims' shared margin, in their unit
    unit: str  # the margin's
    required: dict[str, int]  # per claim decided, the pairs its registered inputs give (the cpu profile's design)
    pairs: int  # registered for the profile: at cpu the largest of `required`; at smoke the pipeline check's few

    @property
    def seeds(self) -> tuple[int, ...]:
        """This profile's fresh seeds: the registered first seed and the profile's pairs."""
        return tuple(range(self.design.seeds[0], self.design.seeds[0] + self.pairs))

    @property
    def seeds_label(self) -> str:
        """'1000–1018': this profile's fresh seeds, as the page names them."""
        return f"{self.seeds[0]}–{self.seeds[-1]}"

    @property
    def first_seed(self) -> int:
        return self.design.seeds[0]

    @property
    def one_sided(self) -> bool:
        return self.design.one_sided

    def power(self, claim_id: str, true_difference: float | None = None) -> float:
        """The chance that the confirmation's interval says "no difference" (inside ±margin, or wholly below
        +margin) for `claim_id` at the spread it was sized on, when the true difference is `true_difference` (the
        registered one by default)."""
        delta = self.design.true_difference if true_difference is None else true_difference
        return pass_probability(self.pairs, self.design.sizing(claim_id), self.margin, delta, self.one_sided)

    def resolvable_margin(self, claim_id: str, sd: float | None = None) -> float:
        """The narrowest margin the confirmation's pairs resolve at 90% power, at the sizing spread (or `sd`)."""
        spread = sd if sd is not None else self.design.sizing(claim_id)
        return smallest_margin(self.pairs, spread, RESOLVING_POWER, one_sided=self.one_sided)

    def pilot_pair(self, claim_id: str) -> dict:
        """The pilot's paired result for `claim_id` as its committed build recorded it: read off the confidence
        sequence its looks require where its pairs grew after looks (the build itself may have recorded a
        t-interval, which those looks invalidate), else its recorded t-interval."""
        recorded = pilot_evidence(self.design, claim_id)
        differences = recorded["differences"]
        if not design.looks(claim_id):
            return {**recorded, "seeds": self.design.pilot_seeds}
        return {
            **sequence_difference([0.0] * len(differences), differences, self.margin),
            "seeds": self.design.pilot_seeds,
        }


def pilot_evidence(confirmation: Confirmation, claim_id: str) -> dict:
    """The pilot's recorded paired result (with its per-seed differences) for `claim_id`, from the committed build,
    read by the one reader of results made elsewhere (`normlab.runtime.elsewhere`: its provenance checked)."""
    path = paths.ROOT / confirmation.pilot_build / confirmation.pilot_record
    if not path.exists():
        raise DesignError(f"claim {claim_id}: the pilot's build {path} is missing; restore it from git")
    key = confirmation.pilot_evidence[claim_id]
    found = (elsewhere.claim_record(path, claim_id) or {}).get("evidence", {}).get(key)
    if not found or "differences" not in found:
        raise DesignError(f"claim {claim_id}: {path} records no paired result {key!r} with its differences")
    if len(found["differences"]) != len(confirmation.pilot_seeds):
        raise DesignError(
            f"claim {claim_id}: the pilot registers {len(confirmation.pilot_seeds)} seeds but {path} records "
            f"{len(found['differences'])} pairs"
        )
    return found


# how the pilot's band is read, by whether its pairs grew after looks
PILOT_BAND = {
    True: "95% confidence sequence (valid under its looks)",
    False: "95% t-interval, as its build recorded it",
}
CONFIRMED_PROFILES = ("smoke", "cpu")  # the gpu profile trains the GPU design, fixed before any run: no pilot


def registered(claim_id: str, profile: str = "cpu", loaded: design.Design | None = None) -> RegisteredConfirmation:
    """The confirmation deciding `claim_id` on `profile` ("cpu", or "smoke", which runs the same procedure at a few
    pairs), checked against its registered inputs; a DesignError naming both numbers where they disagree."""
    if profile not in CONFIRMED_PROFILES:
        raise ValueError(f"profile {profile!r} has no confirmation; the confirmed profiles are {CONFIRMED_PROFILES}")
    loaded = loaded or design.load()
    confirmation = loaded.confirmation_of(claim_id)
    if confirmation is None:
        raise DesignError(f"claim {claim_id} has no registered confirmation in {loaded.path}")
    owner = loaded.claim(confirmation.owner)
    if confirmation.alpha != ALPHA:
        raise DesignError(
            f"claim {owner.id}'s confirmation registers alpha = {confirmation.alpha:g}; the chapters' 95% interval "
            f"serves alpha = {ALPHA:g} only"
        )
    margins = {loaded.value(c, confirmation.margin) for c in confirmation.decides}
    if len(margins) != 1:
        raise DesignError(f"claim {owner.id}'s confirmation decides claims with different margins: {sorted(margins)}")
    margin = margins.pop()
    for claim in confirmation.decides:
        recorded = pilot_evidence(confirmation, claim)["sd_of_differences"]
        if not math.isclose(recorded, confirmation.pilot_sd[claim], rel_tol=SD_TOLERANCE):
            raise DesignError(
                f"claim {claim}: the confirmation registers the pilot's spread as {confirmation.pilot_sd[claim]:g}, "
                f"but the pilot's build recorded {recorded:g}; register the recorded spread"
            )
    one_sided = confirmation.one_sided
    required = {
        claim: confirmation_pairs(
            confirmation.sizing(claim), margin, confirmation.power, confirmation.true_difference, one_sided
        )
        for claim in confirmation.pilot_sd
    }
    pairs = owner.pairs["cpu"]
    if pairs != max(required.values()):
        computed = ", ".join(f"{claim} {n}" for claim, n in required.items())
        raise DesignError(
            f"claim {owner.id}'s confirmation registers {pairs} pairs, but its registered inputs (spread, margin "
            f"{'+' if one_sided else '±'}{margin:g}, alpha {ALPHA:g}, power {confirmation.power:g} at a true difference of "
            f"{confirmation.true_difference:g}) give {max(required.values())} ({computed}); register that number"
        )
    # the unit of the margin the interval is read against (V8's claim has two units, its loss and its ratio)
    unit = owner.thresholds[confirmation.margin].unit
    return RegisteredConfirmation(confirmation, margin, unit, required, owner.pairs[profile])


def at_profile(claim_id: str, profile: str, settings: dict) -> RegisteredConfirmation | None:
    """The confirmation deciding `claim_id` at `profile`, checked against its registered inputs and the profile's
    first seed; None where none decides (the gpu profile trains the GPU design, fixed before any run)."""
    if profile not in CONFIRMED_PROFILES:
        return None
    confirmation = registered(claim_id, profile)
    check_profile(confirmation, settings, profile)
    return confirmation


def check_profile(confirmation: RegisteredConfirmation, settings: dict, profile: str) -> None:
    """Refuse a cpu profile whose first seed is not the confirmation's (the pairs are the design's own: `design.pairs`)."""
    key = confirmation.design.setting.split(":", 1)[1]
    if profile == "cpu" and settings[key] != confirmation.first_seed:
        raise DesignError(
            f"claim {confirmation.design.owner}: the cpu profile's {confirmation.design.setting} is {settings[key]}, "
            f"but the registered confirmation starts at seed {confirmation.first_seed}"
        )


def incomplete(pairs: int, registered_pairs: int, diverged: list[str]) -> str | None:
    """Why a confirmation cannot decide ('2 runs diverged: rms seed 1003, ...; 17 complete pairs of the 19
    registered'), or None when every registered pair completed without diverging."""
    reasons = []
    if diverged:
        reasons.append(f"{len(diverged)} run{'s' if len(diverged) > 1 else ''} diverged: {', '.join(diverged)}")
    if pairs < registered_pairs:
        reasons.append(f"{pairs} complete pairs of the {registered_pairs} registered")
    return "; ".join(reasons) or None


def decided(finding: Finding, registered: RegisteredConfirmation | None, *, pairs: int, diverged: list[str]) -> Finding:
    """`finding` as the `registered` confirmation decides it: unchanged when complete, or without a confirmation (a
    design whose pairs were fixed before any run); otherwise "not testable here", saying that the confirmation is
    incomplete and why, its numbers kept as the completed runs measured them."""
    if registered is None:
        return finding
    reason = incomplete(pairs, registered.pairs, diverged)
    if reason is None:
        return finding
    return replace(
        finding,
        verdict=NOT_TESTABLE,
        summary=f"Not testable here: the registered confirmation is incomplete ({reason}), and it does not decide "
        f"on fewer pairs than registered. {finding.summary}",
        caveats=tuple(dict.fromkeys([*finding.caveats, f"confirmation incomplete: {reason}"])),
        evidence={**finding.evidence, "confirmation_incomplete": reason},
    )


def evidence(confirmation: RegisteredConfirmation, claim_id: str, pilot: dict) -> dict:
    """What a verdict decided by the confirmation records of its design and its pilot."""
    c = confirmation.design
    return {
        "confirmation_registered": c.registered,
        "confirmation_seeds": [confirmation.seeds[0], confirmation.seeds[-1]],
        "confirmation_pairs": confirmation.pairs,
        "confirmation_required_pairs": confirmation.required,
        "confirmation_power": confirmation.power(claim_id),
        "confirmation_power_at_half_margin": confirmation.power(claim_id, confirmation.margin / 2),
        "resolvable_margin_90_power": confirmation.resolvable_margin(claim_id),
        "pilot_seeds": [c.pilot_seeds[0], c.pilot_seeds[-1]],
        "pilot_build": c.pilot_build,
        "pilot_sd": c.pilot_sd[claim_id],
        "sizing_sd": c.sizing(claim_id),
        "pilot": {key: value for key, value in pilot.items() if key not in ("differences", "seeds")},
    }


def resolution_sentence(finding: Finding, unit: str) -> str:
    """' At 19 pairs and the pilot's spread this design resolves a margin of ±0.0196 nats per byte at 90% power.'"""
    e = finding.evidence
    if "resolvable_margin_90_power" not in e:
        return ""
    return (
        f" At {e['confirmation_pairs']} pairs and the pilot's spread this design resolves a margin of "
        f"±{e['resolvable_margin_90_power']:.4f} {unit} at 90% power."
    )


def spread_text(c: Confirmation, claim: str, unit: str) -> str:
    """'pilot spread 0.0224 nats per byte', or, where a larger spread recorded elsewhere sizes the pairs, both."""
    text = f"pilot spread {c.pilot_sd[claim]:.4f} {unit}"
    if c.sizing(claim) > c.pilot_sd[claim]:
        text += f"; sized on {c.sizing(claim):.4f}: {c.sizing_basis}"
    return text


def seeds_text(seeds) -> str:
    return f"seeds {seeds[0]}–{seeds[-1]}"


def design_paragraph(confirmation: RegisteredConfirmation) -> str:
    """The page's account of the confirmation: registered when, sized how, and what decides."""
    c, unit = confirmation.design, confirmation.unit
    sizes = " ".join(
        f"{claim}: {spread_text(c, claim, unit)}. That gives {n} pairs, with power {confirmation.power(claim):.2f} at "
        f"the registered {c.true_difference:g} and {confirmation.power(claim, confirmation.margin / 2):.2f} at half "
        "the margin."
        for claim, n in confirmation.required.items()
    )
    where = (
        f"wholly below +{confirmation.margin:g} {unit}"
        if confirmation.one_sided
        else f"inside ±{confirmation.margin:g} {unit}"
    )
    read = "at each of its looks" if design.looks(c.owner) else "before the confirmation was registered"
    return (
        f"*The confirmation.* The pilot ({seeds_text(c.pilot_seeds)}, {len(c.pilot_seeds)} pairs, the committed "
        f"build `{c.pilot_build}`) was read {read}; it is shown, never pooled. On "
        f"{c.registered}, before any confirmatory run, the design registered a confirmation on fresh "
        f"{seeds_text(confirmation.seeds)}: {confirmation.pairs} pairs, the fewest that give a 95% t-interval "
        f"{where} with probability {c.power:g} when the true difference is {c.true_difference:g}, computed from a "
        f"recorded spread, never a mean. {sizes} Only the confirmation decides: {c.test.rstrip('.')}."
    )


def side_by_side(confirmation: RegisteredConfirmation, results: dict[str, dict | None]) -> pd.DataFrame:
    """Rows for the page's table, per claim decided: the pilot's sequence beside the confirmation's interval
    (`results[claim]`, None when a run diverged), and which of the two decides."""
    unit = confirmation.unit
    rows = []
    for claim, confirmed in results.items():
        rows.append(
            {
                "claim": claim,
                "run": f"pilot, {seeds_text(confirmation.design.pilot_seeds)}",
                "band": PILOT_BAND[bool(design.looks(claim))],
                "result": interval_text(confirmation.pilot_pair(claim), unit, margin=False),
                "decides": "no",
            }
        )
        rows.append(
            {
                "claim": claim,
                "run": f"confirmation, {seeds_text(confirmation.seeds)}",
                "band": "95% t-interval (pairs fixed in advance)",
                "result": interval_text(confirmed, unit, margin=False),
                "decides": "yes",
            }
        )
    return pd.DataFrame(rows)


def cost_hours(pairs: int, cpu_seconds_per_pair: float, workers: int) -> float:
    """Hours for `pairs` pairs on `workers` single-threaded workers, at the measured CPU-seconds a pair costs."""
    if workers < 1 or pairs < 1 or not cpu_seconds_per_pair > 0:
        raise ValueError(
            f"need pairs >= 1, workers >= 1 and a positive cost, got {pairs}, {workers}, {cpu_seconds_per_pair}"
        )
    return pairs * cpu_seconds_per_pair / workers / 3600
