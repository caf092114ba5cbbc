"""A training chapter given runs that failed every attempt: the pairs that lost a run are left out, the verdicts
are computed from the complete pairs while the registered pairs are met (and are "not testable here" otherwise),
and the page and the Finding's caveats name the missing runs."""

from dataclasses import replace

import pandas as pd
import pytest

from normlab.analysis.quality import loss_parity, profiles, training
from normlab.analysis.shared.missing_runs import PairsLeft, RunGaps, complete_rows, judged, registered_pairs
from normlab.gpt.corpus import load_corpus
from normlab.runtime.parallel import run_parallel
from normlab.study import Results

MARGIN = 0.02
RESUME = {"difference": 0.0, "matches": True}


def fake_run(norm: str, seed: int) -> dict:
    """A run record whose RMSNorm − LayerNorm difference is a few thousandths, well inside the margin."""
    final = 2.0 + 0.01 * seed + (0.001 * ((7 * seed) % 3 - 1) if norm == "rms" else 0.0)
    return {
        "final_val_loss": final,
        "val": [(0, 5.5), (10, final + 0.1), (20, final)],
        "diverged": False,
        "final_drop": 0.01,
    }


def lose_runs(monkeypatch, lost: set[tuple[str, int]]) -> None:
    """The chapter's trainings in this process, each of `lost` failing every attempt (a node lost each time)."""

    def fake_job(model, train, keep_weights):
        if (model["norm"], train["seed"]) in lost:
            raise RuntimeError("the node training it was lost")
        return fake_run(model["norm"], train["seed"])

    monkeypatch.setattr(training, "train_job", fake_job)
    monkeypatch.setattr(training, "run_parallel", lambda f, jobs, **kw: run_parallel(f, jobs, workers=1, **kw))


def a9_of(runs, settings) -> tuple:
    parity = loss_parity.loss_parity(runs, MARGIN)
    left = PairsLeft(runs.gaps, len(parity.final["rms"]), registered_pairs(settings["seeds"], profiles.PAIRS["seeds"]))
    common = {"steps": settings["steps"], "pairs": left.pairs}
    return left.judge(loss_parity.a9_finding(parity, MARGIN, common, RESUME)), left


def test_a_missing_run_leaves_its_pair_out_and_is_named(monkeypatch):
    lose_runs(monkeypatch, {("rms", 2)})
    settings = {**profiles.settings_for("smoke"), "trainer": "pool", "seeds": 4, "first_seed": 0}
    runs = training.train_pairs(settings, None, keep_weights=False)
    assert list(runs) == [(norm, seed) for seed in (0, 1, 3) for norm in profiles.NORMS]
    assert runs.gaps.names == ("rms seed 2",)
    assert runs.gaps.caveat == "1 run failed in this process and is missing: rms seed 2"


def test_with_the_registered_pairs_met_the_verdict_comes_from_the_complete_pairs_with_a_caveat(monkeypatch, tmp_path):
    lose_runs(monkeypatch, {("rms", 3), ("layer", 3)})
    settings = {**profiles.settings_for("smoke"), "trainer": "pool", "seeds": 9, "first_seed": 0}
    runs = training.train_pairs(settings, None, keep_weights=False)
    a9, left = a9_of(runs, settings)
    whole = loss_parity.a9_finding(loss_parity.loss_parity(runs, MARGIN), MARGIN, {"steps": 1}, RESUME)  # unjudged
    assert (left.pairs, left.registered) == (8, 5)
    assert a9.verdict == whole.verdict == "holds"  # measured on the 8 complete pairs, inside the margin
    assert a9.caveats == ("2 runs failed in this process and are missing: layer seed 3, rms seed 3",)
    results = Results("quality", "smoke", tmp_path)
    # a trained claim's record carries its arms beside the entropy (the did-it-train rule keeps the caveats as they are)
    arms = loss_parity.arm_losses(loss_parity.loss_parity(runs, MARGIN), load_corpus().unigram_entropy_nats, "smoke")
    assert replace(a9, arms=arms).record(results, "A9", "quality-parity")["caveats"] == list(a9.caveats)
    paragraph = left.paragraph()
    assert "layer seed 3, rms seed 3" in paragraph and "stand on the 8 complete pairs" in paragraph


