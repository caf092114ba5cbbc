"""Several callables timed side by side in interleaved rounds: the one way the study compares timings.

`time_interleaved(calls, rounds=...)` warms each callable up, then runs `rounds` rounds; each round times every
callable once (`number` calls back to back), in an order rotated by one from round to round, so that a slow spell
of a shared machine, and whatever the previous callable left in the caches, hits every callable alike. Each round
gives one sample per callable: seconds per call. `InterleavedTimes` keeps the samples in round order, so two
callables' samples pair by round (a per-round ratio), and summarises them as a median with its spread
(`median_and_sd`).

A callable that is a generator function marks phases: each `yield "name"` ends the phase of that name, timed from
the previous mark (or the start), so one call can time, say, a prefill and the decoding after it apart. Every call
is also timed whole, as the phase `CALL`. On a CUDA `device` the clock is read only after a synchronisation, so the
kernels a call launched are counted in it. `around(name)`, when given, is a context entered (untimed) around each
callable's warm-up and each of its rounds: for a variant that must be installed while it runs.
"""

from __future__ import annotations

import inspect
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

CALL = "call"  # the phase every call is timed in: the whole call


def median_and_sd(values: Sequence[float]) -> tuple[float, float]:
    """The median of per-round values and their spread (sample standard deviation; 0 for a single round)."""
    values = list(values)
    return statistics.median(values), statistics.stdev(values) if len(values) > 1 else 0.0


@dataclass(frozen=True)
class InterleavedTimes:
    """Per callable and phase, seconds per call in each round (round order); the warm-up's seconds, whole, per
    callable; and the order each round ran in."""

    seconds: dict[str, dict[str, list[float]]]
    warmup_s: dict[str, float]
    orders: list[tuple[str, ...]]

    def per_round(self, name: str, phase: str = CALL) -> list[float]:
        return self.seconds[name][phase]

    def rates(self, name: str, per_call: float = 1.0, phase: str = CALL) -> list[float]:
        """Per round: `per_call` units (steps, models, tokens) per second."""
        return [per_call / s for s in self.per_round(name, phase)]

    def median_and_sd(self, name: str, phase: str = CALL) -> tuple[float, float]:
        return median_and_sd(self.per_round(name, phase))


def _synchroniser(device) -> Callable[[], None]:
    if device is None:
        return lambda: None
    import torch

    device = torch.device(device)
    if device.type != "cuda":
        return lambda: None
    return lambda: torch.cuda.synchronize(device)


def _timed_calls(function, number: int, sync, clock) -> dict[str, float]:
    """Seconds of `number` calls of `function`, whole (CALL) and per phase marked by its yields."""
    spent: dict[str, float] = {}
    sync()
    started = clock()
    for _ in range(number):
        outcome = function()
        if inspect.isgenerator(outcome):  # its yields mark the ends of phases
            mark = clock()
            for phase in outcome:
                sync()
                now = clock()
                spent[phase] = spent.get(phase, 0.0) + now - mark
                mark = now
    sync()
    spent[CALL] = clock() - started
    return spent


def time_interleaved(
    calls: Mapping[str, Callable[[], object]],
    *,
    rounds: int,
    number: int = 1,
    warmup: int = 1,
    device=None,
    around: Callable[[str], AbstractContextManager] | None = None,
    progress: Callable[[Iterable], Iterable] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> InterleavedTimes:
    """Time each of `calls` (name -> callable taking no argument) in `rounds` interleaved rounds of `number` calls,
    after `warmup` calls of each (compilation, allocator state and first-call costs; timed whole, apart).

    Round r runs the callables in their given order rotated by r. `progress` wraps the rounds (a progress bar).
    `clock` reads seconds (`time.process_time` for CPU time instead of wall time)."""
    names = list(calls)
    if not names:
        raise ValueError("calls is empty: give at least one named callable to time")
    if rounds < 1 or number < 1 or warmup < 0:
        raise ValueError(f"need rounds >= 1, number >= 1 and warmup >= 0, got {rounds}, {number} and {warmup}")
    sync = _synchroniser(device)
    context = around if around is not None else (lambda name: nullcontext())
    warmup_s = {}
    for name in names:
        with context(name):
            warmup_s[name] = _timed_calls(calls[name], warmup, sync, clock)[CALL] if warmup else 0.0
    seconds: dict[str, dict[str, list[float]]] = {name: {} for name in names}
    orders = []
    for r in progress(range(rounds)) if progress is not None else range(rounds):
        order = tuple(names[r % len(names) :] + names[: r % len(names)])
        orders.append(order)
        for name in order:
            with context(name):
                spent = _timed_calls(calls[name], number, sync, clock)
            for phase, total in spent.items():
                seconds[name].setdefault(phase, []).append(total / number)
    return InterleavedTimes(seconds, warmup_s, orders)
