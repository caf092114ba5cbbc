import math

import pytest
import torch

from normlab.analysis.gain import measures, qk_projections, rescaling, toy_chain
from normlab.gpt.model import GPT, GPTConfig


def test_toy_chain_is_exactly_scale_invariant_in_each_group():
    chain = toy_chain.make_toy_chain(seed=3)
    assert toy_chain.check_scale_invariance(chain, factors=(0.3, 5.0)) < 1e-12
    p = chain.clone_params()
    chain.loss(p).backward()
    for group in toy_chain.GROUPS:  # a scale-invariant group's gradient is orthogonal to it
        cosine = torch.dot(p[group].grad.flatten(), p[group].detach().flatten()) / (
            p[group].grad.norm() * p[group].detach().norm()
        )
        assert abs(float(cosine)) < 1e-10


def test_angle_matches_float64_arccos():
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(50, generator=gen, dtype=torch.float64), torch.randn(50, generator=gen, dtype=torch.float64)
    expected = math.acos(float(a @ b / (a.norm() * b.norm())))
    assert measures.angle(a, b) == pytest.approx(expected, rel=1e-12)


def test_effective_lr_exponents_sgd_and_adam():
    chain = toy_chain.make_toy_chain(seed=1)
    sgd = toy_chain.effective_lr_exponents(
        toy_chain.effective_lr_scan(chain, "g", [1, 2, 4], optimizer="sgd", lr=0.001, steps=2)
    )
    adam = toy_chain.effective_lr_exponents(
        toy_chain.effective_lr_scan(chain, "g", [1, 2, 4], optimizer="adamw", lr=0.001, steps=2)
    )
    assert sgd["g"] == pytest.approx(-2.0, abs=0.1)
    assert adam["g"] == pytest.approx(-1.0, abs=0.1)
    assert abs(sgd["W1"]) < 0.05  # the gain's scale is eaten by the next norm, on the way back too


def test_sgd_rescaling_and_li_arora_schedule_are_exact():
    chain = toy_chain.make_toy_chain(seed=2)
    assert toy_chain.sgd_direction_equivalence(chain, scale=2.5, lr=0.05, steps=15) < 1e-10
    schedule = toy_chain.weight_decay_as_schedule(chain, lr=0.1, weight_decay=0.1, steps=30)
    assert schedule["angle"].max() < 1e-10
    assert schedule["norm_scheduled"].iloc[-1] > schedule["norm_with_decay"].iloc[-1]


def test_equilibrium_formulas_values_and_random_walk_sgd():
    pred = toy_chain.equilibrium_prediction("sgdm", 0.1, 0.01, sphere_grad_sq=4.0, momentum=0.9)
    assert pred["angular_update"] == pytest.approx(math.sqrt(2 * 0.1 * 0.01 / 1.9))
    assert pred["norm"] == pytest.approx((0.1 * 4.0 / (2 * 0.01 * 0.1)) ** 0.25)
    adam = toy_chain.equilibrium_prediction("adamw", 0.01, 0.5, elements=100)
    assert adam["norm"] == pytest.approx(1.0)
    walk = toy_chain.random_walk_equilibrium_run("sgd", 100, 0.1, 0.2, 600)
    check = toy_chain.equilibrium_check(walk, "sgd", 0.1, 0.2, 100)
    assert check["norm_ratio"] == pytest.approx(1.0, abs=0.1)
    assert check["angular_ratio"] == pytest.approx(1.0, abs=0.1)
    with pytest.raises(ValueError, match="optimizer"):
        toy_chain.equilibrium_prediction("lion", 0.1, 0.1)


def test_bad_inputs_are_named():
    chain = toy_chain.make_toy_chain(seed=0, samples=64)
    with pytest.raises(ValueError, match="norms"):
        toy_chain.effective_lr_scan(chain, "W1", [])
    with pytest.raises(ValueError, match="scaled"):
        toy_chain.effective_lr_scan(chain, "W3", [1.0])
    with pytest.raises(ValueError, match="weight_decay"):
        toy_chain.weight_decay_as_schedule(chain, lr=0.1, weight_decay=0.0)


def test_gain_sensitivity_on_a_tiny_gpt():
    torch.manual_seed(0)
    model = GPT(GPTConfig(context=8, width=16, depth=2, heads=2))
    before = {n: m.weight.detach().clone() for n, m in model.norms()}
    x = torch.randint(0, 256, (2, 8))
    frame = rescaling.gain_sensitivity(model, [(x, x)], [0.5, 1.0, 3.0])
    assert set(frame["location"]) == {"attention input", "MLP input", "final"}
    assert frame[frame["factor"] == 1.0]["delta_loss"].abs().max() < 1e-6
    assert frame[frame["factor"] == 3.0]["delta_loss"].abs().max() > 1e-4  # pre-LN gains are not scale invariant
    for name, module in model.norms():  # gains restored
        assert torch.equal(module.weight, before[name])
    assert all(v == pytest.approx(1.0) for v in rescaling.gain_rms(model).values())


