"""The schedule model fitted on one measured run and tested on another (normlab.bench.speed_model), the reader on the
12a0522 kernels (normlab.bench.old_kernels), and the registered predictions (data/speed-predictions.toml)."""

import math
import re
import shutil
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
import tomllib

from normlab.bench import old_kernels
from normlab.bench import speed_model as sm

ROOT = Path(__file__).resolve().parents[1]


def _kernel(direction, hbm, l2, kind="rms", d=4096, programs=264):
    return dict(direction=direction, kind=kind, d=d, kernel=f"{kind}_{direction}_onchip", programs=programs,
                hbm_bytes_per_row=hbm, l2_bytes_per_row=l2, in_flight_per_sm=1e6)  # fmt: skip


def _synthetic(truth: sm.Constants, l2_heavy: bool = True) -> pd.DataFrame:
    """Cases whose measured fraction is the model's own at `truth`: forward at several widths, some L2-bound."""
    rows = []
    for d in (2048, 4096, 8192, 16384, 32768):
        for dtype, e in (("bfloat16", 2), ("float32", 4)):
            copy_s = 2 * 8192 * d * e / 4.1e12 + 8e-6
            for l2_factor in (1.0, 3.0 if l2_heavy else 1.2):
                kernels = [_kernel("forward", 2 * d * e, l2_factor * 2 * d * e, d=d)]
                rows.append(dict(direction="forward", dtype=dtype, rows=8192, d=d, copy_s=copy_s,
                                 bytes=2 * 8192 * d * e, kernels=kernels, unstable=False))  # fmt: skip
    frame = pd.DataFrame(rows)
    return frame.assign(measured=[sm.predicted_fraction(case, truth) for _, case in frame.iterrows()])


def test_the_fit_recovers_the_constants_that_made_the_data():
    truth = replace(sm.Constants(), efficiency=0.9, l2_tbs=9.0, fixed_forward_s=20e-6)
    cases = _synthetic(truth)
    result = sm.fit(cases, bootstrap=3)
    assert set(result["fitted"]) == {"efficiency", "l2_tbs", "fixed_forward_s"}
    assert "fixed_backward_s" in result["not_fitted"]  # no forward+backward case: kept as assumed
    fitted = result["constants"]
    assert fitted.efficiency == pytest.approx(0.9, rel=0.02)
    assert fitted.l2_tbs == pytest.approx(9.0, rel=0.03)
    assert fitted.fixed_forward_s == pytest.approx(20e-6, rel=0.1)
    ratios = sm.predict_frame(cases, fitted)["ratio"]
    assert (ratios - 1).abs().max() < 0.02


def test_a_constant_no_case_binds_is_not_fitted_and_keeps_its_assumed_value():
    truth = replace(sm.Constants(), efficiency=0.9, l2_tbs=20.0, fixed_forward_s=20e-6)
    cases = _synthetic(truth, l2_heavy=False)  # L2 traffic 1.2x HBM at 20 TB/s: never the bound
    result = sm.fit(cases, bootstrap=2)
    assert "l2_tbs" in result["not_fitted"]
    assert result["constants"].l2_tbs == sm.ASSUMED["l2_tbs"]


def test_a_record_without_a_same_run_copy_is_left_out_and_named():
    truth = sm.Constants()
    cases = _synthetic(truth).head(3)
    cases.loc[cases.index[1], "copy_s"] = float("nan")
    kept, left = sm.usable(cases)
    assert len(kept) == 2 and list(left["why"]) == ["no same-run copy"]


def test_old_cases_reads_the_committed_runs_triton_records():
    import json

    from normlab.bench import report

    frame = report.frame(json.loads((ROOT / "data" / "gpu-bench.json").read_text()))
    cases = sm.old_cases(frame)
    assert len(cases) > 0 and set(cases["implementation"]) <= set(sm.OLD_IMPLEMENTATIONS)
    both = cases[cases["direction"] == "forward+backward"]
    assert both["launches"].map(len).eq(2).all()  # the forward kernel, then the backward's
    assert cases["copy_s"].gt(0).all()


def _device_lines(fingerprint, measured):
    return [
        {"type": "provenance", "dry_run": False, "kernel_fingerprint": fingerprint},
        {"type": "case", "status": "ok", "implementation": "triton", "norm": "rms", "direction": "forward",
         "dtype": "bfloat16", "rows": 8192, "d": 4096, "fraction_of_copy": measured},
    ]  # fmt: skip


REGISTERED = {
    "kernel_fingerprint": "abc",
    "prediction": [dict(implementation="triton", norm="rms", direction="forward", dtype="bfloat16", rows=8192, d=4096,
                        predicted=0.9, low=0.8, high=1.0)],
}  # fmt: skip


