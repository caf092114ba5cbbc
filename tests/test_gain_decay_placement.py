"""V5: weight decay on the input norms' gains against the output norms' (normlab.gpt.train's gain_decay_on, and the
gain chapter's decay_placement section)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from normlab.analysis.gain import decay_placement as dp
from normlab.gpt.model import GPT, GPTConfig
from normlab.gpt.train import CompiledStep, TrainConfig, norm_role, parameter_groups
from normlab.study import design
from test_summary_wording import summary_problems

TINY = dict(vocab_size=256, context=8, width=16, depth=2, heads=2)


def model(placement: str, **kw) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(**TINY, placement=placement, **kw))


def decay_of(model: GPT, cfg: TrainConfig) -> dict[str, float]:
    """Each parameter's weight decay, by name, from parameter_groups."""
    by_id = {id(p): g["weight_decay"] for g in parameter_groups(model, cfg) for p in g["params"]}
    return {name: by_id[id(p)] for name, p in model.named_parameters()}


def test_norm_role_by_placement():
    assert norm_role("blocks.3.norm1", "peri") == "input" and norm_role("blocks.0.norm2", "pre") == "input"
    assert norm_role("blocks.1.post_norm2", "peri") == "output"
    assert norm_role("blocks.0.norm1", "post-sublayer") == "output"
    assert norm_role("blocks.0.norm1", "post") is None  # on the trunk: neither
    assert norm_role("final_norm", "peri") is None and norm_role("blocks.0.attn.q_norm", "peri") is None


@pytest.mark.parametrize("arm", ["input", "output"])
def test_groups_decay_only_the_chosen_gains(arm):
    gpt = model("peri", qk_norm=True)
    decays = decay_of(gpt, TrainConfig(gain_weight_decay=0.7, gain_decay_on=arm))
    gains = {name + ".weight" for name, m in gpt.norms() if m.weight is not None}
    chosen = {g for g in gains if norm_role(g.removesuffix(".weight"), "peri") == arm}
    assert len(chosen) == 2 * TINY["depth"]
    assert all(decays[g] == 0.7 for g in chosen)
    assert all(decays[g] == 0.0 for g in gains - chosen)  # the other kind, the final norm and QK-norm
    # everything that is not a gain decays exactly as with gain_decay_on="all"
    everything = decay_of(gpt, TrainConfig(gain_weight_decay=0.7))
    assert {n: d for n, d in decays.items() if n not in gains} == {
        n: d for n, d in everything.items() if n not in gains
    }
    assert all(everything[g] == 0.7 for g in gains)


def test_compiled_step_uses_the_chosen_decays():
    from normlab.gpt.corpus import load_corpus

    cfg = TrainConfig(steps=2, batch_size=2, warmup_steps=0, gain_weight_decay=0.5, gain_decay_on="output")
    step = CompiledStep(
        GPTConfig(**TINY, placement="peri"), cfg, load_corpus(), compile_model=False, compile_update=False
    )
    names = {id(p): n for n, p in step.model.named_parameters()}
    decay = {names[id(p)]: d for p, d in zip(step.params, step.decays)}
    assert decay["blocks.0.post_norm1.weight"] == 0.5 and decay["blocks.1.post_norm2.weight"] == 0.5
    assert decay["blocks.0.norm1.weight"] == 0.0 and decay["final_norm.weight"] == 0.0


def test_bad_gain_decay_on_is_refused_with_its_fix():
    with pytest.raises(ValueError, match="gain_decay_on must be one of 'all', 'input', 'output'"):
        TrainConfig(gain_decay_on="inputs")
    with pytest.raises(ValueError, match="needs gain_weight_decay > 0"):
        TrainConfig(gain_decay_on="input")
    with pytest.raises(ValueError, match="placement='pre'.*'output' needs 'peri'"):
        parameter_groups(model("pre"), TrainConfig(gain_weight_decay=0.1, gain_decay_on="output"))
    assert "gain_decay_on" not in TrainConfig().to_dict()
    assert TrainConfig(gain_weight_decay=0.1, gain_decay_on="input").to_dict()["gain_decay_on"] == "input"


SETTINGS = {
    "placement_seeds": 3,
    "placement": dict(width=16, depth=2, context=8, batch=2, steps=20, lr=3e-3, first_seed=100),
    "placement_step": "compiled",
}


def test_jobs_differ_only_in_the_decayed_gains():
    jobs, keys = dp.placement_jobs(SETTINGS, 3.0)
    assert keys == [(arm, seed) for seed in (100, 101, 102) for arm in dp.ARMS]
    by_key = dict(zip(keys, jobs))
    for seed in (100, 101, 102):
        base = by_key[("neither", seed)]
        assert base["model"]["placement"] == "peri" and base["train"]["step"] == "compiled"
        assert base["train"]["seed"] == seed and "gain_weight_decay" not in base["train"]
        for arm in dp.DECAYED:
            job = by_key[(arm, seed)]
            assert job["model"] == base["model"]
            extra = {k: v for k, v in job["train"].items() if k not in base["train"]}
            assert extra == {"gain_weight_decay": 3.0, "gain_decay_on": arm}
            assert {k: job["train"][k] for k in base["train"]} == base["train"]
    with pytest.raises(ValueError, match="gain_decay must be a positive finite number"):
        dp.placement_jobs(SETTINGS, 0.0)


