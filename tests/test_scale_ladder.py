"""The quality chapter's scale ladder: rungs, the trend sentence, the extra (GPU) rungs and the figure, on
hand-made inputs whose answer is known."""

import ast
import math
from pathlib import Path

import matplotlib
import pandas as pd
import pytest
import torch

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.container import ErrorbarContainer  # noqa: E402

from normlab.analysis.quality import figures as F  # noqa: E402
from normlab.analysis.quality import loss_parity, profiles, scale_ladder, training  # noqa: E402
from normlab.analysis.shared.parity import t975  # noqa: E402
from normlab.gpt.model import GPT, GPTConfig  # noqa: E402

MARGIN = 0.02
NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "quality.py"


def point(parameters, mean, half, pairs=6, hardware="test CPU (2 cores)"):
    """A ladder rung with the interval given by hand."""
    return {
        "label": f"{parameters:g} parameters",
        "parameters": parameters,
        "mean_difference": mean,
        "ci_low": mean - half,
        "ci_high": mean + half,
        "half_width": half,
        "pairs": pairs,
        "hardware": hardware,
    }


def table(*points):
    return scale_ladder.ladder_table(list(points))


def test_a_difference_that_moves_toward_zero_shrinks():
    trend = scale_ladder.ladder_trend(
        table(point(3e4, -0.030, 0.004), point(2e5, -0.015, 0.004), point(1e6, -0.002, 0.004)), MARGIN
    )
    assert trend.outcome == "shrinks" and trend.change == pytest.approx(0.028)
    assert trend.change_low > 0 and not trend.all_inside  # the smallest rung's interval leaves the margin
    assert "**shrinks**" in trend.sentence and "+0.0280" in trend.sentence and "30k to 1,000k" in trend.sentence


def test_a_difference_that_moves_away_from_zero_grows_even_inside_the_margin():
    trend = scale_ladder.ladder_trend(table(point(3e4, 0.001, 0.002), point(1e6, 0.012, 0.002)), MARGIN)
    assert trend.outcome == "grows" and trend.all_inside
    assert "**grows**" in trend.sentence and "inside ±0.02 nats" in trend.sentence


def test_a_steady_difference_inside_the_margin_stays_within_it():
    trend = scale_ladder.ladder_trend(
        table(point(3e4, 0.003, 0.010), point(2e5, -0.002, 0.012), point(1e6, 0.004, 0.015)), MARGIN
    )
    assert trend.outcome == "stays within the margin" and trend.change_low < 0 < trend.change_high
    assert "**stays within the margin**" in trend.sentence


def test_wide_intervals_that_show_no_change_cannot_tell():
    trend = scale_ladder.ladder_trend(table(point(3e4, 0.0, 0.010), point(1e6, 0.002, 0.030, pairs=3)), MARGIN)
    assert trend.outcome == "cannot tell" and not trend.all_inside
    # the widest interval is named, so the reader sees which rung needs more pairs
    assert "1e+06 parameters" in trend.sentence and "more pairs" in trend.sentence


def test_the_change_interval_is_welch_from_each_rungs_own_interval():
    small, large = point(3e4, 0.0, 0.01, pairs=6), point(1e6, 0.05, 0.03, pairs=3)
    trend = scale_ladder.ladder_trend(table(small, large), MARGIN)
    se_small, se_large = 0.01 / t975(5), 0.03 / t975(2)
    df = (se_small**2 + se_large**2) ** 2 / (se_small**4 / 5 + se_large**4 / 2)
    half = t975(df) * math.hypot(se_small, se_large)
    assert trend.change_high - trend.change == pytest.approx(half)


def test_extra_rungs_join_the_ladder_in_order_of_size_with_their_hardware():
    cpu = [point(1e6, 0.0, 0.01), point(3e4, 0.0, 0.01)]
    gpu = [point(8.5e7, 0.001, 0.004, pairs=16, hardware="NVIDIA H200")]
    ladder = scale_ladder.ladder_table(cpu, gpu_rungs=gpu)
    assert ladder.parameters.tolist() == [3e4, 1e6, 8.5e7]
    assert ladder.hardware.tolist()[-1] == "NVIDIA H200"
    assert scale_ladder.ladder_trend(ladder, MARGIN).sentence.count("85,000k") == 1


