"""The opening page's sentences, each written by the chapter that decides its claim, on hand-made findings.

Each chapter writes its headline from the finding it records (key number, threshold, verdict, and for some the
evidence it measured), in the key number's unit; the opening page only prints it (tests/test_opening_page.py).
"""

import pytest

from normlab.analysis.depth.identity_path import B17_KEY, b17_headline
from normlab.analysis.depth.post_ln_decay import B18_KEY, b18_headline
from normlab.analysis.ecosystem.verdicts import B1_KEY, b1_headline
from normlab.analysis.jacobians.update_parts import B12_KEY, b12_headline
from normlab.analysis.quality.loss_parity import A9_KEY, a9_headline
from normlab.analysis.realmodels.centring_verdict import Q4_KEY, q4_headline, q4_scale
from normlab.analysis.realmodels.forward_time import Q5_KEY, q5_headline
from normlab.analysis.speed.memory_bound import Q2_KEY, q2_headline
from normlab.analysis.speed.partial import Q3_KEY, q3_headline
from normlab.runtime.environment import machine_name
from normlab.study.findings import Finding
from normlab.study.results import VERDICTS

WRITERS = {
    "Q2": (Q2_KEY, q2_headline),
    "Q3": (Q3_KEY, q3_headline),
    "A9": (A9_KEY, a9_headline),
    "Q5": (Q5_KEY, q5_headline),
    "B1": (B1_KEY, b1_headline),
    "B12": (B12_KEY, b12_headline),
    "B17": (B17_KEY, b17_headline),
    "B18": (B18_KEY, b18_headline),
}


def finding(claim_id, verdict, key, threshold, spread=None, **evidence):
    return Finding(verdict, "A summary.", evidence, key, threshold, spread, **WRITERS[claim_id][0].fields())


def fused_q2(key, verdict):
    by_run = {
        "Test CPU (2 cores)": {"key_number": 0.001, "where": "this run's Test CPU (2 cores)"},
        "NVIDIA H200 [gpu-bench.json]": {
            "key_number": key,
            "where": "the NVIDIA H200 (gpu-bench.json, commit 12a0522)",
        },
    }
    fused = {"triton": {"median": key, "sd": 0.01, "points": 8}, "compile": {"median": key, "sd": 0.01, "points": 4}}
    return finding("Q2", verdict, key, 0.1, 0.02, decided_on="NVIDIA H200 [gpu-bench.json]", by_run=by_run, fused=fused)


@pytest.mark.parametrize("verdict", VERDICTS)
@pytest.mark.parametrize("claim_id", list(WRITERS))
def test_every_headline_states_its_number_and_threshold_in_their_unit_for_any_verdict(claim_id, verdict):
    key, write = WRITERS[claim_id]
    for number, threshold in ((0.75, 0.5), (0.25, 0.5)):
        sentence = write(finding(claim_id, verdict, number, threshold, 0.01))
        assert key.format(number) in sentence and key.limit(threshold) in sentence
        assert sentence.endswith(".") and "  " not in sentence
    assert write(finding(claim_id, verdict, None, 0.5)) is None  # nothing measured: no sentence
    assert write(finding(claim_id, verdict, 0.5, None)) is None


def test_q2_names_the_machine_and_the_cases_of_each_number():
    q2 = q2_headline(fused_q2(0.059, "holds"))
    # the H200's number stands with the H200, the CPU's with the CPU: no range mixes the two under one machine
    assert q2 == (
        "Once both norms are fused, RMSNorm and LayerNorm differ by 5.9% of LayerNorm's time on the NVIDIA H200 "
        "(gpu-bench.json, commit 12a0522), the median over its 12 fused cases at the training batch, under the 10% this "
        "book counts "
        "as an advantage: not the 10–50% that article A quotes. Beside it, and not deciding: 0.10% on this build's "
        "Test CPU (2 cores)."
    )
    # this build's CPU decides (the GPU run could not test it): the CPU's number is named as the CPU's
    cpu = fused_q2(0.059, "holds")
    cpu.evidence["decided_on"], cpu.key_number = "Test CPU (2 cores)", 0.001
    cpu_first = q2_headline(cpu)
    assert "differ by 0.10% of LayerNorm's time on this build's Test CPU (2 cores), the median over its 12" in cpu_first
    assert cpu_first.endswith("Beside it, and not deciding: 5.9% on the NVIDIA H200 (gpu-bench.json, commit 12a0522).")
    q2 = q2_headline(fused_q2(0.15, "does not hold"))
    assert "differ by 15% of LayerNorm's time" in q2 and "over the 10%" in q2 and "real advantage" in q2


