"""normlab.RMSNorm / LayerNorm as drop-in replacements for torch.nn's modules."""

import pytest
import torch
from torch import nn

import normlab
from normlab.norms import torch_versions
from normlab.norms.backends.triton import launch

# CPU runs the Triton backend in the interpreter; a GPU run (scripts/gpu_check.sh) uses CUDA.
DEVICE = "cpu" if launch.INTERPRETED or not torch.cuda.is_available() else "cuda"
BACKENDS = ("torch", "eager", "triton", "auto")


def relative_error(actual, expected):
    actual, expected = actual.double(), expected.double()
    return ((actual - expected).abs().max() / expected.abs().max()).item()


@pytest.mark.parametrize("backend", BACKENDS)
def test_rms_norm_state_dict_swaps_with_torch(backend):
    torch.manual_seed(0)
    d = 48
    theirs = torch.nn.RMSNorm(d, eps=1e-6, device=DEVICE)
    with torch.no_grad():
        theirs.weight.copy_(torch.randn(d, device=DEVICE))
    ours = normlab.RMSNorm(d, eps=1e-6, backend=backend, device=DEVICE)
    assert set(ours.state_dict()) == set(theirs.state_dict()) == {"weight"}
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(3, 4, d, device=DEVICE)
    assert relative_error(ours(x), theirs(x)) < 1e-5
    # And back: a checkpoint of ours loads into torch's module.
    with torch.no_grad():
        ours.weight.mul_(2)
    theirs.load_state_dict(ours.state_dict())
    assert relative_error(theirs(x), ours(x)) < 1e-5


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bias", (True, False))
def test_layer_norm_state_dict_swaps_with_torch(backend, bias):
    torch.manual_seed(1)
    d = 48
    theirs = torch.nn.LayerNorm(d, eps=1e-5, bias=bias, device=DEVICE)
    with torch.no_grad():
        for p in theirs.parameters():
            p.copy_(torch.randn(d, device=DEVICE))
    ours = normlab.LayerNorm(d, eps=1e-5, bias=bias, backend=backend, device=DEVICE)
    assert set(ours.state_dict()) == set(theirs.state_dict())
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(3, 4, d, device=DEVICE)
    assert relative_error(ours(x), theirs(x)) < 1e-5
    theirs.load_state_dict(ours.state_dict())
    assert relative_error(theirs(x), ours(x)) < 1e-5


def test_without_affine_has_no_parameters():
    assert not list(normlab.RMSNorm(8, elementwise_affine=False).parameters())
    assert not list(normlab.LayerNorm(8, elementwise_affine=False).parameters())
    assert list(normlab.RMSNorm(8, elementwise_affine=False).state_dict()) == list(
        torch.nn.RMSNorm(8, elementwise_affine=False).state_dict()
    )


def test_offset_module_starts_as_unit_gain_and_fuses_residual():
    torch.manual_seed(2)
    module = normlab.RMSNorm(16, offset=1.0, backend="triton", device=DEVICE)
    assert torch.equal(module.weight, torch.zeros(16, device=DEVICE))
    x, residual = torch.randn(2, 16, device=DEVICE), torch.randn(2, 16, device=DEVICE)
    y, s = module(x, residual=residual)
    y_ref, s_ref = normlab.rms_norm_reference(
        x.double(), module.weight.double(), 1e-6, residual=residual.double(), offset=1.0
    )
    assert relative_error(y, y_ref) < 1e-5 and relative_error(s, s_ref) < 1e-6


def test_module_gradients_reach_weight_and_bias():
    torch.manual_seed(3)
    module = normlab.LayerNorm(24, backend="triton", device=DEVICE)
    x = torch.randn(5, 24, device=DEVICE, requires_grad=True)
    upstream = torch.randn(5, 24, device=DEVICE)  # (not y**2: its x-gradient nearly cancels to zero)
    (module(x) * upstream).sum().backward()
    assert module.weight.grad is not None and module.bias.grad is not None and x.grad is not None
    reference = torch.nn.LayerNorm(24, device=DEVICE)
    x2 = x.detach().clone().requires_grad_()
    (reference(x2) * upstream).sum().backward()
    for ours, theirs in (
        (module.weight.grad, reference.weight.grad),
        (module.bias.grad, reference.bias.grad),
        (x.grad, x2.grad),
    ):
        assert relative_error(ours, theirs) < 1e-5


