"""The line a section of the Jacobians chapter shows under a verdict it records."""

from __future__ import annotations

from normlab.study.findings import Finding


def verdict_line(claim_id: str, finding: Finding) -> str:
    """'**B3** — verdict: summary', the line under a section that records a verdict."""
    return f"**{claim_id}** — {finding.verdict}: {finding.summary}"
