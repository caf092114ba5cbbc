"""Section "Achieved bandwidth against the copy limit": the forward cases its figure plots."""

from __future__ import annotations

import pandas as pd


def forward_norm_cases(stable_cases: pd.DataFrame) -> pd.DataFrame:
    """The sweep's stable forward cases of the norms themselves (the copies left out)."""
    return stable_cases[
        (stable_cases["study"] == "sweep") & (stable_cases["norm"] != "copy") & (stable_cases["mode"] == "alloc")
    ]
