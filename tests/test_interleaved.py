"""The one interleaved-timing helper: rounds rotate, warm-up is apart, phases are timed apart, samples pair by round;
and compare_step_times, the GPT training steps timed with it."""

from __future__ import annotations

import itertools

import pytest

from normlab.gpt.corpus import load_corpus
from normlab.gpt.model import GPTConfig
from normlab.gpt.train import compare_step_times
from normlab.runtime.interleaved import CALL, median_and_sd, time_interleaved


def fake_clock(tick: float = 1.0):
    """A clock that advances by `tick` at each reading, and the calls that advance it further by their cost."""
    now = itertools.count(step=tick)
    return lambda: float(next(now))


def test_rounds_rotate_and_each_gives_one_sample_per_callable():
    ran = []
    calls = {name: (lambda name=name: ran.append(name)) for name in "abc"}
    timed = time_interleaved(calls, rounds=4, number=2, warmup=1)
    assert ran[:3] == ["a", "b", "c"]  # the warm-up, one call each, before any round
    rounds = ran[3:]
    assert rounds == [n for order in timed.orders for n in order for _ in range(2)]
    assert timed.orders == [("a", "b", "c"), ("b", "c", "a"), ("c", "a", "b"), ("a", "b", "c")]
    assert all(len(timed.per_round(name)) == 4 and min(timed.per_round(name)) > 0 for name in calls)
    assert set(timed.warmup_s) == set(calls)


def test_seconds_are_per_call_and_rates_count_units_per_second():
    # each timed stretch reads the clock twice, one second apart, whatever `number` is
    timed = time_interleaved({"x": lambda: None}, rounds=3, number=4, warmup=0, clock=fake_clock())
    assert timed.per_round("x") == [0.25, 0.25, 0.25] and timed.warmup_s == {"x": 0.0}
    assert timed.rates("x", per_call=2) == [8.0, 8.0, 8.0]
    assert timed.median_and_sd("x") == (0.25, 0.0)


def test_a_generator_times_its_phases_apart_and_the_call_whole():
    def prefill_then_decode():
        yield "prefill"
        yield "decode"

    # clock readings: start 0, generator start 1, prefill mark 2, decode mark 3, end 4
    timed = time_interleaved({"g": prefill_then_decode}, rounds=2, warmup=1, clock=fake_clock())
    assert timed.per_round("g", "prefill") == [1.0, 1.0] and timed.per_round("g", "decode") == [1.0, 1.0]
    assert timed.per_round("g", CALL) == [4.0, 4.0] and timed.warmup_s == {"g": 4.0}


def test_around_is_entered_for_the_warm_up_and_each_round():
    from contextlib import contextmanager

    entered = []

    @contextmanager
    def around(name):
        entered.append(name)
        yield

    time_interleaved({"a": lambda: None, "b": lambda: None}, rounds=2, warmup=1, around=around)
    assert entered == ["a", "b", "a", "b", "b", "a"]


def test_median_and_sd_and_the_refusals():
    assert median_and_sd([1.0, 3.0, 2.0]) == (2.0, 1.0) and median_and_sd([5.0]) == (5.0, 0.0)
    with pytest.raises(ValueError, match="calls is empty"):
        time_interleaved({}, rounds=1)
    with pytest.raises(ValueError, match="rounds >= 1"):
        time_interleaved({"a": lambda: None}, rounds=0)


def test_compare_step_times_gives_one_row_per_model_and_round():
    configs = {
        norm: GPTConfig(vocab_size=256, context=8, width=16, depth=1, heads=2, norm=norm) for norm in ("rms", "layer")
    }
    timings = compare_step_times(configs, load_corpus(), batch_size=2, repeats=3, warmup=1, progress=False)
    assert list(timings.columns) == ["model", "repeat", "step_time"]
    assert list(zip(timings.model, timings.repeat)) == [(m, r) for r in range(3) for m in ("rms", "layer")]
    assert (timings.step_time > 0).all()
