"""A small decoder-only GPT whose normalisation is the object of study.

Everything the study varies is a field of `GPTConfig`: the norm (RMSNorm,
LayerNorm or DyT, from normlab's own modules, with a selectable backend), where
it sits (pre-LN with a final norm, post-LN on the trunk, Peri-LN around each
sublayer, or OLMo 2's norm after the sublayer), QK-norm, LayerNorm Scaling
(1/sqrt(layer) on every block norm's output), the MLP (SwiGLU or GELU),
positions (RoPE or learned) and tied embeddings. The default is the "LLaMA
style" combination: pre-LN, RMSNorm, SwiGLU, RoPE. The options added later
(DyT, peri, post-sublayer, qk_norm, depth_scaling, embedding_scale) leave the
state_dict names and the initial weights of the earlier configurations unchanged.

With norm="dyt" the model follows the DyT authors' recipe for language models
(Zhu et al. 2025, their LLaMA code): a learnable scalar, initialised to
sqrt(width), multiplies the embeddings. Set embedding_scale=False for DyT as a
plain drop-in. The rest of their LLaMA recipe is optional, each option off by
default: dyt_bias=False drops DyT's β, dyt_alpha_attention gives the norm in
front of attention its own α₀ (dyt_alpha then sets the others), and
final_norm_kind puts another norm (e.g. "rms") before the head while the
blocks keep `norm`.

The residual stream is observable through `GPT.capture_residual_stream()`,
and the mean component can be removed from every norm's input with
`GPT.project_out_mean_before_norms()` (the causal test of "the mean carries no
information").
"""

from __future__ import annotations

import math
import zlib
from contextlib import contextmanager
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from normlab.norms.backends.features import BACKEND_FEATURES, BACKENDS, NORMS, backend_choices, lacking_norm
from normlab.norms.derf import Derf, check_shift_init
from normlab.norms.derf import check_alpha_init as check_derf_alpha
from normlab.norms.dyt import DyT, check_alpha_init
from normlab.norms.modules import LayerNorm, RMSNorm

# pre: x + f(norm(x)); post: norm(x + f(x)); peri: x + norm_out(f(norm(x))) (Gemma 2/3, Peri-LN);
# post-sublayer: x + norm(f(x)) (OLMo 2).
PLACEMENTS = ("pre", "post", "peri", "post-sublayer")
# Placements whose trunk is an identity path, so a final norm precedes the head and a 1/sqrt(l) scale on a
# norm's output scales only what a branch adds.
TRUNK_IDENTITY_PLACEMENTS = ("pre", "peri", "post-sublayer")
MLPS = ("swiglu", "gelu")
POSITIONS = ("rope", "learned")
INIT_STD = 0.02  # GPT-2's standard deviation for every initialised weight
# gpt2: N(0, INIT_STD), the projections into the trunk scaled by 1/sqrt(2*depth); xavier: Glorot-normal weight
# matrices with no depth scaling, the initialisation Xiong et al. 2020 analyse (embeddings N(0, INIT_STD) in both);
# unscaled: N(0, INIT_STD) on every weight matrix, the projections into the trunk included (GPT-2's without its
# 1/sqrt(2*depth)), as Sun et al. 2025 (arXiv 2502.05795, abstract footnote 1) apply LayerNorm Scaling.
INITS = ("gpt2", "xavier", "unscaled")


def _choice(name: str, value, options) -> None:
    if value not in options:
        raise ValueError(f"GPTConfig.{name}={value!r} is not known; choose one of {', '.join(map(repr, options))}")


# Derf (normlab.norms.derf) has no kernel backends: a model may name it beside the backends' norms, and it runs its
# eager composite whatever norm_backend says (that setting picks the kernels of the other norms, e.g. QK-norm's).
MODEL_NORMS = (*NORMS, "derf")
ELEMENTWISE_NORMS = ("dyt", "derf")  # not scale-invariant: the embeddings are lifted by a learnable sqrt(width)


