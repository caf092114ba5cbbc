"""What the speed chapter's page shows where a run has nothing to put in a table: a sentence instead."""

from __future__ import annotations

import pandas as pd

from normlab.study.present import table


def markdown(text: str):
    """Text the page shows as Markdown (IPython is needed only where a page is made)."""
    from IPython.display import Markdown

    return Markdown(text)


def table_or_note(frame: pd.DataFrame, note: str, *, caption: str | None = None):
    """The frame as a table, or `note` as Markdown where the run has nothing to put in it."""
    return markdown(note) if frame.empty else table(frame, caption=caption)
