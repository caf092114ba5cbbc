"""V6 (landscape chapter), as Verma ran it: Verma's saturated share against a float64 count, the jobs paired by seed,
the same steps on training sets of several sizes, differing only in the norm (and the MLP only where registered), the
sizes' checks against Verma's passes, the verdict by the registered rule on made-up runs, and the record: the sets'
sizes, the passes over each and the steps, and an arm that did not train leaving V6 not testable here."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from normlab.analysis.landscape import method, regime, runs
from normlab.analysis.landscape.probes import bounded_share
from normlab.analysis.landscape.profiles import (
    REGIME_SEED_BASE,
    VERMA_PASSES,
    check_regime_sizes,
    profile_settings,
    regime_passes,
)
from normlab.gpt.corpus import load_corpus
from normlab.gpt.model import GPT, GPTConfig
from normlab.norms.dyt import DyT
from normlab.study import Results

MARGIN = 0.03
BOUND = 2.0
ENTROPY = 3.0  # made-up runs end at 2.0 nats per byte or so: trained


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


def test_regime_jobs_train_the_same_steps_on_each_set_paired_by_seed_differing_only_in_the_norm_and_mlp():
    settings = profile_settings("smoke")
    jobs = runs.regime_jobs(settings, BOUND)
    sizes = settings["regime_sizes"]
    assert len(jobs) == 2 * settings["regime_seeds"] * (len(sizes) + 1)
    assert jobs[0]["tag"]["train_bytes"] == sizes[-1]  # the largest set first
    seeds = {j["tag"]["seed"] for j in jobs}
    assert seeds == set(range(REGIME_SEED_BASE, REGIME_SEED_BASE + settings["regime_seeds"]))
    assert {j["train"]["steps"] for j in jobs} == {settings["regime_steps"]}  # a fixed number of steps
    by_key = {(j["tag"]["train_bytes"], j["tag"]["mlp"], j["tag"]["seed"], j["tag"]["label"]): j for j in jobs}
    assert {mlp for (size, mlp, *_rest) in by_key if size != sizes[-1]} == {"swiglu"}
    for (size, mlp, seed, label), job in by_key.items():
        assert job["train_bytes"] == size
        if label != "v6-dyt":
            continue
        rms = by_key[(size, mlp, seed, "v6-rms")]
        assert job["train"] == rms["train"] and job["model"]["mlp"] == rms["model"]["mlp"] == mlp
        differing = {k for k in {**job["model"], **rms["model"]} if job["model"].get(k) != rms["model"].get(k)}
        assert differing <= {"norm", "dyt_bias", "dyt_alpha", "embedding_scale"}
        # Verma's DyT: α₀ 2 in every norm, the final one included, no β, no embedding scale
        assert job["model"]["dyt_alpha"] == 2.0 and job["model"]["dyt_bias"] is False
        assert job["model"]["embedding_scale"] is False and "final_norm_kind" not in job["model"]
        assert job["saturation_bound"] == BOUND and rms["saturation_bound"] is None
        # nanoGPT's AdamW, Verma's warm-up share and a constant rate after it
        assert job["train"]["weight_decay_on"] == "matrices" and job["train"]["min_lr_ratio"] == 1.0
        assert job["train"]["warmup_steps"] == round(0.4 * settings["regime_steps"])
        assert job["train"]["step"] == settings["regime_step"]


def test_regime_sizes_give_verma_s_passes_outside_smoke():
    cpu = profile_settings("cpu")
    passes = [regime_passes(cpu["regime_steps"], 16, 64, size) for size in cpu["regime_sizes"]]
    assert passes == pytest.approx(list(VERMA_PASSES), rel=0.05)
    assert passes[0] > 100 and passes[-1] < 2  # the small set passed over many times, the large about once
    check_regime_sizes("cpu", [750, 7_500, 88_000], 120, 16, 64)
    with pytest.raises(ValueError, match="not Verma's"):
        check_regime_sizes("cpu", [750, 7_500, 30_000], 120, 16, 64)
    with pytest.raises(ValueError, match="increasing"):
        check_regime_sizes("cpu", [7_500, 750, 88_000], 120, 16, 64)
    with pytest.raises(ValueError, match="at least a window"):
        check_regime_sizes("smoke", [10, 160, 1000], 20, 4, 16)
    check_regime_sizes("smoke", [40, 160, 1000], 20, 4, 16)  # smoke proves the pipeline, not the passes


def test_training_prefix_cuts_the_training_split_alone():
    corpus = load_corpus()
    prefix = runs.training_prefix(corpus, 750)
    assert prefix.train.numel() == 750 and bool((prefix.train == corpus.train[:750]).all())
    assert prefix.val is corpus.val and prefix.sha256 == corpus.sha256
    assert prefix.unigram_entropy_nats == corpus.unigram_entropy_nats
    with pytest.raises(ValueError, match="between 1 and"):
        runs.training_prefix(corpus, 0)


def _runs(diffs: dict[tuple[int, str], list[float]], shares: float = 0.3, base: float = 2.0) -> list[dict]:
    """Made-up runs of 20 steps: RMSNorm at `base` nats per byte, DyT at `base` + the cell's difference, per seed; a
    cell is (training-set bytes, MLP)."""
    model = dict(width=16, depth=1, heads=2, context=8)
    out = []
    for (size, mlp), ds in diffs.items():
        for i, d in enumerate(ds):
            for label, loss in (("v6-rms", base), ("v6-dyt", base + d)):
                tag = dict(label=label, seed=REGIME_SEED_BASE + i, steps=20, train_bytes=size, mlp=mlp, batch_size=4)
                out.append(dict(tag=tag, model=model, train=dict(step="compiled", batch_size=4, lr=1e-2),
                                final_val_loss=loss, initial_val_loss=5.5, diverged=False,
                                saturated_share=shares if label == "v6-dyt" else None))  # fmt: skip
    return out


def _noisy(centre: float, rng) -> list[float]:
    return list(centre + rng.normal(0, 0.005, 4))


def test_regime_claim_follows_the_registered_rule():
    rng = np.random.default_rng(random.randrange(10_000))
    small, large = _noisy(0.0, rng), _noisy(0.5, rng)
    holds = regime.regime_claim(
        _runs({(20, "swiglu"): small, (60, "swiglu"): _noisy(0.2, rng), (200, "swiglu"): large,
               (200, "gelu"): [d - 0.3 for d in large]}), MARGIN, BOUND, ENTROPY)  # fmt: skip
    assert holds.verdict == "holds" and holds.evidence["gate_reading"] == "gate matters"
    assert holds.key_number == pytest.approx(np.mean(large) - np.mean(small))
    caveats = regime.regime_claim(
        _runs({(20, "swiglu"): small, (60, "swiglu"): small, (200, "swiglu"): large,
               (200, "gelu"): [d + 0.001 for d in large]}), MARGIN, BOUND, ENTROPY)  # fmt: skip
    assert caveats.verdict == "holds with caveats" and caveats.evidence["gate_reading"] == "no difference"
    flat = regime.regime_claim(
        _runs({(20, "swiglu"): small, (60, "swiglu"): small, (200, "swiglu"): [d + 0.001 for d in small],
               (200, "gelu"): small}), MARGIN, BOUND, ENTROPY)  # fmt: skip
    assert flat.verdict == "does not hold"
    broken = _runs({(20, "swiglu"): small, (60, "swiglu"): small, (200, "swiglu"): large, (200, "gelu"): large})
    broken[0]["diverged"] = True
    assert regime.regime_claim(broken, MARGIN, BOUND, ENTROPY).verdict == "not testable here"
    table = regime.regime_table(holds)
    assert len(table) == 6 and table["DyT saturated share"].iloc[0] == pytest.approx(0.3)


def test_regime_claim_refuses_unpaired_runs():
    made = _runs({(20, "swiglu"): [0.0, 0.1], (200, "swiglu"): [0.2, 0.3], (200, "gelu"): [0.1, 0.2]})
    made[0]["tag"]["seed"] = 999
    with pytest.raises(ValueError, match="paired seed for seed"):
        regime.regime_claim(made, MARGIN, BOUND, ENTROPY)
    no_gelu = _runs({(20, "swiglu"): [0.0, 0.1], (200, "swiglu"): [0.2, 0.3]})
    with pytest.raises(ValueError, match="GELU pair"):
        regime.regime_claim(no_gelu, MARGIN, BOUND, ENTROPY)


def test_fragile_when_an_end_lies_within_the_half_width_of_the_line():
    assert regime.fragile({"ci_low": -0.66, "ci_high": -0.10}, 0.03)
    assert not regime.fragile({"ci_low": -0.30, "ci_high": -0.20}, 0.03)
    assert not regime.fragile(None, 0.03)


def _rising(rng) -> list[dict]:
    large = _noisy(0.5, rng)
    return _runs({(20, "swiglu"): _noisy(0.0, rng), (60, "swiglu"): _noisy(0.2, rng), (200, "swiglu"): large,
                  (200, "gelu"): [d - 0.3 for d in large]})  # fmt: skip


def test_v6_s_record_carries_the_sets_sizes_the_passes_over_each_and_the_steps(tmp_path):
    v6 = regime.regime_claim(_rising(np.random.default_rng(1)), MARGIN, BOUND, ENTROPY)
    results = Results("landscape", "smoke", tmp_path)
    v6 = method.record(v6, results, "V6", "landscape-regime")
    evidence = results.claims[-1]["evidence"]
    assert evidence["sizes"] == [20, 60, 200] and evidence["steps"] == 20
    # 20 steps of 4 windows of 8 bytes: 640 bytes, so 32 passes over 20 bytes and 3.2 over 200
    assert evidence["bytes_trained"] == 640
    assert evidence["passes"] == pytest.approx({"20": 32.0, "60": 640 / 60, "200": 3.2})
    assert set(evidence["bytes_per_parameter"]) == {"20", "60", "200"}
    assert v6.verdict == "holds"  # every arm trained (2.0 and 2.5 against an entropy of 3.0, minimum 0.25)
    arms = evidence["arms_trained"]["arms"]
    # the arms the verdict reads: both norms on the smallest and largest sets, and with GELU (not the middle set)
    assert len(arms) == 6 and all(a["trained"] for a in arms.values())
    assert "RMSNorm on 20 bytes" in arms and "DyT on 200 bytes with GELU" in arms and "DyT on 60 bytes" not in arms
    assert len(v6.headline.split()) <= 35
    assert set(method.arms_table({"V6": v6}).columns) >= {"claim", "arm", "final", "entropy", "trained"}


def test_an_arm_that_did_not_train_leaves_v6_not_testable_naming_it(tmp_path):
    # RMSNorm at 2.9 nats per byte, 0.1 below an entropy of 3.0: short of the 0.25 minimum, whatever the intervals say
    v6 = regime.regime_claim(_runs({(20, "swiglu"): [0.0, 0.01, 0.0, 0.01], (200, "swiglu"): [-0.5] * 4,
                                    (200, "gelu"): [-0.8] * 4}, base=2.9), MARGIN, BOUND, ENTROPY)  # fmt: skip
    assert v6.verdict == "does not hold"  # the rule alone
    recorded = method.record(v6, Results("landscape", "smoke", tmp_path), "V6", "landscape-regime")
    assert recorded.verdict == "not testable here"
    assert recorded.summary.startswith("Not a verdict on the norm: ") and " did not train (" in recorded.summary
    assert "ended at 2.9000 nats per byte" in recorded.summary
