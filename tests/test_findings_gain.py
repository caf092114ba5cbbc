"""The gain chapter's steps and its B15 finding, on hand-made inputs whose answer is known; and its figures."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
import torch

from normlab.analysis.gain import (
    effective_update,
    exact_toy,
    figures,
    forward,
    profiles,
    qk_norm,
    runs,
    verdict,
    weight_decay,
)
from normlab.analysis.gain.effective_update import UPDATE_VIA_G, UPDATE_VIA_W
from normlab.analysis.shared.paired import paired_difference
from normlab.analysis.shared.runs import training_devices
from normlab.gpt.model import GPT, GPTConfig
from normlab.runtime.profiles import lookup_profile

# the smoke profile as looked up, its registered pairs and V5's steps read from the design
SMOKE = lookup_profile(profiles.PROFILES, "smoke", owner="the gain chapter")


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ---- settings and jobs


def test_profile_settings_refuse_an_unknown_profile_and_a_sweep_without_baseline():
    settings = profiles.profile_settings("smoke")
    # a copy, all the way down, plus V5's step from the design (the reference at smoke)
    assert (
        settings.pop("placement_step") == "reference"
        and profiles.profile_settings("cpu")["placement_step"] == "compiled"
    )
    assert settings == SMOKE and settings["qk"] is not profiles.PROFILES["smoke"]["qk"]
    with pytest.raises(ValueError, match="unknown profile .*; valid profiles: smoke, cpu, gpu"):
        profiles.profile_settings("tpu")
    with pytest.raises(ValueError, match=r"include 0\.0"):
        profiles.profile_settings("cpu", {"gain_decays": [1.0, 10.0]})
    with pytest.raises(ValueError, match="seeds is 3 at profile 'cpu', but a paired verdict needs at least 5 pairs"):
        profiles.profile_settings("cpu", {"seeds": 3})


def test_training_devices_are_workers_off_the_gpu_profile():
    assert training_devices("smoke") is None and training_devices("cpu") is None
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="needs CUDA"):
            training_devices("gpu")


def test_training_jobs_pair_the_sweep_by_seed_and_keep_the_two_forward_models():
    settings = {**SMOKE, "seeds": 3, "gain_decays": [0.0, 1.0, 30.0]}
    jobs, keys = runs.training_jobs(settings)
    assert len(jobs) == 2 + 3 * 3 and keys == [(wd, s) for s in range(3) for wd in (0.0, 1.0, 30.0)]
    assert [j["model"]["placement"] for j in jobs[:2]] == ["pre", "post"] and all(j["keep_weights"] for j in jobs[:2])
    for (wd, seed), job in zip(keys, jobs[2:]):
        assert job["train"]["gain_weight_decay"] == wd and job["train"]["seed"] == seed
    same_seed = [j["train"] for (wd, s), j in zip(keys, jobs[2:]) if s == 1]

    # the runs of one seed differ only in the gains' decay
    def without_decay(train):
        return {k: v for k, v in train.items() if k != "gain_weight_decay"}

    assert all(without_decay(t) == without_decay(same_seed[0]) for t in same_seed)
    assert (
        jobs[2]["train"]["steps"] == settings["sweep_steps"] and jobs[0]["train"]["steps"] == settings["trained_steps"]
    )


# ---- part (1): forward


def _tiny_models():
    torch.manual_seed(0)
    return {p: GPT(GPTConfig(context=8, width=16, depth=1, heads=2, placement=p)) for p in ("pre", "post")}


def _tiny_batches():
    gen = torch.Generator().manual_seed(0)
    return [(torch.randint(0, 256, (2, 8), generator=gen), torch.randint(0, 256, (2, 8), generator=gen))]


def test_forward_check_measures_relative_change_and_flips_at_the_threshold(one_thread):
    gpt, batches = _tiny_models(), _tiny_batches()
    loose = forward.forward_check(gpt, batches, [0.5, 1, 2], threshold=1.0)
    tight = forward.forward_check(gpt, batches, [0.5, 1, 2], threshold=1e-9)
    assert loose.holds and not tight.holds
    s = loose.sensitivity
    for (model, location), value in loose.by_location.items():
        base = float(s[(s.model == model) & (s.factor == 1)]["loss"].mean())
        near = s[(s.model == model) & (s.location == location) & s.factor.isin([0.5, 2.0])]
        assert value == pytest.approx(float(near["delta_loss"].abs().max()) / base)
    assert loose.symmetry_max < 1e-4 < float(loose.symmetry["delta_loss_gain_alone"].abs().max())
    worst_model, worst_location = loose.by_location.idxmax()
    text = forward.forward_text(loose)
    assert f"{loose.by_location.max():.1%}" in text and worst_location in text and worst_model in text
    assert "barely" in text and "clearly" in forward.forward_text(tight)
    assert list(forward.symmetry_frame(loose.symmetry).columns) == [
        "a",
        "Δ loss, every gain × a",
        "Δ loss, gain × a and next linear × 1/a",
    ]


# ---- part (2): effective update


def _power_law_updates(w_power: float, g_power: float, seeds=(0, 1)) -> pd.DataFrame:
    factors = [0.25, 0.5, 1.0, 2.0, 4.0]
    rows = [
        {
            "optimizer": opt,
            "factor": a,
            "via_W": 0.01 * a ** (w_power * k),
            "via_g": 0.02 * a ** (g_power * k),
            "seed": s,
        }
        for opt, k in (("sgd", 2), ("adam", 1))
        for s in seeds
        for a in factors
    ]
    return pd.DataFrame(rows)


def test_update_exponents_recover_known_powers_and_linearity_flips_at_the_tolerance():
    exponents = effective_update.update_exponents(_power_law_updates(1.0, -1.0))
    sgd, adam = exponents[exponents.optimizer == "sgd"], exponents[exponents.optimizer == "adam"]
    assert np.allclose(sgd[UPDATE_VIA_W], 2.0) and np.allclose(sgd[UPDATE_VIA_G], -2.0)
    assert np.allclose(adam[UPDATE_VIA_W], 1.0) and np.allclose(adam[UPDATE_VIA_G], -1.0)
    scaling = effective_update.update_scaling(exponents, tolerance=0.15)
    assert scaling.linear_under_adam and scaling.adam_exponent == pytest.approx(1.0)
    assert scaling.sgd_exponent == pytest.approx(2.0) and scaling.adam_exponent_sd == pytest.approx(0.0, abs=1e-9)
    steeper = effective_update.update_scaling(
        effective_update.update_exponents(_power_law_updates(1.2, -1.0)), tolerance=0.15
    )
    assert steeper.adam_exponent == pytest.approx(1.2) and not steeper.linear_under_adam
    summary = effective_update.exponent_summary(exponents)
    assert list(summary["optimizer"]) == ["adam", "sgd"]
    assert f"{UPDATE_VIA_W}, mean" in summary.columns and f"{UPDATE_VIA_G}, std" in summary.columns


# ---- part (3): the toy


# a few steps of each run: the exact toy's invariance, exponents and Li & Arora's equivalence show already
TINY_TOY = dict(scan_norms=[1, 2], scan_steps=1, schedule_steps=4, equilibrium_steps=20)


def test_toy_checks_judge_each_part_against_its_tolerance(one_thread):
    toy = exact_toy.toy_checks(TINY_TOY, exponent_tolerance=0.15, formula_tolerance=0.10)
    assert toy.invariance < 1e-12 and toy.schedule_angle < 1e-9 and toy.theory_holds
    assert toy.exponents["sgd_g"] == pytest.approx(-2.0, abs=0.01) and toy.exponents["adam_w"] == pytest.approx(
        -1.0, abs=0.01
    )
    walk = exact_toy.equilibrium_row(toy.equilibrium, "adamw", "random walk")
    assert walk["setting"] == "random walk" and not toy.holds  # 20 steps are far from equilibrium
    loose = exact_toy.toy_checks(TINY_TOY, exponent_tolerance=0.0, formula_tolerance=100.0)
    assert loose.holds and not loose.theory_holds  # no fitted exponent is exactly -2 or -1
    frame = exact_toy.toy_frame(toy)
    assert len(frame) == 6 + 2 * len(toy.equilibrium) and frame["expected"].tolist()[:4] == [-2.0, -2.0, -1.0, -1.0]
    assert frame["measured"].iloc[4] == toy.schedule_angle


def test_smoothed_trajectories_average_windows_of_steps():
    run = pd.DataFrame({"step": np.arange(100), "norm": np.arange(100.0), "angular_update": np.ones(100)})
    smooth = exact_toy.smoothed_trajectories([run.assign(optimizer="sgd", setting="toy chain")], steps=100, windows=10)
    assert len(smooth) == 10 and smooth["norm"].tolist() == [4.5 + 10 * k for k in range(10)]


# ---- part (4): the decay sweep


def _decay_runs(shift: float, noise=(0.001, -0.002, 0.0015), width=16, steps=5) -> dict:
    runs = {}
    for seed, jitter in enumerate(noise):
        for wd in (0.0, 10.0):
            loss = 2.0 + 0.01 * seed + (shift + jitter if wd else 0.0)
            scale = 0.5 if wd else 1.0
            history = {f"gain_norm/block{i}": list(scale * math.sqrt(width) * np.ones(steps)) for i in range(2)}
            runs[(wd, seed)] = {"final_val_loss": loss, "diverged": False, "history": history, "final_drop": 0.01}
    return runs


def _sweep(shift: float) -> weight_decay.DecaySweep:
    settings = {"gain_decays": [0.0, 10.0], "seeds": 3, "lr": 1e-3, "sweep_steps": 300, "width": 16}
    return weight_decay.decay_sweep(_decay_runs(shift), settings, margin=0.02)


def test_decay_sweep_is_sensitive_only_when_the_paired_change_is_beyond_the_margin():
    far, near = _sweep(0.1), _sweep(0.0)
    assert far.sensitive and not far.insensitive and far.strongest == 10.0
    assert not near.sensitive and near.insensitive
    assert far.key_pair["mean_difference"] == pytest.approx(0.1 + np.mean([0.001, -0.002, 0.0015]))
    assert far.timescales == {10.0: pytest.approx(3.0)}
    assert far.final_gain_at(10.0) == pytest.approx(0.5) and far.final_gain_at(0.0) == pytest.approx(1.0)
    assert far.loss_drop == pytest.approx(0.01) and math.isnan(far.final_gain_at(99.0))
    row = weight_decay.decay_frame(far).iloc[0]
    assert row["λ_g"] == 10.0 and row["outcome"] == "different" and row["final gain RMS"] == pytest.approx(0.5)


def test_a_diverged_decay_is_left_out_of_the_pairs():
    runs = _decay_runs(0.1)
    runs[(10.0, 1)]["final_val_loss"] = float("nan")
    settings = {"gain_decays": [0.0, 10.0], "seeds": 3, "lr": 1e-3, "sweep_steps": 300, "width": 16}
    sweep = weight_decay.decay_sweep(runs, settings, margin=0.02)
    assert sweep.pairs == {} and sweep.strongest is None and sweep.key_pair is None and not sweep.sensitive
    worse = _decay_runs(0.1)
    worse[(10.0, 1)]["diverged"] = True  # ended above its initial loss: finite, but diverged by the one rule
    assert weight_decay.decay_sweep(worse, settings, margin=0.02).pairs == {}


# ---- the B15 finding


def _parts(forward_ok=True, adam_ok=True, toy_ok=True, shift=0.1):
    forward_check = forward.ForwardCheck(
        sensitivity=pd.DataFrame(),
        by_location=pd.Series({("pre-LN RMSNorm", "final"): 0.004 if forward_ok else 0.05}),
        holds=forward_ok,
        threshold=0.01,
        symmetry=pd.DataFrame(),
        symmetry_max=3e-7,
    )
    scaling = effective_update.UpdateScaling(1.02 if adam_ok else 1.5, 0.01, 2.01, adam_ok)
    equilibrium = pd.DataFrame(
        [
            {
                "optimizer": "adamw",
                "setting": s,
                "lr": 0.01,
                "weight_decay": 0.5,
                "norm_ratio": 1.01,
                "angular_ratio": 0.99,
            }
            for s in ("toy chain", "random walk")
        ]
    )
    exponents = {"sgd_g": -2.0, "sgd_w": -2.0, "adam_g": -1.0, "adam_w": -1.0}
    toy = exact_toy.ToyChecks(0.0, exponents, True, 1e-12, pd.DataFrame(), 2e-13, equilibrium, [], toy_ok)
    return forward_check, scaling, toy, _sweep(shift), _qk_law()


FACTORS = [0.25, 0.5, 1.0, 2.0, 4.0]


def _qk_law(angular_power=-2.0, gradient_power=-1.0, invariance=2e-16, gap=1e-15, pair=3e-16, gain_alone=0.3):
    """The QK-norm section's tables built from exact power laws, so each fitted slope is known."""
    lr, sphere_grad = 0.01, 0.5
    invariance_frame = pd.DataFrame({"factor": FACTORS, "scaled": "W_q and W_k", "max_abs_delta_logit": invariance})
    gradient = pd.DataFrame(
        {
            "factor": FACTORS,
            "grad_norm_q": [0.3 * a**gradient_power for a in FACTORS],
            "grad_norm_k": [0.4 * a**gradient_power for a in FACTORS],
            "cosine_grad_q_with_q": 1e-17,
        }
    )
    runs = pd.DataFrame(
        [
            {
                "factor": a,
                "step": step,
                "norm_q": 1.3 * a * (1 + 0.01 * step),
                "angular_update": lr * sphere_grad * (1.3 * a * (1 + 0.01 * step)) ** angular_power,
                "sphere_grad": sphere_grad,
                "loss": 5.0 - 0.1 * step,
                "paired_loss": 5.0 - 0.1 * step,
            }
            for a in FACTORS
            for step in range(3)
        ]
    )
    runs["effective_lr"] = runs["angular_update"] / sphere_grad
    runs["predicted_effective_lr"] = lr / runs["norm_q"] ** 2
    gaps = pd.DataFrame({"factor": FACTORS, "max_abs_delta_loss": gap})
    contrast = pd.DataFrame(
        [
            {
                "location": where,
                "factor": a,
                "gain_alone": 0.0 if a == 1 else gain_alone * scale * abs(math.log(a)),
                "gain_and_next_linear": pair,
            }
            for where, scale in (("attention input", 1.0), ("MLP input", 2.0), ("final", 3.0))
            for a in FACTORS
        ]
    )
    return qk_norm.summarise_qk_law(
        invariance_frame, 2e-3, gradient, runs, gaps, contrast, lr=lr, slope_tolerance=0.05, invariance_tolerance=1e-10
    )


