"""Did each arm of the gain chapter train? Its arms' losses beside the byte frequencies' entropy (issue 55)."""

from __future__ import annotations

import math

import pytest

from normlab.analysis.gain import arms
from normlab.study import design
from normlab.study.trained import judge

SETTINGS = dict(gain_decays=[0.0, 1.0, 30.0], width=48, depth=2, sweep_steps=300)


def run(final, initial=5.5, diverged=False):
    return dict(final_val_loss=final, initial_val_loss=initial, diverged=diverged)


def sweep(final_30=4.8):
    return {
        (0.0, 0): run(2.40),
        (0.0, 1): run(2.42),
        (1.0, 0): run(2.43),
        (1.0, 1): run(2.45),
        (30.0, 0): run(final_30),
        (30.0, 1): run(final_30 + 0.02),
    }


def test_sweep_arms_average_over_seeds_and_name_each_decay():
    losses = arms.sweep_arms(sweep(), SETTINGS, entropy=3.11)
    assert losses.final == pytest.approx({"0": 2.41, "1": 2.44, "30": 4.81})
    assert losses.initial == pytest.approx({"0": 5.5, "1": 5.5, "30": 5.5})
    assert losses.name("0") == "the undecayed arm" and losses.name("30") == "λ_g = 30"
    assert "pre-LN GPT, width 48, depth 2, 300 steps, mean over 2 seeds" == losses.scale


def test_a_collapsed_decay_arm_makes_b15_not_testable_and_the_sentence_names_it():
    minimum = float(design.value("B15", "trained_minimum"))
    losses = arms.sweep_arms(sweep(), SETTINGS, entropy=3.11)
    assert losses.untrained(minimum) == ["30"]
    judged = judge("B15", "holds with caveats", "3/4 parts hold.", None, losses, design.load())
    assert judged.verdict == "not testable here"
    assert judged.summary.startswith("Not a verdict on the norm: λ_g = 30 did not train")
    assert "It ended at 4.8100 nats per byte" in judged.summary
    # every arm trained: the verdict stands
    fine = arms.sweep_arms(sweep(final_30=2.6), SETTINGS, entropy=3.11)
    assert judge("B15", "holds with caveats", "3/4 parts hold.", None, fine, design.load()).verdict == (
        "holds with caveats"
    )


def test_a_diverged_run_leaves_its_arm_untrained():
    runs = sweep()
    runs[(1.0, 1)] = run(math.nan, diverged=True)
    losses = arms.sweep_arms(runs, SETTINGS, entropy=3.11)
    assert math.isnan(losses.final["1"]) and "1" in losses.untrained(0.25)


def test_placement_arms_and_the_table_read_from_the_record():
    runs = {
        (arm, seed): run(2.4 + 0.01 * (seed - 2000)) for arm in ("neither", "input", "output") for seed in (2000, 2001)
    }
    labels = {"neither": "no gain decayed", "input": "input norms' gains decayed", "output": "output norms' decayed"}
    sizes = dict(width=48, depth=2, steps=1000)
    losses = arms.placement_arms(runs, sizes, labels, entropy=3.11)
    assert losses.final["input"] == pytest.approx(2.405) and losses.name("neither") == "no gain decayed"
    assert losses.scale == "Peri-LN GPT, width 48, depth 2, 1000 steps, mean over 2 seeds"
    entry = {"evidence": {"arms_trained": losses.record(0.25)}}
    frame = arms.trained_frame(entry)
    assert list(frame["arm"]) == list(labels.values())
    assert set(frame["trained (≥ 0.25 below)"]) == {"yes"}
    assert frame["byte frequencies' entropy"].iloc[0] == pytest.approx(3.11)
