"""The quality chapter runs end to end on the smoke profile and records its verdicts."""
import math

from normlab.study.results import VERDICTS
from normlab.study.run import execute


def test_quality_notebook_smoke(tmp_path):
    results = execute("quality", "smoke", executed_dir=tmp_path / "ex", results_dir=tmp_path / "res", force=True)
    claims = {c["id"]: c for c in results["claims"]}
    assert {"A9", "B5", "B7", "B16"} <= set(claims)
    assert all(c["verdict"] in VERDICTS and c["section"] for c in claims.values())
    a9 = claims["A9"]["evidence"]
    # It learns: validation loss falls from about ln(256) = 5.55 by more than a nat even in a few steps.
    assert a9["initial_val_loss"] > 5.3 and a9["final_val_loss"] < a9["initial_val_loss"] - 1.0
    assert a9["resume_matches"] is True and a9["resume_max_abs_loss_difference"] <= 1e-6
    assert a9["diverged_runs"] == 0 and len(a9["corpus_sha256"]) == 64
    b7 = claims["B7"]["evidence"]
    assert 0.2 < b7["step_time_ratio_rms_over_layer"] < 5
    b5 = claims["B5"]["evidence"]
    # LayerNorm cannot see the mean, so removing it changes nothing there.
    assert abs(b5["projection_loss_increase_layer"]) < 1e-4
    assert 0 <= b5["offset_share_last_rms_trained"] <= 1
    assert all(math.isfinite(v) for v in (b5["projection_loss_increase_rms"], b5["seed_spread"]))