def test_post_ln_locations_are_named_by_the_trunk():
    model = GPT(GPTConfig(context=8, width=16, depth=2, heads=2, placement="post"))
    locations = rescaling.norm_locations(model)
    assert set(locations) == {"trunk after attention", "trunk after MLP"}
    assert all(len(modules) == 2 for modules in locations.values())


def _tiny_pre_ln(seed=0, norm="rms"):
    torch.manual_seed(seed)
    return GPT(GPTConfig(context=8, width=16, depth=2, heads=2, norm=norm)).double()


def _batch(seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (2, 8), generator=g)
    return x, torch.roll(x, -1, dims=1)


@pytest.mark.parametrize("norm", ["rms", "layer"])
def test_gain_linear_rescale_leaves_the_function_unchanged_in_float64(norm):
    model = _tiny_pre_ln(norm=norm)
    table = rescaling.rescale_symmetry(model, [_batch()], [0.3, 3.0])
    assert table["delta_loss_rescaled_pair"].abs().max() < 1e-12
    # The gain alone is not scale invariant in pre-LN: the same factors move the loss.
    assert table["delta_loss_gain_alone"].abs().min() > 1e-4


def test_following_linears_cover_every_norm_and_refuse_post_ln():
    model = _tiny_pre_ln()
    pairs = rescaling.following_linears(model)
    assert set(pairs) == {name for name, _ in model.norms()}
    assert pairs["final_norm"] == [model.lm_head] and pairs["blocks.1.norm1"] == [model.blocks[1].attn.qkv]
    torch.manual_seed(0)
    with pytest.raises(ValueError, match="pre-LN"):
        rescaling.following_linears(GPT(GPTConfig(context=8, width=16, depth=1, heads=2, placement="post")))


def test_effective_update_scales_as_derived():
    # W's gradient scales as a and g's as 1/a: SGD's W-part goes as a^2 and g-part as a^-2; Adam's as a and 1/a.
    model, batch = _tiny_pre_ln(), _batch()
    factors = [1.0, 2.0, 4.0]
    sgd = rescaling.effective_update(model, batch, factors, optimizer="sgd", lr=1e-3)
    adam = rescaling.effective_update(model, batch, factors, optimizer="adam", lr=1e-4)
    assert measures.fit_power_law(sgd.factor, sgd.via_W) == pytest.approx(2.0, abs=0.02)
    assert measures.fit_power_law(sgd.factor, sgd.via_g) == pytest.approx(-2.0, abs=0.02)
    assert measures.fit_power_law(adam.factor, adam.via_W) == pytest.approx(1.0, abs=0.02)
    assert measures.fit_power_law(adam.factor, adam.via_g) == pytest.approx(-1.0, abs=0.02)
    with pytest.raises(ValueError, match="optimizer"):
        rescaling.effective_update(model, batch, factors, optimizer="lion")


# ---- W_q and W_k under QK-norm: exactly scale invariant


def _tiny_qk(seed=0, eps=qk_projections.QK_EXACT_EPS):
    return qk_projections.qk_norm_model(dict(context=8, width=16, depth=2, heads=2), seed=seed, eps=eps)


def test_qk_normed_attention_is_exactly_invariant_to_the_scale_of_wq_and_wk_in_float64():
    model, batch = _tiny_qk(), _batch()
    frame = qk_projections.qk_forward_invariance(model, batch, [0.3, 3.0])
    assert set(frame["scaled"]) == {"W_q", "W_k", "W_q and W_k"} and len(frame) == 6
    assert frame["max_abs_delta_logit"].max() < 1e-12
    # The same weights with a real epsilon: exactness is lost at the size of ε / E[q²].
    usual = qk_projections.qk_forward_invariance(_tiny_qk(eps=1e-5), batch, [0.3, 3.0])
    assert usual["max_abs_delta_logit"].max() > 1e-8
    # The value projection is not behind a norm: scaling it does move the logits.
    scaled = qk_projections.qk_norm_model(dict(context=8, width=16, depth=2, heads=2))
    with torch.no_grad():
        for block in scaled.blocks:
            block.attn.qkv.weight[32:].mul_(3.0)
        assert (scaled(batch[0])[0] - model(batch[0])[0]).abs().max() > 1e-4


