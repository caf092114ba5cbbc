"""V6 (landscape chapter): Verma's saturated share against a float64 count, the jobs paired by seed and differing only
in the norm (and the MLP only where registered), the budgets' checks, and the verdict by the registered rule on
made-up runs."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from normlab.analysis.landscape import regime, runs
from normlab.analysis.landscape.probes import bounded_share
from normlab.analysis.landscape.profiles import REGIME_SEED_BASE, check_regime_steps, profile_settings
from normlab.gpt.model import GPT, GPTConfig
from normlab.norms.dyt import DyT

MARGIN = 0.03
BOUND = 2.0


def test_bounded_share_counts_the_inputs_beyond_the_bound_in_float64():
    torch.manual_seed(random.randrange(10_000))
    model = GPT(GPTConfig(width=16, depth=2, heads=2, context=8, norm="dyt", dyt_alpha=0.8))
    x = torch.randint(0, model.cfg.vocab_size, (2, 8))
    seen = []
    hooks = [m.register_forward_hook(lambda mod, i, o: seen.append((mod.alpha.double(), i[0].double())))
             for m in model.modules() if isinstance(m, DyT)]  # fmt: skip
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    beyond = sum(int((a * v).abs().gt(BOUND).sum()) for a, v in seen)
    total = sum(v.numel() for _, v in seen)
    assert bounded_share(model, x, BOUND) == pytest.approx(beyond / total, abs=1e-12)
    assert bounded_share(model, x, 1e-9) > bounded_share(model, x, BOUND)
    with pytest.raises(ValueError, match="DyT layers"):
        bounded_share(GPT(GPTConfig(width=16, depth=1, heads=2, context=8)), x, BOUND)
    with pytest.raises(ValueError, match="must be > 0"):
        bounded_share(model, x, 0.0)


def test_regime_jobs_pair_the_arms_by_seed_and_differ_only_in_the_norm_and_mlp():
    settings = profile_settings("smoke")
    jobs = runs.regime_jobs(settings, BOUND)
    steps = settings["regime_steps"]
    assert len(jobs) == 2 * settings["regime_seeds"] * (len(steps) + 1)
    assert jobs[0]["tag"]["steps"] == steps[-1]  # longest first
    seeds = {j["tag"]["seed"] for j in jobs}
    assert seeds == set(range(REGIME_SEED_BASE, REGIME_SEED_BASE + settings["regime_seeds"]))
    by_key = {(j["tag"]["steps"], j["tag"]["mlp"], j["tag"]["seed"], j["tag"]["label"]): j for j in jobs}
    assert {mlp for (s, mlp, *_rest) in by_key if s != steps[-1]} == {"swiglu"}
    for (s, mlp, seed, label), job in by_key.items():
        if label != "v6-dyt":
            continue
        rms = by_key[(s, mlp, seed, "v6-rms")]
        assert job["train"] == rms["train"] and job["model"]["mlp"] == rms["model"]["mlp"] == mlp
        differing = {k for k in {**job["model"], **rms["model"]} if job["model"].get(k) != rms["model"].get(k)}
        assert differing <= {"norm", "dyt_bias", "dyt_alpha", "dyt_alpha_attention"}
        assert job["saturation_bound"] == BOUND and rms["saturation_bound"] is None
        assert job["train"]["steps"] == s and job["train"]["warmup_steps"] >= 1
        assert job["train"]["step"] == settings["regime_step"]


def test_regime_steps_are_checked():
    check_regime_steps("cpu", [6, 35, 200], 200)
    with pytest.raises(ValueError, match="under the registered"):
        check_regime_steps("cpu", [10, 35, 200], 200)
    with pytest.raises(ValueError, match="end at V1's"):
        check_regime_steps("cpu", [6, 35, 100], 200)
    with pytest.raises(ValueError, match="increasing"):
        check_regime_steps("cpu", [35, 6, 200], 200)
    check_regime_steps("smoke", [2, 6, 20], 20)  # smoke proves the pipeline, not the span


def _runs(diffs: dict[tuple[int, str], list[float]], shares: float = 0.3) -> list[dict]:
    """Made-up runs: RMSNorm at 2.0 nats per byte, DyT at 2.0 + the cell's difference, per seed."""
    model = dict(width=16, depth=1, heads=2, context=8)
    out = []
    for (steps, mlp), ds in diffs.items():
        for i, d in enumerate(ds):
            for label, loss in (("v6-rms", 2.0), ("v6-dyt", 2.0 + d)):
                tag = dict(label=label, seed=REGIME_SEED_BASE + i, steps=steps, mlp=mlp, batch_size=4)
                out.append(dict(tag=tag, model=model, train=dict(step="compiled", batch_size=4, lr=1e-2),
                                final_val_loss=loss, diverged=False,
                                saturated_share=shares if label == "v6-dyt" else None))  # fmt: skip
    return out


def _noisy(centre: float, rng) -> list[float]:
    return list(centre + rng.normal(0, 0.005, 4))


def test_regime_claim_follows_the_registered_rule():
    rng = np.random.default_rng(random.randrange(10_000))
    small, large = _noisy(0.0, rng), _noisy(0.5, rng)
    holds = regime.regime_claim(
        _runs({(2, "swiglu"): small, (6, "swiglu"): _noisy(0.2, rng), (20, "swiglu"): large,
               (20, "gelu"): [d - 0.3 for d in large]}), MARGIN, BOUND)  # fmt: skip
    assert holds.verdict == "holds" and holds.evidence["gate_reading"] == "gate matters"
    assert holds.key_number == pytest.approx(np.mean(large) - np.mean(small))
    caveats = regime.regime_claim(
        _runs({(2, "swiglu"): small, (6, "swiglu"): small, (20, "swiglu"): large,
               (20, "gelu"): [d + 0.001 for d in large]}), MARGIN, BOUND)  # fmt: skip
    assert caveats.verdict == "holds with caveats" and caveats.evidence["gate_reading"] == "no difference"
    flat = regime.regime_claim(
        _runs({(2, "swiglu"): small, (6, "swiglu"): small, (20, "swiglu"): [d + 0.001 for d in small],
               (20, "gelu"): small}), MARGIN, BOUND)  # fmt: skip
    assert flat.verdict == "does not hold"
    broken = _runs({(2, "swiglu"): small, (6, "swiglu"): small, (20, "swiglu"): large, (20, "gelu"): large})
    broken[0]["diverged"] = True
    assert regime.regime_claim(broken, MARGIN, BOUND).verdict == "not testable here"
    table = regime.regime_table(holds)
    assert len(table) == 6 and table["DyT saturated share"].iloc[0] == pytest.approx(0.3)


def test_regime_claim_refuses_unpaired_runs():
    made = _runs({(2, "swiglu"): [0.0, 0.1], (20, "swiglu"): [0.2, 0.3], (20, "gelu"): [0.1, 0.2]})
    made[0]["tag"]["seed"] = 999
    with pytest.raises(ValueError, match="paired seed for seed"):
        regime.regime_claim(made, MARGIN, BOUND)
    no_gelu = _runs({(2, "swiglu"): [0.0, 0.1], (20, "swiglu"): [0.2, 0.3]})
    with pytest.raises(ValueError, match="GELU pair"):
        regime.regime_claim(no_gelu, MARGIN, BOUND)


def test_fragile_when_an_end_lies_within_the_half_width_of_the_line():
    assert regime.fragile({"ci_low": -0.66, "ci_high": -0.10}, 0.03)
    assert not regime.fragile({"ci_low": -0.30, "ci_high": -0.20}, 0.03)
    assert not regime.fragile(None, 0.03)