def test_below_the_registered_pairs_the_verdict_is_not_testable_here(monkeypatch):
    lose_runs(monkeypatch, {("layer", 1)})
    settings = {**profiles.settings_for("smoke"), "trainer": "pool", "seeds": 5, "first_seed": 0}
    runs = training.train_pairs(settings, None, keep_weights=False)
    a9, left = a9_of(runs, settings)
    assert (left.pairs, left.registered) == (4, 5)
    assert a9.verdict == "not testable here"
    assert a9.summary.startswith("Not testable here: only 4 complete pairs remain of the 5 registered.")
    assert a9.evidence["missing_runs"] == ["layer seed 1"] and a9.caveats == (runs.gaps.caveat,)
    assert "not testable here" in left.paragraph()


def test_without_missing_runs_a_finding_is_unchanged():
    finding = loss_parity.a9_finding(
        loss_parity.loss_parity({(n, s): fake_run(n, s) for s in range(3) for n in profiles.NORMS}, MARGIN),
        MARGIN,
        {"steps": 1},
        RESUME,
    )
    assert judged(finding, RunGaps(), pairs=0, registered=5) is finding
    assert PairsLeft(RunGaps(), 3, 3).paragraph() == "" and RunGaps().caveat is None


@pytest.mark.parametrize(("designed", "least", "registered"), [(24, 5, 5), (3, 5, 3)])
def test_a_pilot_design_with_fewer_pairs_than_the_least_registers_all_of_them(designed, least, registered):
    assert registered_pairs(designed, least) == registered


def test_complete_rows_keeps_the_seeds_that_hold_every_variant():
    frame = pd.DataFrame({"seed": [0, 0, 1, 2, 2], "config": ["a", "b", "a", "a", "b"]})
    assert complete_rows(frame, "seed", "config", ["a", "b"])["seed"].tolist() == [0, 0, 2, 2]


def test_the_depth_chapter_leaves_out_the_pairs_and_sweep_points_that_lost_a_run(monkeypatch):
    from types import SimpleNamespace

    from normlab.analysis.depth import profiles as depth_profiles
    from normlab.analysis.depth import training_at_depth
    from normlab.analysis.shared import runs as shared_runs
    from normlab.runtime import parallel

    lost = {("post", "layer", 1, None), ("pre", "rms", 0, 0.01)}

    def fake_job(model, train):
        lr = None if train.get("warmup_steps") else train["lr"]
        if "mlp" not in model and (model["placement"], model["norm"], train["seed"], lr) in lost:  # not the ablation
            raise RuntimeError("the node training it was lost")
        return {"final_val_loss": 2.0, "diverged": False, "initial_val_loss": 5.5, "final_drop": 0.0, "steps_done": 1}

    real = parallel.run_parallel
    monkeypatch.setattr(shared_runs, "train_job", fake_job)
    monkeypatch.setattr(parallel, "run_parallel", lambda f, jobs, **kw: real(f, jobs, workers=1, **kw))
    settings = {**depth_profiles.settings_for("smoke"), "seeds": 3, "stress_lrs": [0.01]}
    study = training_at_depth.training_study(settings, SimpleNamespace(unigram_entropy_nats=4.0))
    assert sorted(study.paired["seed"].unique()) == [0, 2]  # seed 1 lost its post-LN LayerNorm run
    assert 0.01 not in set(study.no_warmup["lr"]) and len(study.no_warmup) == 4  # one lr left, all four models
    assert study.left.gaps.names == ("paired post-layer seed 1", "no warm-up pre-rms lr 0.01")
    assert (study.left.pairs, study.left.registered) == (2, 3) and not study.ablation_left.gaps
    assert study.left.judge(FINDING).verdict == "not testable here"
    assert study.ablation_left.judge(FINDING) is FINDING


FINDING = loss_parity.a9_finding(
    loss_parity.loss_parity({(n, s): fake_run(n, s) for s in range(3) for n in profiles.NORMS}, MARGIN),
    MARGIN,
    {"steps": 1},
    RESUME,
)


