"""Did each arm train? in the quality and depth chapters: the arms each verdict reads (`ArmLosses`), the rule
`Results.record` applies to them (an untrained arm makes the verdict not testable here, except B17's runs without
warm-up, whose failure the design registers as its answer), and the sentences issue 55 asked of V8 and B16."""

from __future__ import annotations

import math
from dataclasses import replace

import pandas as pd
import pytest

from normlab.analysis.depth import final_norm as fn
from normlab.analysis.depth import training_at_depth
from normlab.analysis.quality import extra_dimension, loss_parity, residual_stream
from normlab.analysis.shared import confirmation
from normlab.analysis.shared.arms import arms_table
from normlab.study import design
from normlab.study.results import Results
from test_findings_quality import EQUAL, GEOMETRY_OK, MARGIN, REAL_USES, RESUME, UNUSED, stream_tables

ENTROPY = 3.1122  # the cpu corpus's byte frequencies' entropy (build 2fea7bb)
MINIMUM = design.value("A9", "trained_minimum")


def _a9(entropy: float):
    parity = loss_parity.loss_parity(EQUAL, MARGIN)  # final losses 2.0-2.2, step 0 at 5.5
    common = {"steps": 20, "pairs": 3}
    finding = loss_parity.a9_finding(parity, MARGIN, common, RESUME)
    arms = loss_parity.arm_losses(parity, entropy, "width 32, depth 2, 20 steps")
    return finding, arms


def test_quality_arms_are_each_norm_s_mean_final_and_step_0_loss():
    _, arms = _a9(ENTROPY)
    assert arms.final["layer"] == pytest.approx(2.1) and arms.final["rms"] == pytest.approx((2.001 + 2.101 + 2.2) / 3)
    assert arms.initial == {"layer": 5.5, "rms": 5.5}
    assert arms.name("rms") == "RMSNorm" and not arms.untrained(MINIMUM)
    table = arms_table(arms, MINIMUM)
    assert list(table["arm"]) == ["LayerNorm", "RMSNorm"] and table["trained"].all()


def test_an_untrained_arm_makes_a_quality_verdict_not_testable(tmp_path):
    finding, arms = _a9(ENTROPY)
    assert finding.verdict == "holds"
    results = Results("quality", "smoke", tmp_path)
    kept = results.record("A9", replace(finding, arms=arms), "quality-parity")
    assert kept["verdict"] == "holds" and kept["evidence"]["arms_trained"]["arms"]["RMSNorm"]["trained"]
    # the same runs against a text whose entropy lies within the minimum of their losses: neither norm trained
    _, short = _a9(2.2)
    results = Results("quality", "smoke", tmp_path)
    judged = results.record("A9", replace(finding, arms=short), "quality-parity")
    assert judged["verdict"] == "not testable here"
    assert judged["summary"].startswith("Not a verdict on the norm: 2 of its 2 arms did not train")
    assert "ended at 2.1000 nats per byte" in judged["summary"]
    with pytest.raises(ValueError, match="claim B16 trains models"):
        Results("quality", "smoke", tmp_path).record("B16", finding, "quality-b16")  # no arms: refused


def test_b16_summary_says_what_our_interval_shows_and_names_smollm2_as_the_use():
    unused = residual_stream.offset_measures(stream_tables(0.5, UNUSED), depth=2, margin=MARGIN)
    drift = extra_dimension.write_mean_drift(stream_tables(0.5, UNUSED).drift)
    b16 = extra_dimension.b16_finding(
        unused, drift, REAL_USES, GEOMETRY_OK, margin=MARGIN, correlation=0.3, sign_share=0.75
    )
    assert b16.verdict == "holds"  # the registered combining rule counts SmolLM2's use
    assert "training uses it" not in b16.summary and "they use it" not in b16.summary
    assert "SmolLM2-135M (not trained here) uses it" in b16.summary
    assert b16.evidence["used_by"] == "SmolLM2"
    assert any("A9's pilot runs" in caveat for caveat in b16.caveats)  # the look before the confirmation


def _v8_runs(losses: dict[str, float], seeds=(0, 1)) -> pd.DataFrame:
    return pd.DataFrame(
        [
            dict(seed=s, arm=arm, final_val_loss=loss, initial_val_loss=5.5, diverged=False)
            for s in seeds
            for arm, loss in losses.items()
        ]
    )


def _v8_finding(**options):
    rows = []
    for seed in range(4):
        for arm, loss, logits in (
            (fn.ALL, 2.0, 4.0),
            (fn.BLOCKS_REMOVED, 2.0 + seed / 1000, 4.0),
            (fn.FINAL_REMOVED, 2.2, 8.0 + seed / 10),
        ):
            rows.append(dict(seed=seed, arm=arm, val_loss=loss, hidden_rms=1.0, trunk_rms=1.0, logit_rms=logits))
    measures = fn.v8_measures(pd.DataFrame(rows), margin=0.03, logit_ratio=1.5)
    return fn.v8_finding(measures, margin=0.03, logit_ratio=1.5, scale="tiny", trainer="compiled", **options)


