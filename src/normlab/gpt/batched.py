"""Many GPTs trained as one: K independent models in one process, stacked with torch.func and vmap.

`train_batched(model_configs, train_config, corpus, seeds)` trains member k as
`train(model_configs[k], replace(train_config, seed=seeds[k]), corpus)` would:
the same initial weights (global RNG seeded by the member's seed, then
`GPT(config)`), the same batches (a data generator of its own, seeded the
same way), the same validation batches, learning-rate schedule, AdamW
parameter groups and per-model gradient clipping. It returns one
`TrainResult` per member, so code that reads `train`'s results reads these.

How. Members whose configs are equal form a *stack*: their parameters are
stacked along a new leading dimension (`torch.func.stack_module_state`) and
one `vmap` of `functional_call` over a weightless copy of the model computes
every member's loss at once, so each matrix product is one batched product
over the K members. Members that differ only in norm-related fields (the norm
kind, placement, QK-norm, ...) are separate stacks trained in the same steps
by the same optimizer, so a RMSNorm/LayerNorm pair shares a batch. Shape
fields (width, depth, heads, context, ...) must agree across all members.
AdamW is elementwise, so one optimizer over the stacked tensors updates each
member exactly as its own optimizer would; clipping is computed per member.

What differs from `train`, and why:
- Numbers agree to float32 rounding, not bit for bit: the batched products,
  and the norm inside vmap, reduce in a different order (tests/test_batched.py
  states the tolerance).
- The norms run PyTorch's native ops inside vmap: normlab's cpp (ctypes),
  Triton and compiled kernels cannot be entered by vmap. norm_backend "auto"
  becomes "torch" for the training; "torch", "eager" and "reference" stay;
  "cpp", "triton" and "compile" are refused. The trained models that come
  back carry the configs as given.
- `step_time` is the time of one step of all K members together.
- No dropout (vmap would draw one random stream for all members, not each
  member's own), no checkpoints, no torch.distributed.
- Residual-stream statistics are measured on each member's own model, on the
  CPU, from the current weights; the returned models live on the CPU, so K of
  them never hold device memory.

Before anything is built, the memory K members need (parameters, gradients,
AdamW moments, the activations of a step) is compared with what the device
has free, and too many members are refused with the largest K that fits.
"""

from __future__ import annotations

import math
import os
import statistics
import time
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from torch.func import functional_call, stack_module_state, vmap

from normlab.gpt.corpus import Corpus
from normlab.gpt.model import GPT, GPTConfig
from normlab.gpt.train import (
    TrainConfig,
    TrainResult,
    _check_run,
    _eval_batches,
    _part_of,
    learning_rate,
    measure_stream,
    parameter_groups,
)
from normlab.runtime.progress import terminal_progress

# The backend each member's norms run inside vmap: only pure PyTorch ops can be batched by it.
VMAP_BACKENDS = {"auto": "torch", "torch": "torch", "eager": "eager", "reference": "reference"}
# Fields that fix the shapes of the batches and of every weight matrix: all members must agree on them.
SHAPE_FIELDS = ("vocab_size", "context", "width", "depth", "heads", "mlp", "positions", "tie_embeddings")
# TrainConfig fields the batched trainer cannot honour, with the value it needs and the reason.
_UNSUPPORTED_TRAIN = {
    "checkpoint_path": (None, "the batched trainer writes no checkpoints; train() checkpoints one model"),
    "interrupt_after": (None, "the batched trainer cannot be interrupted and resumed; train() can"),
}
# Of the device's free memory, the share K members may plan to use: the rest is left to the allocator's
# fragmentation and to whatever else runs there. A judgement, not a measurement.
USABLE_SHARE = 0.9
# The backward's transient buffers (activation gradients, the logits' gradient) on top of what autograd
# saves in the forward. A judgement, not a measurement: check it against the peak on the GPU.
ACTIVATION_MARGIN = 1.5
# CPU SDPA has no vmap batching rule: vmap loops over the members for that one op. Correct, only slower.
_SDPA_FALLBACK = "There is a performance drop because we have not yet implemented the batching rule"


