"""Timing: warm up, then the median of repeats with its spread, inputs rotated.

On CPU each repeat is timed with `time.perf_counter`; on CUDA with a pair of
CUDA events around the repeat. A repeat runs the call `number` times back to
back, with `number` chosen from the warm-up so a repeat lasts long enough for
the clock's resolution (sub-millisecond calls, such as one-row inference, are
otherwise all noise). Every call takes the next set of inputs from a rotation
of several buffers, so the caches do not hold the previous call's data.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import torch


@dataclass(frozen=True)
class TimingSettings:
    warmup: int = 2  # untimed calls first (first-call costs: allocation, compilation, caches); one more calibrates
    warmup_s: float = 0.0  # ...and keep warming up until this long has passed (page faults and allocator state settle)
    min_repeats: int = 3
    max_repeats: int = 25
    budget_s: float = 1.0  # target measuring time per case; repeats stop at max_repeats or this budget
    min_repeat_s: float = 2e-3  # a repeat lasts at least this long (on CPU, the perf_counter noise floor)
    rotation_bytes: int = 64 * 2**20  # spread inputs over at least this many bytes, to defeat the caches
    max_buffers: int = 32

    def __post_init__(self):
        if self.warmup < 0 or self.min_repeats < 1 or self.max_repeats < self.min_repeats:
            raise ValueError(
                f"need warmup >= 0 and 1 <= min_repeats <= max_repeats, got warmup={self.warmup}, "
                f"min_repeats={self.min_repeats}, max_repeats={self.max_repeats}"
            )
        if self.warmup_s < 0:
            raise ValueError(f"warmup_s must be >= 0, got {self.warmup_s}")
        if self.budget_s <= 0 or self.min_repeat_s <= 0:
            raise ValueError(f"budget_s and min_repeat_s must be positive, got {self.budget_s}, {self.min_repeat_s}")


@dataclass(frozen=True)
class Timing:
    """Seconds per call: median over repeats, quartiles and extremes."""

    median_s: float
    q25_s: float
    q75_s: float
    min_s: float
    max_s: float
    repeats: int
    number: int  # calls per repeat
    buffers: int  # input sets rotated through

    @property
    def iqr_s(self) -> float:
        return self.q75_s - self.q25_s

    def as_dict(self) -> dict:
        return asdict(self)


def buffer_count(bytes_per_set: int, settings: TimingSettings) -> int:
    """How many input sets to rotate through: enough to exceed `rotation_bytes`, at least 2."""
    wanted = math.ceil(settings.rotation_bytes / max(1, bytes_per_set))
    return max(2, min(settings.max_buffers, wanted))


def summarise(per_call: Sequence[float], number: int, buffers: int) -> Timing:
    if not per_call:
        raise ValueError("no samples to summarise")
    ordered = sorted(per_call)
    if len(ordered) >= 2:
        q25, _, q75 = statistics.quantiles(ordered, n=4, method="inclusive")
    else:
        q25 = q75 = ordered[0]
    return Timing(
        median_s=statistics.median(ordered),
        q25_s=q25,
        q75_s=q75,
        min_s=ordered[0],
        max_s=ordered[-1],
        repeats=len(ordered),
        number=number,
        buffers=buffers,
    )


class _Clock:
    """Seconds elapsed over a block of work, on the device that does it."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def measure(self, work: Callable[[], None]) -> float:
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            work()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3
        started = time.perf_counter()
        work()
        return time.perf_counter() - started


