"""normlab inside a real transformers model: swapped norms keep the model's output.

The tolerance follows the study's rule for fp32: the swapped model's logits may
be no further from a float64 run of the same model than twice the original
fp32 model's own distance to it (plus a few ulps of the logits' scale, for the
backends whose arithmetic matches transformers' bit for bit).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from normlab.norms.huggingface import RMSNormWithBias, find_norms, norm_kind, restore_norms, swap_norms
from normlab.norms.modules import LayerNorm, RMSNorm
from smollm2_once import smollm2

TOKENS = [[1, 504, 3458, 314, 253, 1345, 28, 2000]]


@pytest.fixture(scope="module")
def logits_and_reference():
    loaded = smollm2()
    model = loaded.model
    ids = torch.tensor(TOKENS)
    with torch.no_grad():
        fp32 = model(ids, use_cache=False).logits
        # nn.Module's own casts: transformers refuses .float() on a GGUF-loaded model. fp32 -> fp64 -> fp32
        # is exact, so the model comes back unchanged.
        nn.Module.double(model)
        try:
            fp64 = model(ids, use_cache=False).logits
        finally:
            nn.Module.float(model)
    own_error = float((fp32.double() - fp64).abs().max())
    return model, ids, fp32, fp64, own_error


@pytest.mark.parametrize("backend", ["torch", "compile", "reference", "triton"])
def test_swapped_smollm2_reproduces_logits(logits_and_reference, backend):
    model, ids, fp32, fp64, own_error = logits_and_reference
    if backend == "triton":
        pytest.importorskip("triton")
        ids = ids[:, :4]  # the interpreter runs one program at a time: a few tokens only
        fp32, fp64 = fp32[:, :4], fp64[:, :4]
    originals = swap_norms(model, backend)
    try:
        assert len(originals) == 2 * model.config.num_hidden_layers + 1
        assert all(isinstance(model.get_submodule(n), RMSNorm) for n in originals)
        with torch.no_grad():
            swapped = model(ids, use_cache=False).logits
    finally:
        restore_norms(model, originals)
    assert type(model.get_submodule("model.norm")).__name__ == "LlamaRMSNorm"
    error = float((swapped.double() - fp64).abs().max())
    ulps = 4 * torch.finfo(torch.float32).eps * float(fp64.abs().max())
    assert error <= 2 * own_error + ulps, (backend, error, own_error)


def test_centring_added_changes_smollm2_but_keeps_gain(logits_and_reference):
    model, ids, fp32, _, _ = logits_and_reference
    originals = swap_norms(model, "torch", convert="layer_norm", only=["model.norm"])
    try:
        new = model.get_submodule("model.norm")
        assert isinstance(new, LayerNorm) and new.bias is None
        assert torch.equal(new.weight, originals["model.norm"].weight)
        with torch.no_grad():
            changed = model(ids, use_cache=False).logits
    finally:
        restore_norms(model, originals)
    assert not torch.allclose(changed, fp32)


class TinyBlock(nn.Module):
    """A BERT-style post-LN sublayer: LayerNorm(x + W x)."""

    def __init__(self, width=16):
        super().__init__()
        self.dense = nn.Linear(width, width)
        self.LayerNorm = nn.LayerNorm(width, eps=1e-12)

    def forward(self, x):
        return self.LayerNorm(x + self.dense(x))


def _trained_like(block):
    torch.manual_seed(0)
    with torch.no_grad():
        block.LayerNorm.weight.uniform_(0.5, 1.5)
        block.LayerNorm.bias.uniform_(-0.5, 0.5)
    return block


def test_bert_layernorm_swap_keeps_output_and_weights():
    block = _trained_like(TinyBlock())
    x = torch.randn(3, 5, 16)
    expected = block(x)
    originals = swap_norms(block, "torch")
    assert isinstance(block.LayerNorm, LayerNorm)
    torch.testing.assert_close(block(x), expected)
    restore_norms(block, originals)
    assert isinstance(block.LayerNorm, nn.LayerNorm)


def test_layernorm_to_rmsnorm_keeps_gain_and_bias_against_float64():
    block = _trained_like(TinyBlock()).double()
    x = torch.randn(3, 5, 16, dtype=torch.float64) + 2.0  # an offset, so centring matters
    h = x + block.dense(x)
    weight, bias = block.LayerNorm.weight.detach().clone(), block.LayerNorm.bias.detach().clone()
    swap_norms(block, "reference", convert="rms_norm")
    assert isinstance(block.LayerNorm, RMSNormWithBias)
    expected = h / h.pow(2).mean(-1, keepdim=True).add(1e-12).sqrt() * weight + bias
    torch.testing.assert_close(block(x), expected, rtol=1e-12, atol=1e-12)


def test_rmsnorm_to_layernorm_is_layernorm_with_same_gain():
    norm = nn.RMSNorm(16, eps=1e-6)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
    holder = nn.Sequential(norm)
    swap_norms(holder, "reference", convert="layer_norm")
    x = torch.randn(4, 16, dtype=torch.float32) + 3.0
    expected = torch.nn.functional.layer_norm(x.double(), (16,), norm.weight.double(), None, 1e-6)
    torch.testing.assert_close(holder[0](x).double(), expected, rtol=1e-5, atol=1e-5)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="unknown backend 'cuda'"):
        swap_norms(TinyBlock(), "cuda")
    with pytest.raises(ValueError, match="convert must be one of"):
        swap_norms(TinyBlock(), convert="batch_norm")
    with pytest.raises(ValueError, match="no norm module"):
        swap_norms(nn.Linear(3, 3))
    with pytest.raises(ValueError, match="not norms of this model"):
        swap_norms(TinyBlock(), only=["dense"])


def test_find_norms_recognises_llama_style_classes():
    class LlamaRMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(8))
            self.variance_epsilon = 1e-5

    holder = nn.Sequential(LlamaRMSNorm(), nn.Linear(8, 8), nn.LayerNorm(8))
    assert {n: norm_kind(m) for n, m in find_norms(holder).items()} == {"0": "rms_norm", "2": "layer_norm"}
