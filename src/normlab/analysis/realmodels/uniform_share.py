"""Section "The all-ones share against Gupta et al.": Q6, read from the measurements Q4 already makes.

Gupta et al. (arXiv 2409.12951; EACL 2026 Findings) state that LayerNorm and RMSNorm LLMs alike "naturally operate
orthogonal to the uniform vector", that is, "on average they do not have a component along the uniform vector". The
share of a token's energy along the uniform vector 1/√d is cos² of the angle between the token and that vector:
(x·1)² / (d‖x‖²) = mean(x)² / mean(x²), the quantity `stream.along_ones_share` measures at every norm input of SmolLM2
and `centring_removed` at every norm input of MiniLM. No new forward runs here: this module reads Q4's numbers, puts
SmolLM2's first token back into the mean with its weight (the stream section keeps it apart), and writes each share
also as |cos| and as the angle to the uniform vector.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import pandas as pd

from normlab.analysis.realmodels.stream import StreamSummary
from normlab.study.findings import Finding
from normlab.study.key_numbers import SHARE, KeyNumber
from normlab.study.present import significant, table

Q6_KEY = KeyNumber("largest mean cos² of a norm input with the uniform vector, SmolLM2-135M and MiniLM", SHARE)
HOLDS, CAVEATS, FAILS = "holds", "holds with caveats", "does not hold"


def all_token_share(rest: float, first: float, tokens_per_chunk: int) -> float:
    """The mean share over all tokens of a chunk, from the mean over positions >= 1 and the first token's."""
    if tokens_per_chunk < 2:
        raise ValueError(f"a chunk needs at least 2 tokens, got {tokens_per_chunk}")
    return (rest * (tokens_per_chunk - 1) + first) / tokens_per_chunk


def angle_degrees(share: float) -> float:
    """The angle to the uniform vector whose cos² is `share` (for a mean share: the angle of its root mean |cos|)."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"a share of energy lies in [0, 1], got {share!r}")
    return math.degrees(math.acos(math.sqrt(share)))


@dataclass
class ModelShares:
    model: str
    width: int
    labels: list[str]
    shares: list[float]  # mean cos² over all tokens, one per norm input

    @property
    def largest(self) -> float:
        return max(self.shares)

    @property
    def median(self) -> float:
        return statistics.median(self.shares)

    @property
    def where_largest(self) -> str:
        return self.labels[self.shares.index(self.largest)]

    def above(self, threshold: float) -> list[str]:
        return [label for label, share in zip(self.labels, self.shares) if share > threshold]


def smollm2_shares(stream: StreamSummary, tokens_per_chunk: int) -> ModelShares:
    frame = stream.stream
    shares = [
        all_token_share(rest, first, tokens_per_chunk)
        for rest, first in zip(frame["along_ones_share"], frame["along_ones_share_first_token"])
    ]
    labels = [
        "the final norm" if site == "final norm" else f"the {site} norm at depth {depth:g}"
        for site, depth in zip(frame["site"], frame["depth"])
    ]
    return ModelShares("SmolLM2-135M", stream.width, labels, shares)


def minilm_label(short: str) -> str:
    """`centring_removed.minilm_norm_labels`' short names in words: emb, L0a, L0f -> the embeddings' norm, layer 0's
    attention norm, layer 0's feed-forward norm."""
    if short == "emb":
        return "the embeddings' norm"
    if len(short) < 3 or short[0] != "L" or short[-1] not in "af" or not short[1:-1].isdigit():
        raise ValueError(f"not a MiniLM norm label (emb, L<i>a or L<i>f): {short!r}")
    return f"layer {short[1:-1]}'s {'attention' if short[-1] == 'a' else 'feed-forward'} norm"


def minilm_shares(shares: list[float], labels: list[str], width: int = 384) -> ModelShares:
    if len(shares) != len(labels):
        raise ValueError(f"one label per MiniLM norm: got {len(shares)} shares and {len(labels)} labels")
    return ModelShares("all-MiniLM-L6-v2", width, [minilm_label(label) for label in labels], [float(s) for s in shares])


