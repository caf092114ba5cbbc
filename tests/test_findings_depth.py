"""The depth chapter's verdicts and figures, on hand-made inputs whose answer is known."""

import math

import matplotlib
import pandas as pd
import pytest

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.collections import PathCollection  # noqa: E402

from normlab.analysis.depth import figures as F  # noqa: E402
from normlab.analysis.depth import identity_path, initialisation, interlock, post_ln_decay, profiles, training_at_depth  # noqa: E402
from normlab.analysis.shared import confirmation
from normlab.analysis.shared.missing_runs import PairsLeft, RunGaps
from normlab.analysis.shared.paired import paired_or_none  # noqa: E402
from normlab.analysis.shared.runs import training_devices  # noqa: E402
from normlab.study import design
from normlab.study.findings import rule_text

MARGIN = 0.02
B17_RULE = dict(spread_limit=10.0, bound_slack=0.25)
B18_RULE = dict(ratio_drop=0.10, cosine_rise=0.02)


def synthetic_profile(init_name, block_one=2.0):
    """An `init_profile`-shaped frame with known answers: pre-LN gradients level except block 1 (×2 for seed 0,
    ×3 for seed 1), post-LN's growing with the block; the last block's W_down gradient ∝ L^-0.5 in pre-LN and
    flat in post-LN; RMSNorm's tokens more alike (cosine 0.5) than LayerNorm's (0.4)."""
    rows = []
    for config in initialisation.CONFIGS:
        pre, rms = config.startswith("pre"), config.endswith("rms")
        for depth in (2, 4):
            for seed in (0, 1):
                for layer in range(depth + 1):
                    row = dict(config=config, depth=depth, seed=seed, layer=layer, init=init_name)
                    row.update(residual_norm=1.0, token_cosine=0.5 if rms else 0.4)
                    if layer:
                        grad = (block_one + seed if layer == 1 else 1.0) if pre else float(layer)
                        row.update(grad_norm=grad, grad_mlp_down=depth**-0.5 if pre else 1.0)
                    rows.append(row)
    return pd.DataFrame(rows)


def synthetic_init(xavier_block_one=2.0):
    """Both initialisations; Xavier's (False) pre-LN block 1 at `xavier_block_one` (+ seed) to tell the two apart."""
    by_init = {
        scaled: synthetic_profile(initialisation.INIT_NAMES[scaled], 2.0 if scaled else xavier_block_one)
        for scaled in (False, True)
    }
    return initialisation.InitStudy(
        frame=pd.concat(by_init.values(), ignore_index=True),
        profiles=by_init,
        exponents={
            s: initialisation.depth_exponents(by_init[s]).set_index("config")["exponent"] for s in (False, True)
        },
        spreads={s: initialisation.gradient_spread(by_init[s]) for s in (False, True)},
        deepest=4,
    )


def synthetic_training(post_rms_shift=0.0, pre_trained=(True, True), post_trained=(False, True)):
    """Paired runs over three seeds: post-LN RMSNorm's final loss shifted by hand against every other config."""
    rows = []
    for seed in range(3):
        for placement in ("pre", "post"):
            for norm in ("rms", "layer"):
                loss = 2.0 + 0.05 * seed + (post_rms_shift if (placement, norm) == ("post", "rms") else 0.0)
                loss += 0.001 * seed * (norm == "rms")  # a little seed-to-seed noise in the differences
                rows.append(
                    dict(placement=placement, norm=norm, seed=seed, final_val_loss=loss, final_drop=0.002 * (seed + 1))
                )
    paired = pd.DataFrame(rows).assign(config=lambda f: f["placement"] + "-" + f["norm"])
    no_warmup = pd.DataFrame(
        [dict(placement="pre", trained=t) for t in pre_trained]
        + [dict(placement="post", trained=t) for t in post_trained]
    )
    return training_at_depth.TrainingStudy(paired=paired, no_warmup=no_warmup, ablation=pd.DataFrame())


def test_settings_for_validates_the_depths():
    with pytest.raises(ValueError, match="unknown profile .*; valid profiles: smoke, cpu, gpu"):
        profiles.settings_for("tpu")
    settings = profiles.settings_for("smoke")
    assert settings["init_depths"] == [1, 2, 4] and settings is not profiles.PROFILES["smoke"]
    assert training_devices("cpu") is None