class ModelsDoNotFit(MemoryError):
    """K members need more memory than the device has free."""


# ---- input checks -----------------------------------------------------------------------------------


def _members(model_configs, seeds) -> list[tuple[GPTConfig, int]]:
    """(config, seed) per member, checked: at least one, one seed per config, stackable configs."""
    if isinstance(seeds, int) or not hasattr(seeds, "__len__"):
        raise TypeError(f"seeds must be a list of ints, one per model, got {seeds!r}")
    seeds = list(seeds)
    configs = [model_configs] * len(seeds) if isinstance(model_configs, GPTConfig) else list(model_configs)
    if not seeds or not configs:
        raise ValueError(
            f"K={min(len(seeds), len(configs))} models asked for: give at least one seed (and one GPTConfig per "
            f"seed, or a single GPTConfig for all)"
        )
    if len(configs) != len(seeds):
        raise ValueError(
            f"{len(configs)} model configs but {len(seeds)} seeds: give one seed per config "
            f"(or a single GPTConfig, which every seed then trains)"
        )
    for k, (cfg, seed) in enumerate(zip(configs, seeds)):
        if not isinstance(cfg, GPTConfig):
            raise TypeError(f"model config {k} is a {type(cfg).__name__}, not a GPTConfig")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"seed {k} must be an int >= 0, got {seed!r}")
        if cfg.norm_backend not in VMAP_BACKENDS:
            raise ValueError(
                f"model config {k} has norm_backend={cfg.norm_backend!r}, whose kernels torch.func.vmap cannot "
                f"enter; use norm_backend='auto' (PyTorch's native norm inside vmap) or one of "
                f"{', '.join(map(repr, VMAP_BACKENDS))}"
            )
        if cfg.dropout:
            raise ValueError(
                f"model config {k} has dropout={cfg.dropout}: under vmap the members would not draw their own "
                f"dropout masks as train() does; set dropout=0.0, or train it alone with train()"
            )
        for name in SHAPE_FIELDS:
            if getattr(cfg, name) != getattr(configs[0], name):
                raise ValueError(
                    f"model configs 0 and {k} differ in {name} ({getattr(configs[0], name)!r} vs "
                    f"{getattr(cfg, name)!r}): models of different shapes cannot be stacked; train each shape "
                    f"in its own train_batched call"
                )
    return list(zip(configs, seeds))


def _check_train_config(tcfg: TrainConfig) -> None:
    if not isinstance(tcfg, TrainConfig):
        raise TypeError(f"train_config must be a TrainConfig, got {type(tcfg).__name__}")
    for name, (needed, reason) in _UNSUPPORTED_TRAIN.items():
        if getattr(tcfg, name) != needed:
            raise ValueError(f"TrainConfig.{name}={getattr(tcfg, name)!r} is not supported: {reason}")


def _key(cfg: GPTConfig) -> tuple:
    return tuple(cfg.to_dict().items())


def _vmap_config(cfg: GPTConfig) -> GPTConfig:
    return replace(cfg, norm_backend=VMAP_BACKENDS[cfg.norm_backend])


# ---- memory -----------------------------------------------------------------------------------------


@dataclass
class MemoryPlan:
    """Bytes one member needs, by part, against the bytes usable on the device."""

    per_member: dict[str, int]  # parameters, gradients, adamw_moments, activations[, host_copy]
    members: int
    usable: int  # USABLE_SHARE of the free memory
    free: int
    where: str  # "cuda:0 (torch.cuda.mem_get_info)", "cpu (MemAvailable in /proc/meminfo)", "the given limit"

    @property
    def member_bytes(self) -> int:
        return sum(self.per_member.values())

    @property
    def needed(self) -> int:
        return self.members * self.member_bytes

    @property
    def largest_k(self) -> int:
        return self.usable // self.member_bytes

    @property
    def fits(self) -> bool:
        return self.needed <= self.usable


