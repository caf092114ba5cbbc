"""Did each arm train? The rule every trained claim's verdict passes before it stands.

A model whose validation loss ends near the byte frequencies' entropy (the loss of predicting each byte from how
often it occurs, ignoring context) has learned nothing a norm could be judged by: a comparison with it says that the
arm failed to train, not which norm is better. So every claim whose design trains models (`trains = true` in
data/design.toml) records each arm's mean final validation loss, its loss at step 0 and the entropy of the same
validation text (`ArmLosses`), and registers a minimum, `trained_minimum`: how far below the entropy every arm's
final loss must end. `Results.record` applies the rule (`judge`):

- every arm at least the minimum below the entropy: the chapter's verdict stands;
- an arm short of it: the verdict is *not testable here*, and the summary's first sentence names the arm, its loss
  and the entropy. The exception is a claim about training without tuning (`untrained_answers` in the design): there
  the failure is the answer, the verdict stands, and the first sentence says which arm failed to train. Where a
  finding names the arms whose failure answers the claim (`ArmLosses.answers`), any other arm short of the minimum
  makes the verdict not testable as above.

The record keeps every arm's losses beside the entropy (`arms_trained` in its evidence), whatever the outcome.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ArmLosses:
    """Each arm's mean final validation loss and mean validation loss at step 0, in nats per byte, beside the byte
    frequencies' entropy of the same validation text. `scale`: the model size and steps the arms trained at, in
    words, for the sentence that names an arm that did not train."""

    final: dict[str, float]
    initial: dict[str, float]
    entropy: float
    scale: str = ""
    names: dict[str, str] = field(default_factory=dict)  # arm label -> the name a sentence uses
    # the arms whose failure to train is the claim's answer where its design registers `untrained_answers` (B17's
    # runs without warm-up, beside its paired runs with warm-up, whose failure answers nothing); empty: every arm
    answers: tuple[str, ...] = ()

    def __post_init__(self):
        if not self.final:
            raise ValueError("ArmLosses needs at least one arm's final loss; pass final={arm: loss}")
        if not (isinstance(self.entropy, (int, float)) and math.isfinite(self.entropy) and self.entropy > 0):
            raise ValueError(f"the byte frequencies' entropy must be a positive number, got {self.entropy!r}")
        extra = sorted(set(self.initial) - set(self.final))
        if extra:
            raise ValueError(f"ArmLosses.initial names arm(s) {', '.join(extra)} that have no final loss")
        unknown = sorted(set(self.answers) - set(self.final))
        if unknown:
            raise ValueError(f"ArmLosses.answers names arm(s) {', '.join(unknown)} that have no final loss")

    def answered(self, untrained: list[str]) -> bool:
        """Whether every arm in `untrained` is one whose failure answers the claim (`answers`; empty: any arm)."""
        return not self.answers or set(untrained) <= set(self.answers)

    def name(self, arm: str) -> str:
        return self.names.get(arm, arm)

    def untrained(self, minimum: float) -> list[str]:
        """The arms whose final loss did not end at least `minimum` below the entropy (a diverged arm, NaN, did not
        train either)."""
        return [arm for arm, loss in self.final.items() if not (math.isfinite(loss) and self.entropy - loss >= minimum)]

    def record(self, minimum: float) -> dict:
        """The evidence every trained claim carries: each arm's losses, the entropy, the minimum and the outcome."""
        untrained = self.untrained(minimum)
        return {
            "unigram_entropy_nats": self.entropy,
            "minimum_below_entropy": minimum,
            "scale": self.scale,
            "arms": {
                self.name(arm): {
                    "final_val_loss": loss if math.isfinite(loss) else None,
                    "initial_val_loss": self.initial.get(arm),
                    "below_entropy": self.entropy - loss if math.isfinite(loss) else None,
                    "trained": arm not in untrained,
                }
                for arm, loss in self.final.items()
            },
        }

    def sentence(self, minimum: float) -> str:
        """Two sentences, the first short enough to lead a ledger summary: "DyT did not train (width 32, 200
        steps). It ended at 3.1220 nats per byte, less than the registered 0.25 below the byte frequencies' entropy
        of 3.1122"; with several arms short of it, their count, then the one that came nearest. Each arm's loss is
        in the record (`record`) and on the chapter's page."""
        untrained = self.untrained(minimum)
        where = f" ({self.scale})" if self.scale else ""
        below = f"less than the registered {minimum:g} below the byte frequencies' entropy of {self.entropy:.4f}"
        finite = [arm for arm in untrained if math.isfinite(self.final[arm])]
        if len(untrained) == 1:
            (arm,) = untrained
            if not finite:
                return f"{self.name(arm)} diverged, so it did not train{where}"
            return f"{self.name(arm)} did not train{where}. It ended at {self.final[arm]:.4f} nats per byte, {below}"
        lead = f"{len(untrained)} of its {len(self.final)} arms did not train{where}"
        if not finite:
            return f"{lead}. They diverged"
        nearest = min(finite, key=lambda arm: self.final[arm])
        return f"{lead}. The nearest, {self.name(nearest)}, ended at {self.final[nearest]:.4f} nats per byte, {below}"


@dataclass(frozen=True)
class Judged:
    verdict: str
    summary: str
    headline: str | None
    evidence: dict


def judge(claim_id: str, verdict: str, summary: str, headline: str | None, arms: ArmLosses, design) -> Judged:
    """The did-it-train rule (the module docstring) on one trained claim's finding: the verdict, summary, headline
    and the evidence entry `arms_trained` as they stand after it."""
    entry = design.claim(claim_id)
    minimum = float(design.value(claim_id, "trained_minimum"))
    evidence = arms.record(minimum)
    if not arms.untrained(minimum):
        return Judged(verdict, summary, headline, evidence)
    failed = arms.sentence(minimum)
    if entry.untrained_answers and arms.answered(arms.untrained(minimum)):
        lead = f"{failed[:1].upper()}{failed[1:]}. {entry.untrained_answers.rstrip('.')}."  # failed: two sentences
        return Judged(verdict, f"{lead} {summary}", headline, evidence)
    # no opening-page sentence: a comparison with an arm that did not train is no finding about a norm
    return Judged("not testable here", f"Not a verdict on the norm: {failed}. {summary}", None, evidence)
