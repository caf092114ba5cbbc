"""The kernel-variant sweep: every launch variants.py defines, timed side by side, with a copy, in one process.

    python scripts/gpu_sweep.py --out sweep.jsonl [--budget-s 80] [--compile-workers 8] [--dry-run]

Per width (16384 first: the open questions are there, then 4096 and 8192), dtype (bf16, fp32), kernel (rms,
layer) and direction (forward, backward), 8192 rows: each variant's median time by
triton.testing.do_bench, its bandwidth against a copy_ of the same tensor timed in the same run, and its
results against the float64 reference under the accuracy rule (accuracy.py); a variant that disagrees
is recorded, and never wins. One JSON record per line, flushed as it is made; the first is the
provenance (device, Triton, torch, commit), the last says whether the sweep finished. A committed file
(data/triton-sweep-N.jsonl) is what tuning_table.py generates the table from.

Compiling ~100 variants serially would take most of the step: --compile-workers processes first launch
each variant once on a few rows (same specialisation, so the same cache entry), filling Triton's cache
in parallel; the timed process then finds every kernel compiled.

--dry-run runs every variant in Triton's interpreter at tiny widths standing for the real ones (64 for 4096,
200 rows of 64-element chunks for 16384), checks each against the reference (exit 1 if one disagrees),
and times one call each: it measures nothing.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing
import os
import sys
import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

import torch

ROWS = 8192
WIDTHS = (16384, 4096, 8192)  # nearest a decision first
# width -> (d, chunk, dtypes) in the interpreter: each variant once, at the widths that select it
DRY_WIDTHS = {4096: (64, 4096, ("bf16",)), 16384: (200, 64, ("fp32",))}
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def _variants():
    from normlab.norms.backends.triton import variants

    return variants


def shapes(dry_run: bool):
    """(width, d, chunk, rows, dtype names) in the sweep's order."""
    from normlab.norms.backends.triton import launch

    if dry_run:
        return [(width, d, chunk, 9, names) for width, (d, chunk, names) in DRY_WIDTHS.items()]
    return [(width, width, launch.CHUNK, ROWS, tuple(DTYPES)) for width in WIDTHS]


def cases(dry_run: bool):
    """Every (width, d, chunk, rows, dtype, kind, direction, variant) the sweep runs, in order."""
    V = _variants()
    for width, d, chunk, rows, dtype_names in shapes(dry_run):
        for dtype_name in dtype_names:
            dtype = DTYPES[dtype_name]
            for kind in V.KINDS:
                for direction in V.DIRECTIONS:
                    for variant in V.variants_for(kind, direction, width, dtype.itemsize, d=d, chunk=chunk):
                        yield width, d, chunk, rows, dtype_name, kind, direction, variant


def _compile_one(case) -> str:
    """Launch one variant on a few rows: Triton compiles it (same specialisation) into its on-disk cache."""
    width, d, chunk, _, dtype_name, kind, direction, variant = case
    V = _variants()
    inputs = V.make_inputs(kind, 4, d, DTYPES[dtype_name], "cuda" if torch.cuda.is_available() else "cpu")
    V.call(kind, direction, variant, inputs)
    return variant.name


def compile_ahead(all_cases, workers: int) -> float:
    """Fill Triton's cache with `workers` processes; returns the seconds it took (0 with no workers)."""
    if workers < 1:
        return 0.0
    started = time.perf_counter()
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        for future in concurrent.futures.as_completed([pool.submit(_compile_one, c) for c in all_cases]):
            future.exception()  # a variant that fails to compile fails again, recorded, in the timed run
    return time.perf_counter() - started


def expectations(kind, direction, dtype, inputs) -> list[tuple[str, object, float]]:
    """(output name, float64 result, bound from PyTorch's own error) per output: computed once per input set."""
    from normlab.norms.backends.triton import accuracy

    V = _variants()
    names = ("y",) if direction == "forward" else ("dx", "dweight", "dbias")
    expected = V.reference(kind, direction, inputs)
    pytorch = accuracy.pytorch_outputs(kind, inputs.x, inputs.weight, inputs.bias, None, inputs.dy, None, V.EPS[kind])
    found = []
    for name, want in zip(names, expected):
        found.append((name, want, accuracy.bound(dtype, accuracy.relative_error(pytorch[name], want))))
    return found


def agreement(expected, outputs) -> tuple[dict, bool]:
    """Each output's error against float64 and its bound, and whether all are within."""
    from normlab.norms.backends.triton import accuracy

    errors, ok = {}, True
    for (name, want, limit), got in zip(expected, outputs):
        error = accuracy.relative_error(got, want)
        errors[name] = {"error": error, "bound": limit}
        ok = ok and bool(torch.isfinite(got).all()) and error <= limit
    return errors, ok


def once_ms(fn) -> float:
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) * 1e3


