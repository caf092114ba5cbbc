"""Compile every Triton kernel variant for an H100/H200 (sm_90) without a GPU, and report occupancy.

    python scripts/compile_kernels_sm90.py [--quick] [--report build/compile-report.json]

Triton's interpreter (the CPU tests) executes kernels as NumPy and so misses what only the real
compiler sees: type changes in loops, unsupported ops, register allocation. Triton ships ptxas, so
lowering to a cubin for sm_90 needs no device. Every variant the launchers use is compiled, with
the warps and pipeline stages tuning.py gives it, for fp16, bf16, fp32 and fp64 inputs and for bf16 x
with fp32 weights (the usual mixed precision: tuning.py keys on x's element size, so the fp32 weight
and its gradient must fit the same launch), with the
arguments specialised as a launch at d = 4096, 8192 or 16384 specialises them (pointers 16-byte
aligned, widths and strides divisible by 16; without that the pipeliner and vectorised loads stay
off). Per variant it reports:

* registers per thread and the bytes of register spill stores and loads (ptxas -v);
* shared memory per program (the pipeline's buffers);
* CTAs per SM on sm_90: 65536 registers (allocated per warp in units of 256), 228 KiB of shared
  memory (plus 1 KiB reserved per CTA), at most 32 CTAs and 64 warps;
* whether the software pipeliner turned the staged loop's loads into async copies (TTGIR
  `ttg.async_copy_global_to_local`, cp.async on the GPU).

With --sweep-variants it also compiles the sweep's kernel variants (variants.py) at 4096, 8192 and 16384
in bf16, mixed and fp32, and lists those that spill (a spill there is part of what the sweep times).

It prints a table and writes the whole report as JSON. It fails (exit 1) when a variant does not
compile, when an fp16/bf16/fp32 variant spills (fp64 is for gradcheck, not speed), or when tuning.py
starts more programs per SM than fit at once (the persistent grid would then run in two waves; with
no CTA fitting, fp64 included, the launch would fail).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import os
import re
import sys
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)  # must be off before the kernels are defined

import triton  # noqa: E402
from triton import knobs  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from normlab.norms.backends.triton import launch, norm_kernels, reduce_kernels, tuning  # noqa: E402
from normlab.norms.backends.triton._runtime import warps_for  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)
IO_POINTERS = "X R W B Y S DY DS DX DW DB".split()
STAT_POINTERS = "STAT RSTD DW_PARTIAL DB_PARTIAL".split()
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

FORWARD_TILES = [(32, 128), (4, 1024), (1, 4096), (1, 8192), (1, launch.ONCHIP_LIMIT)]
BACKWARD_TILES = [(32, 128), (4, 1024), (1, 4096), (1, launch.BACKWARD_ONCHIP_LIMIT)]


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
    source = ASTSource(kernel, signature, constexprs=constexprs, attrs=attrs)
    log = io.StringIO()
    knobs.nvidia.dump_ptxas_log = True  # Triton runs ptxas -v anyway; this prints its log, which we read
    knobs.compilation.always_compile = True  # a cached kernel would skip ptxas, and so its log
    with contextlib.redirect_stdout(log):
        compiled = triton.compile(source, target=TARGET, options={"num_warps": warps, "maxnreg": registers})
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


def variants(quick, element_size):
    """(kernel, constexprs, config) as the launchers pick them; config None: not a persistent kernel."""
    flag_sets = [(True, True, True)] if quick else list(itertools.product((False, True), repeat=3))
    size = element_size
    for a, b, c in flag_sets:
        for kernel, flags, kind in (
            (norm_kernels.forward_onchip, dict(RMS, HAS_RESIDUAL=a, HAS_WEIGHT=b, EPS_INSIDE=c), "rms"),
            (norm_kernels.forward_onchip, dict(LAYER, HAS_RESIDUAL=a, HAS_WEIGHT=b, HAS_BIAS=c), "layer"),
        ):
            for rows, block in FORWARD_TILES:
                config = tuning.onchip_forward(kind, rows * block, size, rows)
                yield kernel, dict(flags, ROWS=rows, BLOCK=block, STAGES=config.stages, RELOAD=config.reload), config
        for kernel, flags, kind in (
            (norm_kernels.backward_onchip, dict(RMS, HAS_DS=a, HAS_WEIGHT=b, EPS_INSIDE=c), "rms"),
            (norm_kernels.backward_onchip, dict(LAYER, HAS_DS=a, HAS_WEIGHT=b, HAS_BIAS=c), "layer"),
        ):
            for rows, block in BACKWARD_TILES:
                config = tuning.onchip_backward(kind, rows * block, size)
                yield kernel, dict(flags, ROWS=rows, BLOCK=block, STAGES=config.stages, RELOAD=config.reload), config
        chunk = launch.CHUNK
        config = tuning.chunked_forward("rms", chunk, size)
        flags = dict(RMS, HAS_RESIDUAL=a, HAS_WEIGHT=b, EPS_INSIDE=c, CHUNK=chunk, STAGES=config.stages)
        yield norm_kernels.forward_chunked, flags, config
        config = tuning.chunked_forward("layer", chunk, size)
        for welford in (False, True):
            flags = dict(
                LAYER, HAS_RESIDUAL=a, HAS_WEIGHT=b, HAS_BIAS=c, WELFORD=welford, CHUNK=chunk, STAGES=config.stages
            )
            yield norm_kernels.forward_chunked, flags, config
        config = tuning.chunked_backward("rms", chunk, size)
        flags = dict(RMS, HAS_DS=a, HAS_WEIGHT=b, EPS_INSIDE=c, CHUNK=chunk, STAGES=config.stages)
        yield norm_kernels.backward_chunked, flags, config
        config = tuning.chunked_backward("layer", chunk, size)
        flags = dict(LAYER, HAS_DS=a, HAS_WEIGHT=b, HAS_BIAS=c, CHUNK=chunk, STAGES=config.stages)
        yield norm_kernels.backward_chunked, flags, config
    for has_weight, has_bias in ((True, False), (True, True)) if not quick else ((True, True),):
        reduce = dict(HAS_WEIGHT=has_weight, HAS_BIAS=has_bias, LINES=launch.REDUCE_LINES, BLOCK=launch.REDUCE_BLOCK)
        yield reduce_kernels.sum_partials, reduce, None


def sweep_variants(element_size):
    """The sweep's variants (normlab.norms.backends.triton.variants) at the widths it times, every flag on:
    (kernel, constexprs, config, variant name). Reported beside the table's; a spill here is a variant's cost."""
    from normlab.norms.backends.triton import variants as V

    kernels = {
        ("rms", "forward", "onchip"): (norm_kernels.forward_onchip, dict(RMS, HAS_RESIDUAL=True, HAS_WEIGHT=True, EPS_INSIDE=True)),
        ("layer", "forward", "onchip"): (norm_kernels.forward_onchip, dict(LAYER, HAS_RESIDUAL=True, HAS_WEIGHT=True, HAS_BIAS=True)),
        ("rms", "backward", "onchip"): (norm_kernels.backward_onchip, dict(RMS, HAS_DS=True, HAS_WEIGHT=True, EPS_INSIDE=True)),
        ("layer", "backward", "onchip"): (norm_kernels.backward_onchip, dict(LAYER, HAS_DS=True, HAS_WEIGHT=True, HAS_BIAS=True)),
        ("rms", "backward", "chunked"): (norm_kernels.backward_chunked, dict(RMS, HAS_DS=True, HAS_WEIGHT=True, EPS_INSIDE=True)),
        ("layer", "backward", "chunked"): (norm_kernels.backward_chunked, dict(LAYER, HAS_DS=True, HAS_WEIGHT=True, HAS_BIAS=True)),
    }  # fmt: skip
    grouped = norm_kernels.backward_chunked_grouped
    for width in (4096, 8192, 16384):
        for kind in V.KINDS:
            for direction in V.DIRECTIONS:
                for variant in V.variants_for(kind, direction, width, element_size):
                    if variant.name == "table":
                        continue  # compiled above, as the launchers pick it
                    config = V.table_config(kind, direction, variant, width, element_size)
                    path = "onchip" if width <= variant.onchip_limit else "chunked"
                    kernel, flags = kernels[(kind, direction, path)]
                    if path == "onchip":
                        rows = config.rows if config.rows else 1
                        shape = dict(ROWS=rows, BLOCK=width, STAGES=config.stages, RELOAD=config.reload)
                    else:
                        shape = dict(CHUNK=variant.chunk // config.group, STAGES=config.stages)
                        if config.group > 1:
                            kernel, shape = grouped, dict(GROUP=config.group) | shape
                    yield kernel, dict(flags, **shape), config, f"{variant.name} @ {width}"


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
#   per program (their bytes x programs / rows). Loads of the weight outside the loop: once per program.
# * predicted fraction of a same-size copy (read x, write y: 2 d e bytes a row), with the model in `predict`.
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


def _launch_case(kind, direction, d, size, rows):
    """(kernel, shape constexprs, config, path, tiles) as launch.py picks them for `rows` rows of width d."""
    if (
        direction == "forward"
        and d <= launch.ONCHIP_LIMIT
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
    config = tuning.chunked_backward(kind, chunk, size)
    if config.group > 1:
        shape = dict(GROUP=config.group, CHUNK=max(1, chunk // config.group), STAGES=config.stages)
        kernel = norm_kernels.backward_chunked_grouped
        return kernel, shape, config, "chunked", -(-rows // config.group), config.group
    return (norm_kernels.backward_chunked, dict(CHUNK=chunk, STAGES=config.stages), config, "chunked", rows, 1)


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


def _traffic(analysis, persistent, d, chunk, per_iteration_rows, programs, rows):
    """(HBM bytes per row, L2 bytes per row, weight loaded per row?, load bytes per innermost iteration)."""
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
    kernel, shape, config, path, tiles, per_iteration_rows = _launch_case(kind, direction, d, size, rows)
    constexprs = dict(FLAG_SETS[(kind, direction)][flags_name], **shape)
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
    programs = tuning.persistent_programs(tiles, SMS, config.programs_per_sm)
    chunk = shape.get("CHUNK", d)
    hbm, l2, weight_per_row, iteration_bytes = _traffic(
        analysis, persistent, d, chunk, per_iteration_rows, programs, rows
    )
    resident = min(config.programs_per_sm, usage["ctas_per_sm"]) or 1
    overlap = bool(persistent is not None and analysis["overlap"].get(persistent))
    chunk_overlap = [analysis["overlap"][loop[0]] for loop in inner]
    depth = max(analysis["buffers"], default=1)
    pipelined = overlap or (chunk_overlap and all(chunk_overlap))
    in_flight = resident * iteration_bytes * (depth if pipelined else 0.5)
    element = ELEMENT_BYTES[{"fp16": "f16", "fp32": "f32", "fp64": "f64"}.get(io_dtype, io_dtype)]
    copy_bytes = 2 * d * element
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
        else f"chunk {constexprs['CHUNK']}" + (f" x{constexprs['GROUP']}" if "GROUP" in constexprs else ""),
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
        ideal_fraction=round(copy_bytes / hbm, 3),
        predicted_fraction=round(predict(copy_bytes, hbm, l2, in_flight), 3),
        row_reduction_layout=analysis["row_reductions"],
    )
    if path == "onchip" and shape["ROWS"] > 1:  # the same row launched alone: its reduction must not change
        kernel1, shape1, config1, *_ = _launch_case(kind, direction, d, size, 1)
        constexprs1 = dict(FLAG_SETS[(kind, direction)][flags_name], **shape1)
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


def print_schedule(records):
    rows = [{title: record[key] for key, title in SCHEDULE_COLUMNS} for record in records]
    for row in rows:
        row["chunk ovl"] = "".join("y" if v else "n" for v in row["chunk ovl"]) or "-"
    print_table(rows)


def run_schedule(widths, dtypes, rows, flag_sets, report: Path) -> int:
    records, problems = [], []
    for kind, direction, d, label, flags_name in itertools.product(
        ("rms", "layer"), ("forward", "backward"), widths, dtypes, flag_sets
    ):
        try:
            record = schedule_case(kind, direction, d, label, flags_name, rows)
        except Exception as error:
            problems.append(
                f"FAIL {kind} {direction} d={d} {label} {flags_name}: {type(error).__name__}: {error}"[:400]
            )
            continue
        records.append(record)
        problems += schedule_problems(record)
    print_schedule(records)
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(
        json.dumps(
            dict(target="sm_90", triton=triton.__version__, rows=rows, model=dict(
                hbm_bytes_per_s=HBM_BYTES_PER_S, l2_bytes_per_s=L2_BYTES_PER_S, sms=SMS, latency_s=LATENCY_S,
                needed_in_flight_per_sm=NEEDED_IN_FLIGHT), records=records, problems=problems),
            indent=1,
        )
    )  # fmt: skip
    print("\n".join(problems))
    print(f"{len(records)} configurations compiled for sm_90 ({len(problems)} problems); report: {report}")
    return 1 if problems else 0


def shape_of(constexprs) -> str:
    if "CHUNK" in constexprs:
        return f"chunk {constexprs['CHUNK']}"
    if "LINES" in constexprs:
        return f"{constexprs['LINES']}x{constexprs['BLOCK']}"
    return f"{constexprs['ROWS']}x{constexprs['BLOCK']}"


def flags_of(constexprs) -> str:
    return " ".join(name.removeprefix("HAS_").lower() for name, value in constexprs.items() if value is True)


def summary_rows(records):
    """One table row per kernel, shape and dtype: the worst case over its flag combinations."""
    groups = {}
    for record in records:
        groups.setdefault((record["kernel"], record["shape"], record["dtype"]), []).append(record)
    for (kernel, shape, dtype), group in groups.items():
        yield {
            "kernel": kernel,
            "shape": shape,
            "dtype": dtype,
            "warps": group[0]["warps"],
            "stages": group[0]["stages"],
            "registers": max(r["registers"] for r in group),
            "spills": max(r["spill_stores"] + r["spill_loads"] for r in group),
            "shared KiB": max(r["shared_bytes"] for r in group) / 1024,
            "CTAs/SM": min(r["ctas_per_sm"] for r in group),
            "bound by": min(group, key=lambda r: r["ctas_per_sm"])["bound_by"],
            "launched/SM": group[0]["programs_per_sm"] or "-",
            "pipelined": f"{sum(r['async_copies'] > 0 for r in group)}/{len(group)}",
        }


def print_table(rows):
    rows = list(rows)
    columns = list(rows[0])
    cell = lambda value: f"{value:.1f}" if isinstance(value, float) else str(value)  # noqa: E731
    widths = {c: max(len(c), *(len(cell(r[c])) for r in rows)) for c in columns}
    print("  ".join(c.ljust(widths[c]) for c in columns))
    for row in rows:
        print("  ".join(cell(row[c]).ljust(widths[c]) for c in columns))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="one flag combination per kernel")
    parser.add_argument("--report", type=Path, default=Path("build/compile-report.json"), help="JSON written here")
    parser.add_argument(
        "--sweep-variants", action="store_true", help="also the sweep's variants (reported, not failed)"
    )
    parser.add_argument(
        "--schedule",
        action="store_true",
        help="the compiled schedule of the configurations the tuning table picks (fails on no overlap, spills, misfit)",
    )
    parser.add_argument("--widths", type=int, nargs="+", default=SCHEDULE_WIDTHS, help="--schedule: row widths")
    parser.add_argument(
        "--dtypes", nargs="+", default=list(SCHEDULE_DTYPES), help="--schedule: of " + ", ".join(DTYPES)
    )
    parser.add_argument("--rows", type=int, default=8192, help="--schedule: the batch's row count")
    parser.add_argument("--flags", nargs="+", default=["plain", "fused"], help="--schedule: plain and/or fused")
    args = parser.parse_args()
    if args.schedule:
        report = args.report if args.report != parser.get_default("report") else Path("build/compile-schedule.json")
        sys.exit(run_schedule(args.widths, args.dtypes, args.rows, args.flags, report))
    records, failures, variant_spills = [], [], []
    cases = [(label, (*k, None)) for label, spec in DTYPES.items() for k in variants(args.quick, spec[3])]
    if args.sweep_variants:
        cases += [(label, k) for label in ("bf16", "bf16 x, fp32 w", "fp32") for k in sweep_variants(DTYPES[label][3])]
    for label, (kernel, constexprs, config, sweep_variant) in cases:
        io_dtype, stat_dtype, param_dtype, _ = DTYPES[label]
        name = kernel.__name__
        warps = config.warps if config else warps_for(launch.REDUCE_LINES * launch.REDUCE_BLOCK)
        try:
            registers = config and config.registers
            usage = compile_kernel(kernel, io_dtype, stat_dtype, constexprs, warps, param_dtype, registers=registers)
        except Exception as error:  # report every failing variant, not just the first
            failures.append(f"FAIL {name} {label} {constexprs}: {type(error).__name__}: {str(error)[:300]}")
            continue
        record = dict(kernel=name, dtype=label, shape=shape_of(constexprs), flags=flags_of(constexprs))
        if sweep_variant:
            record["sweep_variant"] = sweep_variant
            if usage["spill_stores"] or usage["spill_loads"]:
                variant_spills.append(f"{sweep_variant} {name} {label}: {usage['spill_stores']} B spilled")
            records.append(record | usage | dict(warps=warps, stages=constexprs.get("STAGES", 1)))
            continue
        record |= dict(
            warps=warps, stages=constexprs.get("STAGES", 1), programs_per_sm=config and config.programs_per_sm
        )
        records.append(record | usage)
        if config and config.programs_per_sm > usage["ctas_per_sm"]:
            failures.append(
                f"{config.programs_per_sm} programs per SM started where {usage['ctas_per_sm']} fit: {record}"
            )
        if io_dtype != "fp64" and (usage["spill_stores"] or usage["spill_loads"]):  # fp64: gradcheck, not speed
            failures.append(f"spills: {record}")
    print_table(summary_rows([r for r in records if "sweep_variant" not in r]))
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(json.dumps({"target": "sm_90", "triton": triton.__version__, "variants": records}, indent=1))
    print("\n".join(failures))
    if variant_spills:
        print("sweep variants that spill (their cost, timed by the sweep):\n  " + "\n  ".join(variant_spills))
    print(
        f"{len(records)} variants compiled for sm_90 ({len(failures)} problems); "
        f"report: {args.report}; pipelined (async copies): {sum(r['async_copies'] > 0 for r in records)}"
    )
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
