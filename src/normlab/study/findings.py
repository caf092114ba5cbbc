"""A finding: what an analysis concludes about one claim, ready for a chapter to show and record.

Analysis functions return findings; a chapter states the threshold in its prose, passes it to the call, shows
the finding's sentence, and records it with `finding.record(results, claim_id, section)`.

The finding also says what its key number measures and in which unit (`meaning`, `unit`: see
`normlab.study.key_numbers`) and, for the claims the opening page leads with, the sentence it opens with
(`headline`), so that the ledger and the opening page show it without knowing the claim's evidence. Its `caveats`
reach every page that shows the verdict.

A finding carries no rule of its own: a claim's rule is its registered test (data/design.toml, [claims.ID] test),
and `rule_text` renders it, with the thresholds the finding `reads`, for the results file and any chapter text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from normlab.study import design as registered
from normlab.study import verdict_rules
from normlab.study.trained import ArmLosses


def finite_or_none(value):
    return None if value is None or not math.isfinite(float(value)) else float(value)


def none_for_nan(value):
    if isinstance(value, dict):
        return {k: none_for_nan(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(none_for_nan(v) for v in value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


@dataclass
class Finding:
    verdict: str
    summary: str
    evidence: dict = field(default_factory=dict)
    key_number: float | None = None  # the number the verdict turns on
    threshold: float | None = None  # what it is judged against
    spread: float | None = None  # its run-to-run sd, from repeats measured in this run
    meaning: str | None = None  # what the key number measures, in words, as the ledger shows it
    unit: str | None = None  # the key number's unit
    headline: str | None = None  # the opening page's sentence, for the claims it leads with
    # what a reader must know before trusting the verdict, each a clause the pages show beside it (e.g. that the
    # committed file deciding it measured code this tree has since changed: normlab.runtime.code_identity)
    caveats: tuple[str, ...] = ()
    # the registered design's thresholds the verdict's rule reads, by name (data/design.toml, [claims.ID.thresholds]):
    # the ledger refuses a name the claim does not register (normlab.study.design.check_runs)
    reads: tuple[str, ...] = ()
    # the scale the key number was measured at (model size, depth, width, steps, pairs, machine), in words; the
    # opening page's sentence names it
    scale: str | None = None
    # the study's rule for a verdict weighed from several runs (normlab.analysis.shared.scale_rule.RULE), shown after
    # the claim's registered rule; None for a verdict from one run
    runs_rule: str | None = None
    # each arm's final and initial validation loss beside the byte frequencies' entropy (normlab.study.trained):
    # required of every claim whose design trains models; `Results.record` applies the did-it-train rule to it
    arms: ArmLosses | None = None
    # whether the study's rules have been applied to it (normlab.study.results.judge): a judged finding is shown and
    # recorded as it is
    judged: bool = False

    def __post_init__(self):
        # a number this run could not measure is None (shown as "—"), never NaN
        self.evidence = none_for_nan(self.evidence)
        self.key_number, self.threshold, self.spread = (
            finite_or_none(v) for v in (self.key_number, self.threshold, self.spread)
        )

    def record(self, results, claim_id: str, section: str):
        """Record this finding as the verdict of `claim_id` in a chapter's results (`Results.record`)."""
        return results.record(claim_id, self, section)


def _number(value) -> str:
    """A registered value as typed: 0.02, 1e-12, 2019 (`g` where it loses nothing, else every digit)."""
    short = f"{value:g}"
    return short if float(short) == float(value) else repr(value)


def _threshold_text(threshold: registered.Threshold) -> str:
    value = threshold.value
    if isinstance(value, dict):
        shown = ", ".join(f"{key} {_number(v)}" for key, v in value.items())
    elif isinstance(value, tuple):
        shown = " to ".join(_number(v) for v in value)
    else:
        shown = _number(value)
    unit = "" if threshold.unit == "1" else f" {threshold.unit}"  # "1": a pure number
    return f"{threshold.name} = {shown}{unit}"


def rule_text(claim_id: str, reads=(), runs_rule: str | None = None, design: registered.Design | None = None) -> str:
    """The rule a verdict on `claim_id` was judged by, from its one home, the registered design: the claim's test,
    its verdict rules rendered where it declares them (normlab.study.verdict_rules), then each threshold in `reads` with its registered value and unit ("margin = 0.02 nats per byte"), then
    `runs_rule` (the study's rule for a verdict weighed from several runs) where given. `Results.record` writes it
    as the verdict's "rule"; a chapter text that states the rule shows this same string."""
    design = design or registered.load()
    entry = design.claim(claim_id)
    test = (entry.test or "").strip().rstrip(".")
    if not test:
        raise registered.DesignError(
            f"claim {claim_id} has no registered test in {design.path}, so its verdict has no rule to record; add "
            f'test = "..." (the rule its verdict is judged by) to [claims.{claim_id}]'
        )
    parts = [f"{test}."]
    if entry.verdict_rules is not None:
        parts.append(verdict_rules.rule_text(entry.verdict_rules))
    if reads:
        parts.append("Thresholds: " + "; ".join(_threshold_text(design.threshold(claim_id, n)) for n in reads) + ".")
    if runs_rule:
        parts.append(runs_rule)
    return " ".join(parts)
