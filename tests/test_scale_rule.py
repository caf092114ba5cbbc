"""The one rule for a claim judged on several runs (normlab.analysis.shared.scale_rule): every branch, on runs whose
verdicts are given, then the speed chapter's two committed bench files."""

from __future__ import annotations

import pytest

from normlab.analysis.shared.scale_rule import RULE, Run, answer, answering, side_by_side
from normlab.bench import provenance
from normlab.study import paths
from normlab.study.findings import Finding, rule_text

STALE = "gpu-study.json: measured at 0000000; since then 1 file of the GPT testbed changed, not yet re-measured"


def _finding(verdict: str, key: float = 0.01, spread: float = 0.005) -> Finding:
    return Finding(verdict, f"It {verdict} there.", {"mine": verdict}, key, 0.02, spread, caveats=("its own",))


def cpu(verdict: str, **kw) -> Run:
    return Run("CPU", _finding(verdict, **kw), scale=0)


def gpu(verdict: str, pairs: int = 16, registered: int | None = 16, **kw) -> Run:
    fields = {k: kw.pop(k) for k in ("caveat", "identified", "measured") if k in kw}
    return Run("GPU", _finding(verdict, **kw), scale=1, pairs=pairs, registered_pairs=registered, **fields)


def scale_caveats(finding: Finding) -> list[str]:
    return [c for c in finding.caveats if c.startswith(("depends on scale", "differs between runs"))]


# ---- which run answers ------------------------------------------------------------------------------------


def test_without_a_gpu_run_this_build_answers_alone():
    alone = answer([cpu("holds")])
    assert alone.verdict == "holds" and alone.evidence["decided_on"] == "CPU" and scale_caveats(alone) == []
    assert (
        alone.caveats == ("its own",) and "by_run" not in alone.evidence and alone.summary == "On CPU: It holds there."
    )
    # the study's rule for several runs is shown after the claim's registered one, and only where runs were weighed
    assert alone.runs_rule is None and rule_text("A9", alone.reads, alone.runs_rule) == rule_text("A9")
    weighed = answer([cpu("holds"), gpu("holds")])
    assert (
        weighed.runs_rule == RULE and rule_text("A9", weighed.reads, weighed.runs_rule) == f"{rule_text('A9')} {RULE}"
    )


def test_a_gpu_study_below_its_registered_pairs_is_shown_and_this_build_answers():
    short = gpu("holds", pairs=8)
    combined = answer([cpu("holds"), short])
    assert answering([cpu("holds"), short]).where == "CPU" and combined.evidence["decided_on"] == "CPU"
    assert combined.evidence["by_run"]["GPU"] == {**combined.evidence["by_run"]["GPU"], "pairs": 8, "answers": False}
    assert "has 8 of the 16 pairs its design registers, so it does not answer" in combined.summary
    assert combined.summary.startswith("On CPU, which answers (the largest scale that meets its registered pairs):")
    assert scale_caveats(combined) == []  # both hold
    # its differing verdict is still named on the one this build answers
    against = answer([cpu("holds"), gpu("does not hold", pairs=8)])
    assert against.verdict == "holds"
    assert scale_caveats(against) == ["depends on scale: 'holds' on CPU, 'does not hold' on GPU"]


def test_a_gpu_study_that_meets_its_pairs_answers_and_agreement_adds_nothing():
    combined = answer([cpu("holds"), gpu("holds", pairs=20)])
    assert combined.evidence["decided_on"] == "GPU" and combined.verdict == "holds"
    assert scale_caveats(combined) == [] and combined.summary.startswith(
        "On GPU, which answers (the largest scale that meets its registered pairs, with 20 of 16): It holds there."
    )
    assert combined.evidence["mine"] == "holds" and combined.headline is None  # the answering run's evidence


def test_a_gpu_does_not_hold_against_a_cpu_holds_and_the_reverse_are_treated_alike():
    gpu_against = answer([cpu("holds"), gpu("does not hold")])
    cpu_against = answer([cpu("does not hold"), gpu("holds")])
    # the answering run's own verdict stands either way: no "holds" is softened, no "does not hold" ignores the other
    assert gpu_against.verdict == "does not hold" and cpu_against.verdict == "holds"
    assert scale_caveats(gpu_against) == ["depends on scale: 'does not hold' on GPU, 'holds' on CPU"]
    assert scale_caveats(cpu_against) == ["depends on scale: 'holds' on GPU, 'does not hold' on CPU"]
    assert gpu_against.evidence["decided_on"] == cpu_against.evidence["decided_on"] == "GPU"
    # and "holds with caveats" against "holds" is a difference too
    softer = answer([cpu("holds with caveats"), gpu("holds")])
    assert scale_caveats(softer) == ["depends on scale: 'holds' on GPU, 'holds with caveats' on CPU"]


