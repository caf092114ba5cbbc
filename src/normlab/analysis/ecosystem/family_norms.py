"""Section "The norm of each family, by release date": the list of families, surveyed and counted by year."""

from __future__ import annotations

from normlab.analysis.ecosystem.classify import survey


def read_families(path):
    import pandas as pd

    return pd.read_csv(path, dtype=str)


def dated_survey(families, seed: int = 0, progress: bool = True):
    """`survey` with each family's year of first release (the first four characters of `first_release`)."""
    table = survey(families, seed, progress)
    table["year"] = table["first_release"].str[:4].astype(int)
    return table


def families_by_year(table):
    """Count of families per year of first release (rows) and measured norm (columns)."""
    return table.groupby(["year", "norm"]).size().unstack(fill_value=0)
