"""normlab.rms_norm / layer_norm: every PyTorch backend against the float64 reference.

The Triton backend has its own file (test_triton_kernels.py); bad input is in
test_bad_input.py. "compile" is exercised on few configurations because each
distinct feature set costs a compilation.
"""

import pytest
import torch
import torch.nn.functional as F

import normlab
from normlab import layer_norm, layer_norm_reference, rms_norm, rms_norm_reference
from normlab.norms import functional
from normlab.norms.backends.features import BACKEND_FEATURES, LLAMA_ROUNDING, RMS_FEATURES

TORCH_BACKENDS = ("reference", "eager", "torch")
ROW_LENGTHS = (1, 3, 127, 1000, 4096)


def relative_error(actual, expected):
    actual, expected = actual.double(), expected.double()
    return ((actual - expected).abs().max() / expected.abs().max().clamp_min(1e-30)).item() if expected.numel() else 0.0


def test_backend_names_are_public():
    assert normlab.BACKENDS == ("reference", "eager", "torch", "compile", "triton", "cpp", "auto")


@pytest.mark.parametrize("backend", TORCH_BACKENDS + ("auto",))
@pytest.mark.parametrize("d", ROW_LENGTHS)
@pytest.mark.parametrize("rows", (0, 1, 6))
def test_fp32_matches_float64_reference(backend, d, rows):
    torch.manual_seed(d * 10 + rows)
    x, weight, bias = torch.randn(rows, d), torch.randn(d), torch.randn(d)
    y = rms_norm(x, weight, backend=backend)
    assert y.shape == x.shape and y.dtype == x.dtype
    assert relative_error(y, rms_norm_reference(x.double(), weight.double())) < 1e-5
    y = layer_norm(x, weight, bias, backend=backend)
    assert relative_error(y, layer_norm_reference(x.double(), weight.double(), bias.double())) < 1e-5


@pytest.mark.parametrize("backend", TORCH_BACKENDS)
def test_leading_dimensions_and_transposed_views(backend):
    torch.manual_seed(1)
    x3 = torch.randn(2, 5, 33)
    xt = torch.randn(33, 7).t()  # non-contiguous: last-dim stride 7
    weight = torch.randn(33)
    for x in (x3, xt):
        assert (
            relative_error(rms_norm(x, weight, backend=backend), rms_norm_reference(x.double(), weight.double())) < 1e-5
        )
        assert (
            relative_error(
                layer_norm(x, weight, None, backend=backend), layer_norm_reference(x.double(), weight.double())
            )
            < 1e-5
        )


@pytest.mark.parametrize("backend", TORCH_BACKENDS)
def test_residual_offset(backend):
    torch.manual_seed(2)
    x, residual, weight = torch.randn(4, 64), torch.randn(4, 64), torch.randn(64) * 0.1
    y, s = rms_norm(x, weight, residual=residual, offset=1.0, backend=backend)
    y_ref, s_ref = rms_norm_reference(x.double(), weight.double(), residual=residual.double(), offset=1.0)
    assert relative_error(y, y_ref) < 1e-5 and relative_error(s, s_ref) < 1e-6
    y, s = layer_norm(x, weight, weight, residual=residual, backend=backend)
    y_ref, s_ref = layer_norm_reference(x.double(), weight.double(), weight.double(), residual=residual.double())
    assert relative_error(y, y_ref) < 1e-5 and relative_error(s, s_ref) < 1e-6


@pytest.mark.parametrize("features", [dict(eps_placement="outside"), dict(partial=0.25)])
def test_rms_features_on_reference_and_auto(features):
    torch.manual_seed(3)
    x, weight = torch.randn(5, 40), torch.randn(40)
    expected = rms_norm_reference(x.double(), weight.double(), **features)
    for backend in ("reference", "auto"):
        assert relative_error(rms_norm(x, weight, backend=backend, **features), expected) < 1e-5


