"""Q4 and B16: the chapter's two centring experiments weighed together, SmolLM2 with centring added and MiniLM with
it removed.

`q4_verdict` is Q4's rule and `q4_finding` the verdict the chapter records (with the opening page's sentence,
`q4_headline`), with the exact map and the massive ablation as evidence beside it; `b16_evidence` is both models'
part of B16 (judged in the quality chapter).
"""

from __future__ import annotations

import statistics

from normlab.analysis.realmodels.centring_added import CentringAdded
from normlab.analysis.realmodels.centring_map import CentringMap, centring_map_evidence
from normlab.analysis.realmodels.massive import INTERVAL_KEYS, MassiveAblationResult
from normlab.analysis.realmodels.stream import StreamSummary
from normlab.analysis.shared.paired import interval_text
from normlab.study.findings import Finding
from normlab.study.key_numbers import NATS_PER_TOKEN, KeyNumber
from normlab.study.present import significant

Q4_KEY = KeyNumber("SmolLM2-135M's loss change, every RMSNorm → LayerNorm", NATS_PER_TOKEN)

# how Q4's SmolLM2 half reads its paired interval against ±margin (`paired.interval_outcome`), in its sentence
INTERVAL_READING = {"different": "wholly beyond", "equivalent": "inside", "inconclusive": "across"}


def smollm2_matters(smollm2: dict) -> bool | None:
    """Whether centring added to SmolLM2 matters, from the paired interval of the loss change (`paired_difference`
    output) against its margin: "different" = matters, "equivalent" = does not, else undecided (None)."""
    return {"different": True, "equivalent": False}.get(smollm2["outcome"])


def q4_verdict(smollm2_matters: bool | None, minilm_matters: bool) -> str:
    """Q4 read as "mean-centring matters in real trained models", from SmolLM2 with centring added
    (`smollm2_matters`) and MiniLM with it removed (matters when the median cosine of the sentence embeddings to the
    original falls below the chapter's threshold). holds: both matter; holds with caveats: one matters and the other
    does not (or is undecided); does not hold: neither matters; not testable here: SmolLM2 undecided and MiniLM does
    not matter."""
    if smollm2_matters is True and minilm_matters:
        return "holds"
    if smollm2_matters is None and not minilm_matters:
        return "not testable here"
    if smollm2_matters is False and not minilm_matters:
        return "does not hold"
    return "holds with caveats"


def q4_finding(
    added: CentringAdded,
    minilm: dict,
    cosine_threshold: float,
    stream: StreamSummary,
    provenance: dict,
    *,
    mapping: CentringMap | None = None,
    massive: MassiveAblationResult | None = None,
) -> Finding:
    """Q4 from SmolLM2 with centring added (against its margin) and MiniLM with it removed (against
    `cosine_threshold`), by the rule of `q4_verdict`. `mapping` (the exact reading of the swap) and `massive`
    (the massive-activation ablation) add evidence; they do not enter the verdict."""
    a, apart, ret = added.added, added.added_apart, minilm["retrieval"]
    smol, mini = smollm2_matters(a), minilm["cosine_median"] < cosine_threshold
    summary = (
        # the first sentence (the ledger's): both models' tests and numbers; retrieval after it
        f"A same-gain LayerNorm in place of every RMSNorm moves SmolLM2-135M's held-out loss by "
        f"{interval_text(a, NATS_PER_TOKEN, margin=False)} ({a['outcome']} vs ±{added.margin}); MiniLM without "
        f"centring keeps a median embedding cosine of {minilm['cosine_median']:.4f} (threshold {cosine_threshold:g}). "
        f"MiniLM's retrieval MRR moves {ret['original']['mrr']:.3f}→{ret['without centring']['mrr']:.3f}."
    )
    evidence = {
        "smollm2_loss_change_nats": a["mean_difference"],
        "smollm2_ci": [a["ci_low"], a["ci_high"]],
        # the same interval with its pairs, spread and margin: what the multiplicity rule reads to compute its level
        "smollm2_interval": {key: a[key] for key in INTERVAL_KEYS},
        "smollm2_outcome": a["outcome"],
        "margin_nats": added.margin,
        "chunks": a["pairs"],
        "base_loss": statistics.fmean(added.base_losses),
        "loss_change_first_token_uncentred": apart["mean_difference"],
        "ci_first_token_uncentred": [apart["ci_low"], apart["ci_high"]],
        "per_norm_loss_change": dict(zip(added.sweep["norm"], added.sweep["loss_change"])),
        "max_along_ones_share": stream.max_share,
        "minilm_cosine_median": minilm["cosine_median"],
        "minilm_cosine_min": minilm["cosine_min"],
        "minilm_cosine_threshold": cosine_threshold,
        "minilm_retrieval": {k: {m: v[m] for m in ("recall_at_1", "mrr")} for k, v in ret.items()},
        "minilm_norm_input_along_ones_share": minilm["norm_input_along_ones_share"],
        "minilm_pairs": minilm["pairs"],
        "smollm2_matters": smol,
        "minilm_matters": mini,
        "provenance": provenance,
    }
    evidence["scale"] = q4_scale(evidence)
    if mapping is not None:
        evidence.update(centring_map_evidence(mapping))
    if massive is not None:
        evidence["massive_activation_ablation"] = massive.evidence()
    q4 = Finding(
        q4_verdict(smol, mini),
        summary,
        evidence,
        key_number=a["mean_difference"],
        threshold=a["margin"],
        spread=a["standard_error"],
        meaning=Q4_KEY.meaning,
        unit=Q4_KEY.unit,
        reads=("margin", "cosine_threshold"),
        scale=evidence["scale"],
    )
    q4.headline = q4_headline(q4)
    return q4