def test_b15_verdict_counts_the_parts():
    assert verdict.b15_verdict(dict.fromkeys("abcd", True)) == "holds"
    assert verdict.b15_verdict({"a": True, "b": True, "c": False, "d": False}) == "holds with caveats"
    assert verdict.b15_verdict({"a": True, "b": False, "c": False, "d": False}) == "does not hold"


def test_b15_finding_flips_with_the_sweep_and_names_its_numbers():
    sensitive = verdict.b15_finding(*_parts(shift=0.1), tolerance=0.1, corpus_sha256="abc")
    assert sensitive.verdict == "holds" and sensitive.summary.startswith("4/4 parts hold")
    insensitive = verdict.b15_finding(*_parts(shift=0.0), tolerance=0.1, corpus_sha256="abc")
    assert insensitive.verdict == "holds with caveats" and insensitive.summary.startswith("3/4")
    two = verdict.b15_finding(*_parts(forward_ok=False, adam_ok=False, shift=0.1), tolerance=0.1, corpus_sha256="abc")
    assert two.verdict == "holds with caveats"
    one = verdict.b15_finding(*_parts(forward_ok=False, adam_ok=False, shift=0.0), tolerance=0.1, corpus_sha256="abc")
    assert one.verdict == "does not hold"
    pair = _sweep(0.1).key_pair
    assert sensitive.key_number == pytest.approx(pair["mean_difference"]) and sensitive.threshold == 0.02
    assert sensitive.spread == pytest.approx(pair["sd_of_differences"] / math.sqrt(3))
    assert "a^1.02" in sensitive.summary and "λ_g = 10 (ηλT = 3)" in sensitive.summary and "0.4%" in sensitive.summary
    assert "margin" in sensitive.reads
    assert sensitive.evidence["decay_sweep"]["sensitive"] is True and sensitive.evidence["corpus_sha256"] == "abc"
    assert sensitive.evidence["wd_schedule"]["adamw_toy_norm_ratio"] == 1.01


