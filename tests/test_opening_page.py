"""The opening page's findings and the ledger's units, on hand-made results whose answer is known."""

import json

import pytest

from normlab.study import ledger
from normlab.study.claims import VERDICT_BADGES
from normlab.study.results import VERDICTS

CLAIMS = ledger.parse_claims()


def run(notebook, *records, machine="Test CPU"):
    return {
        "notebook": notebook,
        "profile": "cpu",
        "hardware": {"cpu": machine, "cpu_cores": 2, "gpu": None},
        "versions": {"python": "3.11", "torch": "x", "triton": None},
        "git_commit": "abc",
        "started": "t0",
        "finished": "t1",
        "claims": list(records),
    }


def record(claim_id, verdict, key, threshold, spread=None, section="sec", summary="A summary.", **evidence):
    return {
        "id": claim_id,
        "verdict": verdict,
        "summary": summary,
        "evidence": evidence,
        "section": section,
        "key_number": key,
        "threshold": threshold,
        "spread": spread,
    }


def sentences(*runs):
    return ledger.findings_sentences(ledger.verdicts(CLAIMS, list(runs)))


def fused_q2(key, verdict):
    by_hardware = {
        "Test CPU (2 cores)": {"key_number": 0.001, "source": "this run"},
        "NVIDIA H200 [gpu-bench.json]": {"key_number": key, "source": "gpu-bench.json"},
    }
    return record(
        "Q2",
        verdict,
        key,
        0.1,
        0.02,
        "speed-bandwidth",
        decided_on="NVIDIA H200 [gpu-bench.json]",
        by_hardware=by_hardware,
    )


def test_every_claim_has_one_key_number_meaning_and_no_stale_entry():
    assert set(ledger.KEY_NUMBERS) == {c.id for c in CLAIMS}
    assert all(meaning.meaning for meaning in ledger.KEY_NUMBERS.values())
    assert set(ledger.HEADLINES) <= set(ledger.KEY_NUMBERS)
    assert 6 <= len(ledger.HEADLINES) <= 10


def test_a_findings_sentence_carries_the_recorded_number_with_its_unit_and_the_deciding_machine():
    (q2,) = sentences(run("speed", fused_q2(0.059, "holds")))
    assert "differ by 5.9% of LayerNorm's time on the NVIDIA H200" in q2
    assert (
        "on the NVIDIA H200 (a median; 0.10%–5.9% across the 2 runs weighed)" in q2
    )  # the per-hardware key numbers, smallest to largest
    assert "under the 10% this book counts as an advantage: not the 10–50%" in q2
    assert q2.endswith("({ref}`Q2 <speed-bandwidth>`: ✓ holds)")
    (q2,) = sentences(run("speed", fused_q2(0.15, "does not hold")))
    assert "differ by 15% of LayerNorm's time" in q2 and "over the 10%" in q2 and "real advantage" in q2
    assert q2.endswith("✗ does not hold)")


def test_sentences_in_nats_and_the_machine_of_this_build():
    quality = run("quality", record("A9", "not testable here", 0.0257, 0.02, 0.007, "quality-parity"))
    realmodels = run(
        "realmodels",
        record("Q4", "holds", 0.0541, 0.01, 0.007, "realmodels-centring-added"),
        record("Q5", "does not hold", 0.03, 0.07, 0.004, "realmodels-time"),
        machine="AMD EPYC",
    )
    a9, q4, q5 = sentences(quality, realmodels)
    assert "differ by at most 0.0257 nats" in a9 and "beyond the margin of ±0.02 nats" in a9
    assert "too few pairs" in a9
    assert "changes the held-out loss by +0.0541 nats, beyond the margin of ±0.01 nats" in q4
    assert "take 3.0% of SmolLM2-135M's prefill time on this build's AMD EPYC (2 cores), below the 7%" in q5


