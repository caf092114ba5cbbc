"""normlab.gpt.batched: K models trained as one give each model what training it alone gives.

Tolerance. The batched run computes the same operations as train(), but the matrix products are batched over
the members and the norms run PyTorch's native ops inside vmap (train's "auto" runs normlab's cpp RMSNorm
kernel on the CPU), so sums are reduced in another order, and which order depends on the CPU's ATen kernels.

The runs are therefore compared in float64 (the `float64` fixture). AdamW moves a weight by
lr·m/(√v + ε): where a gradient g is near zero, a rounding difference δ in g moves the update by up to
lr·δ/ε. In float32, δ ≈ u₃₂·|g|max with u₃₂ = 6e-8 and ε = 1e-8, so one step can differ by a whole lr
(measured on an AVX-512 EPYC: 1.1e-5 on one weight of 8,192, past any fixed float32 bound set on an AVX2
machine). In float64, u₆₄ = 1.1e-16, and the bound over S steps, with reductions of n ≤ 10³ terms
(δ ≤ n·u₆₄·|g|max, |g|max ≤ 1 after clipping), is
    S·lr·n·u₆₄/ε = 4 · 1e-2 · 10³ · 1.1e-16 / 1e-8 = 4.4e-10,
so weights are held to 1e-9 (measured: 2e-14). Losses are means of cross-entropies near 5.5 over reductions
of about 10³ terms, so n·u₆₄·5.5 = 6e-13 bounds one step's forward; held to 1e-10 with the weight drift above
(measured: 9e-16). A real mistake (another member's batch or initialisation, a missed clip, a wrong learning
rate) moves losses by 1e-3 or more and weights by about the learning rate: seven orders above the bounds.

One float32 check stays, for the dtype the chapters train in: the first step's loss, before any AdamW update
can amplify a difference (see FIRST_LOSS_ATOL_FLOAT32).
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest
import torch

from normlab.gpt import batched
from normlab.gpt.batched import ModelsDoNotFit, paired_members, plan_memory, train_batched
from normlab.gpt.corpus import load_corpus
from normlab.gpt.model import GPT, GPTConfig
from normlab.gpt.train import TrainConfig, train

LOSS_ATOL = 1e-10  # nats, float64: the derivation is in the module docstring
WEIGHT_RTOL, WEIGHT_ATOL = 0.0, 1e-9  # float64: S·lr·n·u₆₄/ε = 4.4e-10, in the module docstring
# float32, step 1 only (same initial weights, no update yet): a reduction of n terms errs by at most n·u₃₂ of the
# sum of |terms| (Higham's γₙ). Summed over the forward's chain (depth 2 × (width + 4·width) + vocab 256 +
# batch·context 64 ≈ 640 terms): 640 · 6e-8 · 5.5 nats = 2.1e-4. Another member's batch changes the first loss by
# 1e-2 or more.
FIRST_LOSS_ATOL_FLOAT32 = 2.1e-4
SHAPE = dict(vocab_size=256, context=16, width=32, depth=2, heads=4)


@pytest.fixture(scope="module")
def corpus():
    return load_corpus()


def tcfg(**overrides) -> TrainConfig:
    settings = dict(
        steps=4, batch_size=4, lr=1e-2, warmup_steps=1, eval_every=2, eval_batches=2, stream_every=2, progress=False
    )
    return TrainConfig(**{**settings, **overrides})


def assert_same_run(alone, together) -> None:
    """`together` (a member of a batched run) within float tolerance of `alone` (train() on its own)."""
    assert together.diverged == alone.diverged
    assert together.steps_done == alone.steps_done
    assert sorted(together.history.columns) == sorted(alone.history.columns)
    assert together.history.step.tolist() == alone.history.step.tolist()
    assert together.history.lr.tolist() == alone.history.lr.tolist()
    for column in alone.history.columns.drop(["step", "lr", "step_time"]):
        pd.testing.assert_series_equal(
            together.history[column], alone.history[column], check_exact=False, rtol=WEIGHT_RTOL, atol=LOSS_ATOL
        )
    assert together.val.step.tolist() == alone.val.step.tolist()
    pd.testing.assert_series_equal(together.val.val_loss, alone.val.val_loss, check_exact=False, rtol=0, atol=LOSS_ATOL)
    numbers = alone.stream.select_dtypes("number").columns
    pd.testing.assert_frame_equal(
        together.stream[numbers], alone.stream[numbers], check_exact=False, rtol=WEIGHT_RTOL, atol=WEIGHT_ATOL
    )
    mine, theirs = together.model.state_dict(), alone.model.state_dict()
    assert mine.keys() == theirs.keys()
    for name in theirs:
        torch.testing.assert_close(mine[name], theirs[name], rtol=WEIGHT_RTOL, atol=WEIGHT_ATOL, msg=name)


def test_three_seeds_and_both_norms_match_training_each_alone(corpus, one_thread, float64):
    # RMSNorm seed 0 and LayerNorm seed 0 are a pair (one stack per norm), RMSNorm seed 1 shares a stack with the first.
    configs = [GPTConfig(**SHAPE, norm="rms"), GPTConfig(**SHAPE, norm="layer"), GPTConfig(**SHAPE, norm="rms")]
    seeds = [0, 0, 1]
    out = train_batched(configs, tcfg(), corpus, seeds)
    assert len(out.runs) == 3 and out.vmap_backends == ["torch"] * 3
    for config, seed, together in zip(configs, seeds, out.runs):
        alone = train(config, tcfg(seed=seed), corpus)
        assert together.train_config == alone.train_config and together.model_config == alone.model_config
        assert_same_run(alone, together)
    # The members really are different models: different seeds start apart, and the pair differs in its norm.
    first, third = out.runs[0].history.loss, out.runs[2].history.loss
    assert (first - third).abs().max() > 1e-3
    assert out.runs[0].model.lm_head.weight.dtype == torch.float64  # the fixture reached the models


def test_in_float32_the_first_step_loss_matches_training_alone(corpus, one_thread):
    config = GPTConfig(**SHAPE)
    out = train_batched([config, config], tcfg(steps=1, warmup_steps=0, eval_every=0, stream_every=0), corpus, [0, 1])
    assert out.runs[0].model.lm_head.weight.dtype == torch.float32
    for seed, together in enumerate(out.runs):
        alone = train(config, tcfg(steps=1, warmup_steps=0, eval_every=0, stream_every=0, seed=seed), corpus)
        assert together.history.loss[0] == pytest.approx(alone.history.loss[0], abs=FIRST_LOSS_ATOL_FLOAT32)
    # The bound tells members apart: each seed's first batch gives its own loss.
    assert abs(out.runs[0].history.loss[0] - out.runs[1].history.loss[0]) > 10 * FIRST_LOSS_ATOL_FLOAT32


def test_a_diverging_member_stops_and_keeps_its_weights_while_the_others_train_on(
    corpus, one_thread, float64, monkeypatch
):
    # A real blow-up is chaotic (rounding differences grow without bound), so member 0's loss is made
    # non-finite at step 2 instead: it must stop there with its weights after step 1, as train() stops, and its
    # NaN gradients must not reach member 1, which shares its stack.
    train_config = tcfg(steps=4, stream_every=0)
    original = batched._Stack.losses
    training_calls = []

    def poisoned(self, x, y):
        losses = original(self, x, y)
        if torch.is_grad_enabled():
            training_calls.append(1)
            if len(training_calls) == 2:
                losses = losses * torch.tensor([float("nan"), 1.0])
        return losses

    monkeypatch.setattr(batched._Stack, "losses", poisoned)
    config = GPTConfig(**SHAPE)
    stopped, healthy = train_batched(config, train_config, corpus, [0, 1]).runs
    assert stopped.diverged and stopped.steps_done == 2 and stopped.history.step.tolist() == [1, 2]
    assert stopped.history.loss.isna().tolist() == [False, True] and stopped.val.step.tolist() == [0]
    after_one_step = train(config, tcfg(steps=4, stream_every=0, seed=0, interrupt_after=1), corpus).model
    for name, value in after_one_step.state_dict().items():
        torch.testing.assert_close(stopped.model.state_dict()[name], value, rtol=WEIGHT_RTOL, atol=WEIGHT_ATOL)
    assert_same_run(train(config, replace(train_config, seed=1), corpus), healthy)


def test_too_many_models_are_refused_before_training_with_the_largest_k_that_fits(corpus, monkeypatch):
    config = GPTConfig(**SHAPE)
    train_config = tcfg()
    one = plan_memory(config, train_config, [0])
    model = GPT(config)
    assert one.per_member["parameters"] == 4 * model.num_parameters()
    assert one.per_member["adamw_moments"] == 2 * one.per_member["parameters"]
    assert one.per_member["activations"] > 0
    limit = int(2.5 * one.member_bytes / batched.USABLE_SHARE)  # room for two members, not three

    def must_not_build(*args, **kwargs):
        raise AssertionError("models were built although they do not fit")

    monkeypatch.setattr(batched, "_BatchedRun", must_not_build)
    with pytest.raises(ModelsDoNotFit, match=r"K=3 models need .* at most K=2 fit"):
        train_batched(config, train_config, corpus, [0, 1, 2], memory_limit_bytes=limit)
    assert plan_memory(config, train_config, [0, 1], memory_limit_bytes=limit).fits


@pytest.mark.parametrize(
    "configs, seeds, train_overrides, message",
    [
        (GPTConfig(**SHAPE), [], {}, r"K=0 models asked for: give at least one seed"),
        ([GPTConfig(**SHAPE)] * 2, [0, 1, 2], {}, r"2 model configs but 3 seeds: give one seed per config"),
        (
            [GPTConfig(**SHAPE), GPTConfig(**{**SHAPE, "width": 64})],
            [0, 1],
            {},
            r"differ in width \(32 vs 64\): models of different shapes cannot be stacked",
        ),
        (GPTConfig(**SHAPE, norm_backend="cpp"), [0], {}, r"norm_backend='cpp'.* use norm_backend='auto'"),
        (GPTConfig(**SHAPE, dropout=0.1), [0], {}, r"dropout=0.1.* set dropout=0.0"),
        (GPTConfig(**SHAPE), [0], {"checkpoint_path": "x.pt"}, r"checkpoint_path.* writes no checkpoints"),
        (GPTConfig(**SHAPE), [0, -1], {}, r"seed 1 must be an int >= 0"),
    ],
)
def test_bad_input_is_refused_with_the_fix(corpus, configs, seeds, train_overrides, message):
    with pytest.raises(ValueError, match=message):
        train_batched(configs, tcfg(**train_overrides), corpus, seeds)


def test_paired_members_vary_the_norm_within_each_seed():
    configs, seeds = paired_members(GPTConfig(**SHAPE), [3, 4])
    assert [(c.norm, s) for c, s in zip(configs, seeds)] == [("layer", 3), ("rms", 3), ("layer", 4), ("rms", 4)]
