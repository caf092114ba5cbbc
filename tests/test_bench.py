"""The benchmark harness: byte model, pass census, timing arithmetic, bad input, and a consistent results document.

Nothing here asserts on speed: timings are only checked to be positive,
finite and consistent with the numbers derived from them.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

import normlab
from normlab.analysis.speed import arithmetic, hardware, memory_bound, paper, partial, ratio, small_batch
from normlab.analysis.speed import passes as pass_claims  # normlab.bench.passes is the census tracer
from normlab.bench import harness, passes, provenance, report, timing, traffic
from normlab.bench.__main__ import main as bench_main
from normlab.bench.cases import Case, build_cases, skip_reason
from normlab.bench.profiles import PROFILE_SETTINGS, get_profile
from normlab.bench.timing import TimingSettings, buffer_count, summarise, time_call
from normlab.runtime import code_identity

# ---------------------------------------------------------------- byte model


@pytest.mark.parametrize("dtype, size", [(torch.float32, 4), (torch.bfloat16, 2)])
def test_forward_bytes_are_x_read_y_written_and_the_parameters(dtype, size):
    rows, d = 8192, 4096
    assert traffic.must_move("layer", "forward", rows, d, dtype).total == 2 * rows * d * size + 2 * d * size
    assert traffic.must_move("rms", "forward", rows, d, dtype).total == 2 * rows * d * size + d * size


def test_backward_bytes_add_dy_x_dx_statistics_and_parameter_gradients():
    rows, d, s = 1000, 256, 4
    ln = traffic.must_move("layer", "forward+backward", rows, d, torch.float32)
    # forward x, y; backward dy, x, dx  -> 5 tensors
    assert ln.activations == 5 * rows * d * s
    # weight+bias read in forward and backward, their gradients written
    assert ln.parameters == 3 * 2 * d * s
    # mean and rstd (fp32) written by the forward, read by the backward
    assert ln.statistics == 2 * 2 * rows * 4
    rms = traffic.must_move("rms", "forward+backward", rows, d, torch.float32)
    assert rms.parameters == 3 * d * s and rms.statistics == 2 * rows * 4


def test_copy_bytes_and_effective_passes():
    assert traffic.copy_bytes(10, 20, torch.float32) == 2 * 10 * 20 * 4
    assert traffic.effective_passes(3.0, 1.5) == pytest.approx(4.0)
    assert traffic.bandwidth(2e9, 2.0) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="positive"):
        traffic.bandwidth(1, 0.0)


def test_byte_model_rejects_unknown_names():
    with pytest.raises(ValueError, match="valid norms: layer, rms"):
        traffic.must_move("batch", "forward", 1, 1, torch.float32)
    with pytest.raises(ValueError, match="valid directions"):
        traffic.must_move("rms", "backward", 1, 1, torch.float32)
    with pytest.raises(ValueError, match="valid: chunked"):
        traffic.strategy_passes("rms", "chunked two-pass")


def test_strategy_passes_put_two_pass_layer_norm_one_read_above_welford_and_rms():
    assert traffic.strategy_passes("layer", "persistent") == traffic.strategy_passes("rms", "persistent") == 2
    assert traffic.strategy_passes("layer", "chunked two-pass") == traffic.strategy_passes("rms", "chunked") + 1
    assert traffic.strategy_passes("layer", "chunked welford") == traffic.strategy_passes("rms", "chunked")


# ---------------------------------------------------------------- pass census


def _census(fn, x):
    traced = passes.trace_traffic(fn, x.numel(), x.numel() * x.element_size())
    profiled = passes.profiler_ops(fn, x.numel())
    return traced, profiled


def test_eager_composites_make_the_passes_the_byte_model_counts_and_the_profiler_agrees():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 256, generator=g)
    w, b = torch.rand(256, generator=g) + 0.5, torch.randn(256, generator=g)
    # RMS (HF order, fp32): pow (r+w), mean (r), x*rsqrt (r+w), weight*y (r+w) = 7 full-size passes, 4 ops
    rms, rms_prof = _census(lambda: normlab.rms_norm(x, w, backend="eager"), x)
    assert rms.passes == 7 and len(rms.op_names) == 4 == rms_prof.count
    # LN composite: mean, sub, pow, mean, mul(rsqrt), mul(weight), add(bias) = 1+2+2+1+2+2+2 = 12 passes, 7 ops
    ln, ln_prof = _census(lambda: normlab.layer_norm(x, w, b, backend="eager"), x)
    assert ln.passes == 12 and len(ln.op_names) == 7 == ln_prof.count
    assert passes.count_reductions(ln.op_names) == 2 and passes.count_reductions(rms.op_names) == 1
    # the native fused LayerNorm is one op: one read, one write
    native, native_prof = _census(lambda: normlab.layer_norm(x, w, b, backend="torch"), x)
    assert native.passes == 2 and native.op_names == ["native_layer_norm"] == native_prof.names


def test_bf16_composites_count_their_fp32_temporaries_as_double_passes():
    x = torch.randn(32, 128).bfloat16()
    w = torch.ones(128, dtype=torch.bfloat16)
    traced, profiled = _census(lambda: normlab.rms_norm(x, w, backend="eager"), x)
    # up-cast (r1 + w2), pow (r2 + w2), mean (r2), x*rsqrt (r2 + w2), down-cast (r2 + w1), weight*y (r1 + w1)
    assert traced.passes == 3 + 4 + 2 + 4 + 3 + 2
    assert len(traced.op_names) == profiled.count


def test_views_move_nothing_but_a_copy_forced_by_layout_counts():
    x = torch.randn(16, 64)
    views = passes.trace_traffic(lambda: x.view(64, 16).t().unsqueeze(0), x.numel(), x.numel() * 4)
    assert views.passes == 0 and views.moving_ops == []
    # flattening a transposed tensor has to copy it: one read, one write
    copied = passes.trace_traffic(lambda: x.t().reshape(-1), x.numel(), x.numel() * 4)
    assert copied.passes == 2 and len(copied.moving_ops) == 1


# ---------------------------------------------------------------- timing


def test_summarise_reports_median_quartiles_and_extremes():
    timing = summarise([4.0, 1.0, 3.0, 2.0, 5.0], number=10, buffers=3)
    assert (timing.median_s, timing.min_s, timing.max_s) == (3.0, 1.0, 5.0)
    assert (timing.q25_s, timing.q75_s) == (2.0, 4.0) and timing.iqr_s == 2.0
    assert timing.repeats == 5 and timing.number == 10


def test_time_call_rotates_through_every_input_set():
    seen = []
    settings = TimingSettings(warmup=1, min_repeats=3, max_repeats=3, budget_s=1e-3, min_repeat_s=1e-9)
    timing = time_call(lambda i: seen.append(i), [(0,), (1,), (2,)], settings, torch.device("cpu"))
    assert set(seen) == {0, 1, 2}
    assert timing.repeats == 3 and math.isfinite(timing.median_s) and timing.median_s > 0


def test_buffer_count_spreads_inputs_but_stays_bounded():
    settings = TimingSettings(rotation_bytes=1000, max_buffers=8)
    assert buffer_count(10, settings) == 8
    assert buffer_count(400, settings) == 3
    assert buffer_count(10**9, settings) == 2


def test_timing_settings_reject_impossible_values():
    with pytest.raises(ValueError, match="min_repeats <= max_repeats"):
        TimingSettings(min_repeats=5, max_repeats=2)


# ---------------------------------------------------------------- bad input and availability


def test_unknown_profile_dtype_or_backend_is_rejected_with_the_valid_list():
    with pytest.raises(ValueError, match="valid profiles: smoke, cpu, gpu"):
        get_profile("fast")
    with pytest.raises(ValueError, match="valid dtypes: float32, bfloat16, float16"):
        get_profile("smoke", dtypes=["fp8"])
    with pytest.raises(ValueError, match="valid backends: .*eager.*auto"):
        get_profile("smoke", backends=["cuda-graphs"])


def test_cli_reports_bad_input_and_exits_2(capsys):
    assert bench_main(["--profile", "fast", "--no-progress"]) == 2
    assert "valid profiles: smoke, cpu, gpu" in capsys.readouterr().err
    assert bench_main(["--profile", "smoke", "--backend", "nope", "--no-progress"]) == 2
    assert "valid backends" in capsys.readouterr().err


def test_gpu_profile_without_a_gpu_says_so():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(RuntimeError, match="needs CUDA"):
        harness.run("gpu", progress=False)


def test_triton_and_chunked_cases_are_skipped_on_cpu_with_a_reason():
    profile = PROFILE_SETTINGS["smoke"]
    cases = build_cases(profile)
    triton = [c for c in cases if c.backend == "triton"]
    assert triton and all("not a speed measurement" in skip_reason(c, profile, torch.device("cpu")) for c in triton)
    assert {c.study for c in cases} == {"sweep", "backward", "small-batch", "partial", "chunked"}


def test_every_profile_grid_covers_both_norms_and_the_studies_the_issue_asks_for():
    cpu = PROFILE_SETTINGS["cpu"]
    gpu = PROFILE_SETTINGS["gpu"]
    assert cpu.train_rows >= 8192 and gpu.train_rows >= 8192
    assert min(cpu.sweep_d) == 256 and max(cpu.sweep_d) == 16384 and max(gpu.sweep_d) == 65536
    assert max(cpu.small_rows) <= 16 and max(gpu.small_rows) <= 16
    assert {"float32", "bfloat16"} <= set(cpu.sweep_dtypes)
    assert any(c.d == 4096 and c.rows == 8192 and c.implementation == "auto" for c in build_cases(cpu))


# ---------------------------------------------------------------- a small real run


@pytest.fixture(scope="module")
def document():
    return harness.run("smoke", backends=["eager", "torch", "triton", "auto"], dtypes=["float32"], progress=False)


def test_run_document_carries_environment_and_only_valid_statuses(document):
    assert document["hardware"]["cpu"] and document["versions"]["torch"] == torch.__version__
    assert {r["status"] for r in document["records"]} <= {"ok", "skipped", "error"}
    assert not [r for r in document["records"] if r["status"] == "error"]
    assert all(r["reason"] for r in document["records"] if r["status"] != "ok")
    json.dumps(document, allow_nan=False)
    # the code it timed, module by module (Triton's only where it ran: on CPU it is skipped), all of it this tree's
    fingerprint = document[code_identity.FINGERPRINT_KEY]
    assert {"bench/harness.py", "norms/functional.py", "norms/backends/composite.py"} <= set(fingerprint)
    assert code_identity.check_code(document, code_identity.BENCH_CODE).caveat is None


def test_copy_benchmark_reaches_exactly_its_own_bandwidth(document):
    copies = [r for r in document["records"] if r["norm"] == "copy" and r["implementation"] != "copy (clone) again"]
    assert copies
    for record in copies:
        assert record["fraction_of_copy"] == pytest.approx(1.0, rel=1e-12)
        assert record["effective_passes"] == pytest.approx(2.0, rel=1e-12)


def test_bandwidths_are_positive_finite_and_bytes_match_the_formula(document):
    for r in (r for r in document["records"] if r["status"] == "ok"):
        assert math.isfinite(r["bandwidth_gbs"]) and r["bandwidth_gbs"] > 0
        assert math.isfinite(r["fraction_of_copy"]) and r["fraction_of_copy"] > 0
        assert r["q25_s"] <= r["median_s"] <= r["q75_s"] and r["min_s"] <= r["median_s"] <= r["max_s"]
        dtype = getattr(torch, r["dtype"])
        expected = (
            traffic.copy_bytes(r["rows"], r["d"], dtype)
            if r["norm"] == "copy"
            else traffic.must_move(r["norm"], r["direction"], r["rows"], r["d"], dtype).total
        )
        assert r["bytes"] == expected
        assert r["bandwidth_gbs"] == pytest.approx(r["bytes"] / r["median_s"] / 1e9)
        assert r["fraction_of_copy"] == pytest.approx(r["bandwidth_gbs"] / r["copy_bandwidth_gbs"])


def test_ratios_are_consistent_with_the_times(document):
    df = report.frame(document)
    ratios = report.ln_rms_ratios(df)
    assert not ratios.empty
    ok = report.measured(df).set_index(["study", "norm", "implementation", "direction", "dtype", "rows", "d", "mode"])
    for row in ratios.itertuples():
        key = (row.study, "{}", row.implementation, row.direction, row.dtype, row.rows, row.d, row.mode)
        t_ln = ok.loc[tuple(k if k != "{}" else "layer" for k in key), "median_s"]
        t_rms = ok.loc[tuple(k if k != "{}" else "rms" for k in key), "median_s"]
        assert row.ratio_ln_over_rms == pytest.approx(t_ln / t_rms)
        assert row.saving == pytest.approx(1 - t_rms / t_ln)


def test_census_records_agreeing_op_counts_for_the_traceable_backends(document):
    census = report.census(report.frame(document))
    traced = census[census["traced_passes"].notna()]
    assert not traced.empty and traced["ops_agree"].all()
    eager_rms = traced[
        (traced["norm"] == "rms") & (traced["implementation"] == "eager") & (traced["direction"] == "forward")
    ]
    assert eager_rms["traced_passes"].iloc[0] == 7


def test_claim_findings_have_valid_verdicts_and_finite_key_numbers(document):
    df = report.frame(document)
    a8, b6 = paper.a8_b6(df)
    findings = [
        a8,
        b6,
        arithmetic.a5(df, 0.1),
        *pass_claims.a7_b8(df, 0.5),
        pass_claims.b9(df, 0.5),
        memory_bound.a10(df, 0.5),
        small_batch.b10(df),
        memory_bound.q2(df, 0.1),
    ]
    for finding in findings:
        assert finding.verdict in ("holds", "holds with caveats", "does not hold", "not testable here")
        assert finding.summary
        for number in (finding.key_number, finding.threshold, finding.spread):
            assert number is None or math.isfinite(number)
        assert finding.spread is None or finding.spread >= 0
        assert finding.meaning and finding.unit  # what the ledger shows beside the number


def test_partial_rms_estimate_error_shrinks_with_more_features():
    coarse = partial.partial_rms_estimate_error(1024, 0.0625)
    fine = partial.partial_rms_estimate_error(16384, 0.0625)
    # k i.i.d. squares: relative error of the RMS ~ 1/sqrt(2k)
    assert 0.3 / math.sqrt(2 * 64) < coarse < 3 / math.sqrt(2 * 64)
    assert fine < coarse


# ---------------------------------------------------------------- committed results


def test_committed_results_are_found_and_labelled_with_where_and_when(tmp_path, document):
    assert provenance.load_committed(tmp_path) == []
    synthetic = dict(document, hardware=dict(document["hardware"], gpu="Synthetic GPU"), profile="gpu")
    harness.save(synthetic, tmp_path / "gpu-bench.json")
    (tmp_path / "other.json").write_text("{}")
    [(label, frame)] = provenance.load_committed(tmp_path)
    assert "Synthetic GPU" in label and document["started"] in label and "gpu-bench.json" in label
    assert len(frame) == len(document["records"])


def test_loading_a_file_that_is_not_bench_results_fails_clearly(tmp_path):
    path = tmp_path / "gpu-bench-bad.json"
    path.write_text(json.dumps({"notebook": "speed"}))
    with pytest.raises(ValueError, match="not a normlab.bench results file"):
        harness.load(path)


# ---------------------------------------------------------------- verdict logic on hand-made frames


def _row(norm, implementation, median_s, copy_s, study="sweep", d=4096, rows=8192, direction="forward"):
    return {
        "study": study,
        "norm": norm,
        "implementation": implementation,
        "direction": direction,
        "dtype": "float32",
        "rows": rows,
        "d": d,
        "mode": "alloc",
        "status": "ok",
        "median_s": median_s,
        "fraction_of_copy": copy_s / median_s,
        "effective_passes": 2 * median_s / copy_s,
    }


def test_fused_equal_times_make_q2_hold_and_a7_b8_fail_without_chunked_kernels():
    import pandas as pd

    df = pd.DataFrame(
        [
            _row("layer", "fused", 1.00, 1.0),
            _row("rms", "fused", 1.02, 1.0),  # both at ~2 passes
            _row("layer", "composite", 6.0, 1.0),
            _row("rms", "composite", 3.5, 1.0),  # 12 vs 7 passes
        ]
    )
    q2 = memory_bound.q2(df, equal_time=0.10)
    assert q2.verdict == "holds" and q2.evidence["fused_median_abs_saving"] == pytest.approx(0.02)
    a7, b8 = pass_claims.a7_b8(df, extra_pass=0.5)
    assert a7.verdict == b8.verdict == "does not hold"
    assert a7.evidence["best_ln_passes"] == pytest.approx(2.0) and a7.evidence["best_rms_passes"] == pytest.approx(2.04)


def test_a5_states_the_op_count_as_its_key_number_when_no_fused_pair_was_timed():
    import pandas as pd

    composites = [_row("layer", "composite", 6.0, 1.0), _row("rms", "composite", 3.5, 1.0)]
    fused = arithmetic.a5(
        pd.DataFrame([_row("layer", "fused", 1.0, 1.0), _row("rms", "fused", 1.02, 1.0), *composites]), 0.1
    )
    assert (fused.meaning, fused.unit) == (arithmetic.A5_KEY.meaning, "%")
    assert fused.key_number == pytest.approx(-0.02)
    untimed = arithmetic.a5(pd.DataFrame(composites), 0.1)
    assert (untimed.meaning, untimed.unit) == (arithmetic.A5_UNTIMED_KEY.meaning, "ops")


def test_chunked_two_pass_layer_norm_making_an_extra_pass_gives_a7_a_caveat_and_welford_matches_rms():
    import pandas as pd

    df = pd.DataFrame([_row("layer", "fused", 1.0, 1.0), _row("rms", "fused", 1.0, 1.0)])
    gpu = pd.DataFrame(
        [
            _row("layer", "triton chunked two-pass", 2.0, 1.0, study="chunked"),  # 4 passes
            _row("layer", "triton chunked welford", 1.5, 1.0, study="chunked"),  # 3 passes
            _row("rms", "triton chunked", 1.5, 1.0, study="chunked"),  # 3 passes
        ]
    )
    a7, _ = pass_claims.a7_b8(df, extra_pass=0.5, chunked_df=gpu)
    assert a7.verdict == "holds with caveats"
    assert a7.evidence["chunked_passes"]["triton chunked two-pass"] == pytest.approx(4.0)
    b9 = pass_claims.b9(df, welford_equal=0.5, chunked_df=gpu)  # no traced composites in this frame
    assert b9.verdict == "does not hold" and b9.evidence["chunked_passes"]["triton chunked welford"] == pytest.approx(
        3.0
    )


def test_a8_b6_are_judged_on_the_papers_rows_as_speed_ups_and_on_the_measured_saving():
    import pandas as pd

    # 4 of the paper's 7 RMSNorm rows lie in 10%-50% as speed-ups (6 of 7 as savings): the citation part passes
    rows = [r for r in paper.PAPER_ROWS if r.norm == "RMSNorm"]
    assert len(rows) == 7 and sum(0.10 <= r.saving <= 0.50 for r in rows) == 6
    assert paper.PAPER_ROWS[-2].norm == "pRMSNorm" and paper.PAPER_ROWS[-2].saving == pytest.approx(0.639)
    # a 40.8% saving is 1.69x as fast, not 40.8% faster
    assert next(r for r in rows if r.saving == 0.408).speedup == pytest.approx(1.689, abs=1e-3)
    inside = pd.DataFrame([_row("layer", "auto", 1.0, 1.0), _row("rms", "auto", 0.8, 1.0)])  # 25% faster
    outside = pd.DataFrame([_row("layer", "auto", 1.0, 1.0), _row("rms", "auto", 1.0, 1.0)])  # same speed
    a8_in, b6 = paper.a8_b6(inside)
    a8_out, _ = paper.a8_b6(outside)
    assert a8_in.key_number == pytest.approx(4 / 7) and a8_in.threshold == 0.5
    assert a8_in.verdict == "holds" and a8_out.verdict == "holds with caveats"
    # B6: the 64% end is pRMSNorm, so the RMSNorm-only top (40.8%) stays below the claimed top
    assert b6.verdict == "holds with caveats" and b6.key_number == pytest.approx(0.408)
    # a model-level step-time ratio from the quality chapter takes precedence over the op-level number
    quality = {"summary": "s", "evidence": {"step_time_ratio_rms_over_layer": 0.99, "spread": 0.02}}
    a8_model, _ = paper.a8_b6(inside, paper.model_level_part(quality, None))
    assert a8_model.evidence["measured_saving"] == pytest.approx(0.01) and a8_model.verdict == "holds with caveats"
    assert a8_model.evidence["measured_saving_sd"] == pytest.approx(0.02)
    assert paper.model_level_part(None, None)["quality_ran"] is False


# ---------------------------------------------------------------- timing you can believe


def test_agreement_uses_the_combined_spread_with_a_floor():
    # identical code path, 5% apart, each with a 2% sd: inside the 10% floor
    assert timing.agree(1.00, 0.02, 1.05, 0.02)
    # 30% apart with 2% sd each: disagree
    assert not timing.agree(1.00, 0.02, 1.30, 0.02)
    # 30% apart but each with a 20% sd: the combined spread (2 x 28%) covers it
    assert timing.agree(1.00, 0.20, 1.30, 0.20)
    # the issue's case: auto 32 ms against torch 20 us on the same path
    assert not timing.agree(32e-3, 0.01, 20e-6, 0.05)
    with pytest.raises(ValueError, match="positive"):
        timing.agree(0.0, 0.1, 1.0, 0.1)


def _timing(median, spread=0.0):
    return timing.Timing(
        median_s=median,
        q25_s=median * (1 - spread),
        q75_s=median * (1 + spread),
        min_s=median * 0.9,
        max_s=median * 1.1,
        repeats=9,
        number=1,
        buffers=2,
    )


def test_a_case_whose_repeats_disagree_is_remeasured_and_marked_unstable_if_it_stays_so():
    case = Case("sweep", "rms", "torch", "torch", "forward", "float32", 8192, 1024)
    copy = _timing(1e-3, 0.01)
    steady = iter([_timing(2e-3, 0.01)])
    kept, flags = harness.measure_believably(case, None, None, 0, copy, timer=lambda c: next(steady))
    assert flags == {"remeasured": False, "unstable": False, "unstable_reason": None}
    noisy_then_steady = iter([_timing(2e-3, 0.5), _timing(2.1e-3, 0.01)])
    kept, flags = harness.measure_believably(case, None, None, 0, copy, timer=lambda c: next(noisy_then_steady))
    assert flags["remeasured"] and not flags["unstable"] and kept.median_s == pytest.approx(2.1e-3)
    always_noisy = iter([_timing(2e-3, 0.5), _timing(2e-3, 0.4)])
    kept, flags = harness.measure_believably(case, None, None, 0, copy, timer=lambda c: next(always_noisy))
    assert flags["unstable"] and "repeats disagree" in flags["unstable_reason"]
    # a steady time 4000 copies long is a scheduler artefact, not the code
    stalled = iter([_timing(4.0, 0.001), _timing(4.0, 0.001)])
    _, flags = harness.measure_believably(case, None, None, 0, copy, timer=lambda c: next(stalled))
    assert flags["unstable"] and "implausibly slow" in flags["unstable_reason"]
    # a steady 28 ms for a 16-row copy (a few hundred kilobytes) is a stall, whatever its repeats say
    small_copy = Case("small-batch", "copy", "copy (clone)", None, "forward", "float32", 16, 4096)
    stalled_copy = iter([_timing(28e-3, 0.01), _timing(28e-3, 0.01)])
    _, flags = harness.measure_believably(small_copy, None, None, 0, None, timer=lambda c: next(stalled_copy))
    assert flags["unstable"] and "implausibly slow for a copy" in flags["unstable_reason"]
    # ...and a norm timed against it is still held to the plausible copy time
    small_norm = Case("small-batch", "layer", "torch", "torch", "forward", "bfloat16", 16, 4096)
    stalled_norm = iter([_timing(20e-3, 0.01), _timing(20e-3, 0.01)])
    _, flags = harness.measure_believably(
        small_norm, None, None, 0, _timing(28e-3, 0.01), timer=lambda c: next(stalled_norm)
    )
    assert flags["unstable"]


def _record(implementation, median, spread=0.01, norm="layer", rows=16, d=4096, study="small-batch"):
    return {
        "study": study,
        "norm": norm,
        "implementation": implementation,
        "backend": implementation,
        "direction": "forward",
        "dtype": "float32",
        "rows": rows,
        "d": d,
        "mode": "alloc",
        "status": "ok",
        "median_s": median,
        "q25_s": median,
        "q75_s": median,
        "relative_sd": spread,
        "bandwidth_gbs": 1.0,
        "fraction_of_copy": 0.5,
        "effective_passes": 4.0,
        "options": {},
        "remeasured": False,
        "unstable": False,
    }


def test_identical_code_paths_that_disagree_are_remeasured_then_marked_unstable():
    cpu = torch.device("cpu")
    # auto runs F.layer_norm on CPU, so auto and torch are one code path
    assert harness.dispatched_backend("layer", "forward", "float32", 16, 4096, cpu) == "torch"
    agreeing = [_record("torch", 20e-6), _record("auto", 21e-6)]
    harness.check_same_paths(agreeing, cpu, remeasure=lambda case: pytest.fail("agreeing pairs need no re-measure"))
    assert agreeing[1]["same_path_agrees"] and not agreeing[1]["unstable"]
    stuck = [_record("torch", 20e-6), _record("auto", 32e-3)]
    harness.check_same_paths(
        stuck, cpu, remeasure=lambda case: (_timing(32e-3 if case.implementation == "auto" else 20e-6, 0.01), {})
    )
    assert not stuck[1]["same_path_agrees"] and stuck[0]["unstable"] and stuck[1]["unstable"]
    fixed = [_record("torch", 20e-6), _record("auto", 32e-3)]
    harness.check_same_paths(fixed, cpu, remeasure=lambda case: (_timing(20e-6, 0.01), {}))
    assert fixed[1]["same_path_agrees"] and not fixed[1]["unstable"] and fixed[1]["remeasured"]
    # a re-measure whose own repeats disagree is no cure
    noisy = [_record("torch", 20e-6), _record("auto", 32e-3)]
    harness.check_same_paths(noisy, cpu, remeasure=lambda case: (_timing(20e-6, 0.9), {}))
    assert noisy[1]["unstable"] and "re-measured" in noisy[1]["unstable_reason"]
    # a spread wide enough to cover any gap is no agreement when one member is already unstable
    wide = [_record("torch", 20e-6), dict(_record("auto", 60e-6, spread=2.0), unstable=True)]
    harness.check_same_paths(wide, cpu, remeasure=lambda case: pytest.fail("within spread: no re-measure"))
    assert wide[1]["same_path_agrees"] is False
    # unstable cases are left out of the ratios that summaries use
    import pandas as pd

    frame = pd.DataFrame(stuck + [dict(_record("torch", 18e-6), norm="rms"), dict(_record("auto", 18e-6), norm="rms")])
    assert set(report.ln_rms_ratios(frame)["implementation"]) == set()
    assert set(report.ln_rms_ratios(frame, include_unstable=True)["implementation"]) == {"torch", "auto"}


def test_live_identical_code_paths_agree_or_are_flagged(document):
    """On the small real run: two believable timings of one code path agree within their spread; any pair that does
    not has a member marked unstable, which keeps it out of every summary."""
    records = document["records"]
    pairs = harness.same_path_pairs(records, torch.device("cpu"))
    assert pairs, "the smoke run times a copy twice, so there is at least one same-path pair"
    for i, j in pairs:
        a, b = records[i], records[j]
        if not (a["unstable"] or b["unstable"]):
            assert a["same_path_agrees"], (a["implementation"], b["implementation"], a["median_s"], b["median_s"])
        else:
            assert not a["same_path_agrees"]


# ---------------------------------------------------------------- weighing a GPU run beside this run


def _measured(frame, hardware, on_gpu, started="2026-01-01T00:00:00+00:00", source="gpu-bench.json"):
    return provenance.Measured(
        frame=frame,
        hardware=hardware,
        label=f"{hardware} label",
        on_gpu=on_gpu,
        source=source,
        started=started,
        commit="abc123def456",
    )


def _pair(implementation, t_ln, t_rms, copy_s=1.0, **kw):
    return [_row("layer", implementation, t_ln, copy_s, **kw), _row("rms", implementation, t_rms, copy_s, **kw)]


def test_the_gpu_run_answers_and_a_cpu_does_not_hold_is_a_depends_on_scale_caveat():
    import pandas as pd

    # CPU: both fused and 20% apart (Q2 does not hold); GPU: both fused and 2% apart (holds)
    cpu = _measured(pd.DataFrame(_pair("fused", 1.0, 0.8)), "Test CPU (2 cores)", False, source="this run")
    gpu = _measured(pd.DataFrame(_pair("fused", 1.0, 0.98)), "Test GPU", True)
    q2 = memory_bound.q2(cpu, equal_time=0.10, gpu=gpu)
    assert q2.verdict == "holds"  # the answering run's own verdict, not softened
    assert q2.key_number == pytest.approx(0.02) and q2.evidence["decided_on"] == "Test GPU"
    assert q2.evidence["by_run"]["Test CPU (2 cores)"]["verdict"] == "does not hold"
    gpu_where, cpu_where = "the Test GPU (gpu-bench.json, commit abc123def456)", "this run's Test CPU (2 cores)"
    assert f"depends on scale: 'holds' on {gpu_where}, 'does not hold' on {cpu_where}" in q2.caveats
    # the summary names the hardware behind each number, the answering one first
    assert q2.summary.index("Test GPU") < q2.summary.index("Test CPU") and "+2" in q2.summary
    assert "'does not hold' (key number 0.2 vs 0.1)" in q2.summary  # the other run in one clause
    assert "+20%" in q2.evidence["by_run"]["Test CPU (2 cores)"]["summary"]  # its full sentence kept as evidence
    # the other way round the GPU's "does not hold" stands, with the same caveat
    flipped = memory_bound.q2(
        _measured(pd.DataFrame(_pair("fused", 1.0, 0.98)), "Test CPU (2 cores)", False, source="this run"),
        0.10,
        gpu=_measured(pd.DataFrame(_pair("fused", 1.0, 0.8)), "Test GPU", True),
    )
    assert flipped.verdict == "does not hold" and flipped.key_number == pytest.approx(0.2)
    assert f"depends on scale: 'does not hold' on {gpu_where}, 'holds' on {cpu_where}" in flipped.caveats


def test_without_a_gpu_run_the_verdict_is_this_runs_alone_and_a_bare_frame_keeps_its_summary():
    import pandas as pd

    frame = pd.DataFrame(_pair("fused", 1.0, 0.98))
    bare = memory_bound.q2(frame, 0.10)
    assert bare.verdict == "holds" and not bare.summary.startswith("On ") and "decided_on" not in bare.evidence
    named = memory_bound.q2(_measured(frame, "Test CPU (2 cores)", False, source="this run"), 0.10, gpu=None)
    # the first sentence names this build's CPU by kind (a model's name runs to seven words against a word limit)
    assert named.verdict == "holds" and named.summary.startswith("On this build's CPU:")
    assert "Test CPU" not in named.summary.split(":")[0]


def test_a_gpu_run_that_cannot_test_a_claim_leaves_the_verdict_to_this_run():
    import pandas as pd

    cpu = _measured(pd.DataFrame(_pair("fused", 1.0, 0.98)), "Test CPU", False, source="this run")
    empty_gpu = _measured(pd.DataFrame(_pair("composite", 6.0, 3.5)), "Test GPU", True)  # nothing fused there
    q2 = memory_bound.q2(cpu, 0.10, gpu=empty_gpu)
    assert q2.verdict == "holds" and q2.evidence["decided_on"] == "Test CPU"
    assert q2.evidence["by_run"]["Test GPU"]["verdict"] == "not testable here"
    assert not [c for c in q2.caveats if c.startswith("depends on scale")]


def test_gpu_evidence_is_this_run_on_a_gpu_else_every_committed_gpu_run_identifiable_code_first():
    import dataclasses

    import pandas as pd

    frame = pd.DataFrame(_pair("fused", 1.0, 1.0))
    cpu = _measured(frame, "CPU", False, source="this run")
    old = _measured(frame, "GPU A", True, started="2026-01-01T00:00:00+00:00", source="gpu-bench-a.json")
    new = _measured(frame, "GPU B", True, started="2026-02-01T00:00:00+00:00", source="gpu-bench-b.json")
    assert hardware.gpu_evidence(cpu, []) == []
    assert hardware.gpu_evidence(cpu, [new, cpu, old]) == [old, new]  # by file name, never the newest first
    dirty = dataclasses.replace(old, caveat="cannot be identified", code_identified=False)
    changed = dataclasses.replace(new, caveat="changed since")
    assert hardware.gpu_evidence(cpu, [dirty, changed]) == [changed, dirty]
    live_gpu = _measured(frame, "GPU C", True, source="this run")
    assert hardware.gpu_evidence(live_gpu, [new]) == [live_gpu]


def test_two_runs_on_one_kind_of_gpu_are_told_apart_and_both_shown():
    import pandas as pd

    cpu = _measured(pd.DataFrame(_pair("fused", 1.0, 0.98)), "Test CPU", False, source="this run")
    new = _measured(
        pd.DataFrame(_pair("fused", 1.0, 0.99)), "Test GPU", True, started="2026-02", source="gpu-bench-2.json"
    )
    old = _measured(
        pd.DataFrame(_pair("fused", 1.0, 0.7)), "Test GPU", True, started="2026-01", source="gpu-bench.json"
    )
    q2 = memory_bound.q2(cpu, 0.10, gpu=hardware.gpu_evidence(cpu, [old, new]))
    # both identifiable and unchanged: the first by file name answers ('gpu-bench-2.json' sorts before
    # 'gpu-bench.json'), whichever was measured last
    assert q2.evidence["decided_on"] == "Test GPU [gpu-bench-2.json]" and q2.key_number == pytest.approx(0.01)
    assert set(q2.evidence["by_run"]) == {"Test CPU", "Test GPU [gpu-bench-2.json]", "Test GPU [gpu-bench.json]"}
    # the other finds a 30% gap: the answering run's "holds" stands, and the other's "does not hold" is its caveat
    assert q2.verdict == "holds" and "gpu-bench.json" in q2.summary
    assert any(
        c.startswith("differs between runs at one scale: 'holds'")
        and "'does not hold' on the Test GPU (gpu-bench.json" in c
        for c in q2.caveats
    )
    a8, _ = paper.a8_b6(cpu, gpu=hardware.gpu_evidence(cpu, [old, new]))
    assert [r["gpu_source"] for r in a8.evidence["gpu_runs"]] == ["gpu-bench-2.json", "gpu-bench.json"]
    assert a8.evidence["gpu_source"] == "gpu-bench-2.json"


def test_one_kernel_pairs_above_memory_bound_count_as_fused_and_launch_bound_ones_do_not():
    import pandas as pd

    # one kernel each at 0.6 of copy (3.3 passes: beyond the 1.5x-minimum test) and at 0.1 (launch bound)
    rows = _pair("kernel", 1 / 0.6, 1 / 0.6 * 0.98, d=4096) + _pair("kernel", 10.0, 9.0, d=256)
    ratios = ratio.training_ratios(pd.DataFrame(rows))
    assert arithmetic.fused_pairs(ratios).empty
    one_op = {("kernel", "forward", "float32")}
    fused = arithmetic.fused_pairs(ratios, one_op=one_op, memory_bound=0.5)
    assert list(fused["d"]) == [4096]
    assert arithmetic.fused_pairs(ratios, one_op=set(), memory_bound=0.5).empty


def test_single_kernel_reads_the_profiler_census_for_both_norms():
    import pandas as pd

    census = [
        dict(_row(norm, impl, 1.0, 1.0), profiler_ops=ops, traced_ops=None, traced_passes=None, ops_agree=None)
        for norm, impl, ops in [
            ("layer", "fused", ["k"]),
            ("rms", "fused", ["k"]),
            ("layer", "half", ["k"]),
            ("rms", "half", ["a", "b"]),
        ]
    ]
    assert arithmetic.single_kernel(pd.DataFrame(census)) == {("fused", "forward", "float32")}


def test_q3_takes_each_backends_median_saving_over_the_widths_it_timed():
    import pandas as pd

    rows = []
    for d, partial_time in [(4096, 0.9), (16384, 0.7)]:
        rows += [
            _row("rms", "triton full", 1.0, 1.0, study="partial", d=d),
            _row("rms", "triton p=6.25%", partial_time, 1.0, study="partial", d=d),
        ]
    rows.append(_row("rms", "eager full", 1.0, 1.0, study="partial", d=4096))  # no partial variant: not judged
    rows.append(_row("rms", "eager full", 1.0, 1.0, study="partial", d=16384))
    q3 = partial.q3(pd.DataFrame(rows), worth_it=0.05, estimate_error=0.01)
    assert q3.evidence["saving_by_backend"] == {"triton": pytest.approx(0.2)}
    assert q3.verdict == "holds" and "4096, 16384" in q3.summary


def test_a8_needs_the_gpu_speed_up_in_range_too_and_names_its_hardware():
    import pandas as pd

    inside = pd.DataFrame(_pair("auto", 1.0, 0.8))  # 25% faster
    a8_cpu_only, _ = paper.a8_b6(inside)
    assert a8_cpu_only.verdict == "holds"
    same_speed_gpu = _measured(pd.DataFrame(_pair("auto", 1.0, 1.0) + _pair("torch", 1.0, 0.9)), "Test GPU", True)
    a8, b6 = paper.a8_b6(inside, gpu=same_speed_gpu)
    assert a8.verdict == "holds with caveats" and a8.key_number == pytest.approx(4 / 7)
    assert a8.evidence["gpu_op_level_auto_saving"] == pytest.approx(0.0)
    assert a8.evidence["gpu_per_implementation"]["torch"]["median"] == pytest.approx(0.1)
    assert "Test GPU" in a8.summary and "Test GPU" in b6.summary
    fast_gpu = _measured(pd.DataFrame(_pair("auto", 1.0, 0.8)), "Test GPU", True)
    assert paper.a8_b6(inside, gpu=fast_gpu)[0].verdict == "holds"


def test_committed_runs_carry_their_hardware_and_whether_they_ran_on_a_gpu(tmp_path, document):
    assert provenance.committed(tmp_path) == []
    harness.save(
        dict(document, hardware=dict(document["hardware"], gpu="Synthetic GPU"), profile="gpu"),
        tmp_path / "gpu-bench.json",
    )
    [run] = provenance.committed(tmp_path)
    assert run.hardware == "Synthetic GPU" and run.on_gpu and run.source == "gpu-bench.json"
    assert run.commit == provenance.short_commit(document) and run.unstable_count == len(report.unstable(run.frame))
    live = provenance.measured(document)
    assert not live.on_gpu and live.hardware.startswith(document["hardware"]["cpu"])


def test_ratio_grid_and_medians_describe_each_implementation_and_dtype():
    import pandas as pd

    rows = _pair("fused", 1.0, 0.5, d=256) + _pair("fused", 1.0, 0.8, d=4096)
    ratios = report.ln_rms_ratios(pd.DataFrame(rows))
    grid = report.ratio_grid(ratios, "sweep")
    assert list(grid.columns) == ["implementation", "dtype", "d = 256", "d = 4096"]
    assert grid.iloc[0]["d = 256"] == pytest.approx(2.0) and grid.iloc[0]["d = 4096"] == pytest.approx(1.25)
    summary = report.implementation_summary(ratios, by=("implementation", "dtype"))
    assert report.describe_medians(summary) == "fused 1.62 (float32)"
    assert report.ratio_grid(ratios, "backward").empty


def test_compare_runs_puts_each_runs_median_side_by_side():
    import pandas as pd

    one = report.ln_rms_ratios(pd.DataFrame(_pair("fused", 1.0, 0.5))).assign(run="a")
    two = report.ln_rms_ratios(pd.DataFrame(_pair("fused", 1.0, 0.8) + _pair("other", 1.0, 1.0))).assign(run="b")
    table = report.compare_runs(pd.concat([one, two], ignore_index=True))
    assert list(table.columns) == ["implementation", "dtype", "t_LN/t_RMS [a]", "sd [a]", "t_LN/t_RMS [b]", "sd [b]"]
    assert table.set_index("implementation").loc["fused", "t_LN/t_RMS [a]"] == pytest.approx(2.0)
    assert table.set_index("implementation").loc["fused", "t_LN/t_RMS [b]"] == pytest.approx(1.25)
    assert pd.isna(table.set_index("implementation").loc["other", "t_LN/t_RMS [a]"])


def test_a_run_from_a_tree_with_uncommitted_changes_keeps_its_dirty_mark():
    assert (
        provenance.short_commit({"git_commit": "12a05220ecc6217618d6aeaa96e9515d600275fb-dirty"})
        == "12a05220ecc6-dirty"
    )
    assert provenance.short_commit({"git_commit": "12a05220ecc6217618d6aeaa96e9515d600275fb"}) == "12a05220ecc6"
    assert provenance.short_commit({}) == "unknown"


# ---------------------------------------------------------------- peers and device time


def test_the_gpu_profile_times_liger_beside_normlab_in_the_three_studies_and_the_cpu_profile_does_not():
    gpu_cases = build_cases(PROFILE_SETTINGS["gpu"])
    liger = {(c.study, c.norm, c.direction) for c in gpu_cases if c.implementation == "liger"}
    assert {(s, n) for s, n, _ in liger} == {
        (s, n) for s in ("sweep", "backward", "small-batch") for n in ("layer", "rms")
    }
    assert ("backward", "rms", "forward+backward") in liger
    assert not [c for c in build_cases(PROFILE_SETTINGS["cpu"]) if c.implementation == "liger"]
    assert {c.implementation for c in build_cases(PROFILE_SETTINGS["gpu"], ("triton", "liger"))} >= {"triton", "liger"}


def test_a_peer_that_is_not_installed_is_skipped_with_how_to_install_it(monkeypatch):
    from normlab.bench import peers

    missing = peers.Peer("nowhere", "normlab_no_such_module", "nowhere not installed: pip install nowhere", None)
    monkeypatch.setitem(peers.PEERS, "nowhere", missing)
    reason = peers.unavailable("nowhere", torch.device("cuda"))
    assert reason.startswith("nowhere not installed: pip install nowhere") and "normlab_no_such_module" in reason
    try:
        import liger_kernel  # noqa: F401
    except ImportError:
        assert peers.unavailable("liger", torch.device("cpu")).startswith("liger-kernel not installed: pip install")
    else:
        assert "needs a GPU" in peers.unavailable("liger", torch.device("cpu"))
    case = Case("sweep", "rms", "liger", "liger", "forward", "float32", 8, 64)
    assert skip_reason(case, PROFILE_SETTINGS["gpu"], torch.device("cpu"))  # a reason, never a crash


def _fake_peer_call(norm, direction):
    """A stand-in peer on CPU: PyTorch's own norms, called the way the bench calls a peer."""
    from normlab.bench import peers

    if norm == "rms":
        forward = lambda x, weight: torch.nn.functional.rms_norm(x, x.shape[-1:], weight, 1e-6)  # noqa: E731
    else:
        forward = lambda x, weight, bias: torch.nn.functional.layer_norm(x, x.shape[-1:], weight, bias)  # noqa: E731
    return peers._with_direction(forward, norm, direction)


