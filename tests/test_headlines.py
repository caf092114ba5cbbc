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
from normlab.runtime import environment
from normlab.runtime.environment import this_build
from normlab.study.findings import Finding
from normlab.study.pages.opening import HEADLINE_WORDS
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


def test_q2_names_the_machine_and_the_cases_of_its_number():
    q2 = q2_headline(fused_q2(0.059, "holds"))
    # the deciding H200's number stands with the H200 and its cases; the runs beside it are the chapter's (the
    # commit too), so no number of one machine is named under another
    assert q2 == (
        "Both fused, RMSNorm and LayerNorm differ by 5.9% of LayerNorm's time on the GPU run in gpu-bench.json, "
        "median of 12 training-batch cases, under the 10% counted as an advantage: not article A's 10–50%."
    )
    assert "0.10%" not in q2 and "Test CPU" not in q2 and "commit" not in q2 and "H200" not in q2
    # this build's CPU decides (the GPU run could not test it): the CPU's number is named as the CPU's
    cpu = fused_q2(0.059, "holds")
    cpu.evidence["decided_on"], cpu.key_number = "Test CPU (2 cores)", 0.001
    cpu_first = q2_headline(cpu)
    assert f"differ by 0.10% of LayerNorm's time on {this_build()}, median of 12" in cpu_first
    assert "5.9%" not in cpu_first and "H200" not in cpu_first
    q2 = q2_headline(fused_q2(0.15, "does not hold"))
    assert "differ by 15% of LayerNorm's time" in q2 and "over the 10%" in q2 and "real advantage" in q2


def test_without_a_deciding_gpu_run_the_sentence_names_this_build_s_machine():
    alone = q3_headline(finding("Q3", "does not hold", 0.02, 0.05))
    assert f"saves at best 2.0% of full RMSNorm's time on {this_build()}, short of the 5%" in alone
    q5 = q5_headline(finding("Q5", "does not hold", 0.03, 0.07, 0.004, device="cpu"))
    assert "take 3.0% of SmolLM2-135M's prefill on this build's CPU, below 7%" in q5


def test_sentences_in_nats_per_byte():
    a9 = a9_headline(finding("A9", "not testable here", 0.0257, 0.02, 0.007))
    assert "at most 0.0257 nats per byte apart" in a9 and "beyond the ±0.02 nats per byte margin" in a9
    assert "too few pairs" in a9


def test_a9_names_the_model_size_and_hardware_it_was_measured_at():
    ladder = {"rungs": [{"parameters": 15_104}, {"parameters": 234_624}, {"parameters": 669_312}], "trend": "grows"}
    measured = dict(parameters=234_624, device="cpu", hardware="Test CPU (2 cores)", scale_ladder=ladder)
    a9 = a9_headline(finding("A9", "holds", 0.015, 0.02, 0.004, **measured))
    assert a9.startswith("At 0.23 million parameters on this build's CPU, RMSNorm and LayerNorm GPTs")
    assert a9.endswith("inside the ±0.02 nats per byte margin: equal quality at this scale.")
    assert "ladder" not in a9  # the ladder's trend is the chapter's (quality-ladder), not the opening page's
    gpu = dict(parameters=6_570_000, device="cuda:0", hardware="NVIDIA H200")
    on_gpu = a9_headline(finding("A9", "holds", 0.015, 0.02, 0.004, **gpu))
    assert on_gpu.startswith("At 6.6 million parameters on this build's GPU, ")
    alone = a9_headline(finding("A9", "does not hold", 0.05, 0.02, 0.004))
    assert alone.startswith("Small RMSNorm and LayerNorm GPTs") and alone.endswith(": their quality differs.")


