"""Helpers the training chapters judge with: equivalence verdicts, timing ratios, stream outliers, run summaries."""

import math
from types import SimpleNamespace

import pytest
import torch

from normlab.analysis.depth.training_at_depth import job_outcome
from normlab.analysis.shared.paired import (
    NOT_COMPARABLE,
    interval_text,
    paired_difference,
    paired_or_none,
    resolvable_margin,
)
from normlab.analysis.shared.parity import equivalence_verdict, ratio_with_spread
from normlab.analysis.shared.runs import flat_eval_every
from normlab.analysis.shared.sequential import sequence_difference
from normlab.analysis.shared.stream import find_numbers
from normlab.gpt.residual_stream import layer_statistics, outlier_statistics
from normlab.gpt.run_record import diverged, final_drop, run_record
from normlab.study.findings import Finding


def test_equivalence_verdict_follows_the_interval():
    inside = paired_difference([1.0, 1.1, 1.2, 1.3, 1.4], [1.001, 1.102, 1.199, 1.301, 1.402], margin=0.02)
    assert equivalence_verdict(inside) == "holds"
    outside = paired_difference([1.0, 1.1, 1.2, 1.3, 1.4], [1.2, 1.31, 1.39, 1.5, 1.6], margin=0.02)
    assert equivalence_verdict(outside) == "does not hold"
    wide = paired_difference([1.0, 1.1, 1.2, 1.3, 1.4], [1.1, 1.0, 1.3, 1.2, 1.45], margin=0.02)
    assert equivalence_verdict(wide) == "not testable here"
    assert "pairs" in interval_text(wide, "nats") and "margin ±0.02" in interval_text(inside, "nats")


def test_ratio_with_spread_is_the_median_of_paired_ratios():
    out = ratio_with_spread([2.0, 2.2, 1.8, 2.0, 2.1], [1.0, 1.0, 1.0, 1.0, 1.0])
    assert out["ratio"] == pytest.approx(2.0) and out["spread"] > 0 and out["repeats"] == 5
    assert ratio_with_spread([1.0] * 4, [2.0] * 4)["spread"] == 0.0
    with pytest.raises(ValueError, match="paired repeats"):
        ratio_with_spread([1.0, 2.0], [1.0, 2.0, 3.0])


def test_outliers_are_measured_apart_from_the_common_offset():
    torch.manual_seed(0)
    x = torch.randn(400, 32, dtype=torch.float64)
    x[:, 5] += 40.0  # one massive channel carries the whole common offset
    stats = outlier_statistics(x)
    assert stats["top_channel"] == 5 and stats["top_channel_share"] > 0.9
    assert stats["offset_share_without_top"] < 0.05  # without it, the rest has no shared offset
    assert layer_statistics(x)["offset_share"] > 0.9
    # The all-ones share is a different thing: centring a token removes its mean, not a shared channel.
    y = torch.randn(400, 32, dtype=torch.float64)
    y = y - y.mean(dim=0) + 3.0  # every channel offset by the same constant: all along the all-ones direction
    assert layer_statistics(y)["ones_share"] > 0.85 and outlier_statistics(y)["top_channel_share"] < 0.1


def test_final_drop_reads_the_evaluation_at_ninety_percent():
    assert flat_eval_every(300) == 30
    with pytest.raises(ValueError, match="multiple of 10"):
        flat_eval_every(25)
    assert final_drop([(0, 5.0), (90, 2.05), (100, 2.0)], 100) == pytest.approx(0.05)
    assert math.isnan(final_drop([(0, 5.0), (100, 2.0)], 100))


def test_diverged_has_one_meaning():
    assert not diverged(False, [5.5, 2.0])
    assert diverged(True, [5.5, 2.0])  # training stopped on a non-finite loss or gradient
    assert diverged(False, [5.5, math.inf])  # the final loss overflowed
    assert diverged(False, [5.5, 6.0])  # it ended worse than it started, without overflowing
    assert not diverged(False, [5.5, 5.5]) and not diverged(False, [])