def test_b15_summary_is_three_sentences_and_says_where_the_invariance_is_exact():
    forward_check, scaling, toy, sweep, _ = _parts(shift=0.1)
    finding = verdict.b15_finding(forward_check, scaling, toy, sweep, _qk_law(), tolerance=0.1, corpus_sha256="abc")
    sentences = [part for part in finding.summary.split(". ") if part]
    assert len(sentences) == 3 and finding.summary.endswith(".")
    # the first (the ledger's): the parts and the key number against the margin; each part's number after it
    assert "changes the final loss by" in sentences[0] and "against ±0.02" in sentences[0]
    assert "Adam's update of the next layer" in sentences[1]
    assert "exact for W_q and W_k under QK-norm" in sentences[2] and "‖W_q‖^-2.00" in sentences[2]
    assert "law η/‖w‖² holds" in sentences[2] and "logits move ≥ 0.42" in sentences[2]  # 0.3·ln 4, least-moved
    law = finding.evidence["qk_norm_law"]
    assert law["gradient_slope_Wq"] == pytest.approx(-1.0) and law["angular_update_slope_first_step"] == pytest.approx(
        -2
    )
    assert law["law_holds"] is True and law["pair_not_gain_invariant"] is True
    # The law says where the premise holds; it does not vote, so a failing law leaves the verdict and key number.
    failing = verdict.b15_finding(
        forward_check, scaling, toy, sweep, _qk_law(angular_power=-1.5), tolerance=0.1, corpus_sha256="abc"
    )
    assert failing.verdict == finding.verdict and failing.key_number == finding.key_number
    assert "law η/‖w‖² fails" in failing.summary


