"""Section "The extra dimension (B16)": whether the trained models use the all-ones direction RMSNorm
keeps, combined with the geometry and real-model chapters' evidence, and B16's verdict."""

from __future__ import annotations

import pandas as pd

from normlab.analysis.shared.paired import interval_text
from normlab.study.findings import Finding
from normlab.study.key_numbers import NATS_PER_BYTE, NATS_PER_TOKEN, KeyNumber

# What was seen before B16's test was registered as it stands (data/design.toml's change log), for its caveats; the
# page says the same in its own words.
B16_LOOKED = (
    "its removal test was read on A9's pilot runs (B16 holds at fbce4a0) before A9's confirmation was registered "
    "(2026-12-03); no confirmation run was seen"
)

B16_KEY = KeyNumber("paired loss change when the all-ones dimension is removed", NATS_PER_BYTE)
# when SmolLM2's paired test decides "used" (ours did not), the key number is SmolLM2's, per token of its tokenizer
B16_REAL_KEY = KeyNumber(
    "SmolLM2-135M's paired loss change when its common-offset dimension is removed", NATS_PER_TOKEN
)


def write_mean_drift(drift: pd.DataFrame) -> dict:
    """How the trained models' block writes move the per-token mean: average pairwise correlation of the
    write means, and the share of blocks pushing the same sign (RMSNorm), with LayerNorm's correlation."""
    trained = drift[drift.stage == "trained"]
    rms, layer = trained[trained.norm == "rms"], trained[trained.norm == "layer"]
    return {
        "correlation": float(rms.write_mean_correlation.mean()),
        "sign_agreement": float(rms.write_mean_sign_agreement.mean()),
        "correlation_layer": float(layer.write_mean_correlation.mean()),
    }


def geometry_rank_check(geometry: dict | None) -> bool | None:
    """Whether the geometry chapter found RMSNorm's outputs spanning one more dimension than LayerNorm's;
    None when it has not run or recorded no rank comparison."""
    if geometry is None:
        return None
    evidence = geometry["evidence"]
    ranks = evidence.get("ranks", {})
    if "rank_one_more" in evidence:
        return bool(evidence["rank_one_more"])
    if "RMSNorm" in ranks and "LayerNorm" in ranks:
        return ranks["RMSNorm"] == ranks["LayerNorm"] + 1
    return None


def real_model_uses_offset(real16: dict | None) -> bool:
    return real16 is not None and real16["evidence"].get("smollm2_outcome") == "different"


def b16_verdict(measures: dict, real16: dict | None, geometry: dict | None) -> str:
    """The extra dimension (geometry) and its use in training (ours or the real model's paired test): holds; the
    dimension unused: with caveats; geometry absent: training alone; geometry refuting the dimension: does not hold."""
    used = measures["uses_info"] or real_model_uses_offset(real16)
    geometry_ok = geometry_rank_check(geometry)
    if geometry_ok is None:
        return "holds with caveats" if used else "not testable here"
    if not geometry_ok:
        return "does not hold"
    return "holds" if used else "holds with caveats"


def b16_paragraph(
    b16: Finding,
    measures: dict,
    drift: dict,
    real16: dict | None,
    geometry: dict | None,
    *,
    correlation: float,
    sign_share: float,
) -> str:
    """B16's verdict paragraph: the measured numbers, the other chapters' parts, and the verdict as `b16` records
    it."""
    m = measures
    together = drift["correlation"] >= correlation and drift["sign_agreement"] >= sign_share
    if geometry is None:
        geometry_text = "The geometry chapter has not run: the extra dimension is not checked here."
    elif geometry_rank_check(geometry) is None:
        geometry_text = (
            f"The geometry chapter's evidence has no rank comparison ({geometry['summary']}), so it is not combined."
        )
    else:
        geometry_text = f"Geometry chapter: {geometry['summary']}"
    # undecided, the interval's own text says so
    use = ": the models use it" if m["uses_info"] else (": they do not use it" if m["no_info"] else "")
    return (
        f"Removing the all-ones component from the trained RMSNorm models changes the loss by "
        f"{interval_text(m['info_pair'], NATS_PER_BYTE)}{use}. The blocks' write means correlate at r = {drift['correlation']:.2f} "
        f"with {100 * drift['sign_agreement']:.0f}% sharing a sign "
        f"({'they drift together' if together else 'no common drift'}). {geometry_text} "
        + (
            f"Real models: {real16['summary']}"
            if real16
            else "The real-model chapter has not run: no real model's paired test."
        )
        + f"\n\n**B16 verdict: {b16.verdict}.**"
    )


