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
build/compile-report.json): see the numbers beside each table. Where a committed sweep measured the
kernel variants on the target GPU (scripts/gpu_sweep.py, data/triton-sweep-N.jsonl), tuning_table.py
generates measured.json beside this file, and its winners replace those guesses at the widths it
timed: TABLE_SOURCE says which the table is.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

import torch
import triton
import triton.language as tl

from normlab.norms.backends.triton._runtime import multiprocessor_count, warps_for

CHUNKED_PROGRAMS_PER_SM = 2


# Shared memory a pipelined loop's buffers may take (sm_90: 227 KiB a CTA; the rest is the reductions' scratch).
PIPELINE_SHARED_BUDGET = 200 * 1024


def _pipeline_depth(stages, *streams):
    """Triton's num_stages for a row loop of STAGES (KernelConfig.stages): 1, no pipelining; 2, the next tile's
    loads in flight while this one is reduced, normalised and stored.

    The loops consume their loads at the top of the body, so Triton's num_stages=2 gives one buffer per stream,
    issues the next copy after this tile's stores and waits for it (async_wait {num = 0}) before any work: no
    overlap (scripts/compile_kernels_sm90.py --schedule reads it from the TTGIR). num_stages=3 gives two buffers
    and an async_wait that leaves the next tile's copies in flight. So stages s > 1 compile as num_stages s + 1,
    unless s buffers of the loop's streams would pass PIPELINE_SHARED_BUDGET: then 1 (the compile check reports
    that loop as not overlapped). `streams`: per stream the loop loads, four values: its elements per tile, its
    element type, and two flags, both true when the loop loads it. (One constexpr function: the sum of two
    constexpr functions' results is a tensor in a jitted function, not a constant.)"""
    value = lambda x: getattr(x, "value", x)  # noqa: E731
    stages = value(stages)
    stage_bytes = 0
    for i in range(0, len(streams), 4):
        elements, dtype, present, also = (value(v) for v in streams[i : i + 4])
        if present and also:
            stage_bytes += elements * dtype.primitive_bitwidth // 8
    # A constexpr, so that it stays a constant when a jitted function assigns it to a name.
    return tl.constexpr(1 if stages <= 1 or stages * stage_bytes > PIPELINE_SHARED_BUDGET else stages + 1)


def _step_pipeline_depth(stages, *streams):
    """Triton's num_stages for a chunked kernel's one loop over (row, pass, chunk) steps (norm_kernels.
    backward_chunked): `stages` itself, or 1 where `stages` buffers of its streams would pass PIPELINE_SHARED_BUDGET.

    Unlike a row loop, that loop copies a step's chunks into registers at its top and then issues the next step's
    copies, waiting at the partial-line load with async_wait {num > 0}: num_stages=2 already keeps the next step in
    flight while this one computes, with one buffer per stream consumed at the top (two for those consumed in a
    pass's branch); num_stages=3 would take a third buffer for those (layer fp32 with ds: 256 KiB, no fit).
    `streams` as for _pipeline_depth."""
    value = lambda x: getattr(x, "value", x)  # noqa: E731
    stages = value(stages)
    stage_bytes = 0
    for i in range(0, len(streams), 4):
        elements, dtype, present, also = (value(v) for v in streams[i : i + 4])
        if present and also:
            stage_bytes += elements * dtype.primitive_bitwidth // 8
    return tl.constexpr(1 if stages <= 1 or stages * stage_bytes > PIPELINE_SHARED_BUDGET else stages)


# Triton 3.4 and later call a plain Python function from a kernel only when it is marked a constexpr function; the
# older releases of the tested range (triton 3.2 beside torch 2.6) have no such mark and call it as it is.
pipeline_depth = (
    triton.constexpr_function(_pipeline_depth) if hasattr(triton, "constexpr_function") else _pipeline_depth
)
step_pipeline_depth = (
    triton.constexpr_function(_step_pipeline_depth) if hasattr(triton, "constexpr_function") else _step_pipeline_depth
)


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
    """num_warps, the pipeline depth of the row loop (1: none), and programs started per SM.

    The other fields are the kernel variants the sweep times (variants.py, scripts/gpu_sweep.py); their
    defaults are the kernels the table picks."""

    warps: int
    stages: int
    programs_per_sm: int
    one_tile_per_program: bool = False  # a grid of one program per tile (or row), not a persistent one
    rows: int | None = None  # on-chip tile height, instead of TILE_ELEMENTS // width
    reload: bool = False  # forward: read the tile again after the reduction; backward: load the weight per tile
    group: int = 1  # chunked backward: rows of chunk / group elements per tile, their dweight summed on chip
    registers: int | None = None  # ptxas's register budget a thread (Triton's maxnreg); None: ptxas's own choice


