"""The Jacobians chapter's tables, findings and figures on small or hand-made inputs where the answer is known."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from normlab.analysis.jacobians import (  # noqa: E402
    against_autograd,
    epsilon,
    figures,
    gain_backward,
    gain_fit,
    matrices,
    null_space,
    one_over_r,
    profiles,
    update_parts,
    verdicts,
)

FORMS = [
    against_autograd.PRINTED_JACOBIAN,
    *against_autograd.EXACT_JACOBIANS,
    *against_autograd.LAYER_NORM_FORMS,
    against_autograd.PRINTED_INPUT_GRADIENT,
    against_autograd.EXACT_INPUT_GRADIENT,
    against_autograd.GAIN_GRADIENT,
]


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def formula_check(printed=5.7, exact=1e-15, layer=1e-15):
    """Two tokens per form; the worst of each is the value given, the other token half of it."""
    worst = {form: exact for form in FORMS}
    worst.update({against_autograd.PRINTED_JACOBIAN: printed, against_autograd.PRINTED_INPUT_GRADIENT: 2 * printed})
    worst.update({form: layer for form in against_autograd.LAYER_NORM_FORMS})
    rows = [
        {"d": 8, "token": t, "form": form, "relative max error": value * (1 if t else 0.5)}
        for form, value in worst.items()
        for t in (0, 1)
    ]
    errors = pd.DataFrame(rows)
    errors["plotted error"] = errors["relative max error"].clip(lower=1e-18)
    return against_autograd.FormulaCheck(errors)


def structure_check(rank_ok=True, ln_leak=1e-16):
    rows = []
    for eps in (0.0, 1e-6):
        rows.append(
            {
                "d": 8,
                "eps": eps,
                "RMS: J x": 1e-16 if eps == 0 else 1e-7,
                "RMS: J 1": 0.9,
                "LN: J x": ln_leak,
                "LN: J 1": 2e-16,
                "RMS rank": 7,
                "LN rank": 6 if rank_ok else 7,
            }
        )
    return null_space.StructureCheck(pd.DataFrame(rows))


def test_profile_settings():
    assert profiles.profile_settings("smoke")["dims"] == [8, 32]
    with pytest.raises(ValueError, match="unknown profile .*; valid profiles: smoke, cpu, gpu"):
        profiles.profile_settings("tiny")
    with pytest.raises(ValueError, match="dims"):
        profiles.profile_settings("smoke", {"dims": [2]})
    with pytest.raises(ValueError, match="tokens must be an int >= 2"):
        profiles.profile_settings("smoke", {"tokens": 1})


def test_formula_table_on_real_tokens_separates_printed_from_exact():
    check = against_autograd.FormulaCheck(
        against_autograd.formula_error_table([6], 2, torch.Generator().manual_seed(0), 1e-2)
    )
    assert set(check.errors["form"]) == set(FORMS) and len(check.errors) == 2 * len(FORMS)
    assert check.printed_jacobian_error > 0.1 and check.exact_jacobian_error < 1e-12
    assert check.layer_norm_error < 1e-12 and check.gain_grad_error < 1e-12
    assert (check.errors["plotted error"] >= 1e-18).all()
    assert "<caption>Worst relative error" in str(against_autograd.formula_table(check))


def test_formula_check_picks_the_worst_of_each_group():
    check = formula_check(printed=5.7, exact=3e-16, layer=4e-16)
    assert check.printed_jacobian_error == 5.7 and check.printed_input_grad_error == 11.4
    assert check.exact_jacobian_error == 3e-16 and check.layer_norm_error == 4e-16
    assert check.sd[against_autograd.PRINTED_JACOBIAN] == pytest.approx(5.7 * 0.5 / math.sqrt(2))


def test_heatmaps_differ_by_the_mean_projection():
    panels = matrices.heatmap_panels(torch.Generator().manual_seed(0), d=8)
    assert list(panels)[-1] == matrices.ZERO_MEAN_DIFFERENCE and all(p.shape == (8, 8) for p in panels.values())
    assert matrices.mean_projection_gap(panels[matrices.ZERO_MEAN_DIFFERENCE]) < 1e-12
    assert matrices.mean_projection_gap(torch.zeros(4, 4, dtype=torch.float64)) == 0.25


def test_structure_check_and_its_table():
    table = null_space.structure_table([5], 2, torch.Generator().manual_seed(0), 1e-6)
    real = null_space.StructureCheck(table)
    assert len(table) == 4 and real.rank_ok and real.null_kept["LN: J 1"] < 1e-12 and real.rms_keeps_ones > 0.01
    assert structure_check(rank_ok=False).rank_ok is False
    assert structure_check().eps_scale_leak == 1e-7
    assert "every token with ε = 0: True" in str(null_space.structure_summary_table(structure_check()))


def test_b3_combines_the_geometry_part_by_its_rule():
    geometry = {"evidence": {"shift_ok": True, "scale_ok": True, "direction_ok": True}, "summary": "G."}
    both = null_space.b3_finding(formula_check(), structure_check(), geometry, 1e-12)
    assert both.verdict == "holds" and both.summary.endswith("rank d−2. Geometry part: G.")
    caveat = {**geometry, "evidence": {**geometry["evidence"], "precision_caveat": True}}
    assert null_space.b3_finding(formula_check(), structure_check(), caveat, 1e-12).verdict == "holds with caveats"
    missing = null_space.b3_finding(formula_check(), structure_check(), None, 1e-12)
    assert missing.verdict == "holds with caveats" and "has not run" in missing.summary
    broken = null_space.b3_finding(formula_check(layer=1e-9), structure_check(), geometry, 1e-12)
    assert broken.verdict == "does not hold" and "to 1.0e-09 (relative)" in broken.summary
    assert (
        null_space.b3_finding(formula_check(), structure_check(rank_ok=False), geometry, 1e-12).verdict
        == "does not hold"
    )
    assert both.key_number == 1e-15 and both.threshold == 1e-12
    assert verdicts.verdict_line("B3", both).startswith("**B3** — holds: Jacobian part")


def scaling_frame(eps_ratio_error=0.05):
    return pd.DataFrame(
        {
            "eps": [0.0, 0.0, 1e-6, 1e-6],
            "ratio": [1.0, 1 + 2**-40, 1 + eps_ratio_error, 1.0],
            "rms of a·x": [1e-3, 1.0, 1e-3, 1.0],
        }
    )


def test_scaling_and_eps_summaries():
    assert one_over_r.exact_scaling_error(scaling_frame()) == 2**-40
    assert one_over_r.rms_where_broken(scaling_frame(0.05)) == 1e-3
    assert one_over_r.rms_where_broken(scaling_frame(0.001)) == 0.0
    frame = pd.DataFrame({"ε / statistic": [1e-8, 1e-5, 1.0], "relative gap": [2e-8, 3e-5, 0.5]})
    assert epsilon.gap_per_eps(frame) == pytest.approx(3.0)
    real = one_over_r.scaling_table([4], 3, torch.Generator().manual_seed(0), 1e-6)
    assert len(real) == 6 and one_over_r.exact_scaling_error(real) < 1e-12
    effect = epsilon.eps_effect_table([4], 3, torch.Generator().manual_seed(0))
    assert len(effect.frame) == 6 and effect.ratios.tolist()[0] == pytest.approx(1e-10)


def radial_check(kept=1e-16):
    frame = pd.DataFrame(
        {"radial kept": [kept, 0.0], "tangential error": [1e-16, 0.0], "output change along y": [0.0, 0.0]}
    )
    return update_parts.RadialCheck(frame, 1e-12)


def test_b12_caveat_turns_on_the_printed_error():
    args = (structure_check(), scaling_frame(), pd.DataFrame({"ε / statistic": [1e-6], "relative gap": [1e-6]}), 1e-16)
    wrong = update_parts.b12_finding(formula_check(printed=5.7), *args, radial_check(), [8], 1e-12, 1e-2)
    assert wrong.verdict == "holds with caveats" and "off by 5.7 (relative max error)" in wrong.summary
    rounded = update_parts.b12_finding(formula_check(printed=1e-3), *args, radial_check(), [8], 1e-12, 1e-2)
    assert rounded.verdict == "holds" and rounded.key_number == 1e-3 and rounded.threshold == 1e-2
    assert wrong.evidence["essay_direction_unchanged_right"] is False and wrong.evidence["essay_radial_removed_right"]
    leaky = update_parts.b12_finding(formula_check(exact=1e-9), *args, radial_check(), [8], 1e-12, 1e-2)
    assert leaky.verdict == "does not hold"
    assert "<caption>RMSNorm&#x27;s Jacobian" in str(update_parts.radial_summary_table(radial_check(), [8]))
    assert update_parts.RadialCheck(update_parts.radial_table([5], 2, torch.Generator().manual_seed(0)), 1e-12).removed


def test_gain_trials_and_b13():
    trials = gain_backward.gain_trials([6], 6, torch.Generator().manual_seed(0))
    assert trials.trials == 6 and trials.uniform_gain_error < 1e-12 and 0 <= trials.share_increasing <= 1
    always = gain_backward.GainTrials(1e-16, 1.0, 10)
    sometimes = gain_backward.GainTrials(1e-16, 0.9, 10)
    assert gain_backward.b13_finding(formula_check(printed=1e-3), always, 0.0, 1e-12, 1e-2).verdict == "holds"
    b13 = gain_backward.b13_finding(formula_check(printed=1e-3), sometimes, 0.0, 1e-12, 1e-2)
    assert b13.verdict == "holds with caveats" and "in only 90% of trials" in b13.summary
    assert b13.key_number == pytest.approx(2e-3)
    b12 = update_parts.b12_finding(
        formula_check(), structure_check(), scaling_frame(), pd.DataFrame({"ε / statistic": [1e-6], "relative gap": [1e-6]}),
        0.0, radial_check(), [8], 1e-12, 1e-2,
    )  # fmt: skip
    paragraph = gain_backward.b12_b13_paragraph(b12, b13, radial_check(kept=2e-16))
    assert paragraph.startswith("**B12** — holds with caveats:") and "**B13** — holds with caveats:" in paragraph
    assert "kept at most 2.00e-16" in paragraph


def made_gain_fit(correlation_gap):
    trajectory = torch.linspace(0, 1, 8, dtype=torch.float64).repeat(3, 1)
    return gain_fit.GainFit(
        trajectory=trajectory,
        slopes=trajectory[-1],
        pearson=trajectory[-1] / 2,
        batch_gain_error=1e-16,
        fit_error=1e-10,
        correlation_gap=correlation_gap,
        correlation_gap_sd=0.01,
        suppression=0.01,
        suppression_bound=0.1,
        fit_tokens=64,
        fit_steps=2,
    )


def test_b14_caveat_turns_on_the_correlation_gap():
    assert gain_fit.b14_finding(made_gain_fit(0.01), 1e-12, 1e-8, 0.05).verdict == "holds"
    gap = gain_fit.b14_finding(made_gain_fit(1.5), 1e-12, 1e-8, 0.05)
    assert gap.verdict == "holds with caveats" and "(|g − Pearson r| up to 1.50)" in gap.summary
    assert gap.key_number == 1.5 and gap.threshold == 0.05 and gap.spread == 0.01
    real = gain_fit.gain_fit(64, 20, torch.Generator().manual_seed(0))
    assert real.trajectory.shape == (21, 8) and real.batch_gain_error < 1e-12 and real.correlation_gap_sd > 0


def test_figures_draw_their_parts():
    check = formula_check()
    (ax,) = figures.errors_figure(check.errors, 1e-12).axes
    assert ax.get_xscale() == "log" and len(ax.get_yticklabels()) == len(FORMS)
    assert ax.get_legend().get_title().get_text() == "d / tolerance"
    panels = matrices.heatmap_panels(torch.Generator().manual_seed(0), d=8)
    fig = figures.heatmaps_figure(panels)
    assert len(fig.axes) == 8  # four heatmaps and their colour bars
    assert [a.get_title() for a in fig.axes[:4:1]][0] == "exact RMSNorm: r·J"
    scaling = scaling_frame().assign(d=8)
    (ax,) = figures.scaling_figure(scaling, 1e-6).axes
    assert ax.get_xscale() == "log" and any(line.get_xdata()[0] == pytest.approx(1e-3) for line in ax.lines)
    effect = epsilon.eps_effect_table([4], 3, torch.Generator().manual_seed(0))
    (ax,) = figures.eps_figure(effect.frame, effect.ratios).axes
    assert ax.get_yscale() == "log" and "gap = ε / statistic" in [t.get_text() for t in ax.get_legend().get_texts()]
    fit = made_gain_fit(0.5)
    left, right = figures.gain_fit_figure(fit.trajectory, fit.slopes, fit.pearson).axes
    assert len(left.lines) == 2 * 8  # a trajectory and its dotted slope per channel
    assert len([t.get_text() for t in right.get_legend().get_texts()]) == 3
