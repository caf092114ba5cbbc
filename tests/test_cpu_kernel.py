"""The hand-written CPU RMSNorm (backend="cpp", normlab.norms.backends.cpp) against the float64 reference.

fp32 results must be within twice the error PyTorch's own F.rms_norm makes on the
same inputs (plus a small atol); float64 results within 1e-12. Gradients are
checked with gradcheck in float64, and every output buffer starts as NaN.
"""

import pytest
import torch
import torch.nn.functional as F

import normlab
from normlab.norms.backends import cpp as cpu
from normlab.norms.functional import UnsupportedFeature

pytestmark = pytest.mark.skipif(not cpu.available(), reason="no C++ compiler with OpenMP here")

ODD_SHAPES = ((1, 1), (3, 5), (37, 127), (16, 1000), (5, 4097))


def inputs(rows, d, dtype, *, mean_dominated=False, seed=0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, d, generator=generator, dtype=torch.float64)
    if mean_dominated:  # a large shared offset: RMSNorm must not lose the small part
        x = 1e3 + 1e-1 * x
    weight = 1 + 0.1 * torch.randn(d, generator=generator, dtype=torch.float64)
    residual = torch.randn(rows, d, generator=generator, dtype=torch.float64)
    dy = torch.randn(rows, d, generator=generator, dtype=torch.float64)
    return [t.to(dtype) for t in (x, weight, residual, dy)]


def forward_and_grads(function, x, weight, residual, dy):
    leaves = [t.detach().clone().requires_grad_() for t in (x, weight) + (() if residual is None else (residual,))]
    out = function(*leaves)
    y = out[0] if isinstance(out, tuple) else out
    return [y.detach()] + list(torch.autograd.grad(y, leaves, dy))


def max_error(actual, expected):
    return (actual.double() - expected).abs().max().item()


@pytest.fixture
def poisoned(monkeypatch):
    """Every buffer the kernel writes starts as NaN, so an element it never wrote shows up."""
    monkeypatch.setattr(cpu, "_empty", lambda shape, dtype: torch.full(shape, float("nan"), dtype=dtype))


@pytest.mark.parametrize("rows,d", ODD_SHAPES)
@pytest.mark.parametrize("mean_dominated", (False, True))
@pytest.mark.parametrize("with_residual", (False, True))
def test_float32_within_twice_pytorchs_error(rows, d, mean_dominated, with_residual, poisoned):
    x, weight, residual, dy = inputs(rows, d, torch.float32, mean_dominated=mean_dominated, seed=rows * d)
    residual = residual if with_residual else None
    as64 = lambda t: None if t is None else t.double()  # noqa: E731
    expected = forward_and_grads(
        lambda x, w, r=None: normlab.rms_norm_reference(x, w, 1e-6, residual=r),
        as64(x),
        as64(weight),
        as64(residual),
        dy.double(),
    )
    ours = forward_and_grads(
        lambda x, w, r=None: normlab.rms_norm(x, w, 1e-6, residual=r, backend="cpp"), x, weight, residual, dy
    )

    def pytorch(x, w, r=None):
        s = x if r is None else x + r
        return F.rms_norm(s, (d,), w, 1e-6)

    theirs = forward_and_grads(pytorch, x, weight, residual, dy)
    for name, o, t, e in zip(("y", "dx", "dweight", "dresidual"), ours, theirs, expected):
        assert torch.isfinite(o).all(), f"{name} has unwritten (NaN) elements"
        scale = e.abs().max().item()
        assert max_error(o, e) <= 2 * max_error(t, e) + 1e-6 * scale, (
            f"{name}: ours {max_error(o, e):.3g} vs PyTorch's {max_error(t, e):.3g} (scale {scale:.3g})"
        )


@pytest.mark.parametrize("eps_placement", ("inside", "outside"))
@pytest.mark.parametrize("offset", (0.0, 1.0))
@pytest.mark.parametrize("rows,d", ((3, 5), (16, 1000), (5, 4097)))
def test_float64_matches_reference(rows, d, offset, eps_placement, poisoned):
    x, weight, residual, dy = inputs(rows, d, torch.float64, seed=d)
    for r in (None, residual):
        kwargs = dict(residual=r, offset=offset, eps_placement=eps_placement)
        expected = forward_and_grads(
            lambda x, w, r=None: normlab.rms_norm_reference(x, w, 1e-6, **{**kwargs, "residual": r}), x, weight, r, dy
        )
        ours = forward_and_grads(
            lambda x, w, r=None: normlab.rms_norm(x, w, 1e-6, backend="cpp", **{**kwargs, "residual": r}),
            x,
            weight,
            r,
            dy,
        )
        for o, e in zip(ours, expected):
            assert max_error(o, e) <= 1e-12 * max(1.0, e.abs().max().item())


