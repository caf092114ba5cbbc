"""The persistent, pipelined Triton kernels: same dx as the kernels they replaced, on every path.

The kernels before the persistent grid (one program per tile or per row) are the baseline: their
outputs on a fixed set of cases were hashed once, before the change, into
tests/data/triton_kernel_digests.json (`python tests/test_triton_persistent.py --write` on that
commit). y, s and dx must match those bytes exactly: each row is still computed by the same
operations, only the order in which programs walk the rows changed. dweight (and dbias) are sums
over rows in a different order, so they are held to the accuracy rule of tests/test_triton_kernels.py.

On CPU this runs in Triton's interpreter with a fake SM count (4), so a program walks several tiles
or rows; the digests are interpreter results and are only compared there.
"""

import hashlib
import json
import sys
from pathlib import Path

import pytest
import torch

from normlab.norms.backends.triton import launch, triton_layer_norm, triton_rms_norm

DIGESTS = Path(__file__).resolve().parent / "data" / "triton_kernel_digests.json"
BIT_IDENTICAL = ("y", "s", "dx", "dresidual")
DEVICE = "cpu" if launch.INTERPRETED or not torch.cuda.is_available() else "cuda"
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
# onchip_limit=0 forces the chunked kernels at every width.
PATHS = {
    "rms": {"onchip": {}, "chunked": dict(onchip_limit=0)},
    "layer": {
        "onchip": {},
        "two_pass": dict(onchip_limit=0, stats="two_pass"),
        "welford": dict(onchip_limit=0, stats="welford"),
    },
}
# (residual, weight): the fused add with and without a gain, and the plain norm.
AFFINE = {"plain": (False, True), "residual": (True, True), "residual, no weight": (True, False)}
# (width, dtype, affine) on every path: odd widths, both half precisions, each affine form. The
# interpreter is slow on two shared cores, so one dtype per width.
SHAPES = (
    (1, "fp32", "plain"),
    (3, "fp16", "residual"),
    (127, "bf16", "residual"),
    (127, "fp32", "residual, no weight"),
    (1000, "fp32", "residual"),
    (4097, "bf16", "plain"),
)


def rows_for(d: int, path: str) -> int:
    # On-chip narrow rows: several 32-row tiles per program (4 fake SMs); otherwise a few rows, not a
    # multiple of the programs, and for 4097 fewer rows than programs.
    if d <= 127:
        return 70 if path == "onchip" else 6
    return 3


def chunk_for(d: int) -> int:
    return 64 if d <= 1000 else 1024  # several chunks per row, the last one partial


def case_ids():
    for kind, paths in PATHS.items():
        for path in paths:
            for d, dtype, affine in SHAPES:
                yield f"{kind}/{path}/{d}/{dtype}/{affine}"


def inputs_of(case_id: str):
    kind, path, d, dtype, affine = case_id.split("/")
    d, dtype = int(d), DTYPES[dtype]
    generator = torch.Generator().manual_seed(int(hashlib.sha256(case_id.encode()).hexdigest()[:8], 16))
    randn = lambda *shape: torch.randn(*shape, generator=generator, dtype=torch.float64).to(dtype).to(DEVICE)  # noqa: E731
    rows = rows_for(d, path)
    with_residual, with_weight = AFFINE[affine]
    tensors = dict(x=randn(rows, d), dy=randn(rows, d))
    if with_residual:
        tensors.update(residual=randn(rows, d), ds=randn(rows, d))
    if with_weight:
        tensors.update(weight=randn(d))
        if kind == "layer":
            tensors.update(bias=randn(d))
    limits = PATHS[kind][path] | ({"chunk": chunk_for(d)} if path != "onchip" else {})
    return kind, limits, tensors


def outputs_of(case_id: str) -> dict[str, torch.Tensor]:
    """y (and s), and the gradients of sum(y * dy) (+ sum(s * ds)) for every input."""
    kind, limits, tensors = inputs_of(case_id)
    leaves = {
        name: tensors[name].clone().requires_grad_() for name in ("x", "residual", "weight", "bias") if name in tensors
    }
    norm = triton_rms_norm if kind == "rms" else triton_layer_norm
    args = (leaves["x"], leaves.get("weight")) + ((leaves.get("bias"),) if kind == "layer" else ())
    out = norm(*args, residual=leaves.get("residual"), **limits)
    y, s = out if "residual" in leaves else (out, None)
    upstream = [(y, tensors["dy"])] + ([(s, tensors["ds"])] if s is not None else [])
    grads = torch.autograd.grad([o for o, _ in upstream], list(leaves.values()), [g for _, g in upstream])
    result = {"y": y.detach()} | ({"s": s.detach()} if s is not None else {})
    return result | {f"d{name}": grad for name, grad in zip(leaves, grads)}


def digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()[:16]


if __name__ == "__main__" and "--write" in sys.argv:
    DIGESTS.write_text(
        json.dumps(
            {c: {k: digest(v) for k, v in outputs_of(c).items() if k in BIT_IDENTICAL} for c in case_ids()},
            indent=0,
            sort_keys=True,
        )
        + "\n"
    )
    print(f"wrote {DIGESTS}")
