"""Section "The residual stream (B5)": the trained models' stream statistics, their common offset, the
loss change from removing the all-ones component, and B5's verdict."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import torch

from normlab.analysis.quality.training import model_config
from normlab.analysis.shared.paired import interval_outcome, interval_text, paired_difference
from normlab.analysis.shared.stream import deepest_value, mean_projection_effect, stream_report
from normlab.gpt.model import GPT, GPTConfig
from normlab.runtime.jobs import load_weights
from normlab.study.findings import Finding, rule_text
from normlab.study.key_numbers import NATS_PER_BYTE, SHARE, KeyNumber

# What was seen before B5's rule was registered as it stands (data/design.toml's change log), for its caveats; the
# page says the same in its own words.
B5_LOOKED = (
    "its rule was rewritten (2026-12-03) after the cpu builds at 7a3a80b and fbce4a0 had been read (offset 0.2215, "
    "SmolLM2's 0.458, the ablation set to the mean equivalent and to zero different), and its removal test was read "
    "on A9's pilot runs before A9's confirmation was registered"
)

B5_KEY = KeyNumber(
    "share of the residual stream's energy in the common offset after the deepest block measured (SmolLM2's where it "
    "ran, else this chapter's models)",
    SHARE,
)


@dataclass
class StreamTables:
    stream: pd.DataFrame  # one row per (norm, seed, stage, stream position): `stream_report` rows
    drift: pd.DataFrame  # one row per (norm, seed, stage): how the blocks' write means move together
    projection: pd.DataFrame  # one row per (norm, seed): loss with and without the all-ones component


def stream_measurements(runs: dict[tuple[str, int], dict], settings: dict, corpus, device: str) -> StreamTables:
    """Every trained model and the same model at initialisation (rebuilt from the run's seed), on fixed
    validation batches: the stream statistics, the write-mean drift, and the mean-removal loss test."""
    batch, context = settings["batch_size"], settings["context"]
    probe = corpus.batch("val", batch, context, torch.Generator().manual_seed(123), device)[0]
    probe_batches = [
        corpus.batch("val", batch, context, torch.Generator().manual_seed(200 + i), device)
        for i in range(settings["eval_batches"])
    ]
    stream_rows, drift_rows, projection_rows = [], [], []
    for (norm, seed), run in runs.items():
        cfg = GPTConfig(**model_config(settings, norm))
        trained = GPT(cfg).to(device)
        trained.load_state_dict(load_weights(run["weights_path"]))
        torch.manual_seed(seed)  # the run's own initial weights, rebuilt: the stream at initialisation
        for stage, model in {"trained": trained, "init": GPT(cfg).to(device)}.items():
            rows, drift = stream_report(model, probe)
            stream_rows += [{**r, "norm": norm, "seed": seed, "stage": stage} for r in rows]
            drift_rows.append({**drift, "norm": norm, "seed": seed, "stage": stage})
        projection_rows.append({**mean_projection_effect(trained, probe_batches), "norm": norm, "seed": seed})
    return StreamTables(pd.DataFrame(stream_rows), pd.DataFrame(drift_rows), pd.DataFrame(projection_rows))


LAST_BLOCK_COLUMNS = {
    "ones_share": "(a) all-ones share",
    "offset_share": "(b) common offset share",
    "offset_share_without_top": "(b) without the top channel",
    "top_channel_share": "(c) top channel share",
    "massive_ratio": "(c) max |x| / median |x|",
    "token_mean_cv": "CV of per-token mean",
}


def last_block_table(stream: pd.DataFrame, depth: int) -> pd.DataFrame:
    """The three measures after the last block, mean over seeds, per norm and stage."""
    last = stream[stream.layer == depth]
    means = last.groupby(["norm", "stage"])[list(LAST_BLOCK_COLUMNS)].mean().reset_index()
    return means.rename(columns=LAST_BLOCK_COLUMNS)


def offset_measures(tables: StreamTables, depth: int, margin: float) -> dict:
    """The trained RMSNorm models' common offset after the last block and at the embeddings, and the paired
    loss change from removing the all-ones component (RMSNorm), with LayerNorm's change for contrast."""
    stream = tables.stream
    rms_trained = stream[(stream.norm == "rms") & (stream.stage == "trained")]
    last = rms_trained[rms_trained.layer == depth].set_index("seed")
    first = rms_trained[rms_trained.layer == 0].set_index("seed")
    rms_proj = tables.projection[tables.projection.norm == "rms"].sort_values("seed")
    layer_proj = tables.projection[tables.projection.norm == "layer"]
    # a t-interval: these are A9's confirmation models, whose number was fixed before they ran (data/design.toml, B5)
    info_pair = paired_difference(rms_proj.loss.tolist(), rms_proj.loss_mean_removed.tolist(), margin)
    return {
        "offset_last": float(last.offset_share.mean()),
        "offset_first": float(first.offset_share.mean()),
        "offset_sd": float(last.offset_share.std()),
        "ones_last": float(last.ones_share.mean()),
        "without_top": float(last.offset_share_without_top.mean()),
        "massive": float(last.massive_ratio.mean()),
        "info_pair": info_pair,
        "uses_info": info_pair["outcome"] == "different",
        "no_info": info_pair["outcome"] == "equivalent",
        "layer_increase_mean": float(layer_proj.loss_increase.mean()),
        "layer_increase_max_abs": float(layer_proj.loss_increase.abs().max()),
    }


def real_offset(real: dict | None) -> tuple[str, float] | None:
    """The deepest layer's common-offset share the real-model chapter recorded for B5, or None."""
    # The real-model chapter calls (b) the shared mean vector's share, per layer; its last entry is the deepest layer.
    return deepest_value(real["evidence"], "shared_mean_share_by_layer", "offset_share_last") if real else None


ABLATION = "massive_activation_ablation"  # the real-model chapter's record of Sun et al.'s ablation, in B5's evidence


def ablation_outcomes(real: dict | None, ablation_margin: float) -> dict | None:
    """Sun et al.'s ablation as the real-model chapter recorded it (SmolLM2's massive activations set to their mean,
    and to zero, paired by chunk), each interval judged here against the registered `ablation_margin` (nats per
    token); None when the real-model chapter has not run, recorded no ablation, or found no massive activation to
    edit (a cut of the model too shallow for them: both edits then leave the model as it was)."""
    record = ((real or {}).get("evidence") or {}).get(ABLATION)
    if not record or record.get("depth_passed_rule") is False or not record.get("massive_entries"):
        return None  # no massive activation found, or none edited: the ablation tested nothing
    out = {}
    for name, key in (("mean", "loss_change_set_to_their_mean"), ("zero", "loss_change_set_to_zero")):
        change = record.get(key) or {}
        if change.get("ci_low") is None or change.get("ci_high") is None:
            return None
        out[name] = {**change, "outcome": interval_outcome(change["ci_low"], change["ci_high"], ablation_margin)}
    out["depth"] = record.get("edited_depth")
    out["entries"] = record.get("massive_entries")
    return out


def b5_parts(measures: dict, real: dict | None, offset_large: float, ablation_margin: float) -> dict:
    """What B5's rule reads, each part named: the offset large in our trained models (≥ `offset_large` after the last
    block and above the embeddings) and in the deep real model (its deepest layer ≥ `offset_large`); per-token
    information shown by our removal test (the all-ones component's removal costs more than the margin) or by
    Sun et al.'s ablation (the mean does not stand in for the massive activations); a constant shown by our removal
    test (inside the margin) and by the ablation (the mean stands in, inside `ablation_margin`)."""
    deep = real_offset(real)
    ablation = ablation_outcomes(real, ablation_margin)
    mean_outcome = ablation["mean"]["outcome"] if ablation else None
    return {
        "large_ours": measures["offset_last"] >= offset_large and measures["offset_last"] > measures["offset_first"],
        "large_real": deep is not None and deep[1] >= offset_large,
        "per_token_ours": bool(measures["uses_info"]),
        "per_token_real": mean_outcome == "different",
        "constant_ours": bool(measures["no_info"]),
        "constant_real": mean_outcome == "equivalent",
        "real_offset": deep[1] if deep else None,
        "ablation": ablation,
    }


def b5_verdict(parts: dict) -> str:
    """B5's registered rule (data/design.toml, [claims.B5] test), on `b5_parts`:

    - does not hold: either test shows per-token information, or the offset is small in our models and in the deep
      real model alike;
    - not testable here: neither test shows a constant (our interval and the ablation's both undecided, or absent);
    - holds: the deep real model's offset is large, and both tests show a constant;
    - holds with caveats: otherwise (large in one of the two, a constant shown by one of the two tests)."""
    p = parts
    if p["per_token_ours"] or p["per_token_real"]:
        return "does not hold"
    if not (p["large_ours"] or p["large_real"]):
        return "does not hold"
    if not (p["constant_ours"] or p["constant_real"]):
        return "not testable here"
    if p["large_real"] and p["constant_ours"] and p["constant_real"]:
        return "holds"
    return "holds with caveats"


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def b5_paragraph(
    b5: Finding,
    measures: dict,
    real: dict | None,
    *,
    offset_large: float,
    ablation_margin: float,
    margin: float,
    depth: int,
) -> str:
    """B5's verdict paragraph: the measured numbers, the registered rule, which of its parts each measurement meets,
    and the verdict as `b5` records it."""
    m = measures
    parts = b5_parts(m, real, offset_large, ablation_margin)
    if real is None:
        real_text = (
            "The real-model chapter has not run, so the 'dozens of layers' part rests on this small model alone."
        )
    else:
        deep = parts["real_offset"]
        shown = f"deepest layer's common-offset share {deep:.3f}" if deep is not None else "no common-offset share"
        real_text = f"The real-model chapter records ({shown}): {real['summary']}"
    ablation = parts["ablation"]
    if ablation is None:
        ablation_text = "Sun et al.'s ablation is not among the real-model chapter's numbers, so it decides nothing."
    else:
        mean, zero = ablation["mean"], ablation["zero"]
        ablation_text = (
            f"Sun et al.'s ablation in SmolLM2 (after block {ablation['depth']}): its massive activations set to their "
            f"mean change the loss by {mean['mean_difference']:+.4f} nats per token (95% CI {mean['ci_low']:+.4f}.."
            f"{mean['ci_high']:+.4f}, **{mean['outcome']}** against ±{ablation_margin:g}); set to zero, by "
            f"{zero['mean_difference']:+.3g} (95% CI {zero['ci_low']:+.3g}..{zero['ci_high']:+.3g}, "
            f"**{zero['outcome']}**)."
        )
    return (
        f"In the trained RMSNorm models, after {depth} blocks: (a) the all-ones share is {m['ones_last']:.3f}; (b) the "
        f"common offset holds {m['offset_last']:.3f} of the energy (sd over seeds {m['offset_sd']:.3f}; embeddings "
        f"{m['offset_first']:.3f}), {m['without_top']:.3f} without the largest channel; (c) the largest |x| is "
        f"{m['massive']:.1f}× the median. Removing the all-ones component before every norm changes the loss by "
        f"{interval_text(m['info_pair'], NATS_PER_BYTE)} (LayerNorm models: {m['layer_increase_max_abs']:.1e}, blind by "
        f"construction). {real_text} {ablation_text}\n\n"
        f"**Rule** (registered in data/design.toml). {rule_text('B5', b5.reads)}\n\n"
        f"**What it meets.** Offset large in our {depth}-block models: {_yes(parts['large_ours'])}; in the deep real "
        f"model: {_yes(parts['large_real'])}. Per-token information shown by our removal test: "
        f"{_yes(parts['per_token_ours'])}; by the ablation: {_yes(parts['per_token_real'])}. A constant shown by our "
        f"removal test: {_yes(parts['constant_ours'])}; by the ablation: {_yes(parts['constant_real'])}.\n\n"
        f"**B5 verdict: {b5.verdict}.**"
    )


def b5_finding(
    measures: dict,
    real: dict | None,
    *,
    offset_large: float,
    ablation_margin: float,
    margin: float,
    depth: int,
    corpus_sha256: str,
) -> Finding:
    m = measures
    parts = b5_parts(m, real, offset_large, ablation_margin)
    deep = parts["real_offset"]
    ablation = parts["ablation"]
    # The key number is the share the rule's "large" turns on at the claim's depth ("after dozens of layers"): the
    # deep real model's where the real-model chapter ran, else our shallow models'.
    key, spread = (deep, None) if deep is not None else (m["offset_last"], m["offset_sd"])
    ablation_sentence = (
        "Sun et al.'s ablation not recorded."
        if ablation is None
        else f"In SmolLM2 its massive activations set to their mean change the loss by "
        f"{ablation['mean']['mean_difference']:+.4f} nats per token ({ablation['mean']['outcome']} against "
        f"±{ablation_margin:g}), set to zero by {ablation['zero']['mean_difference']:+.3g} "
        f"({ablation['zero']['outcome']})."
    )
    return Finding(
        b5_verdict(parts),
        # the first sentence (the ledger's): the key number against "large", and our removal test read against its
        # margin; the shallow models' shares and the ablation follow it
        ("In SmolLM2's deepest layer" if deep is not None else f"After {depth} trained RMSNorm blocks")
        + f" the common offset holds {B5_KEY.format(key)} of the energy (large from {B5_KEY.limit(offset_large)}); "
        "removing the all-ones "
        f"component from our models costs {interval_text(m['info_pair'], NATS_PER_BYTE, margin=False)} against "
        f"±{margin:g}"
        + (
            ": per-token information."
            if parts["per_token_ours"]
            else ": a constant."
            if parts["constant_ours"]
            else ", undecided."
        )
        + f" After {depth} trained RMSNorm blocks the common offset (per-channel mean) holds {m['offset_last']:.2f} of "
        f"the energy (embeddings {m['offset_first']:.2f}; all-ones share {m['ones_last']:.3f}; largest |x|/median "
        f"{m['massive']:.0f}). " + ("Real-model evidence absent." if real is None else ablation_sentence),
        {
            "offset_share_last": m["offset_last"],
            "offset_share_embeddings": m["offset_first"],
            "offset_share_sd": m["offset_sd"],
            "ones_share_last": m["ones_last"],
            "offset_share_without_top_channel": m["without_top"],
            "massive_ratio_last": m["massive"],
            "projection_paired": m["info_pair"],
            "projection_loss_increase_layer": m["layer_increase_mean"],
            "realmodels_present": real is not None,
            "realmodels_offset_share_deepest": deep,
            "key_from": "SmolLM2's deepest layer" if deep is not None else f"this chapter's {depth}-block models",
            "massive_ablation": ablation,
            "ablation_margin_nats_per_token": ablation_margin,
            "rule_parts": {k: v for k, v in parts.items() if k not in ("ablation", "real_offset")},
            "large": parts["large_ours"],
            "depth": depth,
            "corpus_sha256": corpus_sha256,
        },
        key_number=key,
        threshold=offset_large,
        spread=spread,
        **B5_KEY.fields(),
        caveats=(B5_LOOKED,),
        reads=("offset_large", "margin", "ablation_margin"),
    )
