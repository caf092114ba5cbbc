"""The speed chapter's page: what it measures, the tables and sentences it shows, and its figures, on hand-made
benchmark documents whose answers are known (no timing is run here)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from normlab.analysis.speed import (
    bandwidth,
    figures,
    method,
    on_gpu,
    page,
    paper,
    partial,
    passes,
    ratio,
    runs,
    settings,
    small_batch,
)
from normlab.bench import harness, report
from normlab.study import paths
from normlab.study.findings import Finding


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _case(norm, implementation, d, median_s, **extra):
    case = {
        "study": "sweep",
        "norm": norm,
        "implementation": implementation,
        "backend": implementation,
        "direction": "forward",
        "dtype": "float32",
        "rows": 8192,
        "d": d,
        "mode": "alloc",
        "status": "ok",
        "reason": None,
        "median_s": median_s,
        "relative_sd": 0.02,
        "fraction_of_copy": 0.8,
        "effective_passes": 2.5,
        "unstable": False,
        "unstable_reason": None,
        "remeasured": False,
    }
    return {**case, **extra}


def _document(records, *, gpu=None, profile="smoke", started="2026-01-02T03:04:05+00:00", commit="0123456789abcdef"):
    return {
        "schema": harness.SCHEMA,
        "records": records,
        "hardware": {"gpu": gpu, "cpu": "Test CPU", "cpu_cores": 2},
        "versions": {"torch": "2.9", "triton": "3.5"},
        "started": started,
        "wall_s": 42.4,
        "profile": profile,
        "git_commit": commit,
    }


# LayerNorm at 2 ms and RMSNorm at 1 ms (ratio 2) for torch; 3 ms and 2 ms (ratio 1.5) for eager, at two widths.
CASES = [
    _case(norm, impl, d, t * 1e-3)
    for impl, (t_ln, t_rms) in {"torch": (2.0, 1.0), "eager": (3.0, 2.0)}.items()
    for d in (256, 1024)
    for norm, t in (("layer", t_ln), ("rms", t_rms))
] + [
    _case("copy", "copy (clone)", 256, 0.5e-3, backend=None),
    _case("rms", "eager", 64, 9e-3, unstable=True, unstable_reason="sd 40% of the median", remeasured=True),
    _case("layer", "triton", 256, None, status="skipped", reason="no GPU", backend="triton"),
    _case("layer", "partial", 4096, 1e-3, study="partial", fraction_of_copy=0.9),
    _case("layer", "eager", 8, 20e-6, study="small-batch", rows=4),
    _case("rms", "eager", 8, 16e-6, study="small-batch", rows=4),
]


def _run(tmp_path, monkeypatch, gpu_documents=()):
    committed = tmp_path / "data"
    committed.mkdir(parents=True)
    for i, document in enumerate(gpu_documents):
        harness.save(document, committed / f"gpu-bench-{i}.json")
    monkeypatch.setattr(runs.bench, "run", lambda profile: _document(CASES, profile=profile))
    return runs.measure("smoke", tmp_path / "bench", committed)


def _gpu_document(name="Test GPU", started="2026-02-01T00:00:00+00:00", commit="fedcba9876543210"):
    return _document(CASES, gpu=name, profile="gpu", started=started, commit=commit)


# ---- settings


def test_bench_profile_and_thresholds_are_checked_by_name():
    assert settings.bench_profile("cpu") == "cpu"
    with pytest.raises(ValueError, match="unknown profile 'tpu'; valid profiles: smoke, cpu, gpu"):
        settings.bench_profile("tpu")
    settings.check_thresholds(0.1, 0.5, 0.5, 0.5, 0.05)
    with pytest.raises(ValueError, match=r"MEMORY_BOUND must lie in \(0, 1\), got 1.5"):
        settings.check_thresholds(0.1, 0.5, 0.5, 1.5, 0.05)
    with pytest.raises(ValueError, match="EQUAL_TIME"):
        settings.check_thresholds(0.0, 0.5, 0.5, 0.5, 0.05)


def test_gpu_results_dir_defaults_to_data_and_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("NORMLAB_GPU_BENCH_DIR", raising=False)
    assert runs.gpu_results_dir() == paths.ROOT / "data"
    monkeypatch.setenv("NORMLAB_GPU_BENCH_DIR", str(tmp_path))
    assert runs.gpu_results_dir() == tmp_path


# ---- measuring


def test_measure_saves_the_run_and_weighs_every_committed_gpu_run(tmp_path, monkeypatch):
    older, newer = _gpu_document("Old GPU", "2025-01-01T00:00:00+00:00"), _gpu_document("New GPU")
    run = _run(tmp_path, monkeypatch, [newer, older])
    assert run.bench_file == tmp_path / "bench" / "speed-smoke.json" and run.bench_file.exists()
    assert run.where == "Test CPU (2 CPU cores), torch 2.9"
    assert len(run.timed) == len(CASES) - 1 and run.unstable == [
        "sweep rms eager float32 8192x64 alloc: sd 40% of the median"
    ]
    assert [m.hardware for m in run.gpu_runs] == ["New GPU", "Old GPU"] and run.gpu is run.gpu_runs[0]  # by name
    assert not run.live.on_gpu and _run(tmp_path / "none", monkeypatch).gpu is None


def test_measurement_text_counts_cases_and_names_the_deciding_gpu_run(tmp_path, monkeypatch):
    run = _run(tmp_path, monkeypatch, [_gpu_document()])
    agreement = pd.DataFrame({"agree within spread": [True, False]})
    text = method.measurement_text(run, agreement)
    assert text.startswith("Measured on Test CPU (2 CPU cores), torch 2.9, 2026-01-02T03:04:05+00:00, in 42 s:")
    assert f"{len(CASES) - 1} cases timed, 1 re-measured, **1 left unstable**" in text
    assert "1 of 2 same-path pairs agree" in text and "{ref}`same-path table <tab-speed-same-path>`" in text
    assert "weigh 1 GPU run(s), first answered by Test GPU, gpu-bench-0.json (commit fedcba987654;" in text
    alone = method.measurement_text(_run(tmp_path / "none", monkeypatch), pd.DataFrame())
    assert "0 of 0 same-path pairs" in alone and alone.endswith(
        "No GPU run is committed, so the verdicts rest on this run alone."
    )


# ---- tables and sentences


def test_table_or_note_shows_the_note_only_for_an_empty_frame():
    note = page.table_or_note(pd.DataFrame(), "Nothing was timed.", caption="never shown")
    assert note._repr_markdown_() == "Nothing was timed."
    shown = page.table_or_note(pd.DataFrame({"x": [1.0]}), "Nothing was timed.", caption="One row")
    assert "<caption>One row</caption>" in shown._repr_html_()


def test_cases_frame_gives_times_and_spreads_in_milliseconds():
    frame = method.cases_frame(report.measured(report.frame(_document(CASES))))
    assert list(frame.columns) == method.CASE_COLUMNS
    first = frame.iloc[0]
    assert first["time (ms)"] == pytest.approx(2.0) and first["sd (ms)"] == pytest.approx(0.04)


def test_skipped_text_lists_skipped_groups_then_unstable_cases():
    df = report.frame(_document(CASES))
    text = method.skipped_text(df, ["a case"])
    assert text == "- **skipped** (1 cases: triton; sweep): no GPU\n- **unstable**: a case"
    stable_only = report.frame(_document([c for c in CASES if c["status"] == "ok"]))
    assert method.skipped_text(stable_only, []) == "Every case was timed and stable."


def test_forward_filters_keep_the_sweeps_allocating_cases_and_drop_the_copies():
    stable = report.stable(report.frame(_document(CASES)))
    norms = bandwidth.forward_norm_cases(stable)
    assert set(norms["study"]) == {"sweep"} and "copy" not in set(norms["norm"]) and len(norms) == 8
    ratios = ratio.forward_sweep(report.ln_rms_ratios(report.frame(_document(CASES))))
    assert sorted(ratios["ratio_ln_over_rms"].round(6)) == [1.5, 1.5, 2.0, 2.0]


def test_gpu_runs_text_gives_each_runs_role_and_backends(tmp_path, monkeypatch):
    run = _run(tmp_path, monkeypatch, [_gpu_document("New GPU"), _gpu_document("Old GPU", "2025-01-01T00:00:00+00:00")])
    text = on_gpu.gpu_runs_text(run.gpu_runs, run.live)
    assert text.startswith("GPU runs weighed by the verdicts, in the order the rule ranks them (code that can be")
    assert "never the newest" in text
    decides, checks = text.split("\n\n")[1].split("\n")
    assert decides.startswith("- **gpu-bench-0.json** (answers each claim whose cases it measured): measured on New")
    assert (
        checks.startswith("- **gpu-bench-1.json** (shown beside it; answers only a claim the runs above could not")
        and "Backends timed: eager, partial, torch." in decides
    )
    assert "**1 left unstable**" in decides
    assert on_gpu.gpu_runs_text([], run.live).startswith("**No GPU run is committed**")


def test_gpu_frames_label_every_row_with_its_run(tmp_path, monkeypatch):
    run = _run(tmp_path, monkeypatch, [_gpu_document()])
    ratios, stable = on_gpu.gpu_frames(run.gpu_runs, run.live)
    assert set(ratios["run"]) == set(stable["run"]) == {"gpu-bench-0.json"}
    assert runs.run_name(run.live, run.live) == "this run"
    empty_ratios, empty_stable = on_gpu.gpu_frames([], run.live)
    assert empty_ratios.empty and list(empty_stable.columns) == ["study", "norm", "mode", "run"]
    text = on_gpu.gpu_sweep_text(ratio.forward_sweep(ratios))
    assert (
        text
        == "Forward at the training batch, the median t_LN/t_RMS over d, per GPU run: **gpu-bench-0.json**: eager 1.50 (float32); torch 2.00 (float32)."
    )


def test_gpu_tables_say_so_when_there_is_no_gpu_run(tmp_path, monkeypatch):
    run = _run(tmp_path, monkeypatch)
    ratios, stable = on_gpu.gpu_frames([], run.live)
    assert on_gpu.gpu_backward_display(ratios, None)._repr_markdown_() == "No stable GPU forward+backward pair to show."
    assert on_gpu.gpu_small_batch_display(ratios, None)._repr_markdown_() == "No stable GPU small-batch pair to show."
    (note,) = on_gpu.gpu_chunked_display(stable, [], run.live)
    assert note._repr_markdown_() == "No GPU run is committed."


def test_gpu_tables_name_the_hardware(tmp_path, monkeypatch):
    run = _run(tmp_path, monkeypatch, [_gpu_document()])
    ratios, stable = on_gpu.gpu_frames(run.gpu_runs, run.live)
    small = on_gpu.gpu_small_batch_display(ratios, run.gpu)._repr_html_()
    assert "GPU (Test GPU): small-batch latency" in small and "<td>20.0</td>" in small  # t_LN 20 µs
    chunked, unstable = on_gpu.gpu_chunked_display(stable, run.gpu_runs, run.live)
    assert "GPU (Test GPU): chunked kernels" in chunked._repr_html_()
    assert unstable._repr_markdown_() == (
        "- **unstable** (gpu-bench-0.json): sweep rms eager float32 8192x64 alloc: sd 40% of the median"
    )
    # no backward case was timed: the grid is empty and the page says so
    assert on_gpu.gpu_backward_display(ratios, run.gpu)._repr_markdown_().startswith("No stable GPU")
    backward = pd.concat([ratios, ratios.assign(study="backward")], ignore_index=True)
    assert "GPU (Test GPU): forward+backward" in on_gpu.gpu_backward_display(backward, run.gpu)._repr_html_()


def test_gpu_device_times_are_shown_where_a_run_recorded_them(tmp_path, monkeypatch):
    # small-batch eager LayerNorm: 20 µs wall, 4 µs in kernels -> host-bound; torch 2 ms wall, 1.9 ms -> not
    timed = [dict(c, device_time_s={20e-6: 4e-6, 2e-3: 1.9e-3}.get(c["median_s"])) for c in CASES]
    with_device = _document(timed, gpu="New GPU", profile="gpu")
    run = _run(tmp_path, monkeypatch, [with_device, _gpu_document("Old GPU", "2025-01-01T00:00:00+00:00")])
    note, shown = on_gpu.gpu_device_time_display(run.gpu_runs, run.live)
    assert note._repr_markdown_().startswith("**gpu-bench-1.json** recorded wall time only")
    html = shown._repr_html_()
    assert "gpu-bench-0.json" in html and "gpu-bench-1.json" not in html
    rows = report.host_bound(report.frame(with_device))
    bound = rows[rows.host_bound]
    assert list(bound.study) == ["small-batch"] and bound.host_share.tolist() == pytest.approx([0.8])
    assert rows[~rows.host_bound].host_share.tolist() == pytest.approx([0.05] * (len(rows) - 1))
    (only_note,) = on_gpu.gpu_device_time_display(run.gpu_runs[1:], run.live)
    assert "cannot be told apart" in only_note._repr_markdown_()
    (none,) = on_gpu.gpu_device_time_display([], run.live)
    assert none._repr_markdown_() == "No GPU run is committed."


def test_this_runs_frames_convert_units():
    df = report.frame(_document(CASES))
    small = small_batch.small_batch_frame(report.ln_rms_ratios(df))
    assert small.iloc[0]["t_LN (µs)"] == pytest.approx(20.0) and small.iloc[0]["saving"] == pytest.approx(0.2)
    partial_cases = partial.partial_frame(report.stable(df))
    assert (
        partial_cases.iloc[0]["time (ms)"] == pytest.approx(1.0) and list(partial_cases.columns)[0] == "implementation"
    )
    assert passes.census_frame(df).empty  # no census recorded


def test_literature_frame_adds_narangs_row_to_the_papers():
    frame = paper.literature_frame()
    assert len(frame) == len(paper.PAPER_ROWS) + 1
    t5 = frame.iloc[-1]
    assert t5["model"] == "T5-base" and t5["speed-up (×)"] == pytest.approx(3.68 / 3.50)
    assert t5["time saving"] == pytest.approx(1 - 3.50 / 3.68)


def test_model_level_text_marks_a_chapter_that_has_not_run():
    part = paper.model_level_part(None, {"summary": "norms take 3% of the time", "evidence": {}})
    a8 = Finding("holds", "A8 summary")
    b6 = Finding("does not hold", "B6 summary")
    text = paper.model_level_text(part, a8, b6)
    assert "- quality chapter (step time, B6): **has not run**" in text
    assert "- realmodels chapter (norms' share of a real model's time): norms take 3% of the time" in text
    assert text.endswith("**A8** — holds: A8 summary\n\n**B6** — does not hold: B6 summary")


# ---- figures


def test_ratio_and_bandwidth_figures_draw_per_implementation_or_say_why_not():
    df = report.frame(_document(CASES))
    fig = figures.ratio_figure(ratio.forward_sweep(report.ln_rms_ratios(df)))
    (ax,) = fig.axes
    assert ax.get_xscale() == "log" and ax.get_ylabel() == figures.RATIO_LABEL
    assert any(list(line.get_ydata()) == [1.0, 1.0] for line in ax.get_lines())  # the reference line at 1
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "torch" in legend and "eager" in legend
    bandwidth_fig = figures.bandwidth_figure(bandwidth.forward_norm_cases(report.stable(df)))
    assert [a.get_title() for a in bandwidth_fig.axes] == ["norm = layer", "norm = rms"]
    empty = figures.ratio_figure(pd.DataFrame())
    assert [t.get_text() for t in empty.axes[0].texts] == [
        "no stable forward case was timed for both norms in this run"
    ]


def test_gpu_figures_title_the_hardware_and_draw_memory_bound(tmp_path, monkeypatch):
    run = _run(tmp_path, monkeypatch, [_gpu_document()])
    ratios, stable = on_gpu.gpu_frames(run.gpu_runs, run.live)
    fig = figures.gpu_ratio_figure(ratio.forward_sweep(ratios), run.gpu_runs)
    assert fig.get_suptitle() == "Test GPU; commits: fedcba987654"
    bandwidth_fig = figures.gpu_bandwidth_figure(bandwidth.forward_norm_cases(stable), run.gpu_runs, 0.4)
    dotted = [line for ax in bandwidth_fig.axes for line in ax.get_lines() if line.get_linestyle() == ":"]
    assert len(dotted) == 2 and all(list(line.get_ydata()) == [0.4, 0.4] for line in dotted)
    none = figures.gpu_bandwidth_figure(pd.DataFrame(), [], 0.4)
    assert [t.get_text() for t in none.axes[0].texts] == ["no GPU run is committed"]
    unstable_only = figures.gpu_ratio_figure(pd.DataFrame(), run.gpu_runs)
    assert [t.get_text() for t in unstable_only.axes[0].texts] == [
        "no stable GPU forward case was timed for both norms"
    ]
