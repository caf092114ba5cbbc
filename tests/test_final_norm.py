"""V8 (the final norm's role): the model options that drop norms, the pre-logit scale probe, the job, the verdict."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from normlab.analysis.depth import final_norm as fn
from normlab.gpt.model import GPT, GPTConfig

TINY = dict(vocab_size=256, context=8, width=16, depth=2, heads=2)


def _model(seed: int, **options) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig(**TINY, **options))


@pytest.mark.parametrize("options", [{"drop_block_norms": True}, {"drop_final_norm": True}])
def test_dropped_norms_share_every_other_initial_value(options):
    seed = int(torch.randint(0, 10_000, (1,)))
    base, dropped = _model(seed).state_dict(), _model(seed, **options).state_dict()
    missing = set(base) - set(dropped)
    assert missing and all("norm" in name for name in missing)
    assert set(dropped) <= set(base)
    for name, value in dropped.items():
        assert torch.equal(value, base[name]), name


def test_dropped_norms_forward_against_a_float64_composition():
    seed = int(torch.randint(0, 10_000, (1,)))
    model = _model(seed, drop_block_norms=True, drop_final_norm=True).double()
    idx = torch.randint(0, 256, (3, 8))
    logits, _ = model(idx)
    # by hand: no norm anywhere, x + attn(x), then + mlp(.), head on the trunk
    x = model.token_embedding.weight[idx]
    for block in model.blocks:
        x = x + block.attn(x)
        m = block.mlp
        x = x + m.down(F.silu(m.gate(x)) * m.up(x))
    torch.testing.assert_close(logits, x @ model.lm_head.weight.T, rtol=1e-12, atol=1e-12)
    assert model.norms() == []


def test_defaults_unchanged_and_bad_options_refused():
    assert "drop_block_norms" not in GPTConfig().to_dict() and "drop_final_norm" not in GPTConfig().to_dict()
    assert GPTConfig(drop_final_norm=True).to_dict()["drop_final_norm"] is True
    with pytest.raises(ValueError, match="drop_final_norm must be a bool"):
        GPTConfig(drop_final_norm=1)
    with pytest.raises(ValueError, match="pre-LN only"):
        GPTConfig(drop_block_norms=True, placement="post")


def test_pre_logit_scale_against_float64():
    model = _model(int(torch.randint(0, 10_000, (1,)))).train()
    idx = torch.randint(0, 256, (2, 8))
    got = fn.pre_logit_scale(model, idx)
    assert model.training  # mode restored
    with torch.no_grad():
        double = _copy_double(model)
        x = double.embed(idx)
        for block in double.blocks:
            x = block(x)
        hidden = double.final_norm(x)
        logits = double.lm_head(hidden)
    rms = lambda t: float(t.pow(2).mean().sqrt())  # noqa: E731
    assert got["trunk_rms"] == pytest.approx(rms(x), rel=1e-5)
    assert got["hidden_rms"] == pytest.approx(rms(hidden), rel=1e-5)
    assert got["logit_rms"] == pytest.approx(rms(logits), rel=1e-5)


def _copy_double(model: GPT) -> GPT:
    torch.manual_seed(0)
    copy = GPT(model.cfg).double()
    copy.load_state_dict({k: v.double() for k, v in model.state_dict().items()})
    return copy


def test_scale_job_measures_the_trained_model():
    out = fn.scale_job(
        model=dict(**TINY, drop_final_norm=True),
        train=dict(
            steps=10, batch_size=2, warmup_steps=1, eval_every=5, eval_batches=1, stream_every=0, seed=3, device="cpu"
        ),
    )
    steps = [point["step"] for point in out["scale"]]
    assert steps == [0, *sorted(fn.probe_steps(10))]
    first, last = out["scale"][0], out["scale"][-1]
    assert last["logit_rms"] != first["logit_rms"]  # the probe followed the model the trainer updated
    assert first["hidden_rms"] == pytest.approx(first["trunk_rms"])  # no final norm: the head reads the trunk


def _finals(loss_b, ratio_c, seeds=4, noise=None):
    gen = torch.Generator().manual_seed(int(torch.randint(0, 10_000, (1,))))
    rows = []
    for seed in range(seeds):
        e = float(torch.randn(1, generator=gen)) * (noise if noise is not None else 1e-3)
        base = 2.0 + 0.1 * seed
        for arm, loss, logits in (
            (fn.ALL, base, 4.0),
            (fn.BLOCKS_REMOVED, base + loss_b + e, 4.0),
            (fn.FINAL_REMOVED, base + 0.2, 4.0 * ratio_c * (1 + e)),
        ):
            rows.append(dict(seed=seed, arm=arm, val_loss=loss, hidden_rms=1.0, trunk_rms=1.0, logit_rms=logits))
    return pd.DataFrame(rows)


@pytest.mark.parametrize(
    "loss_b, ratio_c, noise, verdict",
    [
        (0.0, 2.0, None, "holds with caveats"),
        (0.2, 2.0, None, "does not hold"),
        (0.0, 1.1, None, "does not hold"),
        (0.0, 2.0, 0.5, "not testable here"),
    ],
)
def test_v8_verdict_rule(loss_b, ratio_c, noise, verdict):
    measures = fn.v8_measures(_finals(loss_b, ratio_c, noise=noise), margin=0.03, logit_ratio=1.5)
    finding = fn.v8_finding(measures, margin=0.03, logit_ratio=1.5, scale="tiny", trainer="compiled")
    assert finding.verdict == verdict
    if verdict != "not testable here":
        assert finding.key_number == pytest.approx(ratio_c, rel=0.01)
        assert finding.spread == pytest.approx(
            float(np.std(np.exp(finding.evidence["log_logit_ratio"]["differences"]), ddof=1))
        )
    assert "V8" in fn.v8_paragraph(finding)
    with pytest.raises(ValueError, match="logit_ratio"):
        fn.v8_measures(_finals(0, 2), margin=0.03, logit_ratio=1.0)


def test_diverged_run_leaves_its_seed_not_comparable():
    runs = pd.DataFrame(
        [
            dict(
                seed=s,
                arm=a,
                final_val_loss=2.0,
                diverged=(s == 1 and a == fn.FINAL_REMOVED),
                val=[],
                scale=[dict(step=0, hidden_rms=1.0, trunk_rms=1.0, logit_rms=math.e)],
            )
            for s in range(2)
            for a in fn.ARMS
        ]
    )
    measures = fn.v8_measures(fn.final_rows(runs), margin=0.03, logit_ratio=1.5)
    assert measures["log_logit_ratio"] is None and measures["removed_minus_all"] is not None


def test_arm_jobs_differ_only_in_the_dropped_norm():
    settings = dict(
        ablation_steps=20, ablation_depth=1, width=16, context=8, batch=2, lr=1e-3, final_norm_step="compiled"
    )
    jobs, names, arms = fn.arm_jobs(settings, [4, 5])
    assert arms == list(fn.ARMS) and len(names) == 3
    base = jobs[0]["model"]
    for job, change in zip(jobs, fn.ARMS.values()):
        assert job["model"] == {**base, **change} and job["train"] == jobs[0]["train"] and job["seeds"] == [4, 5]
    assert jobs[0]["train"]["step"] == "compiled"
    jobs, _, arms = fn.arm_jobs(settings, range(5))  # 5 seeds: chunks of 3 and 2, every seed once per arm
    assert [job["seeds"] for job in jobs if job["model"] == base] == [[0, 1, 2], [3, 4]]
    assert sorted(arms) == sorted(list(fn.ARMS) * 2)


def _runs(seeds, diverged=()):
    return pd.DataFrame(
        [
            dict(
                seed=s,
                arm=a,
                final_val_loss=2.0,
                diverged=(s, a) in diverged,
                val=[],
                scale=[dict(step=0, hidden_rms=1.0, trunk_rms=1.0, logit_rms=math.e)],
            )
            for s in seeds
            for a in fn.ARMS
        ]
    )


def test_the_confirmation_decides_only_on_every_registered_pair():
    from normlab.analysis.shared import confirmation
    from normlab.analysis.shared.missing_runs import RunGaps, diverged_names

    registered = confirmation.registered("V8", "smoke")  # the pipeline check's 2 pairs, seeds 1400-1401
    settings = dict(final_norm_first_seed=registered.first_seed, final_norm_seeds=registered.pairs)
    assert fn.seeds_of(settings) == range(1400, 1402)
    measures = fn.v8_measures(_finals(0.0, 2.0, seeds=3), margin=0.03, logit_ratio=1.5)
    finding = fn.v8_finding(
        measures, margin=0.03, logit_ratio=1.5, scale="tiny", trainer="compiled", confirmation=registered
    )
    assert finding.verdict == "holds with caveats"
    assert finding.evidence["confirmation_seeds"] == [1400, 1401] and finding.evidence["pilot_seeds"] == [0, 3]

    complete = fn.pairs_left(_runs([1400, 1401]), RunGaps(), settings)
    assert complete.judge(finding, confirmation=registered).verdict == "holds with caveats"

    lost = fn.pairs_left(_runs([1400]), RunGaps(("V8 all norms, seeds [1401]",)), settings)
    judged = lost.judge(finding, confirmation=registered)
    assert judged.verdict == "not testable here"
    assert "1 complete pairs of the 2 registered" in judged.summary
    assert judged.evidence["missing_runs"] == ["V8 all norms, seeds [1401]"]

    runs = _runs([1400, 1401], diverged={(1401, fn.FINAL_REMOVED)})
    assert diverged_names(runs, "arm") == ["final norm removed seed 1401"]
    judged = fn.pairs_left(runs, RunGaps(), settings).judge(
        finding, confirmation=registered, diverged=diverged_names(runs, "arm")
    )
    assert judged.verdict == "not testable here" and "1 run diverged: final norm removed seed 1401" in judged.summary


def test_a_reading_against_zero_is_labelled_unregistered_and_deciding_nothing():
    def finals(increases):
        rows = []
        for seed, increase in enumerate(increases):
            for arm, loss, logits in (
                (fn.ALL, 2.0, 4.0),
                (fn.BLOCKS_REMOVED, 2.0 + increase, 4.0),
                (fn.FINAL_REMOVED, 2.2, 8.0 + seed / 10),
            ):
                rows.append(dict(seed=seed, arm=arm, val_loss=loss, hidden_rms=1.0, trunk_rms=1.0, logit_rms=logits))
        return pd.DataFrame(rows)

    def reading(increases):
        measures = fn.v8_measures(finals(increases), margin=0.03, logit_ratio=1.5)
        finding = fn.v8_finding(measures, margin=0.03, logit_ratio=1.5, scale="tiny", trainer="compiled")
        return measures["removed_minus_all"], finding, fn.v8_paragraph(finding)

    loss, finding, text = reading([0.02, 0.04, 0.03, 0.035, 0.025, 0.033])  # interval about +0.024..+0.037
    assert 0 < loss["ci_low"] < 0.03 < loss["ci_high"]
    assert finding.verdict == "not testable here" and "wholly above zero" in text
    assert "Descriptive only, never registered and deciding nothing" in text  # the rule reads +margin, never 0
    assert "does cost loss" not in text
    loss, finding, text = reading([-0.02, 0.04, 0.0, 0.05, -0.01, 0.03])  # the interval reaches below zero
    assert loss["ci_low"] < 0 < 0.03 < loss["ci_high"] and "wholly above zero" not in text