def free_memory(device: torch.device) -> tuple[int, str]:
    """Bytes free on `device` now, and where that number came from."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free), f"{device} (torch.cuda.mem_get_info)"
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024, "cpu (MemAvailable in /proc/meminfo)"
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "cpu (sysconf available pages)"


def _saved_activation_bytes(model: GPT, batch_size: int) -> int:
    """Bytes autograd keeps for the backward after one forward of `model` on a batch of full-context windows."""
    storages: dict[int, int] = {}

    def pack(t: torch.Tensor):
        storage = t.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return t

    idx = torch.zeros(batch_size, model.cfg.context, dtype=torch.long)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(idx, idx)
    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    return sum(size for ptr, size in storages.items() if ptr not in parameters)


def plan_memory(
    model_configs, train_config: TrainConfig, seeds, *, memory_limit_bytes: int | None = None
) -> MemoryPlan:
    """The memory K members need against what the device has free (or `memory_limit_bytes`, for tests).

    Per member: parameters, their gradients and AdamW's two moments (4 x the parameter bytes), and the
    activations of one training step (what autograd saves in one model's forward at the batch size,
    measured by running it once on the CPU, x ACTIVATION_MARGIN). On the CPU each member's own model is
    a fifth copy of its parameters, in the same memory."""
    _check_train_config(train_config)
    return _plan(_members(model_configs, seeds), train_config, memory_limit_bytes)


def _plan(
    members: list[tuple[GPTConfig, int]], train_config: TrainConfig, memory_limit_bytes: int | None
) -> MemoryPlan:
    device = torch.device(train_config.device)
    worst: dict[str, int] = {}
    for cfg in {_key(c): c for c, _ in members}.values():
        with torch.random.fork_rng(devices=[]):  # a model built to be measured draws nothing from the caller's RNG
            model = GPT(_vmap_config(cfg))
        param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        parts = {
            "parameters": param_bytes,
            "gradients": param_bytes,
            "adamw_moments": 2 * param_bytes,
            "activations": int(ACTIVATION_MARGIN * _saved_activation_bytes(model, train_config.batch_size)),
        }
        if device.type == "cpu":
            parts["host_copy"] = param_bytes
        if sum(parts.values()) > sum(worst.values()):
            worst = parts
    if memory_limit_bytes is not None:
        free, where = int(memory_limit_bytes), "the given memory_limit_bytes"
    else:
        free, where = free_memory(device)
    return MemoryPlan(per_member=worst, members=len(members), usable=int(USABLE_SHARE * free), free=free, where=where)


def _refuse_if_too_big(plan: MemoryPlan) -> None:
    if plan.fits:
        return
    gib = 2**30
    parts = ", ".join(f"{name} {size / gib:.3g}" for name, size in plan.per_member.items())
    raise ModelsDoNotFit(
        f"K={plan.members} models need about {plan.needed / gib:.3g} GiB ({plan.member_bytes / gib:.3g} GiB each: "
        f"{parts}), but {USABLE_SHARE:.0%} of the {plan.free / gib:.3g} GiB free on {plan.where} is "
        f"{plan.usable / gib:.3g} GiB; at most K={plan.largest_k} fit: train fewer models at once, in several calls"
    )


# ---- the stacks -------------------------------------------------------------------------------------


@dataclass
class _Stack:
    """Members with one config: their stacked parameters, the weightless model vmap calls, and each member's
    own model (on the CPU) for the stream statistics and the results."""

    indices: list[int]  # positions of these members in the caller's list
    base: GPT  # on the meta device: structure only, its norms on the vmap backend
    params: dict[str, torch.Tensor]  # name -> (members, *shape), leaves the optimizer updates
    buffers: dict[str, torch.Tensor]  # the same for every member (RoPE tables): not stacked
    models: list[GPT]
    group_of: dict[str, str]  # parameter name -> AdamW group name ("decay", "no_decay", "gains")
    gains: dict[str, str]  # norm module name -> its gain's parameter name

    def losses(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Each member's mean cross-entropy on its own batch: x and y are (members, batch, time)."""

        def loss(params, buffers, idx, targets):
            return functional_call(self.base, (params, buffers), (idx, targets))[1]

        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_SDPA_FALLBACK)
            return vmap(loss, in_dims=(0, None, 0, 0))(self.params, self.buffers, x, y)

    @torch.no_grad()
    def refresh_model(self, position: int) -> GPT:
        """Member `position`'s own model, holding its current weights."""
        model = self.models[position]
        for name, p in model.named_parameters():
            p.copy_(self.params[name][position])
        return model