@pytest.mark.parametrize("dtype", (torch.float16, torch.bfloat16))
@pytest.mark.parametrize("backend", TORCH_BACKENDS)
def test_half_precision_no_worse_than_twice_pytorch(dtype, backend):
    torch.manual_seed(4)
    d = 1000
    x, weight, bias = torch.randn(8, d, dtype=dtype), torch.randn(d, dtype=dtype), torch.randn(d, dtype=dtype)
    floor = torch.finfo(dtype).eps
    expected = rms_norm_reference(x.double(), weight.double())
    pytorch_error = relative_error(F.rms_norm(x, (d,), weight, 1e-6), expected)
    assert relative_error(rms_norm(x, weight, backend=backend), expected) <= 2 * pytorch_error + floor
    expected = layer_norm_reference(x.double(), weight.double(), bias.double())
    pytorch_error = relative_error(F.layer_norm(x, (d,), weight, bias, 1e-5), expected)
    assert relative_error(layer_norm(x, weight, bias, backend=backend), expected) <= 2 * pytorch_error + floor


@pytest.mark.parametrize("backend", TORCH_BACKENDS)
def test_gradcheck_float64(backend):
    torch.manual_seed(5)
    x = torch.randn(3, 6, dtype=torch.float64, requires_grad=True)
    residual = torch.randn(3, 6, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(6, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda x, r, w: rms_norm(x, w, residual=r, offset=0.5, backend=backend), (x, residual, weight)
    )
    assert torch.autograd.gradcheck(
        lambda x, r, w, b: layer_norm(x, w, b, residual=r, backend=backend), (x, residual, weight, bias)
    )


def test_llama_casting_mode_keeps_llama_rounding_order():
    # LLaMA casts the normalised value back to the input dtype, then multiplies by the gain.
    torch.manual_seed(6)
    x, weight = torch.randn(4, 96, dtype=torch.bfloat16), torch.randn(96, dtype=torch.bfloat16)
    x32 = x.float()
    llama = weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(torch.bfloat16)
    assert torch.equal(rms_norm(x, weight, backend="eager"), llama)  # eager: HuggingFace order by default
    assert torch.equal(rms_norm(x, weight, backend="reference", casting_mode="llama"), llama)


@pytest.mark.parametrize("backend", ("eager", "torch"))
@pytest.mark.parametrize("features", [dict(eps_placement="outside"), dict(partial=0.5)])
def test_missing_feature_names_a_backend_that_has_it(backend, features):
    x = torch.randn(2, 8)
    with pytest.raises(functional.UnsupportedFeature, match=r"backend='(reference|compile|triton)'"):
        rms_norm(x, torch.ones(8), backend=backend, **features)


# How a call asks for each optional RMSNorm feature the table names.
FEATURE_REQUESTS = {
    "weight": dict(),
    "residual": dict(residual=torch.ones(2, 8)),
    "offset": dict(offset=1.0),
    "eps_placement='outside'": dict(eps_placement="outside"),
    "partial": dict(partial=0.5),
    LLAMA_ROUNDING: dict(casting_mode="llama"),
}


@pytest.mark.parametrize("backend", sorted(RMS_FEATURES))
def test_every_feature_a_backend_lacks_in_the_table_is_refused_by_name(backend):
    assert set(FEATURE_REQUESTS) == set().union(*RMS_FEATURES.values())
    x, weight = torch.randn(2, 8), torch.ones(8)
    for feature, request in FEATURE_REQUESTS.items():
        if feature in RMS_FEATURES[backend]:
            continue
        with pytest.raises(functional.UnsupportedFeature, match=f"backend '{backend}' does not support {feature}"):
            rms_norm(x, weight, backend=backend, **request)


@pytest.mark.parametrize("backend", [name for name, entry in BACKEND_FEATURES.items() if "layer" not in entry.norms])
def test_a_backend_without_layer_norm_in_the_table_refuses_it(backend):
    with pytest.raises(functional.UnsupportedFeature, match=f"backend '{backend}' implements RMSNorm only"):
        layer_norm(torch.randn(2, 8), backend=backend)


def test_auto_never_picks_a_backend_without_the_feature(monkeypatch):
    small, large = torch.randn(2, 8), torch.empty(0, 8)
    monkeypatch.setattr(functional, "AUTO_CPU_COMPILE_MIN_NUMEL", 1 << 20)
    for cpp_takes_inputs in (False, True):
        for feature in ("partial", "eps_placement='outside'", "residual"):
            chosen = functional._auto_rms_backend(small, {feature}, cpp_takes_inputs)
            assert feature in RMS_FEATURES[chosen]
    assert functional._auto_rms_backend(small, set(), False) == "torch"
    assert functional._auto_rms_backend(small, {"partial"}, True) != "cpp"
    monkeypatch.setattr(functional, "AUTO_CPU_COMPILE_MIN_NUMEL", 0)
    assert functional._auto_rms_backend(large, {"partial"}, False) == "compile"
    assert functional._auto_layer_backend(small) == "torch"


def test_compile_backend_all_features_forward_and_backward():
    torch.manual_seed(7)
    x = torch.randn(3, 5, 24, requires_grad=True)
    residual = torch.randn(3, 5, 24, requires_grad=True)
    weight = torch.randn(24, requires_grad=True)
    kwargs = dict(residual=residual, offset=1.0, eps_placement="outside", partial=0.5)
    y, s = rms_norm(x, weight, 1e-6, backend="compile", **kwargs)
    y_ref, s_ref = rms_norm_reference(x, weight, 1e-6, **kwargs)
    assert relative_error(y, y_ref) < 1e-5 and relative_error(s, s_ref) < 1e-6
    upstream = torch.randn_like(y)
    grads = torch.autograd.grad((y * upstream).sum() + s.sum(), (x, residual, weight))
    grads_ref = torch.autograd.grad((y_ref * upstream).sum() + s_ref.sum(), (x, residual, weight))
    for grad, grad_ref in zip(grads, grads_ref):
        assert relative_error(grad, grad_ref) < 1e-5
    # A new shape reuses the dynamic graph and stays correct.
    x2, r2 = torch.randn(7, 24), torch.randn(7, 24)
    y2, _ = rms_norm(
        x2, weight.detach(), 1e-6, backend="compile", residual=r2, offset=1.0, eps_placement="outside", partial=0.5
    )
    assert (
        relative_error(
            y2,
            rms_norm_reference(
                x2, weight.detach(), 1e-6, residual=r2, offset=1.0, eps_placement="outside", partial=0.5
            )[0],
        )
        < 1e-5
    )


def test_compile_backend_layer_norm():
    torch.manual_seed(8)
    x, residual, weight, bias = torch.randn(6, 40), torch.randn(6, 40), torch.randn(40), torch.randn(40)
    y, s = layer_norm(x, weight, bias, residual=residual, backend="compile")
    y_ref, s_ref = layer_norm_reference(x.double(), weight.double(), bias.double(), residual=residual.double())
    assert relative_error(y, y_ref) < 1e-5 and relative_error(s, s_ref) < 1e-6


def test_auto_uses_compiled_composite_for_large_cpu_inputs(monkeypatch):
    # Same feature set as test_compile_backend_all_features_forward_and_backward, so no new compilation.
    monkeypatch.setattr(functional, "AUTO_CPU_COMPILE_MIN_NUMEL", 0)
    calls = []
    original = functional._run_compiled
    monkeypatch.setattr(functional, "_run_compiled", lambda *args: calls.append(args[0]) or original(*args))
    torch.manual_seed(9)
    x, residual, weight = torch.randn(9, 24), torch.randn(9, 24), torch.randn(24)
    kwargs = dict(residual=residual, offset=1.0, eps_placement="outside", partial=0.5)
    y, _ = rms_norm(x, weight, 1e-6, **kwargs)
    assert calls == ["rms"]
    assert (
        relative_error(
            y,
            rms_norm_reference(
                x.double(),
                weight.double(),
                1e-6,
                residual=residual.double(),
                offset=1.0,
                eps_placement="outside",
                partial=0.5,
            )[0],
        )
        < 1e-5
    )


def test_auto_falls_back_when_this_machine_cannot_compile(monkeypatch):
    monkeypatch.setattr(functional, "AUTO_CPU_COMPILE_MIN_NUMEL", 0)
    monkeypatch.setattr(functional, "_compile_failures", {})

    def broken(*args):
        raise RuntimeError("no C++ compiler")

    monkeypatch.setattr(functional, "_run_compiled", broken)
    x, weight = torch.randn(3, 16), torch.randn(16)
    with pytest.warns(UserWarning, match="failed to compile the rms norm.*no C\\+\\+ compiler"):
        y = rms_norm(x, weight, partial=0.5)
    assert relative_error(y, rms_norm_reference(x.double(), weight.double(), partial=0.5)) < 1e-5
    assert len(functional._compile_failures) == 1  # remembered: that signature is not tried again


@pytest.mark.parametrize("rows", (0, 1))
def test_compile_backend_zero_and_one_rows(rows):
    # Sizes 0 and 1 are specialised by torch.compile, so they get their own graphs: check them too.
    torch.manual_seed(10)
    x, residual, weight, bias = torch.randn(rows, 24), torch.randn(rows, 24), torch.randn(24), torch.randn(24)
    kwargs = dict(residual=residual, offset=1.0, eps_placement="outside", partial=0.5)
    y, s = rms_norm(x, weight, 1e-6, backend="compile", **kwargs)
    y_ref, s_ref = rms_norm_reference(
        x.double(), weight.double(), 1e-6, residual=residual.double(), offset=1.0, eps_placement="outside", partial=0.5
    )
    assert y.shape == x.shape and relative_error(y, y_ref) < 1e-5 and relative_error(s, s_ref) < 1e-6
    y, s = layer_norm(x, weight, bias, residual=residual, backend="compile")
    y_ref, _ = layer_norm_reference(x.double(), weight.double(), bias.double(), residual=residual.double())
    assert y.shape == x.shape and relative_error(y, y_ref) < 1e-5


@pytest.mark.parametrize("backend", ("reference", "eager", "torch", "compile", "triton", "auto"))
@pytest.mark.parametrize(
    "x_dtype, r_dtype, in_fp32, s_dtype",
    [
        (torch.bfloat16, torch.float32, False, torch.float32),  # mixed: s as PyTorch promotes x + residual
        (torch.bfloat16, torch.bfloat16, True, torch.float32),  # residual_in_fp32: the running sum kept in fp32
        (torch.float16, torch.float16, False, torch.float16),
        (torch.float32, torch.bfloat16, False, torch.float32),
    ],
)
def test_residual_dtypes_are_the_same_on_every_backend(backend, x_dtype, r_dtype, in_fp32, s_dtype):
    torch.manual_seed(11)
    x, residual = torch.randn(5, 48).to(x_dtype), torch.randn(5, 48).to(r_dtype)
    weight, bias = torch.randn(48).to(x_dtype), torch.randn(48).to(x_dtype)
    y, s = rms_norm(x, weight, residual=residual, residual_in_fp32=in_fp32, backend=backend)
    y_ref, s_ref = rms_norm_reference(x, weight, residual=residual, residual_in_fp32=in_fp32)
    assert (y.dtype, s.dtype) == (x_dtype, s_dtype) == (y_ref.dtype, s_ref.dtype)
    assert torch.equal(s, s_ref)
    exact = rms_norm_reference(x.double(), weight.double(), residual=s_ref.double() - x.double())[0]
    assert relative_error(y, exact) <= 2 * relative_error(y_ref, exact) + 1e-6
    y, s = layer_norm(x, weight, bias, residual=residual, residual_in_fp32=in_fp32, backend=backend)
    y_ref, s_ref = layer_norm_reference(x, weight, bias, residual=residual, residual_in_fp32=in_fp32)
    assert (y.dtype, s.dtype) == (x_dtype, s_dtype) and torch.equal(s, s_ref)
    exact = layer_norm_reference(x.double(), weight.double(), bias.double(), residual=s_ref.double() - x.double())[0]
    assert relative_error(y, exact) <= 2 * relative_error(y_ref, exact) + 1e-6