@dataclass
class GPTConfig:
    vocab_size: int = 256
    context: int = 128
    width: int = 128
    depth: int = 4
    heads: int = 4
    norm: str = "rms"
    placement: str = "pre"
    mlp: str = "swiglu"
    positions: str = "rope"
    tie_embeddings: bool = False
    norm_backend: str = "auto"
    norm_eps: float = 1e-5
    dropout: float = 0.0
    dyt_alpha: float = 0.5  # DyT's initial alpha (Zhu et al. 2025's default); used only with norm="dyt"
    # Derf's initial alpha and shift (Chen et al. 2025's code: 0.5 and 0.0); used only with norm="derf", whose
    # recipe is every norm Derf with β and the embeddings times a learnable sqrt(width), as with DyT
    derf_alpha: float = 0.5
    derf_shift: float = 0.0
    qk_norm: bool = False  # RMSNorm over head_dim on queries and keys, per head, before RoPE
    depth_scaling: bool = False  # LayerNorm Scaling (Sun et al. 2025): block l's norms output × 1/sqrt(l)
    # A learnable scalar times the embeddings, initialised to sqrt(width). None: on exactly when norm="dyt".
    # DyT is not scale-invariant: with N(0, 0.02) embeddings tanh(alpha*x) stays in its linear part and hands on
    # a signal of RMS ~0.02*alpha, so the authors lift the embeddings to RMS ~0.02*sqrt(width) first.
    embedding_scale: bool | None = None
    # The DyT authors' LLaMA options (off by default; `to_dict` writes them only when set, see there).
    dyt_bias: bool = True  # DyT's β; their LLaMA code has none
    dyt_alpha_attention: float | None = None  # α₀ of the norm in front of attention (norm1); None: dyt_alpha
    final_norm_kind: str | None = None  # the final norm's kind ("rms", "layer", "dyt"); None: the same as norm
    init: str = "gpt2"  # how the weight matrices are drawn, one of INITS
    # The final norm's role (TaperNorm, Kanavalau et al. 2026): drop the blocks' norms (identity maps) or the norm
    # before the head, pre-LN only. Each parameter keeps its own seeded draw, so the shared ones start identical.
    drop_block_norms: bool = False
    drop_final_norm: bool = False

    def __post_init__(self):
        for name in ("vocab_size", "context", "width", "depth", "heads"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"GPTConfig.{name} must be a positive int, got {value!r}")
        if self.width % self.heads:
            raise ValueError(
                f"GPTConfig.heads={self.heads} does not divide width={self.width}; "
                f"pick heads among the divisors of width (e.g. {_divisors_near(self.width, self.heads)})"
            )
        _choice("norm", self.norm, MODEL_NORMS)
        _choice("placement", self.placement, PLACEMENTS)
        _choice("mlp", self.mlp, MLPS)
        _choice("positions", self.positions, POSITIONS)
        _choice("norm_backend", self.norm_backend, BACKENDS)
        _choice("init", self.init, INITS)
        if self.positions == "rope" and self.head_dim % 2:
            raise ValueError(
                f"RoPE rotates channel pairs, so the head size width/heads={self.head_dim} must be even; "
                f"change width or heads, or use positions='learned'"
            )
        if not (isinstance(self.norm_eps, (int, float)) and self.norm_eps > 0 and math.isfinite(self.norm_eps)):
            raise ValueError(f"GPTConfig.norm_eps must be a positive finite float, got {self.norm_eps!r}")
        if not (isinstance(self.dropout, (int, float)) and 0.0 <= self.dropout < 1.0):
            raise ValueError(f"GPTConfig.dropout must be in [0, 1), got {self.dropout!r}")
        if not isinstance(self.tie_embeddings, bool):
            raise ValueError(f"GPTConfig.tie_embeddings must be a bool, got {self.tie_embeddings!r}")
        for name in ("qk_norm", "depth_scaling"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"GPTConfig.{name} must be a bool, got {getattr(self, name)!r}")
        if self.embedding_scale is not None and not isinstance(self.embedding_scale, bool):
            raise ValueError(
                f"GPTConfig.embedding_scale must be True, False or None (on with DyT), got {self.embedding_scale!r}"
            )
        if self.embedding_scale and self.norm not in ELEMENTWISE_NORMS:
            # A scale-invariant norm undoes any scale on its input, so the scalar would only retune the residual
            # stream's balance between embedding and branches: a different experiment from the DyT recipe.
            raise ValueError(
                f"GPTConfig.embedding_scale=True is DyT's and Derf's recipe and needs norm='dyt' or 'derf', got "
                f"norm={self.norm!r}; leave embedding_scale at None or False for RMSNorm and LayerNorm"
            )
        try:
            check_alpha_init(self.dyt_alpha)
        except ValueError as error:
            raise ValueError(f"GPTConfig.dyt_alpha: {error}") from None
        self._check_dyt_recipe_options()
        if self.norm == "derf":
            try:
                check_derf_alpha(self.derf_alpha)
                check_shift_init(self.derf_shift)
            except ValueError as error:
                raise ValueError(f"GPTConfig.derf_alpha/derf_shift: {error}") from None
        self._check_dropped_norms()
        # qk_norm's RMSNorm needs no check: every backend has one.
        for field, kind in (("norm", self.norm), ("final_norm_kind", self.final_norm_kind)):
            missing = None if kind in (None, "derf") else lacking_norm(self.norm_backend, kind)
            if missing is not None:
                raise ValueError(
                    f"GPTConfig.norm_backend={self.norm_backend!r} is {BACKEND_FEATURES[self.norm_backend].summary} "
                    f"and {field} is {kind!r}: {missing}; set norm_backend to {backend_choices(kind)}"
                )
        if self.depth_scaling:
            if self.placement not in TRUNK_IDENTITY_PLACEMENTS:
                raise ValueError(
                    f"GPTConfig.depth_scaling needs a placement whose trunk is an identity path "
                    f"({', '.join(map(repr, TRUNK_IDENTITY_PLACEMENTS))}); with placement={self.placement!r} the norm "
                    f"sits on the trunk and 1/sqrt(l) would shrink the whole stream at every block"
                )
            if self.depth < 2:
                raise ValueError(
                    f"GPTConfig.depth_scaling needs depth >= 2: with depth={self.depth} every scale is 1/sqrt(1) = 1 "
                    f"and the option would change nothing; use more blocks or set depth_scaling=False"
                )

    def _check_dyt_recipe_options(self) -> None:
        if self.final_norm_kind is not None:
            _choice("final_norm_kind", self.final_norm_kind, NORMS)
            if self.placement not in TRUNK_IDENTITY_PLACEMENTS:
                raise ValueError(
                    f"GPTConfig.final_norm_kind is set but placement={self.placement!r} has no final norm (its norms "
                    f"sit on the trunk); use a placement among {', '.join(map(repr, TRUNK_IDENTITY_PLACEMENTS))}"
                )
        if not isinstance(self.dyt_bias, bool):
            raise ValueError(f"GPTConfig.dyt_bias must be a bool, got {self.dyt_bias!r}")
        if not self.dyt_bias and "dyt" not in (self.norm, self.final_kind):
            raise ValueError(
                f"GPTConfig.dyt_bias=False drops DyT's β, but the model has no DyT layer (norm={self.norm!r}); "
                "set norm='dyt' or leave dyt_bias at True"
            )
        if self.dyt_alpha_attention is not None:
            try:
                check_alpha_init(self.dyt_alpha_attention)
            except ValueError as error:
                raise ValueError(f"GPTConfig.dyt_alpha_attention: {error}") from None
            if self.norm != "dyt" or self.placement not in ("pre", "peri"):
                raise ValueError(
                    "GPTConfig.dyt_alpha_attention sets the α₀ of the DyT layer in front of attention, which needs "
                    f"norm='dyt' and placement 'pre' or 'peri'; got norm={self.norm!r}, placement={self.placement!r}"
                )

    def _check_dropped_norms(self) -> None:
        for name in ("drop_block_norms", "drop_final_norm"):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise ValueError(f"GPTConfig.{name} must be a bool, got {value!r}")
            if value and self.placement != "pre":
                raise ValueError(
                    f"GPTConfig.{name}=True is defined for pre-LN only (its trunk is an identity path without the "
                    f"norms), got placement={self.placement!r}; use placement='pre'"
                )

    @property
    def final_kind(self) -> str:
        """The kind of norm before the head: final_norm_kind, or norm when that is unset."""
        return self.norm if self.final_norm_kind is None else self.final_norm_kind

    @property
    def head_dim(self) -> int:
        return self.width // self.heads

    @property
    def uses_embedding_scale(self) -> bool:
        return self.norm in ELEMENTWISE_NORMS if self.embedding_scale is None else self.embedding_scale

    def to_dict(self) -> dict:
        """The fields as a dict. The DyT recipe options and `init` are written only when set: a configuration that does not
        use them then serialises, and checkpoints, exactly as it did before they existed (the training loop's
        golden numbers and older checkpoints compare these dicts key for key)."""
        out = asdict(self)
        for name, default in _LATE_DEFAULTS.items():
            if out[name] == default:
                del out[name]
        return out


