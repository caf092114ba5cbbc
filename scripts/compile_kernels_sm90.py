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

from normlab.norms.backends.triton import launch, layer_kernels, reduce_kernels, rms_kernels, tuning  # noqa: E402
from normlab.norms.backends.triton._runtime import warps_for  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)
IO_POINTERS = "X R W B Y S DY DS DX DW DB".split()
STAT_POINTERS = "MS MEAN RSTD DW_PARTIAL DB_PARTIAL".split()
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


def compile_kernel(kernel, io_dtype, stat_dtype, constexprs, warps, param_dtype=None):
    """Compiles one variant for sm_90; returns its resource usage. `param_dtype`: the weight's and bias's dtype
    when it is not x's (bf16 x with fp32 weights, the usual mixed-precision case)."""
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
                yield kernel, dict(flags, ROWS=rows, BLOCK=block, STAGES=config.stages, RELOAD=config.reload), config
        for kernel, flags, kind in (
            (rms_kernels.rms_backward_onchip, dict(HAS_DS=a, HAS_WEIGHT=b, EPS_INSIDE=c), "rms"),
            (layer_kernels.layer_backward_onchip, dict(HAS_DS=a, HAS_WEIGHT=b, HAS_BIAS=c), "layer"),
        ):
            for rows, block in BACKWARD_TILES:
                config = tuning.onchip_backward(kind, rows * block, size)
                yield kernel, dict(flags, ROWS=rows, BLOCK=block, STAGES=config.stages, RELOAD=config.reload), config
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


def sweep_variants(element_size):
    """The sweep's variants (normlab.norms.backends.triton.variants) at the widths it times, every flag on:
    (kernel, constexprs, config, variant name). Reported beside the table's; a spill here is a variant's cost."""
    from normlab.norms.backends.triton import variants as V

    kernels = {
        ("rms", "forward", "onchip"): (rms_kernels.rms_forward_onchip, dict(HAS_RESIDUAL=True, HAS_WEIGHT=True, EPS_INSIDE=True)),
        ("layer", "forward", "onchip"): (layer_kernels.layer_forward_onchip, dict(HAS_RESIDUAL=True, HAS_WEIGHT=True, HAS_BIAS=True)),
        ("rms", "backward", "onchip"): (rms_kernels.rms_backward_onchip, dict(HAS_DS=True, HAS_WEIGHT=True, EPS_INSIDE=True)),
        ("layer", "backward", "onchip"): (layer_kernels.layer_backward_onchip, dict(HAS_DS=True, HAS_WEIGHT=True, HAS_BIAS=True)),
        ("rms", "backward", "chunked"): (rms_kernels.rms_backward_chunked, dict(HAS_DS=True, HAS_WEIGHT=True, EPS_INSIDE=True)),
        ("layer", "backward", "chunked"): (layer_kernels.layer_backward_chunked, dict(HAS_DS=True, HAS_WEIGHT=True, HAS_BIAS=True)),
    }  # fmt: skip
    grouped = {"rms": rms_kernels.rms_backward_chunked_grouped, "layer": layer_kernels.layer_backward_chunked_grouped}
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
                            kernel, shape = grouped[kind], dict(GROUP=config.group) | shape
                    yield kernel, dict(flags, **shape), config, f"{variant.name} @ {width}"


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
    args = parser.parse_args()
    records, failures, variant_spills = [], [], []
    cases = [(label, (*k, None)) for label, spec in DTYPES.items() for k in variants(args.quick, spec[3])]
    if args.sweep_variants:
        cases += [(label, k) for label in ("bf16", "bf16 x, fp32 w", "fp32") for k in sweep_variants(DTYPES[label][3])]
    for label, (kernel, constexprs, config, sweep_variant) in cases:
        io_dtype, stat_dtype, param_dtype, _ = DTYPES[label]
        name = kernel.__name__
        warps = config.warps if config else warps_for(launch.REDUCE_LINES * launch.REDUCE_BLOCK)
        try:
            usage = compile_kernel(kernel, io_dtype, stat_dtype, constexprs, warps, param_dtype)
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
