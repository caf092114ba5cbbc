"""The landscape options of the GPT: DyT, peri / post-sublayer placements, QK-norm, LayerNorm Scaling.

Each option: shapes, a state_dict round trip, the wiring it claims, and its bad input. The configurations
that existed before these options keep their state_dict names and initial weights (recorded below from the
model as it was at commit 7673181, before the options).
"""

import math

import pytest
import torch

from normlab.gpt.model import GPT, NORMS, PLACEMENTS
from normlab.norms.dyt import DyT
from normlab.norms.modules import RMSNorm
from tiny_gpt import ids, tiny

pytestmark = pytest.mark.usefixtures("one_thread")


def _block_keys(i, parts):
    return [f"blocks.{i}.{p}" for p in parts]


_PRE_RMS_BLOCK = [
    "norm1.weight",
    "norm2.weight",
    "attn.qkv.weight",
    "attn.proj.weight",
    "mlp.gate.weight",
    "mlp.up.weight",
    "mlp.down.weight",
]
_LAYER_BLOCK = ["norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias", "attn.qkv.weight", "attn.proj.weight"]
RECORDED_KEYS = {
    "pre-rms": (
        dict(),
        [
            "token_embedding.weight",
            *_block_keys(0, _PRE_RMS_BLOCK),
            *_block_keys(1, _PRE_RMS_BLOCK),
            "final_norm.weight",
            "lm_head.weight",
        ],
    ),
    "post-layer": (
        dict(norm="layer", placement="post"),
        [
            "token_embedding.weight",
            *_block_keys(0, _LAYER_BLOCK + ["mlp.gate.weight", "mlp.up.weight", "mlp.down.weight"]),
            *_block_keys(1, _LAYER_BLOCK + ["mlp.gate.weight", "mlp.up.weight", "mlp.down.weight"]),
            "lm_head.weight",
        ],
    ),
    "pre-layer-gelu-learned-tied": (
        dict(norm="layer", mlp="gelu", positions="learned", tie_embeddings=True),
        [
            "token_embedding.weight",
            "position_embedding.weight",
            *_block_keys(0, _LAYER_BLOCK + ["mlp.up.weight", "mlp.down.weight"]),
            *_block_keys(1, _LAYER_BLOCK + ["mlp.up.weight", "mlp.down.weight"]),
            "final_norm.weight",
            "final_norm.bias",
            "lm_head.weight",
        ],
    ),
}
# Loss on ids 0..31 and the sum of all parameters after torch.manual_seed(0), recorded before the options existed.
# Compared to float32 rounding, not bit for bit: torch's float32 normal_ draws through a vectorised Box-Muller under
# AVX2 and AVX-512 and a scalar one under ATen's `default`, so the same seed gives weights one rounding apart (the sum
# moved by 1.4e-5 of 130.4 there). A changed initialisation (another std, order or seed use) moves it far more.
RECORDED_NUMBERS = {
    "pre-rms": (5.559810638427734, 162.4095348831934),
    "post-layer": (5.55640983581543, 130.4095348831934),
}


@pytest.mark.parametrize("name", sorted(RECORDED_KEYS))
def test_existing_configurations_keep_their_state_dict_names(name):
    overrides, keys = RECORDED_KEYS[name]
    assert list(GPT(tiny(**overrides)).state_dict()) == keys


@pytest.mark.parametrize("name", sorted(RECORDED_NUMBERS))
def test_existing_configurations_keep_their_initial_weights(name):
    overrides = RECORDED_KEYS[name][0] if name in RECORDED_KEYS else {}
    torch.manual_seed(0)
    model = GPT(tiny(**overrides))
    idx = (torch.arange(32) % 256).reshape(2, 16)
    loss, total = RECORDED_NUMBERS[name]
    with torch.no_grad():
        assert float(model(idx, idx)[1]) == pytest.approx(loss, rel=1e-6)
        assert float(sum(p.double().sum() for p in model.parameters())) == pytest.approx(total, rel=1e-6)


