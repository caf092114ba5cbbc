"""V9 (gradient sinks, `realmodels.gradient_sinks`), Q6 (the all-ones share, `realmodels.uniform_share`) and the
interval records the multiplicity rule reads from the real-models chapter. Tiny random LLaMA models, no download."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from normlab.analysis.realmodels import gradient_sinks as G
from normlab.analysis.realmodels import uniform_share as U
from normlab.analysis.realmodels.massive import INTERVAL_KEYS, MassiveRule
from normlab.analysis.realmodels.stream import along_ones_share
from normlab.analysis.shared.paired import paired_difference
from normlab.study import multiplicity
from normlab.study.pages.ledger_page import SUMMARY_WORDS, first_sentences

transformers = pytest.importorskip("transformers")


def tiny_llama(seed: int = 0, layers: int = 2):
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        vocab_size=40,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=32,
        attn_implementation="sdpa",
    )
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():  # one token with a huge embedding: a massive activation at every position that holds it
        model.get_input_embeddings().weight[7] *= 2000.0
    return model


def test_received_attention_against_a_loop():
    weights = torch.rand(2, 3, 5, 5, dtype=torch.float64)
    got = G.received_attention(weights)
    want = torch.zeros(2, 5, dtype=torch.float64)
    for b in range(2):
        for key in range(5):
            want[b, key] = sum(weights[b, h, q, key] for h in range(3) for q in range(key + 1, 5)) / 3
    torch.testing.assert_close(got, want)
    with pytest.raises(ValueError, match="attention weights"):
        G.received_attention(torch.rand(2, 5, 5))


def test_pass_measures_gradients_and_restores_the_model():
    model = tiny_llama()
    generator = torch.Generator().manual_seed(1)
    chunks = torch.randint(8, 40, (3, 12), generator=generator)
    chunks[:, 0] = 7
    rule = MassiveRule(ratio=100.0, floor=50.0)
    tokens = G.measure_gradient_sinks(model, chunks, rule, depth=1, batch=2)
    # the massive positions are exactly the ones holding the huge embedding
    assert tokens.massive[:, 0].all() and not tokens.massive[:, 1:].any()
    # autograd's gradient through the norm against B12's exact Jacobian (float64)
    assert tokens.jacobian_error < 1e-4
    norms = tokens.names
    assert tokens.r.shape == tokens.grad_out.shape == (len(norms), 3, 12)
    assert tokens.received.shape == (2, 3, 12)
    # the total gradient at block 1's input, against autograd on the same loss (the mean over all chunks)
    captured = {}
    handle = model.model.layers[0].register_forward_hook(
        lambda module, args, output: captured.setdefault("h", output[0] if isinstance(output, tuple) else output)
    )
    out = model(chunks, labels=chunks, use_cache=False)
    handle.remove()
    (grad,) = torch.autograd.grad(out.loss, captured["h"])
    index = norms.index("model.layers.1.input_layernorm")
    np.testing.assert_allclose(tokens.grad_residual[index], grad.norm(dim=-1).numpy(), rtol=2e-3, atol=1e-9)
    np.testing.assert_allclose(tokens.r[index], captured["h"].detach().pow(2).mean(-1).sqrt().numpy(), rtol=1e-5)
    # weights and attention implementation as they were
    assert all(p.requires_grad for p in model.parameters())
    assert model.config._attn_implementation == "sdpa"
    with pytest.raises(ValueError, match="depth"):
        G.measure_gradient_sinks(model, chunks, rule, depth=3, batch=2)


def synthetic(ratio_r: float, attenuation_factor: float, gradient_ratio: float) -> G.TokenGradients:
    """Two blocks and a final norm; position 0 massive with r ratio_r times the others', its gradient at the norm
    output gradient_ratio times theirs and its attenuation attenuation_factor times what 1/r predicts."""
    names = [
        "model.layers.0.input_layernorm",
        "model.layers.0.post_attention_layernorm",
        "model.layers.1.input_layernorm",
        "model.layers.1.post_attention_layernorm",
        "model.norm",
    ]
    rng = np.random.default_rng(3)
    shape = (len(names), 4, 6)
    r = np.full(shape, 2.0)
    r[:, :, 0] *= ratio_r
    grad_out = rng.uniform(1.0, 1.0, shape)
    grad_out[:, :, 0] *= gradient_ratio
    grad_through = grad_out / r
    grad_through[:, :, 0] *= attenuation_factor
    massive = np.zeros((4, 6), bool)
    massive[:, 0] = True
    return G.TokenGradients(names, 2, r, grad_out, grad_through, grad_through * 2, np.ones((2, 4, 6)), massive, 1, 0.0)


def test_summary_reads_the_ratios_and_the_rule():
    result = G.summarise(synthetic(ratio_r=100.0, attenuation_factor=1.5, gradient_ratio=30.0), tolerance=2.0)
    assert list(result.per_norm["depth"]) == [1.0, 1.5, 2.0]  # at and past the massive depth only
    assert result.concentration == pytest.approx(30.0)
    assert result.agreement == pytest.approx(1.5)
    assert result.share_within == 1.0 and result.massive_tokens == 4 and result.massive_on_first_token == 4
    # limited to what is measured (re-registered 2026-12-07): the sink decides; never "holds", since the regulator
    # half (the source's intervention) is not run and the 1/r agreement is B12's identity, which does not vote
    assert G.v9_verdict(30.0, 1.5, 1.0, threshold=2.0, tolerance=2.0, share=0.75) == G.CAVEATS
    assert G.v9_verdict(30.0, 1.5, 0.5, threshold=2.0, tolerance=2.0, share=0.75) == G.CAVEATS
    assert G.v9_verdict(30.0, 0.3, 1.0, threshold=2.0, tolerance=2.0, share=0.75) == G.CAVEATS
    assert G.v9_verdict(1.5, 1.0, 1.0, threshold=2.0, tolerance=2.0, share=0.75) == G.FAILS
    assert G.v9_verdict(math.nan, math.nan, 0.0, threshold=2.0, tolerance=2.0, share=0.75) == G.UNTESTABLE
    off = G.summarise(synthetic(ratio_r=100.0, attenuation_factor=3.0, gradient_ratio=30.0), tolerance=2.0)
    assert off.agreement == pytest.approx(3.0) and off.share_within == 0.0
    # the ledger shows the first sentence, at most SUMMARY_WORDS words (the smoke run has no massive positions, so
    # only this test reads the measured branch's wording; it ran 52 words in a cpu build)
    finding = G.v9_finding(result, 2.0, 0.75, {})
    first = first_sentences(finding.summary, 1)
    assert (
        first.startswith("Only the gradient sink is measured: SmolLM2-135M's") and len(first.split()) <= SUMMARY_WORDS
    )
    assert "B12's Jacobian identity, not a test" in finding.summary and finding.verdict == G.CAVEATS
    assert (
        finding.key_number == pytest.approx(30.0) and finding.threshold == 2.0 and finding.reads == ("concentration",)
    )
    caveats = " ".join(finding.caveats)
    assert "intervention" in caveats and "not run here" in caveats and "B12's Jacobian identity" in caveats
    assert "All 4 massive positions are the first token of their chunk." in finding.caveats
    assert "4-bit GGUF" in caveats


def test_along_ones_share_is_cos_squared_with_the_uniform_vector():
    x = torch.randn(7, 33, dtype=torch.float64) + 0.3
    ones = torch.ones(33, dtype=torch.float64)
    cosine = (x @ ones) / (x.norm(dim=-1) * ones.norm())
    torch.testing.assert_close(along_ones_share(x), cosine**2)


def test_uniform_share_numbers_and_rule():
    assert U.all_token_share(0.001, 0.1, 100) == pytest.approx((0.001 * 99 + 0.1) / 100)
    assert U.angle_degrees(0.01) == pytest.approx(84.26, abs=0.01)
    assert U.minilm_label("L3f") == "layer 3's feed-forward norm" and U.minilm_label("emb") == "the embeddings' norm"
    with pytest.raises(ValueError, match="MiniLM norm label"):
        U.minilm_label("L3x")
    with pytest.raises(ValueError, match="share of energy"):
        U.angle_degrees(1.5)
    # read against the random direction of the same width (1/d), on the decoder LLM alone (re-registered 2026-12-07)
    minilm = U.ModelShares("all-MiniLM-L6-v2", 384, ["n0", "n1"], [0.0005, 0.05])  # beside it: never decides
    low = U.ModelShares("SmolLM2-135M", 576, ["n0", "n1", "n2"], [0.0005, 0.001, 0.0017])
    mixed = U.ModelShares("SmolLM2-135M", 576, ["n0", "n1", "n2"], [0.0005, 0.001, 0.00262])
    high = U.ModelShares("SmolLM2-135M", 576, ["n0", "n1", "n2"], [0.0005, 0.002, 0.00262])
    assert low.random == pytest.approx(1 / 576) and low.multiple(1 / 576) == pytest.approx(1.0)
    assert U.q6_verdict([low, minilm], 1.0) == U.HOLDS
    assert U.q6_verdict([mixed, minilm], 1.0) == U.CAVEATS
    assert U.q6_verdict([high, minilm], 1.0) == U.FAILS
    finding = U.q6_finding([mixed, minilm], 1.0, {})
    assert finding.key_number == pytest.approx(0.00262 * 576) and finding.threshold == 1.0
    assert finding.caveats == ("SmolLM2-135M: above 1 × 1/d at n2",)
    assert finding.summary.startswith("In SmolLM2-135M, which decides, a norm input's mean cos² with the uniform")
    assert "at most 1.51 times a random direction's 1/d, against 1 times." in finding.summary
    assert "Its largest is 0.00262 against 1/d = 0.00174" in finding.summary
    assert "all-MiniLM-L6-v2, beside it: at most 19.20 times its 1/d = 0.00260" in finding.summary
    assert finding.evidence["SmolLM2-135M"]["decides"] and not finding.evidence["all-MiniLM-L6-v2"]["decides"]
    with pytest.raises(ValueError, match="decided by SmolLM2-135M"):
        U.q6_verdict([minilm], 1.0)


def test_interval_records_carry_what_the_multiplicity_rule_reads():
    rng = np.random.default_rng(5)
    base = rng.normal(2.0, 0.1, 6)
    interval = {key: paired_difference(base, base + rng.normal(0.03, 0.01, 6), 0.01)[key] for key in INTERVAL_KEYS}
    reading = multiplicity.reading_of("Q4", "smollm2_interval", interval, "margin")
    assert 0.0 <= reading.level <= 1.0 and reading.outcome == interval["outcome"]
