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
from normlab.study.key_numbers import FACTOR, KeyNumber
from normlab.study.present import significant, table

Q6_KEY = KeyNumber(
    "SmolLM2-135M: largest mean cos² of a norm input with the uniform vector, in multiples of a random direction's 1/d",
    FACTOR,
)
DECIDING = "SmolLM2-135M"  # the decoder LLM decides Q6; MiniLM is read beside it (re-registered 2026-12-07)
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

    @property
    def random(self) -> float:
        """The mean cos² a random direction has with the uniform vector in this width: 1/d."""
        return 1 / self.width

    def multiple(self, share: float) -> float:
        """A share in multiples of the random direction's 1/d."""
        return share * self.width


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


def deciding_model(models: list[ModelShares]) -> ModelShares:
    found = [m for m in models if m.model == DECIDING]
    if len(found) != 1:
        raise ValueError(f"Q6 is decided by {DECIDING}; got models {[m.model for m in models]}")
    return found[0]


def q6_verdict(models: list[ModelShares], multiple: float) -> str:
    """Q6's rule as re-registered 2026-12-07, read on the decoder LLM (SmolLM2) alone, against the random direction
    of its own width: every norm input at most `multiple` × 1/d = holds; the median norm input at most that =
    holds with caveats; otherwise does not hold."""
    m = deciding_model(models)
    if m.multiple(m.largest) <= multiple:
        return HOLDS
    if m.multiple(m.median) <= multiple:
        return CAVEATS
    return FAILS


def q6_finding(models: list[ModelShares], multiple: float, provenance: dict) -> Finding:
    verdict = q6_verdict(models, multiple)
    m = deciding_model(models)
    beside = [other for other in models if other is not m]
    summary = (
        f"In {m.model}, which decides, a norm input's mean cos² with the uniform vector is at most "
        f"{m.multiple(m.largest):.2f} times a random direction's 1/d, against {multiple:g} times. Its largest is "
        f"{significant(m.largest)} against 1/d = {significant(m.random)}; its median, {m.multiple(m.median):.2f} "
        "times."
        + "".join(
            f" {o.model}, beside it: at most {o.multiple(o.largest):.2f} times its 1/d = {significant(o.random)}, "
            f"median {o.multiple(o.median):.2f} times."
            for o in beside
        )
    )
    above = m.above(multiple * m.random)
    caveats = (f"{m.model}: above {multiple:g} × 1/d at {', '.join(above)}",) if verdict == CAVEATS else ()
    evidence = {
        o.model: {
            "width": o.width,
            "norm_inputs": o.labels,
            "mean_cos2_all_tokens": o.shares,
            "largest": o.largest,
            "largest_at": o.where_largest,
            "median": o.median,
            "random_direction": o.random,
            "largest_over_random": o.multiple(o.largest),
            "median_over_random": o.multiple(o.median),
            "decides": o is m,
        }
        for o in models
    }
    evidence["measure"] = "cos² with the uniform vector, mean over tokens (Q4's along-ones share), over 1/d"
    evidence["provenance"] = provenance
    return Finding(
        verdict,
        summary,
        evidence,
        key_number=m.multiple(m.largest),
        threshold=multiple,
        meaning=Q6_KEY.meaning,
        unit=Q6_KEY.unit,
        caveats=caveats,
        reads=("random_direction_multiple",),
        scale=f"{m.model} deciding, every norm input, Q4's text; " + ", ".join(o.model for o in beside) + " beside",
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
                "random direction (1/d)": m.random,
                "largest ÷ 1/d": m.multiple(m.largest),
                "median ÷ 1/d": m.multiple(m.median),
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
    m = deciding_model(models)
    above = m.above(finding.threshold * m.random)
    where = f" Above {finding.threshold:g} × 1/d in {m.model}: {', '.join(above)}." if above else ""
    return (
        f"Over all tokens, {parts[0]}; {'; '.join(parts[1:])}.{where} Gupta et al.'s statement is about the average "
        f"token, and so is this test: SmolLM2's first tokens enter the mean with their weight, and their own share is "
        f"in {{numref}}`fig-realmodels-along-ones`. **Q6 {finding.verdict}.**"
    )
