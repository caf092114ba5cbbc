"""The landscape chapter's measures: LR ranges, hidden growth, drop-one contributions, the probed training job."""

import math

import pytest
import torch

from normlab.analysis.landscape.probes import max_attention_logit
from normlab.analysis.landscape.runs import drop_one_losses, landscape_run, submission_order
from normlab.analysis.landscape.summaries import (
    growth_ratio,
    later_half_share,
    non_inferiority,
    usable_flags,
    usable_lr_range,
)
from normlab.analysis.shared.paired import paired_or_none
from normlab.gpt.model import GPT, GPTConfig

pytestmark = pytest.mark.usefixtures("one_thread")


def test_usable_lr_range_is_the_contiguous_run_from_the_lowest_usable():
    r = usable_lr_range([1e-3, 3e-3, 1e-2, 3e-2, 1e-1], [False, True, True, False, True])
    assert r["lr_low"] == 3e-3 and r["lr_high"] == 1e-2 and r["fails_at"] == 3e-2
    assert r["decades"] == pytest.approx(math.log10(1e-2 / 3e-3)) and r["fraction_trained"] == 0.6
    everything = usable_lr_range([1e-2, 1e-3], [True, True])  # unsorted input
    assert everything["lr_low"] == 1e-3 and everything["lr_high"] == 1e-2 and everything["fails_at"] is None
    nothing = usable_lr_range([1e-3, 1e-2], [False, False])
    assert nothing["lr_low"] is None and nothing["fails_at"] == 1e-3 and nothing["fraction_trained"] == 0
    with pytest.raises(ValueError, match="one trained flag per learning rate"):
        usable_lr_range([1e-3], [True, False])


def test_usable_flags():
    assert usable_flags([1.0, 1.2, 1.3, math.nan], [False, False, False, True], best=1.0, tolerance=0.25) == [
        True,
        True,
        False,
        False,
    ]
    with pytest.raises(ValueError, match="tolerance"):
        usable_flags([1.0], [False], 1.0, 0)


def test_growth_ratio_and_later_half_share():
    stream = [(0, 0, 0.1), (0, 1, 1.0), (0, 2, 1.0), (10, 0, 0.1), (10, 1, 2.0), (10, 2, 3.0), (10, 3, 8.0)]
    assert growth_ratio(stream) == 4.0 and growth_ratio(stream, step=0) == 1.0
    with pytest.raises(ValueError, match="no stream"):
        growth_ratio([])
    assert later_half_share([3.0, 1.0, 0.5, 0.5]) == pytest.approx(0.2)
    assert later_half_share([1.0, -5.0, 1.0, 0.0]) == pytest.approx(0.5)  # a harmful block counts as zero
    assert math.isnan(later_half_share([0.0, -1.0]))


def test_non_inferiority_reads_the_interval_against_the_margin():
    assert non_inferiority(paired_or_none([1.0, 1.1, 1.2], [1.0, 1.1, 1.2], 0.03)) == "no worse"
    assert non_inferiority(paired_or_none([1.0, 1.1, 1.2], [1.5, 1.6, 1.71], 0.03)) == "worse"
    assert non_inferiority(paired_or_none([1.0, 1.1, 1.2], [1.0, 1.3, 1.1], 0.03)) == "undecided"
    assert paired_or_none([1.0, math.nan], [1.0, 1.0], 0.03) is None and non_inferiority(None) == "undecided"


def test_drop_one_and_max_logit_probes():
    torch.manual_seed(0)
    model = GPT(GPTConfig(width=32, depth=3, heads=4, context=16))
    x = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    assert max_attention_logit(model, x) > 0
    changes = drop_one_losses(model, [(x, x)])
    assert len(changes) == 3 and all(math.isfinite(c) for c in changes)
    with torch.no_grad():
        full = float(model(x, x)[1])
        model.blocks[1].forward = lambda h: h  # the same as dropping block 1 by hand
        dropped = float(model(x, x)[1])
    assert changes[1] == pytest.approx(dropped - full, abs=1e-6)


def test_probed_run_equals_unprobed_run():
    model = dict(width=16, depth=2, heads=2, context=16)
    train = dict(steps=10, batch_size=4, warmup_steps=2, eval_every=2, stream_every=5, lr=1e-2)
    probed = landscape_run(model=model, train=train, probe_every=3, drop_one=True)
    plain = landscape_run(model=model, train=train)
    assert probed["val"] == plain["val"] and probed["grad_norms"] == plain["grad_norms"]
    assert [p["step"] for p in probed["max_logit"]] == [0, 3, 6, 9, 10]
    assert len(probed["drop_one"]) == 2 and plain["drop_one"] is None
    assert len(probed["grad_norms"][0]) == 2 and {layer for _, layer, _ in probed["stream_rms"]} == {0, 1, 2}