def test_without_a_deciding_gpu_run_the_sentence_names_this_build_s_machine():
    alone = q3_headline(finding("Q3", "does not hold", 0.02, 0.05))
    assert f"saves at best 2.0% of full RMSNorm's time on this build's {machine_name()}, short of the 5%" in alone
    q5 = q5_headline(finding("Q5", "does not hold", 0.03, 0.07, 0.004))
    assert f"take 3.0% of SmolLM2-135M's prefill time on this build's {machine_name()}, below the 7%" in q5


def test_sentences_in_nats_per_byte():
    a9 = a9_headline(finding("A9", "not testable here", 0.0257, 0.02, 0.007))
    assert "differ by at most 0.0257 nats per byte" in a9 and "beyond the margin of ±0.02 nats per byte" in a9
    assert "too few pairs" in a9


def test_a9_names_the_model_sizes_and_hardware_it_was_measured_at():
    ladder = {"rungs": [{"parameters": 15_104}, {"parameters": 234_624}, {"parameters": 669_312}]}
    measured = dict(parameters=234_624, hardware="Test CPU (2 cores)", scale_ladder=dict(ladder, trend="grows"))
    a9 = a9_headline(finding("A9", "holds", 0.015, 0.02, 0.004, **measured))
    assert (
        "(the registered confirmation's paired 95% interval) at 0.23 million parameters on Test CPU (2 cores), inside"
        in a9
    )
    assert a9.endswith(
        ": equal quality at this scale, as article A says. Across the scale ladder, 0.015–0.67 million parameters, "
        "the difference grows."
    )
    undecided = a9_headline(finding("A9", "holds", 0.015, 0.02, 0.004, **dict(measured, scale_ladder=ladder)))
    assert undecided.endswith("0.015–0.67 million parameters, this run cannot tell how the difference moves.")
    on_gpu = a9_headline(finding("A9", "holds", 0.015, 0.02, 0.004, parameters=6_570_000, hardware="NVIDIA H200"))
    assert "at 6.6 million parameters on NVIDIA H200, inside" in on_gpu and "ladder" not in on_gpu


def test_q4_reads_the_interval_its_verdict_reads_not_the_mean():
    # mean inside the margin, interval across it: the verdict's SmolLM2 half is undecided, and the sentence says so
    straddling = dict(smollm2_ci=[-0.004, 0.014], smollm2_outcome="inconclusive")
    q4 = q4_headline(Finding("holds with caveats", "s", straddling, 0.005, 0.01, 0.002, **Q4_KEY.fields()))
    assert "by +0.00500 nats per token (95% CI -0.0040..+0.0140), its interval across the margin of ±0.01" in q4
    assert "inside" not in q4
    beyond = dict(smollm2_ci=[0.012, 0.02], smollm2_outcome="different")
    q4 = q4_headline(Finding("holds", "s", beyond, 0.016, 0.01, 0.002, **Q4_KEY.fields()))
    assert "its interval wholly beyond the margin of ±0.01 nats per token" in q4


def test_q4_names_both_models_scale_and_claims_nothing_beyond_them():
    evidence = dict(
        smollm2_ci=[-0.1829, 0.0771],
        smollm2_outcome="inconclusive",
        smollm2_matters=None,
        minilm_matters=True,
        minilm_cosine_median=0.9712,
        minilm_cosine_threshold=0.99,
        minilm_retrieval={"original": {"mrr": 0.435}, "without centring": {"mrr": 0.437}},
        chunks=12,
        minilm_pairs=200,
    )
    evidence["scale"] = q4_scale(evidence)
    q4 = q4_headline(Finding("holds with caveats", "s", evidence, -0.0529, 0.01, 0.04, **Q4_KEY.fields()))
    assert "(95% CI -0.1829..+0.0771), its interval across the margin of ±0.01 nats per token" in q4
    assert (
        "median embedding cosine of 0.9712 to the original, below 0.99, and its retrieval MRR moves 0.435 → 0.437" in q4
    )
    assert "centring changes MiniLM's embeddings (SmolLM2's interval undecided)" in q4
    assert "(SmolLM2-135M, 4-bit weights, 12 held-out chunks; all-MiniLM-L6-v2, 22M parameters, 200 sentence" in q4
    assert "real trained models" not in q4 and "matters" not in q4
    both = dict(evidence, smollm2_ci=[0.02, 0.05], smollm2_outcome="different", smollm2_matters=True)
    q4 = q4_headline(Finding("holds", "s", both, 0.035, 0.01, 0.005, **Q4_KEY.fields()))
    assert "wholly beyond the margin" in q4 and q4.endswith("which says nothing of larger ones.")
    assert "real trained models" not in q4 and "here and in MiniLM" not in q4