@pytest.mark.parametrize(
    "broken, message",
    [
        ({"hardware": ""}, "no hardware label"),
        ({"hardware": None}, "no hardware label"),
        ({"mean_difference": math.nan}, "must be finite"),
        ({"ci_low": 0.5}, "ci_low <= mean <= ci_high"),
        ({"pairs": 1}, ">= 2 pairs"),
    ],
)
def test_a_broken_extra_rung_is_refused_naming_the_problem(broken, message):
    with pytest.raises(ValueError, match=message):
        scale_ladder.ladder_table([point(3e4, 0.0, 0.01)], gpu_rungs=[{**point(1e8, 0.0, 0.01), **broken}])


def test_an_extra_rung_missing_a_column_names_it():
    incomplete = {k: v for k, v in point(1e8, 0.0, 0.01).items() if k != "hardware"}
    with pytest.raises(ValueError, match=r"gpu_rungs\[0\] lacks \['hardware'\]"):
        scale_ladder.ladder_table([point(3e4, 0.0, 0.01)], gpu_rungs=[incomplete])


def test_a_ladder_needs_two_rungs():
    with pytest.raises(ValueError, match="at least two rungs"):
        scale_ladder.ladder_table([point(3e4, 0.0, 0.01)])


def paired_runs(differences, base=2.0):
    runs = {}
    for seed, difference in enumerate(differences):
        for norm, final in (("layer", base + 0.1 * seed), ("rms", base + 0.1 * seed + difference)):
            runs[(norm, seed)] = {
                "diverged": False,
                "val": [(0, 5.5), (10, final)],
                "final_val_loss": final,
                "final_drop": 0.0,
            }
    return runs


def test_a_ladder_point_carries_the_paired_interval_and_the_size():
    settings = {**profiles.settings_for("cpu"), "width": 24, "depth": 2, "heads": 4}
    parity = loss_parity.loss_parity(paired_runs([0.01, 0.02, 0.03]), MARGIN)
    rung = scale_ladder.ladder_point(settings, parity, "test CPU")
    assert rung["mean_difference"] == pytest.approx(0.02) and rung["pairs"] == 3
    assert rung["ci_low"] == pytest.approx(parity.final_pair["ci_low"]) and rung["hardware"] == "test CPU"
    assert rung["interval"] == scale_ladder.T_INTERVAL  # every rung's pairs, A9's confirmation too, were fixed ahead
    rms = sum(p.numel() for p in GPT(GPTConfig(**training.model_config(settings, "rms"))).parameters())
    # the LayerNorm model's count: RMSNorm's plus one bias per norm (two per block and the final one)
    assert rung["parameters"] == rms + 24 * (2 * 2 + 1)


def test_a_rung_with_a_diverged_run_is_refused_with_the_fix():
    runs = paired_runs([0.01, 0.02])
    runs[("rms", 1)]["diverged"] = True
    parity = loss_parity.loss_parity(runs, MARGIN)
    with pytest.raises(ValueError, match="diverged.*lower the rung's lr"):
        scale_ladder.ladder_point(
            {**profiles.settings_for("cpu"), "width": 24, "depth": 2, "heads": 4}, parity, "test CPU"
        )


def test_counting_parameters_leaves_the_random_stream_alone():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    assert scale_ladder.parameter_count(profiles.settings_for("cpu")) == 234624
    assert torch.equal(torch.rand(3), expected)


def test_the_cpu_ladder_reaches_ten_times_below_the_chapters_size():
    settings = profiles.settings_for("cpu")
    sizes = [scale_ladder.parameter_count(scale_ladder.rung_settings(settings, rung)) for rung in settings["ladder"]]
    own = scale_ladder.parameter_count(settings)
    assert sizes and own / min(sizes) >= 10