def test_projection_rows_are_the_first_two_row_blocks_and_need_qk_norm():
    model = _tiny_qk()
    (q0, _), (k0, _) = qk_projections.projection_rows(model, "W_q"), qk_projections.projection_rows(model, "W_k")
    qkv = model.blocks[0].attn.qkv.weight
    assert q0.data_ptr() == qkv[:16].data_ptr() and k0.data_ptr() == qkv[16:32].data_ptr()
    assert qk_projections.flat_projection(model, "W_q").numel() == 2 * 16 * 16
    with pytest.raises(ValueError, match="qk_norm=True"):
        qk_projections.projection_rows(_tiny_pre_ln(), "W_q")
    with pytest.raises(ValueError, match="projection"):
        qk_projections.projection_rows(model, "W_v")


def test_qk_gradient_scales_as_one_over_a_and_is_orthogonal_to_wq():
    law = qk_projections.qk_gradient_law(_tiny_qk(), _batch(), [0.25, 1.0, 4.0])
    assert measures.fit_power_law(law["factor"], law["grad_norm_q"]) == pytest.approx(-1.0, abs=1e-9)
    assert measures.fit_power_law(law["factor"], law["grad_norm_k"]) == pytest.approx(-1.0, abs=1e-9)
    assert law["grad_norm_q_times_a"].std() / law["grad_norm_q_times_a"].mean() < 1e-9
    assert law["cosine_grad_q_with_q"].abs().max() < 1e-12


def test_sgd_step_gives_wq_and_wk_their_own_rate():
    model = _tiny_qk()
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    before = model.blocks[0].attn.qkv.weight.detach().clone()
    head_before = model.lm_head.weight.detach().clone()
    qk_projections._sgd_step(model, lr=0.1, projection_lr=0.4)
    step = before - model.blocks[0].attn.qkv.weight.detach()
    assert torch.allclose(step[:32], torch.full_like(step[:32], 0.4))  # W_q and W_k
    assert torch.allclose(step[32:], torch.full_like(step[32:], 0.1))  # W_v
    assert torch.allclose(head_before - model.lm_head.weight.detach(), torch.full_like(head_before, 0.1))


def test_scaled_sgd_runs_are_one_trajectory_and_turn_wq_as_its_norm_to_the_minus_two():
    batches = [_batch(seed) for seed in range(3)]
    runs, gaps = qk_projections.qk_sgd_study(_tiny_qk(), batches, [0.5, 1.0, 2.0], lr=0.01)
    assert gaps["max_abs_delta_loss"].max() < 1e-12 and len(runs) == 9
    assert (runs["loss"] - runs["paired_loss"]).abs().max() < 1e-12
    first = runs[runs["step"] == 0]
    assert first["norm_q"].tolist() == pytest.approx(
        [0.5 * first["norm_q"].iloc[1], first["norm_q"].iloc[1], 2 * first["norm_q"].iloc[1]]
    )
    assert measures.fit_power_law(first["norm_q"], first["angular_update"]) == pytest.approx(-2.0, abs=0.01)
    # Per unit sphere gradient each step's turn is η/‖W_q‖², up to atan's curvature.
    assert (runs["effective_lr"] / runs["predicted_effective_lr"] - 1).abs().max() < 1e-2
    with pytest.raises(ValueError, match="learning rates"):
        qk_projections.qk_sgd_run(_tiny_qk(), batches, lr=0.0)
    with pytest.raises(ValueError, match="factors"):
        qk_projections.qk_sgd_study(_tiny_qk(), batches, [], lr=0.01)


def test_gain_alone_moves_the_logits_but_the_gain_and_next_linear_pair_does_not():
    contrast = qk_projections.gain_pair_contrast(_tiny_qk(), _batch(), [1.0, 3.0])
    assert set(contrast["location"]) == {"attention input", "MLP input", "final"}
    assert contrast["gain_and_next_linear"].max() < 1e-12
    moved = contrast[contrast["factor"] == 3.0]
    assert moved["gain_alone"].min() > 1e-4
    assert contrast[contrast["factor"] == 1.0]["gain_alone"].max() == 0.0


def test_following_linears_leave_out_qk_norms():
    model = _tiny_qk()
    pairs = rescaling.following_linears(model)
    assert not any("q_norm" in name or "k_norm" in name for name in pairs)
    assert len(pairs) == 2 * 2 + 1
    assert set(rescaling.norm_locations(model)) == {
        "attention input",
        "MLP input",
        "final",
        "queries and keys (QK-norm)",
    }