def test_an_untrained_arm_makes_v8_not_testable(tmp_path):
    finding = _v8_finding()
    assert finding.verdict == "holds with caveats"
    trained = fn.v8_arms(_v8_runs({fn.ALL: 2.0, fn.BLOCKS_REMOVED: 2.05, fn.FINAL_REMOVED: 2.2}), ENTROPY, "tiny")
    record = Results("depth", "smoke", tmp_path).record("V8", replace(finding, arms=trained))
    assert record["verdict"] == "holds with caveats"
    stalled = fn.v8_arms(_v8_runs({fn.ALL: 2.0, fn.BLOCKS_REMOVED: 3.0, fn.FINAL_REMOVED: 2.2}), ENTROPY, "tiny")
    record = Results("depth", "smoke", tmp_path).record("V8", replace(finding, arms=stalled))
    assert record["verdict"] == "not testable here"
    assert record["summary"].startswith("Not a verdict on the norm: block norms removed did not train (tiny).")
    assert "It ended at 3.0000 nats per byte" in record["summary"]
    diverged = _v8_runs({fn.ALL: 2.0, fn.BLOCKS_REMOVED: math.nan, fn.FINAL_REMOVED: 2.2})
    assert fn.v8_arms(diverged, ENTROPY, "tiny").untrained(MINIMUM) == [fn.BLOCKS_REMOVED]


def test_v8_names_removal_from_step_0_first_and_says_its_sizing_made_undecided_likely():
    finding = _v8_finding(confirmation=confirmation.registered("V8", "smoke"))
    first = finding.summary.split(". ")[0]
    assert "removed from step 0" in first and "not tapered during training, as the source does" in first
    assert fn.v8_paragraph(finding).startswith(f"**V8: {finding.verdict}.** Removing the block norms from step 0")
    sizing = next(c for c in finding.caveats if "sized for a true difference of 0" in c)
    assert "+0.038 and +0.060 nats per byte" in sizing and "an undecided result was the likely outcome" in sizing
    assert any("seeds 900-902" in c for c in finding.caveats)  # the look before the registration
    assert any("from step 0 rather than tapered" in c for c in finding.caveats)


def _depth_rows(config_losses: dict[str, float], label="paired", lr=None):
    rows = []
    for config, loss in config_losses.items():
        placement, norm = config.split("-")
        for seed in (0, 1):
            rows.append(
                dict(
                    config=config,
                    placement=placement,
                    norm=norm,
                    seed=seed,
                    lr=lr,
                    label=label,
                    final_val_loss=loss,
                    initial_val_loss=5.5,
                )
            )
    return pd.DataFrame(rows)


class _Training:
    def __init__(self, paired, no_warmup):
        self.paired, self.no_warmup = paired, no_warmup


def _b17_arms(pre: float, post_no_warmup: float):
    training = _Training(
        _depth_rows({"pre-rms": pre, "post-rms": 2.3}),
        pd.concat(
            [
                _depth_rows({"pre-rms": 2.4}, "no warm-up", 0.01),
                _depth_rows({"post-rms": post_no_warmup}, "no warm-up", 0.01),
            ]
        ),
    )
    nowarm, names = training_at_depth.no_warmup_arms(training)
    return training_at_depth.arm_losses(
        {**training_at_depth.paired_arms(training, ["pre-rms", "post-rms"]), **nowarm},
        ENTROPY,
        "depth 12, width 32, 300 steps",
        {**training_at_depth.CONFIG_NAMES, **names},
        answers=nowarm,
    )


def _b17_finding():
    from normlab.study.findings import Finding

    return Finding(
        "holds with caveats",
        "Pre-LN per-block gradient norms differ by at most ×1.3.",
        {},
        1.3,
        10.0,
        0.04,
        "largest ratio",
        "factor",
    )


def test_b17_a_run_without_warm_up_that_fails_is_its_answer_a_paired_arm_that_fails_is_not(tmp_path):
    assert design.load().claim("B17").untrained_answers  # registered, with its [[change]] entry
    finding = _b17_finding()
    answered = Results("depth", "smoke", tmp_path).record("B17", replace(finding, arms=_b17_arms(2.3, 3.2)))
    assert answered["verdict"] == "holds with caveats"
    assert answered["summary"].startswith("Post-LN RMSNorm without warm-up at lr 0.01 did not train")
    assert "It ended at 3.2000 nats per byte" in answered["summary"]
    failed = Results("depth", "smoke", tmp_path).record("B17", replace(finding, arms=_b17_arms(3.0, 3.2)))
    assert failed["verdict"] == "not testable here"
    assert failed["summary"].startswith("Not a verdict on the norm: ") and "ended at 3.0000" in failed["summary"]


def test_a_run_counts_as_trained_only_the_registered_minimum_below_the_entropy():
    out = {"final_val_loss": 3.0, "initial_val_loss": 5.5, "diverged": False, "final_drop": 0.0, "steps_done": 10}
    assert training_at_depth.job_outcome(out, ENTROPY)["trained"]  # below the entropy: the old line
    assert not training_at_depth.job_outcome(out, ENTROPY, MINIMUM)["trained"]  # not 0.25 below it
