"""Section "Centring removed from a model trained with it": all-MiniLM-L6-v2, a post-LN LayerNorm BERT, with every
LayerNorm an RMSNorm of the same gain and bias; the sentence embeddings' cosine to the original's, a small retrieval
ranking of standard-library docstrings, and the along-ones share of what its norms receive."""

from __future__ import annotations

import math
import re

import pandas as pd
import torch
import torch.nn.functional as F

from normlab.analysis.realmodels.stream import along_ones_share
from normlab.analysis.shared.minilm import MiniLM, stdlib_docstrings
from normlab.gpt.corpus import Corpus
from normlab.study.present import significant, table


class MiniLMWithoutCentring(MiniLM):
    """MiniLM whose every LayerNorm becomes an RMSNorm with the same gain and bias:
    y = x / rms(x) · weight + bias, where the trained model computed (x − mean) / std · weight + bias."""

    def __init__(self, original: MiniLM):  # shares the original's weights and tokenizer, loads nothing
        self.__dict__.update(original.__dict__)

    def _norm(self, x, prefix):
        return F.rms_norm(x, (self.width,), self._w(prefix + ".weight"), self.eps) + self._w(prefix + ".bias")


def query_document_pairs(texts: list[str], min_doc_chars: int = 40) -> list[tuple[str, str]]:
    """Split each text into its first sentence (the query) and the rest (the document)."""
    pairs = []
    for text in texts:
        parts = re.split(r"(?<=[.!?])\s+", text.strip(), maxsplit=1)
        if len(parts) == 2 and len(parts[1]) >= min_doc_chars and len(parts[0]) >= 10:
            pairs.append((parts[0], parts[1]))
    return pairs


def _embedding(model: MiniLM, text: str) -> tuple[torch.Tensor, list[torch.Tensor]]:
    encoded = model.encode_stream(text)
    return F.normalize(encoded.stream[-1].mean(dim=0), dim=0), encoded.norm_inputs


def retrieval_scores(queries: torch.Tensor, documents: torch.Tensor) -> dict:
    """Rank every document for each query by cosine; query i's match is document i."""
    similarity = queries @ documents.T
    correct = similarity.diagonal()
    rank = 1 + (similarity > correct[:, None]).sum(1)
    return {
        "recall_at_1": float((rank == 1).double().mean()),
        "mrr": float((1.0 / rank.double()).mean()),
        "ranks": rank.tolist(),
    }


def minilm_without_centring(texts: list[str], model: MiniLM | None = None) -> dict:
    """Sentence-embedding cosine to the original, retrieval before and after, and the along-ones share
    of what MiniLM's norms receive (13 norms: embeddings, then two per layer)."""
    original = model if model is not None else MiniLM()
    variant = MiniLMWithoutCentring(original)
    pairs = query_document_pairs(texts)
    if len(pairs) < 2:
        raise ValueError(f"need at least two texts that split into a first sentence and a rest; got {len(pairs)}")
    embeddings = {"original": {"q": [], "d": []}, "without centring": {"q": [], "d": []}}
    shares = None
    for query, document in pairs:
        for side, text in (("q", query), ("d", document)):
            e, inputs = _embedding(original, text)
            embeddings["original"][side].append(e)
            embeddings["without centring"][side].append(_embedding(variant, text)[0])
            if side == "d":
                per_norm = torch.stack([along_ones_share(x).mean() for x in inputs])
                shares = per_norm if shares is None else shares + per_norm
    stacked = {k: {s: torch.stack(v) for s, v in sides.items()} for k, sides in embeddings.items()}
    cosine = torch.cat([(stacked["original"][s] * stacked["without centring"][s]).sum(1) for s in ("q", "d")])
    return {
        "pairs": len(pairs),
        "cosine_to_original": cosine.tolist(),
        "cosine_median": float(cosine.median()),
        "cosine_min": float(cosine.min()),
        "retrieval": {k: retrieval_scores(v["q"], v["d"]) for k, v in stacked.items()},
        "norm_input_along_ones_share": (shares / len(pairs)).tolist(),
    }


def measure_centring_removed(corpus: Corpus, texts: int) -> dict:
    """`minilm_without_centring` on the corpus's first `texts` standard-library docstrings."""
    return minilm_without_centring(stdlib_docstrings(corpus.sources, limit=texts), MiniLM())


def minilm_norm_labels(count: int) -> list[str]:
    """Short names of MiniLM's norms in order: the embeddings', then each layer's attention (a) and
    feed-forward (f) sums."""
    return ["emb"] + [f"L{i // 2}{'a' if i % 2 == 0 else 'f'}" for i in range(count - 1)]


def retrieval_table(minilm: dict):
    rows = [{"model": name, "recall@1": r["recall_at_1"], "MRR": r["mrr"]} for name, r in minilm["retrieval"].items()]
    return table(
        pd.DataFrame(rows),
        caption=f"Retrieval of each docstring's body by its first sentence, {minilm['pairs']} pairs.",
    )


def centring_removed_paragraph(minilm: dict) -> str:
    ret, shares = minilm["retrieval"], minilm["norm_input_along_ones_share"]
    return (
        f"Without centring, MiniLM's sentence embeddings keep a median cosine of "
        f"{significant(minilm['cosine_median'], 4)} to the original (lowest {significant(minilm['cosine_min'], 4)}); "
        f"retrieval MRR goes from {significant(ret['original']['mrr'])} to "
        f"{significant(ret['without centring']['mrr'])}. The inputs to its norms hold up to "
        f"{significant(max(shares))} of their energy along the all-ones direction "
        f"({{numref}}`fig-realmodels-minilm`). An energy share s means the removed mean is √s of the vector's RMS, so "
        f"without centring each norm's output moves by up to {significant(math.sqrt(max(shares)))} of its scale, "
        f"and {len(shares)} norms in a row compound it: a small share in energy is a visible change in direction."
    )