# ---- the QK-norm law, judged from its tables


def test_summarise_qk_law_recovers_the_powers_it_was_built_from():
    law = _qk_law()
    assert law.gradient_slope_q == pytest.approx(-1.0) and law.gradient_slope_k == pytest.approx(-1.0)
    assert law.angular_slope == pytest.approx(-2.0) and law.effective_lr_slope == pytest.approx(-2.0)
    assert law.effective_lr_ratio_max == pytest.approx(0.0, abs=1e-12)  # built as η·S/‖w‖², the law exactly
    assert law.gain_alone_min == pytest.approx(0.3 * math.log(4)) and law.pair_max == 3e-16
    assert law.holds and law.contrast_holds
    steep = _qk_law(angular_power=-2.3)
    assert steep.angular_slope == pytest.approx(-2.3) and steep.effective_lr_ratio_max > 0.1


@pytest.mark.parametrize(
    "change",
    [
        {"angular_power": -1.94},  # 0.06 from −2: just outside ±0.05
        {"angular_power": -2.06},
        {"gradient_power": -0.94},
        {"invariance": 1e-9},
        {"gap": 1e-9},
    ],
)
def test_the_qk_law_fails_when_one_number_leaves_its_tolerance(change):
    assert _qk_law().holds and not _qk_law(**change).holds


