"""The compiled schedule of the norm kernels on an H100/H200 (sm_90), read from Triton's output without a GPU.

Triton ships ptxas, so lowering a kernel to a cubin for sm_90 needs no device. For each configuration the tuning
table picks (what launch.py launches for `rows` rows of width d), `schedule` compiles the kernel as the launcher
specialises it (pointers 16-byte aligned, widths and strides divisible by 16) and reads ptxas's log and the TTGIR:

* registers per thread and the bytes of register spill stores and loads (ptxas -v); shared memory per program;
* CTAs per SM on sm_90: 65536 registers (allocated per warp in units of 256), 228 KiB of shared memory (plus 1 KiB
  reserved per CTA), at most 32 CTAs and 64 warps;
* whether the persistent loop keeps the next row's loads in flight while it works on this one (read from the
  compiled code, not from the config), the bytes a row moves from HBM and from L2, and the predicted fraction of a
  same-size copy's speed (`predict`); whether a row's reduction layout changes with the row count.

The kernels must be defined without TRITON_INTERPRET (the CPU tests and chapters run Triton in its interpreter), so
`schedule` compiles in a fresh Python process unless told that this one is clean (the CLI,
scripts/compile_kernels_sm90.py, which drops the variable before anything imports Triton). Where sm_90 cannot be
compiled at all (no Triton, no CUDA backend, no ptxas), `unavailable()` says why in one sentence and `schedule`
returns no records with that sentence.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

TARGET = ("cuda", 90, 32)  # GPUTarget's backend, compute capability, warp size
IO_POINTERS = "X R W B Y S DY DS DX DW DB".split()
STAT_POINTERS = "STAT RSTD DW_PARTIAL DB_PARTIAL MS MEAN".split()  # MS, MEAN: the 12a0522 kernels' (old_kernels.py)
PARAM_POINTERS = ("W", "B", "DW", "DB")  # the parameters and their gradients, in the parameters' dtype
# The dtypes compiled: (x's, the statistics', the weight's or None for x's, x's element size for tuning.py)
DTYPES = {
    "fp16": ("fp16", "fp32", None, 2),
    "bf16": ("bf16", "fp32", None, 2),
    "bf16 x, fp32 w": ("bf16", "fp32", "fp32", 2),
    "fp32": ("fp32", "fp32", None, 4),
    "fp64": ("fp64", "fp64", None, 8),
}
FLOAT_SCALARS = ("eps", "offset")
# norm_kernels' two norms: the switches each one's launches pass (the other norm's feature off)
RMS = dict(CENTRED=False, HAS_BIAS=False)
LAYER = dict(CENTRED=True, EPS_INSIDE=True)
# Row counts are never specialised (do_not_specialize); neither is a chunked kernel's stat_end (K may be odd).
UNSPECIALISED = ("n_rows", "programs", "stat_end", *FLOAT_SCALARS)

# sm_90 limits per SM (CUDA occupancy calculator, compute capability 9.0).
REGISTERS_PER_SM, REGISTER_UNIT, SHARED_PER_SM, SHARED_RESERVED = 65536, 256, 228 * 1024, 1024
MAX_CTAS_PER_SM, MAX_WARPS_PER_SM = 32, 64


def ctas_per_sm(registers: int, warps: int, shared: int) -> dict:
    """CTAs resident per SM and the resource that bounds them."""
    per_warp = -(-registers * 32 // REGISTER_UNIT) * REGISTER_UNIT
    bounds = {
        "registers": REGISTERS_PER_SM // (per_warp * warps),
        "shared memory": SHARED_PER_SM // (shared + SHARED_RESERVED),
        "warps": MAX_WARPS_PER_SM // warps,
        "CTA slots": MAX_CTAS_PER_SM,
    }
    limit = min(bounds, key=bounds.get)
    return {"ctas_per_sm": bounds[limit], "bound_by": limit}


def compile_kernel(kernel, io_dtype, stat_dtype, constexprs, warps, param_dtype=None, ttgir=False, registers=None):
    """Compiles one variant for sm_90; returns its resource usage. `param_dtype`: the weight's and bias's dtype
    when it is not x's (bf16 x with fp32 weights, the usual mixed-precision case); `registers`: the config's
    register budget (maxnreg), as the launcher passes it."""
    if "heads" in kernel.arg_names:  # rows as (token, head) pairs: 1 head, as every launch but a per-head QK-norm
        constexprs = dict(constexprs, heads=1)  # (Triton specialises an integer argument of 1 to a constant)
    signature, attrs = {}, {}
    for index, name in enumerate(kernel.arg_names):
        if name in constexprs:
            signature[name] = "constexpr"
            continue
        if name in PARAM_POINTERS and param_dtype is not None:
            signature[name] = f"*{param_dtype}"
        elif name in IO_POINTERS:
            signature[name] = f"*{io_dtype}"
        elif name in STAT_POINTERS:
            signature[name] = f"*{stat_dtype}"
        else:
            signature[name] = "fp32" if name in FLOAT_SCALARS else "i32"
        if name not in UNSPECIALISED:
            attrs[(index,)] = [["tt.divisibility", 16]]
    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    source = ASTSource(kernel, signature, constexprs=constexprs, attrs=attrs)
    log = io.StringIO()
    knobs.nvidia.dump_ptxas_log = True  # Triton runs ptxas -v anyway; this prints its log, which we read
    knobs.compilation.always_compile = True  # a cached kernel would skip ptxas, and so its log
    with contextlib.redirect_stdout(log):
        compiled = triton.compile(source, target=GPUTarget(*TARGET), options={"num_warps": warps, "maxnreg": registers})
    ptxas = log.getvalue()
    registers = int(re.search(r"Used (\d+) registers", ptxas).group(1))
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", ptxas)
    shared = compiled.metadata.shared
    usage = {
        "registers": registers,
        "spill_stores": int(spills.group(1)) if spills else 0,
        "spill_loads": int(spills.group(2)) if spills else 0,
        "shared_bytes": shared,
        "async_copies": compiled.asm["ttgir"].count("async_copy_global_to_local"),
        **ctas_per_sm(registers, warps, shared),
    }
    return (usage, compiled.asm["ttgir"]) if ttgir else usage


# ---------------------------------------------------------------- the compiled schedule (--schedule)
#
# For the configurations the tuning table picks (what launch.py launches for `rows` rows of width d), read the
# compiled TTGIR for what the schedule does, not what the config asks for:
#
# * overlap: the persistent loop (the outermost scf.for) issues async copies for a later iteration and, at its
#   top, waits with ttg.async_wait {num > 0}, so the next row's (tile's) loads stay in flight while this one is
#   reduced, normalised and stored. With num = 0 (Triton's num_stages=2 on these loops) every copy is waited for
#   before any work: a load never overlaps a reduction. A chunked kernel's row loop holds its chunk loops; those
#   are reported as `chunk loops` (overlap within the row); the row loop itself overlaps only if it pipelines.
# * buffers: the leading dimension of each shared-memory buffer the pipeliner allocates (per stream).
# * bytes per row, from the loads and stores inside the persistent loop, traced back to the kernel's pointer
#   arguments: an op of E elements in a loop that runs k times per row moves E * k elements per row. L2 sees
#   every such access; HBM sees each row-streamed tensor once per row (written, or read when not written: a
#   chunked kernel's second read of its row comes from L2), and the weight, bias and dweight partial lines once
#   per program (their bytes x programs / rows). Loads of the weight outside the loop: once per program. The
#   chunked kernels walk (row, pass, chunk) steps in one loop (norm_kernels.backward_chunked, forward_chunked):
#   each op there runs once per chunk of a pass; a tensor read in several passes (_read_passes: s, dy and the
#   weight in the backward's two, x and the residual in each of the forward's) is read again from L2, through one
#   load op per eviction hint, each masked to its passes; every other access is masked or branched to one pass.
# * predicted fraction of a same-size copy (read x, write y: 2 d e bytes a row), with the model in `predict`; a
#   chunked kernel whose rows in flight between its passes (programs x rows a step x d x the tensors read again)
#   pass the L2 (tuning.SM90_L2_BYTES) reads them again from HBM (`rows_fit_in_l2` False), and the prediction counts
#   those bytes there.
# * batch invariance (on-chip kernels, whose tile height launch._tile clips to the row count): the layout along
#   the row of every row reduction (elements per thread, threads, warps along the columns) is compared between
#   the launch for `rows` rows and the launch for 1 row; a difference changes a row's summation order with the
#   batch size.

HBM_BYTES_PER_S = 4.8e12  # H200
L2_BYTES_PER_S = 1.5 * HBM_BYTES_PER_S  # assumed: H100/H200 L2 read bandwidth is measured at 1.3-1.8x HBM's
SMS = 132  # H200
LATENCY_S = 700e-9  # a loaded HBM access, ns: bytes in flight per SM needed = bandwidth per SM x latency
NEEDED_IN_FLIGHT = HBM_BYTES_PER_S / SMS * LATENCY_S
SCHEDULE_WIDTHS = [2**k for k in range(6, 17)]
SCHEDULE_DTYPES = ("bf16", "fp16", "fp32", "bf16 x, fp32 w")
ROW_STREAMED = ("X", "R", "Y", "S", "DY", "DS", "DX", "STAT", "RSTD")
ONCE_PER_PROGRAM = ("W", "B", "DW_PARTIAL", "DB_PARTIAL")
ELEMENT_BYTES = {"bf16": 2, "f16": 2, "f32": 4, "f64": 8, "i32": 4, "i64": 8}

_SSA = re.compile(r"%[\w.$-]+")


def _ssa(token: str) -> str:
    return token.split(":")[0].split("#")[0]


def _loops(lines):
    """[(start, end, indent, depth)] of every scf.for, end the index of its closing brace line."""
    loops, stack = [], []
    for index, line in enumerate(lines):
        indent = len(line) - len(line.lstrip())
        if " scf.for " in line:
            stack.append((index, indent))
        elif stack and line.lstrip().startswith("}") and indent == stack[-1][1] and "scf.for" not in line:
            start, ind = stack.pop()
            loops.append((start, index, ind, len(stack)))
    return sorted(loops)


def analyse_ttgir(ttgir: str) -> dict:
    """Loops, async waits, buffers, and each load/store op with the pointer arguments it derives from."""
    lines = ttgir.splitlines()
    header = next(line for line in lines if "tt.func public" in line)
    arguments = set(re.findall(r"%(\w+): !tt\.ptr", header))
    # Pointer provenance: a pointer value comes from its first operand through these ops, and a loop-carried one
    # from its initial value. SSA names repeat across sibling regions, so a use takes the nearest definition above.
    pointer_ops = ("tt.addptr", "tt.splat", "tt.broadcast", "tt.expand_dims", "tt.reshape", "ttg.convert_layout")
    definitions: dict[str, list[tuple[int, list[str]]]] = {}
    for index, line in enumerate(lines):
        body = line.split(" loc(")[0]
        if " scf.for " in body:  # iter_args(%a = %b, ...): the loop-carried value starts as %b
            for carried, initial in re.findall(r"(%[\w.$-]+) = (%[\w.$-]+)", body.split("iter_args", 1)[-1]):
                definitions.setdefault(carried, []).append((index, [initial]))
            continue
        if "=" not in body or body.lstrip().startswith("}"):
            continue
        left, right = body.split("=", 1)
        op = right.split()[0] if right.split() else ""
        operands = [_ssa(t) for t in _SSA.findall(right)][:1] if op in pointer_ops else []
        for result in _SSA.findall(left):
            definitions.setdefault(_ssa(result), []).append((index, operands))

    def roots(value: str, line: int) -> frozenset:
        found, stack, seen = set(), [(value, line)], set()
        while stack:
            v, at = stack.pop()
            if (v, at) in seen:
                continue
            seen.add((v, at))
            if v[1:] in arguments:
                found.add(v[1:])
                continue
            candidates = [d for d in definitions.get(v, ()) if d[0] < at] or definitions.get(v, [])[:1]
            if candidates:
                where, operands = max(candidates, key=lambda d: d[0])
                stack.extend((o, where + 1) for o in operands)
        return frozenset(found)

    loops = _loops(lines)
    ops = []
    for index, line in enumerate(lines):
        body = line.split(" loc(")[0]
        kind = next((k for k in ("ttg.async_copy_global_to_local", "tt.load", "tt.store") if f" {k} " in body), None)
        if kind is None:
            continue
        pointer = _ssa(_SSA.findall(body.split(kind, 1)[1])[0])
        typed = body.rsplit(" : ", 1)[-1]
        match = re.search(r"tensor<([\dx]+)x!tt\.ptr<(\w+)>", typed) or re.search(r"!tt\.ptr<(\w+)>", typed)
        if match is None:
            continue
        elements = 1
        if match.lastindex == 2:
            for n in match.group(1).split("x"):
                elements *= int(n)
        element = match.group(match.lastindex)
        enclosing = [loop for loop in loops if loop[0] < index < loop[1]]
        ops.append(
            dict(
                op="store" if kind == "tt.store" else "load",
                tensors=sorted(roots(pointer, index)),
                elements=elements,
                bytes=elements * ELEMENT_BYTES.get(element, 4),
                loops=[loop[0] for loop in enumerate_loops(enclosing)],
                line=index,
            )
        )
    waits = []
    for index, line in enumerate(lines):
        match = re.search(r"ttg\.async_wait .*\{num = (\d+)", line)
        if match:
            innermost = max((loop for loop in loops if loop[0] < index < loop[1]), default=None, key=lambda l: l[0])
            waits.append((innermost[0] if innermost else None, int(match.group(1))))
    copies = [
        (max((l for l in loops if l[0] < i < l[1]), default=None, key=lambda l: l[0]), i)
        for i, line in enumerate(lines)
        if "ttg.async_copy_global_to_local" in line
    ]
    buffers = [int(m) for m in re.findall(r"ttg\.local_alloc : \(\) -> !ttg\.memdesc<(\d+)x", ttgir)]
    overlap = {}
    for loop in loops:
        own_copies = any(c[0] is not None and c[0][0] == loop[0] for c in copies)
        own_waits = [num for start, num in waits if start == loop[0]]
        overlap[loop[0]] = bool(own_copies and own_waits and min(own_waits) > 0)
    reductions = []
    for index, line in enumerate(lines):
        if '"tt.reduce"' in line and "axis = 1" in line:
            closing = next(l for l in lines[index + 1 :] if l.lstrip().startswith("}) : ("))
            layout = re.search(r"\(tensor<[\dx]+x\w+, (#\w+)>", closing).group(1)
            definition = next(l for l in lines if l.startswith(layout + " = "))
            fields = {
                key: [int(v) for v in re.search(key + r" = \[([\d, ]+)\]", definition).group(1).split(",")]
                for key in ("sizePerThread", "threadsPerWarp", "warpsPerCTA")
            }
            reductions.append(tuple(values[-1] for values in fields.values()))
    return dict(loops=loops, ops=ops, overlap=overlap, buffers=buffers, waits=waits, row_reductions=reductions)


def enumerate_loops(enclosing):
    return sorted(enclosing)


def _launch_case(kind, direction, d, size, rows, residual=False):
    """(kernel, shape constexprs, config, path, tiles) as launch.py picks them for `rows` rows of width d (a forward
    with a residual where `residual`)."""
    launch, norm_kernels, tuning = _kernels()
    if (
        direction == "forward"
        and d <= launch._forward_onchip_limit(launch.ONCHIP_LIMIT, size, residual, None)
        or (direction == "backward" and d <= launch._backward_onchip_limit(kind, launch.ONCHIP_LIMIT, size, None))
    ):
        tile_rows, block = launch._tile(rows, d)
        if direction == "forward":
            config = tuning.onchip_forward(kind, tile_rows * block, size, tile_rows)
        else:
            config = tuning.onchip_backward(kind, tile_rows * block, size)
        tile_rows = launch._tile_rows(tile_rows, rows, config)
        kernel = getattr(norm_kernels, f"{direction}_onchip")
        shape = dict(ROWS=tile_rows, BLOCK=block, STAGES=config.stages, RELOAD=config.reload)
        return kernel, shape, config, "onchip", -(-rows // tile_rows), tile_rows
    chunk = launch._chunk(d, launch.CHUNK)
    if direction == "forward":
        config = tuning.chunked_forward(kind, chunk, size)
        shape = dict(CHUNK=chunk, STAGES=config.stages) | (dict(WELFORD=True) if kind == "layer" else {})
        return norm_kernels.forward_chunked, shape, config, "chunked", rows, 1
    config = tuning.chunked_backward(kind, chunk, size, d)
    shape = dict(GROUP=config.group, CHUNK=max(1, chunk // config.group), STAGES=config.stages)
    return norm_kernels.backward_chunked, shape, config, "chunked", -(-rows // config.group), config.group


FLAG_SETS = {
    ("rms", "forward"): {"plain": dict(RMS, HAS_RESIDUAL=False, HAS_WEIGHT=True, EPS_INSIDE=True),
                         "fused": dict(RMS, HAS_RESIDUAL=True, HAS_WEIGHT=True, EPS_INSIDE=True)},
    ("layer", "forward"): {"plain": dict(LAYER, HAS_RESIDUAL=False, HAS_WEIGHT=True, HAS_BIAS=True),
                           "fused": dict(LAYER, HAS_RESIDUAL=True, HAS_WEIGHT=True, HAS_BIAS=True)},
    ("rms", "backward"): {"plain": dict(RMS, HAS_DS=False, HAS_WEIGHT=True, EPS_INSIDE=True),
                          "fused": dict(RMS, HAS_DS=True, HAS_WEIGHT=True, EPS_INSIDE=True)},
    ("layer", "backward"): {"plain": dict(LAYER, HAS_DS=False, HAS_WEIGHT=True, HAS_BIAS=True),
                            "fused": dict(LAYER, HAS_DS=True, HAS_WEIGHT=True, HAS_BIAS=True)},
}  # fmt: skip


def _read_passes(kernel, constexprs) -> dict:
    """{tensor: passes of a row that read it} for a kernel whose persistent loop walks (row, pass, chunk) steps
    (norm_kernels.backward_chunked and forward_chunked); {} for the others. The chunked backward reads s, dy and
    the weight (the gain multiplies dy) in both of its passes; the chunked forward reads x and the residual in
    every pass: two, or three for LayerNorm's two-pass statistics."""
    kernels = _kernels()[1]
    if kernel is kernels.backward_chunked:
        return {"S": 2, "DY": 2, "W": 2}
    if kernel is kernels.forward_chunked:
        passes = 3 if constexprs.get("CENTRED") and not constexprs.get("WELFORD") else 2
        return {"X": passes, "R": passes}
    return {}


