"""What a chapter shows its reader: the claims box, tables with sensible figures, the verdict table.

Each function returns an object that Jupyter displays as Markdown or HTML,
so a notebook cell tagged `remove-input` shows only the result. The
Markdown is MyST (the book sets `nb_render_markdown_format: myst`), so
admonitions and cross-references work inside generated output.
"""

from __future__ import annotations

import html
import math
import numbers

import numpy as np

from normlab.study.claims import VERDICT_BADGES, parse_claims
from normlab.study.results import is_fragile  # noqa: F401  (re-exported: chapters import it from here)


def significant(value, digits: int = 3) -> str:
    """A number with `digits` significant figures, without scientific notation for everyday magnitudes."""
    if value is None:
        return "—"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return str(value)
    value = float(value)
    if math.isnan(value):
        return "—"
    if not math.isfinite(value):
        return "∞" if value > 0 else "−∞"
    if value == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(value)))
    if magnitude >= 6 or magnitude <= -4:
        return f"{value:.{digits - 1}e}"
    decimals = max(digits - 1 - magnitude, 0)
    return f"{value:,.{decimals}f}"


class _Markdown:
    def __init__(self, text: str):
        self.text = text

    def _repr_markdown_(self) -> str:
        return self.text

    def __str__(self) -> str:
        return self.text


class _HTML:
    def __init__(self, text: str):
        self.text = text

    def _repr_html_(self) -> str:
        return self.text

    def __str__(self) -> str:
        return self.text


def overrides_text(overrides: dict) -> str:
    """`width=768, seeds=24`: the settings that replaced the committed design, as the pages write them."""
    return ", ".join(f"`{key}={value!r}`" for key, value in sorted(overrides.items()))


def overrides_note(overrides: dict | None) -> str:
    """A warning that this run's design was overridden, with the values; empty when it was not."""
    if not overrides:
        return ""
    return (
        ":::{warning}\nThis run overrode the chapter's committed design (`SET=`): "
        f"{overrides_text(overrides)}. Its verdicts answer that design, not the registered one.\n:::\n"
    )


def claims_box(
    ids: list[str], *, title: str = "Claims tested in this chapter", overrides: dict | None = None
) -> _Markdown:
    """An admonition quoting each claim this chapter tests (text from data/claims.md), after a warning when
    `overrides` replaced part of the chapter's design for this run."""
    claims = {c.id: c.text for c in parse_claims()}
    unknown = [i for i in ids if i not in claims]
    if unknown:
        raise ValueError(f"claims_box: unknown claim IDs {unknown}; valid IDs are in data/claims.md")
    body = "\n".join(f"- **{i}**: {claims[i]}" for i in ids)
    return _Markdown(f"{overrides_note(overrides)}:::{{admonition}} {title}\n:class: note\n\n{body}\n:::\n")


def _cell(value, digits: int):
    """One table cell as a reader should see it."""
    if isinstance(value, (bool, np.bool_)):  # not Python's True/False
        return "yes" if value else "no"
    if not isinstance(value, numbers.Real):
        return "—" if value is None else value
    if isinstance(value, numbers.Integral):  # a count, a depth or a year reads as one: 16, not 16.0
        return str(int(value))
    return significant(value, digits)


def table(frame, *, digits: int = 3, index: bool = False, caption: str | None = None) -> _HTML:
    """A pandas DataFrame as an HTML table, numbers to `digits` significant figures, flags as yes/no."""
    formatted = frame.copy()
    for column in formatted.columns:
        formatted[column] = [_cell(v, digits) for v in formatted[column]]
    styled = formatted.to_html(index=index, escape=True, border=0, classes="normlab-table")
    if caption:
        styled = styled.replace("<thead>", f"<caption>{html.escape(caption)}</caption><thead>", 1)
    return _HTML(styled)


def caveats_note(caveats) -> str:
    """' **Caveat:** measured at 12a0522; …' for a verdict's caveats (a finding's, or a record's), or '' without any."""
    if not caveats:
        return ""
    return f" **Caveat{'s' if len(caveats) > 1 else ''}:** " + "; ".join(caveats) + "."


def verdict_line(claim_id: str, finding) -> str:
    """'**A7** — holds: <its sentence> **Caveat:** …', a finding as the chapter states it beside its section."""
    return f"**{claim_id}** — {finding.verdict}: {finding.summary}{caveats_note(finding.caveats)}"


def verdict_table(results) -> _Markdown:
    """The chapter's closing table, built from what it recorded in this run."""
    rows = [
        "| claim | verdict | key number | threshold | spread | fragile | summary |",
        "|---|---|---|---|---|---|---|",
    ]
    for record in results.claims:
        if record.get("verdict") is None:
            verdict = "evidence only (judged in its owning chapter)"
        else:
            verdict = VERDICT_BADGES[record["verdict"]]
        fragile = is_fragile(record)
        rows.append(
            f"| {record['id']} | {verdict} | {significant(record.get('key_number'))} | "
            f"{significant(record.get('threshold'))} | {significant(record.get('spread'))} | "
            f"{'—' if fragile is None else ('**yes**' if fragile else 'no')} | "
            f"{(record['summary'] + caveats_note(record.get('caveats'))).replace('|', chr(92) + '|')} |"
        )
    return _Markdown("\n".join(rows) + "\n")


def empty_figure(message: str):
    """A small figure that says, in words, why a captioned figure has nothing to plot in this run.

    The caption and label stay, so a cross-reference never dangles; the reader sees the reason instead.
    """
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 2))
    ax.text(0.5, 0.5, message, ha="center", va="center")
    ax.set_axis_off()
    return fig