def test_the_contrast_needs_the_gain_to_move_the_logits_and_the_pair_not_to():
    assert not _qk_law(gain_alone=0.0).contrast_holds
    assert not _qk_law(pair=1e-6).contrast_holds
    assert _qk_law(angular_power=-1.9).contrast_holds  # the contrast is judged apart from the law


def test_qk_law_holds_refuses_a_nan_slope():
    kwargs = dict(slope_tolerance=0.05, invariance_tolerance=1e-10)
    assert qk_norm.qk_law_holds(0.0, (-1.0, -1.0), (-2.0, -2.0), 0.0, **kwargs)
    assert not qk_norm.qk_law_holds(0.0, (-1.0, math.nan), (-2.0, -2.0), 0.0, **kwargs)


def test_qk_frame_and_text_state_each_number_against_its_tolerance():
    law = _qk_law()
    frame = qk_norm.qk_frame(law)
    assert len(frame) == 12 and set(frame["tolerance"]) >= {"±0.05", "≤ 1e-10", "> 1e-10"}
    first = frame[frame["check"].str.contains("first step")].iloc[0]
    assert first["measured"] == pytest.approx(-2.0) and first["theory"] == "−2"
    text = qk_norm.qk_text(law)
    assert text.startswith("The law holds within its tolerances.") and "ε = 1e-05, by 2e-03" in text
    assert "0.42–1.25 depending on the location" in text
    assert qk_norm.qk_text(_qk_law(angular_power=-1.5)).startswith("The law does not hold")
    exact = _qk_law(invariance=0.0)
    assert "float64 logits not at all" in qk_norm.qk_text(exact) and "logits move exactly 0" in qk_norm.qk_sentence(
        exact
    )
    assert "float64 logits by at most 2e-16" in qk_norm.qk_text(law) and "to within 1e-15 nats" in qk_norm.qk_text(law)