@pytest.mark.parametrize("with_weight", (False, True))
@pytest.mark.parametrize("with_residual", (False, True))
@pytest.mark.parametrize("eps_placement", ("inside", "outside"))
def test_gradcheck_every_feature(with_weight, with_residual, eps_placement):
    torch.manual_seed(1)
    x = torch.randn(4, 7, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(7, dtype=torch.float64, requires_grad=True) if with_weight else None
    residual = torch.randn(4, 7, dtype=torch.float64, requires_grad=True) if with_residual else None
    offset = 0.5 if with_weight else 0.0

    def function(x, weight, residual):
        out = normlab.rms_norm(
            x, weight, 1e-3, residual=residual, offset=offset, eps_placement=eps_placement, backend="cpp"
        )
        return out if residual is not None else (out,)

    assert torch.autograd.gradcheck(function, (x, weight, residual))
    assert torch.autograd.gradgradcheck(function, (x, weight, residual))


def test_all_zero_rows_with_eps_outside_get_a_finite_gradient():
    # At s = 0, sqrt's derivative is infinite: autograd through the reference gives NaN. The kernels drop the
    # rms term there (its coefficient is s, which is 0) and keep dy * gain / eps, as the compiled backend does.
    x = torch.zeros(2, 6, dtype=torch.float64)
    weight = 1 + torch.arange(6, dtype=torch.float64)
    dy = torch.randn(2, 6, dtype=torch.float64)
    function = lambda backend: lambda x, w: normlab.rms_norm(x, w, 1e-6, eps_placement="outside", backend=backend)  # noqa: E731
    ours = forward_and_grads(function("cpp"), x, weight, None, dy)
    torch.testing.assert_close(ours[1], dy * weight / 1e-6)
    for o, c in zip(ours, forward_and_grads(function("compile"), x, weight, None, dy)):
        torch.testing.assert_close(o, c)


def test_thread_counts_agree_and_repeat_bit_for_bit():
    x, weight, _, dy = inputs(512, 384, torch.float32, seed=3)  # large enough to run on several threads
    before = torch.get_num_threads()
    try:
        results = {}
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            results[threads] = [
                forward_and_grads(lambda x, w: normlab.rms_norm(x, w, backend="cpp"), x, weight, None, dy)
                for _ in range(2)
            ]
    finally:
        torch.set_num_threads(before)
    for threads, (first, second) in results.items():
        assert all(torch.equal(a, b) for a, b in zip(first, second)), f"{threads} threads: not deterministic"
        # only the weight gradient's summation order depends on the thread count
        for a, b in zip(first, results[1][0]):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-4)


def test_non_contiguous_and_batched_inputs():
    x, weight, residual, dy = inputs(6, 10, torch.float32, seed=4)
    wide = torch.randn(10, 6).t()  # a transposed view: not contiguous
    batched = x.reshape(2, 3, 10)
    for tensor in (wide, batched):
        expected = normlab.rms_norm(tensor.contiguous(), weight, backend="reference")
        torch.testing.assert_close(normlab.rms_norm(tensor, weight, backend="cpp"), expected)


def test_empty_input_gives_empty_output_and_zero_weight_gradient():
    x = torch.empty(0, 8, requires_grad=True)
    weight = torch.ones(8, requires_grad=True)
    y = normlab.rms_norm(x, weight, backend="cpp")
    assert y.shape == (0, 8)
    (dweight,) = torch.autograd.grad(y.sum(), weight)
    assert torch.equal(dweight, torch.zeros(8))


def test_inside_torch_compile_the_traced_composite_is_used():
    x, weight, _, _ = inputs(8, 16, torch.float32, seed=5)
    compiled = torch.compile(lambda x, w: normlab.rms_norm(x, w, backend="cpp"), fullgraph=True)
    torch.testing.assert_close(compiled(x, weight), normlab.rms_norm(x, weight, backend="reference"))


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda x: normlab.rms_norm(x.half(), backend="cpp"), "float32 or float64, and x is torch.float16"),
        (lambda x: normlab.rms_norm(x, torch.ones(8, dtype=torch.float64), backend="cpp"), "one dtype"),
        (lambda x: normlab.rms_norm(x.double(), residual=x, backend="cpp"), "one dtype"),
        (lambda x: normlab.rms_norm(x, torch.ones(8), partial=0.5, backend="cpp"), "does not support partial"),
        (lambda x: normlab.layer_norm(x, backend="cpp"), "RMSNorm only"),
    ],
)
def test_what_the_kernel_cannot_take_is_refused_by_name(call, message):
    with pytest.raises(UnsupportedFeature, match=message):
        call(torch.randn(4, 8))


def test_auto_uses_the_kernel_for_float32_on_cpu_and_compile_for_half():
    from normlab.norms.functional import _auto_rms_backend

    x = torch.randn(4, 8)
    assert _auto_rms_backend(x, {"weight"}, cpu.supports(x, None, None, x.dtype) is None) == "cpp"
    half = x.bfloat16()
    assert cpu.supports(half, None, None, half.dtype) is not None


def test_a_compiler_that_fails_is_reported_and_auto_falls_back(monkeypatch, tmp_path):
    monkeypatch.setenv("CXX", "false")  # a "compiler" that always fails
    monkeypatch.setenv("NORMLAB_CACHE_DIR", str(tmp_path))
    cpu._load.cache_clear()
    cpu.available.cache_clear()
    try:
        with pytest.raises(cpu.KernelBuildError, match="compiling rms_norm.cpp with .*false failed"):
            normlab.rms_norm(torch.randn(4, 8), backend="cpp")
        with pytest.warns(UserWarning, match="CPU RMSNorm kernel is unavailable"):
            y = normlab.rms_norm(torch.randn(4, 8), backend="auto")
        assert y.shape == (4, 8)
    finally:
        cpu._load.cache_clear()
        cpu.available.cache_clear()