def b16_finding(
    measures: dict,
    drift: dict,
    real16: dict | None,
    geometry: dict | None,
    *,
    margin: float,
    correlation: float,
    sign_share: float,
) -> Finding:
    """The key number is the one that decided "used": our own paired change when it does, else the real model's."""
    m, pair = measures, measures["info_pair"]
    geometry_ok = geometry_rank_check(geometry)
    if real_model_uses_offset(real16) and not m["uses_info"]:
        real_ci = real16["evidence"]["smollm2_ci"]
        key = dict(
            key_number=real16["evidence"]["smollm2_loss_change_centring_added_nats"],
            threshold=real16["evidence"]["margin_nats"],
            spread=(real_ci[1] - real_ci[0]) / (2 * 1.96),
            **B16_REAL_KEY.fields(),
        )
    else:
        key = dict(
            key_number=pair["mean_difference"], threshold=margin, spread=pair["standard_error"], **B16_KEY.fields()
        )
    return Finding(
        b16_verdict(measures, real16, geometry),
        # the verdict's two tests first (the geometry chapter's rank check, then a use in training), in one sentence
        {
            None: "The geometry chapter's rank check is absent",
            True: "The geometry chapter's rank check finds the extra dimension",
            False: "The geometry chapter's rank check finds no extra dimension",
        }[geometry_ok]
        # what our interval shows, in its own words; a use shown only by SmolLM2 (trained elsewhere) is named as its
        + f"; removing the all-ones component from our models changes the loss by "
        f"{interval_text(pair, NATS_PER_BYTE, margin=False)} against ±{margin:g}"
        + (": they use it. " if m["uses_info"] else ": no use shown. " if m["no_info"] else ": undecided. ")
        + (
            "Real-model evidence absent. "
            if real16 is None
            else "SmolLM2-135M (not trained here) uses it: adding centring changes its loss beyond its margin. "
            if real_model_uses_offset(real16)
            else f"SmolLM2-135M (not trained here) with centring added: {real16['evidence'].get('smollm2_outcome')}. "
        )
        + f"Block write means correlate at r = {drift['correlation']:.2f} ({100 * drift['sign_agreement']:.0f}% same sign).",
        {
            "projection_paired": pair,
            "uses_offset": m["uses_info"],
            "write_mean_correlation_rms": drift["correlation"],
            "write_mean_sign_agreement_rms": drift["sign_agreement"],
            "drift_together": drift["correlation"] >= correlation and drift["sign_agreement"] >= sign_share,
            "write_mean_correlation_layer": drift["correlation_layer"],
            "geometry_present": geometry is not None,
            "geometry_ok": geometry_ok,
            "realmodels_present": real16 is not None,
            "realmodels_smollm2_outcome": real16["evidence"].get("smollm2_outcome") if real16 else None,
            "used": m["uses_info"] or real_model_uses_offset(real16),
            # which test showed the use the verdict counts: ours, SmolLM2's (trained elsewhere), or neither
            "used_by": "ours" if m["uses_info"] else "SmolLM2" if real_model_uses_offset(real16) else None,
        },
        **key,
        caveats=(B16_LOOKED,),
        reads=("margin", "real_margin"),
    )