def test_v1_names_the_saturating_final_layer_and_the_rmsnorm_final_variant_when_measured():
    diagnosed = record(
        "V1",
        "does not hold",
        0.77,
        0.03,
        0.01,
        "landscape-dyt",
        saturation={"dyt-authors": {"saturated": True}},
        dyt_rmsfinal_minus_rms={"mean_difference": -0.12},
    )
    (v1,) = sentences(run("landscape", diagnosed))
    assert "by its authors' LLaMA recipe ends 0.770 nats worse than RMSNorm" in v1
    assert "its final DyT layer saturates, and with an RMSNorm final norm instead DyT ends 0.120 nats better" in v1
    (plain,) = sentences(run("landscape", record("V1", "does not hold", 0.77, 0.03, 0.01, "landscape-dyt")))
    assert plain.split(" (")[0].endswith("at this scale it does not match a norm without tuning.")


def test_a_pending_or_missing_claim_gives_no_sentence_and_the_page_still_renders():
    assert sentences(run("geometry", record("A1", "holds", 1e-14, 1e-12))) == []
    # B18 recorded only as evidence (no verdict) is pending; B17 without a key number has nothing to say
    depth = run("depth", record("B17", "holds", None, None), dict(record("B18", None, None, None), verdict=None))
    assert sentences(depth) == []
    page = ledger.render_intro(CLAIMS, [depth], prose="# Title\n<!-- findings -->\nTail.\n", figure="v.png")
    assert ledger._NO_HEADLINES in page and page.index("## What we found") < page.index("Of the ")
    assert "Tail." in page


@pytest.mark.parametrize("verdict", VERDICTS)
@pytest.mark.parametrize("claim_id", list(ledger.HEADLINES))
def test_every_headline_states_its_number_and_threshold_in_their_unit_for_any_verdict(claim_id, verdict):
    meaning = ledger.KEY_NUMBERS[claim_id]
    for key, threshold in ((0.75, 0.5), (0.25, 0.5)):
        (sentence,) = sentences(run("chapter", record(claim_id, verdict, key, threshold, 0.01, "sec-x")))
        assert meaning.format(key) in sentence and meaning.format(threshold, trim=True) in sentence
        assert sentence.endswith(f"({{ref}}`{claim_id} <sec-x>`: {VERDICT_BADGES[verdict]})")


def test_the_comparison_word_follows_the_numbers_not_the_verdict():
    below = sentences(run("ecosystem", record("B1", "holds with caveats", 0.55, 0.9, 0.0, "eco")))[0]
    above = sentences(run("ecosystem", record("B1", "holds", 0.95, 0.9, 0.0, "eco")))[0]
    assert "55% use RMSNorm, short of the 90%" in below and "although the families the essay names all do" in below
    assert "95% use RMSNorm, above the 90%" in above and "although" not in above


def test_b17_and_b18_sentences_say_what_their_verdicts_rest_on():
    depth = run(
        "depth",
        record(
            "B17",
            "holds with caveats",
            4.33,
            10.0,
            0.37,
            "depth-init",
            deepest_init_depth=32,
            exponent_pre_xiong_init=-0.47,
        ),
        record("B18", "not testable here", -0.0136, 0.02, 0.044, "depth-training"),
    )
    b17, b18 = sentences(depth)
    assert "at depth 32 stay within ×4.33 of one another (inside the limit of ×10); the essay's 'undamped'" in b17
    beyond = sentences(run("depth", record("B17", "does not hold", 12.0, 10.0, 0.3, "depth-init")))[0]
    assert "(beyond the limit of ×10); the essay's" in beyond and "warm-up" not in beyond
    rates = dict(pre_trained_rate_no_warmup=0.0, post_trained_rate_no_warmup=0.5)
    untrained = sentences(run("depth", record("B17", "does not hold", 1.25, 10.0, 0.1, "depth-init", **rates)))[0]
    assert (
        "(inside the limit of ×10), but without warm-up pre-LN trained in 0% of runs and post-LN in 50%;" in untrained
    )
    assert "shrinks as 1/√L (measured here: L^-0.47)" in b17 and "2020's bound at initialisation" in b17
    assert "minus LayerNorm's is -0.0136 nats (spread 0.0440 nats)" in b18 and "no published study" in b18


