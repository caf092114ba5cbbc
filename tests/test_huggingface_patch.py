"""The Hugging Face patch applied before loading: tiny random models saved, then loaded under the patch.

Logits are held to the study's rule: the patched model's distance to a float64 run of the same checkpoint is no
more than twice the unpatched model's own distance in that dtype (plus a few ulps of the logits' scale, for
backends whose arithmetic matches transformers' bit for bit), as in tests/test_integrations.py.
"""

from __future__ import annotations

import pytest
import torch

from normlab.norms import huggingface
from normlab.norms.backends import features
from normlab.norms.functional import UnsupportedFeature
from normlab.norms.huggingface import MODEL_TYPES, apply_to, undo

transformers = pytest.importorskip("transformers")

TINY = dict(
    vocab_size=96,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    max_position_embeddings=64,
    tie_word_embeddings=False,
)
CONFIGS = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config, "gemma": transformers.GemmaConfig}
PROMPT = torch.tensor([[3, 17, 42, 5, 88, 61, 9, 30]])


def _original_class(model_type: str) -> type:
    spec = MODEL_TYPES[model_type]
    return getattr(__import__(spec.module, fromlist=[spec.norm_class]), spec.norm_class)


@pytest.fixture(autouse=True)
def no_patch_left_behind():
    yield
    for model_type in list(huggingface.applied()):
        undo(model_type)


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def checkpoint(request, tmp_path_factory):
    """A randomly initialised model saved with save_pretrained, with norm gains away from their init."""
    model_type = request.param
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(CONFIGS[model_type](**TINY))
    with torch.no_grad():
        for module in model.modules():
            if type(module).__name__.endswith("RMSNorm"):
                module.weight.normal_(0.0 if model_type == "gemma" else 1.0, 0.3)
    path = tmp_path_factory.mktemp(model_type)
    model.save_pretrained(path)
    with torch.no_grad():
        reference = _load(path, torch.float64)(PROMPT).logits
    return model_type, path, reference


def _load(path, dtype):
    return transformers.AutoModelForCausalLM.from_pretrained(
        path, dtype=dtype, low_cpu_mem_usage=True, device_map="cpu"
    ).eval()


def _norms(model, cls) -> list[str]:
    return [name for name, module in model.named_modules() if isinstance(module, cls)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_a_model_loaded_under_the_patch_has_only_normlab_norms_and_its_logits(checkpoint, dtype):
    model_type, path, reference = checkpoint
    original_class = _original_class(model_type)
    plain = _load(path, dtype)
    expected_norms = _norms(plain, original_class)
    with apply_to(model_type) as patch:
        patched = _load(path, dtype)
    assert _norms(patched, original_class) == []
    assert _norms(patched, patch.patched) == expected_norms and expected_norms
    assert patched.state_dict().keys() == plain.state_dict().keys()
    with torch.no_grad():
        own = plain(PROMPT).logits
        mine = patched(PROMPT).logits
    assert mine.dtype == own.dtype == dtype
    own_error = float((own.double() - reference).abs().max())
    error = float((mine.double() - reference).abs().max())
    ulps = 4 * torch.finfo(dtype).eps * float(reference.abs().max())
    assert error <= 2 * own_error + ulps, (model_type, dtype, error, own_error)


def test_greedy_generation_is_the_same_in_fp32(checkpoint):
    model_type, path, _ = checkpoint
    settings = dict(max_new_tokens=16, min_new_tokens=16, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        own = _load(path, torch.float32).generate(PROMPT, **settings)
        with apply_to(model_type):
            mine = _load(path, torch.float32).generate(PROMPT, **settings)
    assert own.shape[-1] == PROMPT.shape[-1] + 16
    assert torch.equal(mine, own)


def test_patched_modules_keep_transformers_attribute_names_and_round_trip(checkpoint, tmp_path):
    model_type, path, _ = checkpoint
    with apply_to(model_type, backend="torch"):
        model = _load(path, torch.float32)
    norm = next(m for m in model.modules() if type(m).__name__.endswith("RMSNorm"))
    assert norm.variance_epsilon == norm.eps == model.config.rms_norm_eps
    assert norm.weight.shape == (TINY["hidden_size"],) and norm.backend == "torch"
    model.save_pretrained(tmp_path)
    again = _load(tmp_path, torch.float32)  # unpatched: transformers' own classes read what normlab's wrote
    assert isinstance(again.get_submodule("model.norm"), _original_class(model_type))
    for (name, mine), (_, theirs) in zip(model.state_dict().items(), again.state_dict().items()):
        assert torch.equal(mine, theirs), name


def test_undo_restores_transformers_classes_and_patching_twice_wraps_once():
    original = _original_class("llama")
    first = apply_to("llama", backend="torch")
    assert apply_to("llama", backend="torch") is first
    assert _original_class("llama") is first.patched and first.patched.replaces is original
    other = apply_to("llama", backend="reference")  # new settings replace the patch; transformers' class stays
    assert other.original is original and issubclass(other.patched, huggingface.HFRMSNorm)
    assert type(_original_class("llama")(8)).__mro__[1] is huggingface.HFRMSNorm
    undo("llama")
    assert _original_class("llama") is original and "llama" not in huggingface.applied()
    undo("llama")  # nothing applied: nothing to do
    assert _original_class("llama") is original


def test_unknown_model_type_is_refused_listing_the_known_ones():
    with pytest.raises(ValueError, match="known types: llama, mistral, qwen2, qwen3, gemma"):
        apply_to("gpt2")


def test_every_listed_model_type_names_a_class_its_transformers_module_defines():
    for model_type in MODEL_TYPES:
        assert _original_class(model_type).__name__ == MODEL_TYPES[model_type].norm_class


def test_a_backend_lacking_the_models_rounding_is_refused_before_loading():
    with pytest.raises(UnsupportedFeature, match=r"does not support casting_mode='llama'; use backend='reference'"):
        apply_to("qwen2", backend="triton")
    assert "qwen2" not in huggingface.applied()
    assert apply_to("qwen2", backend="triton", casting_mode="none").backend == "triton"


def test_a_backend_lacking_gemmas_offset_is_refused_naming_one_that_has_it(monkeypatch):
    # Every backend has the offset today (a weight pre-add); a backend without it is simulated in the table.
    monkeypatch.setitem(features.RMS_FEATURES, "torch", features.RMS_FEATURES["torch"] - {features.OFFSET})
    with pytest.raises(UnsupportedFeature, match=r"gemma model .*does not support offset; use backend='reference'"):
        apply_to("gemma", backend="torch")
    apply_to("llama", backend="torch")  # LLaMA's norm has no offset: nothing lacking