MEASURED_TABLE = Path(__file__).with_name("measured.json")
REGISTER_COUNTS = "set from register counts in the sm_90 compile report; no sweep has been committed"


def _measured() -> tuple[str, dict[tuple, KernelConfig]]:
    """(where the table comes from, {(kind, direction, path, element size, elements): measured winner})."""
    if not MEASURED_TABLE.exists():
        return REGISTER_COUNTS, {}
    document = json.loads(MEASURED_TABLE.read_text())
    entries = {
        (e["kind"], e["direction"], e["path"], e["element_size"], e["elements"]): KernelConfig(**e["config"])
        for e in document["entries"]
    }
    return f"measured: {document['source']}", entries


TABLE_SOURCE, MEASURED = _measured()


def launch_programs(work_items: int, device: torch.device, programs_per_sm: int) -> int:
    """persistent_programs on `device`. In the interpreter (CPU tensors) each of the 4 fake SMs gets one
    program, so that a program walks several tiles or rows there too, as it does on a GPU."""
    if device.type != "cuda":
        programs_per_sm = 1
    return persistent_programs(work_items, multiprocessor_count(device), programs_per_sm)


# The numbers below are from the sm_90 compile report (scripts/compile_kernels_sm90.py --quick, triton 3.6,
# every flag on: the heaviest variant), as registers per thread -> CTAs per SM; programs per SM is set to
# at most what fits at once, so the persistent grid runs in one wave (the script fails otherwise).
# Pipeline: 2 stages (the next tile's loads in flight while this one reduces) while a tile is at most
# 32 KiB; above that 1 (fp32 at 16K: x, residual, weight and bias buffers would pass 228 KiB of shared memory).
# Tile elements are ROWS x BLOCK (launch._tile: 4096 for rows up to 4096 wide, one row above that).

# On-chip forward, (programs per SM for 2-byte, 4-byte inputs) by tile elements, warps = warps_for(tile):
#   rms   4096: bf16 48-64 regs -> 4-5 CTAs, fp32 56-76 -> 3-4; 8192: bf16 46 -> 2, fp32 52 -> 2 (16 warps);
#         16384 (32 warps, the weight held): 51-60 -> 1.
#   layer 4096: bf16 48-79 -> 3-5, fp32 64-79 -> 3; 8192: bf16 61 -> 2, fp32 92 -> 1; 16384 (32 warps): 64 -> 1.
_FORWARD_PROGRAMS = {
    "rms": {4096: (4, 3), 8192: (2, 1), 16384: (1, 1)},
    "layer": {4096: (3, 2), 8192: (1, 1), 16384: (1, 1)},
}
# Packed tiles (ROWS > 1 rows of d < 4096, launch._tile), --schedule: rms bf16/fp16 with a residual 67-76 registers
# at 8 warps -> 3 CTAs; fp32 with a residual at d = 256, 512: 96 -> 2 (4 and 3 were started: 14 misfits).
_PACKED_FORWARD_PROGRAMS = {"rms": (3, 2), "layer": (3, 2)}
# (Re-read from scripts/compile_kernels_sm90.py --schedule with the pipelined loops, two buffers a stream and the
# weight held across the loop: rms fp32 8192 fused takes 128 KiB of buffers -> 1; layer fp32 4096 fused 80-87
# registers -> 2; layer bf16 8192 93-99 registers at 16 warps -> 1.)
# On-chip backward: 16 warps at every tile (half the values per thread of the forward), 64-126 registers:
# 1 CTA per SM (rms fp32 1x4096, 64 registers, fits 2; not worth a table entry).
_BACKWARD_PROGRAMS_PER_SM = 1
# Chunked (chunk 4096), capped at CHUNKED_PROGRAMS_PER_SM for L2:
#   rms forward, 8 warps: bf16 64 regs -> 4, fp32 98 -> 2. layer forward at 8 warps spilled 8 bytes (fp32,
#   Welford, residual: 64 registers); at 16 warps it needs 64 with no spill -> 2.
#   The forward's one loop over (row, pass, chunk) steps keeps the next step's chunks in flight in two buffers a
#   stream (--schedule, d = 32768): rms fp32 with a residual takes 160 KiB of shared memory, layer fp32 128-192
#   KiB, bf16 x with an fp32 weight and a residual 128 KiB -> 1 CTA; rms bf16 fits 2, but at the 128 registers
#   of 2 it spills 64-624 B, at 1 it takes 124-156 and none. One program an SM has 48-96 KiB of loads in flight,
#   above the 25 KiB an H200 SM needs (bench.compiled_schedule.NEEDED_IN_FLIGHT).
#   backward, 8 warps: rms bf16 66 -> 3, fp32 141 -> 1; layer bf16 121 -> 2, fp32 151 -> 1.
_CHUNKED_FORWARD_WARPS = {"rms": 8, "layer": 16}  # at chunk 4096; scaled with the chunk
_CHUNKED_FORWARD_PROGRAMS = 1
_CHUNKED_BACKWARD_PROGRAMS = (2, 1)
# The tile below which launch._tile packs several rows (launch.TILE_ELEMENTS), and the warps a tile of it gets.
_PACKED_TILE, _PACKED_WARPS = 4096, {"forward": 8, "backward": 16}


