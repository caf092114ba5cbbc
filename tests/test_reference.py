"""The reference norms are the specification: check them against hand-computed
values, against PyTorch's own implementations, and their gradients with gradcheck."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from normlab.norms.reference import layer_norm_reference, rms_norm_reference


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------- hand-computed


def test_rms_norm_hand_computed_eps_inside():
    x = torch.tensor([3.0, 4.0], dtype=torch.float64)
    # mean square = (9 + 16) / 2 = 12.5
    eps = 0.5
    expected = x / math.sqrt(12.5 + eps)
    torch.testing.assert_close(rms_norm_reference(x, eps=eps), expected, rtol=0, atol=1e-15)


def test_rms_norm_hand_computed_eps_outside():
    x = torch.tensor([3.0, 4.0], dtype=torch.float64)
    eps = 0.5
    expected = x / (math.sqrt(12.5) + eps)
    torch.testing.assert_close(rms_norm_reference(x, eps=eps, eps_placement="outside"), expected, rtol=0, atol=1e-15)


def test_rms_norm_hand_computed_gain_and_offset():
    x = torch.tensor([1.0, -1.0, 1.0, -1.0], dtype=torch.float64)  # RMS = 1
    weight = torch.tensor([0.0, 1.0, 2.0, -1.0], dtype=torch.float64)
    eps = 1e-12
    plain = rms_norm_reference(x, weight, eps=eps)
    torch.testing.assert_close(plain, torch.tensor([0.0, -1.0, 2.0, 1.0], dtype=torch.float64), rtol=0, atol=1e-11)
    # Gemma's convention: the gain is 1 + weight.
    gemma = rms_norm_reference(x, weight, eps=eps, offset=1.0)
    torch.testing.assert_close(gemma, torch.tensor([1.0, -2.0, 3.0, 0.0], dtype=torch.float64), rtol=0, atol=1e-11)


def test_partial_rms_uses_only_leading_features():
    # d = 10, p = 0.25 -> ceil(2.5) = 3 leading features: 2, 2, 2 -> RMS 2; the large tail is ignored.
    x = torch.tensor([2.0, 2.0, -2.0, 100.0, 0, 0, 0, 0, 0, -50.0], dtype=torch.float64)
    y = rms_norm_reference(x, eps=1e-12, partial=0.25)
    torch.testing.assert_close(y, x / 2.0, rtol=0, atol=1e-10)


def test_partial_rms_keeps_at_least_one_feature():
    x = torch.tensor([4.0, 1.0, 1.0], dtype=torch.float64)
    y = rms_norm_reference(x, eps=1e-12, partial=0.01)  # ceil(0.03) = 1 feature: RMS = 4
    torch.testing.assert_close(y, x / 4.0, rtol=0, atol=1e-12)


def test_layer_norm_hand_computed():
    x = torch.tensor([1.0, 2.0, 3.0, 6.0], dtype=torch.float64)
    # mean 3, centred (-2, -1, 0, 3), biased variance (4 + 1 + 0 + 9) / 4 = 3.5
    eps = 0.5
    weight = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
    bias = torch.tensor([0.5, 0.0, -0.5, 1.0], dtype=torch.float64)
    expected = torch.tensor([-2.0, -1.0, 0.0, 3.0], dtype=torch.float64) / 2.0 * weight + bias  # sqrt(3.5 + 0.5) = 2
    torch.testing.assert_close(layer_norm_reference(x, weight, bias, eps=eps), expected, rtol=0, atol=1e-15)


def test_layer_norm_of_mean_dominated_row_is_exact():
    # A large common offset must not leak into the variance (two-pass statistics).
    noise = torch.tensor([1.0, -1.0, 1.0, -1.0], dtype=torch.float64)
    x = (1e6 + noise).to(torch.float32)
    y = layer_norm_reference(x, eps=1e-12)
    torch.testing.assert_close(y, noise.to(torch.float32), rtol=0, atol=1e-6)


def test_residual_adds_before_normalising_and_returns_sum():
    g = _generator(0)
    x, residual = (
        torch.randn(3, 8, generator=g, dtype=torch.float64),
        torch.randn(3, 8, generator=g, dtype=torch.float64),
    )
    y, s = rms_norm_reference(x, residual=residual)
    torch.testing.assert_close(s, x + residual, rtol=0, atol=0)
    torch.testing.assert_close(y, rms_norm_reference(x + residual), rtol=0, atol=0)
    y_ln, s_ln = layer_norm_reference(x, residual=residual)
    torch.testing.assert_close(s_ln, x + residual, rtol=0, atol=0)
    torch.testing.assert_close(y_ln, layer_norm_reference(x + residual), rtol=0, atol=0)


# ---------------------------------------------------------------- against PyTorch


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-13), (torch.float32, 2e-6)])
@pytest.mark.parametrize("shape", [(5, 16), (2, 3, 33), (7,)])
def test_rms_norm_matches_torch(dtype, tol, shape):
    g = _generator(1)
    x = (3 * torch.randn(shape, generator=g, dtype=torch.float64) + 0.5).to(dtype)
    weight = torch.randn(shape[-1], generator=g, dtype=torch.float64).to(dtype)
    for eps in (1e-6, 1e-2):
        expected = F.rms_norm(x, (shape[-1],), weight, eps)
        torch.testing.assert_close(rms_norm_reference(x, weight, eps=eps), expected, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-13), (torch.float32, 2e-6)])
@pytest.mark.parametrize("shape", [(5, 16), (2, 3, 33), (7,)])
def test_layer_norm_matches_torch(dtype, tol, shape):
    g = _generator(2)
    x = (3 * torch.randn(shape, generator=g, dtype=torch.float64) + 0.5).to(dtype)
    weight = torch.randn(shape[-1], generator=g, dtype=torch.float64).to(dtype)
    bias = torch.randn(shape[-1], generator=g, dtype=torch.float64).to(dtype)
    for eps in (1e-5, 1e-1):
        expected = F.layer_norm(x, (shape[-1],), weight, bias, eps)
        torch.testing.assert_close(layer_norm_reference(x, weight, bias, eps=eps), expected, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_no_worse_than_twice_torch(dtype):
    g = _generator(3)
    x64 = torch.randn(64, 128, generator=g, dtype=torch.float64)
    w64 = 1 + 0.1 * torch.randn(128, generator=g, dtype=torch.float64)
    x, w = x64.to(dtype), w64.to(dtype)
    # Both are measured against float64 evaluated on the same rounded inputs.
    truth_rms = rms_norm_reference(x.double(), w.double())
    truth_ln = layer_norm_reference(x.double(), w.double())
    ours_rms = (rms_norm_reference(x, w).double() - truth_rms).abs().max()
    torch_rms = (F.rms_norm(x, (128,), w, 1e-6).double() - truth_rms).abs().max()
    ours_ln = (layer_norm_reference(x, w).double() - truth_ln).abs().max()
    torch_ln = (F.layer_norm(x, (128,), w, None, 1e-5).double() - truth_ln).abs().max()
    assert rms_norm_reference(x, w).dtype == dtype
    assert ours_rms <= 2 * torch_rms + 1e-12
    assert ours_ln <= 2 * torch_ln + 1e-12


# ---------------------------------------------------------------- gradients


def _inputs(seed: int, shape=(3, 6)):
    g = _generator(seed)
    x = torch.randn(shape, generator=g, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(shape[-1], generator=g, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(shape[-1], generator=g, dtype=torch.float64, requires_grad=True)
    return x, weight, bias


@pytest.mark.parametrize("eps_placement", ["inside", "outside"])
@pytest.mark.parametrize("partial", [1.0, 0.5])
def test_rms_norm_gradcheck(eps_placement, partial):
    x, weight, _ = _inputs(4)
    function = lambda x, w: rms_norm_reference(x, w, eps=1e-3, eps_placement=eps_placement, partial=partial)
    assert torch.autograd.gradcheck(function, (x, weight))
    assert torch.autograd.gradgradcheck(function, (x, weight))


def test_rms_norm_gradcheck_with_offset_and_residual():
    x, weight, _ = _inputs(5)
    residual = torch.randn(x.shape, generator=_generator(9), dtype=torch.float64, requires_grad=True)
    function = lambda x, w, r: rms_norm_reference(x, w, eps=1e-3, offset=1.0, residual=r)
    assert torch.autograd.gradcheck(function, (x, weight, residual))


def test_layer_norm_gradcheck():
    x, weight, bias = _inputs(6)
    function = lambda x, w, b: layer_norm_reference(x, w, b, eps=1e-3)
    assert torch.autograd.gradcheck(function, (x, weight, bias))
    assert torch.autograd.gradgradcheck(function, (x, weight, bias))


def test_gradients_match_torch_in_float64():
    x, weight, bias = _inputs(7, shape=(4, 24))
    upstream = torch.randn(4, 24, generator=_generator(8), dtype=torch.float64)
    for ours, theirs in [
        (lambda: rms_norm_reference(x, weight, eps=1e-6), lambda: F.rms_norm(x, (24,), weight, 1e-6)),
        (lambda: layer_norm_reference(x, weight, bias, eps=1e-5), lambda: F.layer_norm(x, (24,), weight, bias, 1e-5)),
    ]:
        ours_grads = torch.autograd.grad(ours(), (x, weight), upstream)
        theirs_grads = torch.autograd.grad(theirs(), (x, weight), upstream)
        for a, b in zip(ours_grads, theirs_grads):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize("norm", [rms_norm_reference, layer_norm_reference])
def test_rejects_wrong_weight_shape(norm):
    x = torch.randn(2, 8)
    with pytest.raises(ValueError, match=r"weight has shape \(7,\).*must have shape \(8,\)"):
        norm(x, torch.ones(7))
    with pytest.raises(ValueError, match=r"weight has shape \(1, 8\)"):
        norm(x, torch.ones(1, 8))


def test_layer_norm_rejects_wrong_bias_shape():
    with pytest.raises(ValueError, match=r"bias has shape \(4,\).*must have shape \(8,\)"):
        layer_norm_reference(torch.randn(2, 8), torch.ones(8), torch.zeros(4))


@pytest.mark.parametrize("norm", [rms_norm_reference, layer_norm_reference])
@pytest.mark.parametrize("eps", [0.0, -1e-6, float("nan")])
def test_rejects_non_positive_eps(norm, eps):
    with pytest.raises(ValueError, match="eps must be > 0"):
        norm(torch.randn(2, 8), eps=eps)


@pytest.mark.parametrize("partial", [0.0, -0.5, 1.5, float("nan")])
def test_rejects_partial_outside_unit_interval(partial):
    with pytest.raises(ValueError, match=r"partial must lie in \(0, 1\]"):
        rms_norm_reference(torch.randn(2, 8), partial=partial)


def test_rejects_unknown_eps_placement_and_integer_input():
    with pytest.raises(ValueError, match="eps_placement must be one of"):
        rms_norm_reference(torch.randn(2, 8), eps_placement="under")
    with pytest.raises(TypeError, match="real floating dtype"):
        rms_norm_reference(torch.ones(2, 8, dtype=torch.int64))


def test_rejects_offset_without_weight():
    with pytest.raises(ValueError, match="offset needs a weight"):
        rms_norm_reference(torch.randn(2, 8), offset=1.0)
