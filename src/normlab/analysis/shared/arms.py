"""Did each arm train? The page's table of each arm's final and step-0 validation loss beside the byte frequencies'
entropy (`normlab.study.trained.ArmLosses`), as the record keeps them."""

from __future__ import annotations

import pandas as pd

from normlab.study.trained import ArmLosses

COLUMNS = {
    "initial_val_loss": "step-0 validation loss (nats per byte)",
    "final_val_loss": "final validation loss (nats per byte)",
    "below_entropy": "below the entropy (nats per byte)",
    "trained": "trained",
}


def arms_table(arms: ArmLosses, minimum: float) -> pd.DataFrame:
    """One row per arm, by its name: its step-0 and final validation loss (means over seeds), how far the final one
    ends below the entropy, and whether that is at least `minimum` (the registered trained_minimum)."""
    record = arms.record(minimum)["arms"]
    frame = pd.DataFrame.from_dict(record, orient="index").reindex(columns=list(COLUMNS))
    return frame.rename(columns=COLUMNS).rename_axis("arm").reset_index()