OPTIONS = {
    "dyt": dict(norm="dyt"),
    "dyt-alpha": dict(norm="dyt", dyt_alpha=1.5),
    "peri": dict(placement="peri"),
    "post-sublayer": dict(placement="post-sublayer"),
    "qk_norm": dict(qk_norm=True),
    "depth_scaling": dict(depth_scaling=True, depth=3),
    "all": dict(norm="layer", placement="peri", qk_norm=True, depth_scaling=True),
    "dyt-post": dict(norm="dyt", placement="post"),
    "dyt-plain": dict(norm="dyt", embedding_scale=False),
    "dyt-learned-positions": dict(norm="dyt", positions="learned", tie_embeddings=True),
    "dyt-authors": dict(norm="dyt", dyt_bias=False, dyt_alpha_attention=0.8, dyt_alpha=0.2),
    "dyt-rms-final": dict(norm="dyt", dyt_bias=False, final_norm_kind="rms"),
    "dyt-peri-attention-alpha": dict(norm="dyt", placement="peri", dyt_alpha_attention=1.5),
    "rms-dyt-final": dict(final_norm_kind="dyt", dyt_bias=False),
}


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_option_shapes_backward_and_state_dict_round_trip(name):
    cfg = tiny(**OPTIONS[name])
    torch.manual_seed(0)
    model = GPT(cfg)
    x = ids()
    logits, loss = model(x, x)
    assert logits.shape == (2, 16, 256) and math.isfinite(float(loss))
    loss.backward()
    assert all(p.grad is not None and bool(torch.isfinite(p.grad).all()) for p in model.parameters())
    torch.manual_seed(1)
    other = GPT(cfg)
    other.load_state_dict(model.state_dict(), strict=True)
    with torch.no_grad():
        torch.testing.assert_close(other(x)[0], model(x)[0], rtol=0, atol=0)
    # Names are the same whatever the seed, and a second build yields the same names (stable, no ids or counters).
    assert list(other.state_dict()) == list(model.state_dict())


def test_dyt_model_uses_dyt_everywhere_with_its_alpha():
    model = GPT(tiny(norm="dyt", dyt_alpha=0.8))
    norms = model.norms()
    assert [n for n, _ in norms] == [
        "blocks.0.norm1",
        "blocks.0.norm2",
        "blocks.1.norm1",
        "blocks.1.norm2",
        "final_norm",
    ]
    assert all(isinstance(m, DyT) and m.alpha.item() == pytest.approx(0.8) for _, m in norms)


def _spy(module, store, key):
    module.register_forward_hook(lambda m, a, out: store.__setitem__(key, (a[0].detach(), out.detach())))


def test_peri_normalises_the_sublayer_output_before_adding_it():
    # eps tiny: the attention output at init is so small (std ~1e-4) that eps=1e-5 would dominate its variance.
    model = GPT(tiny(placement="peri", norm="layer", norm_eps=1e-12)).eval()
    block = model.blocks[0]
    with torch.no_grad():
        block.post_norm1.weight.fill_(2.0)
    seen = {}
    _spy(block.attn, seen, "attn")
    _spy(block.post_norm1, seen, "post1")
    _spy(block.norm1, seen, "norm1")
    block_in = {}
    block.register_forward_pre_hook(lambda m, a: block_in.__setitem__("x", a[0].detach()))
    with torch.no_grad():
        model(ids())
    torch.testing.assert_close(seen["post1"][0], seen["attn"][1])  # post_norm1 takes the attention output
    torch.testing.assert_close(seen["norm1"][0], block_in["x"])  # norm1 takes the block input
    # The post-norm's output (LayerNorm, gain 2) has per-token std 2 whatever the attention's scale.
    torch.testing.assert_close(seen["post1"][1].std(-1, correction=0), torch.full((2, 16), 2.0), rtol=1e-3, atol=1e-3)
    assert model.final_norm is not None


def test_post_sublayer_norms_the_branch_not_the_trunk():
    model = GPT(tiny(placement="post-sublayer")).eval()
    block = model.blocks[0]
    seen, block_in = {}, {}
    _spy(block.attn, seen, "attn")
    _spy(block.norm1, seen, "norm1")
    block.attn.register_forward_pre_hook(lambda m, a: block_in.__setitem__("attn_in", a[0].detach()))
    block.register_forward_pre_hook(lambda m, a: block_in.__setitem__("x", a[0].detach()))
    with torch.no_grad():
        model(ids())
    torch.testing.assert_close(block_in["attn_in"], block_in["x"])  # the sublayer sees the raw trunk
    torch.testing.assert_close(seen["norm1"][0], seen["attn"][1])  # norm1 takes the sublayer's output
    assert model.final_norm is not None


