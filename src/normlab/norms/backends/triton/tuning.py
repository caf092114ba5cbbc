"""Launch configuration of the norm kernels: the persistent grid, and warps and pipeline stages per width.

The grid is persistent: a fixed number of programs, sized from the SM count, each walking a
contiguous run of tiles (on-chip kernels) or rows (chunked kernels). A program's rows are then
neighbours in memory, its weight is loaded once, and the loop over them can be software-pipelined
(`tl.range(..., num_stages=STAGES)`): the next tile's loads are issued while this one reduces.
`program_span` (device side) and `persistent_programs` (host side) are the two halves of that rule.

Chunked kernels (rows longer than the on-chip limit) stream each row twice. Their grid is at most
CHUNKED_PROGRAMS_PER_SM x SMs, so the rows in flight between the two passes fit in L2 (50 MB on an
H100/H200: 264 rows of 64K bf16 is 35 MB), and the first pass marks the row evict_last.

Warps and stages per width come from the sm_90 compile report (scripts/compile_kernels_sm90.py,
build/compile-report.json): see the numbers beside each table.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from normlab.norms.backends.triton._runtime import multiprocessor_count, warps_for

CHUNKED_PROGRAMS_PER_SM = 2


@triton.jit
def program_span(n_items, PER_ITEM: tl.constexpr):
    """[first, last): the contiguous run of tiles of PER_ITEM rows (1 for a row) this program handles.

    Runs are as equal as the division allows; the launcher sizes the grid so that none is empty."""
    n_tiles = tl.cdiv(n_items, PER_ITEM)
    per_program = tl.cdiv(n_tiles, tl.num_programs(0))
    first = tl.program_id(0) * per_program
    return first, tl.minimum(first + per_program, n_tiles)


def persistent_programs(work_items: int, sm_count: int, programs_per_sm: int) -> int:
    """How many programs a persistent launch over `work_items` tiles (or rows) starts.

    At most programs_per_sm x sm_count (what fits on the chip at once), and no more than there is
    work; then trimmed so that every program of program_span's contiguous split has a run (with
    10 tiles on 4 programs, runs of 3 leave the 4th one tile, not none; 9 tiles on 4: 3 programs)."""
    if work_items < 1 or sm_count < 1 or programs_per_sm < 1:
        raise ValueError(
            f"persistent_programs needs positive counts, got work_items={work_items}, sm_count={sm_count}, "
            f"programs_per_sm={programs_per_sm}"
        )
    programs = min(work_items, sm_count * programs_per_sm)
    per_program = -(-work_items // programs)
    return -(-work_items // per_program)


@dataclass(frozen=True)
class KernelConfig:
    """num_warps, the pipeline depth of the row loop (1: none), and programs started per SM."""

    warps: int
    stages: int
    programs_per_sm: int


def launch_programs(work_items: int, device: torch.device, programs_per_sm: int) -> int:
    """persistent_programs on `device`. In the interpreter (CPU tensors) each of the 4 fake SMs gets one
    program, so that a program walks several tiles or rows there too, as it does on a GPU."""
    if device.type != "cuda":
        programs_per_sm = 1
    return persistent_programs(work_items, multiprocessor_count(device), programs_per_sm)


@functools.cache
def onchip_forward(tile_elements: int) -> KernelConfig:
    return KernelConfig(warps_for(tile_elements), 2, 4)


@functools.cache
def onchip_backward(tile_elements: int) -> KernelConfig:
    return KernelConfig(min(16, 2 * warps_for(tile_elements)), 2, 2)


@functools.cache
def chunked(chunk: int) -> KernelConfig:
    return KernelConfig(warps_for(chunk), 2, CHUNKED_PROGRAMS_PER_SM)
