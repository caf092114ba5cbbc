"""Compile every Triton kernel variant for an H100/H200 (sm_90) without a GPU, and report occupancy.

    python scripts/compile_kernels_sm90.py [--quick] [--report build/compile-report.json]

Triton's interpreter (the CPU tests) executes kernels as NumPy and so misses what only the real
compiler sees: type changes in loops, unsupported ops, register allocation. Triton ships ptxas, so
lowering to a cubin for sm_90 needs no device. Every variant the launchers use is compiled, with
the warps and pipeline stages tuning.py gives it, for fp16, bf16, fp32 and fp64 inputs, with the
arguments specialised as a launch at d = 4096, 8192 or 16384 specialises them (pointers 16-byte
aligned, widths and strides divisible by 16; without that the pipeliner and vectorised loads stay
off). Per variant it reports:

* registers per thread and the bytes of register spill stores and loads (ptxas -v);
* shared memory per program (the pipeline's buffers);
* CTAs per SM on sm_90: 65536 registers (allocated per warp in units of 256), 228 KiB of shared
  memory (plus 1 KiB reserved per CTA), at most 32 CTAs and 64 warps;
* whether the software pipeliner turned the staged loop's loads into async copies (TTGIR
  `ttg.async_copy_global_to_local`, cp.async on the GPU).

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

from normlab.norms.backends.triton import launch, layer_kernels, reduce_kernels, rms_kernels, tuning  # noqa: E402
from normlab.norms.backends.triton._runtime import warps_for  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)
IO_POINTERS = "X R W B Y S DY DS DX DW DB".split()
STAT_POINTERS = "MS MEAN RSTD DW_PARTIAL DB_PARTIAL".split()
FLOAT_SCALARS = ("eps", "offset")
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


def compile_kernel(kernel, io_dtype, stat_dtype, constexprs, warps):
    """Compiles one variant for sm_90; returns its resource usage."""
    signature, attrs = {}, {}
    for index, name in enumerate(kernel.arg_names):
        if name in constexprs:
            signature[name] = "constexpr"
            continue
        if name in IO_POINTERS:
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
        compiled = triton.compile(source, target=TARGET, options={"num_warps": warps})
    ptxas = log.getvalue()
    registers = int(re.search(r"Used (\d+) registers", ptxas).group(1))
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", ptxas)
    shared = compiled.metadata.shared
    return {
        "registers": registers,
        "spill_stores": int(spills.group(1)) if spills else 0,
        "spill_loads": int(spills.group(2)) if spills else 0,
        "shared_bytes": shared,
        "async_copies": compiled.asm["ttgir"].count("async_copy_global_to_local"),
        **ctas_per_sm(registers, warps, shared),
    }


def variants(quick, element_size):
    """(kernel, constexprs, config) as the launchers pick them; config None: not a persistent kernel."""
    flag_sets = [(True, True, True)] if quick else list(itertools.product((False, True), repeat=3))
    size = element_size
    for a, b, c in flag_sets:
        for kernel, flags, kind in (
            (rms_kernels.rms_forward_onchip, dict(HAS_RESIDUAL=a, HAS_WEIGHT=b, EPS_INSIDE=c), "rms"),
            (layer_kernels.layer_forward_onchip, dict(HAS_RESIDUAL=a, HAS_WEIGHT=b, HAS_BIAS=c), "layer"),
        ):
            for rows, block in FORWARD_TILES:
                config = tuning.onchip_forward(kind, rows * block, size)
                yield kernel, dict(flags, ROWS=rows, BLOCK=block, STAGES=config.stages), config
        for kernel, flags, kind in (
            (rms_kernels.rms_backward_onchip, dict(HAS_DS=a, HAS_WEIGHT=b, EPS_INSIDE=c), "rms"),
            (layer_kernels.layer_backward_onchip, dict(HAS_DS=a, HAS_WEIGHT=b, HAS_BIAS=c), "layer"),
        ):
            for rows, block in BACKWARD_TILES:
                config = tuning.onchip_backward(kind, rows * block, size)
                yield kernel, dict(flags, ROWS=rows, BLOCK=block, STAGES=config.stages), config
        chunk = launch.CHUNK
        config = tuning.chunked_forward("rms", chunk, size)
        flags = dict(HAS_RESIDUAL=a, HAS_WEIGHT=b, EPS_INSIDE=c, CHUNK=chunk, STAGES=config.stages)
        yield rms_kernels.rms_forward_chunked, flags, config
        config = tuning.chunked_forward("layer", chunk, size)
        for welford in (False, True):
            flags = dict(HAS_RESIDUAL=a, HAS_WEIGHT=b, HAS_BIAS=c, WELFORD=welford, CHUNK=chunk, STAGES=config.stages)
            yield layer_kernels.layer_forward_chunked, flags, config
        config = tuning.chunked_backward("rms", chunk, size)
        flags = dict(HAS_DS=a, HAS_WEIGHT=b, EPS_INSIDE=c, CHUNK=chunk, STAGES=config.stages)
        yield rms_kernels.rms_backward_chunked, flags, config
        config = tuning.chunked_backward("layer", chunk, size)
        flags = dict(HAS_DS=a, HAS_WEIGHT=b, HAS_BIAS=c, CHUNK=chunk, STAGES=config.stages)
        yield layer_kernels.layer_backward_chunked, flags, config
    for has_weight, has_bias in ((True, False), (True, True)) if not quick else ((True, True),):
        reduce = dict(HAS_WEIGHT=has_weight, HAS_BIAS=has_bias, LINES=launch.REDUCE_LINES, BLOCK=launch.REDUCE_BLOCK)
        yield reduce_kernels.sum_partials, reduce, None


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
    args = parser.parse_args()
    records, failures = [], []
    sizes = {"fp16": 2, "bf16": 2, "fp32": 4, "fp64": 8}
    cases = [
        (io, "fp64" if io == "fp64" else "fp32", kernel) for io in sizes for kernel in variants(args.quick, sizes[io])
    ]
    for io_dtype, stat_dtype, (kernel, constexprs, config) in cases:
        name = kernel.__name__
        warps = config.warps if config else warps_for(launch.REDUCE_LINES * launch.REDUCE_BLOCK)
        try:
            usage = compile_kernel(kernel, io_dtype, stat_dtype, constexprs, warps)
        except Exception as error:  # report every failing variant, not just the first
            failures.append(f"FAIL {name} {io_dtype} {constexprs}: {type(error).__name__}: {str(error)[:300]}")
            continue
        record = dict(kernel=name, dtype=io_dtype, shape=shape_of(constexprs), flags=flags_of(constexprs))
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
    print_table(summary_rows(records))
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(json.dumps({"target": "sm_90", "triton": triton.__version__, "variants": records}, indent=1))
    print("\n".join(failures))
    print(
        f"{len(records)} variants compiled for sm_90 ({len(failures)} problems); "
        f"report: {args.report}; pipelined (async copies): {sum(r['async_copies'] > 0 for r in records)}"
    )
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