def test_exponent_table_sets_both_initialisations_side_by_side():
    shown = initialisation.exponent_table(synthetic_init()).set_index("config")
    assert shown.loc["pre-rms", "exponent, Xavier init"] == pytest.approx(-0.5)
    assert shown.loc["post-layer", "exponent, GPT-2 init"] == pytest.approx(0.0, abs=1e-12)


def test_training_grids_lay_out_pairs_sweep_and_ablation():
    settings = profiles.settings_for("smoke")
    grid, ablation = training_at_depth.training_grids(settings)
    assert len(grid) == settings["seeds"] * 4 + 4 * (1 + len(settings["stress_lrs"]))
    assert len(ablation) == (settings["ablation_seeds"] + 1) * len(training_at_depth.ABLATIONS)
    cpu = profiles.settings_for("cpu")
    assert len(training_at_depth.training_grids(cpu)[1]) == (cpu["ablation_seeds"] + 1) * len(
        training_at_depth.ABLATIONS
    )
    stress = [e for e in ablation if e["train"].get("stress")]
    assert len(stress) == len(training_at_depth.ABLATIONS) and all(e["train"]["warmup_steps"] == 0 for e in stress)


def test_final_losses_and_pairs_refuse_a_diverged_run():
    frame = pd.DataFrame({"seed": [1, 0], "norm": ["rms", "rms"], "final_val_loss": [2.5, 2.0]})
    assert training_at_depth.final_losses(frame, norm="rms") == [2.0, 2.5]
    assert training_at_depth.pair_spread(None) is None


def test_b17_measures_reads_each_initialisation_apart_never_pooled():
    settings = profiles.settings_for("smoke") | {"init_seeds": [0, 1]}
    m = identity_path.b17_measures(synthetic_init(xavier_block_one=20.0), synthetic_training(), settings, MARGIN)
    assert m["spread"]["gpt2"] == pytest.approx(2.5)  # seed means: block 1 at 2.5, the others at 1
    assert m["spread"]["xavier"] == pytest.approx(20.5)  # Xavier's own, not carried into GPT-2's key
    assert m["spread_sd"]["gpt2"] == pytest.approx(math.sqrt(0.5))  # seeds alone: 2 and 3
    assert (m["pre_rate"], m["post_rate"]) == (1.0, 0.5)
    assert m["xiong_pre"] == pytest.approx(-0.5) and m["xiong_post"] == pytest.approx(0.0, abs=1e-12)
    # the synthetic gradients follow the bound's shape exactly: ratio 1 at the deeper depth, pinned at depth 2
    assert m["bound_ratio_pre"] == pytest.approx(1.0) and m["bound_ratio_post"] == pytest.approx(1.0)
    assert m["bound_pinned_depth"] == 2
    assert m["drop"] == pytest.approx(0.004)
    assert m["scale"].startswith(f"width {settings['init_width']}, depths 1–4, 2 seeds; trained at depth")
    finding = identity_path.b17_finding(m, deepest=4, deep=2, margin=MARGIN, **B17_RULE, corpus_sha256="x")
    # the recorded verdict is GPT-2's: Xavier's ×20.5 is beside it, with its own verdict
    assert finding.key_number == pytest.approx(2.5) and finding.evidence["verdict_xavier"] == "does not hold"
    assert finding.verdict != "does not hold" and finding.scale == m["scale"]
    assert finding.evidence["registered_init"] == initialisation.INIT_NAMES[True]


def b17_numbers(gpt2=2.0, xavier=2.0, **change):
    pair = paired_or_none([2.1, 2.2, 2.3], [2.0, 2.1, 2.21], MARGIN)  # pre-LN better by ~0.1: different
    base = dict(pre_rate=1.0, post_rate=0.5, pair=pair, xiong_pre=-0.5, xiong_post=0.0, gpt2_pre=0.0)
    base |= dict(spread={"gpt2": gpt2, "xavier": xavier}, spread_sd={"gpt2": 0.3, "xavier": 0.3})
    base |= dict(bound_ratio_pre=1.0, bound_ratio_post=1.1, bound_pinned_depth=2)
    return base | change


