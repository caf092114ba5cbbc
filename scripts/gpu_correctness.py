"""The Triton norms checked at the shapes that matter, on the GPU: 8192 rows x d = 4096 to 65536.

    python scripts/gpu_correctness.py --out correctness.jsonl [--small] [--dry-run]

The unit tests use a few hundred rows, so on 132 SMs nearly every program gets one tile, and three paths
never run on a GPU: the pipelined multi-tile loop of the persistent grid, the chunked backward's per-program
partial lines, and the sum over 132-264 of them. Here, per kernel (rms, layer), width (4096, 8192, 16384,
65536: on chip, on chip, the forward on chip and the backward chunked, all chunked), precision (bf16, fp32,
and bf16 x with fp32 weights) and with and without the fused residual: the forward and the backward through
autograd (dx, dresidual, dweight, dbias), every output the launchers allocate pre-filled with NaN, judged
against float64 by the accuracy rule (normlab.norms.backends.triton.accuracy). One JSON record per case,
flushed; exit 1 if any case fails.

--small: a few shapes of 37 rows (compute-sanitizer's memcheck, scripts/gpu_session.py). --dry-run: the same
cases in Triton's interpreter at widths of 64 (on chip, no residual) and 300 (chunked: onchip_limit 128,
chunk 64; with the residual), 9 rows.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
from pathlib import Path

import torch

ROWS = 8192
WIDTHS = (4096, 8192, 16384, 65536)
SMALL = ((37, 1000), (37, 4096), (37, 20000))  # on chip, on chip, chunked
# name -> (x's dtype, the parameters' dtype)
PRECISIONS = {"bf16": (torch.bfloat16, torch.bfloat16), "fp32": (torch.float32, torch.float32)}
PRECISIONS["bf16 x, fp32 weights"] = (torch.bfloat16, torch.float32)
EPS = {"rms": 1e-6, "layer": 1e-5}


def shapes(small: bool, dry_run: bool) -> list[tuple[int, int, dict]]:
    """(rows, d, path limits) per shape."""
    if dry_run:
        return [(9, 64, {}), (9, 300, dict(onchip_limit=128, chunk=64))]
    if small:
        return [(rows, d, {}) for rows, d in SMALL]
    return [(ROWS, d, {}) for d in WIDTHS]


def poison_outputs() -> None:
    """Every buffer the launchers allocate starts as NaN, on the tensor's device: an element no program wrote shows."""
    from normlab.norms.backends.triton import launch

    launch._empty = lambda shape, dtype, device: torch.full(shape, float("nan"), dtype=dtype, device=device)


def check_case(kind: str, rows: int, d: int, precision: str, residual: bool, limits: dict, device: str) -> dict:
    from normlab import layer_norm_reference, rms_norm_reference
    from normlab.norms.backends.triton import accuracy, triton_layer_norm, triton_rms_norm

    x_dtype, param_dtype = PRECISIONS[precision]
    generator = torch.Generator(device=device).manual_seed(rows * 7 + d)

    def randn(*shape, dtype):
        return torch.randn(*shape, generator=generator, device=device, dtype=torch.float32).to(dtype)

    tensors = {"x": randn(rows, d, dtype=x_dtype), "weight": randn(d, dtype=param_dtype)}
    if kind == "layer":
        tensors["bias"] = randn(d, dtype=param_dtype)
    if residual:
        tensors["residual"] = randn(rows, d, dtype=x_dtype)
    dy = randn(rows, d, dtype=x_dtype)
    ds = randn(rows, d, dtype=x_dtype) if residual else None

    def run(norm, reference_norm, leaves, upstream_dtype):
        args = [leaves["x"], leaves["weight"]] + ([leaves["bias"]] if kind == "layer" else [])
        out = norm(*args, residual=leaves.get("residual"), **({} if norm is reference_norm else limits))
        outputs = [out[0], out[1]] if residual else [out]
        upstream = [dy.to(upstream_dtype)] + ([ds.to(upstream_dtype)] if residual else [])
        grads = torch.autograd.grad(outputs, list(leaves.values()), upstream)
        found = {"y": outputs[0]} | ({"s": outputs[1]} if residual else {})
        return found | {f"d{name}": g for name, g in zip(leaves, grads)}

    ours_norm = triton_rms_norm if kind == "rms" else triton_layer_norm
    reference_norm = rms_norm_reference if kind == "rms" else layer_norm_reference
    started = time.perf_counter()
    ours = run(ours_norm, None, {k: t.clone().requires_grad_() for k, t in tensors.items()}, x_dtype)
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    wide = {k: t.double().requires_grad_() for k, t in tensors.items()}
    expected = run(reference_norm, reference_norm, wide, torch.float64)
    pytorch = accuracy.pytorch_outputs(
        kind, tensors["x"], tensors["weight"], tensors.get("bias"), tensors.get("residual"), dy, ds, EPS[kind]
    )
    results, ok = {}, True
    for name, got in ours.items():
        error = accuracy.relative_error(got, expected[name])
        limit = accuracy.bound(x_dtype, accuracy.relative_error(pytorch[name], expected[name]))
        finite = bool(torch.isfinite(got).all())
        results[name] = {
            "error": error,
            "bound": limit,
            "finite": finite,
            "dtype": str(got.dtype).removeprefix("torch."),
        }
        ok = ok and finite and error <= limit
    return {"ok": ok, "outputs": results, "seconds": seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the JSON-lines file to write")
    parser.add_argument("--small", action="store_true", help="a few 37-row shapes (for compute-sanitizer)")
    parser.add_argument("--dry-run", action="store_true", help="tiny widths in Triton's interpreter")
    args = parser.parse_args(argv)
    if args.dry_run:
        os.environ["TRITON_INTERPRET"] = "1"
    elif not torch.cuda.is_available():
        print("gpu_correctness: no CUDA device here; run it with --dry-run to check it on this CPU", file=sys.stderr)
        return 2
    from normlab.bench.records import JsonLines

    device = "cpu" if args.dry_run else "cuda"
    poison_outputs()
    failures = 0
    with JsonLines(args.out) as records:
        records.write({"type": "provenance", "dry_run": args.dry_run, "small": args.small, "device": device,
                       "gpu": torch.cuda.get_device_name() if device == "cuda" else None, "torch": torch.__version__})  # fmt: skip
        grid = itertools.product(shapes(args.small, args.dry_run), ("rms", "layer"), PRECISIONS, (False, True))
        for (rows, d, limits), kind, precision, residual in grid:
            if args.dry_run and residual != bool(limits):
                continue  # the interpreter is slow: the residual on the chunked path, none on chip
            case = {"type": "case", "kind": kind, "rows": rows, "d": d, "precision": precision, "residual": residual}
            try:
                case |= check_case(kind, rows, d, precision, residual, limits, device)
            except Exception as error:  # a case that fails to run is a failure, recorded; the others still run
                case |= {"ok": False, "error": f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"}
            failures += not case["ok"]
            records.write(case)
            print(
                f"{'ok  ' if case['ok'] else 'FAIL'} {kind:5s} {rows}x{d} {precision} residual={residual}", flush=True
            )
            if device == "cuda":
                torch.cuda.empty_cache()  # 65536-wide float64 references are gigabytes each
        records.write({"type": "finished", "failures": failures})
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
