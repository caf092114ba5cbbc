"""normlab.analysis.geometry: the articles' formulas and the measurement helpers of the geometry chapter."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from normlab.analysis.geometry import articles, dimension, eps_placement, invariance, mean_dominated, parameters
from normlab.norms.reference import layer_norm_reference, rms_norm_reference


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_written_formulas_match_reference_and_torch():
    g = _generator(0)
    x = articles.random_tokens(16, 24, g)
    gamma, beta = torch.randn(24, generator=g, dtype=torch.float64), torch.randn(24, generator=g, dtype=torch.float64)
    torch.testing.assert_close(
        articles.layer_norm_as_written(x, gamma, beta, 1e-5),
        F.layer_norm(x, (24,), gamma, beta, 1e-5),
        rtol=1e-12,
        atol=1e-12,
    )
    torch.testing.assert_close(
        articles.rms_norm_eps_inside(x, gamma, 1e-6), F.rms_norm(x, (24,), gamma, 1e-6), rtol=1e-12, atol=1e-12
    )
    torch.testing.assert_close(
        articles.rms_norm_eps_outside(x, gamma, 1e-6),
        rms_norm_reference(x, gamma, 1e-6, eps_placement="outside"),
        rtol=1e-12,
        atol=1e-12,
    )


def test_random_tokens_have_varied_offset_and_scale():
    x = articles.random_tokens(200, 16, _generator(1))
    assert x.dtype == torch.float64 and x.shape == (200, 16)
    assert x.mean(-1).std() > 0.5 and x.std(-1).std() > 0.5


def test_shift_and_scale_change():
    x = articles.random_tokens(8, 32, _generator(2))
    ln = lambda v: layer_norm_reference(v, eps=1e-300)
    rms = lambda v: rms_norm_reference(v, eps=1e-300)
    assert invariance.shift_change(ln, x, [1.0, 100.0]).max() < 1e-12
    assert invariance.shift_change(rms, x, [1.0]).min() > 0.1
    assert invariance.scale_change(rms, x, [1e-3, 7.0, 1e3]).max() < 1e-12
    # float32 rounding of x + c destroys LayerNorm's shift invariance at huge c
    assert invariance.shift_change(lambda v: layer_norm_reference(v, eps=1e-5), x.float(), [1e7])[0] > 0.1


def test_largest_passing():
    assert invariance.largest_passing([1, 10, 100, 1000], [0.0, 1e-9, 1e-3, 1e-9], 1e-6) == 10
    assert invariance.largest_passing([1, 10], [1.0, 0.0], 1e-6) == 0.0
    assert invariance.largest_passing([10, 1], [0.0, 0.0], 1e-6) == 10


def test_output_rank_is_d_minus_one_for_layer_norm_and_d_for_rms():
    x = articles.random_tokens(300, 20, _generator(3))
    assert dimension.numerical_rank(layer_norm_reference(x, eps=1e-5)) == 19
    assert dimension.numerical_rank(rms_norm_reference(x, eps=1e-6)) == 20
    values = dimension.singular_values(x)
    assert values[0] == 1.0 and bool((values[:-1] >= values[1:]).all())


def test_tokens_with_rms_have_the_requested_rms():
    rms_values = [1e-6, 1.0, 3e4]
    x = eps_placement.tokens_with_rms(rms_values, 64, _generator(4))
    torch.testing.assert_close(
        x.pow(2).mean(-1).sqrt(), torch.tensor(rms_values, dtype=torch.float64), rtol=1e-12, atol=0
    )


def test_placement_gap_follows_eps_over_r_at_large_scale():
    eps = 1e-6
    rms_values = [1e2, 1e3]
    x = eps_placement.tokens_with_rms(rms_values, 32, _generator(5))
    gap = eps_placement.placement_output_gap(x, eps)
    # (r + ε) / sqrt(r² + ε) - 1 = ε/r - ε/(2r²) + O(ε²/r²)
    expected = torch.tensor([eps / r - eps / (2 * r * r) for r in rms_values], dtype=torch.float64)
    torch.testing.assert_close(gap, expected, rtol=1e-3, atol=0)
    upstream = torch.randn(x.shape, generator=_generator(6), dtype=torch.float64)
    grad_gap = eps_placement.placement_gradient_gap(x, eps, upstream)
    assert bool(((grad_gap > 0.2 * expected) & (grad_gap < 5 * expected)).all())


def test_placement_gap_is_large_below_sqrt_eps_and_rounded_disagreement():
    eps = 1e-6
    x = eps_placement.tokens_with_rms([1e-6, 1e3], 64, _generator(7))
    gap = eps_placement.placement_output_gap(x, eps)
    assert gap[0] > 0.5 and gap[1] < 1e-8
    share32 = eps_placement.placement_rounded_disagreement(x, eps, torch.float32)
    assert share32[0] == 1.0 and share32[1] < 0.1


def test_crossover_rms():
    rms_values = [1e-2, 1e-1, 1.0, 10.0]
    gaps = [1e-4, 1e-5, 1e-6, 1e-7]  # gap = 1e-6 / r
    assert math.isclose(eps_placement.crossover_rms(rms_values, gaps, 1e-6), 1.0)
    assert math.isclose(eps_placement.crossover_rms(rms_values, gaps, 3e-7), 1e-6 / 3e-7, rel_tol=1e-9)
    assert eps_placement.crossover_rms(rms_values, gaps, 1.0) == 0.0
    assert eps_placement.crossover_rms(rms_values, gaps, 1e-8) == math.inf
    # a dip below threshold in the middle must not hide the crossing at larger RMS
    assert math.isclose(
        eps_placement.crossover_rms([1e-2, 0.5, 1.0, 10.0], [1e-3, 0.0, 1e-5, 1e-7], 1e-6), math.sqrt(10)
    )


def test_crossover_matches_prediction_on_measured_gaps():
    eps = 1e-6
    rms_values = torch.logspace(-6, 4, 200, dtype=torch.float64).tolist()
    gaps = eps_placement.placement_output_gap(eps_placement.tokens_with_rms(rms_values, 16, _generator(10)), eps)
    for resolution in (torch.finfo(torch.float32).eps, torch.finfo(torch.bfloat16).eps):
        measured = eps_placement.crossover_rms(rms_values, gaps, resolution)
        assert 0.5 < measured / eps_placement.predicted_crossover_rms(eps, resolution) < 2


def test_eps_effect_on_mean_dominated_inputs():
    g = _generator(8)
    eps = 1e-6
    ln = lambda v, e: layer_norm_reference(v, eps=e)
    rms = lambda v, e: rms_norm_reference(v, eps=e)
    near_constant = mean_dominated.mean_dominated_tokens(
        offset=100.0, noise=1e-4, tokens=16, d=64, generator=g
    )  # σ² = 1e-8 < ε
    assert mean_dominated.eps_effect(ln, near_constant, eps) > 0.5
    assert mean_dominated.eps_effect(rms, near_constant, eps) < 1e-9
    assert mean_dominated.mean_direction_share(rms_norm_reference(near_constant)) > 0.999
    assert mean_dominated.mean_direction_share(layer_norm_reference(near_constant)) < 1e-20


def test_parameters_and_saved_bytes():
    ln, rms = torch.nn.LayerNorm(48), torch.nn.RMSNorm(48)
    assert (parameters.parameter_count(ln), parameters.parameter_count(rms)) == (96, 48)
    assert (parameters.parameter_bytes(ln), parameters.parameter_bytes(rms)) == (384, 192)
    x = torch.randn(4, 48, requires_grad=True)
    saved = parameters.saved_for_backward_bytes(lambda v: v.exp(), x)
    assert saved == 4 * 48 * 4  # exp saves its output


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_shift_change_rounds_in_input_dtype(dtype):
    x = torch.randn(4, 16, generator=_generator(9)).to(dtype)
    change = invariance.shift_change(lambda v: v, x, [0.0])
    assert change[0] == 0.0


def test_repeated_gives_the_sample_sd_over_independent_draws():
    from normlab.analysis.geometry.articles import repeated

    mean, sd, values = repeated(lambda g: torch.randn((), generator=g, dtype=torch.float64), 4, seed=5)
    assert len(values) == 4 and len(set(values)) == 4  # independent draws
    assert mean == pytest.approx(sum(values) / 4)
    assert sd == pytest.approx(torch.tensor(values, dtype=torch.float64).std().item())
    _, zero, _ = repeated(lambda g: 1.0, 3)
    assert zero == 0.0
    with pytest.raises(ValueError, match="repeats"):
        repeated(lambda g: 1.0, 1)