def test_b17_verdict_flips_at_the_spread_limit_and_takes_caveats():
    verdict = identity_path.b17_verdict
    assert verdict(b17_numbers(), **B17_RULE) == "holds"
    assert verdict(b17_numbers(gpt2=10.5), **B17_RULE) == "does not hold"
    assert verdict(b17_numbers(pre_rate=0.4), **B17_RULE) == "does not hold"
    assert verdict(b17_numbers(post_rate=1.0), **B17_RULE) == "holds with caveats"
    # the fitted exponent is a description: far from −0.5 it moves nothing
    assert verdict(b17_numbers(xiong_pre=-0.2), **B17_RULE) == "holds"
    assert verdict(b17_numbers(pair=None), **B17_RULE) == "holds with caveats"
    # one verdict per initialisation: Xavier's spread never moves GPT-2's verdict, and GPT-2's never Xavier's
    assert verdict(b17_numbers(xavier=10.99), **B17_RULE) == "holds"
    assert verdict(b17_numbers(xavier=10.99), **B17_RULE, init="xavier") == "does not hold"
    assert verdict(b17_numbers(gpt2=10.99), **B17_RULE, init="xavier") == "holds"
    # the bound's shape test is Xavier's (Theorem 1 is stated for it): within the slack above the pinned curve or not
    assert verdict(b17_numbers(bound_ratio_pre=1.24), **B17_RULE, init="xavier") == "holds"
    assert verdict(b17_numbers(bound_ratio_pre=1.26), **B17_RULE, init="xavier") == "holds with caveats"
    assert verdict(b17_numbers(bound_ratio_post=1.3), **B17_RULE, init="xavier") == "holds with caveats"
    assert verdict(b17_numbers(bound_ratio_pre=None), **B17_RULE, init="xavier") == "holds with caveats"
    assert verdict(b17_numbers(bound_ratio_pre=1.3), **B17_RULE) == "holds"


def test_b17_finding_and_paragraph_name_the_numbers():
    m = b17_numbers(xavier=10.99, gpt2_post=0.0, drop=0.001, scale="width 48, depths 2–32")
    m["spread_sd"] = {"gpt2": 0.3, "xavier": 0.6}  # Xavier's 10.99 within two sds of the limit: fragile
    finding = identity_path.b17_finding(m, deepest=4, deep=2, margin=MARGIN, **B17_RULE, corpus_sha256="x")
    assert finding.key_number == 2.0 and finding.threshold == 10.0 and finding.spread == 0.3
    assert "×2.00 under GPT-2's depth-scaled initialisation (inside ×10" in finding.summary
    assert "×10.99 under Xavier initialisation (Xiong et al.'s) (beyond ×10" in finding.summary
    assert "fragile" in finding.summary and finding.evidence["fragile_xavier"] is True
    assert finding.reads == ("spread_limit", "bound_slack", "margin")
    assert "spread_limit = 10 factor between blocks' gradient norms; bound_slack = 0.25" in rule_text(
        "B17", finding.reads
    )
    text = identity_path.b17_paragraph(finding, m, deepest=4, deep=2)
    assert (
        "×1.00 (pre-LN) and ×1.10 (post-LN) of the curve of Xiong et al.'s bound pinned to the measurement at L₀ = 2"
        in text
    )
    assert "within the slack above the pinned curve" in text and "lie under" not in text
    assert "As a description only, the fitted slopes are L^-0.50 (pre)" in text
    assert "pre-LN trained in 100% of runs and post-LN in 50%" in text
    assert text.endswith(
        "**B17 verdict, under GPT-2's initialisation (the study's registered one): holds.** Under Xavier "
        "initialisation, beside it: does not hold."
    )
    beyond = identity_path.bound_sentence(b17_numbers(bound_ratio_post=1.3), 0.25)
    assert "beyond the slack above the pinned curve" in beyond


