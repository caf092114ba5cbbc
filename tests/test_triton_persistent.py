"""The persistent, pipelined Triton kernels: same dx as the kernels they replaced, on every path.

The kernels before the persistent grid (one program per tile or per row) are the baseline: their
outputs on a fixed set of cases were hashed once, before the change, into
tests/data/triton_kernel_digests.json (`python tests/test_triton_persistent.py --write` on that
commit). y, s and dx must match those bytes exactly: each row is still computed by the same
operations, only the order in which programs walk the rows changed. dweight (and dbias) are sums
over rows in a different order, so they are held to the accuracy rule of tests/test_triton_kernels.py.
One deliberate change since: the chunked backward's table streams 2-4 rows a step
(tuning.rows_per_step), so a row's sums take chunks of chunk / GROUP elements; the six float32
cases whose dx moved by that rounding were written again (y and s, and every other case, kept theirs).

On CPU this runs in Triton's interpreter with a fake SM count (4), so a program walks several tiles
or rows; the digests are interpreter results and are only compared there, and only where the file's
`environment` (the torch, Triton and NumPy releases and the architecture: tests/golden.py) matches.
They do not depend on the CPU model: the interpreter's arithmetic here is NumPy's IEEE sums, products,
divisions and square roots, and `make test-portable` runs them again with ATen's and NumPy's
portable kernels. On a GPU (scripts/gpu_session.py
runs this file there, with pytest-xdist) the rest runs on CUDA tensors with the real compiler.
"""

import hashlib
import itertools
import json
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from golden import compare_only_where_recorded, environment
from normlab import layer_norm_reference, rms_norm_reference
from normlab.norms.backends.triton import launch, triton_layer_norm, triton_rms_norm, tuning

DIGESTS = Path(__file__).resolve().parent / "data" / "triton_kernel_digests.json"
BIT_IDENTICAL = ("y", "s", "dx", "dresidual")
DIGESTS_DEPEND_ON = ("torch", "triton", "numpy", "machine")
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


# ---------------------------------------------------------------- against the kernels before the change


def pytorch_and_reference_weight_grads(case_id: str):
    """(PyTorch's own dweight/dbias in the case's dtype, the float64 ones): the accuracy rule's two sides."""
    kind, _, tensors = inputs_of(case_id)

    def grads(dtype):
        x, dy = tensors["x"].to(dtype), tensors["dy"].to(dtype)
        s = x + tensors["residual"].to(dtype) if "residual" in tensors else x
        params = [tensors[name].to(dtype).requires_grad_() for name in ("weight", "bias") if name in tensors]
        if kind == "rms":
            y = F.rms_norm(s, (s.shape[-1],), params[0], 1e-6)
        else:
            y = F.layer_norm(s, (s.shape[-1],), params[0], params[1], 1e-5)
        return dict(zip(("dweight", "dbias"), torch.autograd.grad(y, params, dy)))

    return grads(tensors["x"].dtype), grads(torch.float64)


def relative_error(actual, expected):
    # Relative to at least 1: LayerNorm's dweight at d = 1 is exactly zero, and rounding noise has no relative size.
    actual, expected = actual.double(), expected.double()
    return ((actual - expected).abs().max() / expected.abs().max().clamp_min(1.0)).item()


@pytest.mark.skipif(DEVICE != "cpu", reason="the digests are of the interpreter's results")
@pytest.mark.parametrize("case_id", list(case_ids()))
def test_outputs_match_the_kernels_before_the_persistent_grid(case_id):
    recorded = json.loads(DIGESTS.read_text())
    compare_only_where_recorded(DIGESTS.name, recorded.get("environment"), DIGESTS_DEPEND_ON)
    outputs = outputs_of(case_id)
    expected = recorded["digests"][case_id]
    assert {name: digest(outputs[name]) for name in expected} == expected
    if "weight" not in inputs_of(case_id)[2]:
        return
    # dweight and dbias: the rule of tests/test_triton_kernels.py (1e-5 in fp32; half: twice PyTorch's error).
    pytorch, reference = pytorch_and_reference_weight_grads(case_id)
    dtype = outputs["y"].dtype
    for name, want in reference.items():
        if dtype == torch.float32:
            bound = 1e-5
        else:
            bound = 2 * relative_error(pytorch[name], want) + torch.finfo(dtype).eps
        assert relative_error(outputs[name], want) <= bound, name


