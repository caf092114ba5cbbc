"""How near the trainer runs to this machine's matrix-multiply limit, for one model and batch.

A training step of the study's small GPTs is matrix products plus everything else: attention, the norms, RoPE, the
softmax, AdamW, and the trainer's per-step bookkeeping (learning rate, gradient norms, clipping). This module measures,
on one single-threaded process as the study's workers run:

- steps per second of the trainer's own step (`normlab.gpt.train`'s `_optimisation_step`, bookkeeping included) and
  of the bare step (forward, backward, clipping, AdamW) that the bookkeeping wraps, timed in interleaved rounds
  (`normlab.runtime.interleaved.time_interleaved`, as every side-by-side timing of the study);
- `step_profile`: the share of the step's CPU time spent in matrix products (aten::mm, addmm, bmm) and in attention,
  from `torch.profiler`, with the shapes of every product;
- `matmul_limit`: each of those shapes timed alone, float32 (and bfloat16 where the CPU has native bf16), so the
  step's matrix work has a floor: the time it would take at the machine's own rate for exactly those products.

`trainer_throughput` puts them together: achieved matmul GFLOP/s against the standalone rate, and the step time
against its matmul floor. A benchmark, not a test: it prints and records ratios measured side by side in one run.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections import Counter
from dataclasses import replace

import torch
from torch.profiler import ProfilerActivity, profile

from normlab.gpt.corpus import Corpus
from normlab.gpt.model import GPTConfig
from normlab.gpt.train import TrainConfig, _optimisation_step, _set_up
from normlab.runtime.interleaved import median_and_sd, time_interleaved

MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")
ATTENTION_OPS = (
    "aten::_scaled_dot_product_flash_attention_for_cpu",
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
)


def _run(mcfg: GPTConfig, tcfg: TrainConfig, corpus: Corpus):
    run = _set_up(mcfg, replace(tcfg, progress=False, checkpoint_path=None), corpus)
    run.model.train()
    return run


def _bare_step(run) -> None:
    """The step without the trainer's bookkeeping: batch, forward, backward, clipping, AdamW."""
    x, y = run.corpus.batch("train", run.tcfg.batch_size, run.mcfg.context, run.data_rng, run.device)
    _, loss = run.model(x, y)
    run.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(run.model.parameters(), run.tcfg.grad_clip)
    run.optimizer.step()


def step_profile(mcfg: GPTConfig, tcfg: TrainConfig, corpus: Corpus, *, steps: int) -> dict:
    """Shares of the trainer's step time in matrix products and in attention, and the products' shapes per step."""
    run = _run(mcfg, tcfg, corpus)
    for _ in range(3):
        _optimisation_step(run)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(steps):
            _optimisation_step(run)
    events = prof.events()
    total = sum(e.self_cpu_time_total for e in events)
    matmul = sum(e.self_cpu_time_total for e in events if e.name in MATMUL_OPS)
    attention = sum(e.self_cpu_time_total for e in events if e.name in ATTENTION_OPS)
    shapes = Counter()
    for e in events:
        if e.name in ("aten::mm", "aten::addmm") and e.input_shapes:
            a, b = (e.input_shapes[-2], e.input_shapes[-1]) if e.name == "aten::addmm" else e.input_shapes[:2]
            if len(a) == 2 and len(b) == 2:
                shapes[(a[0], a[1], b[1])] += 1
    return {
        "matmul_share": matmul / total,
        "attention_share": attention / total,
        "other_share": 1 - (matmul + attention) / total,
        "profiled_step_s": total / 1e6 / steps,
        "matmul_shapes_per_step": {shape: count / steps for shape, count in shapes.items()},
    }


def matmul_rate(m: int, k: int, n: int, dtype: torch.dtype, *, seconds: float = 0.2) -> float:
    """GFLOP/s of one (m×k)·(k×n) product timed alone, median of five rounds of about `seconds` / 5 each."""
    a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
    for _ in range(5):
        a @ b
    started = time.perf_counter()
    calls = 0
    while time.perf_counter() - started < seconds / 5:
        a @ b
        calls += 1
    rounds = []
    for _ in range(5):
        began = time.perf_counter()
        for _ in range(calls):
            a @ b
        rounds.append(2 * m * k * n * calls / (time.perf_counter() - began) / 1e9)
    return statistics.median(rounds)


