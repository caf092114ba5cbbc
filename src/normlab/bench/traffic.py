"""The bytes a norm must move, and how many passes over memory a kernel strategy makes.

A norm over rows of length d is memory bound: the arithmetic per element is a
handful of flops, so its speed limit is set by the bytes that cross the memory
bus. This module holds the formula for the *minimum* traffic (what any
implementation must read and write) and the pass counts of the kernel
strategies the study compares. Measured traffic of real implementations comes
from `normlab.bench.passes`, which traces the ops they actually run.

A "pass" is one full-size tensor (rows x d, in x's dtype) read or written. A
copy makes 2 passes (read x, write y); so does any fused forward norm whose
row fits on chip.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

NORMS = ("layer", "rms")
DIRECTIONS = ("forward", "forward+backward")
STATISTICS_BYTES = 4  # mean and rstd are saved in float32 whatever x's dtype


def element_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def saved_statistics(norm: str) -> int:
    """How many per-row float32 statistics the forward saves for the backward: LN keeps mean and rstd, RMS rstd."""
    _check_norm(norm)
    return 2 if norm == "layer" else 1


def parameter_vectors(norm: str) -> int:
    """Per-feature parameter vectors: LN has weight and bias, RMS only weight."""
    _check_norm(norm)
    return 2 if norm == "layer" else 1


def _check_norm(norm: str) -> None:
    if norm not in NORMS:
        raise ValueError(f"unknown norm {norm!r}; valid norms: {', '.join(NORMS)}")


@dataclass(frozen=True)
class Traffic:
    """Minimum bytes read and written by one call, split so a reader can see where they go."""

    activations: int  # x, y (and dy, dx in the backward)
    parameters: int  # weight, bias (and their gradients in the backward)
    statistics: int  # saved per-row statistics written by the forward, read by the backward

    @property
    def total(self) -> int:
        return self.activations + self.parameters + self.statistics


def must_move(
    norm: str, direction: str, rows: int, d: int, dtype: torch.dtype, param_dtype: torch.dtype | None = None
) -> Traffic:
    """Bytes that any implementation must move.

    forward:            read x, write y, read the parameters.
    forward+backward:   the forward (also writing the saved statistics), then
                        read dy, x, the parameters and the statistics, write dx
                        and the parameter gradients.
    """
    _check_norm(norm)
    if direction not in DIRECTIONS:
        raise ValueError(f"unknown direction {direction!r}; valid directions: {', '.join(DIRECTIONS)}")
    if rows < 1 or d < 1:
        raise ValueError(f"rows and d must be positive, got rows={rows}, d={d}")
    size = element_size(dtype)
    param_size = element_size(param_dtype or dtype)
    tensor = rows * d * size
    vectors = parameter_vectors(norm) * d * param_size
    if direction == "forward":
        return Traffic(activations=2 * tensor, parameters=vectors, statistics=0)
    stats = saved_statistics(norm) * rows * STATISTICS_BYTES
    # forward: x, y, params, stats written; backward: dy, x, dx, params read, param grads written, stats read
    return Traffic(activations=5 * tensor, parameters=3 * vectors, statistics=2 * stats)


def copy_bytes(rows: int, d: int, dtype: torch.dtype) -> int:
    """A same-size copy reads x once and writes it once."""
    return 2 * rows * d * element_size(dtype)


def minimum_passes(direction: str) -> int:
    """Full-size tensor passes a perfectly fused implementation makes (parameters and statistics excluded)."""
    return 2 if direction == "forward" else 5


# Forward passes over a full-size tensor by kernel strategy. "persistent": the
# whole row is held on chip, read once. "chunked": the row is too long for the
# chip, so every statistic sweep re-reads it from memory before the final
# normalise-and-write sweep.
KERNEL_STRATEGY_PASSES = {
    ("layer", "persistent"): 2,  # read x (mean and variance from registers), write y
    ("rms", "persistent"): 2,
    ("layer", "chunked two-pass"): 4,  # sweep for the mean, sweep for the variance, sweep to normalise, write
    ("layer", "chunked welford"): 3,  # one sweep with two running accumulators, sweep to normalise, write
    ("rms", "chunked"): 3,  # one sweep for the mean square, sweep to normalise, write
}


def strategy_passes(norm: str, strategy: str) -> int:
    try:
        return KERNEL_STRATEGY_PASSES[(norm, strategy)]
    except KeyError:
        valid = sorted({s for (n, s) in KERNEL_STRATEGY_PASSES if n == norm})
        raise ValueError(f"unknown strategy {strategy!r} for norm {norm!r}; valid: {', '.join(valid)}") from None


def effective_passes(time_s: float, copy_time_s: float) -> float:
    """Full-size passes the measured time is worth, if the copy's 2 passes set the rate."""
    return 2.0 * time_s / copy_time_s


def bandwidth(bytes_moved: int, time_s: float) -> float:
    """Achieved bandwidth in GB/s (10^9 bytes per second)."""
    if time_s <= 0:
        raise ValueError(f"time must be positive to give a bandwidth, got {time_s}")
    return bytes_moved / time_s / 1e9
