import math

import pytest
import torch

from normlab.analysis import gain as G
from normlab.gpt.model import GPT, GPTConfig


def test_toy_chain_is_exactly_scale_invariant_in_each_group():
    chain = G.make_toy_chain(seed=3)
    assert G.check_scale_invariance(chain, factors=(0.3, 5.0)) < 1e-12
    p = chain.clone_params()
    chain.loss(p).backward()
    for group in G.GROUPS:  # a scale-invariant group's gradient is orthogonal to it
        cosine = torch.dot(p[group].grad.flatten(), p[group].detach().flatten()) / (
            p[group].grad.norm() * p[group].detach().norm()
        )
        assert abs(float(cosine)) < 1e-10


def test_angle_matches_float64_arccos():
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(50, generator=gen, dtype=torch.float64), torch.randn(50, generator=gen, dtype=torch.float64)
    expected = math.acos(float(a @ b / (a.norm() * b.norm())))
    assert G.angle(a, b) == pytest.approx(expected, rel=1e-12)


def test_effective_lr_exponents_sgd_and_adam():
    chain = G.make_toy_chain(seed=1)
    sgd = G.effective_lr_exponents(G.effective_lr_scan(chain, "g", [1, 2, 4], optimizer="sgd", lr=0.001, steps=2))
    adam = G.effective_lr_exponents(G.effective_lr_scan(chain, "g", [1, 2, 4], optimizer="adamw", lr=0.001, steps=2))
    assert sgd["g"] == pytest.approx(-2.0, abs=0.1)
    assert adam["g"] == pytest.approx(-1.0, abs=0.1)
    assert abs(sgd["W1"]) < 0.05  # the gain's scale is eaten by the next norm, on the way back too


def test_sgd_rescaling_and_li_arora_schedule_are_exact():
    chain = G.make_toy_chain(seed=2)
    assert G.sgd_direction_equivalence(chain, scale=2.5, lr=0.05, steps=15) < 1e-10
    schedule = G.weight_decay_as_schedule(chain, lr=0.1, weight_decay=0.1, steps=30)
    assert schedule["angle"].max() < 1e-10
    assert schedule["norm_scheduled"].iloc[-1] > schedule["norm_with_decay"].iloc[-1]


def test_equilibrium_formulas_values_and_random_walk_sgd():
    pred = G.equilibrium_prediction("sgdm", 0.1, 0.01, sphere_grad_sq=4.0, momentum=0.9)
    assert pred["angular_update"] == pytest.approx(math.sqrt(2 * 0.1 * 0.01 / 1.9))
    assert pred["norm"] == pytest.approx((0.1 * 4.0 / (2 * 0.01 * 0.1)) ** 0.25)
    adam = G.equilibrium_prediction("adamw", 0.01, 0.5, elements=100)
    assert adam["norm"] == pytest.approx(1.0)
    walk = G.random_walk_equilibrium_run("sgd", 100, 0.1, 0.2, 600)
    check = G.equilibrium_check(walk, "sgd", 0.1, 0.2, 100)
    assert check["norm_ratio"] == pytest.approx(1.0, abs=0.1)
    assert check["angular_ratio"] == pytest.approx(1.0, abs=0.1)
    with pytest.raises(ValueError, match="optimizer"):
        G.equilibrium_prediction("lion", 0.1, 0.1)


def test_bad_inputs_are_named():
    chain = G.make_toy_chain(seed=0, samples=64)
    with pytest.raises(ValueError, match="norms"):
        G.effective_lr_scan(chain, "W1", [])
    with pytest.raises(ValueError, match="scaled"):
        G.effective_lr_scan(chain, "W3", [1.0])
    with pytest.raises(ValueError, match="weight_decay"):
        G.weight_decay_as_schedule(chain, lr=0.1, weight_decay=0.0)


def test_gain_sensitivity_on_a_tiny_gpt():
    torch.manual_seed(0)
    model = GPT(GPTConfig(context=8, width=16, depth=2, heads=2))
    before = {n: m.weight.detach().clone() for n, m in model.norms()}
    x = torch.randint(0, 256, (2, 8))
    frame = G.gain_sensitivity(model, [(x, x)], [0.5, 1.0, 3.0])
    assert set(frame["location"]) == {"attention input", "MLP input", "final"}
    assert frame[frame["factor"] == 1.0]["delta_loss"].abs().max() < 1e-6
    assert frame[frame["factor"] == 3.0]["delta_loss"].abs().max() > 1e-4  # pre-LN gains are not scale invariant
    for name, module in model.norms():  # gains restored
        assert torch.equal(module.weight, before[name])
    assert all(v == pytest.approx(1.0) for v in G.gain_rms(model).values())


def test_post_ln_locations_are_named_by_the_trunk():
    model = GPT(GPTConfig(context=8, width=16, depth=2, heads=2, placement="post"))
    locations = G.norm_locations(model)
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
    table = G.rescale_symmetry(model, [_batch()], [0.3, 3.0])
    assert table["delta_loss_rescaled_pair"].abs().max() < 1e-12
    # The gain alone is not scale invariant in pre-LN: the same factors move the loss.
    assert table["delta_loss_gain_alone"].abs().min() > 1e-4


def test_following_linears_cover_every_norm_and_refuse_post_ln():
    model = _tiny_pre_ln()
    pairs = G.following_linears(model)
    assert set(pairs) == {name for name, _ in model.norms()}
    assert pairs["final_norm"] == [model.lm_head] and pairs["blocks.1.norm1"] == [model.blocks[1].attn.qkv]
    torch.manual_seed(0)
    with pytest.raises(ValueError, match="pre-LN"):
        G.following_linears(GPT(GPTConfig(context=8, width=16, depth=1, heads=2, placement="post")))


def test_effective_update_scales_as_derived():
    # W's gradient scales as a and g's as 1/a: SGD's W-part goes as a^2 and g-part as a^-2; Adam's as a and 1/a.
    model, batch = _tiny_pre_ln(), _batch()
    factors = [1.0, 2.0, 4.0]
    sgd = G.effective_update(model, batch, factors, optimizer="sgd", lr=1e-3)
    adam = G.effective_update(model, batch, factors, optimizer="adam", lr=1e-4)
    assert G.fit_power_law(sgd.factor, sgd.via_W) == pytest.approx(2.0, abs=0.02)
    assert G.fit_power_law(sgd.factor, sgd.via_g) == pytest.approx(-2.0, abs=0.02)
    assert G.fit_power_law(adam.factor, adam.via_W) == pytest.approx(1.0, abs=0.02)
    assert G.fit_power_law(adam.factor, adam.via_g) == pytest.approx(-1.0, abs=0.02)
    with pytest.raises(ValueError, match="optimizer"):
        G.effective_update(model, batch, factors, optimizer="lion")