def fake_runs(rng, effects: dict, *, diverged=None) -> dict:
    """Runs of 3 seeds whose final losses differ from the baseline's by `effects[arm]` plus noise."""
    runs = {}
    for seed in (100, 101, 102):
        base = 2.0 + rng.normal(0, 0.1)
        for arm in dp.ARMS:
            loss = base + effects.get(arm, 0.0) + rng.normal(0, 0.002)
            history = {
                f"gain_norm/blocks.{b}.{n}": list(rng.uniform(1, 5, size=4))
                for b in range(2)
                for n in ("norm1", "norm2", "post_norm1", "post_norm2")
            }
            runs[(arm, seed)] = dict(
                final_val_loss=loss, diverged=(arm, seed) == diverged, final_drop=0.01, history=history
            )
    return runs


def test_study_pairs_arms_against_the_baseline():
    rng = np.random.default_rng()
    runs = fake_runs(rng, {"input": -0.3, "output": 0.4})
    study = dp.placement_study(runs, SETTINGS, gain_decay=3.0, margin=0.02)
    for arm in dp.DECAYED:
        diffs = [runs[(arm, s)]["final_val_loss"] - runs[("neither", s)]["final_val_loss"] for s in (100, 101, 102)]
        assert study.effects[arm]["differences"] == pytest.approx(diffs)
        assert study.effects[arm]["mean_difference"] == pytest.approx(np.mean(diffs))
    assert study.readings == {"input": "helps", "output": "hurts"}
    assert dp.v5_finding(study, trainer="compiled").verdict == "holds"
    # the final RMS of the input norms' gains in the input arm: mean over seeds of the last step, over √width
    last = [
        np.mean(
            [
                runs[("input", s)]["history"][f"gain_norm/blocks.{b}.{n}"][-1]
                for b in range(2)
                for n in ("norm1", "norm2")
            ]
        )
        for s in (100, 101, 102)
    ]
    assert study.final_gain["input"]["input"] == pytest.approx(np.mean(last) / math.sqrt(16))
    assert study.timescale == pytest.approx(3e-3 * 3.0 * 20)


def test_a_diverged_run_leaves_the_claim_not_testable():
    runs = fake_runs(np.random.default_rng(), {"input": -0.3, "output": 0.4}, diverged=("output", 101))
    study = dp.placement_study(runs, SETTINGS, gain_decay=3.0, margin=0.02)
    assert study.effects["output"] is None and study.readings["output"] is None
    finding = dp.v5_finding(study, trainer="compiled")
    assert finding.verdict == "not testable here"
    assert summary_problems({"verdict": finding.verdict, "summary": finding.summary}) == []


@pytest.mark.parametrize(
    "effects, verdict",
    [
        ({"input": -0.3, "output": 0.4}, "holds"),
        ({"input": 0.3, "output": -0.05}, "does not hold"),
        ({"input": -0.3, "output": 0.0}, "holds with caveats"),
    ],
)
def test_the_ledger_summary_is_short_and_agrees_with_its_verdict(effects, verdict):
    study = dp.placement_study(fake_runs(np.random.default_rng(), effects), SETTINGS, gain_decay=3.0, margin=0.02)
    finding = dp.v5_finding(study, trainer="compiled")
    assert finding.verdict == verdict
    assert summary_problems({"verdict": finding.verdict, "summary": finding.summary}) == []
    assert f"{study.effects['input']['mean_difference']:+.4f}" in finding.summary


@pytest.mark.parametrize(
    "low, high, expected",
    [(-0.5, -0.03, "helps"), (0.021, 0.3, "hurts"), (-0.019, 0.019, "no effect"), (-0.03, 0.01, "undecided")]
    # an interval that reaches a margin line is across it, as every interval reading of the study has it
    + [(0.02, 0.3, "undecided"), (-0.3, -0.02, "undecided")],
)
def test_reading_against_the_margin(low, high, expected):
    assert dp.reading({"ci_low": low, "ci_high": high}, 0.02) == expected


INTERVALS = {  # an interval with each reading against ±0.02, as `reading` names them
    "helps": (-0.05, -0.03),
    "hurts": (0.03, 0.05),
    "no effect": (-0.01, 0.01),
    "undecided": (0.01, 0.03),
}


