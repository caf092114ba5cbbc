"""The training loop: AdamW, warm-up then cosine, clipping, validation and measurements.

`train(model_config, train_config, corpus)` builds a GPT from a seed, trains it
on random windows of the corpus and returns a `TrainResult` whose tables are
tidy (one row per step for `history`, one per evaluation for `val`, one per
layer and measurement for `stream`). They are kept as plain rows and become
DataFrames only when asked for, so training needs torch alone (a GPU machine
without pandas trains and reads the rows).

Reproducibility: the seed fixes the initial weights (global torch RNG) and the
data order (a dedicated generator); validation always uses the same batches.
A checkpoint holds everything that state depends on (weights, optimizer
moments, both RNG states, the step, and the tables so far), so a run resumed
from it continues with no lost or repeated step and the same numbers. The
learning-rate schedule is a pure function of the step, so the step is all
the scheduler state there is.

A diverging run (non-finite loss or gradient) stops early with `diverged=True`
instead of raising: learning-rate sweeps expect some runs to blow up.
"""

from __future__ import annotations

import hashlib
import io
import math
import os
import statistics
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
from torch import nn

from normlab.gpt.corpus import Corpus
from normlab.gpt.model import GPT, GPTConfig
from normlab.gpt.residual_stream import stream_statistics
from normlab.runtime.interleaved import time_interleaved
from normlab.runtime.progress import terminal_progress

CHECKPOINT_MAGIC = b"normlab-checkpoint-v1\n"
# Fields that do not change the numbers a run produces, so a resumed run may differ in them.
_RESUME_FREE_FIELDS = ("progress", "checkpoint_path", "checkpoint_every", "interrupt_after", "device")
WEIGHT_DECAY_ON = ("matrices", "all")
# Which norms' gains gain_weight_decay applies to (parameter_groups; the others' gains get none): "all", every norm's;
# "input", only the norms whose output a block's attention or MLP reads (norm1/norm2 in pre-LN and Peri-LN); "output",
# only the norms on a sublayer's output (Peri-LN's post_norm1/post_norm2, post-sublayer's norm1/norm2). The final
# norm and QK-norm are neither. Wang et al. 2026 (arXiv 2605.26895) separate the two kinds; claim V5 tests them.
GAIN_DECAY_ON = ("all", "input", "output")
# How an update is computed. "reference": this module's eager step (what every registered design before 2026-12-05
# trained with); "compiled": CompiledStep below, the same update with the model and the clipping
# and AdamW compiled (issue 45: 1.2-1.7x the model-steps per second here, floats equal to the reference's to
# rounding, tests/test_fast_step.py), for designs registered with it (data/design.toml's `trainer`).
STEPS = ("reference", "compiled")