def test_a_run_of_other_kernels_is_a_mismatch_and_not_scored():
    scored = sm.score(REGISTERED, _device_lines("other", 0.85), None)
    assert scored["summary"]["status"].startswith("mismatch")
    assert "ratio" not in scored["cases"][0] and "scored" not in scored["summary"]


def test_a_run_of_the_registered_kernels_is_scored_against_its_interval():
    inside = sm.score(REGISTERED, _device_lines("abc", 0.85), None)
    assert inside["summary"]["status"] == "scored" and inside["cases"][0]["inside"]
    assert inside["cases"][0]["ratio"] == pytest.approx(0.9 / 0.85)
    outside = sm.score(REGISTERED, _device_lines("abc", 0.5), None)
    assert not outside["cases"][0]["inside"] and outside["summary"]["inside"] == 0


def test_the_registry_text_reads_back_as_written():
    text = sm.registry_text({"commit": 'a"b', "n": 3}, {"t": {"x": 0.125, "names": ["a", "b"]}},
                            {"row": [{"v": 1.5, "ok": True}, {"v": 2.0, "skip": None}]})  # fmt: skip
    back = tomllib.loads(text)
    assert back["commit"] == 'a"b' and back["t"]["names"] == ["a", "b"] and back["t"]["x"] == 0.125
    assert back["row"] == [{"v": 1.5, "ok": True}, {"v": 2.0}]


def test_the_registered_predictions_cover_every_target_with_an_interval():
    registry = sm.load_registry(ROOT / sm.REGISTRY)
    assert re.fullmatch(r"[0-9a-f]{64}", registry["kernel_fingerprint"])
    assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?", registry["commit"]) and registry["registered"]
    keys = {(p["norm"], p["direction"], p["dtype"], p["d"]) for p in registry["prediction"]}
    assert len(keys) == 2 * 2 * 2 * 3 == len(registry["prediction"])
    for p in registry["prediction"]:
        assert 0 < p["low"] <= p["predicted"] <= p["high"], p
    held = registry["held_out"]
    assert held["min_ratio"] <= held["median_ratio"] <= held["max_ratio"] and held["cases"] >= 5
    assert {row["run"] for row in registry["held_out_case"]} == {Path(registry["test_run"]).name}
    assert {row["run"] for row in registry["fit_case"]} == {Path(registry["fit_run"]).name}


def test_the_old_launch_constants_are_read_from_the_commit():
    if shutil.which("git") is None:
        pytest.skip("no git here")
    try:
        constants = old_kernels.launch_constants(
            old_kernels.git_show(old_kernels.COMMIT, "src/normlab/ops/launch.py", ROOT)
        )
    except Exception as error:  # a checkout without that history
        pytest.skip(f"commit {old_kernels.COMMIT} not readable here: {error}")
    assert constants["BACKWARD_ONCHIP_LIMIT"] <= constants["ONCHIP_LIMIT"]
    launch = old_kernels.launches("rms", "backward", 16384, 8192, "bf16", constants)
    assert launch["kernel"] == "rms_backward_chunked" and launch["programs"] == 2 * old_kernels.SMS


def test_the_reader_on_the_old_kernels_counts_their_bytes():
    from normlab.bench import compiled_schedule

    if compiled_schedule.unavailable() or shutil.which("git") is None:
        pytest.skip("no sm_90 compilation or no git here")
    cases = [dict(kind="rms", direction="forward", d=4096, rows=8192, dtype="bf16"),
             dict(kind="rms", direction="forward", d=65536, rows=8192, dtype="fp32")]  # fmt: skip
    records = old_kernels.schedule(cases, ROOT)["records"]
    onchip, chunked = records
    assert "error" not in onchip and "error" not in chunked
    # on chip: x read and y written once, from HBM; the weight once per program from L2
    assert onchip["hbm_bytes_per_row"] == pytest.approx(2 * 4096 * 2, rel=0.01)
    # chunked at 64K fp32: the rows in flight pass the L2, so the second pass reads x from HBM again
    assert not chunked["rows_fit_in_l2"]
    assert chunked["hbm_bytes_per_row"] == pytest.approx(3 * 65536 * 4, rel=0.01)
    assert math.isclose(chunked["l2_bytes_per_row"] / (65536 * 4), 4, rel_tol=0.01)  # x twice, w, y


def test_the_speed_page_pastes_every_registered_number_it_names_rounded_as_a_sentence_reads_it():
    import re
    from pathlib import Path

    from normlab.analysis.speed import predicted

    glued = predicted.glued(predicted.registry())
    page = (Path(__file__).resolve().parents[1] / "notebooks" / "speed.py").read_text(encoding="utf-8")
    named = set(re.findall(r"\{glue:text\}`((?:model|registered)_\w+)`", page))
    assert named and named <= set(glued), sorted(named - set(glued))
    for key, value in glued.items():  # no six-digit floats, no code names in the prose
        assert not re.search(r"\d\.\d{3,}", str(value)) and "_s" not in str(value), (key, value)