@pytest.mark.parametrize(
    "input_, output, verdict",
    [
        ("helps", "hurts", "holds"),
        ("helps", "undecided", "holds with caveats"),
        ("no effect", "hurts", "holds with caveats"),
        ("hurts", "hurts", "does not hold"),
        ("helps", "helps", "does not hold"),
        ("no effect", "no effect", "does not hold"),
        ("undecided", "no effect", "not testable here"),
        ("undecided", "undecided", "not testable here"),
        ("helps", None, "not testable here"),
    ],
)
def test_registered_verdict_rule(input_, output, verdict):
    def interval(name):
        if name is None:
            return None
        low, high = INTERVALS[name]
        assert dp.reading({"ci_low": low, "ci_high": high}, 0.02) == name
        return {"ci_low": low, "ci_high": high, "margin": 0.02}

    effects = {"input_minus_neither": interval(input_), "output_minus_neither": interval(output)}
    assert design.registered_verdict("V5", effects) == verdict


def test_figure_draws_both_panels():
    import matplotlib

    matplotlib.use("Agg")
    from normlab.analysis.gain import figures

    study = dp.placement_study(
        fake_runs(np.random.default_rng(), {"input": 0.1}), SETTINGS, gain_decay=3.0, margin=0.02
    )
    fig = figures.placement_figure(study.effects, study.gain_paths, 0.02)
    left, right = fig.axes[:2]
    assert [t.get_text() for t in left.get_yticklabels()] == ["input norms' gains only", "output norms' gains only"]
    assert right.get_yscale() == "log"
    matplotlib.pyplot.close(fig)


# ---- the design registered 2026-12-07, which decides, and the earlier one beside it (issue 55) ----


def test_the_deciding_design_is_registered_at_the_matrices_decay_on_fresh_seeds():
    from normlab.analysis.gain import profiles
    from normlab.gpt.train import TrainConfig
    from normlab.study import design

    assert design.value("V5", "source_gain_decay") == TrainConfig.weight_decay  # the matrices' own decay
    assert design.load().claim("V5").registered == "2026-12-07"
    cpu = profiles.profile_settings("cpu")
    earlier, deciding = cpu[dp.EARLIER], cpu[dp.DECIDING]
    assert deciding["steps"] == 1000 and cpu[f"{dp.DECIDING}_seeds"] == 14
    # fresh seeds: none shared with the earlier design, nor with its timing runs (0) or this one's (99)
    fresh = set(range(deciding["first_seed"], deciding["first_seed"] + cpu[f"{dp.DECIDING}_seeds"]))
    used = set(range(earlier["first_seed"], earlier["first_seed"] + cpu["placement_seeds"])) | {0, 99}
    assert not fresh & used
    # the same model in both designs: only the decay, the steps and the seeds differ
    assert {k: v for k, v in deciding.items() if k not in ("steps", "first_seed")} == {
        k: v for k, v in earlier.items() if k not in ("steps", "first_seed")
    }
    jobs, keys = dp.placement_jobs(cpu, 0.1, dp.DECIDING)
    assert keys[0] == ("neither", 2000) and keys[-1] == ("output", 2013)
    assert jobs[1]["train"]["gain_weight_decay"] == 0.1 and jobs[1]["train"]["steps"] == 1000


def test_the_earlier_design_is_shown_beside_never_pooled_with_its_look_named():
    rng = np.random.default_rng(0)
    earlier = dp.placement_study(fake_runs(rng, {"input": 0.1}), SETTINGS, gain_decay=3.0, margin=0.02)
    deciding = dp.placement_study(fake_runs(rng, {}), SETTINGS, gain_decay=0.1, margin=0.02)
    finding = dp.v5_finding(deciding, trainer="compiled", earlier=earlier)
    assert finding.verdict == "does not hold"  # both inside the margin, by the deciding design alone
    assert finding.evidence["input_minus_neither"] == deciding.effects["input"]  # the family's reading
    record = finding.evidence["earlier_design"]
    assert record["verdict"] == "does not hold" and record["gain_decay"] == 3.0
    assert record["input_minus_neither"] == earlier.effects["input"]
    assert any("eafd9ea" in c and "2.513" in c and "2.633" in c and "never pooled" in c for c in finding.caveats)
    # the first sentence names how little time the decay had, beside the source's runs
    lead = finding.summary.split(". ")[0]
    assert lead.startswith("At λ_g = 0.1 for 0.0 decay timescales, fewer than the source's runs")  # ηλT = 0.006
    assert "The earlier design (λ_g = 3, registered 2026-12-05 after a look) reads does not hold" in finding.summary
    assert summary_problems({"verdict": finding.verdict, "summary": finding.summary}) == []
    # without the earlier design, no caveat and no record of it
    alone = dp.v5_finding(deciding, trainer="compiled")
    assert alone.caveats == () and "earlier_design" not in alone.evidence


def test_placement_text_ends_with_the_verdict_it_is_given():
    study = dp.placement_study(fake_runs(np.random.default_rng(), {}), SETTINGS, gain_decay=0.1, margin=0.02)
    text = dp.placement_text(study, "not testable here", "0.12", label="Earlier design's reading, not deciding")
    assert text.endswith("**Earlier design's reading, not deciding: not testable here.**")