@dataclass
class TrainConfig:
    steps: int = 200
    batch_size: int = 16
    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 20
    weight_decay: float = 0.1
    gain_weight_decay: float = 0.0
    # "matrices": weight_decay on weight matrices only (see parameter_groups); "all": weight_decay on every
    # parameter, as the DyT authors' LLaMA code does. `to_dict` writes it only when it is not "matrices".
    weight_decay_on: str = "matrices"
    gain_decay_on: str = "all"  # one of GAIN_DECAY_ON; `to_dict` writes it only when it is not "all"
    grad_clip: float = 1.0  # 0 disables clipping
    eval_every: int = 50  # 0: evaluate only at the start and the end
    eval_batches: int = 8
    stream_every: int = 50  # 0: residual-stream statistics only at the start and the end
    seed: int = 0
    checkpoint_path: str | None = None
    checkpoint_every: int = 0  # 0: write the checkpoint only at the end (if a path is set)
    progress: bool = True
    device: str = "cpu"
    betas: tuple[float, float] = (0.9, 0.95)
    # Simulates an interruption: stop after this many steps in this call, checkpoint written.
    interrupt_after: int | None = None
    step: str = "reference"  # one of STEPS

    def __post_init__(self):
        def need(ok: bool, message: str) -> None:
            if not ok:
                raise ValueError(f"TrainConfig: {message}")

        def is_int(v) -> bool:
            return isinstance(v, int) and not isinstance(v, bool)

        def is_real(v) -> bool:
            return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

        need(is_int(self.steps) and self.steps > 0, f"steps must be a positive int, got {self.steps!r}")
        need(
            is_int(self.batch_size) and self.batch_size > 0,
            f"batch_size must be a positive int, got {self.batch_size!r}",
        )
        need(is_real(self.lr) and self.lr > 0, f"lr must be a positive finite number, got {self.lr!r}")
        need(
            is_real(self.min_lr_ratio) and 0 <= self.min_lr_ratio <= 1,
            f"min_lr_ratio must be in [0, 1], got {self.min_lr_ratio!r}",
        )
        need(
            is_int(self.warmup_steps) and 0 <= self.warmup_steps <= self.steps,
            f"warmup_steps must be an int in [0, steps={self.steps}], got {self.warmup_steps!r}",
        )
        for name in ("weight_decay", "gain_weight_decay", "grad_clip"):
            value = getattr(self, name)
            need(is_real(value) and value >= 0, f"{name} must be a finite number >= 0, got {value!r}")
        need(
            self.weight_decay_on in WEIGHT_DECAY_ON,
            f"weight_decay_on must be one of {', '.join(map(repr, WEIGHT_DECAY_ON))}, got {self.weight_decay_on!r}",
        )
        need(
            self.weight_decay_on != "all" or self.gain_weight_decay == 0,
            f"weight_decay_on='all' puts weight_decay on every parameter, gains included, so gain_weight_decay="
            f"{self.gain_weight_decay!r} would contradict it; leave gain_weight_decay at 0 or use 'matrices'",
        )
        need(
            self.gain_decay_on in GAIN_DECAY_ON,
            f"gain_decay_on must be one of {', '.join(map(repr, GAIN_DECAY_ON))}, got {self.gain_decay_on!r}",
        )
        need(
            self.gain_decay_on == "all" or (self.gain_weight_decay > 0 and self.weight_decay_on == "matrices"),
            f"gain_decay_on={self.gain_decay_on!r} chooses which gains gain_weight_decay applies to, so it needs "
            f"gain_weight_decay > 0 and weight_decay_on='matrices'; got gain_weight_decay={self.gain_weight_decay!r}, "
            f"weight_decay_on={self.weight_decay_on!r}",
        )
        for name in ("eval_every", "stream_every", "checkpoint_every", "seed"):
            value = getattr(self, name)
            need(is_int(value) and value >= 0, f"{name} must be an int >= 0, got {value!r}")
        need(
            is_int(self.eval_batches) and self.eval_batches > 0,
            f"eval_batches must be a positive int, got {self.eval_batches!r}",
        )
        need(
            self.interrupt_after is None or (is_int(self.interrupt_after) and self.interrupt_after > 0),
            f"interrupt_after must be None or a positive int, got {self.interrupt_after!r}",
        )
        need(
            len(self.betas) == 2 and all(is_real(b) and 0 <= b < 1 for b in self.betas),
            f"betas must be two numbers in [0, 1), got {self.betas!r}",
        )
        self.betas = tuple(float(b) for b in self.betas)
        need(
            self.device == "cpu" or str(self.device).startswith("cuda"),
            f"device must be 'cpu' or 'cuda[:n]', got {self.device!r}",
        )
        need(self.step in STEPS, f"step must be one of {', '.join(map(repr, STEPS))}, got {self.step!r}")
        need(
            self.step == "reference" or (self.device == "cpu" and self.checkpoint_path is None),
            f"step={self.step!r} trains on the CPU without checkpoints (its optimiser state is its own, not "
            f"torch.optim's); got device={self.device!r}, checkpoint_path={self.checkpoint_path!r}: use "
            "step='reference' for a resumable or GPU run",
        )

    def to_dict(self) -> dict:
        """The fields as a dict; weight_decay_on, gain_decay_on and step only when they are not the default, so a run
        that does not use them serialises and checkpoints exactly as before the options existed."""
        out = asdict(self)
        for name, default in (("weight_decay_on", "matrices"), ("gain_decay_on", "all"), ("step", "reference")):
            if out[name] == default:
                del out[name]
        return out