def test_bad_normalized_shape():
    with pytest.raises(ValueError, match="normalized_shape"):
        normlab.RMSNorm((4, 4))
    with pytest.raises(ValueError, match="normalized_shape"):
        normlab.LayerNorm(0)


def test_modules_expose_torch_nn_attributes():
    for ours, theirs in (
        (normlab.RMSNorm(12), nn.RMSNorm(12)),
        (normlab.LayerNorm(12), nn.LayerNorm(12)),
        (normlab.RMSNorm(12, elementwise_affine=False), nn.RMSNorm(12, elementwise_affine=False)),
        (normlab.LayerNorm(12, bias=False), nn.LayerNorm(12, bias=False)),
    ):
        for name in ("normalized_shape", "elementwise_affine"):
            assert getattr(ours, name) == getattr(theirs, name), name
        assert set(ours.state_dict()) == set(theirs.state_dict())
        for name, param in theirs.named_parameters():
            assert torch.equal(getattr(ours, name), param)


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16, torch.float64))
def test_eps_none_is_the_machine_epsilon_torch_uses(dtype):
    # torch.nn.RMSNorm documents finfo(x.dtype).eps but, from torch 2.11 on (the matrix's next release after 2.6),
    # computes with the epsilon of its float32 computation type for half inputs; a drop-in matches what it computes.
    # torch 2.6 took bf16's own epsilon (0.0078: a row of RMS 1e-3 came out ~80x too small); normlab keeps the
    # computation type's on every torch, so on 2.6 its RMSNorm(eps=None) differs from torch's for half inputs.
    eps = torch.finfo(torch.promote_types(dtype, torch.float32)).eps
    older_torch = torch_versions.release(torch.__version__) < (2, 11, 0)
    torch_eps = torch.finfo(dtype).eps if older_torch else eps
    torch.manual_seed(3)
    x = torch.randn(4, 16, dtype=dtype) * 1e-3
    ours, theirs = (
        normlab.RMSNorm(16, eps=None, backend="reference", dtype=dtype),
        nn.RMSNorm(16, eps=None, dtype=dtype),
    )
    expected = normlab.rms_norm_reference(x, ours.weight, eps)
    assert torch.equal(ours(x), expected)
    assert (
        relative_error(theirs(x), normlab.rms_norm_reference(x, theirs.weight, torch_eps)) <= 2 * torch.finfo(dtype).eps
    )
    if torch_eps == eps:
        assert relative_error(ours(x), theirs(x)) <= 2 * torch.finfo(dtype).eps
    layer = normlab.LayerNorm(16, eps=None, backend="torch", dtype=dtype)
    assert torch.equal(layer(x), torch.nn.functional.layer_norm(x, (16,), layer.weight, layer.bias, eps))


def test_offset_without_weight_is_refused_at_construction():
    with pytest.raises(ValueError, match="offset=1.0 needs a weight.*elementwise_affine=False"):
        normlab.RMSNorm(8, elementwise_affine=False, offset=1.0)


def test_bad_casting_mode_and_eps_none_with_integer_input():
    with pytest.raises(ValueError, match="casting_mode must be one of"):
        normlab.RMSNorm(8, casting_mode="mistral")
    with pytest.raises(ValueError, match="casting_mode must be one of"):
        normlab.rms_norm(torch.randn(2, 8), casting_mode="bf16")
    with pytest.raises(TypeError, match="eps=None means torch.finfo"):
        normlab.rms_norm(torch.ones(2, 8, dtype=torch.int64), eps=None)
