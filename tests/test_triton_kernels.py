"""normlab.norms.backends.triton Triton kernels against the float64 reference.

On CPU these run in Triton's interpreter (tests/conftest.py sets
TRITON_INTERPRET=1), which executes programs one by one: shapes are small, and
the on-chip limit and chunk size are lowered so that the chunked kernels run
at a few hundred elements. On a GPU (scripts/gpu_check.sh) the same tests run
on CUDA tensors with the real compiler.
"""

import pytest
import torch
import torch.nn.functional as F

import normlab
from normlab import layer_norm_reference, rms_norm_reference
from normlab.norms.backends.triton import custom_ops, launch, triton_layer_norm, triton_rms_norm

DEVICE = "cpu" if launch.INTERPRETED or not torch.cuda.is_available() else "cuda"
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
ROW_LENGTHS = (1, 3, 127, 1000, 4096)
SMALL_LIMIT, SMALL_CHUNK, CHUNKED_LENGTH = 128, 64, 400  # 400 >= 3 x 128: the chunked kernels

# Kernel paths: (name, keyword arguments for triton_rms_norm / triton_layer_norm)
RMS_PATHS = {"onchip": {}, "chunked": dict(onchip_limit=SMALL_LIMIT, chunk=SMALL_CHUNK)}
LAYER_PATHS = {
    "onchip": {},
    "two_pass": dict(onchip_limit=SMALL_LIMIT, chunk=SMALL_CHUNK, stats="two_pass"),
    "welford": dict(onchip_limit=SMALL_LIMIT, chunk=SMALL_CHUNK, stats="welford"),
}


def randn(*shape, dtype=torch.float32, requires_grad=False):
    return torch.randn(*shape, dtype=dtype, device=DEVICE, requires_grad=requires_grad)


def relative_error(actual, expected):
    actual, expected = actual.double(), expected.double()
    if expected.numel() == 0:
        return 0.0
    return ((actual - expected).abs().max() / expected.abs().max().clamp_min(1e-30)).item()


def length_for(path):
    return CHUNKED_LENGTH if path != "onchip" else 127


# ---------------------------------------------------------------- forward, fp32


@pytest.mark.parametrize("d", ROW_LENGTHS)
@pytest.mark.parametrize("rows", (0, 1, 6))
def test_onchip_forward_fp32(d, rows):
    torch.manual_seed(d + rows)
    x, weight, bias = randn(rows, d), randn(d), randn(d)
    y = normlab.rms_norm(x, weight, backend="triton")
    assert y.shape == x.shape and y.dtype == x.dtype
    assert relative_error(y, rms_norm_reference(x.double(), weight.double())) < 1e-5
    y = normlab.layer_norm(x, weight, bias, backend="triton")
    assert relative_error(y, layer_norm_reference(x.double(), weight.double(), bias.double())) < 1e-5


@pytest.mark.parametrize("rows", (0, 1, 3))
def test_chunked_forward_fp32(rows, monkeypatch):
    # Through the public API, with the module-level limits lowered.
    monkeypatch.setattr(launch, "ONCHIP_LIMIT", SMALL_LIMIT)
    monkeypatch.setattr(launch, "CHUNK", SMALL_CHUNK)
    torch.manual_seed(rows)
    x, weight, bias = randn(rows, CHUNKED_LENGTH), randn(CHUNKED_LENGTH), randn(CHUNKED_LENGTH)
    y = normlab.rms_norm(x, weight, backend="triton")
    assert relative_error(y, rms_norm_reference(x.double(), weight.double())) < 1e-5
    for stats in ("two_pass", "welford"):
        y = triton_layer_norm(x, weight, bias, stats=stats)
        assert relative_error(y, layer_norm_reference(x.double(), weight.double(), bias.double())) < 1e-5


@pytest.mark.parametrize("path", RMS_PATHS)
@pytest.mark.parametrize(
    "features",
    [
        dict(offset=1.0),
        dict(eps_placement="outside"),
        dict(partial=0.3),
        dict(offset=1.0, eps_placement="outside", partial=0.5),
        dict(weight=None),
    ],
)
def test_rms_features_with_residual(path, features):
    torch.manual_seed(11)
    d = length_for(path)
    x, residual = randn(3, d), randn(3, d)
    weight = features.pop("weight", randn(d) * 0.2)
    w64 = None if weight is None else weight.double()
    y, s = triton_rms_norm(x, weight, residual=residual, **features, **RMS_PATHS[path])
    y_ref, s_ref = rms_norm_reference(x.double(), w64, residual=residual.double(), **features)
    assert relative_error(y, y_ref) < 1e-5 and relative_error(s, s_ref) < 1e-6
    y = triton_rms_norm(x, weight, **features, **RMS_PATHS[path])
    assert relative_error(y, rms_norm_reference(x.double(), w64, **features)) < 1e-5