@pytest.mark.parametrize(
    "rung, message",
    [
        (dict(width=24, depth=2, heads=5, seeds=3), "even head size"),
        (dict(width=24, depth=2, heads=4, seeds=2), "at least 3 pairs"),
    ],
)
def test_a_bad_rung_is_refused_before_training(monkeypatch, rung, message):
    monkeypatch.setitem(profiles.PROFILES, "cpu", {**profiles.PROFILES["cpu"], "ladder": (rung,)})
    with pytest.raises(ValueError, match=message):
        profiles.settings_for("cpu")


def test_an_unknown_trainer_is_refused(monkeypatch):
    monkeypatch.setitem(profiles.PROFILES, "cpu", {**profiles.PROFILES["cpu"], "trainer": "threads"})
    with pytest.raises(ValueError, match="trainer must be one of"):
        profiles.settings_for("cpu")


def test_train_many_starts_one_pool_for_every_size_and_hands_each_its_own_runs(monkeypatch):
    calls = []

    def run_in_place(function, jobs, **kwargs):
        calls.append(len(jobs))
        return [function(**job) for job in jobs]

    def fake_job(model, train, keep_weights):
        return {"width": model["width"], "norm": model["norm"], "seed": train["seed"]}

    monkeypatch.setattr(training, "run_parallel", run_in_place)
    monkeypatch.setattr(training, "train_job", fake_job)
    base = profiles.settings_for("smoke")
    sizes = [{**base, "width": 48, "seeds": 3}, {**base, "width": 16, "heads": 2, "seeds": 2}]
    trained = training.train_many(sizes, None, keep_weights=False)
    assert calls == [10]  # one pool for both sizes
    for settings, runs in zip(sizes, trained):
        assert list(runs) == [(n, s) for s in training.seed_range(settings) for n in profiles.NORMS]
        assert min(seed for _, seed in runs) == settings["first_seed"]  # A9's confirmation starts past its pilot
        assert all(run == {"width": settings["width"], "norm": n, "seed": s} for (n, s), run in runs.items())


def test_the_figure_has_a_log_axis_intervals_the_band_and_the_marked_point():
    ladder = scale_ladder.ladder_table(
        [point(3e4, -0.01, 0.01), point(2e5, 0.0, 0.008)], [point(1e8, 0.002, 0.003, 16, "H200")]
    )
    fig = F.scale_ladder(ladder, MARGIN, scale_ladder.NARANG_T5_BASE)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log"
    bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    assert len(bars) == 2 and sum(len(c.lines[0].get_xdata()) for c in bars) == 3  # one series per hardware
    star = [c for c in ax.collections if len(c.get_offsets()) == 1 and c.get_offsets()[0][0] == 220e6]
    assert star and star[0].get_offsets()[0][1] == pytest.approx(-0.017)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("unverified" in label for label in labels) and any("H200" in label for label in labels)
    band = [p for p in ax.patches if p.get_y() == pytest.approx(-MARGIN)]
    assert band and band[0].get_height() == pytest.approx(2 * MARGIN)
    plt.close(fig)


def ladder_caption() -> str:
    """The caption of the ladder figure's cell, read from the chapter's source."""
    for line in NOTEBOOK.read_text().splitlines():
        if line.startswith("# %%") and "fig-quality-ladder" in line:
            metadata = line.split("mystnb=", 1)[1]
            return ast.literal_eval(metadata)["figure"]["caption"]
    raise AssertionError("no cell named fig-quality-ladder in notebooks/quality.py")


def test_the_caption_says_the_reference_point_is_unverified_and_what_it_measures():
    caption = ladder_caption()
    assert "as transcribed in the issue, unverified" in caption
    # the margin is pasted from the notebook's MARGIN (tests/test_prose_constants.py), never typed
    assert "220M" in caption and "0.017" in caption and "log" in caption and "±{glue:text}`margin`-nat" in caption


def test_the_table_shows_sizes_intervals_and_hardware():
    shown = scale_ladder.ladder_display(table(point(26352, -0.0123, 0.004), point(1056512, 0.002, 0.01, pairs=3)))
    assert shown["parameters"].tolist() == ["26k", "1,057k"]
    assert (
        shown["95% band"].iloc[0] == "-0.0163..-0.0083 (t-interval)"
        and shown["measured on"].iloc[1] == "test CPU (2 cores)"
    )
    assert isinstance(shown, pd.DataFrame)