def frame(rows: list[dict], columns: list[str] | None = None):
    """A pandas DataFrame of `rows`; pandas is imported here only, so training itself needs torch alone."""
    try:
        import pandas as pd
    except ImportError as error:
        raise ImportError(
            f"a training history as a table needs pandas ({error}); install the testbed's extra with "
            f'`pip install "normlab[gpt]"`, or read the plain rows (TrainResult.history_rows, val_rows, stream_rows)'
        ) from error
    return pd.DataFrame(rows, columns=columns)


@dataclass
class TrainResult:
    """One run's outcome. The records are plain rows (lists of dicts), so a torch-only machine can train and
    read them; `history`, `val` and `stream` give them as DataFrames where pandas is installed."""

    model: GPT
    history_rows: list[dict]  # one row per step: step, loss, lr, step_time, grad_norm/<part>, gain_norm/<norm>
    val_rows: list[dict]  # step, val_loss
    stream_rows: list[dict]  # step, layer and the statistics of residual.layer_statistics
    corpus_sha256: str
    diverged: bool
    steps_done: int
    model_config: dict = field(default_factory=dict)
    train_config: dict = field(default_factory=dict)
    interrupted: bool = False

    @property
    def history(self):
        return frame(self.history_rows)

    @property
    def val(self):
        return frame(self.val_rows, columns=["step", "val_loss"])

    @property
    def stream(self):
        return frame(self.stream_rows)

    @property
    def final_val_loss(self) -> float:
        return float(self.val_rows[-1]["val_loss"]) if self.val_rows else math.nan

    def median_step_time(self, skip: int = 2) -> float:
        """Median seconds per step, skipping the first steps (allocator and kernel warm-up); NaN steps (a
        diverging step) are left out, as pandas' median leaves them out."""
        times = [row.get("step_time", math.nan) for row in self.history_rows]
        times = times[skip:] if len(times) > skip else times
        times = [t for t in times if isinstance(t, (int, float)) and math.isfinite(t)]
        return float(statistics.median(times)) if times else math.nan