def test_headlines_follow_the_reading_order_whatever_order_the_chapters_ran_in():
    runs = [
        run("landscape", record("V1", "does not hold", 0.18, 0.03, 0.01, "l")),
        run("ecosystem", record("B1", "holds", 0.95, 0.9, 0.0, "e")),
        run("speed", fused_q2(0.05, "holds")),
    ]
    found = [s.rsplit("{ref}`", 1)[1].split(" ")[0] for s in sentences(*runs)]
    assert found == [c for c in ledger.HEADLINES if c in {"V1", "B1", "Q2"}] == ["Q2", "B1", "V1"]


def test_the_ledger_gives_each_key_number_its_unit_and_meaning():
    runs = [
        run("speed", fused_q2(0.059, "holds")),
        run("ecosystem", record("A11", "holds", 0.0, 0.5, 0.0, "eco")),
        run("depth", record("B17", "holds", 4.33, 10.0, 0.37, "depth-init")),
    ]
    rows = {
        line.split(" | ")[0][2:]: line for line in ledger.render_ledger(CLAIMS, runs).splitlines() if line[:2] == "| "
    }
    assert "| 5.9% vs 10%: *\\|median share of LayerNorm's time RMSNorm saves\\|, both fused* | 2.0% |" in rows["Q2"]
    assert "| 0 families vs 0.5 families: *named families (of 3) not measured as RMSNorm* |" in rows["A11"]
    assert "| ×4.33 vs ×10: *largest ratio of pre-LN per-block gradient norms" in rows["B17"]
    assert "| 0.370 |" in rows["B17"]  # a ratio's spread is a plain number, not a factor
    tiny = record("A1", "holds", 2.71e-14, 1e-12, 8.8e-15)
    assert ledger.key_cell(tiny).startswith("2.71e-14 vs 1e-12: *max abs difference")  # a round threshold stays round


def test_a5_falls_back_to_the_op_count_when_no_fused_pair_was_timed():
    timed = record("A5", "holds with caveats", 0.05, 0.1, 0.01, fused_median_saving=0.05)
    untimed = record("A5", "holds with caveats", 3.0, 1.0, 0.0, fused_median_saving=None)
    assert ledger.key_cell(timed).startswith("5.0% vs 10%: *median share")
    assert ledger.key_cell(untimed).startswith("3 ops vs 1 ops: *full-size ops")


def test_summaries_are_cut_at_the_second_sentence():
    long = (
        "Pre-LN's gradients differ by ×4.33 at depth 32 (threshold ×10), as Xiong et al. 2020 predict. "
        "'Undamped' is read against a bound at initialisation, e.g. the last layer's 1/√L. "
        "A third sentence the ledger leaves to the chapter. And a fourth."
    )
    cut = ledger.first_sentences(long)
    assert cut == long.split(" A third")[0] + " …"
    assert ledger.first_sentences("One sentence with 0.5 nats and et al. inside.") == (
        "One sentence with 0.5 nats and et al. inside."
    )
    assert ledger.first_sentences("First. Second.") == "First. Second."
    page = ledger.render_ledger(CLAIMS, [run("depth", record("B17", "holds", 4.33, 10.0, 0.37, summary=long))])
    row = next(line for line in page.splitlines() if line.startswith("| B17 |"))
    assert "e.g. the last layer's 1/√L. … |" in row and "A third sentence" not in row


def test_the_built_opening_page_puts_sentences_then_counts_then_the_figure(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    for r in (run("speed", fused_q2(0.059, "holds")), run("ecosystem", record("B1", "holds", 0.95, 0.9, 0.0, "e"))):
        (results / f"{r['notebook']}.json").write_text(json.dumps(r))
    ledger.build(results, tmp_path / "pages", executed_dir=tmp_path / "ex", data_dir=tmp_path)
    page = (tmp_path / "pages" / "intro.md").read_text()
    found, counts, figure = (page.index(s) for s in ("## What we found", "Of the 39 claims", "```{figure}"))
    assert found < page.index("- Once both norms are fused") < page.index("- Of the model families") < counts < figure
    assert ":::{dropdown}" not in page
