"""Compile every Triton kernel variant for an H100/H200 (sm_90) without a GPU.

    python scripts/compile_kernels_sm90.py [--quick]

Triton's interpreter (the CPU tests) executes kernels as NumPy and so misses
errors only the real compiler sees: type changes in loops, unsupported ops,
register-allocation failures. Register spills (slow on GPU) are printed. Triton ships ptxas, so lowering to a cubin for
sm_90 needs no device. Covers every constexpr flag combination, for fp16,
bf16, fp32 and fp64 inputs, at the block sizes the launchers use.
"""

import argparse
import itertools
import os
import re
import subprocess
import sys
import tempfile

os.environ.pop("TRITON_INTERPRET", None)  # must be off before the kernels are defined

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from normlab.norms.backends.triton import launch, layer_kernels, rms_kernels  # noqa: E402
from normlab.norms.backends.triton._runtime import warps_for  # noqa: E402

CUOBJDUMP = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")

TARGET = GPUTarget("cuda", 90, 32)
IO_POINTERS = "X R W B Y S DY DS DX".split()
STAT_POINTERS = "MS MEAN RSTD DW_PARTIAL DB_PARTIAL".split()
FLOAT_SCALARS = ("eps", "offset")


def compile_kernel(kernel, io_dtype, stat_dtype, constexprs, warps):
    """Compiles one variant to a cubin; returns (registers, stack bytes): stack > 0 means spills."""
    signature = {}
    for name in kernel.arg_names:
        if name in constexprs:
            signature[name] = "constexpr"
        elif name in IO_POINTERS:
            signature[name] = f"*{io_dtype}"
        elif name in STAT_POINTERS:
            signature[name] = f"*{stat_dtype}"
        else:
            signature[name] = "fp32" if name in FLOAT_SCALARS else "i32"
    source = ASTSource(kernel, signature, constexprs={(kernel.arg_names.index(k),): v for k, v in constexprs.items()})
    compiled = triton.compile(source, target=TARGET, options={"num_warps": warps})
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(compiled.asm["cubin"])
        cubin.flush()
        usage = subprocess.run([CUOBJDUMP, "--dump-resource-usage", cubin.name], capture_output=True, text=True).stdout
    registers, stack = re.search(r"REG:(\d+) STACK:(\d+)", usage).groups()
    return int(registers), int(stack)


def variants(quick):
    """(kernel, constexprs, num_warps) as the launchers would pick them."""
    flag_sets = [(False, True, True)] if quick else list(itertools.product((False, True), repeat=3))
    forward_tiles = [(32, 128), (1, 4096), (1, launch.ONCHIP_LIMIT)]
    backward_tiles = [(32, 128), (1, 4096), (1, launch.BACKWARD_ONCHIP_LIMIT)]
    for a, b, c in flag_sets:
        for rows, block in forward_tiles:
            tile, warps = dict(ROWS=rows, BLOCK=block), warps_for(rows * block)
            yield rms_kernels.rms_forward_onchip, dict(HAS_RESIDUAL=a, HAS_WEIGHT=b, EPS_INSIDE=c, **tile), warps
            yield layer_kernels.layer_forward_onchip, dict(HAS_RESIDUAL=a, HAS_WEIGHT=b, HAS_BIAS=c, **tile), warps
        for rows, block in backward_tiles:
            tile, warps = dict(ROWS=rows, BLOCK=block), launch.backward_warps(rows * block)
            yield rms_kernels.rms_backward_onchip, dict(HAS_DS=a, HAS_WEIGHT=b, EPS_INSIDE=c, **tile), warps
            yield layer_kernels.layer_backward_onchip, dict(HAS_DS=a, HAS_WEIGHT=b, HAS_BIAS=c, **tile), warps
        chunked, warps = dict(CHUNK=launch.CHUNK), warps_for(launch.CHUNK)
        yield rms_kernels.rms_forward_chunked, dict(HAS_RESIDUAL=a, HAS_WEIGHT=b, EPS_INSIDE=c, **chunked), warps
        yield rms_kernels.rms_backward_chunked, dict(HAS_DS=a, HAS_WEIGHT=b, EPS_INSIDE=c, **chunked), warps
        for welford in (False, True):
            yield (
                layer_kernels.layer_forward_chunked,
                dict(HAS_RESIDUAL=a, HAS_WEIGHT=b, HAS_BIAS=c, WELFORD=welford, **chunked),
                warps,
            )
        yield layer_kernels.layer_backward_chunked, dict(HAS_DS=a, HAS_WEIGHT=b, HAS_BIAS=c, **chunked), warps


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="one flag combination per kernel")
    args = parser.parse_args()
    failures, spilling, count = 0, 0, 0
    cases = [(io, "fp64" if io == "fp64" else "fp32") for io in ("fp16", "bf16", "fp32", "fp64")]
    for (io_dtype, stat_dtype), (kernel, constexprs, warps) in itertools.product(cases, list(variants(args.quick))):
        count += 1
        try:
            registers, stack = compile_kernel(kernel, io_dtype, stat_dtype, constexprs, warps)
        except Exception as error:  # report every failing variant, not just the first
            failures += 1
            print(f"FAIL {kernel.__name__} {io_dtype} {constexprs}: {type(error).__name__}: {str(error)[:300]}")
            continue
        if stack and io_dtype != "fp64":  # fp64 is for gradcheck, not speed
            spilling += 1
            print(
                f"spills: {stack} B stack, {registers} registers, {warps} warps: {kernel.__name__} {io_dtype} {constexprs}"
            )
    print(f"{count - failures}/{count} variants compiled for sm_90; {spilling} (fp16/bf16/fp32) spill registers")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