def test_q4_reads_the_interval_its_verdict_reads_not_the_mean():
    # mean inside the margin, interval across it: the verdict's SmolLM2 half is undecided, and the sentence says so
    straddling = dict(smollm2_ci=[-0.004, 0.014], smollm2_outcome="inconclusive")
    q4 = q4_headline(Finding("holds with caveats", "s", straddling, 0.005, 0.01, 0.002, **Q4_KEY.fields()))
    assert "by +0.00500 nats per token, interval across ±0.01 nats per token" in q4
    assert "inside" not in q4
    beyond = dict(smollm2_ci=[0.012, 0.02], smollm2_outcome="different")
    q4 = q4_headline(Finding("holds", "s", beyond, 0.016, 0.01, 0.002, **Q4_KEY.fields()))
    assert "interval beyond ±0.01 nats per token" in q4


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
    assert q4 == (
        "In two small models (SmolLM2-135M 4-bit, 12 chunks; MiniLM 22M, 200 sentence pairs), swapping in LayerNorm "
        "moves SmolLM2's loss by -0.0529 nats per token, interval across ±0.01 nats per token, and centring changes "
        "MiniLM's embeddings."
    )
    assert "real trained models" not in q4 and "matters" not in q4
    unmoved = q4_headline(Finding("does not hold", "s", dict(evidence, minilm_matters=False), 0.001, 0.01, 0.001))
    assert unmoved.endswith("and MiniLM's embeddings ignore centring.")


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
        scale="width 48, depths 2–32, 2 seeds; trained at depth 12, width 32, 300 steps",
        pre_ln_gradient_max_over_min_xavier=10.99,
        fragile_xavier=True,
        within_slack_above_pinned_bound=True,
        bound_ratio_pre_xavier=1.08,
        bound_ratio_post_xavier=1.16,
        bound_slack=0.25,
        bound_pinned_depth=2,
    )
    b17 = b17_headline(finding("B17", "holds with caveats", 1.29, 10.0, 0.04, **evidence))
    assert b17 == (
        "Pre-LN's per-block gradient norms spread by ×1.29 at initialisation (width 48, depths 2–32, 2 seeds; "
        "trained at depth 12, width 32, 300 steps), within ×10."
    )
    beyond = b17_headline(finding("B17", "does not hold", 12.0, 10.0, 0.3))
    assert beyond.endswith("spread by ×12 at initialisation, beyond ×10.") and "warm-up" not in beyond
    rates = dict(evidence, pre_trained_rate_no_warmup=0.0, post_trained_rate_no_warmup=0.5)
    untrained = b17_headline(finding("B17", "does not hold", 1.25, 10.0, 0.1, **rates))
    assert untrained.endswith("within ×10, but without warm-up 0% of pre-LN runs trained (post-LN: 50%).")
    assert len(untrained.split()) <= HEADLINE_WORDS  # the longest form, at the cpu profile's scale
    b18 = b18_headline(finding("B18", "not testable here", -0.0136, 0.02, 0.044))
    assert b18 == (
        "In post-LN, RMSNorm's final loss minus LayerNorm's is -0.0136 nats per byte, too uncertain to judge against "
        "±0.02 nats per byte."
    )
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
    assert scaled.startswith("In post-LN (depth 12, width 32, 300 steps, 5 pairs), RMSNorm's final loss minus")
    assert "580 pairs" not in scaled  # what would decide it is the chapter's
    pair = {"ci_low": -0.061, "ci_high": -0.031}  # RMSNorm better beyond the margin: the claim of "worse" fails
    better = b18_headline(finding("B18", "does not hold", -0.046, 0.02, 0.007, paired_post_rms_minus_layer=pair))
    assert "-0.0460 nats per byte (95% CI -0.0610..-0.0310), not beyond +0.02 nats per byte" in better
    assert "inside" not in better


def test_b12_keeps_the_structure_apart_from_the_printed_formula():
    wrong = b12_headline(finding("B12", "holds with caveats", 1.0, 0.1))
    assert "is off from autograd by 1 (relative error), beyond the 0.1 tolerance" in wrong
    assert wrong.endswith("its structure holds, not the printed formula.")
    right = b12_headline(finding("B12", "holds", 1e-15, 0.1))
    assert "is within autograd by 1.00e-15 (relative error)" in right and right.endswith("inside the 0.1 tolerance.")


# The longest evidence each writer meets (the cpu and gpu profiles' scales, the longest machine names in data/), so
# that a headline fits the opening page at every verdict, not only at the smoke run's.
LONGEST = {
    "A9": dict(parameters=6_570_000, device="cuda:0", hardware="NVIDIA H200 (gpu-study-2.json)"),
    "Q4": dict(smollm2_outcome="different", smollm2_matters=True, minilm_matters=False, chunks=120, minilm_pairs=2000),
    "Q5": dict(prompt_tokens=512, rounds=12, threads=16, device="cpu"),
    "B1": {},
    "B12": dict(dims=[8, 32, 768]),
    "B17": dict(
        scale="width 48, depths 2–32, 2 seeds; trained at depth 12, width 32, 300 steps",
        pre_trained_rate_no_warmup=0.25,
        post_trained_rate_no_warmup=0.75,
    ),
    "B18": dict(
        scale="depth 12, width 32, 300 steps, 580 pairs",
        paired_post_rms_minus_layer={"ci_low": -0.0961, "ci_high": 0.1234},
    ),
}


def _q4_finding(verdict, key, threshold):
    evidence = dict(LONGEST["Q4"])
    evidence["scale"] = q4_scale(evidence)
    return Finding(verdict, "s", evidence, key, threshold, 0.01, **Q4_KEY.fields())


def _v1_finding(verdict, key, threshold, saturated):
    from normlab.analysis.landscape.dyt import V1_KEY

    pair = {"mean_difference": key, "ci_low": key - 0.5, "ci_high": key + 0.5, "margin": threshold, "pairs": 3}
    evidence = dict(
        dyt_minus_rms=pair,
        parameters=1_234_567,
        train={"steps": 2000},
        saturation={"dyt-authors": {"saturated": saturated}},
        dyt_rmsfinal_minus_rms=pair,
    )
    return Finding(verdict, "s", evidence, key, threshold, 0.01, **V1_KEY.fields())