def test_never_the_narrower_interval():
    for cpu_spread, gpu_spread in ((1e-6, 0.5), (0.5, 1e-6)):
        runs = [cpu("holds", spread=cpu_spread), gpu("does not hold", spread=gpu_spread)]
        assert answering(runs).where == "GPU" and answer(runs).verdict == "does not hold"


def test_not_testable_here_on_one_side_is_no_disagreement():
    # the answering GPU study found the claim not testable: that is the verdict, the CPU's "holds" shown beside it
    untested_gpu = answer([cpu("holds"), gpu("not testable here")])
    assert untested_gpu.verdict == "not testable here" and scale_caveats(untested_gpu) == []
    assert "On CPU, which is the smaller scale, the verdict is 'holds'" in untested_gpu.summary
    untested_cpu = answer([cpu("not testable here"), gpu("does not hold")])
    assert untested_cpu.verdict == "does not hold" and scale_caveats(untested_cpu) == []
    # a run that could not measure the claim's cases at all (the speed chapter's GPU with no case timed) does not answer
    unmeasured = gpu("not testable here", registered=None, measured=False)
    assert answer([cpu("holds"), unmeasured]).evidence["decided_on"] == "CPU"


def test_at_one_scale_the_identifiable_code_answers_then_the_unchanged_then_the_first():
    dirty = Run("GPU b", _finding("holds"), scale=1, caveat="b: cannot be identified", identified=False)
    changed = Run("GPU c", _finding("holds"), scale=1, caveat="c: changed since")
    fresh = Run("GPU d", _finding("holds"), scale=1)
    assert answering([cpu("holds"), dirty, changed]).where == "GPU c"
    assert answering([cpu("holds"), dirty, changed, fresh]).where == "GPU d"
    twin = Run("GPU e", _finding("holds"), scale=1)
    assert answering([cpu("holds"), fresh, twin]).where == "GPU d"  # the order given: file name
    apart = [cpu("holds"), changed, Run("GPU b", _finding("does not hold"), scale=1, identified=False)]
    split = answer(apart)
    assert scale_caveats(split) == ["differs between runs at one scale: 'holds' on GPU c, 'does not hold' on GPU b"]
    assert "| yes | holds (runs differ) |" in side_by_side({"B9": (apart, split)})


def test_a_stale_run_carries_its_code_caveat_on_every_verdict_it_answers_or_qualifies():
    assert STALE in answer([cpu("holds"), gpu("holds", caveat=STALE)]).caveats  # it answers
    # below its pairs and agreeing: it shaped nothing, so no label
    assert STALE not in answer([cpu("holds"), gpu("holds", pairs=2, caveat=STALE)]).caveats
    # below its pairs and disagreeing: its "depends on scale" caveat rests on its code, so labelled
    assert STALE in answer([cpu("holds"), gpu("does not hold", pairs=2, caveat=STALE)]).caveats


def test_the_table_shows_every_run_and_which_answers():
    runs = [cpu("holds"), gpu("does not hold", pairs=8)]
    table = side_by_side({"A9": (runs, answer(runs))})
    rows = table.splitlines()[2:]
    assert rows[0].startswith("| A9 | CPU | holds |") and rows[0].endswith("| yes | holds (depends on scale) |")
    assert (
        rows[1].startswith("| A9 | GPU | does not hold |") and "| 8 of 16 |" in rows[1] and rows[1].endswith("|  |  |")
    )


def test_the_speed_chapters_two_bench_files_are_both_weighed_the_identifiable_one_first():
    committed = provenance.committed(paths.ROOT / "data")
    if {m.source for m in committed} != {"gpu-bench.json", "gpu-bench-2.json"}:
        pytest.skip("the committed bench files have changed")
    from normlab.analysis.speed import hardware

    live = hardware.as_measured(committed[0].frame.iloc[0:0])
    ranked = hardware.gpu_evidence(live, committed)
    assert [m.source for m in ranked] == ["gpu-bench.json", "gpu-bench-2.json"]  # '-dirty': cannot be identified
    assert not ranked[1].code_identified and "cannot be identified" in ranked[1].caveat
    weighed = hardware.weigh([(live, _finding("holds")), *((m, _finding("does not hold")) for m in ranked)])
    assert weighed.evidence["decided_on"] == "NVIDIA H200 [gpu-bench.json]" and weighed.verdict == "does not hold"
    assert set(weighed.evidence["by_run"]) == {"this run", "NVIDIA H200 [gpu-bench.json]",
                                               "NVIDIA H200 [gpu-bench-2.json]"}  # fmt: skip
    if ranked[0].caveat:  # with this checkout's git history: the kernels changed since 12a0522
        assert any(c.startswith("gpu-bench.json (NVIDIA H200): measured at 12a0522") for c in weighed.caveats)
    # the dirty file agrees with the one that answers, so it shapes nothing and adds no label
    assert not any(c.startswith("gpu-bench-2.json") for c in weighed.caveats)