def test_per_token_and_per_byte_findings_write_their_own_units():
    per_byte = a9_headline(finding("A9", "holds", 0.015, 0.02, 0.004))
    per_token = q4_headline(Finding("holds", "s", {}, 0.2, 0.01, 0.01, **Q4_KEY.fields()))
    assert "0.0150 nats per byte" in per_byte and "per token" not in per_byte
    assert "+0.200 nats per token" in per_token and "per byte" not in per_token
    # the unit is the finding's: the same writer, handed a finding in another unit, writes that unit
    relabelled = Finding("holds", "s", {}, 0.015, 0.02, 0.004, meaning="m", unit="nats per token")
    assert "0.0150 nats per token" in a9_headline(relabelled)


def test_the_comparison_word_follows_the_numbers_not_the_verdict():
    below = b1_headline(finding("B1", "holds with caveats", 0.55, 0.9, 0.0))
    above = b1_headline(finding("B1", "holds", 0.95, 0.9, 0.0))
    assert "55% use RMSNorm, short of the 90%" in below and "although the families the essay names all do" in below
    assert "95% use RMSNorm, above the 90%" in above and "although" not in above


def test_b17_and_b18_sentences_say_what_their_verdicts_rest_on():
    evidence = dict(
        deepest_init_depth=32,
        exponent_pre_xiong_init=-0.47,
        scale="width 48, depths 2–32, 2 seeds",
        pre_ln_gradient_max_over_min_xavier=10.99,
        fragile_xavier=True,
        within_slack_above_pinned_bound=True,
        bound_ratio_pre_xavier=1.08,
        bound_ratio_post_xavier=1.16,
        bound_slack=0.25,
        bound_pinned_depth=2,
    )
    b17 = b17_headline(finding("B17", "holds with caveats", 1.29, 10.0, 0.04, **evidence))
    assert b17.startswith("At initialisation (width 48, depths 2–32, 2 seeds), under GPT-2's")
    assert "at depth 32 differ by at most ×1.29 (inside the limit of ×10)" in b17
    # Xavier's spread is named as Xavier's, and a spread beyond the limit is never said to stay within it
    assert "under Xavier initialisation, Xiong et al.'s, they differ by ×11.0 (beyond the limit, fragile)" in b17
    assert "stay within ×11" not in b17
    assert "×1.16 of the bound's 1/√L curve pinned to the measurement at L₀ = 2, within the ×1.25 slack" in b17
    assert "(fitted slope, a description: L^-0.47)" in b17 and "2020's bound at initialisation" in b17
    beyond = b17_headline(finding("B17", "does not hold", 12.0, 10.0, 0.3))
    assert "(beyond the limit of ×10); the essay's" in beyond and "warm-up" not in beyond
    rates = dict(pre_trained_rate_no_warmup=0.0, post_trained_rate_no_warmup=0.5)
    untrained = b17_headline(finding("B17", "does not hold", 1.25, 10.0, 0.1, **rates))
    assert (
        "(inside the limit of ×10), but without warm-up pre-LN trained in 0% of runs and post-LN in 50%;" in untrained
    )
    b18 = b18_headline(finding("B18", "not testable here", -0.0136, 0.02, 0.044))
    assert "minus LayerNorm's is -0.0136 nats per byte (spread 0.0440 nats per byte)" in b18
    assert "no published study" in b18
    scaled = b18_headline(
        finding(
            "B18",
            "not testable here",
            -0.03,
            0.02,
            0.06,
            scale="depth 12, width 32, 300 steps, 5 pairs",
            decision="580 pairs at depth 12, width 32, 300 steps",
        )
    )
    assert "With the norm on the trunk (post-LN; depth 12, width 32, 300 steps, 5 pairs), RMSNorm's" in scaled
    assert "; 580 pairs at depth 12, width 32, 300 steps would decide it, a design registered for the GPU" in scaled
    pair = {"ci_low": -0.061, "ci_high": -0.031}  # RMSNorm better beyond the margin: the claim of "worse" fails
    better = b18_headline(finding("B18", "does not hold", -0.046, 0.02, 0.007, paired_post_rms_minus_layer=pair))
    assert (
        "-0.0460 nats per byte (spread 0.00700 nats per byte), 95% CI -0.0610..-0.0310, not beyond the margin" in better
    )
    assert "inside" not in better


def test_b12_keeps_the_structure_apart_from_the_printed_formula():
    wrong = b12_headline(finding("B12", "holds with caveats", 1.0, 0.1))
    assert "is off by a relative error of 1 against autograd, beyond the 0.1" in wrong
    assert wrong.endswith("holds, but the formula as printed does not.")
    right = b12_headline(finding("B12", "holds", 1e-15, 0.1))
    assert "is within a relative error of 1.00e-15" in right and right.endswith("marks a formula as wrong.")