@pytest.mark.parametrize("verdict", VERDICTS)
@pytest.mark.parametrize("claim_id", ["A9", "Q4", "Q5", "B1", "B12", "B17", "B18", "V1"])
def test_every_headline_fits_in_the_opening_page_s_word_limit(claim_id, verdict):
    from normlab.analysis.landscape.dyt import dyt_headline

    for number, threshold in ((0.7523, 0.02), (-0.01234, 0.5), (12.5, 10.0), (1.25, 10.0)):
        if claim_id == "V1":
            sentences = [dyt_headline(_v1_finding(verdict, number, threshold, s)) for s in (True, False)]
        elif claim_id == "Q4":
            sentences = [q4_headline(_q4_finding(verdict, number, threshold))]
        else:
            f = finding(claim_id, verdict, number, threshold, 0.01, **LONGEST[claim_id])
            if claim_id == "B12":
                f.scale = None  # written from the widths
            sentences = [WRITERS[claim_id][1](f)]
        for sentence in sentences:
            assert len(sentence.split()) <= HEADLINE_WORDS, (len(sentence.split()), sentence)


@pytest.mark.parametrize("verdict", VERDICTS)
@pytest.mark.parametrize("claim_id", ["Q2", "Q3"])
def test_the_speed_headlines_fit_in_the_opening_page_s_word_limit(claim_id, verdict):
    # the longest evidence: a deciding run named by this build's machine or a committed file, three or more widths
    for number in (0.059, 0.28):
        if claim_id == "Q2":
            sentences = [q2_headline(fused_q2(number, verdict))]
            cpu = fused_q2(number, verdict)
            cpu.evidence["decided_on"] = "Test CPU (2 cores)"
            sentences.append(q2_headline(cpu))
        else:
            widths = dict(widths=[1024, 4096, 8192, 16384], best_backend="reference")
            sentences = [q3_headline(finding("Q3", verdict, number, 0.05, **widths))]
        for sentence in sentences:
            assert len(sentence.split()) <= HEADLINE_WORDS, (len(sentence.split()), sentence)


# Real machines' names, the longest included: a headline must not grow with the name of the machine it ran on (a
# Xeon's five-word name once took the A9 sentence over the limit), nor name it (the opening page's "Where these
# numbers come from" does).
MACHINES = [
    ("Intel(R) Xeon(R) Platinum 8480+", None),
    ("Intel(R) Xeon(R) Processor", None),
    ("AMD EPYC 7B13 64-Core Processor", None),
    ("AMD EPYC 9R14 96-Core Processor", None),
    ("AMD EPYC 9R14 96-Core Processor", "NVIDIA H100 80GB HBM3"),
    ("Intel(R) Xeon(R) Platinum 8480+", "NVIDIA H200"),
    ("unknown x86_64 CPU", None),
]


@pytest.mark.parametrize("cpu, gpu", MACHINES)
def test_no_headline_names_or_grows_with_the_machine_it_ran_on(monkeypatch, cpu, gpu):
    monkeypatch.setattr(environment, "_machine", lambda: {"cpu": cpu, "cpu_cores": 192, "gpu": gpu})
    label = gpu or f"{cpu} (192 cores)"
    device = "cuda:0" if gpu else "cpu"
    for claim_id, (_, write) in WRITERS.items():
        for verdict in VERDICTS:
            longest = dict(LONGEST.get(claim_id, {}), hardware=label, device=device)
            if claim_id == "Q2":
                sentences = [q2_headline(fused_q2(0.28, verdict))]
                sentences[0:0] = [q2_headline(_decided_here(fused_q2(0.28, verdict), label))]
            elif claim_id == "Q3":
                widths = dict(widths=[1024, 4096, 8192, 16384], best_backend="reference")
                sentences = [q3_headline(finding("Q3", verdict, 0.28, 0.05, **widths))]
            else:
                sentences = [write(finding(claim_id, verdict, 0.7523, 0.02, 0.01, **longest))]
            for sentence in sentences:
                assert len(sentence.split()) <= HEADLINE_WORDS, (len(sentence.split()), sentence)
                assert cpu not in sentence and (gpu is None or gpu not in sentence), sentence
    assert environment.machine_name().startswith(cpu)  # the page's own line still names it


def _decided_here(q2, label):
    """The Q2 finding answered by this build's run, named by `label` in the evidence as `weigh` names it."""
    q2.evidence["by_run"][label] = {"key_number": q2.key_number, "where": f"this run's {label}"}
    q2.evidence["decided_on"] = label
    return q2


def test_a_cpu_without_a_model_name_is_named_unknown(monkeypatch, tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: Unknown\nmodel name\t:\n")
    real_path = environment.Path
    monkeypatch.setattr(environment, "Path", lambda p: cpuinfo if p == "/proc/cpuinfo" else real_path(p))
    assert environment.cpu_model().startswith("unknown") and environment.cpu_model().endswith("CPU")
    assert environment.machine_name({"cpu": None, "cpu_cores": 2, "gpu": None}) == "unknown CPU (2 cores)"