def q6_verdict(models: list[ModelShares], threshold: float) -> str:
    """Q6's registered rule: every norm input at most `threshold` = holds; the median norm input of each model at
    most `threshold` = holds with caveats; otherwise does not hold."""
    if all(m.largest <= threshold for m in models):
        return HOLDS
    if all(m.median <= threshold for m in models):
        return CAVEATS
    return FAILS


def q6_finding(models: list[ModelShares], threshold: float, provenance: dict) -> Finding:
    verdict = q6_verdict(models, threshold)
    largest = max(models, key=lambda m: m.largest)
    parts = "; ".join(
        f"{m.model} at most {significant(m.largest)} ({angle_degrees(m.largest):.1f}° to the uniform vector), "
        f"median {significant(m.median)}"
        for m in models
    )
    summary = (
        f"Mean cos² of a norm input with the uniform vector, over all tokens: {parts}; threshold "
        f"{significant(threshold)}."
    )
    above = {m.model: m.above(threshold) for m in models if m.above(threshold)}
    caveats = tuple(f"{model}: above {threshold:g} at {', '.join(where)}" for model, where in above.items())
    evidence = {
        m.model: {
            "width": m.width,
            "norm_inputs": m.labels,
            "mean_cos2_all_tokens": m.shares,
            "largest": m.largest,
            "largest_at": m.where_largest,
            "median": m.median,
            "random_direction": 1 / m.width,
        }
        for m in models
    }
    evidence["measure"] = "cos² with the uniform vector, mean over tokens (Q4's along-ones share)"
    evidence["provenance"] = provenance
    return Finding(
        verdict,
        summary,
        evidence,
        key_number=largest.largest,
        threshold=threshold,
        meaning=Q6_KEY.meaning,
        unit=Q6_KEY.unit,
        caveats=caveats if verdict == CAVEATS else (),
        reads=("orthogonal_share",),
        scale="SmolLM2-135M and all-MiniLM-L6-v2, every norm input, Q4's text",
    )


def uniform_table(models: list[ModelShares]):
    rows = []
    for m in models:
        rows.append(
            {
                "model": m.model,
                "norm inputs": len(m.shares),
                "largest cos²": m.largest,
                "at": m.where_largest,
                "median cos²": m.median,
                "largest |cos|": math.sqrt(m.largest),
                "smallest angle (°)": angle_degrees(m.largest),
                "random direction (1/d)": 1 / m.width,
            }
        )
    return table(
        pd.DataFrame(rows),
        caption="The mean cos² of each norm input with the uniform vector (all tokens), its largest and median over "
        "the model's norm inputs, and the same largest value as |cos| and as an angle; a random direction holds 1/d.",
    )


def uniform_paragraph(models: list[ModelShares], finding: Finding) -> str:
    parts = []
    for m in models:
        parts.append(
            f"in {m.model} the mean cos² stays at or below {significant(m.largest)} ({m.where_largest}; |cos| "
            f"{significant(math.sqrt(m.largest))}, {angle_degrees(m.largest):.1f}° to the uniform vector), median "
            f"{significant(m.median)} over its {len(m.shares)} norm inputs, against {significant(1 / m.width)} for a "
            "random direction"
        )
    above = {m.model: m.above(finding.threshold) for m in models if m.above(finding.threshold)}
    where = (
        " Above the threshold: " + "; ".join(f"{model} at {', '.join(labels)}" for model, labels in above.items()) + "."
        if above
        else ""
    )
    return (
        f"Over all tokens, {parts[0]}; {'; '.join(parts[1:])}.{where} Gupta et al.'s statement is about the average "
        f"token, and so is this test: SmolLM2's first tokens enter the mean with their weight, and their own share is "
        f"in {{numref}}`fig-realmodels-along-ones`. **Q6 {finding.verdict}.**"
    )