def has_native_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AVX-512 BF16 or AMX), where bf16 is worth offering."""
    try:
        flags = open("/proc/cpuinfo", encoding="utf-8").read()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def matmul_limit(shapes_per_step: dict, dtype: torch.dtype) -> dict:
    """The step's products timed alone at `dtype`: their FLOPs per step, the time they need at the machine's
    standalone rate for each shape, and that rate (FLOP-weighted) over all of them."""
    flops = {shape: 2 * math.prod(shape) * count for shape, count in shapes_per_step.items()}
    seconds = sum(f / (matmul_rate(*shape, dtype) * 1e9) for shape, f in flops.items())
    return {"flops_per_step": sum(flops.values()), "floor_s": seconds, "gflops": sum(flops.values()) / seconds / 1e9}


def _trainer_and_bare_rates(mcfg: GPTConfig, tcfg: TrainConfig, corpus: Corpus, *, steps: int, rounds: int) -> dict:
    """Steps per second of the trainer's step and of the bare step on one run, after 3 steps of each, in interleaved
    rounds of `steps` steps (machine load drifting hits both alike): the median over `rounds` and its spread (sd)."""
    run = _run(mcfg, tcfg, corpus)
    timed = time_interleaved(
        {"trainer": lambda: _optimisation_step(run), "bare": lambda: _bare_step(run)},
        rounds=rounds,
        number=steps,
        warmup=3,
    )
    spread = {name: median_and_sd(timed.rates(name)) for name in timed.seconds}
    return {f"{name}_steps_per_s": median for name, (median, _) in spread.items()} | {
        f"{name}_steps_per_s_sd": sd for name, (_, sd) in spread.items()
    }


def trainer_throughput(mcfg: GPTConfig, tcfg: TrainConfig, corpus: Corpus, *, steps: int = 20, rounds: int = 5) -> dict:
    """The whole measurement for one model: rates, shares, the float32 floor, and bfloat16's where native."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the study's workers train: one thread each, one worker per core
    try:
        rates = _trainer_and_bare_rates(mcfg, tcfg, corpus, steps=steps, rounds=rounds)
        shares = step_profile(mcfg, tcfg, corpus, steps=steps)
        fp32 = matmul_limit(shares["matmul_shapes_per_step"], torch.float32)
        bf16 = matmul_limit(shares["matmul_shapes_per_step"], torch.bfloat16) if has_native_bf16() else None
    finally:
        torch.set_num_threads(threads)
    step_s = 1 / rates["trainer_steps_per_s"]
    achieved = fp32["flops_per_step"] / (step_s * shares["matmul_share"]) / 1e9
    return {
        **rates,
        **{key: value for key, value in shares.items() if key != "matmul_shapes_per_step"},
        "matmul_shapes_per_step": [[*shape, count] for shape, count in shares["matmul_shapes_per_step"].items()],
        "bookkeeping_share": 1 - rates["trainer_steps_per_s"] / rates["bare_steps_per_s"],
        "matmul_flops_per_step": fp32["flops_per_step"],
        "matmul_gflops_achieved": achieved,
        "matmul_gflops_alone_fp32": fp32["gflops"],
        "matmul_floor_s_fp32": fp32["floor_s"],
        "step_over_matmul_floor_fp32": step_s / fp32["floor_s"],
        "matmul_gflops_alone_bf16": bf16["gflops"] if bf16 else None,
        "matmul_floor_s_bf16": bf16["floor_s"] if bf16 else None,
        "load_average": os.getloadavg()[0],
    }


# ---------------------------------------------------------------- faster steps side by side (issue 45)


def _reference_trainer_step(mcfg: GPTConfig, tcfg: TrainConfig, corpus: Corpus):
    run = _run(mcfg, tcfg, corpus)
    return lambda: _optimisation_step(run)


