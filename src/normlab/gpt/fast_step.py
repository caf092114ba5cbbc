"""K seeds of one small model trained at once, measured against the reference trainer (issue 45).

The reference trainer (normlab.gpt.train) is what the registered confirmations ran, and stays as it is; its
compiled step (TrainConfig(step="compiled"), normlab.gpt.train.CompiledStep) lives beside it. This module builds
`StackedStep` for the same GPTConfig and TrainConfig and the same semantics (learning-rate schedule, batches from
the seed's data generator, global-norm clipping, AdamW with train.parameter_groups' decay), so
scripts/trainer_throughput.py can time it side by side and tests/test_fast_step.py can hold it to the reference's
numbers: K models of one configuration, differing only in their seeds (initial weights and data order), trained at
once as explicit batched products: every weight matrix is a (K, out, in) tensor, every linear layer one torch.bmm,
attention one scaled_dot_product_attention over K*B sequences. Nothing mixes members (each member has its own
loss, gradient norm and clipping), so a member that goes non-finite is frozen, as the reference stops a diverged
run, and every other member's numbers are exactly those it has without it. Scope: pre-LN, RMSNorm or LayerNorm,
SwiGLU, RoPE, untied embeddings, no dropout, no QK-norm, depth scaling or embedding scale, weight decay on
matrices (the depth chapter's models); other configurations are refused. It writes no per-layer gradient or gain
norms into a history.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from normlab.gpt.corpus import Corpus
from normlab.gpt.model import GPT, GPTConfig
from normlab.gpt.train import TrainConfig, _adamw, _allow_recompiles, learning_rate

# ---------------------------------------------------------------- K models as batched products


def _check_stackable(mcfg: GPTConfig, tcfg: TrainConfig) -> None:
    wanted = dict(
        placement="pre",
        mlp="swiglu",
        positions="rope",
        tie_embeddings=False,
        dropout=0.0,
        qk_norm=False,
        depth_scaling=False,
        final_norm_kind=None,
    )
    for name, value in wanted.items():
        if getattr(mcfg, name) != value:
            raise ValueError(f"StackedStep implements {name}={value!r} only, got {getattr(mcfg, name)!r}")
    if mcfg.norm not in ("rms", "layer") or mcfg.uses_embedding_scale:
        raise ValueError(f"StackedStep implements norm 'rms' or 'layer' only, got {mcfg.norm!r}")
    if tcfg.weight_decay_on != "matrices" or tcfg.device != "cpu":
        raise ValueError("StackedStep implements weight_decay_on='matrices' on CPU only")
    if tcfg.gain_decay_on != "all":  # its decays exempt every gain (pre-LN has no output norms to tell apart)
        raise ValueError(f"StackedStep implements gain_decay_on='all' only, got {tcfg.gain_decay_on!r}")


class StackedStep:
    """K models of one configuration, seeds `seeds`, trained at once with batched products.

    Member k starts from GPT(mcfg) built after torch.manual_seed(seeds[k]) and draws its batches from its own
    generator seeded with seeds[k], as normlab.gpt.train.train does for that seed; `step()` advances every member
    still finite by one update and returns per-member losses and gradient norms."""

    def __init__(
        self, mcfg: GPTConfig, tcfg: TrainConfig, corpus: Corpus, seeds, *, dtype=torch.float32, compile: bool = False
    ):
        _check_stackable(mcfg, tcfg)
        corpus.check_context(mcfg.context)
        self.mcfg, self.tcfg, self.corpus, self.seeds = mcfg, tcfg, corpus, list(seeds)
        K = self.K = len(self.seeds)
        models = []
        for seed in self.seeds:
            torch.manual_seed(seed)
            models.append(GPT(mcfg).to(dtype))
        self.rope = models[0].blocks[0].attn.rope
        self.cos = self.rope.cos[: mcfg.context].to(dtype)
        self.signed_sin = self.rope.signed_sin[: mcfg.context].to(dtype)
        named = [dict(m.named_parameters()) for m in models]
        self.names = list(named[0])
        self.p = {n: nn.Parameter(torch.stack([d[n].detach() for d in named]).contiguous()) for n in self.names}
        gains = {n for n in self.names if "norm" in n and n.endswith(".weight")}
        self.decays = {
            n: (0.0 if n in gains else tcfg.weight_decay if named[0][n].dim() >= 2 and "embedding" not in n else 0.0)
            for n in self.names
        }
        self.exp_avgs = {n: torch.zeros_like(p) for n, p in self.p.items()}
        self.exp_avg_sqs = {n: torch.zeros_like(p) for n, p in self.p.items()}
        self.data_rngs = [torch.Generator().manual_seed(seed) for seed in self.seeds]
        self.active = torch.ones(K, dtype=torch.bool)
        self.step_count = 0
        self.arange = torch.arange(K)[:, None, None]
        if compile:
            _allow_recompiles()
        self._losses = torch.compile(self.losses, dynamic=False) if compile else self.losses
        self._update = torch.compile(_adamw, dynamic=False) if compile else _adamw

    # -- the model
    def _norm(self, x, prefix):
        c = self.mcfg
        w = self.p[prefix + ".weight"][:, None, :]
        if c.norm == "rms":
            return F.rms_norm(x, (c.width,), eps=c.norm_eps) * w
        return F.layer_norm(x, (c.width,), eps=c.norm_eps) * w + self.p[prefix + ".bias"][:, None, :]

    def _linear(self, x, name):
        return torch.bmm(x, self.p[name].transpose(1, 2))

    def _attention(self, x, prefix, B, T):
        c = self.mcfg
        K, C = self.K, c.width
        qkv = self._linear(x, prefix + ".qkv.weight").view(K * B, T, 3, c.heads, c.head_dim).permute(2, 0, 3, 1, 4)
        qk = qkv[:2]
        qk = qk * self.cos[:T] + qk.roll(c.head_dim // 2, dims=-1) * self.signed_sin[:T]
        y = F.scaled_dot_product_attention(qk[0], qk[1], qkv[2], is_causal=True)
        return self._linear(y.transpose(1, 2).reshape(K, B * T, C), prefix + ".proj.weight")

    def losses(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Per-member mean cross-entropy, (K,); idx and targets are (K, B, T)."""
        c = self.mcfg
        K, B, T = idx.shape
        x = self.p["token_embedding.weight"][self.arange, idx].view(K, B * T, c.width)
        for i in range(c.depth):
            b = f"blocks.{i}"
            x = x + self._attention(self._norm(x, b + ".norm1"), b + ".attn", B, T)
            h = self._norm(x, b + ".norm2")
            x = x + self._linear(
                F.silu(self._linear(h, b + ".mlp.gate.weight")) * self._linear(h, b + ".mlp.up.weight"),
                b + ".mlp.down.weight",
            )
        logits = self._linear(self._norm(x, "final_norm"), "lm_head.weight")
        wide = logits.to(torch.promote_types(logits.dtype, torch.float32))
        per_token = F.cross_entropy(wide.reshape(-1, c.vocab_size), targets.reshape(-1), reduction="none")
        return per_token.view(K, B * T).mean(1)

    def member_state(self, k: int) -> dict[str, torch.Tensor]:
        """Member k's parameters under GPT's state_dict names."""
        return {n: p[k].detach() for n, p in self.p.items()}

    def _batches(self):
        xs, ys = zip(*(self.corpus.batch("train", self.tcfg.batch_size, self.mcfg.context, g) for g in self.data_rngs))
        return torch.stack(xs), torch.stack(ys)

    def step(self) -> dict:
        """One update of every active member: {"loss": (K,), "grad_norm/total": (K,), "active": (K,)} after it."""
        tcfg = self.tcfg
        lr = learning_rate(self.step_count + 1, tcfg)
        self.step_count += 1
        x, y = self._batches()
        for p in self.p.values():
            p.grad = None
        losses = self._losses(x, y)
        losses.sum().backward()
        K = self.K
        grads = {n: p.grad if p.grad is not None else torch.zeros_like(p) for n, p in self.p.items()}
        with torch.no_grad():
            per_param = torch.stack([torch.linalg.vector_norm(g.reshape(K, -1), dim=1) for g in grads.values()], 1)
            total = torch.linalg.vector_norm(per_param, dim=1)
            loss_detached = losses.detach()
            finite = torch.isfinite(loss_detached) & torch.isfinite(total)
            newly = self.active & ~finite
            frozen = ~(self.active & finite)
            max_norm = tcfg.grad_clip if tcfg.grad_clip > 0 else math.inf
            coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
            saved = None
            if bool(frozen.any()):  # keep the frozen members' weights and moments as they are
                idx = frozen.nonzero().flatten()
                saved = [
                    (t, t[idx].clone()) for n in self.names for t in (self.p[n], self.exp_avgs[n], self.exp_avg_sqs[n])
                ]
                coef = torch.where(frozen, torch.zeros_like(coef), coef)
            beta1, beta2 = tcfg.betas
            t = self.step_count
            f64 = lambda v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
            self._update(
                [self.p[n] for n in self.names],
                [grads[n] for n in self.names],
                [self.exp_avgs[n] for n in self.names],
                [self.exp_avg_sqs[n] for n in self.names],
                [self.decays[n] for n in self.names],
                coef,
                f64(lr),
                f64(lr / (1 - beta1**t)),
                f64((1 - beta2**t) ** 0.5),
                beta1,
                beta2,
                1e-8,
            )
            if saved is not None:
                for tensor, values in saved:
                    tensor[idx] = values
            self.active &= ~newly
        return {"step": self.step_count, "loss": loss_detached, "grad_norm/total": total, "active": self.active.clone()}
