"""The quality chapter runs end to end on the smoke profile and records its verdicts from paired statistics."""

import math

from normlab.study.results import VERDICTS
from smoke_book import chapter


def test_quality_notebook_smoke(smoke_book):
    results = chapter(smoke_book, "quality").results
    claims = {c["id"]: c for c in results["claims"]}
    assert {"A9", "B5", "B7", "B16", "B6"} <= set(claims)
    owned = {k: v for k, v in claims.items() if k != "B6"}
    assert all(c["verdict"] in VERDICTS and c["section"] for c in owned.values())
    assert claims["B6"]["verdict"] is None  # evidence only: the speed chapter owns B6
    a9 = claims["A9"]["evidence"]
    # It learns: validation loss falls from about ln(256) = 5.55 by more than a nat even in a few steps.
    assert a9["initial_val_loss"] > 5.3 and a9["final_val_loss"] < a9["initial_val_loss"] - 1.0
    assert a9["resume_matches"] is True and a9["resume_max_abs_loss_difference"] <= 1e-6
    assert a9["diverged_runs"] == 0 and len(a9["corpus_sha256"]) == 64
    paired = a9["paired_final_loss"]
    assert paired["pairs"] == 3 and paired["margin"] == a9["margin_nats"] == claims["A9"]["threshold"]
    # The verdict follows the registered confirmation's 95% t-interval: "holds" only with the whole of it inside the
    # margin, and only on every registered pair; the pilot's confidence sequence is recorded beside it
    assert "interval" not in paired and a9["pilot"]["interval"] == "95% confidence sequence"
    assert a9["confirmation_seeds"] == [1000, 1002] and a9["pilot_seeds"] == [0, 23]
    inside = -paired["margin"] < paired["ci_low"] and paired["ci_high"] < paired["margin"]
    # ... and only where both norms trained: every verdict of the chapter carries its arms beside the entropy, and an
    # arm short of the registered minimum makes it not testable here (the smoke profile's 30 steps train neither)
    for claim in owned.values():
        arms = claim["evidence"]["arms_trained"]
        assert set(arms["arms"]) == {"RMSNorm", "LayerNorm"}
        assert arms["unigram_entropy_nats"] == a9["unigram_entropy_nats"]
        if not all(arm["trained"] for arm in arms["arms"].values()):
            assert claim["verdict"] == "not testable here"
            assert claim["summary"].startswith("Not a verdict on the norm: ")
    trained = all(arm["trained"] for arm in claims["A9"]["evidence"]["arms_trained"]["arms"].values())
    assert (claims["A9"]["verdict"] == "holds") == (inside and trained)
    # The scale ladder: the profile's rungs and the chapter's own size, smallest first, each with its interval.
    ladder = a9["scale_ladder"]
    sizes = [rung["parameters"] for rung in ladder["rungs"]]
    assert len(sizes) == 3 and sizes == sorted(sizes) and a9["width"] in [rung["width"] for rung in ladder["rungs"]]
    # the scale A9's sentence names: the chapter's own size is a rung of its ladder, its loss in nats per byte
    assert a9["parameters"] in sizes and a9["hardware"] and claims["A9"]["unit"] == "nats per byte"
    assert all(r["hardware"] for r in ladder["rungs"])
    bounded = [r for r in ladder["rungs"] if r["ci_low"] is not None and r["ci_high"] is not None]
    assert all(r["ci_low"] <= r["mean_difference"] <= r["ci_high"] for r in bounded)
    assert ladder["trend"] in ("shrinks", "grows", "stays within the margin", "cannot tell")
    b7 = claims["B7"]["evidence"]
    assert 0.2 < b7["step_time_ratio_rms_over_layer"] < 5 and b7["step_time_ratio_spread"] >= 0
    # B7's key number is the half that decided: the step-time ratio once the curves coincide, else the end of the
    # curves' confirmation interval farthest from 0
    curves = b7["paired_curve_loss"]
    if b7["curves_half"] == "holds":
        assert claims["B7"]["key_number"] == b7["step_time_ratio_rms_over_layer"]
    else:
        assert claims["B7"]["key_number"] == max(abs(curves["ci_low"]), abs(curves["ci_high"]))
    b5 = claims["B5"]["evidence"]
    # LayerNorm cannot see the mean, so removing it changes nothing there.
    assert abs(b5["projection_loss_increase_layer"]) < 1e-4
    for key in ("offset_share_last", "ones_share_last", "offset_share_without_top_channel"):
        assert 0 <= b5[key] <= 1, key
    assert b5["massive_ratio_last"] >= 1 and math.isfinite(b5["projection_paired"]["mean_difference"])
    # Absent evidence from other chapters is said, never skipped.
    assert "absent" in claims["B5"]["summary"] or b5["realmodels_present"]
    b16 = claims["B16"]["summary"].lower()
    # (the geometry chapter's evidence may be present with no rank comparison: then it too is absent here)
    assert ("geometry chapter's rank check is absent" in b16) == (claims["B16"]["evidence"]["geometry_ok"] is None)
    assert ("real-model evidence absent" in b16) == (not claims["B16"]["evidence"]["realmodels_present"])
    # a use counted from SmolLM2 (trained elsewhere) is named as SmolLM2's, never as "training uses it"
    assert "training uses it" not in b16
    if claims["B16"]["evidence"]["used_by"] == "SmolLM2":
        assert "smollm2-135m (not trained here) uses it" in b16