def test_qk_norm_normalises_each_head_of_queries_and_keys():
    model = GPT(tiny(qk_norm=True, norm_eps=1e-12)).eval()
    attn = model.blocks[0].attn
    assert isinstance(attn.q_norm, RMSNorm) and attn.q_norm.normalized_shape == (8,)
    seen = {}
    _spy(attn.q_norm, seen, "q")
    _spy(attn.k_norm, seen, "k")
    with torch.no_grad():
        model(ids())
    for key in ("q", "k"):
        inp, out = seen[key]
        assert inp.shape == (2, 4, 16, 8)  # (batch, heads, time, head_dim): per head
        rms = out.pow(2).mean(-1).sqrt()
        torch.testing.assert_close(rms, torch.ones_like(rms), rtol=1e-3, atol=1e-3)
    assert "blocks.0.attn.q_norm.weight" in model.state_dict()


def test_max_attention_logit_capture_matches_explicit_attention():
    model = GPT(tiny()).eval()
    x = ids()
    with torch.no_grad(), model.capture_max_attention_logit() as logits:
        model(x)
    assert len(logits) == 2 and all(isinstance(v, float) for v in logits)
    # Recompute block 0's logits by hand from its input.
    attn, seen = model.blocks[0].attn, {}
    attn.register_forward_pre_hook(lambda m, a: seen.__setitem__("x", a[0]))
    with torch.no_grad():
        model(x)
        B, T, C = seen["x"].shape
        q, k, _ = attn.qkv(seen["x"]).view(B, T, 3, 4, 8).permute(2, 0, 3, 1, 4)
        q, k = attn.rope(q), attn.rope(k)
        s = (q @ k.transpose(-2, -1)) / math.sqrt(8)
        s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), -math.inf)
    assert logits[0] == pytest.approx(float(s.max()), rel=1e-5)
    assert not attn.track_max_logit  # switched off on exit


def test_depth_scaling_multiplies_each_block_norm_by_one_over_sqrt_layer():
    torch.manual_seed(0)
    scaled = GPT(tiny(depth=4, depth_scaling=True)).eval()
    torch.manual_seed(0)
    plain = GPT(tiny(depth=4)).eval()
    assert list(scaled.state_dict()) == list(plain.state_dict())  # a float attribute, no new state
    assert [b.norm_scale for b in scaled.blocks] == pytest.approx([1, 1 / math.sqrt(2), 1 / math.sqrt(3), 0.5])
    seen = {}
    block = scaled.blocks[2]
    block.attn.register_forward_pre_hook(lambda m, a: seen.__setitem__("attn_in", a[0]))
    block.norm1.register_forward_hook(lambda m, a, out: seen.__setitem__("norm_out", out))
    with torch.no_grad():
        scaled(ids())
    torch.testing.assert_close(seen["attn_in"], seen["norm_out"] / math.sqrt(3))


@pytest.mark.parametrize(
    "overrides, words",
    [
        (dict(norm="group"), r"norm='group'.*'rms', 'layer', 'dyt'"),
        (dict(placement="sandwich"), r"placement='sandwich'.*'pre', 'post', 'peri', 'post-sublayer'"),
        (dict(norm="dyt", dyt_alpha=0.0), "dyt_alpha.*positive"),
        (dict(norm="dyt", dyt_alpha=-1.0), "dyt_alpha.*positive"),
        (dict(norm="dyt", norm_backend="triton"), "no Triton kernel"),
        (dict(norm="layer", norm_backend="cpp"), "'cpp' is an RMSNorm kernel and norm is 'layer'"),
        (dict(depth_scaling=True, depth=1), "depth_scaling needs depth >= 2"),
        (dict(depth_scaling=True, placement="post"), "depth_scaling needs a placement"),
        (dict(qk_norm=1), "qk_norm must be a bool"),
        (dict(depth_scaling="yes"), "depth_scaling must be a bool"),
        (dict(embedding_scale=True), "embedding_scale=True .*needs norm='dyt'.*norm='rms'"),
        (dict(norm="layer", embedding_scale=True), "needs norm='dyt'.*norm='layer'"),
        (dict(norm="dyt", embedding_scale=1), "embedding_scale must be True, False or None"),
        (dict(final_norm_kind="batch"), "final_norm_kind='batch' is not known"),
        (dict(final_norm_kind="rms", placement="post"), "placement='post' has no final norm"),
        (dict(dyt_bias=False), "no DyT layer.*set norm='dyt'"),
        (dict(norm="dyt", dyt_bias=0), "dyt_bias must be a bool"),
        (dict(norm="dyt", dyt_alpha_attention=0.0), "dyt_alpha_attention: .*positive"),
        (dict(dyt_alpha_attention=0.8), "needs norm='dyt'.*norm='rms'"),
        (dict(norm="dyt", placement="post-sublayer", dyt_alpha_attention=0.8), "placement 'pre' or 'peri'"),
        (dict(final_norm_kind="dyt", norm_backend="cpp"), "final_norm_kind is 'dyt'"),
    ],
)
def test_bad_options_are_refused_by_name(overrides, words):
    with pytest.raises(ValueError, match=words):
        tiny(**overrides)