def fake_result(losses, *, stopped=False, steps=10):
    rows = [{"step": steps * i // (len(losses) - 1), "val_loss": v} for i, v in enumerate(losses)]
    return SimpleNamespace(
        val_rows=rows, diverged=stopped, steps_done=steps, train_config={"steps": steps}, corpus_sha256="abc"
    )


def test_run_record_applies_the_rule_and_drops_nothing_the_readers_need():
    record = run_record(fake_result([5.5, *[3.0] * 8, 2.1, 2.0]))
    assert record["diverged"] is False and record["final_drop"] == pytest.approx(0.1)
    assert record["final_val_loss"] == 2.0 and record["initial_val_loss"] == 5.5 and record["val"][-1] == (10, 2.0)
    worse = run_record(fake_result([5.5, *[3.0] * 8, 5.0, 6.0]))
    assert worse["diverged"] is True and math.isnan(worse["final_drop"])


def test_job_outcome_reads_divergence_from_the_record_and_adds_training():
    out = {**run_record(fake_result([5.5, 2.0])), "final_drop": 0.1}
    assert job_outcome(out, 3.0)["trained"] and not job_outcome(out, 3.0)["diverged"]
    assert not job_outcome(out, 1.0)["trained"]
    assert job_outcome(run_record(fake_result([5.5, 6.0])), 3.0)["diverged"]


def test_find_numbers_walks_nested_evidence():
    evidence = {"smollm2": {"offset_share_last": 0.4, "note": "x"}, "offset_share_first": float("nan"), "other": 1}
    assert find_numbers(evidence, "offset_share") == {"smollm2.offset_share_last": 0.4}
    assert find_numbers(None, "offset_share") == {}


def test_deepest_value_reads_per_layer_lists_and_scalars():
    from normlab.analysis.shared.stream import deepest_value

    evidence = {"shared_mean_share_by_layer": [0.1, 0.3, float("nan")], "offset_share_last": 0.2}
    assert deepest_value(evidence, "shared_mean_share_by_layer", "offset_share_last") == (
        "shared_mean_share_by_layer",
        0.3,
    )
    assert deepest_value({"offset_share_last": 0.2}, "shared_mean_share_by_layer", "offset_share_last") == (
        "offset_share_last",
        0.2,
    )
    assert deepest_value({}, "x") is None and deepest_value(None, "x") is None


def test_paired_or_none_has_one_rule_for_a_comparison_that_cannot_be_made():
    assert paired_or_none([2.0, math.nan], [2.0, 2.0], 0.02) is None  # a run diverged
    assert paired_or_none([2.0], [2.1], 0.02) is None  # one pair measures no spread
    assert paired_or_none([2.0, 2.1], [2.0, 2.1], 0.02)["outcome"] == "equivalent"
    with pytest.raises(ValueError, match="same number of runs on each side, got 2 and 3"):
        paired_or_none([2.0, 2.1], [2.0, 2.1, 2.2], 0.02)


def test_interval_text_is_one_format_with_or_without_the_margin_reading():
    wide = paired_difference([1.0, 1.1, 1.2, 1.3, 1.4], [1.1, 1.0, 1.3, 1.2, 1.45], margin=0.02)
    full, bare = interval_text(wide, "nats"), interval_text(wide, "nats", margin=False)
    assert full.startswith(bare.removesuffix(", 5 pairs)")) and "margin ±0.02, finest margin at 90% power ±" in full
    finest = resolvable_margin(wide)  # what these 5 pairs at this spread could decide: far wider than ±0.02
    assert finest > 0.02 and f"±{finest:.3g}, 5 pairs)" in full
    assert (
        "undecided at these pairs" in full
        and "needed" not in full
        and bare == "+0.0100 nats (95% CI -0.1172..+0.1372, 5 pairs)"
    )
    assert interval_text(None, "nats per byte") == NOT_COMPARABLE


def test_interval_text_reads_an_unbounded_sequence_before_and_after_json():
    # three pairs: the confidence sequence is still infinite; a finding's evidence holds its ends as None
    unbounded = sequence_difference([1.0, 1.1, 1.2], [1.001, 1.101, 1.2], margin=0.02)
    recorded = Finding("not testable here", "", {"pair": unbounded}).evidence["pair"]
    assert recorded["ci_low"] is None and recorded["ci_high"] is None
    for paired in (unbounded, recorded):
        text = interval_text(paired, "nats per byte")
        assert "95% confidence sequence not yet bounded" in text and "3 pairs" in text