# ---------------------------------------------------------------- the persistent grid


@pytest.mark.parametrize("work_items", (1, 3, 9, 10, 37, 1000))
@pytest.mark.parametrize("sm_count, per_sm", ((4, 1), (132, 2), (132, 4)))
def test_persistent_programs_give_every_program_a_run(work_items, sm_count, per_sm):
    programs = tuning.persistent_programs(work_items, sm_count, per_sm)
    assert 1 <= programs <= min(work_items, sm_count * per_sm)
    per_program = -(-work_items // programs)
    assert (programs - 1) * per_program < work_items <= programs * per_program  # the last run is not empty


def test_persistent_programs_refuse_zero_counts():
    with pytest.raises(ValueError, match="sm_count=0"):
        tuning.persistent_programs(5, 0, 2)


@triton.jit
def _record_span(OWNER, n_items, PER_ITEM: tl.constexpr):
    first, last = tuning.program_span(n_items, PER_ITEM)
    for tile in range(first, last):
        tl.store(OWNER + tile, tl.program_id(0))


@pytest.mark.skipif(DEVICE != "cpu", reason="a bookkeeping check, in the interpreter")
@pytest.mark.parametrize("n_items, per_item", ((10, 1), (9, 1), (37, 4), (2, 1), (70, 32)))
def test_program_span_splits_tiles_into_contiguous_runs(n_items, per_item):
    tiles = -(-n_items // per_item)
    programs = tuning.persistent_programs(tiles, 4, 1)
    owner = torch.full((tiles,), -1, dtype=torch.int32)
    _record_span[(programs,)](owner, n_items, PER_ITEM=per_item)
    assert (owner >= 0).all(), "a tile no program took"
    assert (owner.diff() >= 0).all() and set(owner.tolist()) == set(range(programs))  # contiguous, none idle


def test_launch_config_for_every_width_and_dtype_the_launchers_use():
    for kind, size, elements in itertools.product(("rms", "layer"), (2, 4, 8), [2**k for k in range(15)]):
        configs = [tuning.onchip_forward(kind, elements, size), tuning.onchip_backward(kind, elements, size)]
        configs += [tuning.chunked_forward(kind, elements, size), tuning.chunked_backward(kind, elements, size)]
        for config in configs:
            assert config.warps in (1, 2, 4, 8, 16, 32) and config.stages in (1, 2) and config.programs_per_sm >= 1
        chunked = configs[2:]
        assert all(c.programs_per_sm <= tuning.CHUNKED_PROGRAMS_PER_SM for c in chunked)  # rows stay in L2


# ---------------------------------------------------------------- several tiles or rows per program

# (width, rows) where each of the 4 fake SMs' programs walks several tiles (on-chip: d = 1000 is tiles of
# 4 rows, d = 127 of 32) or rows (chunked), with the last run shorter, and where rows are fewer than programs.
MANY_TILES = {"onchip": ((1000, 37), (127, 200), (1000, 2)), "chunked": ((300, 10), (300, 2))}
LIMITS = {"onchip": {}, "chunked": dict(onchip_limit=128, chunk=64)}


def _cases_of_many_tiles():
    for path, shapes in MANY_TILES.items():
        for d, rows in shapes:
            yield path, d, rows


@pytest.fixture
def poisoned_outputs(monkeypatch):
    """Every buffer the launchers allocate starts as NaN, on the device asked for (CUDA in the GPU session), so an
    element no program wrote shows."""

    def nan_filled(shape, dtype, device):
        return torch.full(shape, float("nan"), dtype=dtype, device=device)

    monkeypatch.setattr(launch, "_empty", nan_filled)


@pytest.mark.parametrize("path, d, rows", list(_cases_of_many_tiles()))
def test_many_tiles_per_program_fp32(path, d, rows, poisoned_outputs):
    generator = torch.Generator().manual_seed(d + rows)
    randn = lambda *shape: torch.randn(*shape, generator=generator).to(DEVICE)  # noqa: E731
    x, r, weight, bias = randn(rows, d), randn(rows, d), randn(d), randn(d)
    dy, ds = randn(rows, d), randn(rows, d)
    for kind in ("rms", "layer"):
        leaves = [t.clone().requires_grad_() for t in (x, r, weight) + ((bias,) if kind == "layer" else ())]
        wide = [t.detach().double().requires_grad_() for t in leaves]
        if kind == "rms":
            ours = triton_rms_norm(leaves[0], leaves[2], residual=leaves[1], offset=0.5, **LIMITS[path])
            theirs = rms_norm_reference(wide[0], wide[2], residual=wide[1], offset=0.5)
        else:
            ours = triton_layer_norm(leaves[0], leaves[2], leaves[3], residual=leaves[1], **LIMITS[path])
            theirs = layer_norm_reference(wide[0], wide[2], wide[3], residual=wide[1])
        grads = torch.autograd.grad(ours, leaves, (dy, ds))
        expected = torch.autograd.grad(theirs, wide, (dy.double(), ds.double()))
        for got, want in zip(list(ours) + list(grads), list(theirs) + list(expected)):
            assert torch.isfinite(got).all() and relative_error(got, want) < 1e-5


@pytest.mark.parametrize("dtype", (torch.float16, torch.bfloat16))
@pytest.mark.parametrize("path", ("onchip", "chunked"))
def test_many_tiles_per_program_half_no_weight(dtype, path, poisoned_outputs):
    d, rows = MANY_TILES[path][0]
    generator = torch.Generator().manual_seed(3)
    x, r = (torch.randn(rows, d, generator=generator).to(dtype).to(DEVICE) for _ in range(2))
    y, s = triton_rms_norm(x, None, residual=r, **LIMITS[path])
    expected = rms_norm_reference((x + r).double())
    pytorch = relative_error(F.rms_norm(x + r, (d,), None, 1e-6), expected)
    assert torch.equal(s, x + r) and relative_error(y, expected) <= 2 * pytorch + torch.finfo(dtype).eps
    y = triton_layer_norm(x, **LIMITS[path])
    expected = layer_norm_reference(x.double())
    pytorch = relative_error(F.layer_norm(x, (d,), None, None, 1e-5), expected)
    assert relative_error(y, expected) <= 2 * pytorch + torch.finfo(dtype).eps


@pytest.mark.parametrize("path", ("onchip", "chunked"))
def test_many_tiles_per_program_gradcheck_float64(path):
    # On-chip: 40 rows of 300 are 5 tiles of 8 rows on 3 programs; chunked: 7 rows of 10 on 4 programs.
    d, rows = (300, 40) if path == "onchip" else (10, 7)
    limits = {} if path == "onchip" else dict(onchip_limit=4, chunk=4)
    generator = torch.Generator().manual_seed(5)
    x, r = (torch.randn(rows, d, generator=generator, dtype=torch.float64).to(DEVICE) for _ in range(2))
    weight, bias = (torch.randn(d, generator=generator, dtype=torch.float64).to(DEVICE) for _ in range(2))
    inputs = tuple(t.requires_grad_() for t in (x, weight, bias, r))
    rms = lambda x, w, b, r: triton_rms_norm(x, w, eps=1e-3, residual=r, partial=0.7, **limits)  # noqa: E731
    layer = lambda x, w, b, r: triton_layer_norm(x, w, b, residual=r, **limits)  # noqa: E731
    assert torch.autograd.gradcheck(rms, inputs, fast_mode=True)
    assert torch.autograd.gradcheck(layer, inputs, fast_mode=True)


if __name__ == "__main__" and "--write" in sys.argv:
    DIGESTS.write_text(
        json.dumps(
            {
                "environment": environment(DIGESTS_DEPEND_ON),
                "digests": {
                    c: {k: digest(v) for k, v in outputs_of(c).items() if k in BIT_IDENTICAL} for c in case_ids()
                },
            },
            indent=0,
            sort_keys=True,
        )
        + "\n"
    )
    print(f"wrote {DIGESTS}")
