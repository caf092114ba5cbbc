"""Host-side (Python) cost of one backend="triton" norm call, layer by layer, without a GPU.

    TRITON_INTERPRET=1 python scripts/triton_host_overhead.py [--repeats 2000] [--rows 8 --d 256]

On a CUDA machine a norm call is only as fast as the Python that enqueues its kernel: below ~10^7
elements the GPU finishes before the host does. Here, on CPU, Triton's interpreter would run the
kernels in NumPy, so this replaces InterpretedFunction.run with a no-op: `kernel[grid](...)` still
builds its launch closure and passes its arguments, but nothing executes. Outputs are then
uninitialised; only the time is of interest. Tensors are tiny so allocations cost what they cost on a
GPU's caching allocator (a few µs), not a memset.

The interpreter's `kernel[grid]` is not the GPU's: there, JITFunction.run binds and specialises the
arguments, looks up the compiled kernel and calls the C launcher. A last section times that too, in a
subprocess without the interpreter: the forward kernel is compiled for sm_90 (Triton ships ptxas) and
launched through a stand-in CUDA driver whose launcher does nothing, once through JITFunction.run and
once through the direct launcher normlab uses (launch.FORWARD_ONCHIP). It misses only the C
launcher and cuLaunchKernel (a few µs on a GPU host). Add the direct launch per kernel launch to the
stubbed layers (one per forward; one per backward, plus one for the partials reduction with a weight or
bias) for an estimate of the GPU host path.

Layers, each timed with the ones below it. µs per call of this process's CPU time (time.process_time:
time other processes hold the shared cores is not counted), the minimum over rounds, the median in
brackets:
    launch        normlab.norms.backends.triton.launch.rms_forward / rms_backward (launch.forward / backward with
                  centred=False): allocations, grid, kernel[grid]
    custom op     torch.ops.normlab.rms_norm_forward (no grad), the torch.library dispatch
    triton        normlab.norms.backends.triton.triton_rms_norm: validation, dtype handling, then the eager path
    functional    normlab.rms_norm(..., backend="triton"): the public entry point
and forward+backward (inputs requiring grad; y.backward(dy)) at the triton and functional layers.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

COMPILED_LAUNCHER = "--compiled-launcher"  # the subprocess mode: real JITFunction, stand-in driver
if COMPILED_LAUNCHER in sys.argv:
    os.environ.pop("TRITON_INTERPRET", None)  # off before triton defines the kernels
else:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402

import normlab  # noqa: E402
from normlab.norms.backends.triton import (  # noqa: E402
    launch,  # noqa: E402
    triton_layer_norm,
    triton_rms_norm,
)


def stub_kernels() -> None:
    if not launch.INTERPRETED:
        raise SystemExit("run with TRITON_INTERPRET=1 (set before triton is imported): this times the host path on CPU")
    from triton.runtime.interpreter import InterpretedFunction

    InterpretedFunction.run = lambda self, *args, grid, warmup, **kwargs: None


def install_stand_in_driver() -> None:
    """A CUDA driver for Triton that compiles for sm_90 but loads and launches nothing (see the module docstring)."""
    from triton.backends.compiler import GPUTarget
    from triton.runtime.driver import driver

    class Utils:
        def get_device_properties(self, device):
            return {"max_shared_mem": 232448, "multiprocessor_count": 132}  # H100/H200

        def load_binary(self, name, kernel, shared, device):
            return object(), object(), 32, 0, 1024  # module, function, registers, spills, max threads

    class StandInDriver:
        utils = Utils()

        def get_current_device(self):
            return 0

        def get_current_stream(self, device):
            return 0

        def get_current_target(self):
            return GPUTarget("cuda", 90, 32)

        def launcher_cls(self, src, metadata):
            return lambda *args: None

    driver.set_active(StandInDriver())


def compiled_launcher_us(rows: int, d: int, repeats: int, rounds: int) -> list[tuple[float, float]]:
    """The on-chip forward kernel's launch, compiled for sm_90 with the stand-in driver, two ways:
    JITFunction.run (`kernel[grid](...)`) and launch.FORWARD_ONCHIP (the direct launcher normlab uses)."""
    from normlab.norms.backends.triton import norm_kernels, tuning

    install_stand_in_driver()
    x, w = torch.randn(rows, d), torch.randn(d)
    y, ms = torch.empty_like(x), torch.empty(rows)
    tile_rows, block = launch._tile(rows, d)
    config = tuning.onchip_forward("rms", tile_rows * block, x.element_size(), tile_rows)  # as launch.forward does
    grid = (tuning.persistent_programs(launch._cdiv(rows, tile_rows), 132, config.programs_per_sm),)
    kernel = norm_kernels.forward_onchip[grid]
    flags = dict(
        HAS_RESIDUAL=False,
        HAS_WEIGHT=True,
        HAS_BIAS=False,
        CENTRED=False,
        EPS_INSIDE=True,
        ROWS=tile_rows,
        BLOCK=block,
        STAGES=config.stages,
        RELOAD=config.reload,
        num_warps=config.warps,
    )
    # rows, N, K, the row strides of x and the residual, one head (so no head strides), eps, the gain's offset
    args = (rows, d, d, d, d, 1, 0, 0, 1e-6, 0.0)
    call = lambda: kernel(x, x, w, x, y, x, ms, ms, *args, **flags)  # noqa: E731
    direct = lambda: launch.FORWARD_ONCHIP(grid, x, x, w, x, y, x, ms, ms, *args, **flags)  # noqa: E731
    call()  # compiles once, for sm_90
    direct()  # finds it, and keeps its launcher
    return per_call_us([("JITFunction.run", call), ("direct", direct)], repeats, rounds)


def per_call_us(rows, repeats: int, rounds: int) -> list[tuple[float, float]]:
    """(min, median) per row over `rounds` rounds of the mean µs per call of `repeats` calls.

    Rounds are interleaved across rows, so a burst of load from other processes lands on all of them."""
    for _, fn in rows:
        for _ in range(max(10, repeats // 10)):
            fn()
    samples = [[] for _ in rows]
    for _ in range(rounds):
        for (_, fn), row_samples in zip(rows, samples):
            start = time.process_time()
            for _ in range(repeats):
                fn()
            row_samples.append((time.process_time() - start) / repeats * 1e6)
    return [(min(row), statistics.median(row)) for row in samples]


def cases(rows: int, d: int):
    x, w, b = torch.randn(rows, d), torch.randn(d), torch.randn(d)
    xg, wg, bg = (t.clone().requires_grad_() for t in (x, w, b))
    dy = torch.randn(rows, d)
    eps, k = 1e-6, d
    eps_t, eps_layer_t = torch.tensor(eps, dtype=torch.float64), torch.tensor(1e-5, dtype=torch.float64)  # the ops' eps
    limits = (launch.ONCHIP_LIMIT, launch.CHUNK)
    y, _, ms = launch.rms_forward(x, w, None, eps, 0.0, True, k, *limits)
    _, _, mean, rstd = launch.layer_forward(x, w, b, None, 1e-5, "welford", *limits)

    def backward(out):
        out.backward(dy)

    return {
        "rms": [
            ("launch forward", lambda: launch.rms_forward(x, w, None, eps, 0.0, True, k, *limits)),
            ("launch backward", lambda: launch.rms_backward(dy, None, x, w, ms, eps, 0.0, True, k, *limits)),
            (
                "custom op forward (no grad)",
                lambda: torch.ops.normlab.rms_norm_forward(x, w, None, eps_t, 0.0, True, k, *limits),
            ),
            ("triton_rms_norm forward", lambda: triton_rms_norm(x, w, eps)),
            ("normlab.rms_norm forward", lambda: normlab.rms_norm(x, w, eps, backend="triton")),
            ("triton_rms_norm forward (grad)", lambda: triton_rms_norm(xg, wg, eps)),
            ("triton_rms_norm fwd+bwd", lambda: backward(triton_rms_norm(xg, wg, eps))),
            ("normlab.rms_norm fwd+bwd", lambda: backward(normlab.rms_norm(xg, wg, eps, backend="triton"))),
        ],
        "layer": [
            ("launch forward", lambda: launch.layer_forward(x, w, b, None, 1e-5, "welford", *limits)),
            ("launch backward", lambda: launch.layer_backward(dy, None, x, w, mean, rstd, True, *limits)),
            (
                "custom op forward (no grad)",
                lambda: torch.ops.normlab.layer_norm_forward(x, w, b, None, eps_layer_t, "welford", *limits),
            ),
            ("triton_layer_norm forward", lambda: triton_layer_norm(x, w, b)),
            ("normlab.layer_norm forward", lambda: normlab.layer_norm(x, w, b, backend="triton")),
            ("triton_layer_norm forward (grad)", lambda: triton_layer_norm(xg, wg, bg)),
            ("triton_layer_norm fwd+bwd", lambda: backward(triton_layer_norm(xg, wg, bg))),
            ("normlab.layer_norm fwd+bwd", lambda: backward(normlab.layer_norm(xg, wg, bg, backend="triton"))),
        ],
        "for scale (PyTorch's own CPU ops, real work at this size)": [
            ("x.clone()", lambda: x.clone()),
            ("torch.empty_like(x)", lambda: torch.empty_like(x)),
            ("F.rms_norm forward", lambda: torch.nn.functional.rms_norm(x, (d,), w, eps)),
            ("F.rms_norm fwd+bwd", lambda: backward(torch.nn.functional.rms_norm(xg, (d,), wg, eps))),
            ("F.layer_norm forward", lambda: torch.nn.functional.layer_norm(x, (d,), w, b, 1e-5)),
            ("F.layer_norm fwd+bwd", lambda: backward(torch.nn.functional.layer_norm(xg, (d,), wg, bg, 1e-5))),
        ],
    }


RATIOS = [
    ("normlab.rms_norm forward", "F.rms_norm forward"),
    ("normlab.rms_norm fwd+bwd", "F.rms_norm fwd+bwd"),
    ("normlab.layer_norm forward", "F.rms_norm forward"),
    ("normlab.layer_norm fwd+bwd", "F.rms_norm fwd+bwd"),
    ("normlab.layer_norm forward", "F.layer_norm forward"),
    ("normlab.layer_norm fwd+bwd", "F.layer_norm fwd+bwd"),
]


def python_calls(rows: int, d: int) -> dict[str, int]:
    """Python function calls from entering normlab.rms_norm / layer_norm (backend="triton", a memoised kind of call)
    to the forward kernel's launch (entering DirectLauncher.__call__), counted with sys.setprofile: the entry point
    and every Python function after it, the launcher not included. C functions (tensor methods, torch's C++
    entry points) are not counted."""
    from normlab.norms.backends.triton.direct_launch import DirectLauncher

    launcher = DirectLauncher.__call__.__code__
    x, w, b = torch.randn(rows, d), torch.randn(d), torch.randn(d)
    xg = x.clone().requires_grad_()
    calls = {
        "normlab.rms_norm": lambda x: normlab.rms_norm(x, w, 1e-6, backend="triton"),
        "normlab.layer_norm": lambda x: normlab.layer_norm(x, w, b, 1e-5, backend="triton"),
    }
    counts = {}
    for name, call in calls.items():
        for grad, inputs in (("no grad", x), ("grad", xg)):
            call(inputs)  # the plan is memoised: the count is a warm call's
            seen = []

            def profile(frame, event, arg, seen=seen):
                if event == "call" and not (seen and seen[-1] is launcher):
                    seen.append(frame.f_code)

            sys.setprofile(profile)
            try:
                call(inputs)
            finally:
                sys.setprofile(None)
            # the lambda above and the profiler's own exit are not part of the path
            path = seen[1 : seen.index(launcher)]
            counts[f"{name} ({grad})"] = len(path)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=100, help="calls per row in each timing round")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--d", type=int, default=256)
    parser.add_argument(
        "--calls", action="store_true", help="only count the Python calls between the entry point and the launch"
    )
    parser.add_argument(COMPILED_LAUNCHER, action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.compiled_launcher:
        for low, median in compiled_launcher_us(args.rows, args.d, args.repeats, args.rounds):
            print(low, median)
        return
    stub_kernels()
    if args.calls:
        for name, count in python_calls(args.rows, args.d).items():
            print(f"{name:34s} {count:4d} Python calls to the launch")
        return
    print(
        f"host µs per call, {args.rows}x{args.d} fp32 on CPU, kernels stubbed; min [median] of {args.rounds} rounds of {args.repeats}"
    )
    minima = {}
    for group, rows in cases(args.rows, args.d).items():
        print(f"\n{group}")
        for (name, _), (low, median) in zip(rows, per_call_us(rows, args.repeats, args.rounds)):
            print(f"  {name:34s} {low:8.1f}  [{median:7.1f}]")
            minima[name] = low
    print(
        "\nThe public entry point against PyTorch's (ratio of minima; the issue's target: <= 1.3 forward, <= 1.0 both)"
    )
    for ours, theirs in RATIOS:
        print(f"  {ours:28s} / {theirs:22s} {minima[ours] / minima[theirs]:5.2f}")
    print("\nA compiled kernel's launch (sm_90 kernel, stand-in driver), per launch")
    command = [sys.executable, __file__, COMPILED_LAUNCHER] + [
        f"--{k}={getattr(args, k)}" for k in ("repeats", "rounds", "rows", "d")
    ]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode == 0:
        lines = [tuple(map(float, line.split())) for line in done.stdout.strip().splitlines()[-2:]]
        names = ("kernel[grid](...), JITFunction.run", "launch.FORWARD_ONCHIP (direct)")
        for name, (low, median) in zip(names, lines):
            print(f"  {name:34s} {low:8.1f}  [{median:7.1f}]")
    else:  # e.g. no ptxas for this platform: say so, keep the rest
        print(f"  not measured: {(done.stderr.strip().splitlines() or ['no output'])[-1]}")


if __name__ == "__main__":
    main()