def test_valid_names_are_listed():
    assert NORMS == ("rms", "layer", "dyt") and PLACEMENTS == ("pre", "post", "peri", "post-sublayer")


def test_dyt_and_qk_norm_parameters_reach_the_right_optimizer_groups():
    from normlab.gpt.train import TrainConfig, parameter_groups

    model = GPT(tiny(norm="dyt", qk_norm=True))
    groups = {g["name"]: {id(p) for p in g["params"]} for g in parameter_groups(model, TrainConfig())}
    names = {id(p): n for n, p in model.named_parameters()}
    gains = {names[i] for i in groups["gains"]}
    assert "blocks.0.norm1.weight" in gains and "blocks.0.attn.q_norm.weight" in gains
    # alpha is a scalar: no weight decay, which would pull it toward 0 and flatten tanh.
    assert "blocks.0.norm1.alpha" in {names[i] for i in groups["no_decay"]}
    assert sum(len(g) for g in groups.values()) == len(list(model.parameters()))


def test_dyt_scales_the_embeddings_by_a_learnable_sqrt_width_unless_turned_off():
    torch.manual_seed(0)
    scaled = GPT(tiny(norm="dyt"))
    torch.manual_seed(0)
    plain = GPT(tiny(norm="dyt", embedding_scale=False))
    assert tiny(norm="dyt").uses_embedding_scale and not tiny(norm="dyt", embedding_scale=False).uses_embedding_scale
    assert not tiny().uses_embedding_scale and not tiny(norm="layer").uses_embedding_scale
    # One scalar at sqrt(width) (the model's own parameter, so first in the state_dict); otherwise the same names.
    assert list(scaled.state_dict())[0] == "embedding_scale" and scaled.embedding_scale.shape == (1,)
    assert scaled.embedding_scale.item() == pytest.approx(math.sqrt(32), rel=1e-7)
    assert list(scaled.state_dict())[1:] == list(plain.state_dict())
    # Every shared parameter starts at the same value, so the two variants pair exactly.
    shared = plain.state_dict()
    for name, value in scaled.state_dict().items():
        if name != "embedding_scale":
            torch.testing.assert_close(value, shared[name], rtol=0, atol=0)
    # What block 0 sees: the plain model's embeddings times sqrt(width), against a float64 reference.
    x = ids()
    with scaled.capture_residual_stream() as s_stream, plain.capture_residual_stream() as p_stream, torch.no_grad():
        scaled(x), plain(x)
    want = scaled.token_embedding.weight.double()[x] * math.sqrt(32)
    torch.testing.assert_close(s_stream[0].double(), want, rtol=1e-6, atol=0)
    torch.testing.assert_close(p_stream[0].double(), want / math.sqrt(32), rtol=1e-6, atol=0)


def test_embedding_scale_learns_and_takes_no_weight_decay():
    from normlab.gpt.train import TrainConfig, parameter_groups

    model = GPT(tiny(norm="dyt"))
    groups = {g["name"]: {id(p) for p in g["params"]} for g in parameter_groups(model, TrainConfig())}
    # Decay would pull the scale toward 0, back into tanh's linear regime the recipe exists to leave.
    assert id(model.embedding_scale) in groups["no_decay"]
    x = ids()
    model(x, x)[1].backward()
    assert model.embedding_scale.grad is not None and model.embedding_scale.grad.abs().item() > 0


