"""RMSNorm vs LayerNorm training step (forward+backward) on CPU, side by side with a copy.

    python scripts/cpu_train_step.py [--repeats 30] [--shapes 8192x256 8192x1024]

Times, interleaved round by round, an allocating copy (clone) and forward+backward
of backend="auto" RMSNorm (the hand-written "cpp" kernel for fp32) and LayerNorm, and
RMSNorm's native F.rms_norm and inductor-compiled paths, as
the speed chapter's harness does: gradients returned by torch.autograd.grad, not
accumulated. Prints the median, the interquartile range and the minimum, and the
fraction of copy bandwidth: (5 full-size passes / time) / (2 passes / copy time), as
normlab.bench.traffic.must_move counts the bytes. On a shared, loaded machine the
medians carry the load; the minima are the closest to a quiet machine's times.
"""

import argparse
import statistics

import torch
from cpu_auto_measure import time_round_robin  # a sibling script: python puts scripts/ on the path

import normlab


def step(norm, backend, params):
    def run(x, dy):
        y = norm(x, *params, backend=backend)
        return torch.autograd.grad(y, (x, *params), dy)

    return run


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads (the study trains one thread per worker process); default: torch's",
    )
    parser.add_argument("--shapes", nargs="+", default=["8192x256", "8192x1024"])
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    for shape in args.shapes:
        rows, d = map(int, shape.split("x"))
        torch.manual_seed(0)
        x = torch.randn(rows, d, requires_grad=True)
        dy = torch.randn(rows, d)
        weight = (1 + 0.1 * torch.randn(d)).requires_grad_()
        bias = (0.1 * torch.randn(d)).requires_grad_()
        functions = {
            "clone": lambda: x.detach().clone(),
            "rms auto": lambda: step(normlab.rms_norm, "auto", (weight,))(x, dy),
            "layer auto": lambda: step(normlab.layer_norm, "auto", (weight, bias))(x, dy),
            "rms torch": lambda: step(normlab.rms_norm, "torch", (weight,))(x, dy),
            "rms compile": lambda: step(normlab.rms_norm, "compile", (weight,))(x, dy),
        }
        samples = time_round_robin(functions, args.repeats, warmup=3)
        clone = statistics.median(samples["clone"])
        print(f"\n{rows} x {d} fp32, forward+backward ({args.repeats} interleaved repeats)")
        for name, times in samples.items():
            median = statistics.median(times)
            q1, _, q3 = statistics.quantiles(times, n=4)
            passes = 2 if name == "clone" else 5
            fraction = (passes / median) / (2 / clone)
            best = min(times)
            print(
                f"  {name:11s} median {median * 1e3:8.3f} ms  (IQR {q1 * 1e3:.3f}-{q3 * 1e3:.3f}, min {best * 1e3:.3f})  "
                f"{median / (2 * clone):5.2f} x two clones  fraction of copy {fraction:5.2f}  "
                f"(by min: {(passes / best) / (2 / min(samples['clone'])):5.2f})"
            )


if __name__ == "__main__":
    main()
