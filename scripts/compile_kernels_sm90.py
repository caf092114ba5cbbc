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

With --schedule it compiles the configurations the tuning table picks (d 64..65536 by default) and reads from the
compiled code whether each persistent loop keeps the next row's loads in flight, and the bytes each row moves from
HBM and L2 (`make compile-check`; the logic is normlab.bench.compiled_schedule's, which the speed chapter and
tests/test_compiled_schedule.py call too). It fails on a loop without overlap, a spill or a misfit.

It prints a table and writes the whole report as JSON. It fails (exit 1) when a variant does not
compile, when an fp16/bf16/fp32 variant spills (fp64 is for gradcheck, not speed), or when tuning.py
starts more programs per SM than fit at once (the persistent grid would then run in two waves; with
no CTA fitting, fp64 included, the launch would fail).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)  # must be off before the kernels are defined

import triton  # noqa: E402

from normlab.bench.compiled_schedule import (  # noqa: E402
    DTYPES,
    LAYER,
    RMS,
    SCHEDULE_COLUMNS,
    SCHEDULE_DTYPES,
    SCHEDULE_WIDTHS,
    compile_kernel,
    schedule,
    shape_of,
)
from normlab.norms.backends.triton import launch, norm_kernels, reduce_kernels, tuning  # noqa: E402
from normlab.norms.backends.triton._runtime import warps_for  # noqa: E402

FORWARD_TILES = [(32, 128), (4, 1024), (1, 4096), (1, 8192), (1, launch.ONCHIP_LIMIT)]
BACKWARD_TILES = [(32, 128), (4, 1024), (1, 4096), (1, launch.BACKWARD_ONCHIP_LIMIT)]


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
                        shape = dict(GROUP=config.group, CHUNK=variant.chunk // config.group, STAGES=config.stages)
                    yield kernel, dict(flags, **shape), config, f"{variant.name} @ {width}"


# ---------------------------------------------------------------- the compiled schedule (--schedule)
# The logic (compiling, reading the TTGIR, the traffic and the prediction) is normlab.bench.compiled_schedule's;
# this prints its table and writes its report.


def print_schedule(records):
    rows = [{title: record[key] for key, title in SCHEDULE_COLUMNS} for record in records]
    for row in rows:
        row["chunk ovl"] = "".join("y" if v else "n" for v in row["chunk ovl"]) or "-"
    print_table(rows)


def run_schedule(widths, dtypes, rows, flag_sets, report: Path) -> int:
    result = schedule(widths, dtypes, rows, flag_sets, isolated=False)  # this process never interpreted the kernels
    if "unavailable" in result:
        print(f"nothing compiled for sm_90: {result['unavailable']}", file=sys.stderr)
        return 1
    records, problems = result["records"], result["problems"]
    print_schedule(records)
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(json.dumps(result, indent=1))
    print("\n".join(problems))
    print(f"{len(records)} configurations compiled for sm_90 ({len(problems)} problems); report: {report}")
    return 1 if problems else 0


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