def test_b17_says_what_undamped_rests_on_without_moving_its_numbers():
    m = b17_numbers(gpt2_post=0.0, drop=0.001)
    finding = identity_path.b17_finding(m, deepest=4, deep=2, margin=MARGIN, **B17_RULE, corpus_sha256="x")
    paragraph = identity_path.b17_paragraph(finding, m, deepest=4, deep=2)
    for text in (finding.summary, paragraph):
        assert "Xiong et al. 2020" in text and "bound at initialisation" in text and "shrinks as 1/√L" in text
        assert "bound on the last layer's gradient" in text
    # the wording sits beside the measured numbers; the verdict and its key number are those of the rule
    assert finding.summary.index("×2.00") < finding.summary.index("'Undamped'")
    assert (finding.verdict, finding.key_number, finding.threshold, finding.spread) == ("holds", 2.0, 10.0, 0.3)


def test_xiong_bound_sets_its_constant_at_the_shallowest_depth():
    rows = [
        dict(config=config, depth=depth, seed=seed, layer=depth, grad_mlp_down=value * (1.0 + 0.1 * seed))
        for config, values in (("pre-rms", {2: 1.0, 8: 0.6}), ("post-rms", {2: 1.0, 8: 0.9}))
        for depth, value in values.items()
        for seed in (0, 1)
    ]
    bounds = initialisation.xiong_bound(pd.DataFrame(rows)).set_index(["config", "depth"])
    # pre-LN's bound falls by √(2/8) = 0.5 from depth 2, where it passes through the seed mean 1.05
    assert bounds.loc[("pre-rms", 8), "bound"] == pytest.approx(0.525)
    assert bounds.loc[("pre-rms", 8), "ratio"] == pytest.approx(0.63 / 0.525)  # the seed mean, above the bound
    assert bounds.loc[("post-rms", 8), "bound"] == pytest.approx(1.05)  # post-LN's does not move with depth
    frame = pd.DataFrame(rows)
    assert initialisation.worst_bound_ratio(initialisation.xiong_bound(frame), "post") == pytest.approx(0.945 / 1.05)
    single = initialisation.xiong_bound(frame[frame["depth"] == 2])
    assert initialisation.worst_bound_ratio(single, "pre") is None
    with pytest.raises(ValueError, match="Theorem 1 bounds pre-LN and post-LN only"):
        initialisation.xiong_bound(frame.assign(config="peri-rms"))


def test_b18_measures_compare_post_ln_norms():
    m = post_ln_decay.b18_measures(synthetic_init(), synthetic_training(post_rms_shift=0.1), MARGIN)
    assert m["pair"]["outcome"] == "different" and m["pair"]["mean_difference"] > 0
    assert m["ratio_rms"] == pytest.approx(0.25) == m["ratio_ln"]
    assert (m["cos_rms"], m["cos_ln"]) == (0.5, 0.4)


def test_b18_init_measure_flips_at_its_thresholds():
    m = dict(ratio_rms=0.89, ratio_ln=1.0, cos_rms=0.4, cos_ln=0.4)
    assert post_ln_decay.b18_init_worse(m, **B18_RULE)
    assert not post_ln_decay.b18_init_worse(m | {"ratio_rms": 0.91}, **B18_RULE)
    assert post_ln_decay.b18_init_worse(m | {"ratio_rms": 0.91, "cos_rms": 0.43}, **B18_RULE)


def test_b18_verdict_follows_the_paired_interval():
    worse = post_ln_decay.b18_measures(synthetic_init(), synthetic_training(post_rms_shift=0.1), MARGIN)
    assert (
        post_ln_decay.b18_verdict(worse, **B18_RULE) == "holds"
    )  # worse in training, and its tokens more alike at init
    assert post_ln_decay.b18_verdict(worse | {"cos_rms": 0.4}, **B18_RULE) == "holds with caveats"
    same = post_ln_decay.b18_measures(synthetic_init(), synthetic_training(post_rms_shift=0.0), MARGIN)
    assert post_ln_decay.b18_verdict(same, **B18_RULE) == "does not hold"
    assert post_ln_decay.b18_verdict(same | {"pair": None}, **B18_RULE) == "not testable here"
    finding = post_ln_decay.b18_finding(worse, deep=2, deepest=4, margin=MARGIN, **B18_RULE)
    assert finding.key_number == pytest.approx(worse["pair"]["mean_difference"]) and finding.evidence["init_worse"]
    assert rule_text("B18", finding.reads).endswith(
        "Thresholds: margin = 0.02 nats per byte; ratio_drop = 0.1 "
        "fraction of the first/last-block gradient ratio; cosine_rise = 0.02 cosine."
    )
    assert "**B18 verdict: holds.**" in post_ln_decay.b18_paragraph(finding, worse, deep=2, deepest=4)


