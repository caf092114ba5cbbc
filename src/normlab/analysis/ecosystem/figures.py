"""The ecosystem chapter's figure, drawn from the counts `family_norms.families_by_year` returns."""

from __future__ import annotations

PALETTE = {"RMSNorm": "tab:blue", "LayerNorm": "tab:orange", "mixed": "tab:gray", "unclassified": "tab:gray"}


def years(counts):
    """Stacked bars: model families per year of first release, coloured by measured norm (`families_by_year`)."""
    ax = counts.plot(kind="bar", stacked=True, color=[PALETTE[c] for c in counts.columns], figsize=(7, 3.5))
    ax.set_xlabel("year of first release")
    ax.set_ylabel("model families (count)")
    ax.figure.tight_layout()
    return ax.figure