@pytest.mark.parametrize("path", LAYER_PATHS)
def test_layer_norm_with_residual_and_without_affine(path):
    torch.manual_seed(12)
    d = length_for(path)
    x, residual, weight, bias = randn(3, d), randn(3, d), randn(d), randn(d)
    y, s = triton_layer_norm(x, weight, bias, residual=residual, **LAYER_PATHS[path])
    y_ref, s_ref = layer_norm_reference(x.double(), weight.double(), bias.double(), residual=residual.double())
    assert relative_error(y, y_ref) < 1e-5 and relative_error(s, s_ref) < 1e-6
    y = triton_layer_norm(x, None, None, **LAYER_PATHS[path])
    assert relative_error(y, layer_norm_reference(x.double())) < 1e-5


def test_leading_dimensions_and_transposed_view():
    torch.manual_seed(13)
    x3 = randn(2, 3, 50)
    xt = randn(50, 4).t()  # (4, 50) with last-dim stride 4
    weight, bias = randn(50), randn(50)
    for x in (x3, xt):
        y = normlab.rms_norm(x, weight, backend="triton")
        assert y.shape == x.shape and relative_error(y, rms_norm_reference(x.double(), weight.double())) < 1e-5
        y = normlab.layer_norm(x, weight, bias, backend="triton")
        assert relative_error(y, layer_norm_reference(x.double(), weight.double(), bias.double())) < 1e-5
    # A row-strided (sliced) view keeps its stride: no copy needed, still correct.
    wide = randn(4, 80)
    x = wide[:, :50]
    assert relative_error(triton_rms_norm(x, weight), rms_norm_reference(x.double(), weight.double())) < 1e-5


# ---------------------------------------------------------------- half precision


@pytest.mark.parametrize("dtype", (torch.float16, torch.bfloat16))
@pytest.mark.parametrize("weight_dtype", ("same", "float32"))
@pytest.mark.parametrize("path", ("onchip", "chunked"))
def test_half_precision_no_worse_than_twice_pytorch(dtype, weight_dtype, path):
    torch.manual_seed(14)
    d = length_for(path)
    wdt = dtype if weight_dtype == "same" else torch.float32
    x, weight, bias = randn(5, d, dtype=dtype), randn(d, dtype=wdt), randn(d, dtype=wdt)
    floor = torch.finfo(dtype).eps

    expected = rms_norm_reference(x.double(), weight.double())
    pytorch = relative_error(F.rms_norm(x, (d,), weight.to(dtype), 1e-6), expected)
    y = triton_rms_norm(x, weight, **RMS_PATHS[path])
    assert y.dtype == dtype and relative_error(y, expected) <= 2 * pytorch + floor

    expected = layer_norm_reference(x.double(), weight.double(), bias.double())
    pytorch = relative_error(F.layer_norm(x, (d,), weight.to(dtype), bias.to(dtype), 1e-5), expected)
    for layer_path in ("onchip",) if path == "onchip" else ("two_pass", "welford"):
        y = triton_layer_norm(x, weight, bias, **LAYER_PATHS[layer_path])
        assert y.dtype == dtype and relative_error(y, expected) <= 2 * pytorch + floor