def test_b18_says_its_verdict_rests_on_this_measurement_alone():
    same = post_ln_decay.b18_measures(synthetic_init(), synthetic_training(post_rms_shift=0.0), MARGIN)
    finding = post_ln_decay.b18_finding(same, deep=2, deepest=4, margin=MARGIN, **B18_RULE)
    paragraph = post_ln_decay.b18_paragraph(finding, same, deep=2, deepest=4)
    for text in (finding.summary, paragraph):
        assert "No published study compares post-RMSNorm with post-LayerNorm at depth" in text
        assert "this book's measurement alone" in text
    assert finding.verdict == "does not hold" == post_ln_decay.b18_verdict(same, **B18_RULE)
    assert finding.key_number == pytest.approx(same["pair"]["mean_difference"]) and finding.threshold == MARGIN


def synthetic_ablation(double_extra, diverge_stress=()):
    """LLaMA-style runs over six seeds (B19's confidence sequence is finite from five): the norm swap costs 0.05, the
    placement swap 0.03, and the double swap their sum plus `double_extra` (the interaction)."""
    effect = {"llama": 0.0, "rms→layer": 0.05, "swiglu→gelu": 0.01, "rope→learned": 0.0, "pre→post": 0.03}
    effect[interlock.DOUBLE_SWAP] = 0.08 + double_extra
    rows = []
    for label, delta in effect.items():
        for seed in range(6):
            loss = 2.0 + 0.1 * seed + delta + 0.001 * (seed % 3) * (label != "llama")
            rows.append(
                dict(label=label, seed=seed, final_val_loss=loss, setting="base lr", final_drop=0.01, diverged=False)
            )
        rows.append(
            dict(
                label=label,
                seed=0,
                final_val_loss=9.0,
                setting="stress lr",
                final_drop=0.0,
                diverged=label in diverge_stress,
            )
        )
    return training_at_depth.TrainingStudy(paired=pd.DataFrame(), no_warmup=pd.DataFrame(), ablation=pd.DataFrame(rows))


def b19_verdict(ablation) -> str:
    """B19's verdict as the chapter decides it: its registered rules on the interaction's interval."""
    return design.registered_verdict("B19", {"interaction": ablation.interaction})


def test_b19_interaction_decides():
    adds_up = interlock.ablation_study(synthetic_ablation(0.0, diverge_stress={"pre→post"}), MARGIN)
    assert adds_up.interaction["mean_difference"] == pytest.approx(0.0, abs=1e-3)
    assert b19_verdict(adds_up) == "does not hold"
    interlocked = interlock.ablation_study(synthetic_ablation(0.1), MARGIN)
    assert b19_verdict(interlocked) == "holds with caveats"
    assert b19_verdict(
        interlock.Ablation(swaps={}, interaction=None, stress_diverged=pd.Series(dtype=bool), base=None)
    ) == ("not testable here")
    shown = interlock.swap_table(adds_up).set_index("swap")
    assert shown.loc["rms→layer", "Δ vs LLaMA (nats per byte)"] == pytest.approx(0.051)
    assert bool(shown.loc["pre→post", "diverges at stress lr"]) and not shown.loc["rms→layer", "diverges at stress lr"]
    finding = interlock.b19_finding(interlocked, depth=1, steps=20, seeds=3, margin=MARGIN)
    assert (
        finding.key_number == pytest.approx(interlocked.interaction["mean_difference"]) and finding.threshold == MARGIN
    )
    assert "rms→layer +0.051" in finding.summary and finding.evidence["stress_diverged"]["llama"] is False
    assert "**B19 verdict: holds with caveats.**" in interlock.b19_paragraph(finding, interlocked, None)
    registered = confirmation.registered("B19", "smoke")
    confirmed = interlock.b19_finding(interlocked, depth=1, steps=20, seeds=3, margin=MARGIN, registered=registered)
    assert confirmed.verdict == "holds with caveats" and confirmed.evidence["pilot"]["pairs"] == 14
    paragraph = interlock.b19_paragraph(confirmed, interlocked, registered)
    assert "*The pilot's looks.*" in paragraph and "fresh seeds 1000–1001" in paragraph
    full = confirmation.registered("B19")
    built = interlock.b19_finding(interlocked, depth=1, steps=20, seeds=3, margin=MARGIN, registered=full)
    assert built.verdict == "holds with caveats"  # the builder reads the interval; the chapter's one call, the runs
    diverged = interlock.diverged_names(interlocked)
    short = PairsLeft(RunGaps(), 3, full.pairs).judge(built, confirmation=full, diverged=diverged)
    assert short.verdict == "not testable here" and "3 complete pairs of the 23 registered" in short.summary


