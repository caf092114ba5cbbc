"""Every look disclosed: what the design's change log says was seen of a claim before a registration or change of
its design, as the verdict's caveats (`disclosed`) and for a page's table (`looks`)."""

from __future__ import annotations

from normlab.study import design
from normlab.study.findings import Finding


def looks(claim_id: str) -> list[dict]:
    """The change-log entries (data/design.toml) made after something of `claim_id` had been seen: its own entries
    whose `look` is not "none", and, for a claim that trains, the did-it-train minimum's, registered for every
    trained claim after V1's, V6's and V7's arms were seen not to train."""
    registered = design.load()
    trains = registered.claim(claim_id).trains
    out = []
    for change in registered.changes:
        minimum = trains and change["field"].startswith(f"thresholds.{design.TRAINED_MINIMUM} ")
        if (change["claim"] == claim_id or minimum) and not change["look"].lower().startswith("none"):
            out.append(change)
    return out


def disclosed(finding: Finding, claim_id: str) -> Finding:
    """`finding` with a caveat for every look before a registration or change of its design (`looks`): what had
    been seen, and when, in the change log's own words."""
    clauses = tuple(
        f"its design's {change['field'].split(' (')[0]} ({change['date']}) was set after a look: {change['look']}"
        for change in looks(claim_id)
    )
    finding.caveats = (*finding.caveats, *clauses)
    return finding