def gain_runs_losing(monkeypatch, lost: set[str]):
    from normlab.analysis.gain import runs as gain_runs
    from normlab.gpt.model import GPT, GPTConfig
    from normlab.runtime.jobs import save_weights

    def fake_job(model, train, keep_weights=False, history_columns=()):
        name = (
            f"gain decay {train['gain_weight_decay']:g} seed {train['seed']}" if history_columns else model["placement"]
        )
        if name in lost:
            raise RuntimeError("the node training it was lost")
        if keep_weights:
            return {"weights_path": save_weights(GPT(GPTConfig(**model)).state_dict())}
        return {"final_val_loss": 2.0, "history": {}, "final_drop": 0.0}

    monkeypatch.setattr(gain_runs, "train_job", fake_job)
    monkeypatch.setattr(gain_runs, "run_parallel", lambda f, jobs, **kw: run_parallel(f, jobs, workers=1, **kw))
    return gain_runs


def test_the_gain_sweep_leaves_out_a_seed_that_lost_a_run_and_names_it(monkeypatch):
    from normlab.analysis.gain import profiles as gain_profiles

    gain_runs = gain_runs_losing(monkeypatch, {"gain decay 30 seed 1"})
    settings = {**gain_profiles.profile_settings("smoke"), "seeds": 3}
    gpt, sweep = gain_runs.train_models(settings)
    assert set(gpt) == {"pre", "post"} and list(sweep) == [(0.0, 0), (30.0, 0), (0.0, 2), (30.0, 2)]
    left = gain_runs.sweep_left(sweep, settings)
    assert left.gaps.names == ("gain decay 30 seed 1",) and (left.pairs, left.registered) == (2, 3)


def test_without_a_kept_model_the_gain_chapter_stops_naming_it(monkeypatch):
    from normlab.analysis.gain import profiles as gain_profiles
    from normlab.runtime.parallel import MissingRuns

    gain_runs = gain_runs_losing(monkeypatch, {"post"})
    with pytest.raises(MissingRuns, match="post-LN kept model"):
        gain_runs.train_models(gain_profiles.profile_settings("smoke"))


def test_the_landscape_compares_the_complete_pairs_and_makes_a_claim_that_lost_a_run_not_testable(monkeypatch):
    from normlab.analysis.landscape import runs as landscape_runs
    from normlab.runtime.parallel import JobResults, MissingRun
    from test_findings_landscape import make_runs, settings, study_of

    P = {**settings(), "seeds": 3}
    jobs = landscape_runs.landscape_jobs(P)
    lost_tag = dict(scale="small", label="rms+qk", lr=P["small_train"]["lr"], seed=0)

    def lose_one(function, batch, names, **kwargs):
        outputs = [
            MissingRun(name, ("RuntimeError: lost",))
            if {k: job["tag"][k] for k in lost_tag} == lost_tag
            else {"tag": job["tag"], "corpus_sha256": "a"}
            for job, name in zip(batch, names)
        ]
        return JobResults(outputs, names, [None] * len(batch), "on the cluster")

    monkeypatch.setattr(landscape_runs, "run_parallel", lose_one)
    placed = landscape_runs.run_jobs(jobs, P)
    lost = [r for r in placed if "missing" in r]
    assert [(r["missing"], r["where"]) for r in lost] == [("small rms+qk lr 0.01 seed 0", "on the cluster")]

    runs = [lost[0] if r["tag"] == lost[0]["tag"] else r for r in make_runs(P=P)]
    study = study_of(runs, P)
    assert study.versus("small", "rms", "rms+qk")["pairs"] == 2  # seeds 1 and 2: seed 0 lost its rms+qk run
    assert ("rms+qk", 0) not in study.ranges("small", ("rms", "rms+qk"))  # a grid with a hole has no range
    assert study.gaps("V3").names == ("small rms+qk lr 0.01 seed 0",) and not study.gaps("V2")
    assert study.judge("V2", FINDING) is FINDING
    v3 = study.judge("V3", FINDING)
    assert v3.verdict == "not testable here" and v3.caveats[-1].startswith("1 run failed on the cluster")
    assert "small rms+qk lr 0.01 seed 0" in study.missing_paragraph()
