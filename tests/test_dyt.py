"""DyT (Dynamic Tanh): every backend against the float64 reference, forward and backward, and gradcheck."""

import math

import pytest
import torch

from normlab import DyT, dyt, dyt_reference
from normlab.norms.dyt import AUTHORS_LLAMA_ALPHA, authors_alpha_init

pytestmark = pytest.mark.usefixtures("one_thread")

BACKENDS = ("torch", "eager", "compile", "auto")


def inputs(dtype=torch.float32, shape=(3, 5, 16), seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(shape, generator=g) * 3).to(dtype)
    alpha = torch.tensor([0.7]).to(dtype)
    weight = (1 + 0.1 * torch.randn(shape[-1], generator=g)).to(dtype)
    bias = (0.1 * torch.randn(shape[-1], generator=g)).to(dtype)
    return x, alpha, weight, bias


def test_reference_is_the_formula_in_float64():
    x, alpha, weight, bias = inputs(torch.float64)
    expected = weight * torch.tanh(alpha * x) + bias
    torch.testing.assert_close(dyt_reference(x, alpha, weight, bias), expected, rtol=0, atol=0)
    # A large alpha saturates: every output within |weight| + |bias| of the bias.
    big = dyt_reference(x, 1e6, weight, bias)
    assert bool(((big - bias).abs() <= weight.abs() + 1e-12).all())


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-6), (torch.float64, 1e-12)])
def test_forward_and_backward_match_reference(backend, dtype, tol):
    x, alpha, weight, bias = inputs(dtype)
    leaves = [t.clone().requires_grad_() for t in (x, alpha, weight, bias)]
    ref_leaves = [t.detach().double().requires_grad_() for t in (x, alpha, weight, bias)]
    y = dyt(*leaves, backend=backend)
    y_ref = dyt_reference(*ref_leaves)
    assert y.dtype == dtype and y.shape == x.shape
    torch.testing.assert_close(y.double(), y_ref, rtol=tol, atol=tol)
    upstream = torch.randn(x.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    (y.double() * upstream).sum().backward()
    (y_ref * upstream).sum().backward()
    for name, got, want in zip(("x", "alpha", "weight", "bias"), leaves, ref_leaves):
        # alpha's gradient sums over every element, so its error grows with the count (240 here).
        scale = x.numel() if name == "alpha" else 1
        torch.testing.assert_close(got.grad.double(), want.grad, rtol=tol * scale, atol=tol * scale, msg=name)


@pytest.mark.parametrize("backend", ("torch", "reference"))
def test_gradcheck_float64(backend):
    x, alpha, weight, bias = (t.requires_grad_() for t in inputs(torch.float64, shape=(2, 3, 6)))
    assert torch.autograd.gradcheck(lambda *a: dyt(*a, backend=backend), (x, alpha, weight, bias))
    assert torch.autograd.gradgradcheck(lambda *a: dyt(*a, backend=backend), (x, alpha, weight, bias))


def test_module_parameters_init_and_state_dict_round_trip():
    layer = DyT(16)
    assert [n for n, _ in layer.named_parameters()] == ["alpha", "weight", "bias"]
    assert layer.alpha.item() == 0.5  # the paper's default alpha_init_value
    assert torch.equal(layer.weight, torch.ones(16)) and torch.equal(layer.bias, torch.zeros(16))
    layer2 = DyT(16, alpha_init=2.0, backend="compile")
    with torch.no_grad():
        layer.weight.mul_(3)
    layer2.load_state_dict(layer.state_dict())
    x = inputs()[0]
    torch.testing.assert_close(layer2(x), layer(x), rtol=1e-6, atol=1e-6)
    no_beta = DyT(16, bias=False)  # the authors' LLaMA DyT
    assert [n for n, _ in no_beta.named_parameters()] == ["alpha", "weight"] and "bias=False" in repr(no_beta)
    torch.testing.assert_close(no_beta(x), torch.tanh(0.5 * x))
    bare = DyT(16, elementwise_affine=False)
    assert [n for n, _ in bare.named_parameters()] == ["alpha"]
    torch.testing.assert_close(bare(x), torch.tanh(0.5 * x))


@pytest.mark.parametrize("alpha", [0.0, -0.5, math.inf, math.nan, True, "1"])
def test_non_positive_alpha_is_refused(alpha):
    with pytest.raises(ValueError, match="positive"):
        DyT(8, alpha_init=alpha)
    with pytest.raises(ValueError, match="positive"):
        dyt(torch.ones(2, 8), alpha)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="unknown DyT backend 'fast'.*reference"):
        dyt(torch.ones(2, 8), 0.5, backend="fast")
    with pytest.raises(ValueError, match="no Triton kernel"):
        DyT(8, backend="triton")
    with pytest.raises(ValueError, match=r"weight must have shape \(8,\)"):
        dyt(torch.ones(2, 8), 0.5, torch.ones(4))
    with pytest.raises(ValueError, match="one scalar"):
        dyt(torch.ones(2, 8), torch.ones(2))
    with pytest.raises(ValueError, match="floating-point"):
        dyt(torch.ones(2, 8, dtype=torch.long), 0.5)
    with pytest.raises(ValueError, match="normalized_shape"):
        DyT((4, 4))


def test_authors_alpha_init_follows_their_llama_commands():
    assert authors_alpha_init(4096) == (0.8, 0.2) and authors_alpha_init(5120) == (0.6, 0.15)
    # their 34B and 70B are both 8192 wide: a 6656-wide model (LLaMA 1's 33B) sits below them, with 13B's values
    assert authors_alpha_init(8192) == (0.2, 0.05) and sorted(AUTHORS_LLAMA_ALPHA) == [4096, 5120, 8192]
    assert authors_alpha_init(6656) == authors_alpha_init(6000) == (0.6, 0.15)  # the widest no wider
    assert authors_alpha_init(64) == (0.8, 0.2)  # narrower than any of theirs: their narrowest model's values
    assert all(attention == 4 * other for attention, other in AUTHORS_LLAMA_ALPHA.values())
    with pytest.raises(ValueError, match="positive int width"):
        authors_alpha_init(0)