def test_a_present_peer_is_timed_beside_normlab_and_cpu_records_say_why_there_is_no_device_time(monkeypatch):
    from dataclasses import replace

    from normlab.bench import peers

    monkeypatch.setitem(peers.PEERS, "fake", peers.Peer("fake", "torch", "", _fake_peer_call, needs_cuda=False))
    monkeypatch.setitem(PROFILE_SETTINGS, "smoke", replace(PROFILE_SETTINGS["smoke"], peers=("fake",)))
    document = harness.run("smoke", backends=["torch", "fake"], dtypes=["float32"], progress=False, census=False)
    fake = [r for r in document["records"] if r["implementation"] == "fake"]
    assert {(r["study"], r["norm"], r["direction"]) for r in fake} == {
        (s, n, "forward+backward" if s == "backward" else "forward")
        for s in ("sweep", "backward", "small-batch")
        for n in ("layer", "rms")
    }
    assert all(r["status"] == "ok" and r["median_s"] > 0 and r["device_time_s"] is None for r in fake)
    assert "on CPU" in report.device_time_note(document) and "kernel durations" in report.device_time_note(document)
    assert "device_ms" not in report.table(report.frame(document))  # no device column without device times


def test_device_time_sums_the_device_events_only_per_call():
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    def event(device_type, us):
        return SimpleNamespace(device_type=device_type, time_range=SimpleNamespace(elapsed_us=lambda: us))

    events = [event(DeviceType.CPU, 500), event(DeviceType.CUDA, 30), event(DeviceType.CUDA, 10)]
    assert timing.device_seconds(events, 2) == pytest.approx(20e-6)
    with pytest.raises(ValueError, match="calls"):
        timing.device_seconds(events, 0)
    assert timing.device_time_s(lambda: None, [()], torch.device("cpu")) is None


def test_a_case_far_slower_than_its_kernels_is_host_bound():
    import pandas as pd

    df = pd.DataFrame(
        {"status": ["ok", "ok", "ok"], "median_s": [100e-6, 100e-6, 100e-6], "device_time_s": [10e-6, 90e-6, None]}
    )
    bound = report.host_bound(df)
    assert list(bound["host_bound"]) == [True, False]  # the case without a device time is left out
    assert bound["host_share"].tolist() == pytest.approx([0.9, 0.1])


def test_a_run_that_measured_nothing_reports_its_skipped_cases_without_failing(capsys, tmp_path):
    # the gpu grid's peer alone on CPU: every case is skipped, none is timed, and the report still prints
    output = tmp_path / "bench.json"
    argv = ["--profile", "gpu", "--device", "cpu", "--backend", "liger", "--no-progress", "--output", str(output)]
    assert bench_main(argv) == 0
    printed = capsys.readouterr().out
    assert "(no cases measured)" in printed and "liger" in printed
    document = harness.load(output)
    assert {r["status"] for r in document["records"]} == {"skipped"}
    assert report.ln_rms_ratios(report.frame(document)).empty
