"""Markdown pieces the generated pages share: a table cell and the warning box of a mixed build."""

from __future__ import annotations


def cell(text) -> str:
    """`text` safe inside a Markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def warning_box(warning: str | None) -> list[str]:
    if not warning:
        return []
    return [":::{warning}", cell(warning), ":::", ""]