def test_b15_paragraph_states_each_part_and_the_verdict_its_finding_records():
    forward_check, scaling, toy, sweep, qk = _parts(toy_ok=False, shift=0.1)
    b15 = verdict.b15_finding(forward_check, scaling, toy, sweep, qk, tolerance=0.1, corpus_sha256="x")
    text = verdict.b15_paragraph(b15, forward_check, scaling, toy, sweep, qk)
    assert text.startswith("3/4 parts hold.") and "not within ±10%" in text
    assert "RMS 0.500 against 1.000 undecayed" in text and text.endswith("**B15 verdict: holds with caveats.**")
    assert (
        b15.summary.startswith("3/4 parts hold (failing: decay as a schedule):") and b15.verdict == "holds with caveats"
    )
    assert (b15.meaning, b15.unit) == ("paired final-loss change under strong decay of the gain", "nats per byte")
    diverged = weight_decay.DecaySweep({}, {}, pd.DataFrame(), pd.Series(dtype=float), None, False, False, 0.0, 0.02)
    finding = verdict.b15_finding(forward_check, scaling, toy, diverged, qk, tolerance=0.1, corpus_sha256="x")
    assert "the decay sweep diverged" in verdict.b15_paragraph(finding, forward_check, scaling, toy, diverged, qk)
    assert finding.key_number is None and finding.spread is None


# ---- figures


def test_forward_figure_draws_one_log_axis_with_a_zero_line():
    s = pd.DataFrame(
        [
            {"factor": a, "delta_loss": math.log(a) ** 2, "location": loc, "model": m}
            for a in (0.5, 1, 2)
            for loc in ("final", "MLP input")
            for m in ("pre-LN RMSNorm", "post-LN RMSNorm")
        ]
    )
    fig = figures.forward_figure(s)
    (ax,) = fig.axes
    assert ax.get_xscale() == "log" and ax.get_xlabel() == "gain multiplier a (log scale)"
    assert len(ax.get_lines()) >= 4 + 1  # a line per (location, model), and the zero line