_LATE_DEFAULTS = {
    "dyt_bias": True,
    "dyt_alpha_attention": None,
    "final_norm_kind": None,
    "init": "gpt2",
    "drop_block_norms": False,
    "drop_final_norm": False,
}


def _divisors_near(width: int, heads: int) -> list[int]:
    divisors = [d for d in range(1, width + 1) if width % d == 0]
    return sorted(divisors, key=lambda d: abs(d - heads))[:3]


NORM_MODULES = (RMSNorm, LayerNorm, DyT, Derf)
_LATE_DEFAULTS.update(derf_alpha=0.5, derf_shift=0.0)  # written by `to_dict` only when set, as the DyT options


def make_norm(cfg: GPTConfig, kind: str | None = None, alpha: float | None = None) -> nn.Module:
    """A norm of `kind` (default cfg.norm); a DyT layer starts at `alpha` (default cfg.dyt_alpha)."""
    kind = cfg.norm if kind is None else kind
    if kind == "rms":
        return RMSNorm(cfg.width, eps=cfg.norm_eps, backend=cfg.norm_backend)
    if kind == "derf":  # the blocks' and the final norm alike: the authors give Derf one α₀ in GPT-2
        return Derf(cfg.width, alpha_init=cfg.derf_alpha, shift_init=cfg.derf_shift)
    if kind == "dyt":
        alpha = cfg.dyt_alpha if alpha is None else alpha
        return DyT(cfg.width, alpha_init=alpha, bias=cfg.dyt_bias, backend=cfg.norm_backend)
    return LayerNorm(cfg.width, eps=cfg.norm_eps, backend=cfg.norm_backend)