def _build_stack(indices: list[int], members: list[tuple[GPTConfig, int]], tcfg: TrainConfig, device) -> _Stack:
    cfg = members[indices[0]][0]
    models = []
    for k in indices:
        torch.manual_seed(members[k][1])  # as train(): the seed, then the model
        models.append(GPT(cfg).train())
    params, _ = stack_module_state(models)
    params = {name: p.detach().to(device).requires_grad_() for name, p in params.items()}
    with torch.random.fork_rng(devices=[]):
        base = GPT(_vmap_config(cfg)).to("meta").train()
    groups = parameter_groups(models[0], tcfg)
    group_by_id = {id(p): group["name"] for group in groups for p in group["params"]}
    group_of = {name: group_by_id[id(p)] for name, p in models[0].named_parameters()}
    gains = {name: f"{name}.weight" for name, m in models[0].norms() if m.weight is not None}
    buffers = {name: b.to(device) for name, b in models[0].named_buffers()}
    return _Stack(list(indices), base, params, buffers, models, group_of, gains)


# ---- the loop ---------------------------------------------------------------------------------------


@dataclass
class _Member:
    """One member's state in the loop: its data generator, validation batches and tables."""

    seed: int
    data_rng: torch.Generator
    stream_probe: torch.Tensor  # on the CPU: the first validation batch's inputs
    history: list[dict] = field(default_factory=list)
    val: list[dict] = field(default_factory=list)
    stream: list[dict] = field(default_factory=list)
    step: int = 0
    diverged: bool = False
    frozen: dict[str, torch.Tensor] | None = None  # a diverged member's weights, kept through later updates


@dataclass
class BatchedTrainResult:
    runs: list[TrainResult]  # one per member, in the caller's order
    memory: MemoryPlan
    vmap_backends: list[str]  # the norm backend each member trained with inside vmap
    step_times: list[float]  # seconds per step of all members together

    def median_step_time(self, skip: int = 2) -> float:
        times = self.step_times[skip:] if len(self.step_times) > skip else self.step_times
        return float(statistics.median(times)) if times else math.nan