@pytest.mark.parametrize("dtype", (torch.float16, torch.bfloat16))
@pytest.mark.parametrize("residual", (False, True))
@pytest.mark.parametrize("path", ("onchip", "chunked"))
def test_half_precision_forward_and_backward_with_and_without_residual(dtype, residual, path):
    # On CPU this runs in the interpreter, which normlab patches to compute bf16 in fp32 and round to
    # nearest (normlab.norms.backends.triton._runtime.patch_interpreter_bf16); unpatched, bf16 x + residual came out NaN.
    torch.manual_seed(15)
    d = length_for(path)
    x, weight = randn(6, d, dtype=dtype, requires_grad=True), randn(d, dtype=dtype, requires_grad=True)
    r = randn(6, d, dtype=dtype, requires_grad=True) if residual else None
    dy = randn(6, d, dtype=dtype)
    floor = torch.finfo(dtype).eps
    leaves = [x, weight] + ([r] if residual else [])
    wide = [t.detach().double().requires_grad_() for t in leaves]
    expected = rms_norm_reference(wide[0], wide[1], residual=wide[2] if residual else None)
    expected_y = expected[0] if residual else expected
    expected_grads = torch.autograd.grad(expected_y, wide, dy.double())

    def pytorch_step():  # PyTorch's own computation in this dtype, judged against the same reference
        s = x if r is None else x + r
        y = F.rms_norm(s, (d,), weight, 1e-6)
        return y, torch.autograd.grad(y, leaves, dy)

    pytorch_y, pytorch_grads = pytorch_step()
    out = triton_rms_norm(x, weight, residual=r, **RMS_PATHS[path])
    y = out[0] if residual else out
    grads = torch.autograd.grad(y, leaves, dy)
    assert y.dtype == dtype and torch.isfinite(y).all()
    assert relative_error(y, expected_y) <= 2 * relative_error(pytorch_y, expected_y) + floor
    for got, theirs, want in zip(grads, pytorch_grads, expected_grads):
        assert got.dtype == dtype and torch.isfinite(got).all()
        assert relative_error(got, want) <= 2 * relative_error(theirs, want) + floor
    if residual:
        assert torch.equal(out[1], x + r)  # s rounded as the unfused add rounds it

    layer_out = triton_layer_norm(
        x, weight, weight, residual=r, **LAYER_PATHS["onchip" if path == "onchip" else "welford"]
    )
    layer_y = layer_out[0] if residual else layer_out
    s = x.double() if r is None else (x + r).double()
    expected_layer = F.layer_norm(s, (d,), weight.double(), weight.double(), 1e-5)
    pytorch_layer = F.layer_norm(x if r is None else x + r, (d,), weight, weight, 1e-5)
    assert relative_error(layer_y, expected_layer) <= 2 * relative_error(pytorch_layer, expected_layer) + floor


def test_interpreter_rounds_bf16_to_nearest():
    # fp32 statistics, one rounding: the kernel's bf16 output equals the fp32 result rounded to nearest
    # (torch's .to(bfloat16)) except where fp32 summation order flips a tie; truncation was 1 ulp off on half.
    torch.manual_seed(16)
    x, weight = randn(64, 256, dtype=torch.bfloat16), randn(256, dtype=torch.bfloat16)
    rounded = rms_norm_reference(x.float(), weight.float()).to(torch.bfloat16)
    y = triton_rms_norm(x, weight)
    differ = (y != rounded).float().mean().item()
    assert differ < 0.01, f"{differ:.1%} of bf16 outputs differ from round-to-nearest"
    s, s_expected = triton_rms_norm(x, weight, residual=x)[1], x + x
    assert torch.equal(s, s_expected)


# ---------------------------------------------------------------- gradients

RMS_GRAD_CASES = [
    dict(),
    dict(residual=True),
    dict(offset=0.5),
    dict(partial=0.5),
    dict(eps_placement="outside"),
    dict(residual=True, offset=0.5, partial=0.6, eps_placement="outside"),
    dict(weight=False),
]


@pytest.mark.parametrize("case", RMS_GRAD_CASES, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()) or "plain")
def test_rms_gradcheck_float64(case):
    torch.manual_seed(15)
    case = dict(case)
    with_residual, with_weight = case.pop("residual", False), case.pop("weight", True)
    inputs = [randn(3, 5, dtype=torch.float64, requires_grad=True)]
    if with_weight:
        inputs.append(randn(5, dtype=torch.float64, requires_grad=True))
    if with_residual:
        inputs.append(randn(3, 5, dtype=torch.float64, requires_grad=True))

    def call(x, *rest):
        weight = rest[0] if with_weight else None
        residual = rest[-1] if with_residual else None
        return triton_rms_norm(x, weight, eps=1e-3, residual=residual, **case)

    assert torch.autograd.gradcheck(call, tuple(inputs))