def step_candidates(mcfg: GPTConfig, tcfg: TrainConfig, corpus: Corpus, *, stacked=(2, 4, 8), compile_modes=(None,)):
    """The steps to time for one model: name -> (builder, models per step). A builder returns a function doing one
    step. The reference trainer's step comes first; then CompiledStep per mode; for models StackedStep implements,
    StackedStep with each K in `stacked` (seeds tcfg.seed .. tcfg.seed + K - 1), eager and compiled; for RMSNorm models, the reference
    trainer with the norm on PyTorch's F.rms_norm (norm_backend='torch') instead of auto's choice."""
    from normlab.gpt.fast_step import StackedStep, _check_stackable
    from normlab.gpt.train import CompiledStep

    found = {"reference trainer": (lambda: _reference_trainer_step(mcfg, tcfg, corpus), 1)}
    if mcfg.norm == "rms" and mcfg.norm_backend == "auto":
        found["reference trainer, norm_backend='torch'"] = (
            lambda: _reference_trainer_step(replace(mcfg, norm_backend="torch"), tcfg, corpus),
            1,
        )
    for mode in compile_modes:

        def compiled(mode=mode):
            fast = CompiledStep(mcfg, tcfg, corpus, mode=mode)
            return lambda: fast.step(record=True)

        found[f"compiled step (mode={mode})"] = (compiled, 1)
    try:
        _check_stackable(mcfg, tcfg)
    except ValueError:
        stacked = ()
    for k in stacked:
        for compiled in (False, True):

            def stack(k=k, compiled=compiled):
                fast = StackedStep(mcfg, tcfg, corpus, range(tcfg.seed, tcfg.seed + k), compile=compiled)
                return fast.step

            found[f"stacked, K={k}" + (", compiled" if compiled else "")] = (stack, k)
    return found


def _norm_op_seconds(events, model_steps: int) -> dict:
    """Self CPU seconds per model-step of the profiled ops that are norms (forward and backward, autograd nodes
    included; not vector norms) and of inductor's compiled functions, by name."""
    found = Counter()
    for e in events:
        name = e.name.lower()
        if ("norm" in name and "vector_norm" not in name and "clip" not in name) or "compiledfunction" in name:
            found[e.name] += e.self_cpu_time_total / 1e6 / model_steps
    return dict(found)


def candidate_throughput(
    candidates: dict, floor_s: float, *, steps: int = 20, rounds: int = 5, warmup: int = 3
) -> dict:
    """Model-steps per second of each candidate step (from `step_candidates`), timed in interleaved rounds of `steps`
    steps (`time_interleaved`: one round of each in turn; medians over `rounds`), one thread; the time per model-step
    in matrix products (aten::mm/addmm/bmm/baddbmm self time in torch.profiler over `steps` steps) as a share of the
    unprofiled model-step; and the model-step against `floor_s`, the reference step's float32 matmul floor (every
    candidate does the same products per model). Building each step and its warm-up steps (compilation included) are
    timed apart and reported."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        built, build_s = {}, {}
        for name, (builder, per_step) in candidates.items():
            started = time.perf_counter()
            built[name] = (builder(), per_step)
            build_s[name] = time.perf_counter() - started
        timed = time_interleaved(
            {name: step for name, (step, _) in built.items()}, rounds=rounds, number=steps, warmup=warmup
        )
        matmul_s, norm_ops = {}, {}
        for name, (step, per_step) in built.items():
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                for _ in range(steps):
                    step()
            norm_ops[name] = _norm_op_seconds(prof.events(), steps * per_step)
            matmul_s[name] = (
                sum(e.self_cpu_time_total for e in prof.events() if e.name in MATMUL_OPS) / 1e6 / steps / per_step
            )
    finally:
        torch.set_num_threads(threads)
    out = {}
    for name, (_, per_step) in built.items():
        rate, sd = median_and_sd(timed.rates(name, per_call=per_step))
        out[name] = {
            "models_per_step": per_step,
            "model_steps_per_s": rate,
            "model_steps_per_s_sd": sd,
            "matmul_share": matmul_s[name] * rate,
            "step_over_matmul_floor_fp32": 1 / rate / floor_s,
            "warmup_s": build_s[name] + timed.warmup_s[name],
            "norm_ops_s_per_model_step": norm_ops[name],
            "load_average": os.getloadavg()[0],
        }
    return out