def _stages(tile_elements: int, element_size: int) -> int:
    # 2 (the next tile's loads in flight) everywhere: the kernels fall back to 1 where two buffers of their
    # streams would not fit in shared memory (tuning.pipeline_depth), and the compile check reports it.
    return 2


def _row_warps(direction: str, tile_elements: int, element_size: int) -> int:
    """Warps for an on-chip tile, such that a row's reduction is the same whatever the row count.

    launch._tile packs 4096 // d rows into a tile, fewer when the batch has fewer rows, so the tile size (and
    with it, before, the warps) changed with the batch, and with the warps the layout of a row across them:
    a row of d elements spans min(warps, d * size / 512) warps (16-byte vectors, 32 threads a warp). Giving a
    tile min(cap, tile * size / 512) warps, the row spans min(cap, d * size / 512) warps at any row count (the
    tile is at least the row), so its summation order depends only on d and the dtype. The cap is the warps the
    full packed tile had before (8 forward, 16 backward), so the large-batch launches keep their layout; tiles
    of one row wider than the packed tile keep warps_for's choice (no row count enters them)."""
    if tile_elements > _PACKED_TILE:
        warps = warps_for(tile_elements)
        # a forward row of 16K takes 32 warps: holding its weight across the row loop then costs 16 registers a
        # thread, and the loop's only streams are x and the residual (64 regs, no spill; at 16 warps, 32 and a
        # spill, or the weight per row from L2 in shared memory the pipeline needs: no overlap)
        return max(warps, tile_elements // (32 * 16)) if direction == "forward" else min(16, 2 * warps)
    vectors = max(1, tile_elements * element_size // (16 * 32))
    return min(_PACKED_WARPS[direction], 1 << (vectors - 1).bit_length())


def register_budget(warps: int, programs_per_sm: int) -> int:
    """The registers a thread may use so that `programs_per_sm` CTAs of `warps` warps fit on an sm_90 SM (65536
    registers, allocated per warp in units of 256; at most 255 a thread), a multiple of 8.

    Without it ptxas picks its own target, and for the chunked forwards it aims at more CTAs than the table
    starts (64 registers at 8 warps: 4 CTAs; 40 at 16 warps: 3) and spills a loop-invariant predicate word
    (4-8 B: rms fp16 at 8 warps, layer bf16 x / fp32 w at 16 warps, scripts/compile_kernels_sm90.py
    --schedule). Given the budget the table's occupancy leaves, ptxas keeps them in registers (92 and 56); the
    instructions are the same (their FADD/FFMA/FMUL counts in the SASS match), only the allocation changes."""
    return min(255, 65536 // (warps * 32 * programs_per_sm) // 8 * 8)


def _by_size(pair: tuple[int, int], element_size: int) -> int:
    return pair[0] if element_size <= 2 else pair[1] if element_size == 4 else 1


@functools.cache
def onchip_forward(kind: str, tile_elements: int, element_size: int, rows: int = 1) -> KernelConfig:
    """The on-chip forward kernels' launch for a tile of `tile_elements` (ROWS x BLOCK, `rows` = ROWS) and this
    input size."""
    measured = MEASURED.get((kind, "forward", "onchip", element_size, tile_elements))
    if measured is not None:
        return measured
    table = _FORWARD_PROGRAMS[kind]
    programs = table[min((t for t in table if t >= tile_elements), default=max(table))]
    if rows > 1:
        programs = _PACKED_FORWARD_PROGRAMS[kind]
    return KernelConfig(
        _row_warps("forward", tile_elements, element_size),
        _stages(tile_elements, element_size),
        _by_size(programs, element_size),
    )


@functools.cache
def onchip_backward(kind: str, tile_elements: int, element_size: int) -> KernelConfig:
    measured = MEASURED.get((kind, "backward", "onchip", element_size, tile_elements))
    if measured is not None:
        return measured
    return KernelConfig(
        _row_warps("backward", tile_elements, element_size),
        _stages(tile_elements, element_size),
        _BACKWARD_PROGRAMS_PER_SM,
    )


@functools.cache
def chunked_forward(kind: str, chunk: int, element_size: int) -> KernelConfig:
    measured = MEASURED.get((kind, "forward", "chunked", element_size, chunk))
    if measured is not None:
        return measured
    warps = warps_for(chunk) if _CHUNKED_FORWARD_WARPS[kind] == 8 else min(16, 2 * warps_for(chunk))
    programs = _CHUNKED_FORWARD_PROGRAMS
    return KernelConfig(warps, _stages(chunk, element_size), programs, registers=register_budget(warps, programs))


@functools.cache
def chunked_backward(kind: str, chunk: int, element_size: int, width: int | None = None) -> KernelConfig:
    """The chunked backward's launch for chunks of `chunk` elements of this input size. With the row `width`: at
    most as many programs an SM as keep every program's row of s and dy in L2 between the two passes (at least 1:
    a 64K bf16 row takes 1, a 64K fp32 row passes L2 even then), and the rows each step streams (`rows_per_step`)."""
    measured = MEASURED.get((kind, "backward", "chunked", element_size, chunk))
    if measured is not None:
        return measured
    # layer bf16 with ds: 128 KiB of chunk buffers once the chunk loops keep a chunk in flight -> 1
    pair = _CHUNKED_BACKWARD_PROGRAMS if kind == "rms" else (1, 1)
    programs = min(CHUNKED_PROGRAMS_PER_SM, _by_size(pair, element_size))
    # One loop over (row, pass, chunk) steps holds both passes' code: rms bf16 needs 142-144 registers at 8 warps
    # unbounded (1 CTA), 122 with the budget of the 2 programs started (no spill, scripts/compile_kernels_sm90.py).
    warps = warps_for(chunk)
    group = 1
    if width is not None:
        programs = max(1, min(programs, rows_in_l2_per_sm(width, element_size)))
        group = rows_per_step(programs, width, element_size)
    return KernelConfig(
        warps, _stages(chunk, element_size), programs, registers=register_budget(warps, programs), group=group
    )


# The chunked backward reads and rewrites its program's dweight line, and reads the weight, once per step of its second
# pass; streaming GROUP rows a step divides that by GROUP (at 16K in bf16 its L2 traffic is 3.7x its HBM traffic a
# row at 1 row a step, 2.7x at 2 and 2.2x at 4: scripts/compile_kernels_sm90.py --schedule). But the rows' s and dy
# must stay in L2 between the two passes, for every program at once: at most SM90_L2_BYTES.
SM90_SMS, SM90_L2_BYTES, MAX_ROWS_PER_STEP = 132, 50 * 10**6, 4


def rows_in_l2_per_sm(width: int, element_size: int) -> int:
    """How many rows of s and dy each SM of an sm_90 GPU may hold between the chunked backward's passes, all SMs at
    once, within its L2."""
    return SM90_L2_BYTES // (SM90_SMS * width * 2 * element_size)


def rows_per_step(programs_per_sm: int, width: int, element_size: int) -> int:
    """The chunked backward's GROUP: the most rows a step (up to MAX_ROWS_PER_STEP, a power of two) whose s and dy,
    for every program of an sm_90 GPU, fit in its L2 (16K: 2, or 4 for one 2-byte program an SM; 32K: 1 or 2)."""
    group = MAX_ROWS_PER_STEP
    while group > 1 and programs_per_sm * group > rows_in_l2_per_sm(width, element_size):
        group //= 2
    return group


@functools.cache
def backward_onchip_limit(kind: str, element_size: int, default: int) -> int:
    """The widest row the backward keeps on chip: `default`, or wider where the sweep measured on chip faster."""
    wider = [key[4] for key in MEASURED if key[:4] == (kind, "backward", "onchip", element_size)]
    return max([default, *wider])