# ---------------------------------------------------------------- figures


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_xiong_gradients_has_a_log_log_panel_per_initialisation_with_the_reference_line():
    fig = F.xiong_gradients(synthetic_init().frame)
    assert sorted(a.get_title() for a in fig.axes) == sorted(initialisation.INIT_NAMES.values())
    for axis in fig.axes:
        assert axis.get_xscale() == axis.get_yscale() == "log"
        assert "bound's shape, ∝ 1/√L" in [t.get_text() for t in axis.get_legend().get_texts()]


def test_depth_profile_draws_three_panels_at_the_deepest_depth():
    fig = F.depth_profile(synthetic_init().frame, 4)
    assert [a.get_title() for a in fig.axes] == [
        "per-block gradient, depth 4",
        "residual-stream norm",
        "token similarity",
    ]
    assert fig.axes[0].get_yscale() == "log" and fig.axes[0].get_legend() is not None


def test_training_at_depth_joins_each_seed_and_marks_the_entropy():
    training = synthetic_training()
    no_warmup = pd.DataFrame(
        {"config": ["pre-rms", "post-rms"] * 2, "lr": [1e-3, 1e-3, 1e-2, 1e-2], "final_val_loss": [2.0, 9.0, 2.1, 3.0]}
    )
    fig = F.training_at_depth(training.paired, no_warmup, 5.0, depth=2)
    left, right = fig.axes
    assert left.get_title() == "depth 2, with warm-up" and len(left.lines) >= 3  # one grey line per seed
    assert any(list(line.get_ydata()) == [5.0, 5.0] for line in right.lines)


def test_ablation_effects_keeps_a_row_per_swap_and_skips_a_diverged_one():
    swaps = interlock.ablation_study(synthetic_ablation(0.0), MARGIN).swaps | {"pre→post": None}
    ax = F.ablation_effects(swaps, MARGIN).axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == list(swaps)
    seeds = [c for c in ax.collections if isinstance(c, PathCollection)]
    assert len(seeds) == len(swaps) - 1  # one scatter of seeds per swap that has pairs


def test_the_ablation_skips_swaps_a_run_did_not_train_and_names_them():
    runs = synthetic_ablation(0.1).ablation
    runs = runs[~runs["label"].isin(["swiglu→gelu", "rope→learned"])]
    kept = interlock.ablation_study(training_at_depth.TrainingStudy(paired=None, no_warmup=None, ablation=runs), MARGIN)
    assert kept.absent == ("swiglu→gelu", "rope→learned") and set(kept.swaps) == {
        "rms→layer",
        "pre→post",
        interlock.DOUBLE_SWAP,
    }
    kept_b19 = interlock.b19_finding(kept, depth=1, steps=20, seeds=3, margin=MARGIN)
    assert kept_b19.verdict == "holds with caveats" == b19_verdict(kept)
    assert "Not run here: swiglu→gelu, rope→learned." in interlock.b19_paragraph(kept_b19, kept, None)
    no_double = runs[runs["label"] != interlock.DOUBLE_SWAP]
    lost = interlock.ablation_study(
        training_at_depth.TrainingStudy(paired=None, no_warmup=None, ablation=no_double), MARGIN
    )
    assert lost.interaction is None and b19_verdict(lost) == "not testable here"
    assert (
        "not computable (rms→layer + pre→post not run)"
        in interlock.b19_finding(lost, depth=1, steps=20, seeds=3, margin=MARGIN).summary
    )
    with pytest.raises(ValueError, match="no 'llama' runs"):
        interlock.ablation_study(training_at_depth.TrainingStudy(None, None, runs[runs["label"] != "llama"]), MARGIN)