def _load_ops(analysis, loop, tensors) -> int:
    """The load ops in `loop` whose pointers come from `tensors`."""
    return sum(
        1 for op in analysis["ops"] if op["op"] == "load" and loop in op["loops"] and set(op["tensors"]) == tensors
    )


def _traffic(analysis, persistent, d, chunk, per_iteration_rows, programs, rows, pass_steps=0, read_passes=None):
    """(HBM bytes per row, L2 bytes per row, weight loaded per row?, load bytes per innermost iteration).

    pass_steps: where the persistent loop walks (row, pass, chunk) steps, the steps of one pass (0 otherwise);
    read_passes: then, the passes of a row that read each tensor (_read_passes)."""
    read_passes = read_passes or {}
    l2, hbm_tensors, weight_per_row, once, hbm_once = 0.0, {}, False, 0.0, 0.0
    iteration_loads: dict[int, float] = {}
    for op in analysis["ops"]:
        tensors = set(op["tensors"])
        in_loop = persistent is not None and persistent in op["loops"]
        if not in_loop:
            if op["op"] == "store":  # the partial lines (and their zeroing): once per program, to HBM at the end
                hbm_once += op["bytes"] * programs / rows
                once += op["bytes"] * programs / rows
            elif tensors & {"W", "B"}:  # the weight and bias: once per program from L2, once in all from HBM
                hbm_once += op["bytes"] / rows
                once += op["bytes"] * programs / rows
            continue
        nested = [start for start in op["loops"] if start != persistent and start > persistent]
        if not nested and any(
            other["op"] == op["op"]
            and other["tensors"] == op["tensors"]
            and other["elements"] == op["elements"]
            and any(start > persistent for start in other["loops"])
            for other in analysis["ops"]
        ):
            continue  # an inner loop's prologue, peeled by the pipeliner: its iterations are counted with the loop
        per_row = (1 / per_iteration_rows) * (-(-d // chunk) if nested else 1)
        if pass_steps and not nested:  # HBM sees one pass's reads; L2 every pass's that reads the tensor
            per_row = pass_steps / per_iteration_rows  # a step's tile holds per_iteration_rows rows (the GROUP)
            passes = max((read_passes.get(t, 1) for t in tensors), default=1) if op["op"] == "load" else 1
            # a tensor read in p passes by one load op counts p times; by n ops (each masked to its passes, to
            # carry their eviction hint), p / n times each
            l2 += op["bytes"] * per_row * (passes / _load_ops(analysis, persistent, tensors) if passes > 1 else 1)
        else:
            l2 += op["bytes"] * per_row
        if op["op"] == "load":
            key = max(op["loops"])
            iteration_loads[key] = iteration_loads.get(key, 0) + op["bytes"]
        if tensors & {"W", "B"} and op["op"] == "load":
            weight_per_row = True
        for tensor in tensors & set(ROW_STREAMED):
            previous = hbm_tensors.get(tensor)
            entry = (op["op"], op["bytes"] * per_row)
            if previous is None or (entry[0] == "store" and previous[0] == "load"):
                hbm_tensors[tensor] = entry
            elif entry[0] == previous[0] and entry[1] > previous[1]:
                hbm_tensors[tensor] = entry
    hbm = sum(b for _, b in hbm_tensors.values())
    hbm += hbm_once
    l2 += once
    return hbm, l2, weight_per_row, max(iteration_loads.values(), default=0.0)


def predict(copy_bytes, hbm, l2, in_flight):
    """Predicted time of a row relative to a copy of the same size (1.0: as fast as the copy).

    A row takes max(HBM bytes / HBM bandwidth, L2 bytes / L2 bandwidth), slowed by the share of the needed
    bytes in flight that the SM has (Little's law; the copy is taken to reach full bandwidth)."""
    time = max(hbm / HBM_BYTES_PER_S, l2 / L2_BYTES_PER_S) / min(1.0, in_flight / NEEDED_IN_FLIGHT)
    return (copy_bytes / HBM_BYTES_PER_S) / time


def schedule_case(kind, direction, d, label, flags_name, rows):
    io_dtype, stat_dtype, param_dtype, size = DTYPES[label]
    flags = FLAG_SETS[(kind, direction)][flags_name]
    residual = flags.get("HAS_RESIDUAL", False)
    kernel, shape, config, path, tiles, per_iteration_rows = _launch_case(kind, direction, d, size, rows, residual)
    constexprs = dict(flags, **shape)
    usage, ttgir = compile_kernel(
        kernel, io_dtype, stat_dtype, constexprs, config.warps, param_dtype, ttgir=True, registers=config.registers
    )
    analysis = analyse_ttgir(ttgir)
    loops = analysis["loops"]
    outer = [loop for loop in loops if loop[3] == 0]
    # the persistent loop: the outermost loop that contains the row-streamed stores (zeroing loops come first)
    persistent = next(
        (loop[0] for loop in outer
         if any(op["op"] == "store" and set(op["tensors"]) & set(ROW_STREAMED) and loop[0] in op["loops"]
                for op in analysis["ops"])),
        None,
    )  # fmt: skip
    inner = [loop for loop in loops if persistent is not None and loop[3] > 0 and loop[0] > persistent
             and loop[1] < next(l[1] for l in loops if l[0] == persistent)]  # fmt: skip
    programs = _kernels()[2].persistent_programs(tiles, SMS, config.programs_per_sm)
    chunk = shape.get("CHUNK", d)
    # the step loop's steps of one pass: the kernel's own count (a pass takes at least 2 steps)
    read_passes = _read_passes(kernel, constexprs)
    pass_steps = max(-(-d // chunk), 2) if read_passes else 0
    hbm, l2, weight_per_row, iteration_bytes = _traffic(
        analysis, persistent, d, chunk, per_iteration_rows, programs, rows, pass_steps, read_passes
    )
    resident = min(config.programs_per_sm, usage["ctas_per_sm"]) or 1
    overlap = bool(persistent is not None and analysis["overlap"].get(persistent))
    chunk_overlap = [analysis["overlap"][loop[0]] for loop in inner]
    depth = max(analysis["buffers"], default=1)
    pipelined = overlap or (chunk_overlap and all(chunk_overlap))
    in_flight = resident * iteration_bytes * (depth if pipelined else 0.5)
    element = ELEMENT_BYTES[{"fp16": "f16", "fp32": "f32", "fp64": "f64"}.get(io_dtype, io_dtype)]
    copy_bytes = 2 * d * element
    # A chunked kernel reads its rows' x (and residual), or s and dy, again in a later pass, from L2 while every
    # program's rows in flight fit in it; past that, the later passes read them from HBM.
    reread = [t for t in read_passes if t != "W" and (t != "R" or residual)]
    working_set = programs * per_iteration_rows * d * element * len(reread)
    fits_l2 = working_set <= _kernels()[2].SM90_L2_BYTES
    hbm_read = hbm if fits_l2 else hbm + d * element * sum(read_passes[t] - 1 for t in reread)
    record = dict(
        kind=kind,
        direction=direction,
        d=d,
        dtype=label,
        flags=flags_name,
        kernel=kernel.__name__,
        path=path,
        shape=shape_of(constexprs)
        if "CHUNK" not in constexprs
        else f"chunk {constexprs['CHUNK']}" + (f" x{constexprs['GROUP']}" if constexprs.get("GROUP", 1) > 1 else ""),
        warps=config.warps,
        stages=config.stages,
        programs_per_sm=config.programs_per_sm,
        programs=programs,
        **usage,
        overlap=overlap,
        chunk_loop_overlap=chunk_overlap,
        buffers=analysis["buffers"],
        async_waits=[num for _, num in analysis["waits"]],
        weight_per_row=weight_per_row,
        hbm_bytes_per_row=round(hbm, 1),
        l2_bytes_per_row=round(l2, 1),
        copy_bytes_per_row=copy_bytes,
        in_flight_per_sm=round(in_flight),
        l2_working_set_bytes=working_set,
        rows_fit_in_l2=fits_l2,
        ideal_fraction=round(copy_bytes / hbm, 3),
        predicted_fraction=round(predict(copy_bytes, hbm_read, l2, in_flight), 3),
        row_reduction_layout=analysis["row_reductions"],
    )
    if path == "onchip" and shape["ROWS"] > 1:  # the same row launched alone: its reduction must not change
        kernel1, shape1, config1, *_ = _launch_case(kind, direction, d, size, 1, residual)
        constexprs1 = dict(flags, **shape1)
        _, ttgir1 = compile_kernel(
            kernel1, io_dtype, stat_dtype, constexprs1, config1.warps, param_dtype, True, config1.registers
        )
        alone = analyse_ttgir(ttgir1)["row_reductions"]
        record["batch_invariant"] = set(alone) == set(analysis["row_reductions"])
        record["row_reduction_layout_1_row"] = alone
    else:
        record["batch_invariant"] = True  # a tile of one row, or a chunk fixed by d: no row count in it
    return record


def schedule_problems(record) -> list[str]:
    name = f"{record['kind']} {record['direction']} d={record['d']} {record['dtype']} {record['flags']} " \
           f"({record['kernel']} {record['shape']}, {record['warps']} warps, stages {record['stages']})"  # fmt: skip
    problems = []
    if record["spill_stores"] or record["spill_loads"]:
        problems.append(f"spills {record['spill_stores']} B: {name}")
    if record["ctas_per_sm"] < 1:
        problems.append(f"does not fit on an SM: {name}")
    if record["programs_per_sm"] > record["ctas_per_sm"]:
        problems.append(f"{record['programs_per_sm']} programs per SM where {record['ctas_per_sm']} fit: {name}")
    if not record["overlap"]:
        problems.append(f"no overlap across rows in the persistent loop: {name}")
    if not record["batch_invariant"]:
        problems.append(f"a row's reduction changes with the row count: {name}")
    return problems


SCHEDULE_COLUMNS = (
    ("kind", "kind"), ("direction", "dir"), ("d", "d"), ("dtype", "dtype"), ("flags", "flags"), ("shape", "shape"),
    ("warps", "warps"), ("stages", "stages"), ("registers", "regs"), ("spill_stores", "spill"),
    ("shared_bytes", "smem"), ("ctas_per_sm", "fit/SM"), ("programs_per_sm", "run/SM"), ("overlap", "overlap"),
    ("chunk_loop_overlap", "chunk ovl"), ("weight_per_row", "w/row"), ("hbm_bytes_per_row", "HBM B/row"),
    ("l2_bytes_per_row", "L2 B/row"), ("ideal_fraction", "ideal"), ("predicted_fraction", "pred"),
    ("batch_invariant", "b-inv"),
)  # fmt: skip


def shape_of(constexprs) -> str:
    if "CHUNK" in constexprs:
        return f"chunk {constexprs['CHUNK']}"
    if "LINES" in constexprs:
        return f"{constexprs['LINES']}x{constexprs['BLOCK']}"
    return f"{constexprs['ROWS']}x{constexprs['BLOCK']}"


def _kernels():
    """launch, norm_kernels and tuning, with kernels that compile: defined without TRITON_INTERPRET."""
    from normlab.norms.backends.triton import launch, norm_kernels, tuning
    from normlab.norms.backends.triton._runtime import kernels_interpreted

    if kernels_interpreted(norm_kernels.forward_onchip):
        raise RuntimeError(
            "the Triton kernels were defined under TRITON_INTERPRET=1 in this process and cannot be compiled: call "
            "schedule() with isolated=True (a fresh process), or drop the variable before Triton is imported"
        )
    return launch, norm_kernels, tuning


def unavailable() -> str | None:
    """None where sm_90 code can be compiled here, else one sentence saying why not."""
    try:
        from triton.backends.nvidia.compiler import get_ptxas
    except Exception as error:  # no Triton, or a Triton without its CUDA backend
        return f"Triton's CUDA backend cannot be imported here ({type(error).__name__}: {error})."
    try:
        try:
            tool = get_ptxas(TARGET[1])
        except TypeError:  # Triton releases whose get_ptxas takes no architecture
            tool = get_ptxas()
        path = getattr(tool, "path", tool[0] if isinstance(tool, tuple) else tool)
    except Exception as error:
        return f"Triton's ptxas cannot be found here ({type(error).__name__}: {error})."
    if not path or not os.path.exists(path):
        return f"Triton's ptxas is missing here (looked for {path})."
    return None


def schedule(
    widths=(),
    dtypes=(),
    rows: int = 8192,
    flag_sets=("plain", "fused"),
    *,
    kinds=("rms", "layer"),
    directions=("forward", "backward"),
    cases=None,
    isolated: bool = True,
) -> dict:
    """Compiles for sm_90, as launch.py launches `rows` rows, every (kind, direction, width, dtype, flag set) of the
    product, or the (kind, direction, d, dtype, flag set) tuples of `cases` where given. Returns {target, triton,
    rows, model, records (schedule_case's dict per configuration), problems (schedule_problems' lines, and a FAIL line
    per configuration that did not compile)}, or, where nothing can be compiled here, no records and `unavailable`:
    one sentence saying why. `isolated`: compile in a fresh Python process without TRITON_INTERPRET (False only in a
    process whose Triton kernels were never interpreted, such as the CLI)."""
    if cases is None:
        cases = itertools.product(kinds, directions, widths, dtypes, flag_sets)
    cases = [list(case) for case in cases]
    reason = unavailable()
    if reason is not None:
        return dict(target="sm_90", triton=_triton_version(), rows=rows, records=[], problems=[], unavailable=reason)
    if isolated:
        return _schedule_in_fresh_process(dict(cases=cases, rows=rows))
    _kernels()  # refuses interpreted kernels once, not once per configuration
    records, problems = [], []
    for kind, direction, d, label, flags_name in cases:
        try:
            record = schedule_case(kind, direction, d, label, flags_name, rows)
        except Exception as error:
            problems.append(
                f"FAIL {kind} {direction} d={d} {label} {flags_name}: {type(error).__name__}: {error}"[:400]
            )
            continue
        records.append(record)
        problems += schedule_problems(record)
    model = dict(hbm_bytes_per_s=HBM_BYTES_PER_S, l2_bytes_per_s=L2_BYTES_PER_S, sms=SMS, latency_s=LATENCY_S,
                 needed_in_flight_per_sm=NEEDED_IN_FLIGHT)  # fmt: skip
    return dict(target="sm_90", triton=_triton_version(), rows=rows, model=model, records=records, problems=problems)


def _triton_version() -> str | None:
    try:
        import triton
    except ImportError:
        return None
    return triton.__version__


_WORKER = """
import json, sys
from normlab.bench import compiled_schedule
json.dump(compiled_schedule.schedule(**json.loads(sys.argv[1]), isolated=False), open(sys.argv[2], "w"))
"""


def _schedule_in_fresh_process(arguments: dict) -> dict:
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "schedule.json"
        command = [sys.executable, "-c", _WORKER, json.dumps(arguments), str(out)]
        run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
        if run.returncode == 0 and out.exists():
            return json.loads(out.read_text())
    tail = run.stderr.strip().splitlines()[-1:] or ["no message"]
    if "ptxas" in run.stderr.lower() or "cuda" in run.stderr.lower():
        return dict(target="sm_90", triton=_triton_version(), rows=arguments["rows"], records=[], problems=[],
                    unavailable=f"compiling for sm_90 failed here ({tail[0][:300]}).")  # fmt: skip
    raise RuntimeError(f"the sm_90 schedule's process failed (exit {run.returncode}):\n{run.stderr[-3000:]}")
