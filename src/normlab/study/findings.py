"""A finding: what an analysis concludes about one claim, ready for a chapter to show and record.

Analysis functions return findings; a chapter states the threshold in its prose, passes it to the call, shows
the finding's sentence, and records it with `finding.record(results, claim_id, section)`.

The finding also says what its key number measures and in which unit (`meaning`, `unit`: see
`normlab.study.key_numbers`) and, for the claims the opening page leads with, the sentence it opens with
(`headline`), so that the ledger and the opening page show it without knowing the claim's evidence. Its `caveats`
reach every page that shows the verdict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


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
    rule: str | None = None
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

    def __post_init__(self):
        # a number this run could not measure is None (shown as "—"), never NaN
        self.evidence = none_for_nan(self.evidence)
        self.key_number, self.threshold, self.spread = (
            finite_or_none(v) for v in (self.key_number, self.threshold, self.spread)
        )

    def record(self, results, claim_id: str, section: str):
        """Record this finding as the verdict of `claim_id` in a chapter's results (`Results.record`)."""
        return results.record(claim_id, self, section)