def test_the_authors_dyt_options_wire_beta_alpha_and_the_final_norm():
    torch.manual_seed(0)
    authors = GPT(tiny(norm="dyt", dyt_bias=False, dyt_alpha_attention=0.8, dyt_alpha=0.2))
    alphas = {name: m.alpha.item() for name, m in authors.norms()}
    assert alphas == pytest.approx(
        {"blocks.0.norm1": 0.8, "blocks.0.norm2": 0.2, "blocks.1.norm1": 0.8, "blocks.1.norm2": 0.2, "final_norm": 0.2}
    )
    assert all(m.bias is None for _, m in authors.norms()) and not any("bias" in n for n in authors.state_dict())
    torch.manual_seed(0)
    rms_final = GPT(tiny(norm="dyt", dyt_bias=False, final_norm_kind="rms"))
    assert isinstance(rms_final.final_norm, RMSNorm) and isinstance(rms_final.blocks[1].norm2, DyT)
    assert rms_final.embedding_scale is not None  # the blocks are DyT: the recipe's scale stays
    # The two start alike in every parameter they share: the pair differs in the final norm and the α₀ alone.
    shared = rms_final.state_dict()
    for name, value in authors.state_dict().items():
        if name in shared and not name.endswith("alpha"):
            torch.testing.assert_close(value, shared[name], rtol=0, atol=0)


def test_late_options_at_their_defaults_leave_the_config_dicts_as_they_were():
    from normlab.gpt.train import TrainConfig

    assert not {"dyt_bias", "dyt_alpha_attention", "final_norm_kind"} & set(tiny().to_dict())
    assert "weight_decay_on" not in TrainConfig().to_dict()
    assert tiny(norm="dyt", dyt_bias=False, final_norm_kind="rms").to_dict()["final_norm_kind"] == "rms"
    assert TrainConfig(weight_decay_on="all").to_dict()["weight_decay_on"] == "all"
    assert tiny(**tiny(norm="dyt", dyt_alpha_attention=0.8).to_dict()) == tiny(norm="dyt", dyt_alpha_attention=0.8)


def test_decay_on_every_parameter_is_the_authors_single_group():
    from normlab.gpt.train import TrainConfig, parameter_groups

    model = GPT(tiny(norm="dyt", dyt_bias=False))
    (group,) = parameter_groups(model, TrainConfig(weight_decay_on="all"))
    assert group["weight_decay"] == 0.1 and {id(p) for p in group["params"]} == {id(p) for p in model.parameters()}
    # α, the gains and the embedding scale are decayed too: one AdamW step on zero gradients shrinks each by lr·wd.
    optimizer = torch.optim.AdamW([group], lr=0.5, foreach=False)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer.step()
    for name in ("embedding_scale", "blocks.0.norm1.alpha", "blocks.0.norm1.weight", "token_embedding.weight"):
        torch.testing.assert_close(dict(model.named_parameters())[name].detach(), before[name] * (1 - 0.5 * 0.1))
    with pytest.raises(ValueError, match="weight_decay_on must be one of 'matrices', 'all'"):
        TrainConfig(weight_decay_on="everything")
    with pytest.raises(ValueError, match="gain_weight_decay"):
        TrainConfig(weight_decay_on="all", gain_weight_decay=0.05)


def test_xavier_init_draws_glorot_matrices_without_depth_scaling():
    torch.manual_seed(0)
    gpt2 = GPT(tiny(depth=4))
    torch.manual_seed(0)
    xavier = GPT(tiny(depth=4, init="xavier"))
    for name, module in xavier.named_modules():
        if isinstance(module, torch.nn.Linear):
            fan_out, fan_in = module.weight.shape
            expected = math.sqrt(2.0 / (fan_in + fan_out))  # the same for a projection into the trunk: no 1/sqrt(2L)
            assert float(module.weight.detach().std()) == pytest.approx(expected, rel=0.2), name
    down = dict(gpt2.named_parameters())["blocks.0.mlp.down.weight"]
    assert float(down.detach().std()) < 0.02  # GPT-2's default still scales that projection by 1/sqrt(2*depth)
    torch.testing.assert_close(xavier.token_embedding.weight, gpt2.token_embedding.weight, rtol=0, atol=0)
    assert "init" not in tiny().to_dict() and tiny(init="xavier").to_dict()["init"] == "xavier"
    with pytest.raises(ValueError, match="GPTConfig.init='he' is not known; choose one of 'gpt2', 'xavier'"):
        tiny(init="he")
