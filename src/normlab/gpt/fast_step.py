"""Faster training steps for the study's small CPU models, measured against the reference trainer (issue 45).

The reference trainer (normlab.gpt.train) is what the registered confirmations ran, and stays as it is. This module
builds alternatives to its step for the same GPTConfig and TrainConfig and the same semantics (learning-rate
schedule, batches from the seed's data generator, global-norm clipping, AdamW with train.parameter_groups' decay),
so scripts/trainer_throughput.py can time them side by side and tests/test_fast_step.py can hold them to the
reference's numbers:

- `CompiledStep`: one model, its forward and backward compiled by inductor (torch.compile of the model) and the
  clipping and AdamW update compiled as one function of all parameters (lr and the bias corrections passed as
  0-d float64 tensors, so the schedule does not recompile). Not bit-identical to the reference: inductor fuses
  and reorders, so its floats differ from the eager trainer's at rounding level (the tests state by how much).
- `StackedStep`: K models of one configuration, differing only in their seeds (initial weights and data order),
  trained at once as explicit batched products: every weight matrix is a (K, out, in) tensor, every linear layer
  one torch.bmm, attention one scaled_dot_product_attention over K*B sequences. Nothing mixes members (each
  member has its own loss, gradient norm and clipping), so a member that goes non-finite is frozen, as the
  reference stops a diverged run, and every other member's numbers are exactly those it has without it.
  Scope: pre-LN, RMSNorm or LayerNorm, SwiGLU, RoPE, untied embeddings, no dropout, no QK-norm, depth scaling
  or embedding scale, weight decay on matrices (the depth chapter's models); other configurations are refused.

Neither writes the reference trainer's per-layer gradient and gain norms into a history; `CompiledStep.step`
computes them when asked (record=True), as the reference trainer's step does.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import nn

from normlab.gpt.corpus import Corpus
from normlab.gpt.model import GPT, GPTConfig
from normlab.gpt.train import (
    TrainConfig,
    TrainResult,
    _eval_batches,
    evaluate,
    gain_l2_norms,
    gradient_norms,
    learning_rate,
    measure_stream,
    parameter_groups,
)
from normlab.runtime.progress import terminal_progress

# ---------------------------------------------------------------- the update both steps share


def _clip_and_adamw(params, grads, exp_avgs, exp_avg_sqs, decays, lr, step_size, bc2_sqrt, max_norm, beta1, beta2, eps):
    """Global-norm clipping (clip_grad_norm_'s formula) and AdamW (torch's single-tensor formula), in place.

    lr, step_size (lr / (1 - beta1**t)) and bc2_sqrt (sqrt(1 - beta2**t)) are 0-d float64 tensors; decays the
    per-parameter weight decay (floats). Returns the total gradient norm before clipping."""
    norms = torch.stack([torch.linalg.vector_norm(g) for g in grads])
    total = torch.linalg.vector_norm(norms)
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    _adamw(params, grads, exp_avgs, exp_avg_sqs, decays, coef, lr, step_size, bc2_sqrt, beta1, beta2, eps)
    return total


def _adamw(params, grads, exp_avgs, exp_avg_sqs, decays, coef, lr, step_size, bc2_sqrt, beta1, beta2, eps):
    """AdamW (torch's single-tensor formula), in place, each gradient scaled by `coef` first: a 0-d coef scales one
    model's gradients; a (K,) coef scales member k's slice of (K, ...) stacked parameters by coef[k]."""
    for p, g, m, v, wd in zip(params, grads, exp_avgs, exp_avg_sqs, decays):
        scale = coef.view(-1, *([1] * (g.dim() - 1))) if coef.dim() else coef
        g = g * scale.to(g.dtype)
        if wd:
            p.mul_((1 - lr * wd).to(p.dtype))
        m.lerp_(g, 1 - beta1)
        v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
        denom = (v.sqrt() / bc2_sqrt.to(v.dtype)).add_(eps)
        p.addcdiv_(m, denom, value=-step_size.to(p.dtype))


def _allow_recompiles() -> None:
    """Dynamo keeps 8 compilations per function by default; every model instance, shape and K is one, so a program
    that builds several (a benchmark, the tests) would otherwise fall back to eager without an error."""
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)


def _grad_total(grads):
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))


class CompiledStep:
    """The reference trainer's step for one model, compiled; `step()` does one update and returns its row.

    mode: torch.compile's mode for the model (None, "max-autotune-no-cudagraphs", ...). compile_update: compile
    the clipping and AdamW update too (else they run eagerly in the same formula). The model starts from the
    seed's weights and the data generator from the seed, as normlab.gpt.train.train."""

    def __init__(
        self,
        mcfg: GPTConfig,
        tcfg: TrainConfig,
        corpus: Corpus,
        *,
        mode: str | None = None,
        compile_model: bool = True,
        compile_update: bool = True,
        dtype: torch.dtype = torch.float32,
    ):
        if tcfg.device != "cpu":
            raise ValueError(f"CompiledStep runs on CPU, got device={tcfg.device!r}")
        corpus.check_context(mcfg.context)
        self.mcfg, self.tcfg, self.corpus = mcfg, tcfg, corpus
        torch.manual_seed(tcfg.seed)
        # auto's CPU RMSNorm (the hand-written kernel, a ctypes call) cannot be traced: the check that picks it
        # breaks the graph at every norm. The compiled backend's math is traced into the one graph instead; the
        # backend draws nothing at initialisation, so the weights are the reference's.
        has_rms = "rms" in (mcfg.norm, mcfg.final_kind) or mcfg.qk_norm
        self.compiled_norm_backend = mcfg.norm_backend in ("auto", "cpp") and has_rms and compile_model
        built = replace(mcfg, norm_backend="compile") if self.compiled_norm_backend else mcfg
        self.model = GPT(built).to(dtype).train()
        self.data_rng = torch.Generator().manual_seed(tcfg.seed)
        self.params, self.decays = [], []
        for group in parameter_groups(self.model, tcfg):
            self.params += group["params"]
            self.decays += [float(group["weight_decay"])] * len(group["params"])
        self.exp_avgs = [torch.zeros_like(p) for p in self.params]
        self.exp_avg_sqs = [torch.zeros_like(p) for p in self.params]
        if compile_model or compile_update:
            _allow_recompiles()
        self.forward = torch.compile(self.model, mode=mode, dynamic=False) if compile_model else self.model
        self.update = torch.compile(_clip_and_adamw, dynamic=False) if compile_update else _clip_and_adamw
        self.step_count = 0
        self.diverged = False

    def step(self, record: bool = False) -> dict:
        tcfg = self.tcfg
        lr = learning_rate(self.step_count + 1, tcfg)
        x, y = self.corpus.batch("train", tcfg.batch_size, self.mcfg.context, self.data_rng)
        for p in self.params:
            p.grad = None
        _, loss = self.forward(x, y)
        loss_value = float(loss.detach())
        row = {"step": self.step_count + 1, "loss": loss_value, "lr": lr}
        self.step_count += 1
        if not math.isfinite(loss_value):
            self.diverged = True
            return row
        loss.backward()
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        if record:
            row.update(gradient_norms(self.model))
        t = self.step_count
        beta1, beta2 = tcfg.betas
        if not math.isfinite(float(_grad_total(grads))):  # the reference skips the update and stops
            self.diverged = True
            return row
        f64 = lambda v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
        with torch.no_grad():
            total = self.update(
                self.params,
                grads,
                self.exp_avgs,
                self.exp_avg_sqs,
                self.decays,
                f64(lr),
                f64(lr / (1 - beta1**t)),
                f64((1 - beta2**t) ** 0.5),
                tcfg.grad_clip if tcfg.grad_clip > 0 else math.inf,
                beta1,
                beta2,
                1e-8,
            )
        row["grad_norm/total"] = float(total)
        if record:
            row.update(gain_l2_norms(self.model))
        return row


def train_compiled(mcfg: GPTConfig, tcfg: TrainConfig, corpus: Corpus, *, on_step=None) -> TrainResult:
    """`normlab.gpt.train.train` with TrainConfig(step="compiled"): the same schedule, batches, measurements and
    result, each update done by `CompiledStep` (per-layer gradient and gain norms recorded every step, as the
    reference records them; its step_time includes recording them, which the reference's leaves out). Validation
    and the residual-stream statistics run on the eager model, which shares the compiled model's parameters."""
    fast = CompiledStep(mcfg, tcfg, corpus)
    eval_batches = _eval_batches(corpus, mcfg, tcfg)
    probe = eval_batches[0][0]
    history, val, stream = [], [], []

    def measure(step: int, last: bool) -> bool:
        """Validation and stream statistics when due; False where the validation loss is not finite."""
        finite = True
        if step == 0 or last or (tcfg.eval_every and step % tcfg.eval_every == 0):
            val.append({"step": step, "val_loss": evaluate(fast.model, eval_batches)})
            finite = math.isfinite(val[-1]["val_loss"])
        if step == 0 or last or (tcfg.stream_every and step % tcfg.stream_every == 0):
            stream.extend(measure_stream(fast.model, probe, step))
        return finite

    measure(0, tcfg.steps == 0)
    progress = None
    if tcfg.progress:
        progress = terminal_progress(
            total=tcfg.steps, desc=f"{mcfg.norm}-{mcfg.placement} seed {tcfg.seed}", leave=False
        )
    interrupted = False
    try:
        while fast.step_count < tcfg.steps and not fast.diverged:
            if tcfg.interrupt_after is not None and fast.step_count >= tcfg.interrupt_after:
                interrupted = True
                break
            started = time.perf_counter()
            row = fast.step(record=True)
            row["step_time"] = time.perf_counter() - started if not fast.diverged else math.nan
            history.append(row)
            if fast.diverged:
                break
            if on_step is not None:
                on_step(row)
            if progress is not None:
                progress.update(1)
                progress.set_postfix(loss=f"{row['loss']:.3f}")
            if not measure(fast.step_count, fast.step_count == tcfg.steps):
                fast.diverged = True
    finally:
        if progress is not None:
            progress.close()
    return TrainResult(
        model=fast.model,
        history_rows=history,
        val_rows=val,
        stream_rows=stream,
        corpus_sha256=corpus.sha256,
        diverged=fast.diverged,
        steps_done=fast.step_count,
        model_config=mcfg.to_dict(),
        train_config=tcfg.to_dict(),
        interrupted=interrupted,
    )


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
