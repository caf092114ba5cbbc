"""Paired runs must start from the same values in every parameter the two models share, and see the same batches."""

import pytest
import torch

from normlab.gpt.corpus import load_corpus
from normlab.gpt.model import GPT, GPTConfig
from normlab.gpt.train import TrainConfig, train

SWAPS = [
    {"norm": "layer"},
    {"placement": "post"},
    {"mlp": "gelu"},
    {"positions": "learned"},
    {"norm": "layer", "placement": "post"},
]


def build(seed, **overrides):
    torch.manual_seed(seed)
    return GPT(GPTConfig(context=16, width=32, depth=3, heads=4, **overrides))


@pytest.mark.parametrize("swap", SWAPS, ids=lambda s: "+".join(f"{k}={v}" for k, v in s.items()))
def test_shared_parameters_start_identical(swap):
    base, other = dict(build(5).named_parameters()), dict(build(5, **swap).named_parameters())
    # Shared: same name and shape (GELU's up-projection is wider than SwiGLU's, so it is a different parameter).
    shared = sorted(n for n in set(base) & set(other) if base[n].shape == other[n].shape)
    # The swap must leave most of the model shared, or this test would compare nothing.
    assert len(shared) >= len(base) // 2
    for name in shared:
        assert torch.equal(base[name], other[name]), name


def test_layer_norm_bias_does_not_shift_the_stream():
    rms, layer = dict(build(3).named_parameters()), dict(build(3, norm="layer").named_parameters())
    assert any(name.endswith(".bias") for name in layer) and not any(name.endswith(".bias") for name in rms)
    assert set(rms) <= set(layer)
    assert all(torch.equal(rms[n], layer[n]) for n in rms)


def test_different_seeds_differ():
    a, b = build(0), build(1)
    assert not torch.equal(a.lm_head.weight, b.lm_head.weight)


def test_paired_runs_see_the_same_batches():
    corpus = load_corpus()
    cfg = dict(
        steps=3, batch_size=2, warmup_steps=0, eval_every=0, eval_batches=1, stream_every=0, progress=False, seed=4
    )
    seen = []
    for norm in ("rms", "layer"):
        batches = []

        def spy(split, *args, _orig=type(corpus).batch, **kwargs):  # noqa: B008 (the unpatched method, bound once)
            out = _orig(corpus, split, *args, **kwargs)
            if split == "train":
                batches.append(out[0].clone())
            return out

        object.__setattr__(corpus, "batch", spy)
        try:
            train(GPTConfig(context=16, width=32, depth=1, heads=4, norm=norm), TrainConfig(**cfg), corpus)
        finally:
            object.__delattr__(corpus, "batch")
        seen.append(batches)
    assert len(seen[0]) == 3 and all(torch.equal(a, b) for a, b in zip(*seen))