def timer(dry_run: bool):
    if dry_run:
        return once_ms  # the copy's; a variant's is its checked call's
    from triton.testing import do_bench

    return lambda fn: do_bench(fn, warmup=5, rep=30, return_mode="median")


def provenance(dry_run: bool) -> dict:
    import triton

    from normlab.runtime.environment import git_commit

    return {
        "type": "provenance",
        "dry_run": dry_run,
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() and not dry_run else "cpu (interpreter)",
        "triton": triton.__version__,
        "torch": torch.__version__,
        "git_commit": git_commit() or os.environ.get("NORMLAB_GIT_COMMIT"),
        "rows": ROWS,
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def run(out: Path, dry_run: bool, budget_s: float, workers: int) -> int:
    from normlab.bench.records import JsonLines
    from normlab.norms.backends.triton import variants as V

    device = "cpu" if dry_run else "cuda"
    measure = timer(dry_run)
    all_cases = list(cases(dry_run))
    started = time.perf_counter()
    disagreements = 0
    with JsonLines(out) as records:
        records.write(provenance(dry_run) | {"cases": len(all_cases)})
        records.write({"type": "compile-ahead", "workers": workers, "seconds": compile_ahead(all_cases, workers)})
        inputs, expected, copies = {}, {}, {}
        for width, d, _, rows, dtype_name, kind, direction, variant in all_cases:
            if time.perf_counter() - started > budget_s:
                records.write({"type": "stopped", "reason": f"over its {budget_s:.0f} s budget", "at": [width, kind]})
                return 1
            dtype = DTYPES[dtype_name]
            key = (width, dtype_name, kind)
            if key not in inputs:
                inputs.clear()  # one shape's tensors (and their float64 results) at a time
                expected.clear()
                generator = torch.Generator().manual_seed(width)
                inputs[key] = V.make_inputs(kind, rows, d, dtype, device, generator)
            data = inputs[key]
            if (width, dtype_name) not in copies:
                out_copy = torch.empty_like(data.x)
                ms = measure(lambda: out_copy.copy_(data.x))
                copies[(width, dtype_name)] = 2 * data.x.numel() * data.x.element_size() / ms / 1e6
                records.write({"type": "copy", "width": width, "dtype": dtype_name, "d": d, "ms": ms,
                               "GBps": copies[(width, dtype_name)]})  # fmt: skip
            record = {
                "type": "variant",
                "kind": kind,
                "direction": direction,
                "dtype": dtype_name,
                "element_size": dtype.itemsize,
                "width": width,
                "d": d,
                "rows": rows,
                "variant": variant.name,
            }
            config = variant.config or V.table_config(kind, direction, variant, d, dtype.itemsize)
            path = "onchip" if d <= variant.onchip_limit else "chunked"
            record |= {"path": path, "elements": V.elements(path, d, variant.chunk), "config": asdict(config)}
            try:
                called = time.perf_counter()
                outputs = V.call(kind, direction, variant, data)
                # the dry run's time is that first call's: the interpreter is too slow to call twice
                ms = (
                    (time.perf_counter() - called) * 1e3
                    if dry_run
                    else measure(lambda: V.call(kind, direction, variant, data))
                )
                if (key, direction) not in expected:
                    expected[(key, direction)] = expectations(kind, direction, dtype, data)
                record["errors"], record["agrees"] = agreement(expected[(key, direction)], outputs)
            except Exception as error:  # a variant that fails is recorded; the others still run
                record |= {"agrees": False, "error": f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"}
                records.write(record)
                disagreements += 1
                continue
            passes = 2 if direction == "forward" else 3
            gbps = passes * data.x.numel() * data.x.element_size() / ms / 1e6
            record |= {"median_ms": ms, "GBps": gbps, "of_copy": gbps / copies[(width, dtype_name)]}
            disagreements += not record["agrees"]
            records.write(record)
        records.write({"type": "finished", "seconds": time.perf_counter() - started, "disagreements": disagreements})
    print(f"sweep: {len(all_cases)} variant cases in {time.perf_counter() - started:.0f} s, {disagreements} disagreed")
    return 1 if disagreements else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the JSON-lines file to write")
    parser.add_argument("--budget-s", type=float, default=90.0, help="start no new case after this many seconds")
    parser.add_argument("--compile-workers", type=int, default=None, help="default: 8 on a GPU, 0 in a dry run")
    parser.add_argument("--dry-run", action="store_true", help="every variant at a tiny size in the interpreter")
    args = parser.parse_args(argv)
    if args.dry_run:
        os.environ["TRITON_INTERPRET"] = "1"
    elif not torch.cuda.is_available():
        print("gpu_sweep: no CUDA device here; run it with --dry-run to check it on this CPU", file=sys.stderr)
        return 2
    workers = args.compile_workers if args.compile_workers is not None else (0 if args.dry_run else 8)
    return run(args.out, args.dry_run, args.budget_s, workers)


if __name__ == "__main__":
    sys.exit(main())
