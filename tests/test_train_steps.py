"""The training loop, split into named steps, gives bit-identical numbers to the loop before the split.

`_train_before_the_split` below is a copy of that loop for one process without a progress bar, and without the
refusals (test_train checks those). Every machine runs both loops and compares them exactly: exact floats hold
only on one machine and torch build, and this comparison needs nothing recorded elsewhere. (A golden file the old
loop wrote on one machine was compared until 2026-12, keyed on the CPU's model name; "AMD EPYC" names a family of
CPUs, not the kernels ATen picks on them, and it failed on a Zen 2. It recorded nothing finer, so keyed on the exact
CPU it would skip on every machine; the copy of the loop is the witness that holds everywhere.)

Each scenario covers a path of the loop: a plain run; one recording validation, stream statistics, gain and
gradient norms on a post-LN LayerNorm with dropout, without clipping, reporting each step to `on_step`; one
interrupted after a periodic checkpoint and resumed from it; three that diverge, in the training loss, in
the gradients and in the validation loss. Compared exactly: the history and validation tables (all but
step_time, a wall clock), the flags and configs, and SHA-256 digests of the stream table, of what on_step
received, of the final weights and of the checkpoints (weights, optimizer moments, both RNG states, tables).
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
from torch import nn

from normlab.gpt.corpus import load_corpus
from normlab.gpt.model import GPT, GPTConfig
from normlab.gpt.train import (
    TrainConfig,
    TrainResult,
    _eval_batches,
    check_checkpoint,
    evaluate,
    gain_l2_norms,
    gradient_norms,
    learning_rate,
    load_checkpoint,
    measure_stream,
    parameter_groups,
    save_checkpoint,
    train,
)

SMALL = dict(context=16, width=32, depth=2, heads=4)

pytestmark = pytest.mark.usefixtures("one_thread")


def _config(**overrides) -> TrainConfig:
    base = dict(steps=8, batch_size=4, lr=1e-2, warmup_steps=2, eval_every=0, eval_batches=2, stream_every=0)
    return TrainConfig(**{**base, "progress": False, **overrides})


# ---- what a run is reduced to ------------------------------------------------------------------------


def _plain(value):
    """A JSON value that compares exactly: numpy scalars become Python ones, NaN (which equals nothing) None."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _columns(table: pd.DataFrame) -> list:
    """A table as [column, values] pairs, in column order, without step_time (a wall clock, new in every run)."""
    return [[name, [_plain(v) for v in table[name]]] for name in table.columns if name != "step_time"]


_DIFFERENT_IN_EVERY_RUN = {"step_time", "checkpoint_path"}  # a wall clock; a temporary folder


def _digest(value) -> str:
    """SHA-256 of a nest of dicts, lists, tensors and scalars: tensor bytes, dtype and shape; floats as hex."""
    sha = hashlib.sha256()

    def feed(v) -> None:
        if isinstance(v, torch.Tensor):
            t = v.detach().cpu().contiguous()
            sha.update(f"tensor {t.dtype} {tuple(t.shape)}:".encode())
            sha.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
        elif isinstance(v, dict):
            sha.update(b"{")
            for key, item in v.items():
                if key not in _DIFFERENT_IN_EVERY_RUN:
                    feed(key)
                    feed(item)
            sha.update(b"}")
        elif isinstance(v, (list, tuple)):
            sha.update(b"[")
            for item in v:
                feed(item)
            sha.update(b"]")
        elif isinstance(v, float):
            sha.update(f"float {v.hex()};".encode())
        else:
            sha.update(f"{type(v).__name__} {v!r};".encode())

    feed(value)
    return sha.hexdigest()


def _summary(result: TrainResult, reported: list[dict] | None = None) -> dict:
    train_config = {k: v for k, v in result.train_config.items() if k not in _DIFFERENT_IN_EVERY_RUN}
    return {
        "history": _columns(result.history),
        "val": _columns(result.val),
        # The bulky tables by digest, which compares as exactly and keeps the fixture small.
        "stream_steps": sorted({int(s) for s in result.stream["step"]}),
        "stream_sha256": _digest(_columns(result.stream)),
        "on_step_steps": None if reported is None else [row["step"] for row in reported],
        "on_step_sha256": None if reported is None else _digest(_columns(pd.DataFrame(reported))),
        "diverged": result.diverged,
        "interrupted": result.interrupted,
        "steps_done": result.steps_done,
        "model_config": result.model_config,
        "train_config": json.loads(json.dumps(train_config)),  # tuples as lists, as in the JSON file
        "weights_sha256": _digest(result.model.state_dict()),
    }


# ---- the scenarios -----------------------------------------------------------------------------------


def _run(train_fn, corpus, model: GPTConfig, cfg: TrainConfig, *, report: bool = False) -> dict:
    reported: list[dict] = []
    # the trainer before the split reports the row alone; today's trainer the row and the model
    result = train_fn(model, cfg, corpus, on_step=(lambda row, *model: reported.append(row)) if report else None)
    return _summary(result, reported if report else None)


