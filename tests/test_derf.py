"""Derf (normlab.norms.derf) against a float64 reference written from the formula, its gradients, its refusals, and
norm="derf" in the GPT: the authors' recipe, and the same initial weights as RMSNorm and DyT for every shared
parameter."""

from __future__ import annotations

import math

import pytest
import torch

from normlab.gpt.model import GPT, GPTConfig
from normlab.norms.derf import Derf, derf, derf_reference


def _formula(x, alpha, shift, weight, bias):
    # erf through math.erf, element by element in float64: independent of torch.erf
    flat = [math.erf(alpha * v + shift) for v in x.double().flatten().tolist()]
    y = torch.tensor(flat, dtype=torch.float64).reshape(x.shape)
    return y * weight.double() + bias.double()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_derf_matches_the_formula(dtype):
    g = torch.Generator().manual_seed(int(torch.randint(0, 2**31 - 1, ()).item()))
    x = (3 * torch.randn(3, 5, 8, generator=g)).to(dtype)
    weight, bias = torch.randn(8, generator=g), torch.randn(8, generator=g)
    alpha, shift = float(torch.rand((), generator=g)) + 0.1, float(torch.randn((), generator=g))
    expected = _formula(x, alpha, shift, weight, bias)
    tol = {torch.float64: 1e-12, torch.float32: 1e-5, torch.bfloat16: 3e-2}[dtype]
    got = derf(x, alpha, shift, weight.to(dtype), bias.to(dtype)).double()
    torch.testing.assert_close(got, expected, atol=tol * 10, rtol=tol)
    ref = derf_reference(x, alpha, shift, weight.to(dtype), bias.to(dtype))
    assert ref.dtype == dtype
    torch.testing.assert_close(ref.double(), expected, atol=tol * 10, rtol=tol)


def test_derf_module_starts_at_the_authors_values_and_gradchecks():
    layer = Derf(6).double()
    assert layer.alpha.shape == layer.shift.shape == (1,)
    assert layer.alpha.item() == 0.5 and layer.shift.item() == 0.0
    assert torch.equal(layer.weight, torch.ones(6, dtype=torch.float64))
    assert torch.equal(layer.bias, torch.zeros(6, dtype=torch.float64))
    x = torch.randn(2, 3, 6, dtype=torch.float64, requires_grad=True)
    alpha = torch.tensor([0.7], dtype=torch.float64, requires_grad=True)
    shift = torch.tensor([-0.3], dtype=torch.float64, requires_grad=True)
    weight = torch.randn(6, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda *a: derf(*a), (x, alpha, shift, weight, bias))
    # the module's parameters receive gradients (alpha and shift are learnable)
    layer(x).sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in layer.parameters())


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: Derf(4, alpha_init=0.0), "alpha must be a positive"),
        (lambda: Derf(4, alpha_init=float("nan")), "alpha must be a positive"),
        (lambda: Derf(4, shift_init=float("inf")), "shift must be a finite"),
        (lambda: Derf(4, shift_init=True), "shift must be a finite"),
        (lambda: Derf((2, 2)), "normalized_shape must be one positive int"),
        (lambda: derf(torch.ones(2, 4), torch.ones(2)), "alpha is one scalar"),
        (lambda: derf(torch.ones(2, 4), 0.5, torch.zeros(3)), "shift is one scalar"),
        (lambda: derf(torch.ones(2, 4), 0.5, 0.0, torch.ones(3)), r"weight must have shape \(4,\)"),
        (lambda: derf(torch.ones(2, 4, dtype=torch.long), 0.5), "floating-point tensor"),
        (lambda: GPTConfig(norm="derf", derf_alpha=-1.0), "GPTConfig.derf_alpha"),
    ],
)
def test_bad_parameters_are_refused_by_name(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_gpt_with_derf_follows_the_recipe_and_shares_initial_weights():
    size = dict(width=16, depth=2, heads=2, context=8)
    models = {}
    for norm, extra in (("rms", {}), ("dyt", dict(dyt_bias=False, dyt_alpha=0.2)), ("derf", {})):
        torch.manual_seed(3)
        models[norm] = GPT(GPTConfig(**size, norm=norm, **extra))
    derf_model = models["derf"]
    norms = [module for _, module in derf_model.norms()]
    assert len(norms) == 2 * 2 + 1 and all(isinstance(m, Derf) for m in norms)  # every norm, the final one too
    assert derf_model.embedding_scale is not None and float(derf_model.embedding_scale) == pytest.approx(4.0)
    params = {norm: dict(m.named_parameters()) for norm, m in models.items()}
    shared = [n for n in params["rms"] if n in params["dyt"] and n in params["derf"] and "norm" not in n]
    assert shared and all(torch.equal(params["rms"][n], params["derf"][n]) for n in shared)
    assert all(torch.equal(params["dyt"][n], params["derf"][n]) for n in shared)
    # the new options are written only when set, so older configurations serialise as before
    assert "derf_alpha" not in GPTConfig(**size).to_dict()
    assert GPTConfig(**size, norm="derf", derf_alpha=0.3).to_dict()["derf_alpha"] == 0.3
    x = torch.randint(0, 256, (2, 8))
    _, loss = derf_model(x, x)
    loss.backward()
    assert torch.isfinite(loss) and derf_model.final_norm.shift.grad is not None
