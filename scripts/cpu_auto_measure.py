"""Measure what backend="auto" should use for RMSNorm on this CPU (see normlab.norms.functional).

    python scripts/cpu_auto_measure.py [--rows 8192] [--features 4096] [--repeats 15]

Times, interleaved round by round, an allocating copy (clone), F.layer_norm,
F.rms_norm, the HF-style eager composite, the compiled composite, and both
norms' "auto"; prints median and spread, and bandwidth as (read x + write y)
bytes over time, relative to clone. Small sizes show where compiling stops paying.
"""

import argparse
import statistics

import torch
import torch.nn.functional as F

import normlab
from normlab.runtime.interleaved import time_interleaved


def time_round_robin(functions, repeats, warmup=2):
    """Seconds per call of each function, one sample per interleaved round (normlab's one timing helper)."""
    times = time_interleaved(functions, rounds=repeats, warmup=warmup)
    return {name: times.per_round(name) for name in functions}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=8192)
    parser.add_argument("--features", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    for rows, d in ((64, 1024), (256, 4096), (args.rows, args.features)):
        torch.manual_seed(0)
        x, weight, bias = torch.randn(rows, d), torch.randn(d), torch.randn(d)
        functions = {
            "clone": lambda: x.clone(),
            "F.layer_norm": lambda: F.layer_norm(x, (d,), weight, bias, 1e-5),
            "F.rms_norm": lambda: F.rms_norm(x, (d,), weight, 1e-6),
            "eager rms": lambda: normlab.rms_norm(x, weight, backend="eager"),
            "compile rms": lambda: normlab.rms_norm(x, weight, backend="compile"),
            "auto rms": lambda: normlab.rms_norm(x, weight),
            "auto layer": lambda: normlab.layer_norm(x, weight, bias),
        }
        samples = time_round_robin(functions, args.repeats if rows * d >= 1 << 20 else 10 * args.repeats)
        clone = statistics.median(samples["clone"])
        print(f"\n{rows} x {d} fp32 ({x.numel() * 4 / 2**20:.0f} MiB)")
        for name, times in samples.items():
            median = statistics.median(times)
            q1, _, q3 = statistics.quantiles(times, n=4)
            gbps = 2 * x.numel() * 4 / median / 1e9
            print(
                f"  {name:13s} {median * 1e3:9.3f} ms  (IQR {q1 * 1e3:.3f}-{q3 * 1e3:.3f})  {gbps:6.2f} GB/s  {clone / median:5.0%} of clone"
            )


if __name__ == "__main__":
    main()