def time_call(
    call: Callable[..., object], input_sets: Sequence[tuple], settings: TimingSettings, device: torch.device
) -> Timing:
    """Time `call(*inputs)`, cycling through `input_sets`."""
    if not input_sets:
        raise ValueError("input_sets is empty; give at least one set of inputs")
    clock = _Clock(torch.device(device))
    position = [0]

    def one_call():
        inputs = input_sets[position[0] % len(input_sets)]
        position[0] += 1
        call(*inputs)

    warmed, calls = 0.0, 0
    while calls < settings.warmup or warmed < settings.warmup_s:
        warmed += clock.measure(one_call)
        calls += 1
    # one call after the warm-up (first-call costs such as compilation paid) estimates the steady state
    calibration = clock.measure(one_call)
    estimate = max(calibration, 1e-7)
    number = max(1, math.ceil(settings.min_repeat_s / estimate))
    repeat_cost = estimate * number
    repeats = int(min(settings.max_repeats, max(settings.min_repeats, settings.budget_s // repeat_cost)))

    def block():
        for _ in range(number):
            one_call()

    # a slow call is timed one at a time, so the calibration call is already a valid first sample
    samples = [calibration] if number == 1 else []
    samples += [clock.measure(block) / number for _ in range(repeats - len(samples))]
    return summarise(samples, number, len(input_sets))


# ---------------------------------------------------------------- stability

# Quartile spread of a normal distribution is 1.349 standard deviations.
IQR_PER_SD = 1.349
# Repeats "disagree" when their sd exceeds this share of the median: on a quiet machine a
# steady case stays within a few percent; a scheduler stall or a page-fault storm goes past it.
UNSTABLE_RELATIVE_SD = 0.15
# Two timings of one code path "agree" when their log-ratio is within twice their combined
# relative sd, or within this floor: repeats taken seconds apart on a shared machine drift
# by a few percent even when each set is steady.
AGREEMENT_FLOOR = 0.10


def relative_sd(median_s: float, q25_s: float, q75_s: float) -> float:
    """The repeats' standard deviation as a share of the median, estimated from the quartiles."""
    if median_s <= 0:
        raise ValueError(f"median must be positive, got {median_s}")
    return (q75_s - q25_s) / IQR_PER_SD / median_s


def timing_relative_sd(timing: Timing) -> float:
    return relative_sd(timing.median_s, timing.q25_s, timing.q75_s)


def repeats_disagree(timing: Timing, limit: float = UNSTABLE_RELATIVE_SD) -> bool:
    return timing_relative_sd(timing) > limit


def agree(median_a: float, sd_a: float, median_b: float, sd_b: float, floor: float = AGREEMENT_FLOOR) -> bool:
    """Whether two timings of the same code path agree within their spread (sd_* relative to the median)."""
    if median_a <= 0 or median_b <= 0:
        raise ValueError(f"medians must be positive, got {median_a}, {median_b}")
    combined = math.hypot(sd_a, sd_b)
    return abs(math.log(median_a / median_b)) <= max(2 * combined, floor)


def ratio_relative_sd(sd_a: float, sd_b: float) -> float:
    """Relative sd of a ratio of two independent timings (first order)."""
    return math.hypot(sd_a, sd_b)


# ---------------------------------------------------------------- device time

DEVICE_TIME_CALLS = 10  # calls profiled per case: enough to average, few enough to cost nothing beside the timing
DEVICE_TIME_NOTE_CPU = (
    "device time is the sum of GPU kernel durations from torch.profiler, per call; on CPU the host does the work "
    "itself, so there is no separate device time and only wall time is recorded"
)


def device_seconds(events, calls: int) -> float:
    """Seconds of device work per call: the durations of the profile's device-side events (kernels, memsets,
    copies; one stream, so they do not overlap), summed and divided by the calls profiled."""
    from torch.autograd import DeviceType

    if calls < 1:
        raise ValueError(f"calls must be >= 1, got {calls}")
    total_us = sum(e.time_range.elapsed_us() for e in events if e.device_type == DeviceType.CUDA)
    return total_us / 1e6 / calls


def device_time_s(call: Callable[..., object], input_sets: Sequence[tuple], device, calls: int = DEVICE_TIME_CALLS):
    """GPU kernel seconds per call of `call(*inputs)` (inputs rotated as time_call does); None off CUDA.

    Beside the wall time it tells a host-bound case (wall >> device) from a device-bound one (wall ~ device)."""
    if torch.device(device).type != "cuda":
        return None
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as trace:
        for i in range(calls):
            call(*input_sets[i % len(input_sets)])
        torch.cuda.synchronize()
    return device_seconds(trace.events(), calls)