class _BatchedRun:
    def __init__(self, members, tcfg: TrainConfig, corpus: Corpus, device: torch.device, *, stream_statistics=True):
        self.tcfg, self.corpus, self.device = tcfg, corpus, device
        self.stream_statistics = stream_statistics
        self.cfg = members[0][0]
        by_config: dict[tuple, list[int]] = {}
        for k, (cfg, _) in enumerate(members):
            by_config.setdefault(_key(cfg), []).append(k)
        self.stacks = [_build_stack(indices, members, tcfg, device) for indices in by_config.values()]
        self.members: list[_Member] = []
        self.eval_x, self.eval_y = [], []
        for cfg, seed in members:
            own = replace(tcfg, seed=seed, device="cpu")
            batches = _eval_batches(corpus, cfg, own)
            self.eval_x.append(torch.stack([x for x, _ in batches]))  # (eval_batches, batch, time)
            self.eval_y.append(torch.stack([y for _, y in batches]))
            data_rng = torch.Generator().manual_seed(seed)
            self.members.append(_Member(seed=seed, data_rng=data_rng, stream_probe=batches[0][0]))
        self.eval_x = torch.stack(self.eval_x).to(device)  # (K, eval_batches, batch, time)
        self.eval_y = torch.stack(self.eval_y).to(device)
        groups: dict[str, list[torch.Tensor]] = {"decay": [], "no_decay": [], "gains": []}
        for stack in self.stacks:
            for name, p in stack.params.items():
                groups[stack.group_of[name]].append(p)
        decay = {"decay": tcfg.weight_decay, "no_decay": 0.0, "gains": tcfg.gain_weight_decay}
        self.optimizer = torch.optim.AdamW(
            [{"name": n, "params": ps, "weight_decay": decay[n]} for n, ps in groups.items()],
            lr=tcfg.lr,
            betas=tcfg.betas,
            # train() updates one tensor at a time; on a GPU that is a dozen kernel launches per stacked tensor per
            # step, which for deep stacks costs more than the training itself, so the multi-tensor path runs there
            # (the same elementwise formula; the CPU keeps train()'s path, which tests/test_batched.py compares)
            foreach=device.type == "cuda",
        )
        self.step_times: list[float] = []

    # -- per step

    def _train_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        cfg, tcfg = self.cfg, self.tcfg
        pairs = [self.corpus.batch("train", tcfg.batch_size, cfg.context, m.data_rng) for m in self.members]
        return torch.stack([x for x, _ in pairs]).to(self.device), torch.stack([y for _, y in pairs]).to(self.device)

    def step(self, step: int) -> None:
        """Update number `step` (1-based) for every member still training, its row appended to its history."""
        lr = learning_rate(step, self.tcfg)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        x, y = self._train_batch()
        started = time.perf_counter()
        losses = [stack.losses(x[stack.indices], y[stack.indices]) for stack in self.stacks]
        loss_values = torch.cat([loss.detach() for loss in losses]).tolist()
        order = [k for stack in self.stacks for k in stack.indices]
        loss_of = dict(zip(order, loss_values))
        self.optimizer.zero_grad(set_to_none=True)
        torch.stack([loss.sum() for loss in losses]).sum().backward()
        paused = time.perf_counter()
        layer_norms = self._gradient_norms()  # before clipping, as train() measures it
        measuring = time.perf_counter() - paused
        totals = self._clip()
        newly_diverged = []
        for k, member in enumerate(self.members):
            if member.diverged:
                continue
            row = {"step": step, "loss": loss_of[k], "lr": lr}
            if not math.isfinite(loss_of[k]):
                newly_diverged.append((k, {**row, "step_time": math.nan}))
            elif not math.isfinite(totals[k]):
                newly_diverged.append((k, {**row, "step_time": math.nan, "grad_norm/total": totals[k]}))
        for k, row in newly_diverged:  # train() skips a diverging model's update: keep its weights as they are now
            self._freeze(k)
            self.members[k].history.append(row)
            self.members[k].step += 1
        self.optimizer.step()
        self._restore_frozen()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        step_time = time.perf_counter() - started - measuring
        self.step_times.append(step_time)
        gain_norms = self._gain_norms()
        for k, member in enumerate(self.members):
            if member.diverged:
                continue
            row = {"step": step, "loss": loss_of[k], "lr": lr, "step_time": step_time, "grad_norm/total": totals[k]}
            row.update(layer_norms[k])
            row.update(gain_norms[k])
            member.history.append(row)
            member.step += 1

    def _per_member(self, stack: _Stack, values: torch.Tensor) -> dict[int, float]:
        return dict(zip(stack.indices, values.tolist()))

    @torch.no_grad()
    def _gradient_norms(self) -> list[dict[str, float]]:
        """Per member, the float64 L2 norm of each layer's gradient (train's grad_norm/<part>)."""
        out: list[dict[str, float]] = [{} for _ in self.members]
        for stack in self.stacks:
            squares: dict[str, torch.Tensor] = {}
            for name, p in stack.params.items():
                if p.grad is not None:
                    key = f"grad_norm/{_part_of(name)}"
                    square = p.grad.double().pow(2).reshape(len(stack.indices), -1).sum(dim=1)
                    squares[key] = squares[key] + square if key in squares else square
            for key, square in squares.items():
                for k, value in self._per_member(stack, square.sqrt()).items():
                    out[k][key] = value
        return out

    @torch.no_grad()
    def _clip(self) -> dict[int, float]:
        """Each member's gradients clipped to its own total norm, as nn.utils.clip_grad_norm_ does for one model;
        returns each member's total norm before clipping."""
        max_norm = self.tcfg.grad_clip if self.tcfg.grad_clip > 0 else math.inf
        totals: dict[int, float] = {}
        for stack in self.stacks:
            grads = [p.grad for p in stack.params.values() if p.grad is not None]
            members = len(stack.indices)
            norms = torch.stack([torch.linalg.vector_norm(g.reshape(members, -1), dim=1) for g in grads], dim=1)
            total = torch.linalg.vector_norm(norms, dim=1)
            coefficient = torch.clamp(max_norm / (total + 1e-6), max=1.0)
            for g in grads:
                g.mul_(coefficient.reshape(members, *([1] * (g.dim() - 1))))
            totals.update(self._per_member(stack, total))
        return totals

    @torch.no_grad()
    def _gain_norms(self) -> list[dict[str, float]]:
        out: list[dict[str, float]] = [{} for _ in self.members]
        for stack in self.stacks:
            for norm, name in stack.gains.items():
                values = stack.params[name].double().reshape(len(stack.indices), -1).norm(dim=1)
                for k, value in self._per_member(stack, values).items():
                    out[k][f"gain_norm/{norm}"] = value
        return out

    def _locate(self, k: int) -> tuple[_Stack, int]:
        for stack in self.stacks:
            if k in stack.indices:
                return stack, stack.indices.index(k)
        raise KeyError(k)

    @torch.no_grad()
    def _freeze(self, k: int) -> None:
        stack, position = self._locate(k)
        self.members[k].diverged = True
        self.members[k].frozen = {name: p[position].clone() for name, p in stack.params.items()}

    @torch.no_grad()
    def _restore_frozen(self) -> None:
        for k, member in enumerate(self.members):
            if member.frozen is not None:
                stack, position = self._locate(k)
                for name, value in member.frozen.items():
                    stack.params[name][position] = value

    # -- measurements

    @torch.no_grad()
    def validation_losses(self) -> dict[int, float]:
        """Each member's mean loss over its validation batches, summed in train()'s order."""
        sums: dict[int, list[float]] = {k: [] for k in range(len(self.members))}
        for stack in self.stacks:
            stack.base.eval()
            ex, ey = self.eval_x[stack.indices], self.eval_y[stack.indices]
            for j in range(ex.shape[1]):
                for k, value in self._per_member(stack, stack.losses(ex[:, j], ey[:, j])).items():
                    sums[k].append(value)
            stack.base.train()
        return {k: sum(values) / len(values) for k, values in sums.items()}

    def record_validation(self, *, may_diverge: bool = True) -> None:
        """Each training member's validation loss; a non-finite one stops the member (train() does not check
        the loss at step 0)."""
        for k, value in self.validation_losses().items():
            member = self.members[k]
            if member.diverged:
                continue
            member.val.append({"step": member.step, "val_loss": value})
            if may_diverge and not math.isfinite(value):
                self._freeze(k)

    def record_stream(self, members: list[int]) -> None:
        for k in members:
            stack, position = self._locate(k)
            member = self.members[k]
            member.stream.extend(measure_stream(stack.refresh_model(position), member.stream_probe, member.step))

    def training(self) -> list[int]:
        return [k for k, member in enumerate(self.members) if not member.diverged]

    def measure_when_due(self, step: int) -> None:
        """As train(): validation every eval_every steps, stream statistics every stream_every, both at the end.
        A member whose validation loss turns non-finite here still has its stream measured, as in train()."""
        tcfg = self.tcfg
        last = step == tcfg.steps
        training = self.training()
        if last or (tcfg.eval_every and step % tcfg.eval_every == 0):
            self.record_validation()
        if self.stream_statistics and (last or (tcfg.stream_every and step % tcfg.stream_every == 0)):
            self.record_stream(training)

    def results(self, members) -> list[TrainResult]:
        out = []
        for k, ((cfg, seed), member) in enumerate(zip(members, self.members)):
            stack, position = self._locate(k)
            out.append(
                TrainResult(
                    model=stack.refresh_model(position),
                    history_rows=list(member.history),
                    val_rows=list(member.val),
                    stream_rows=list(member.stream),
                    corpus_sha256=self.corpus.sha256,
                    diverged=member.diverged,
                    steps_done=member.step,
                    model_config=cfg.to_dict(),
                    train_config=replace(self.tcfg, seed=seed).to_dict(),
                )
            )
        return out


