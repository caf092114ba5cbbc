"""Achieved bandwidth of the Triton norms on a CUDA GPU, against a same-size copy.

    python scripts/gpu_bandwidth.py [--out build/gpu_bandwidth.json] [--dry-run]

For d = 4096 and 16384 (bf16 and fp32; inputs far larger than L2), times with
triton.testing.do_bench the forward and backward launchers (no autograd
overhead), PyTorch's native ops, and a device copy into a preallocated
tensor. Bytes that must move: forward reads x and writes y (2 tensors),
backward reads x and dy and writes dx (3 tensors); the per-row statistics and
the weight are negligible. Prints a table and writes JSON.

--dry-run runs the same calls on CPU in Triton's interpreter (TRITON_INTERPRET=1) at d = 64, 16 rows, timed by
one perf_counter call each: it checks the script end to end without a GPU (scripts/gpu_session.py --dry-run);
its numbers measure nothing.
"""

import argparse
import json
import os
import time

import torch
import torch.nn.functional as F
import triton
from triton.testing import do_bench

from normlab.norms.backends.triton import launch


def once_ms(fn):
    """The dry run's stand-in for do_bench: one call, in ms."""
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) * 1e3


def measure(d, dtype, total_bytes=1 << 30, device="cuda", do_bench=do_bench):
    rows = max(1, total_bytes // (d * torch.finfo(dtype).bits // 8))
    x = torch.randn(rows, d, device=device, dtype=dtype)
    dy, weight, bias = (
        torch.randn_like(x),
        torch.randn(d, device=device, dtype=dtype),
        torch.randn(d, device=device, dtype=dtype),
    )
    size = x.numel() * x.element_size()
    out = torch.empty_like(x)
    copy_ms = do_bench(lambda: out.copy_(x))
    results = {"d": d, "dtype": str(dtype), "rows": rows, "copy_GBps": 2 * size / copy_ms / 1e6}

    def record(name, tensors, ms):
        gbps = tensors * size / ms / 1e6
        results[name] = {"ms": ms, "GBps": gbps, "of_copy": gbps / results["copy_GBps"]}

    _, _, ms = launch.rms_forward(x, weight, None, 1e-6, 0.0, True, d)
    record("rms_forward", 2, do_bench(lambda: launch.rms_forward(x, weight, None, 1e-6, 0.0, True, d)))
    record("rms_backward", 3, do_bench(lambda: launch.rms_backward(dy, None, x, weight, ms, 1e-6, 0.0, True, d)))
    _, _, mean, rstd = launch.layer_forward(x, weight, bias, None, 1e-5)
    record("layer_forward", 2, do_bench(lambda: launch.layer_forward(x, weight, bias, None, 1e-5)))
    record("layer_backward", 3, do_bench(lambda: launch.layer_backward(dy, None, x, weight, mean, rstd, True)))
    for stats in launch.LAYER_STATS:
        record(
            f"layer_forward_chunked_{stats}",
            2,
            do_bench(lambda: launch.layer_forward(x, weight, bias, None, 1e-5, stats, onchip_limit=0)),
        )
    record(
        "rms_forward_chunked",
        2,
        do_bench(lambda: launch.rms_forward(x, weight, None, 1e-6, 0.0, True, d, onchip_limit=0)),
    )
    record("torch_rms_norm", 2, do_bench(lambda: F.rms_norm(x, (d,), weight, 1e-6)))
    record("torch_layer_norm", 2, do_bench(lambda: F.layer_norm(x, (d,), weight, bias, 1e-5)))
    return results


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="build/gpu_bandwidth.json")
    parser.add_argument("--dry-run", action="store_true", help="tiny sizes on CPU in the interpreter; measures nothing")
    args = parser.parse_args()
    if args.dry_run:
        if not launch.INTERPRETED:
            raise SystemExit("--dry-run runs the kernels in Triton's interpreter: set TRITON_INTERPRET=1")
        runs = [measure(64, torch.float32, 16 * 64 * 4, "cpu", once_ms)]
    else:
        if not torch.cuda.is_available() or launch.INTERPRETED:
            raise SystemExit("needs a CUDA GPU and TRITON_INTERPRET unset (or --dry-run on CPU)")
        runs = [measure(d, dtype) for dtype in (torch.bfloat16, torch.float32) for d in (4096, 16384)]
    for run in runs:
        print(f"\nd={run['d']} {run['dtype']} rows={run['rows']}  copy {run['copy_GBps']:.0f} GB/s")
        for name, value in run.items():
            if isinstance(value, dict):
                print(f"  {name:32s} {value['ms']:8.3f} ms {value['GBps']:7.0f} GB/s {value['of_copy']:6.1%} of copy")
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as handle:
        json.dump(
            {
                "device": torch.cuda.get_device_name() if not args.dry_run else "cpu (dry run: measures nothing)",
                "torch": torch.__version__,
                "triton": triton.__version__,
                "runs": runs,
            },
            handle,
            indent=1,
        )


if __name__ == "__main__":
    main()
