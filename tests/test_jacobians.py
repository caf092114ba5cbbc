"""The closed-form Jacobians in normlab.analysis.jacobians.closed_forms against autograd of the reference, in float64."""

from __future__ import annotations

import pytest
import torch

from normlab.analysis.jacobians import closed_forms
from normlab.norms.reference import rms_norm_reference

MACHINE = 1e-12


def _token(seed: int, d: int, scale: float = 1.0, shift: float = 0.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return scale * torch.randn(d, generator=g, dtype=torch.float64) + shift


@pytest.mark.parametrize("d", [2, 7, 64])
@pytest.mark.parametrize("eps", [0.0, 1e-6, 0.3])
@pytest.mark.parametrize("eps_placement", ["inside", "outside"])
def test_rms_jacobian_matches_autograd(d, eps, eps_placement):
    x = _token(d, d, scale=2.5, shift=0.7)
    auto = closed_forms.autograd_jacobian(lambda v: closed_forms.rms_normalise(v, eps, eps_placement), x)
    assert closed_forms.relative_max_error(closed_forms.rms_jacobian(x, eps, eps_placement), auto) < MACHINE


@pytest.mark.parametrize("d", [3, 16, 64])
@pytest.mark.parametrize("eps", [0.0, 1e-5, 0.3])
def test_layer_norm_jacobian_matches_autograd_and_is_rms_at_centred_input(d, eps):
    x = _token(10 + d, d, scale=0.8, shift=-4.0)
    auto = closed_forms.autograd_jacobian(lambda v: closed_forms.layer_normalise(v, eps), x)
    assert closed_forms.relative_max_error(closed_forms.layer_norm_jacobian(x, eps), auto) < MACHINE
    projector = closed_forms.centring_projector(d)
    at_centred = closed_forms.autograd_jacobian(lambda v: closed_forms.rms_normalise(v, eps), projector @ x)
    assert closed_forms.relative_max_error(at_centred @ projector, auto) < MACHINE


def test_printed_b12_form_is_not_the_jacobian_but_differs_by_the_missing_1_over_d():
    x = _token(1, 32)
    auto = closed_forms.autograd_jacobian(lambda v: closed_forms.rms_normalise(v), x)
    printed = closed_forms.rms_jacobian_as_printed(x)
    assert closed_forms.relative_max_error(printed, auto) > 0.5
    # Along x̂ the printed matrix has eigenvalue (1 - d)/r instead of 0.
    r = closed_forms.rms(x)
    unit = x / x.norm()
    assert torch.isclose(unit @ printed @ unit, (1 - 32) / r, rtol=1e-12)
    assert float((auto @ unit).norm()) < MACHINE


def test_exact_rms_jacobian_is_a_scaled_projector():
    x = _token(2, 12, scale=5.0)
    spectrum = closed_forms.projector_spectrum(closed_forms.rms(x) * closed_forms.rms_jacobian(x))
    expected = torch.ones(12, dtype=torch.float64)
    expected[0] = 0.0
    torch.testing.assert_close(spectrum, expected, rtol=0, atol=1e-13)


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_input_and_gain_gradients_match_autograd(eps):
    x, gain, upstream = _token(3, 20, scale=3.0), _token(4, 20), _token(5, 20)
    grad_x, grad_g = closed_forms.autograd_rms_gradients(x, gain, upstream, eps)
    assert closed_forms.relative_max_error(closed_forms.rms_input_gradient(x, gain, upstream, eps), grad_x) < MACHINE
    assert closed_forms.relative_max_error(closed_forms.gain_gradient(x[None], upstream[None], eps), grad_g) < MACHINE
    if eps == 0.0:
        assert (
            closed_forms.relative_max_error(closed_forms.rms_input_gradient_as_printed(x, gain, upstream), grad_x) > 0.1
        )
        assert abs(closed_forms.cosine(grad_x, x)) < MACHINE


def test_gain_gradient_sums_over_tokens():
    g = torch.Generator().manual_seed(6)
    x = torch.randn(9, 5, generator=g, dtype=torch.float64)
    upstream = torch.randn(9, 5, generator=g, dtype=torch.float64)
    gain = torch.randn(5, generator=g, dtype=torch.float64, requires_grad=True)
    (auto,) = torch.autograd.grad(rms_norm_reference(x, gain, eps=closed_forms.EPS_FREE), gain, upstream)
    assert closed_forms.relative_max_error(closed_forms.gain_gradient(x, upstream), auto) < MACHINE


def test_formula_errors_separates_printed_from_exact_forms():
    errors = closed_forms.formula_errors(_token(7, 10, 2.0, 1.0), _token(8, 10), _token(9, 10), eps=1e-3)
    printed = {k: v for k, v in errors.items() if "printed" in k}
    exact = {k: v for k, v in errors.items() if "printed" not in k}
    assert len(printed) == 2 and all(v > 0.1 for v in printed.values())
    assert len(exact) == 7 and all(v < MACHINE for v in exact.values())


def test_null_directions_and_ranks():
    x = _token(10, 16, shift=2.0)
    free = closed_forms.null_directions(x)
    assert free["RMS: J x"] < MACHINE and free["LN: J x"] < MACHINE and free["LN: J 1"] < MACHINE
    assert free["RMS: J 1"] > 0.1  # RMSNorm does not remove the mean direction
    assert (free["RMS rank"], free["LN rank"]) == (15, 14)
    with_eps = closed_forms.null_directions(x, eps=0.1)
    assert with_eps["RMS: J x"] > 1e-3  # ε breaks exact scale invariance ...
    assert with_eps["LN: J 1"] < MACHINE  # ... but never shift invariance
    assert (with_eps["RMS rank"], with_eps["LN rank"]) == (16, 15)


def test_gradients_scale_as_one_over_r():
    x, gain, upstream = _token(11, 24), _token(12, 24), _token(13, 24)
    scales = [1e-3, 0.1, 10.0, 1e4]
    torch.testing.assert_close(
        closed_forms.gradient_scale_ratios(x, gain, upstream, scales),
        torch.ones(4, dtype=torch.float64),
        rtol=1e-12,
        atol=0,
    )
    damped = closed_forms.gradient_scale_ratios(x, gain, upstream, [1e-3], eps=1e-4)
    assert damped[0] < 0.5  # when mean(x²) ≲ ε the 1/r law fails


def test_fitted_gain_converges_to_per_channel_regression_slope():
    g = torch.Generator().manual_seed(14)
    x = torch.randn(400, 6, generator=g, dtype=torch.float64)
    slopes = torch.tensor([2.0, -1.0, 0.0, 0.5, 3.0, 1.0], dtype=torch.float64)
    x_hat = closed_forms.rms_normalise(x)
    target = x_hat * slopes + 0.3 * torch.randn(400, 6, generator=g, dtype=torch.float64)
    trajectory = closed_forms.fit_gain(x, target, steps=300, lr=0.5)
    assert trajectory.shape == (301, 6)
    solution = closed_forms.regression_gain(x, target)
    torch.testing.assert_close(trajectory[-1], solution, rtol=0, atol=1e-10)
    torch.testing.assert_close(solution, slopes, rtol=0, atol=0.1)


def test_bad_input():
    with pytest.raises(TypeError, match="float64"):
        closed_forms.rms_jacobian(torch.randn(4))
    with pytest.raises(ValueError, match="1-d tensor"):
        closed_forms.rms_jacobian(torch.randn(2, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match="eps_placement"):
        closed_forms.rms_jacobian(torch.randn(4, dtype=torch.float64), 0.1, "middle")
    with pytest.raises(ValueError, match="eps must be >= 0"):
        closed_forms.rms_normalise(torch.randn(4, dtype=torch.float64), -1.0)
    with pytest.raises(ValueError, match="shape \\(tokens, d\\)"):
        closed_forms.gain_gradient(torch.randn(4, dtype=torch.float64), torch.randn(4, dtype=torch.float64))
    with pytest.raises(ValueError, match="steps must be >= 1"):
        closed_forms.fit_gain(
            torch.randn(3, 4, dtype=torch.float64), torch.randn(3, 4, dtype=torch.float64), steps=0, lr=0.1
        )


def test_rmsnorm_jacobian_removes_the_radial_part_and_passes_the_tangential_part_scaled_by_one_over_r():
    from normlab.analysis.jacobians.closed_forms import radial_tangential

    g = torch.Generator().manual_seed(3)
    x = torch.randn(32, generator=g, dtype=torch.float64) + 0.7
    v = torch.randn(32, generator=g, dtype=torch.float64)
    parts = radial_tangential(x, v)
    assert parts["radial kept"] < 1e-13
    assert parts["tangential error"] < 1e-13
    assert parts["output change along y"] < 1e-13
    # a purely radial change moves nothing; with a large eps inside the root the radial part leaks through
    leaky = radial_tangential(x, v, eps=float(x.pow(2).mean()))
    assert leaky["radial kept"] > 1e-3
    with pytest.raises(ValueError, match="shape"):
        radial_tangential(x, v[:5])
