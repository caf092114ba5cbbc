"""The exact map: a LLaMA model with LayerNorms equals the same model with centred writes and RMSNorms."""

from __future__ import annotations

import copy

import pytest
import torch

transformers = pytest.importorskip("transformers")

from normlab.analysis.realmodels import centring_map  # noqa: E402
from normlab.analysis.realmodels.centring_map import NotCovered, centred_model, check_covered, compare_logits  # noqa: E402
from normlab.norms.huggingface import swap_norms  # noqa: E402


def tiny_llama(dtype=torch.float64, **overrides) -> torch.nn.Module:
    """A random 3-layer LLaMA with tied embeddings, trained-looking in the ways that matter here: gains that are
    not all ones and a large common offset in the embeddings, so that centring changes what the norms see."""
    settings = dict(
        vocab_size=61,
        hidden_size=24,
        intermediate_size=40,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
        rms_norm_eps=1e-5,
        attn_implementation="eager",
    )
    settings.update(overrides)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**settings)).to(dtype).eval()
    with torch.no_grad():
        model.model.embed_tokens.weight.add_(0.05 * torch.randn(settings["hidden_size"], dtype=dtype) + 0.1)
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.copy_(0.5 + torch.rand_like(parameter))
            elif "o_proj" in name or "down_proj" in name:
                parameter.add_(0.05)  # writes with a mean over the hidden dimension, as trained ones have
    return model


def token_chunks(vocab: int, n: int = 3, length: int = 12) -> torch.Tensor:
    return torch.randint(0, vocab, (n, length), generator=torch.Generator().manual_seed(1))


def layer_norm_twin(model):
    twin = copy.deepcopy(model)
    swap_norms(twin, "torch", convert="layer_norm")
    return twin


def test_layernorm_model_equals_centred_model_in_float64():
    model = tiny_llama()
    chunks = token_chunks(model.config.vocab_size)
    centred = centred_model(model)
    # transformers' LlamaRMSNorm computes in float32 whatever its input; normlab's RMSNorm keeps float64.
    swap_norms(centred, "torch")
    mapped = compare_logits(layer_norm_twin(model), centred, chunks)
    unmapped = compare_logits(layer_norm_twin(model), model, chunks)
    assert mapped.max_relative_difference < 1e-12
    assert unmapped.max_relative_difference > 1e-2  # the check can fail: without the map the models differ
    assert mapped.chunks == 3 and mapped.tokens == 36


def test_float32_with_transformers_own_rmsnorm_agrees_to_float32_rounding():
    model = tiny_llama(torch.float32)
    mapped = compare_logits(layer_norm_twin(model), centred_model(model), token_chunks(model.config.vocab_size))
    assert mapped.max_relative_difference < 1e-5


def test_centred_model_is_a_copy_with_a_mean_zero_stream_and_an_untied_head():
    model = tiny_llama()
    original_embedding = model.model.embed_tokens.weight.detach().clone()
    centred = centred_model(model)
    assert torch.equal(model.model.embed_tokens.weight, original_embedding)  # the original is untouched
    assert model.lm_head.weight is model.model.embed_tokens.weight  # and still tied
    assert centred.lm_head.weight is not centred.model.embed_tokens.weight
    assert torch.equal(centred.lm_head.weight, original_embedding)  # the head reads, so it is not centred
    seen = []
    handle = centred.model.norm.register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    with torch.no_grad():
        centred(token_chunks(model.config.vocab_size), use_cache=False)
    handle.remove()
    stream = seen[0]
    assert stream.mean(-1).abs().max() < 1e-12 * stream.abs().max()


@pytest.mark.parametrize(
    "overrides, names",
    [(dict(mlp_bias=True), "mlp.down_proj has a bias"), (dict(attention_bias=True), "self_attn.o_proj has a bias")],
)
def test_writes_with_a_bias_are_refused(overrides, names):
    with pytest.raises(NotCovered, match=names) as refused:
        centred_model(tiny_llama(**overrides))
    assert centring_map.ASSUMPTIONS[0] in str(refused.value)  # the refusal names what the map assumes


def test_norms_with_a_bias_unknown_layers_and_other_models_are_refused():
    model = tiny_llama()
    model.model.layers[1].input_layernorm.bias = torch.nn.Parameter(torch.zeros(24, dtype=torch.float64))
    with pytest.raises(NotCovered, match=r"layers\.1\.input_layernorm has a bias"):
        check_covered(model)
    model = tiny_llama()
    model.model.layers[0].post_feedforward_layernorm = torch.nn.LayerNorm(24)
    with pytest.raises(NotCovered, match="unknown layer names"):
        check_covered(model)
    with pytest.raises(NotCovered, match="not 'llama'"):
        centred_model(torch.nn.Sequential(torch.nn.Linear(2, 2)))
    swapped = tiny_llama()
    swap_norms(swapped, "torch", convert="layer_norm")  # already LayerNorms: the norms are not the expected ones
    with pytest.raises(NotCovered, match="norms differ"):
        check_covered(swapped)


def test_compare_logits_checks_its_input():
    model = tiny_llama()
    with pytest.raises(ValueError, match="chunks must be"):
        compare_logits(model, model, torch.zeros(5, dtype=torch.long))
    same = compare_logits(model, model, token_chunks(model.config.vocab_size, n=2))
    assert same.max_relative_difference == 0.0 and same.max_abs_logit > 0