def train_batched(
    model_configs: GPTConfig | list[GPTConfig],
    train_config: TrainConfig,
    corpus: Corpus,
    seeds: list[int],
    *,
    memory_limit_bytes: int | None = None,
    stream_statistics: bool = True,
) -> BatchedTrainResult:
    """Train K = len(seeds) models at once, member k as train(model_configs[k], train_config with seed
    seeds[k], corpus) would. A single GPTConfig is used for every seed. train_config.seed is not used.

    `memory_limit_bytes` replaces the device's free memory in the check made before training (for tests,
    or to leave room for other work). Raises ModelsDoNotFit, with the largest K that fits, when K members
    would not. `stream_statistics=False` skips the residual-stream statistics (measured on the CPU, member by
    member: for many large members they cost more than a short training)."""
    members = _members(model_configs, seeds)
    _check_train_config(train_config)
    for cfg in {_key(c): c for c, _ in members}.values():
        device, _, world = _check_run(cfg, train_config, corpus)
        if world > 1:
            raise ValueError("train_batched runs in one process; under torch.distributed use train() per model")
    plan = _plan(members, train_config, memory_limit_bytes)
    _refuse_if_too_big(plan)
    tcfg = train_config
    run = _BatchedRun(members, tcfg, corpus, device, stream_statistics=stream_statistics)
    run.record_validation(may_diverge=False)
    if stream_statistics:
        run.record_stream(run.training())
    progress = None
    if tcfg.progress:
        progress = terminal_progress(total=tcfg.steps, desc=f"{len(members)} models as one", leave=False)
    try:
        for step in range(1, tcfg.steps + 1):
            if all(m.diverged for m in run.members):
                break
            run.step(step)
            run.measure_when_due(step)
            if progress is not None:
                progress.update(1)
    finally:
        if progress is not None:
            progress.close()
    return BatchedTrainResult(
        runs=run.results(members),
        memory=plan,
        vmap_backends=[VMAP_BACKENDS[cfg.norm_backend] for cfg, _ in members],
        step_times=run.step_times,
    )


def paired_members(config: GPTConfig, seeds: list[int], norms=("layer", "rms")) -> tuple[list[GPTConfig], list[int]]:
    """(configs, seeds) for a paired study: every seed once per norm, the norm varying fastest."""
    configs, member_seeds = [], []
    for seed in seeds:
        for norm in norms:
            configs.append(replace(config, norm=norm))
            member_seeds.append(seed)
    return configs, member_seeds
