"""The geometry chapter's sections (normlab.analysis.geometry) and figures, on small or hand-made inputs."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from normlab.analysis.geometry import (  # noqa: E402
    articles,
    dimension,
    eps_placement,
    figures,
    formulas,
    invariance,
    mean_dominated,
    parameters,
    settings,
)

TOL = 1e-12


def _generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.fixture(scope="module")
def formula_check():
    return formulas.check_formulas(16, 16, _generator(), repeats=2)


def _check(**errors) -> formulas.FormulaCheck:
    """A formula check with chosen errors, on a real batch (the A3 check reads its tokens)."""
    values = {"layer_norm_error": 1e-15, "rms_inside_error": 1e-15, "a2_vs_torch": 1e-3, "a2_vs_outside_reference": 0.0}
    values.update(errors)
    return formulas.FormulaCheck(
        articles.random_tokens(16, 8, _generator()), pd.DataFrame(), spread=0.0, a2_gap_spread=0.0, **values
    )


def test_chapter_settings_checks_the_profile_and_the_sizes():
    assert settings.chapter_settings("smoke") == settings.PROFILES["smoke"]
    with pytest.raises(ValueError, match="unknown profile .*; valid profiles: smoke, cpu, gpu"):
        settings.chapter_settings("laptop")
    with pytest.raises(ValueError, match="points must be an int >= 5"):
        settings.chapter_settings("smoke", {"points": 2})
    with pytest.raises(ValueError, match="rank_tokens must be at least 2"):
        settings.chapter_settings("smoke", {"rank_tokens": 40, "rank_d": 32})


def test_short_drops_the_exponent_padding():
    assert [settings.short(v) for v in (1e-6, 1e-12, 1e-2, 3e4)] == ["1e-6", "1e-12", "1e-2", "3e+4"]


def test_check_formulas_finds_the_written_formulas_equal_to_torch_except_eps_outside(formula_check):
    assert len(formula_check.errors) == 4 * len(formulas.FORMULA_EPS)
    assert formula_check.layer_norm_error < TOL and formula_check.rms_inside_error < TOL
    assert formula_check.a2_vs_outside_reference < TOL and formula_check.a2_vs_torch > 1e-9
    assert formula_check.spread >= 0 and formula_check.a2_gap_spread > 0
    by_eps = formula_check.by_eps()
    assert list(by_eps.columns) == ["formula", *formulas.FORMULA_EPS] and len(by_eps) == 4


def test_a1_and_b2_flip_when_the_error_crosses_the_tolerance():
    assert formulas.a1_layer_norm_formula(_check(layer_norm_error=5e-13), TOL).verdict == "holds"
    failing = formulas.a1_layer_norm_formula(_check(layer_norm_error=5e-12), TOL)
    assert failing.verdict == "does not hold" and "to 5e-12" in failing.summary
    assert "ε ∈ {1e-6, 1e-5, 1e-2}" in failing.summary and failing.key_number == 5e-12 and failing.threshold == TOL
    assert formulas.b2_formulas(_check(), TOL).verdict == "holds"
    b2 = formulas.b2_formulas(_check(rms_inside_error=2e-11), TOL)
    assert b2.verdict == "does not hold" and b2.key_number == 2e-11 and "to 2e-11" in b2.summary


def test_a3_flips_with_the_uncentred_bar(formula_check):
    holds = formulas.a3_no_centring(formula_check, TOL, uncentred=0.1, repeats=2)
    median = holds.evidence["rms_output_mean_median"]
    assert holds.verdict == "holds" and holds.evidence["torch_parameters"] == ["weight"]
    assert f"median |mean(y)| = {median:.2f}" in holds.summary and holds.threshold == 0.1
    assert formulas.a3_no_centring(formula_check, TOL, uncentred=median + 1, repeats=2).verdict == "does not hold"
    # a formula error above the tolerance also breaks it
    assert (
        formulas.a3_no_centring(_check(rms_inside_error=1e-9), TOL, uncentred=0.1, repeats=2).verdict == "does not hold"
    )
    paragraph = formulas.formulas_paragraph(formula_check, holds)
    assert paragraph.startswith("**A1, B2, A3.**") and f"{median:.2f}" in paragraph


@pytest.fixture(scope="module")
def sweep():
    return invariance.sweep_invariance(16, 16, 5, _generator())


def _invariance(sweep, **overrides):
    arguments = {"shift_regime": 1e4, "shift_sensitive": 0.1, "repeats": 2}
    arguments.update(overrides)
    return invariance.invariance_findings(sweep, 1e-9, {"float32": 1e-3, "bfloat16": 0.1}, TOL, **arguments)


def test_sweep_invariance_covers_every_norm_dtype_and_transform(sweep):
    assert len(sweep.changes) == 2 * 3 * 2 * 5
    amounts, changes = sweep.curve("LayerNorm", "float64", invariance.SCALE)
    assert list(amounts) == sweep.scales and changes.max() < 1e-9
    _, rms_shift = sweep.curve("RMSNorm", "float64", invariance.SHIFT)
    assert rms_shift.max() > 0.1


def test_invariance_findings_flip_with_their_thresholds(sweep):
    found = _invariance(sweep)
    assert found.a4.verdict == "holds with caveats"  # float32 rounding breaks the shift invariance within 1e8
    assert found.b4.verdict == "holds" and found.b4.threshold == 0.1
    at_sigma = found.b4.key_number
    assert f"changes its output by {at_sigma:.2f}" in found.b4.summary and f"{at_sigma:.2f}" in found.paragraph
    assert found.b3_evidence["direction_ok"] and found.b3_evidence["shift_ok"] and "Invariance part" in found.b3_summary
    # asking for invariance beyond the largest shift swept, or a larger shift sensitivity, fails the claims
    assert _invariance(sweep, shift_regime=1e9).a4.verdict == "does not hold"
    insensitive = _invariance(sweep, shift_sensitive=at_sigma + 1)
    assert insensitive.a4.verdict == "does not hold" and insensitive.b4.verdict == "does not hold"
    assert insensitive.b4.reads == ("invariance_tol", "shift_sensitive")  # its rule: the design's, with these


def test_output_rank_and_the_b16_part():
    rank = dimension.measure_output_rank(64, 8, _generator())
    assert rank.ranks == {"LayerNorm": 7, "RMSNorm": 8} and len(rank.spectra) == 16
    summary, evidence = dimension.b16_geometric_part(rank)
    assert evidence["rank_one_more"] is True and evidence["d"] == 8 and evidence["tokens"] == 64
    assert "rank 8 under RMSNorm and 7 under LayerNorm (d = 8)" in summary


def test_measure_parameters_counts_both_norms():
    memory = parameters.measure_parameters(8, 4)
    assert memory.counts == {
        "torch.nn.LayerNorm": 16,
        "torch.nn.RMSNorm": 8,
        "normlab.LayerNorm": 16,
        "normlab.RMSNorm": 8,
    }
    assert list(memory.table["bytes kept for backward"]) == [memory.saved[n] for n in ("LayerNorm", "RMSNorm") * 2]


def _memory(saved_rms: int = 100, share_ln: float = 0.02, rms_count: int = 8) -> parameters.ParameterMemory:
    counts = {"torch.nn.LayerNorm": 16, "torch.nn.RMSNorm": rms_count, "normlab.LayerNorm": 16, "normlab.RMSNorm": 8}
    return parameters.ParameterMemory(
        8,
        4,
        pd.DataFrame(),
        counts,
        {"LayerNorm": 200, "RMSNorm": saved_rms},
        {"LayerNorm": share_ln, "RMSNorm": share_ln / 2},
    )


def test_a6_caveat_follows_the_negligible_share_and_the_memory():
    assert parameters.a6_parameter_saving(_memory(), negligible_share=0.01).verdict == "holds"
    small = parameters.a6_parameter_saving(_memory(share_ln=0.005), negligible_share=0.01)
    assert small.verdict == "holds with caveats" and "0.50% vs 0.25%" in small.summary
    assert small.reads == ("no_extra_parameters", "negligible_share")
    assert parameters.a6_parameter_saving(_memory(saved_rms=300), negligible_share=0.01).verdict == "holds with caveats"
    assert parameters.a6_parameter_saving(_memory(rms_count=16), negligible_share=0.01).verdict == "does not hold"


@pytest.fixture(scope="module")
def placement():
    return eps_placement.sweep_placement(16, 5, _generator())


def test_torch_measures_as_eps_inside():
    measured = eps_placement.probe_torch_placement(16, _generator())
    assert measured.inside_error < TOL < measured.outside_gap and measured.default_eps_error < 1e-6
    assert measured.sentence().startswith("Measured: `F.rms_norm` matches ε inside to ")


def test_sweep_placement_has_a_crossover_per_eps_and_dtype(placement):
    assert set(placement.crossovers) == {
        (e, dt) for e in eps_placement.PLACEMENT_EPS for dt in eps_placement.RESOLUTION
    }
    assert len(placement.gaps) == len(eps_placement.PLACEMENT_EPS) * len(placement.rms_values)
    assert "predicted max(ε/u, √(ε/2u))" in placement.crossover_table().columns


def _placement(placement, measured, check, **overrides):
    arguments = {"eps": 1e-6, "agreement": 2, "visible_rms": 1.0, "float32_tol": 1e-6, "repeats": 2}
    arguments.update(overrides)
    return eps_placement.placement_findings(placement, measured, check, TOL, **arguments)


def test_placement_findings_flip_with_their_thresholds(placement, formula_check):
    inside = eps_placement.TorchPlacement(inside_error=1e-16, outside_gap=1e-3, default_eps_error=1e-8)
    found = _placement(placement, inside, formula_check)
    crossover = found.q1.key_number
    assert crossover > 1.0 and found.q1.verdict == "holds with caveats"  # float32 differs above RMS 1 at ε = 1e-6
    assert f"below r ≈ {crossover:.1f}" in found.q1.summary and f"RMS ≈ {crossover:.2g}" in found.paragraph
    assert _placement(placement, inside, formula_check, visible_rms=crossover * 2).q1.verdict == "holds"
    assert _placement(placement, inside, formula_check, agreement=1).q1.verdict == "does not hold"
    outside = eps_placement.TorchPlacement(inside_error=1e-3, outside_gap=1e-16, default_eps_error=1e-8)
    assert _placement(placement, outside, formula_check).q1.verdict == "does not hold"
    assert found.a2.verdict == "holds with caveats" and found.a2.key_number == formula_check.a2_vs_torch
    assert _placement(placement, inside, _check(a2_vs_torch=1e-13)).a2.verdict == "holds"
    assert _placement(placement, inside, _check(a2_vs_outside_reference=1e-6)).a2.verdict == "does not hold"


def _b11_frame(ln_small_effect: float) -> pd.DataFrame:
    rows = [
        ("RMSNorm", 1.0, 1.0, 2e5, 1e-6, 0.5),
        ("RMSNorm", 100.0, 1.0, 1e9, 1e-9, 0.9999),
        ("LayerNorm", 0.0, 1e-3, 0.1, ln_small_effect, 0.0),
        ("LayerNorm", 1.0, 1.0, 1e5, 1e-6, 0.0),
    ]
    columns = ["norm", "offset c", "noise s", "statistic / ε", "ε effect", "output share along 1"]
    return pd.DataFrame(rows, columns=columns)


def _b11(frame, ln_takes_over=0.25):
    return mean_dominated.b11_eps_on_mean_dominated(
        frame,
        1e-5,
        8,
        rms_negligible=1e-4,
        ln_takes_over=ln_takes_over,
        ln_negligible=1e-3,
        offset_dominated=0.99,
        repeats=2,
    )


def test_b11_flips_when_layer_norms_eps_effect_crosses_its_bar():
    finding, sentence = _b11(_b11_frame(0.5))
    assert finding.verdict == "holds" and finding.key_number == 0.5 and finding.threshold == 0.25
    assert "shrinks by ≥ 50% when σ² ≤ ε" in finding.summary and "at least 50%" in sentence
    assert finding.reads == ("eps", "rms_negligible", "ln_takes_over", "ln_negligible", "offset_dominated")
    assert _b11(_b11_frame(0.2))[0].verdict == "does not hold"
    assert _b11(_b11_frame(0.5), ln_takes_over=0.6)[0].verdict == "does not hold"


def test_sweep_mean_dominated_pads_the_right_statistic():
    frame = mean_dominated.sweep_mean_dominated(8, 5, 1e-5, _generator())
    assert len(frame) == len(mean_dominated.MEAN_DOMINATED_OFFSETS) * 10 * 2
    rms = frame[(frame.norm == "RMSNorm") & (frame["offset c"] == 100.0)]
    assert (rms["statistic / ε"] >= 1e9).all() and (rms["ε effect"] < 1e-6).all()


# ---------------------------------------------------------------- figures


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_invariance_figure_has_two_log_panels_with_the_visible_bars(sweep):
    fig = figures.invariance(sweep.changes, {"float32": 1e-3, "bfloat16": 0.1})
    shift_ax, scale_ax = fig.axes[:2]
    assert shift_ax.get_xscale() == shift_ax.get_yscale() == "log"
    assert shift_ax.get_xlabel().startswith("shift c") and scale_ax.get_xlabel().startswith("scale factor a")
    bars = [line for line in scale_ax.get_lines() if list(line.get_xdata()) == [0, 1]]
    assert sorted(line.get_ydata()[0] for line in bars) == [1e-3, 0.1]


def test_spectrum_figure_titles_the_batch_and_marks_the_rank_threshold():
    rank = dimension.measure_output_rank(32, 8, _generator())
    fig = figures.spectrum(rank.spectra, 32, 8)
    (ax,) = fig.axes
    assert ax.get_title() == "Outputs of 32 random tokens, d = 8" and ax.get_yscale() == "log"
    assert "rank threshold 1e-10" in [t.get_text() for t in ax.get_legend().get_texts()]


def test_placement_figure_annotates_both_resolutions(placement):
    fig = figures.placement(placement.gaps)
    gaps_ax, shares_ax = fig.axes
    assert [t.get_text() for t in gaps_ax.texts] == ["float32 resolution", "bfloat16 resolution"]
    assert shares_ax.get_title() == "Is the difference visible in the stored output?"
    assert gaps_ax.get_yscale() == "log" and shares_ax.get_xscale() == "log"


def test_mean_dominated_figure_marks_sqrt_eps():
    frame = mean_dominated.sweep_mean_dominated(8, 5, 1e-4, _generator())
    fig = figures.mean_dominated(frame, 1e-4)
    effect_ax, share_ax = fig.axes
    assert effect_ax.get_title() == "What ε = 0.0001 does"
    assert any(line.get_label() == "s = √ε" and line.get_xdata()[0] == pytest.approx(1e-2) for line in effect_ax.lines)
    assert share_ax.get_ylabel() == "share of output energy along 1"