def learning_rate(step: int, cfg: TrainConfig) -> float:
    """Learning rate for update number `step` (1-based): linear warm-up, then cosine down to min_lr_ratio*lr."""
    if cfg.warmup_steps and step <= cfg.warmup_steps:
        return cfg.lr * step / cfg.warmup_steps
    decay_steps = max(cfg.steps - cfg.warmup_steps, 1)
    progress = min(max(step - cfg.warmup_steps, 0) / decay_steps, 1.0)
    floor = cfg.lr * cfg.min_lr_ratio
    return floor + (cfg.lr - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def norm_role(name: str, placement: str) -> str | None:
    """The role "input" for a norm whose output a block's attention or MLP reads, "output" for a norm on a
    sublayer's output, None for any other (the final norm, QK-norm, post-LN's norms on the trunk): GAIN_DECAY_ON's two kinds."""
    last = name.rsplit(".", 1)[-1]
    if last in ("post_norm1", "post_norm2"):
        return "output"
    if name.startswith("blocks.") and last in ("norm1", "norm2"):
        return {"pre": "input", "peri": "input", "post-sublayer": "output"}.get(placement)
    return None


def parameter_groups(model: GPT, cfg: TrainConfig) -> list[dict]:
    """AdamW groups: weight decay on weight matrices; none on embeddings or biases; norm gains get
    their own coefficient (gain_weight_decay), since decay on a scale-invariant layer's gain acts as
    a learning-rate schedule (B15); with gain_decay_on "input" or "output", only that kind of norm's gains
    (`norm_role`) get it and the other gains none. With weight_decay_on="all", one group: weight_decay on every
    parameter (the DyT authors' AdamW over model.parameters(), their main_training_llama.py)."""
    if cfg.weight_decay_on == "all":
        return [{"name": "decay", "params": list(model.parameters()), "weight_decay": cfg.weight_decay}]
    chosen = [
        m.weight
        for name, m in model.norms()
        if m.weight is not None and cfg.gain_decay_on in ("all", norm_role(name, model.cfg.placement))
    ]
    if not chosen and cfg.gain_decay_on != "all":
        raise ValueError(
            f"gain_decay_on={cfg.gain_decay_on!r}: this model (placement={model.cfg.placement!r}) has no norm of that "
            "kind with a gain; 'input' needs placement 'pre' or 'peri', 'output' needs 'peri' or 'post-sublayer' "
            "(normlab.gpt.train.norm_role)"
        )
    gains = {id(m.weight) for _, m in model.norms() if m.weight is not None}
    decayed_gains = {id(p) for p in chosen}
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    decay, no_decay, gain = [], [], []
    for _, p in model.named_parameters():
        if id(p) in decayed_gains:
            gain.append(p)
        elif id(p) in gains:  # a gain gain_decay_on leaves out: no decay
            no_decay.append(p)
        elif p.dim() >= 2 and id(p) not in embeddings:
            decay.append(p)
        else:
            no_decay.append(p)
    return [
        {"name": "decay", "params": decay, "weight_decay": cfg.weight_decay},
        {"name": "no_decay", "params": no_decay, "weight_decay": 0.0},
        {"name": "gains", "params": gain, "weight_decay": cfg.gain_weight_decay},
    ]


def _part_of(name: str) -> str:
    """The layer a parameter belongs to: blocks.<i>, or the top-level module (token_embedding, lm_head...)."""
    pieces = name.split(".")
    return ".".join(pieces[:2]) if pieces[0] == "blocks" else pieces[0]


def gradient_norms(model: GPT) -> dict[str, float]:
    """Each layer's gradient norm, accumulated in float64. One norm kernel per parameter and a single read-back:
    at the study's small sizes the per-parameter square-sum-convert chain cost a fifth of a step."""
    parts, grads = [], []
    for name, p in model.named_parameters():
        if p.grad is not None:
            parts.append(f"grad_norm/{_part_of(name)}")
            grads.append(p.grad.detach())
    if not grads:
        return {}
    norms = torch.stack([torch.linalg.vector_norm(g, dtype=torch.float64) for g in grads]).tolist()
    squares: dict[str, float] = {}
    for key, norm in zip(parts, norms):
        squares[key] = squares.get(key, 0.0) + norm * norm
    return {k: math.sqrt(v) for k, v in squares.items()}


def gain_l2_norms(model: GPT) -> dict[str, float]:
    named = [(name, m.weight.detach()) for name, m in model.norms() if m.weight is not None]
    if not named:
        return {}
    norms = torch.stack([torch.linalg.vector_norm(w, dtype=torch.float64) for _, w in named]).tolist()
    return {f"gain_norm/{name}": norm for (name, _), norm in zip(named, norms)}


def _eval_batches(corpus: Corpus, mcfg: GPTConfig, tcfg: TrainConfig) -> list:
    # A generator of its own, seeded apart from training: the same windows at every evaluation and in every run.
    generator = torch.Generator().manual_seed(10_000 + tcfg.seed)
    return [
        corpus.batch("val", tcfg.batch_size, mcfg.context, generator, tcfg.device) for _ in range(tcfg.eval_batches)
    ]


@torch.no_grad()
def evaluate(model: GPT, batches) -> float:
    was_training = model.training
    model.eval()
    losses = [float(model(x, y)[1]) for x, y in batches]
    model.train(was_training)
    return sum(losses) / len(losses)


@torch.no_grad()
def measure_stream(model: GPT, x: torch.Tensor, step: int) -> list[dict]:
    was_training = model.training
    model.eval()
    with model.capture_residual_stream() as stream:
        model(x)
    model.train(was_training)
    return [{"step": step, **record} for record in stream_statistics(stream)]


# ---- checkpoints -------------------------------------------------------------------------------------


def _comparable(train_config: dict) -> dict:
    return {
        k: (list(v) if isinstance(v, tuple) else v) for k, v in train_config.items() if k not in _RESUME_FREE_FIELDS
    }


def save_checkpoint(path: str | Path, state: dict) -> None:
    """Write atomically (temp file, then rename) with a SHA-256 of the payload, so a torn or
    altered file is detected on load instead of being half-trusted."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    payload = buffer.getvalue()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(CHECKPOINT_MAGIC + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload)
    os.replace(tmp, path)


def load_checkpoint(path: str | Path) -> dict:
    path = Path(path)
    raw = path.read_bytes()
    if not raw.startswith(CHECKPOINT_MAGIC):
        raise ValueError(
            f"checkpoint {path} is corrupt or not a normlab checkpoint: its header is not {CHECKPOINT_MAGIC!r}"
        )
    rest = raw[len(CHECKPOINT_MAGIC) :]
    digest, _, payload = rest.partition(b"\n")
    if hashlib.sha256(payload).hexdigest().encode() != digest:
        raise ValueError(
            f"checkpoint {path} is corrupt: its contents do not match the SHA-256 stored in it (truncated or altered)"
        )
    try:
        return torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
    except Exception as error:  # a payload that hashes right but does not unpickle was written by something else
        raise ValueError(f"checkpoint {path} is corrupt: it cannot be read ({error})") from None


def check_checkpoint(state: dict, mcfg: GPTConfig, tcfg: TrainConfig, corpus: Corpus, path) -> None:
    """Refuse a checkpoint that was made for another model, run or corpus, naming what differs."""
    needed = (
        "model_config",
        "train_config",
        "corpus_sha256",
        "step",
        "model",
        "optimizer",
        "torch_rng",
        "data_rng",
        "history",
        "val",
        "stream",
        "diverged",
    )
    missing = [k for k in needed if k not in state]
    if missing:
        raise ValueError(f"checkpoint {path} is incomplete: it lacks {missing}")
    differences = []
    for label, saved, wanted in (
        ("model config", state["model_config"], mcfg.to_dict()),
        ("train config", _comparable(state["train_config"]), _comparable(tcfg.to_dict())),
    ):
        for key in sorted(set(saved) | set(wanted)):
            if saved.get(key) != wanted.get(key):
                differences.append(
                    f"{label} {key}: checkpoint has {saved.get(key)!r}, this run has {wanted.get(key)!r}"
                )
    if state["corpus_sha256"] != corpus.sha256:
        differences.append(f"corpus sha256: checkpoint has {state['corpus_sha256']}, this run has {corpus.sha256}")
    if differences:
        raise ValueError(f"checkpoint {path} does not match this run; refusing to resume. " + "; ".join(differences))
    if not 0 <= state["step"] <= tcfg.steps:
        raise ValueError(f"checkpoint {path} is at step {state['step']}, outside this run's 0..{tcfg.steps}")


# ---- the loop ----------------------------------------------------------------------------------------


@dataclass
class _Run:
    """A training run in progress: its settings and objects, fixed by the set-up, and the state the loop
    advances one step at a time (model, optimizer, data RNG, tables, step, divergence), which is what a
    checkpoint saves."""

    mcfg: GPTConfig
    tcfg: TrainConfig
    corpus: Corpus
    device: torch.device
    checkpoint_path: Path | None
    model: GPT
    optimizer: torch.optim.Optimizer | None  # None where `compiled` updates the model (its AdamW state is its own)
    data_rng: torch.Generator
    eval_batches: list
    stream_probe: torch.Tensor  # the first validation batch's inputs, for the residual-stream statistics
    history: list[dict] = field(default_factory=list)
    val: list[dict] = field(default_factory=list)
    stream: list[dict] = field(default_factory=list)
    step: int = 0
    diverged: bool = False
    compiled: CompiledStep | None = None  # TrainConfig(step="compiled"): the step that updates `model`


def _check_run(mcfg: GPTConfig, tcfg: TrainConfig, corpus: Corpus) -> torch.device:
    """Refuse settings that cannot train, before anything is built; returns the device."""
    if not isinstance(mcfg, GPTConfig) or not isinstance(tcfg, TrainConfig):
        raise TypeError("train(model_config, train_config, corpus) needs a GPTConfig and a TrainConfig")
    if mcfg.vocab_size < corpus.vocab_size:
        raise ValueError(
            f"GPTConfig.vocab_size={mcfg.vocab_size} is smaller than the corpus's {corpus.vocab_size} byte values"
        )
    corpus.check_context(mcfg.context)
    if tcfg.device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device {tcfg.device!r} asked for, but CUDA is not available; use device='cpu'")
    return torch.device(tcfg.device)


def _checkpoint_to_resume(mcfg: GPTConfig, tcfg: TrainConfig, corpus: Corpus) -> tuple[Path | None, dict | None]:
    """(checkpoint path, its state if the file exists), the state read and checked whole before any of it is used."""
    path = Path(tcfg.checkpoint_path) if tcfg.checkpoint_path else None
    if path is not None and path.is_dir():
        raise ValueError(
            f"checkpoint_path {str(path)!r} is a directory; give a file inside it, e.g. {str(path / 'checkpoint.pt')!r}"
        )
    if path is None or not path.exists():
        return path, None
    state = load_checkpoint(path)
    check_checkpoint(state, mcfg, tcfg, corpus, path)
    return path, state


def _resume(run: _Run, state: dict) -> None:
    """Continue from a checkpoint: weights, optimizer moments, both RNG states, the step and the tables."""
    try:
        run.model.load_state_dict(state["model"], strict=True)
        run.optimizer.load_state_dict(state["optimizer"])
    except (RuntimeError, ValueError, KeyError) as error:
        raise ValueError(f"checkpoint {run.checkpoint_path} does not fit this model: {error}") from None
    torch.set_rng_state(state["torch_rng"])
    if run.device.type == "cuda" and state.get("cuda_rng") is not None:
        torch.cuda.set_rng_state(state["cuda_rng"], run.device)
    run.data_rng.set_state(state["data_rng"])
    run.history, run.val, run.stream = list(state["history"]), list(state["val"]), list(state["stream"])
    run.step, run.diverged = int(state["step"]), bool(state["diverged"])


def _set_up(mcfg: GPTConfig, tcfg: TrainConfig, corpus: Corpus) -> _Run:
    """Model (from the seed), optimizer, data and validation batches; then either the checkpoint's state
    or the measurements at step 0."""
    device = _check_run(mcfg, tcfg, corpus)
    path, state = _checkpoint_to_resume(mcfg, tcfg, corpus)
    compiled = None
    if tcfg.step == "compiled":  # the same seed's weights and data order, updated by CompiledStep
        compiled = CompiledStep(mcfg, tcfg, corpus)
        model, optimizer, data_rng = compiled.model, None, compiled.data_rng
    else:
        torch.manual_seed(tcfg.seed)
        model = GPT(mcfg).to(device)
        groups = parameter_groups(model, tcfg)
        optimizer = torch.optim.AdamW(groups, lr=tcfg.lr, betas=tcfg.betas, foreach=False)
        data_rng = torch.Generator().manual_seed(tcfg.seed)
    eval_batches = _eval_batches(corpus, mcfg, tcfg)
    run = _Run(
        mcfg=mcfg,
        tcfg=tcfg,
        corpus=corpus,
        device=device,
        checkpoint_path=path,
        model=model,
        optimizer=optimizer,
        data_rng=data_rng,
        eval_batches=eval_batches,
        stream_probe=eval_batches[0][0],
        compiled=compiled,
    )
    if state is not None:
        _resume(run, state)
    else:
        _record_validation(run)
        _record_stream(run)
    return run


def _optimisation_step(run: _Run) -> dict:
    """One update (learning rate, batch, forward, backward, gradient norms, clipping, AdamW), its row
    appended to the history and returned. A non-finite loss or gradient marks the run diverged
    and skips the update."""
    if run.compiled is not None:
        return _compiled_step(run)
    mcfg, tcfg = run.mcfg, run.tcfg
    lr = learning_rate(run.step + 1, tcfg)
    for group in run.optimizer.param_groups:
        group["lr"] = lr
    x, y = run.corpus.batch("train", tcfg.batch_size, mcfg.context, run.data_rng, run.device)
    started = time.perf_counter()
    _, loss = run.model(x, y)
    loss_value = float(loss.detach())
    row = {"step": run.step + 1, "loss": loss_value, "lr": lr}
    if not math.isfinite(loss_value):
        return _mark_diverged(run, {**row, "step_time": math.nan})
    run.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    paused = time.perf_counter()
    layer_norms = gradient_norms(run.model)  # before clipping: what each layer's gradient really was
    measuring = time.perf_counter() - paused  # kept out of step_time, which times training alone
    total = nn.utils.clip_grad_norm_(run.model.parameters(), tcfg.grad_clip if tcfg.grad_clip > 0 else math.inf)
    if not math.isfinite(float(total)):
        return _mark_diverged(run, {**row, "step_time": math.nan, "grad_norm/total": float(total)})
    run.optimizer.step()
    if run.device.type == "cuda":
        torch.cuda.synchronize(run.device)
    row["step_time"] = time.perf_counter() - started - measuring
    row["grad_norm/total"] = float(total)
    row.update(layer_norms)
    row.update(gain_l2_norms(run.model))
    run.history.append(row)
    run.step += 1
    return row


def _compiled_step(run: _Run) -> dict:
    """One update by run.compiled, its row (per-layer gradient and gain norms included) kept as the reference's is;
    its step_time includes recording those norms, which the reference's leaves out."""
    started = time.perf_counter()
    row = run.compiled.step(record=True)
    if run.compiled.diverged:
        return _mark_diverged(run, {**row, "step_time": math.nan})
    row["step_time"] = time.perf_counter() - started
    run.history.append(row)
    run.step += 1
    return row


def _mark_diverged(run: _Run, row: dict) -> dict:
    run.diverged = True
    run.history.append(row)
    run.step += 1
    return row


def _record_validation(run: _Run) -> float:
    val_loss = evaluate(run.model, run.eval_batches)
    run.val.append({"step": run.step, "val_loss": val_loss})
    return val_loss


def _record_stream(run: _Run) -> None:
    run.stream.extend(measure_stream(run.model, run.stream_probe, run.step))


def _measure_when_due(run: _Run) -> None:
    """Validation loss every eval_every steps, residual-stream statistics every stream_every; both after
    the last step. A non-finite validation loss marks the run diverged."""
    tcfg, step = run.tcfg, run.step
    last = step == tcfg.steps
    if last or (tcfg.eval_every and step % tcfg.eval_every == 0):
        if not math.isfinite(_record_validation(run)):
            run.diverged = True
    if last or (tcfg.stream_every and step % tcfg.stream_every == 0):
        _record_stream(run)


def _write_checkpoint(run: _Run) -> None:
    """Everything the run's numbers depend on."""
    if run.checkpoint_path is None:
        return
    device = run.device
    save_checkpoint(
        run.checkpoint_path,
        {
            "model_config": run.mcfg.to_dict(),
            "train_config": run.tcfg.to_dict(),
            "corpus_sha256": run.corpus.sha256,
            "step": run.step,
            "diverged": run.diverged,
            "model": run.model.state_dict(),
            "optimizer": run.optimizer.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "data_rng": run.data_rng.get_state(),
            "cuda_rng": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
            "history": run.history,
            "val": run.val,
            "stream": run.stream,
        },
    )


def _result(run: _Run, interrupted: bool) -> TrainResult:
    return TrainResult(
        model=run.model,
        history_rows=list(run.history),
        val_rows=list(run.val),
        stream_rows=list(run.stream),
        corpus_sha256=run.corpus.sha256,
        diverged=run.diverged,
        steps_done=run.step,
        model_config=run.mcfg.to_dict(),
        train_config=run.tcfg.to_dict(),
        interrupted=interrupted,
    )


def train(model_config: GPTConfig, train_config: TrainConfig, corpus: Corpus, *, on_step=None) -> TrainResult:
    """Train one model in this process, or resume it from tcfg.checkpoint_path. `on_step(row, model)` is called
    after each step that did not diverge, before that step's validation; it must leave the model's weights, mode and
    the random state as it found them (a probe of the model between steps). Many models train as jobs of
    `normlab.runtime.parallel.run_parallel` (this machine's pool, or a Dask cluster), each calling this."""
    mcfg, tcfg = model_config, train_config
    run = _set_up(mcfg, tcfg, corpus)
    progress = None
    if tcfg.progress:
        progress = terminal_progress(
            total=tcfg.steps, initial=run.step, desc=f"{mcfg.norm}-{mcfg.placement} seed {tcfg.seed}", leave=False
        )
    steps_this_call, interrupted = 0, False
    run.model.train()
    try:
        while run.step < tcfg.steps and not run.diverged:
            if tcfg.interrupt_after is not None and steps_this_call >= tcfg.interrupt_after:
                interrupted = True
                break
            row = _optimisation_step(run)
            if run.diverged:
                break
            if on_step is not None:
                on_step(row, run.model)
            steps_this_call += 1
            if progress is not None:
                progress.update(1)
                progress.set_postfix(loss=f"{row['loss']:.3f}")
            _measure_when_due(run)
            if tcfg.checkpoint_every and run.step % tcfg.checkpoint_every == 0:
                _write_checkpoint(run)
    finally:
        # A real interruption (Ctrl-C) writes nothing here: the step it hit may be half done, and the
        # last periodic checkpoint replays the steps after it exactly.
        if progress is not None:
            progress.close()
    _write_checkpoint(run)
    return _result(run, interrupted)


# ---- the compiled step (TrainConfig(step="compiled")) and the update it shares with fast_step.StackedStep ----


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


def compare_step_times(
    configs: dict[str, GPTConfig],
    corpus: Corpus,
    *,
    batch_size: int,
    repeats: int = 20,
    warmup: int = 3,
    device: str = "cpu",
    seed: int = 0,
    progress: bool = True,
) -> pandas.DataFrame:  # noqa: F821 (pandas is imported where the table is made)
    """Seconds per training step (forward, backward, AdamW update) of each model, after `warmup` steps of each,
    in `repeats` interleaved rounds of one step of each (`normlab.runtime.interleaved.time_interleaved`), so that
    drifting machine load affects all alike. One row per model and round: model, repeat, step_time."""
    if not configs:
        raise ValueError("configs is empty: give at least one named GPTConfig")
    if repeats < 1 or warmup < 0:
        raise ValueError(f"repeats must be >= 1 and warmup >= 0, got repeats={repeats}, warmup={warmup}")
    device = torch.device(device)
    generator = torch.Generator().manual_seed(seed)
    context = max(c.context for c in configs.values())
    batches = [corpus.batch("train", batch_size, context, generator, device) for _ in range(4)]

    def training_step(cfg: GPTConfig):
        corpus.check_context(cfg.context)
        torch.manual_seed(seed)
        model = GPT(cfg).to(device).train()
        optimizer = torch.optim.AdamW(parameter_groups(model, TrainConfig()), lr=1e-4, foreach=False)
        calls = 0

        def step() -> None:
            nonlocal calls
            x, y = (t[:, : cfg.context] for t in batches[calls % len(batches)])
            calls += 1
            _, loss = model(x, y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

        return step

    steps = {name: training_step(cfg) for name, cfg in configs.items()}
    timed = time_interleaved(
        steps,
        rounds=repeats,
        warmup=warmup,
        device=device,
        progress=(lambda rounds: terminal_progress(rounds, desc="timing steps", leave=False)) if progress else None,
    )
    return frame(
        [
            {"model": name, "repeat": r, "step_time": timed.per_round(name)[r]}
            for r in range(repeats)
            for name in configs
        ]
    )