def test_runs_start_deepest_first_and_each_model_once_before_any_repeat():
    def job(scale, norm, seed):
        return dict(model={"norm": norm, "depth": 2}, tag={"scale": scale, "seed": seed})

    jobs = [job("small", "rms", 0), job("small", "rms", 1), job("small", "dyt", 0), job("deepest", "rms", 0)]
    jobs += [job("small", "dyt", 1), job("small", "derf", 0)]
    order = submission_order(jobs)
    assert sorted(order) == list(range(len(jobs)))
    assert order[0] == 3  # the deepest scale first
    # then the first run of each small model (rms, dyt, derf), before the second of rms or dyt
    assert order[1:4] == [0, 2, 5] and order[4:] == [1, 4]


def test_block_gradient_scale_is_the_mean_absolute_gradient_of_the_block_matrices():
    from normlab.analysis.landscape.probes import block_gradient_scale

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=256, context=16, width=16, depth=2, heads=2, norm="dyt"))
    x = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    model.double()
    model(x, x)[1].backward()
    matrices = [p for n, p in model.named_parameters() if n.startswith("blocks.") and p.dim() >= 2]
    want = sum(float(p.grad.abs().sum()) for p in matrices) / sum(p.numel() for p in matrices)
    assert block_gradient_scale(model, x, x) == pytest.approx(want, rel=1e-12)
    # Scaling DyT's input (the recipe's embedding scale) must raise what reaches the blocks.
    scaled = block_gradient_scale(model, x, x)
    with torch.no_grad():
        model.embedding_scale.mul_(4.0)
    assert block_gradient_scale(model, x, x) > scaled


def test_dyt_saturation_finds_dead_and_live_layers():
    from normlab.analysis.landscape.probes import dyt_saturation

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=256, context=16, width=32, depth=2, heads=4, norm="dyt"))
    x = torch.randint(0, 256, (2, 16))
    live = dyt_saturation(model, x, x)
    assert max(live["saturated_share"].values()) == 0.0 and live["block_gradient"] > 0
    with torch.no_grad():
        for _, norm in model.norms():
            norm.alpha.fill_(1e6)  # every input far out on tanh's flat tails
    dead = dyt_saturation(model, x, x)
    assert dead["saturated_share"]["final_norm"] > 0.99 and dead["block_gradient"] == 0.0
    with pytest.raises(ValueError, match="DyT"):
        dyt_saturation(GPT(GPTConfig(vocab_size=256, context=16, width=32, depth=2, heads=4)), x, x)


def test_traced_dyt_run_equals_the_untraced_run_and_logs_every_probe():
    model = dict(width=16, depth=2, heads=2, context=16, norm="dyt", dyt_bias=False, dyt_alpha_attention=0.8)
    train = dict(steps=6, batch_size=4, warmup_steps=1, eval_every=3, stream_every=3, lr=1e-2, weight_decay_on="all")
    traced = landscape_run(model=model, train=train, probe_every=3, trace_dyt=True)
    plain = landscape_run(model=model, train=train)
    assert traced["val"] == plain["val"] and traced["grad_norms"] == plain["grad_norms"] and plain["dyt_trace"] == []
    trace = traced["dyt_trace"]
    assert [p["step"] for p in trace] == [0, 3, 6]
    assert trace[0]["alpha"] == pytest.approx(
        {"blocks.0.norm1": 0.8, "blocks.0.norm2": 0.5, "blocks.1.norm1": 0.8, "blocks.1.norm2": 0.5, "final_norm": 0.5}
    )
    assert trace[-1]["alpha"] != trace[0]["alpha"]  # α learns
    assert all(p["final_hidden_rms"] > 0 and p["block_gradient"] > 0 for p in trace)
    assert list(trace[0]["saturated_share"]) == list(trace[0]["alpha"])
    with pytest.raises(ValueError, match="probe_every"):
        landscape_run(model=model, train=train, trace_dyt=True)


def test_dyt_trace_point_reads_the_final_norms_input():
    from normlab.analysis.landscape.probes import dyt_trace_point, saturated_share

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=256, context=16, width=32, depth=2, heads=4, norm="dyt", final_norm_kind="rms"))
    x = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    with model.capture_residual_stream() as stream, torch.no_grad():
        model(x)
    want = float(stream[-1].double().pow(2).mean().sqrt())
    point = dyt_trace_point(model, x, x)
    assert point["final_hidden_rms"] == pytest.approx(want, rel=1e-12)
    assert "final_norm" not in point["alpha"] and len(point["alpha"]) == 4  # the final norm is RMSNorm here
    assert saturated_share(torch.tensor([1.0]), torch.tensor([0.0, 1.0, 50.0, -50.0])) == 0.5
    with pytest.raises(ValueError, match="final norm"):
        dyt_trace_point(GPT(GPTConfig(vocab_size=256, context=16, width=32, depth=2, heads=4, norm="dyt",
                                      placement="post")), x, x)  # fmt: skip