def plain(train_fn, corpus, tmp_path) -> dict:
    return {"run": _run(train_fn, corpus, GPTConfig(**SMALL), _config())}


def measured(train_fn, corpus, tmp_path) -> dict:
    model = GPTConfig(**SMALL, norm="layer", placement="post", dropout=0.1)
    path = tmp_path / "measured.ckpt"  # the checkpoint shows the optimizer's moments and both RNG states
    cfg = _config(
        steps=9, eval_every=3, stream_every=2, gain_weight_decay=0.05, grad_clip=0.0, seed=2, checkpoint_path=str(path)
    )
    run = _run(train_fn, corpus, model, cfg, report=True)
    return {"run": run, "checkpoint_sha256": _digest(load_checkpoint(path))}


def resumed(train_fn, corpus, tmp_path) -> dict:
    model = GPTConfig(**SMALL, dropout=0.1)  # dropout draws from the global RNG, so its state must resume too
    path = tmp_path / "resumed.ckpt"
    cfg = dict(steps=10, eval_every=4, stream_every=3, checkpoint_path=str(path), checkpoint_every=3, seed=5)
    first = _run(train_fn, corpus, model, _config(**cfg, interrupt_after=5), report=True)
    at_interruption = _digest(load_checkpoint(path))
    second = _run(train_fn, corpus, model, _config(**cfg), report=True)
    return {
        "interrupted": first,
        "checkpoint_at_interruption_sha256": at_interruption,
        "resumed": second,
        "checkpoint_at_end_sha256": _digest(load_checkpoint(path)),
    }


def diverged_in_the_loss(train_fn, corpus, tmp_path) -> dict:
    cfg = _config(steps=6, lr=1e30, warmup_steps=0, grad_clip=0.0)  # the second loss is NaN
    return {"run": _run(train_fn, corpus, GPTConfig(**SMALL), cfg, report=True)}


def diverged_in_the_gradients(train_fn, corpus, tmp_path) -> dict:
    cfg = _config(steps=6, lr=1e5, warmup_steps=0, grad_clip=0.0)  # the second loss is finite, its gradient NaN
    return {"run": _run(train_fn, corpus, GPTConfig(**SMALL), cfg, report=True)}


def diverged_in_validation(train_fn, corpus, tmp_path) -> dict:
    path = tmp_path / "diverged.ckpt"
    cfg = _config(steps=6, lr=1e30, warmup_steps=0, grad_clip=0.0, eval_every=1, checkpoint_path=str(path))
    run = _run(train_fn, corpus, GPTConfig(**SMALL), cfg, report=True)
    return {"run": run, "checkpoint_sha256": _digest(load_checkpoint(path))}


SCENARIOS = {
    f.__name__: f
    for f in (plain, measured, resumed, diverged_in_the_loss, diverged_in_the_gradients, diverged_in_validation)
}


# ---- the loop before the split -----------------------------------------------------------------------