def rope_as_written(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE as the formula reads, x·cos + (-second half, first half)·sin: what every training before the faster
    form ran, kept as the reference `RotaryEmbedding` is held to bit for bit (tests/test_model.py)."""
    first, second = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-second, first], dim=-1) * sin


class RotaryEmbedding(nn.Module):
    """Rotates each (first-half, second-half) channel pair of a head by a position-dependent angle."""

    def __init__(self, head_dim: int, context: int, base: float = 10000.0):
        super().__init__()
        inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        angles = torch.outer(torch.arange(context, dtype=torch.float64), inv_freq)
        angles = torch.cat([angles, angles], dim=-1)
        # Not persistent: they are a pure function of the config, so checkpoints need not carry them.
        self.register_buffer("cos", angles.cos().float(), persistent=False)
        self.register_buffer("sin", angles.sin().float(), persistent=False)
        # sin with its first half negated: (second, first) * signed_sin is (-second, first) * sin, rounding and all
        half = head_dim // 2
        self.register_buffer(
            "signed_sin", torch.cat([-self.sin[:, :half], self.sin[:, half:]], dim=-1), persistent=False
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, heads, T, head_dim)
        """`rope_as_written`'s bits, forward and backward, in fewer ops: the chunk, negation and concatenation
        become one roll against a sin whose first half is negated (negating and moving are exact). At the study's
        head sizes of 8 and 16 that was 3-8% of a training step. Not addcmul for the product and the sum: it fuses
        them into one rounding, and moves the bits."""
        T = x.shape[-2]
        cos, signed_sin = self.cos[:T].to(x.dtype), self.signed_sin[:T].to(x.dtype)
        return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * signed_sin


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.heads, self.dropout = cfg.heads, cfg.dropout
        self.qkv = nn.Linear(cfg.width, 3 * cfg.width, bias=False)
        self.proj = nn.Linear(cfg.width, cfg.width, bias=False)
        self.proj.is_residual_projection = True
        self.rope = RotaryEmbedding(cfg.head_dim, cfg.context) if cfg.positions == "rope" else None
        if cfg.qk_norm:
            self.q_norm = RMSNorm(cfg.head_dim, eps=cfg.norm_eps, backend=cfg.norm_backend)
            self.k_norm = RMSNorm(cfg.head_dim, eps=cfg.norm_eps, backend=cfg.norm_backend)
        else:
            self.q_norm = self.k_norm = None
        # Set by GPT.capture_max_attention_logit(): the largest pre-softmax logit q·k/sqrt(d) of the last forward.
        self.track_max_logit = False
        self.max_logit: float | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        qkv = self.qkv(x).view(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        if self.rope is not None and self.q_norm is None:
            q, k = self.rope(qkv[:2]).unbind(0)  # both in one rotation: elementwise, so the same bits as one by one
            v = qkv[2]
        else:
            q, k, v = qkv
            if self.q_norm is not None:
                q, k = self.q_norm(q), self.k_norm(k)
            if self.rope is not None:
                q, k = self.rope(q), self.rope(k)
        if self.track_max_logit:
            # SDPA never shows its logits, so they are recomputed here (only while tracking).
            with torch.no_grad():
                logits = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
                mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
                self.max_logit = float(logits.masked_fill(~mask, -math.inf).amax())
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.kind = cfg.mlp
        if cfg.mlp == "swiglu":
            # 2/3 of 4*width keeps the parameter count of a GELU MLP with three matrices instead of two.
            hidden = 8 * ((int(8 * cfg.width / 3) + 7) // 8)
            self.gate = nn.Linear(cfg.width, hidden, bias=False)
            self.up = nn.Linear(cfg.width, hidden, bias=False)
        else:
            hidden = 4 * cfg.width
            self.up = nn.Linear(cfg.width, hidden, bias=False)
        self.down = nn.Linear(hidden, cfg.width, bias=False)
        self.down.is_residual_projection = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "swiglu":
            return self.down(F.silu(self.gate(x)) * self.up(x))
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    """One transformer block.

    pre-LN:        x + attn(norm1(x)), then + mlp(norm2(.)): the trunk is an identity path.
    post-LN:       norm1(x + attn(x)), then norm2(. + mlp(.)): the norms sit on the trunk.
    peri-LN:       x + post_norm1(attn(norm1(x))), then + post_norm2(mlp(norm2(.))).
    post-sublayer: x + norm1(attn(x)), then + norm2(mlp(.)) (OLMo 2).

    With depth scaling, block `index` (0-based) multiplies each of its norms' outputs by 1/sqrt(index + 1).
    The scale is a plain float, not a buffer, so it adds no state_dict entry.
    """

    def __init__(self, cfg: GPTConfig, index: int = 0):
        super().__init__()
        self.placement = cfg.placement
        # norm1 feeds attention in pre-LN and Peri-LN, where the DyT authors give it an α₀ of its own.
        self.norm1, self.norm2 = make_norm(cfg, alpha=cfg.dyt_alpha_attention), make_norm(cfg)
        if cfg.drop_block_norms:  # identity maps; every parameter draws from its own generator, so the rest match
            self.norm1, self.norm2 = nn.Identity(), nn.Identity()
        self.attn, self.mlp = CausalSelfAttention(cfg), MLP(cfg)
        if cfg.placement == "peri":
            self.post_norm1, self.post_norm2 = make_norm(cfg), make_norm(cfg)
        self.drop = nn.Dropout(cfg.dropout)
        self.norm_scale = 1.0 / math.sqrt(index + 1) if cfg.depth_scaling else 1.0

    def _norm(self, norm: nn.Module, x: torch.Tensor) -> torch.Tensor:
        y = norm(x)
        return y * self.norm_scale if self.norm_scale != 1.0 else y

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = self._norm
        if self.placement == "pre":
            x = x + self.drop(self.attn(n(self.norm1, x)))
            return x + self.drop(self.mlp(n(self.norm2, x)))
        if self.placement == "peri":
            x = x + self.drop(n(self.post_norm1, self.attn(n(self.norm1, x))))
            return x + self.drop(n(self.post_norm2, self.mlp(n(self.norm2, x))))
        if self.placement == "post-sublayer":
            x = x + self.drop(n(self.norm1, self.attn(x)))
            return x + self.drop(n(self.norm2, self.mlp(x)))
        x = self.norm1(x + self.drop(self.attn(x)))
        return self.norm2(x + self.drop(self.mlp(x)))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        if not isinstance(cfg, GPTConfig):
            raise TypeError(f"GPT needs a GPTConfig, got {type(cfg).__name__}")
        self.cfg = cfg
        # One draw from the global RNG, before any submodule is built: every parameter is then drawn from a
        # generator of its own, seeded by this draw and the parameter's name, so models that differ in one part
        # (the norm, LayerNorm's extra bias, the MLP, the positions) start with identical values in every
        # parameter they share. Paired comparisons rest on that.
        self._init_seed = int(torch.randint(0, 2**62, (1,)).item())
        self.token_embedding = nn.Embedding(cfg.vocab_size, cfg.width)
        self.position_embedding = nn.Embedding(cfg.context, cfg.width) if cfg.positions == "learned" else None
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg, index) for index in range(cfg.depth))
        self.final_norm = make_norm(cfg, cfg.final_kind) if cfg.placement in TRUNK_IDENTITY_PLACEMENTS else None
        if cfg.drop_final_norm:
            self.final_norm = None
        self.lm_head = nn.Linear(cfg.width, cfg.vocab_size, bias=False)
        for name, module in self.named_modules():
            self._init_weights(module, name)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.token_embedding.weight
        if cfg.uses_embedding_scale:
            # Filled with a constant, so it draws nothing from any generator: the other
            # parameters start as in the same model without it, and the pair differs in this scalar alone.
            self.embedding_scale = nn.Parameter(torch.full((1,), math.sqrt(cfg.width)))
        else:
            self.embedding_scale = None

    def _init_weights(self, module: nn.Module, name: str) -> None:
        # GPT-2 style: N(0, 0.02), with the projections that write into the trunk scaled by 1/sqrt(2*depth)
        # so the residual stream's variance does not grow with depth at initialisation.
        generator = torch.Generator().manual_seed(self._init_seed ^ zlib.crc32(name.encode()))
        if isinstance(module, nn.Linear):
            if self.cfg.init == "xavier":
                nn.init.xavier_normal_(module.weight, generator=generator)
            else:
                residual = getattr(module, "is_residual_projection", False) and self.cfg.init == "gpt2"
                std = INIT_STD / math.sqrt(2 * self.cfg.depth) if residual else INIT_STD
                nn.init.normal_(module.weight, mean=0.0, std=std, generator=generator)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=INIT_STD, generator=generator)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def norms(self) -> list[tuple[str, nn.Module]]:
        """Every norm module, named by its path in the model (e.g. "blocks.0.norm1", "final_norm")."""
        return [(name, module) for name, module in self.named_modules() if isinstance(module, NORM_MODULES)]

    def embed(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.token_embedding(idx)
        if self.position_embedding is not None:
            x = x + self.position_embedding(torch.arange(idx.shape[1], device=idx.device))
        if self.embedding_scale is not None:
            x = x * self.embedding_scale
        return self.drop(x)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        if not isinstance(idx, torch.Tensor) or idx.dtype != torch.long or idx.dim() != 2:
            raise ValueError("idx must be a LongTensor of token ids with shape (batch, time)")
        if idx.shape[1] > self.cfg.context:
            raise ValueError(f"sequence length {idx.shape[1]} exceeds the model's context {self.cfg.context}")
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x)
        if self.final_norm is not None:
            x = self.final_norm(x)
        logits = self.lm_head(x)
        loss = None
        if targets is not None:
            if targets.shape != idx.shape:
                raise ValueError(
                    f"targets has shape {tuple(targets.shape)} but idx has {tuple(idx.shape)}; they must match"
                )
            # Half-precision logits are upcast for the softmax; float64 ones stay float64 (the tests compare paths there).
            wide = logits.to(torch.promote_types(logits.dtype, torch.float32))
            loss = F.cross_entropy(wide.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        return logits, loss

    @contextmanager
    def capture_residual_stream(self):
        """Record the residual stream during forwards: stream[0] is block 0's input (the embeddings),
        stream[i] the output of block i-1, stream[depth] the last block's output (before the final norm).

        Tensors are detached. Each new forward replaces the previous capture.
        """
        stream: list[torch.Tensor] = []

        def record_input(module, args):
            stream.clear()
            stream.append(args[0].detach())

        def record_output(module, args, output):
            stream.append(output.detach())

        handles = [self.blocks[0].register_forward_pre_hook(record_input)]
        handles += [block.register_forward_hook(record_output) for block in self.blocks]
        try:
            yield stream
        finally:
            for handle in handles:
                handle.remove()

    @contextmanager
    def capture_max_attention_logit(self):
        """Within this context each forward records, per block, the largest causal pre-softmax attention
        logit q·k/sqrt(head_dim) (after QK-norm and RoPE). Yields a list whose entry i is block i's, refreshed
        by every forward."""
        attentions = [block.attn for block in self.blocks]
        values: list[float | None] = [None] * len(attentions)

        def record(index):
            def hook(module, args, output):
                values[index] = module.max_logit

            return hook

        handles = [attn.register_forward_hook(record(i)) for i, attn in enumerate(attentions)]
        for attn in attentions:
            attn.track_max_logit = True
        try:
            yield values
        finally:
            for attn in attentions:
                attn.track_max_logit, attn.max_logit = False, None
            for handle in handles:
                handle.remove()

    @contextmanager
    def project_out_mean_before_norms(self):
        """Within this context every norm's input has its per-token mean (its component along
        the all-ones direction) removed. LayerNorm is blind to it by construction; for RMSNorm this
        tests whether the mean component carries anything the network uses."""

        def remove_mean(module, args):
            x = args[0]
            return (x - x.mean(dim=-1, keepdim=True),) + tuple(args[1:])

        handles = [module.register_forward_pre_hook(remove_mean) for _, module in self.norms()]
        try:
            yield self
        finally:
            for handle in handles:
                handle.remove()