def q4_scale(evidence: dict) -> str:
    """The scale Q4 was measured at, as its sentences name it: the two models with their sizes, and how many held-out
    chunks or sentence pairs ('SmolLM2-135M 4-bit, 12 chunks; MiniLM 22M, 200 sentence pairs')."""
    chunks, pairs = evidence.get("chunks"), evidence.get("minilm_pairs")
    return (
        "SmolLM2-135M 4-bit"
        + (f", {chunks} chunks" if chunks else "")
        + "; MiniLM 22M"
        + (f", {pairs} sentence pairs" if pairs else "")
    )


def q4_headline(q4: Finding) -> str | None:
    """The opening page's sentence on Q4 (at most 35 words), from the key number, threshold and verdict the finding
    records; None without a key number or threshold. It names the two models and their scale, reads SmolLM2's interval
    (not its mean) against the margin, and claims nothing beyond these two small models; MiniLM's cosine and retrieval
    numbers stay on the chapter (the summary)."""
    k, t = q4.key_number, q4.threshold
    if k is None or t is None:
        return None
    key, e = KeyNumber.of(q4), q4.evidence
    # the verdict reads SmolLM2's paired interval against the margin, not its mean: so does the sentence
    outcome = e.get("smollm2_outcome")
    reading = {"different": "interval beyond", "equivalent": "interval inside", "inconclusive": "interval across"}
    scale = f" ({e['scale']})" if e.get("scale") else ""
    mini = {True: "centring changes MiniLM's embeddings", False: "MiniLM's embeddings ignore centring"}.get(
        e.get("minilm_matters")
    )
    return (
        f"In two small models{scale}, swapping in LayerNorm moves SmolLM2's loss by {key.signed(k)}, "
        f"{reading.get(outcome, 'against')} ±{key.limit(t)}" + (f", and {mini}." if mini else ".")
    )


def b16_evidence(added: CentringAdded, minilm: dict, stream: StreamSummary) -> tuple[str, dict]:
    """Both models' part of B16 (judged in the quality chapter): its sentence and numbers, no verdict."""
    a, ret, shares = added.added, minilm["retrieval"], minilm["norm_input_along_ones_share"]
    top = added.top_norms
    text = (
        f"Real models: removing SmolLM2's common-offset dimension (adding centring) changes its loss by "
        f"{a['mean_difference']:+.4f} {NATS_PER_TOKEN} ({a['outcome']} vs ±{added.margin}), with at most "
        f"{significant(stream.max_share)} of a token's energy in that dimension; restoring it in MiniLM (removing "
        f"centring) leaves a median embedding cosine of {minilm['cosine_median']:.4f}."
    )
    evidence = {
        "smollm2_loss_change_centring_added_nats": a["mean_difference"],
        "smollm2_ci": [a["ci_low"], a["ci_high"]],
        "smollm2_outcome": a["outcome"],
        "margin_nats": added.margin,
        "smollm2_max_along_ones_share": stream.max_share,
        "smollm2_max_along_ones_share_first_token": stream.max_share_first,
        "smollm2_loss_change_first_token_uncentred": added.added_apart["mean_difference"],
        "largest_single_norm_effects": dict(zip(top["norm"], top["loss_change"])),
        "minilm_cosine_median": minilm["cosine_median"],
        "minilm_mrr_with_centring": ret["original"]["mrr"],
        "minilm_mrr_without_centring": ret["without centring"]["mrr"],
        "minilm_max_norm_input_along_ones_share": max(shares),
    }
    return text, evidence
