"""The chapter's introduction: the training corpus in one row."""

from __future__ import annotations

import pandas as pd


def corpus_table(info: dict) -> pd.DataFrame:
    """One row describing the training corpus, from `Corpus.describe()`."""
    return pd.DataFrame(
        [
            {
                "training bytes": info["train_bytes"],
                "validation bytes": info["val_bytes"],
                "modules": info["modules"],
                "Python": info["python_version"],
                "unigram entropy (nats/byte)": info["unigram_entropy_nats"],
                "SHA-256": info["sha256"][:16] + "…",
            }
        ]
    )
