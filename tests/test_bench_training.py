"""The trainer-throughput benchmark's accounting, on a tiny model: its shapes must be the model's, its shares sane."""

from __future__ import annotations

import pytest
import torch

from normlab.bench import training
from normlab.gpt.corpus import load_corpus
from normlab.gpt.model import GPT, GPTConfig
from normlab.gpt.train import TrainConfig

MODEL = GPTConfig(vocab_size=256, context=16, width=32, depth=2, heads=4, norm="rms")
TRAIN = TrainConfig(steps=50, batch_size=4, progress=False, eval_every=0, stream_every=0)


@pytest.fixture(scope="module")
def measured():
    return training.trainer_throughput(MODEL, TRAIN, load_corpus(), steps=2, rounds=2)


def test_the_profiled_products_are_the_models_linear_layers_forward_and_backward(measured):
    # every weight matrix (the embedding is a lookup, not a product) appears once forward and twice backward
    with torch.random.fork_rng(devices=[]):
        model = GPT(MODEL)
    matrices = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    tokens = TRAIN.batch_size * MODEL.context
    assert measured["matmul_flops_per_step"] == pytest.approx(6 * tokens * matrices)


def test_the_shares_and_rates_are_consistent(measured):
    shares = measured["matmul_share"] + measured["attention_share"] + measured["other_share"]
    assert shares == pytest.approx(1.0) and 0 < measured["matmul_share"] < 1
    assert measured["trainer_steps_per_s"] > 0 and measured["bare_steps_per_s"] > 0
    assert measured["matmul_gflops_alone_fp32"] > 0 and measured["step_over_matmul_floor_fp32"] > 1
    assert (measured["matmul_gflops_alone_bf16"] is None) == (not training.has_native_bf16())