@pytest.mark.parametrize("residual", (False, True))
def test_layer_gradcheck_float64(residual):
    torch.manual_seed(16)
    x = randn(3, 5, dtype=torch.float64, requires_grad=True)
    weight, bias = randn(5, dtype=torch.float64, requires_grad=True), randn(5, dtype=torch.float64, requires_grad=True)
    if residual:
        r = randn(3, 5, dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(lambda x, w, b, r: triton_layer_norm(x, w, b, residual=r), (x, weight, bias, r))
    else:
        assert torch.autograd.gradcheck(lambda x, w, b: triton_layer_norm(x, w, b), (x, weight, bias))
        assert torch.autograd.gradcheck(lambda x: triton_layer_norm(x), (x,))


@pytest.mark.parametrize("path", ("rms", "two_pass", "welford"))
def test_chunked_gradcheck_float64(path):
    # Rows of 10 streamed 4 at a time: three chunks, the last one partial.
    torch.manual_seed(17)
    x, r = randn(2, 10, dtype=torch.float64, requires_grad=True), randn(2, 10, dtype=torch.float64, requires_grad=True)
    weight, bias = (
        randn(10, dtype=torch.float64, requires_grad=True),
        randn(10, dtype=torch.float64, requires_grad=True),
    )
    limits = dict(onchip_limit=4, chunk=4)
    if path == "rms":
        call = lambda x, w, r: triton_rms_norm(
            x, w, eps=1e-3, residual=r, offset=0.5, partial=0.7, eps_placement="outside", **limits
        )
        inputs = (x, weight, r)
    else:
        call = lambda x, w, b, r: triton_layer_norm(x, w, b, residual=r, stats=path, **limits)
        inputs = (x, weight, bias, r)
    assert torch.autograd.gradcheck(call, inputs, fast_mode=True)


@pytest.mark.parametrize("path", ("onchip", "chunked"))
def test_gradients_many_programs_fp32(path):
    # Enough rows that several programs each accumulate partial dweight/dbias sums.
    torch.manual_seed(18)
    d = 200 if path == "onchip" else CHUNKED_LENGTH
    limits = {} if path == "onchip" else dict(onchip_limit=SMALL_LIMIT, chunk=SMALL_CHUNK)
    rows = 37 if path == "onchip" else 9  # chunked: one row per program step, 8 programs
    x, r = randn(rows, d, requires_grad=True), randn(rows, d, requires_grad=True)
    weight, bias = randn(d, requires_grad=True), randn(d, requires_grad=True)
    upstream, upstream_s = randn(rows, d), randn(rows, d)

    def check(ours, reference, params):
        (y, s), (y_ref, s_ref) = ours, reference
        grads = torch.autograd.grad((y * upstream).sum() + (s * upstream_s).sum(), params)
        grads_ref = torch.autograd.grad((y_ref * upstream).sum() + (s_ref * upstream_s).sum(), params)
        for grad, grad_ref in zip(grads, grads_ref):
            assert relative_error(grad, grad_ref) < 1e-5

    as64 = lambda *ts: [t.double() for t in ts]
    x64, r64, w64, b64 = as64(x, r, weight, bias)
    check(
        triton_rms_norm(x, weight, residual=r, offset=0.5, **limits),
        rms_norm_reference(x64, w64, residual=r64, offset=0.5),
        (x, r, weight),
    )
    check(
        triton_layer_norm(x, weight, bias, residual=r, **limits),
        layer_norm_reference(x64, w64, b64, residual=r64),
        (x, r, weight, bias),
    )


# ---------------------------------------------------------------- numerics and coverage


@pytest.mark.parametrize("path", LAYER_PATHS)
def test_mean_dominated_layer_norm(path):
    torch.manual_seed(19)
    d = length_for(path)
    x = 1e4 + randn(4, d)
    expected = layer_norm_reference(x.double())
    assert relative_error(triton_layer_norm(x, **LAYER_PATHS[path]), expected) < 1e-2
    # The test can fail: the naive one-pass E[x^2] - E[x]^2 in fp32 misses by far more.
    naive_variance = (x * x).mean(-1, keepdim=True) - x.mean(-1, keepdim=True) ** 2
    naive = (x - x.mean(-1, keepdim=True)) * torch.rsqrt(naive_variance.clamp_min(0) + 1e-5)
    assert relative_error(naive, expected) > 1e-1


@pytest.fixture
def poisoned_outputs(monkeypatch):
    """Every buffer the launchers allocate starts as NaN, so an unwritten element shows."""

    def empty(shape, dtype, device):
        return torch.full(shape, float("nan"), dtype=dtype, device=device)

    monkeypatch.setattr(launch, "_empty", empty)


@pytest.mark.parametrize("path", ("onchip", "chunked"))
def test_every_output_element_written(path, poisoned_outputs):
    torch.manual_seed(20)
    d = 127 if path == "onchip" else CHUNKED_LENGTH
    limits = {} if path == "onchip" else dict(onchip_limit=SMALL_LIMIT, chunk=SMALL_CHUNK)
    rows = 37 if path == "onchip" else 9  # not a multiple of the tile height; more rows than programs
    x, r = randn(rows, d, requires_grad=True), randn(rows, d, requires_grad=True)
    weight, bias = randn(d, requires_grad=True), randn(d, requires_grad=True)
    outputs = [triton_rms_norm(x, weight, residual=r, partial=0.5, **limits), triton_rms_norm(x, weight, **limits)]
    for stats in ("two_pass", "welford"):
        outputs += [
            triton_layer_norm(x, weight, bias, residual=r, stats=stats, **limits),
            triton_layer_norm(x, weight, bias, stats=stats, **limits),
        ]
    for output in outputs:
        tensors = output if isinstance(output, tuple) else (output,)
        assert all(torch.isfinite(t).all() for t in tensors)
        loss = sum((t * t).sum() for t in tensors)
        grads = torch.autograd.grad(loss, (x, r, weight, bias), allow_unused=True)
        assert all(torch.isfinite(g).all() for g in grads if g is not None)


@pytest.mark.parametrize("path", ("onchip", "chunked"))
def test_nan_and_inf_stay_in_their_row(path):
    d = 64 if path == "onchip" else CHUNKED_LENGTH
    limits = {} if path == "onchip" else dict(onchip_limit=SMALL_LIMIT, chunk=SMALL_CHUNK)
    x = randn(4, d)
    x[1, 3], x[2, 5] = float("nan"), float("inf")
    for y in (triton_rms_norm(x, randn(d), **limits), triton_layer_norm(x, randn(d), randn(d), **limits)):
        assert torch.isfinite(y[[0, 3]]).all()
        assert not torch.isfinite(y[1]).any() and not torch.isfinite(y[2]).all()


LONG_ROW, LONG_ROW_CHUNK = (1 << 17) + 1000, 1 << 12  # 8 x ONCHIP_LIMIT: 33 chunks, the last one partial


def test_long_row_streams_through_many_chunks_accurately(monkeypatch):
    """A row far beyond the on-chip limits goes through the chunked kernels, many chunks of it, and stays accurate.

    Once a 1M-element row; the interpreter took 5 minutes on it. 33 chunks with a partial last one exercise the same
    loop (the accumulation over chunks is where accuracy could be lost), and the launches are recorded to prove that
    the chunked kernels, not the on-chip ones, ran.
    """
    assert LONG_ROW > 8 * launch.ONCHIP_LIMIT > launch.BACKWARD_ONCHIP_LIMIT and LONG_ROW % LONG_ROW_CHUNK
    launched = []
    for name in ("FORWARD", "BACKWARD"):
        for path in ("ONCHIP", "CHUNKED"):
            kernel = getattr(launch, f"{name}_{path}")
            monkeypatch.setattr(
                launch,
                f"{name}_{path}",
                lambda *a, _k=kernel, _n=f"{name}_{path}", **kw: (
                    launched.append(("LAYER_" if kw["CENTRED"] else "RMS_") + _n),
                    _k(*a, **kw),
                ),
            )
    torch.manual_seed(21)
    n = LONG_ROW
    x, weight = randn(1, n, requires_grad=True), randn(n)
    y = triton_rms_norm(x, weight, chunk=LONG_ROW_CHUNK)
    assert relative_error(y, rms_norm_reference(x.double(), weight.double())) < 1e-5
    (grad,) = torch.autograd.grad(y.sum(), x)
    x64 = x.detach().double().requires_grad_()
    (grad_ref,) = torch.autograd.grad(rms_norm_reference(x64, weight.double()).sum(), x64)
    assert relative_error(grad, grad_ref) < 1e-4
    y = triton_layer_norm(x.detach(), weight, stats="welford", chunk=LONG_ROW_CHUNK)
    assert relative_error(y, layer_norm_reference(x.detach().double(), weight.double())) < 1e-5
    assert launched == ["RMS_FORWARD_CHUNKED", "RMS_BACKWARD_CHUNKED", "LAYER_FORWARD_CHUNKED"]


# ---------------------------------------------------------------- torch.compile and backend errors


class TwoLayerBlock(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm1 = normlab.RMSNorm(d, backend="triton")
        self.norm2 = normlab.LayerNorm(d, backend="triton")
        self.mix1, self.mix2 = torch.nn.Linear(d, d), torch.nn.Linear(d, d)

    def forward(self, x):
        h, stream = self.norm1(x, residual=torch.zeros_like(x))
        stream = stream + self.mix1(h)
        return stream + self.mix2(self.norm2(stream))


def test_torch_compile_fullgraph_matches_eager():
    torch.manual_seed(22)
    block = TwoLayerBlock(32).to(DEVICE)
    x = randn(2, 5, 32, requires_grad=True)
    compiled = torch.compile(block, fullgraph=True, backend="aot_eager" if DEVICE == "cpu" else "inductor")
    y_eager, y_compiled = block(x), compiled(x)
    assert relative_error(y_compiled, y_eager) < 1e-6
    params = (x,) + tuple(block.parameters())
    grads_eager = torch.autograd.grad(y_eager.square().sum(), params)
    grads_compiled = torch.autograd.grad(y_compiled.square().sum(), params)
    for a, b in zip(grads_compiled, grads_eager):
        assert relative_error(a, b) < 1e-5


def test_cpu_tensor_without_interpreter_explains_triton_interpret(monkeypatch):
    monkeypatch.setattr(launch, "INTERPRETED", False)
    x = torch.randn(2, 8)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        normlab.rms_norm(x, backend="triton")
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        normlab.layer_norm(x, backend="triton")


def test_chunk_must_be_power_of_two():
    with pytest.raises(ValueError, match="chunk"):
        triton_rms_norm(randn(2, 300), onchip_limit=128, chunk=48)
    with pytest.raises(ValueError, match="stats"):
        triton_layer_norm(randn(2, 30), stats="naive")


# ---------------------------------------------------------------- eager route vs the custom ops


def _through_custom_op(kind, x, weight, bias, residual, **limits):
    """What triton_rms_norm / triton_layer_norm returned before eager calls skipped the dispatcher: the custom op, with its autograd."""
    onchip_limit, chunk = limits.get("onchip_limit", launch.ONCHIP_LIMIT), limits.get("chunk", launch.CHUNK)
    if kind == "rms":
        y, s, _ = torch.ops.normlab.rms_norm_forward(
            x, weight, residual, custom_ops._eps_tensor(1e-6), 0.5, True, x.shape[-1], onchip_limit, chunk
        )
    else:
        y, s, _, _ = torch.ops.normlab.layer_norm_forward(
            x, weight, bias, residual, custom_ops._eps_tensor(1e-5), "welford", onchip_limit, chunk
        )
    return (y, s) if residual is not None else y


@pytest.mark.parametrize("kind", ("rms", "layer"))
@pytest.mark.parametrize("path", ("onchip", "chunked"))
@pytest.mark.parametrize("residual", (False, True))
def test_eager_route_bit_identical_to_custom_op(kind, path, residual):
    torch.manual_seed(23)
    d = length_for(path)
    limits = {} if path == "onchip" else dict(onchip_limit=SMALL_LIMIT, chunk=SMALL_CHUNK)
    x, weight, bias = randn(9, d, requires_grad=True), randn(d, requires_grad=True), randn(d, requires_grad=True)
    r = randn(9, d, requires_grad=True) if residual else None
    leaves = [x, weight] + ([bias] if kind == "layer" else []) + ([r] if residual else [])
    upstream = [randn(9, d), randn(9, d)]

    def run(fn):
        out = fn()
        outs = out if residual else (out,)
        grads = torch.autograd.grad(sum((o * u).sum() for o, u in zip(outs, upstream)), leaves)
        return [o.detach() for o in outs] + list(grads)

    if kind == "rms":
        eager = lambda: triton_rms_norm(x, weight, residual=r, offset=0.5, **limits)  # noqa: E731
    else:
        eager = lambda: triton_layer_norm(x, weight, bias, residual=r, stats="welford", **limits)  # noqa: E731
    ours, theirs = run(eager), run(lambda: _through_custom_op(kind, x, weight, bias, r, **limits))
    for a, b in zip(ours, theirs):
        assert a.dtype == b.dtype and torch.equal(a, b)
    with torch.no_grad():  # no autograd: the launcher directly
        y = eager()[0] if residual else eager()
    assert torch.equal(y, theirs[0])


@pytest.fixture
def custom_op_calls(monkeypatch):
    """Counts eager calls of the normlab custom ops (forward and backward)."""
    calls = []
    for name in ("rms_norm_forward", "rms_norm_backward", "layer_norm_forward", "layer_norm_backward"):
        op = getattr(torch.ops.normlab, name)
        monkeypatch.setattr(
            torch.ops.normlab, name, lambda *args, _op=op, _name=name: calls.append(_name) or _op(*args)
        )
    return calls


def test_eager_calls_skip_the_dispatcher(custom_op_calls):
    x, weight, bias = randn(4, 16, requires_grad=True), randn(16, requires_grad=True), randn(16, requires_grad=True)
    r = randn(4, 16)
    y, s = normlab.rms_norm(x, weight, residual=r, backend="triton")
    (y.sum() + s.sum()).backward()
    normlab.layer_norm(x, weight, bias, backend="triton").sum().backward()
    with torch.no_grad():
        normlab.rms_norm(x, weight, backend="triton")
        normlab.layer_norm(x, weight, bias, backend="triton")
    assert x.grad is not None and weight.grad is not None and bias.grad is not None
    assert custom_op_calls == []


def test_compile_and_export_see_the_custom_ops():
    graphs = []

    def recording_backend(gm, example_inputs):
        graphs.append({str(node.target) for node in gm.graph.nodes if node.op == "call_function"})
        return gm

    def both(x, weight, bias):
        return normlab.rms_norm(x, weight, backend="triton") + normlab.layer_norm(x, weight, bias, backend="triton")

    x, weight, bias = randn(4, 16), randn(16), randn(16)
    compiled_out = torch.compile(both, backend=recording_backend, fullgraph=True)(x, weight, bias)
    assert torch.equal(compiled_out, both(x, weight, bias))
    assert any("normlab.rms_norm_forward" in t for t in graphs[0]) and any(
        "normlab.layer_norm_forward" in t for t in graphs[0]
    )

    class Block(torch.nn.Module):
        def forward(self, x, weight, bias):
            return both(x, weight, bias)

    exported = torch.export.export(Block(), (x, weight, bias))
    targets = {str(node.target) for node in exported.graph.nodes if node.op == "call_function"}
    assert "normlab.rms_norm_forward.default" in targets and "normlab.layer_norm_forward.default" in targets
    assert torch.equal(exported.module()(x, weight, bias), both(x, weight, bias))


def test_fake_tensors_go_through_the_fake_impls():
    # Outside compile (no is_compiling flag), a dispatch mode still needs the op: the launcher cannot take fake tensors.
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x, weight, r = torch.empty(4, 3, 16), torch.empty(16), torch.empty(4, 3, 16, dtype=torch.float64)
        y, s = triton_rms_norm(x, weight, residual=r)
        assert y.shape == x.shape and y.dtype == torch.float32 and s.dtype == torch.float64
        assert triton_layer_norm(x, weight, weight).shape == x.shape


@pytest.mark.parametrize("kind", ("rms", "layer"))
def test_double_backward_refused_and_retain_graph_repeats(kind):
    x, weight = randn(3, 8, dtype=torch.float64, requires_grad=True), randn(8, dtype=torch.float64, requires_grad=True)
    norm = (lambda: triton_rms_norm(x, weight)) if kind == "rms" else (lambda: triton_layer_norm(x, weight, weight))
    (grad,) = torch.autograd.grad(norm().square().sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match=f"normlab.{kind}_norm_backward.*no autograd formula"):
        torch.autograd.grad(grad.sum(), x)
    loss = norm().square().sum()
    first = torch.autograd.grad(loss, [x, weight], retain_graph=True)
    second = torch.autograd.grad(loss, [x, weight])
    assert all(torch.equal(a, b) for a, b in zip(first, second))