def _train_before_the_split(model_config, train_config, corpus, *, on_step=None) -> TrainResult:
    """normlab.gpt.train.train as it was before it was split into steps, for one process without a progress bar."""
    mcfg, tcfg = model_config, train_config
    corpus.check_context(mcfg.context)
    device = torch.device(tcfg.device)
    state = None
    path = Path(tcfg.checkpoint_path) if tcfg.checkpoint_path else None
    if path is not None and path.exists():
        state = load_checkpoint(path)
        check_checkpoint(state, mcfg, tcfg, corpus, path)

    torch.manual_seed(tcfg.seed)
    model = GPT(mcfg).to(device)
    groups = parameter_groups(model, tcfg)
    optimizer = torch.optim.AdamW(groups, lr=tcfg.lr, betas=tcfg.betas, foreach=False)
    data_rng = torch.Generator().manual_seed(tcfg.seed)
    eval_batches = _eval_batches(corpus, mcfg, tcfg)
    stream_probe = eval_batches[0][0]
    history: list[dict] = []
    val: list[dict] = []
    stream: list[dict] = []
    step, diverged = 0, False

    if state is not None:
        model.load_state_dict(state["model"], strict=True)
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["torch_rng"])
        if device.type == "cuda" and state.get("cuda_rng") is not None:
            torch.cuda.set_rng_state(state["cuda_rng"], device)
        data_rng.set_state(state["data_rng"])
        history, val, stream = list(state["history"]), list(state["val"]), list(state["stream"])
        step, diverged = int(state["step"]), bool(state["diverged"])
    else:
        val.append({"step": 0, "val_loss": evaluate(model, eval_batches)})
        stream.extend(measure_stream(model, stream_probe, 0))

    def checkpoint() -> None:
        if path is None:
            return
        save_checkpoint(
            path,
            {
                "model_config": mcfg.to_dict(),
                "train_config": tcfg.to_dict(),
                "corpus_sha256": corpus.sha256,
                "step": step,
                "diverged": diverged,
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "torch_rng": torch.get_rng_state(),
                "data_rng": data_rng.get_state(),
                "cuda_rng": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
                "history": history,
                "val": val,
                "stream": stream,
            },
        )

    steps_this_call, interrupted = 0, False
    model.train()
    while step < tcfg.steps and not diverged:
        if tcfg.interrupt_after is not None and steps_this_call >= tcfg.interrupt_after:
            interrupted = True
            break
        lr = learning_rate(step + 1, tcfg)
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y = corpus.batch("train", tcfg.batch_size, mcfg.context, data_rng, device)
        started = time.perf_counter()
        _, loss = model(x, y)
        loss_value = float(loss.detach())
        row = {"step": step + 1, "loss": loss_value, "lr": lr}
        if not math.isfinite(loss_value):
            diverged = True
            history.append({**row, "step_time": math.nan})
            step += 1
            break
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        paused = time.perf_counter()
        layer_norms = gradient_norms(model)
        measuring = time.perf_counter() - paused
        total = nn.utils.clip_grad_norm_(model.parameters(), tcfg.grad_clip if tcfg.grad_clip > 0 else math.inf)
        if not math.isfinite(float(total)):
            diverged = True
            history.append({**row, "step_time": math.nan, "grad_norm/total": float(total)})
            step += 1
            break
        optimizer.step()
        row["step_time"] = time.perf_counter() - started - measuring
        row["grad_norm/total"] = float(total)
        row.update(layer_norms)
        row.update(gain_l2_norms(model))
        history.append(row)
        if on_step is not None:
            on_step(row)
        step += 1
        steps_this_call += 1
        last = step == tcfg.steps
        if last or (tcfg.eval_every and step % tcfg.eval_every == 0):
            val_loss = evaluate(model, eval_batches)
            val.append({"step": step, "val_loss": val_loss})
            if not math.isfinite(val_loss):
                diverged = True
        if last or (tcfg.stream_every and step % tcfg.stream_every == 0):
            stream.extend(measure_stream(model, stream_probe, step))
        if tcfg.checkpoint_every and step % tcfg.checkpoint_every == 0:
            checkpoint()
    checkpoint()
    return TrainResult(
        model=model,
        history_rows=history,
        val_rows=val,
        stream_rows=stream,
        corpus_sha256=corpus.sha256,
        diverged=diverged,
        steps_done=step,
        model_config=mcfg.to_dict(),
        train_config=tcfg.to_dict(),
        interrupted=interrupted,
    )


# ---- the tests ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus():
    return load_corpus()


@pytest.fixture(scope="module")
def ours(corpus, tmp_path_factory):
    """Every scenario run once by the loop under test, shared by the tests below."""
    folder = tmp_path_factory.mktemp("ours")
    return {name: scenario(train, corpus, folder / name) for name, scenario in SCENARIOS.items()}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_loop_matches_a_copy_of_the_loop_before_the_split(scenario, ours, corpus, tmp_path):
    assert ours[scenario] == SCENARIOS[scenario](_train_before_the_split, corpus, tmp_path)


def test_the_scenarios_reach_the_paths_they_are_named_after(ours):
    """So that the comparisons above compare something: each scenario really takes its path of the loop."""
    runs = ours

    def column(run: dict, table: str, name: str) -> list:
        return dict(run[table])[name]

    plain_run = runs["plain"]["run"]
    assert column(plain_run, "val", "step") == [0, 8] and plain_run["on_step_steps"] is None
    measured_run = runs["measured"]["run"]
    assert column(measured_run, "val", "step") == [0, 3, 6, 9]
    assert measured_run["stream_steps"] == [0, 2, 4, 6, 8, 9]
    assert measured_run["on_step_sha256"] == _digest(measured_run["history"])  # on_step saw every row
    names = [name for name, _ in measured_run["history"]]
    assert any(n.startswith("gain_norm/") for n in names) and any(n.startswith("grad_norm/blocks") for n in names)
    first, second = runs["resumed"]["interrupted"], runs["resumed"]["resumed"]
    assert first["interrupted"] and first["steps_done"] == 5 and not second["interrupted"]
    assert second["steps_done"] == 10 and second["on_step_steps"] == list(range(6, 11))
    assert column(second, "history", "loss")[:5] == column(first, "history", "loss")
    in_loss = runs["diverged_in_the_loss"]["run"]
    assert in_loss["diverged"] and column(in_loss, "history", "loss")[-1] is None  # NaN
    in_gradients = runs["diverged_in_the_gradients"]["run"]
    assert in_gradients["diverged"] and math.isfinite(column(in_gradients, "history", "loss")[-1])
    assert column(in_gradients, "history", "grad_norm/total")[-1] is None
    in_validation = runs["diverged_in_validation"]["run"]
    assert in_validation["diverged"] and column(in_validation, "val", "val_loss")[-1] is None
    assert math.isfinite(column(in_validation, "history", "loss")[-1])