def test_update_figure_draws_both_paths_on_log_log_axes():
    fig = figures.update_figure(_power_law_updates(1.0, -1.0))
    (ax,) = fig.axes
    assert ax.get_xscale() == ax.get_yscale() == "log" and ax.get_ylabel() == "‖ΔE‖ / ‖E‖ in one step"
    assert len(ax.get_lines()) >= 4


def test_toy_figure_has_three_panels_and_a_dotted_line_per_random_walk_prediction():
    schedule = pd.DataFrame({"step": range(5), "norm_with_decay": np.linspace(1, 2, 5), "norm_scheduled": np.ones(5)})
    runs = [
        pd.DataFrame({"step": range(10), "norm": np.ones(10), "angular_update": np.full(10, 0.1)}).assign(
            optimizer=o, setting=s
        )
        for o in ("sgd", "adamw")
        for s in ("toy chain", "random walk")
    ]
    equilibrium = pd.DataFrame(
        [
            {"optimizer": o, "setting": s, "predicted_norm": 1.5, "predicted_angular_update": 0.05}
            for o in ("sgd", "adamw")
            for s in ("toy chain", "random walk")
        ]
    )
    fig = figures.toy_figure(schedule, exact_toy.smoothed_trajectories(runs, steps=10, windows=5), equilibrium)
    left, middle, right = fig.axes
    assert [ax.get_title() for ax in fig.axes] == [
        "same directions, different norms",
        "norm → equilibrium",
        "angular update",
    ]
    assert len(left.get_lines()) == 2 and right.get_yscale() == "log"
    dotted = [line for line in middle.get_lines() if line.get_linestyle() == ":"]
    assert len(dotted) == 2  # one per random-walk optimizer


def test_qk_law_figure_draws_the_minus_two_line_on_log_log_axes_and_both_runs_of_each_pair():
    law = _qk_law()
    fig = figures.qk_law_figure(law.runs, law.gaps, law.lr)
    left, right = fig.axes
    assert left.get_xscale() == left.get_yscale() == "log" and left.get_title().startswith("plain SGD, η = 0.01")
    (reference,) = [line for line in left.get_lines() if line.get_linestyle() == "--"]
    x, y = (np.asarray(v, dtype=float) for v in reference.get_data())
    assert np.log(y[1] / y[0]) / np.log(x[1] / x[0]) == pytest.approx(-2.0)
    first = law.runs[(law.runs.step == 0) & (law.runs.factor == 1.0)].iloc[0]
    assert np.interp(np.log(first.norm_q), np.log(x), np.log(y)) == pytest.approx(np.log(first.angular_update))
    assert len(right.get_lines()) == 2 * len(FACTORS)  # a line and the paired run's circles per factor
    assert right.get_title() == "(a·W, η) against (W, η/a²): |Δ| ≤ 1e-15"


def test_decay_figure_labels_each_decay_with_its_timescale_and_shades_the_margin():
    sweep = _sweep(0.1)
    fig = figures.decay_figure(sweep.pairs, sweep.timescales, sweep.gain_paths, 0.02)
    left, right = fig.axes
    assert [t.get_text() for t in left.get_yticklabels()] == ["λ_g = 10 (ηλT = 3.0)"]
    (band,) = [p for p in left.patches if p.get_alpha() == 0.15]  # the margin, shaded
    assert band.get_x() == pytest.approx(-0.02) and band.get_width() == pytest.approx(0.04)
    assert right.get_yscale() == "log" and right.get_ylabel() == "mean RMS of the norm gains"


def test_paired_sweep_matches_paired_difference():
    sweep = _sweep(0.1)
    finals = _decay_runs(0.1)
    expected = paired_difference(
        [finals[(0.0, s)]["final_val_loss"] for s in range(3)],
        [finals[(10.0, s)]["final_val_loss"] for s in range(3)],
        0.02,
    )
    assert sweep.pairs[10.0] == expected
