"""The landscape chapter weighs a committed GPU study: V2, V3 and V4 judged by the chapter's own rules on the
study's runs, combined with this run's findings by the one rule for several runs (normlab.analysis.shared.scale_rule).

The synthetic studies are the GPU study's own experiments (`normlab.gpt.experiments`, tiny profile), their
records filled with outcomes whose verdicts are known, written to a temporary data folder and read back through
`gpu_study.committed`; this run's side is the chapter's functions on the hand-made runs of test_findings_landscape."""

from __future__ import annotations

import json

from normlab.analysis.landscape.curse_of_depth import depth_claim
from normlab.analysis.landscape.gpu import _trains_wide_grid, gpu_landscape, landscape_gpu_claims
from normlab.analysis.landscape.placement import placement_claim, placement_measures
from normlab.analysis.landscape.profiles import profile_settings
from normlab.analysis.landscape.qk_norm import final_logits, qk_claim
from normlab.analysis.shared import gpu_study as G
from normlab.gpt import experiments as E
from normlab.gpt.corpus import load_corpus
from normlab.study.findings import Finding
from test_findings_landscape import CORPUS, make_runs, study_of
from test_gpu_study import _study, _write, carry  # noqa: F401  (carry: the fixture, used by name)

RULES = dict(
    loss_margin=0.03,
    usable_tolerance=0.25,
    pre_growth_needed=2.0,
    max_relative_growth=0.5,
    curse_share=0.35,
    qk_min_seeds=5,
    qk_sensitivity_margin=0.03,
    share_margin=0.05,
)
WHERE = "this run"


def cpu_findings(runs) -> dict:
    """This run's V1-V4 as the chapter judges them (V1 is not weighed, so any finding stands in for it)."""
    study = study_of(runs)
    placement = placement_measures(study)
    return {
        "V1": Finding("not testable here", "V1 on this run.", {}, None, 0.03, None),
        "V2": placement_claim(study, placement, pre_growth_needed=2.0, max_relative_growth=0.5),
        "V3": qk_claim(study, final_logits(study), min_seeds=5, sensitivity_margin=0.03),
        "V4": depth_claim(study, curse_share=0.35),
    }


def stream(depth: int, growth: float, step: int) -> list:
    """Hidden RMS after each block at the end, rising linearly from 1 after the first block to `growth` after the last."""
    return [(step, 0, 0.5)] + [
        (step, layer, 1.0 + (growth - 1.0) * (layer - 1) / (depth - 1)) for layer in range(1, depth + 1)
    ]


def outcome(experiment: E.Experiment, *, growth=None, drop_one=None) -> dict:
    """An experiment's records in the GPU study's format, with the outcome functions of the tag."""
    runs = []
    for batch in experiment.batches:
        for config, tag in zip(batch.configs, batch.tags):
            steps = batch.train.steps
            final = 2.0 + 0.001 * tag["seed"]
            record = {
                "tag": tag,
                "model": config.to_dict(),
                "train": {"steps": steps, "batch_size": batch.train.batch_size, "lr": tag["lr"], "seed": tag["seed"]},
                "final_val_loss": final,
                "initial_val_loss": 5.5,
                "final_drop": 0.001,
                "diverged": False,
                "steps_done": steps,
                "val": [(0, 5.5), (steps, final)],
                "corpus_sha256": CORPUS.sha256,
            }
            if batch.stream_statistics:
                record["stream_rms"] = stream(config.depth, growth(tag) if growth else 2.0, steps)
            if batch.drop_one:
                record["drop_one"] = drop_one(tag)
            runs.append(record)
    return {"claims": list(experiment.claims), "settings": experiment.settings, "runs": runs, "seconds": 1.0}


def commit(folder, experiments: dict) -> list:
    """A synthetic study with these experiments (the others listed as missing), read back as the chapter reads it."""
    document = {
        "schema": G.SCHEMA,
        "profile": "tiny",
        "hardware": {"gpu": "Synthetic GPU"},
        "versions": {"torch": "0"},
        "git_commit": "a" * 40,
        "started": "2025-01-01T00:00:00+00:00",
        "finished": "2025-01-01T00:01:00+00:00",
        "corpus": {"sha256": CORPUS.sha256},
        "experiments": experiments,
        "missing": [name for name in E.EXPERIMENTS if name not in experiments],
        "failed": {},
    }
    _write(folder, document)
    return G.committed(folder, corpus_sha256=CORPUS.sha256, known=lambda commit: commit == "a" * 40)


def tiny_landscape(**changes) -> dict:
    return {**E.PROFILES["tiny"]["landscape"], **changes}


def weigh(studies, cpu, **registered):
    return landscape_gpu_claims(studies, CORPUS, cpu, where=WHERE, **RULES, **registered)


def test_the_gpu_answers_v4_when_its_runs_reach_the_registered_seeds(tmp_path):
    def drop_one(tag, spread):  # 1/√l lifts the later half's share from about 0.2 to about 0.4
        noise = spread * tag["seed"]
        return [0.6, 0.2, 0.1, 0.1] if tag["label"] == "pre" else [0.4, 0.2, 0.2 + noise, 0.2]

    cpu = cpu_findings(make_runs(drop_one=lambda tag: drop_one(tag, 0.3)))  # 2 seeds, a wide interval
    settings = tiny_landscape(seeds=8)
    gpu_outcome = outcome(E.depth_scaling(settings, "cpu"), drop_one=lambda tag: drop_one(tag, 0.002))
    studies = commit(tmp_path, {"depth_scaling": gpu_outcome})
    weighed, text = weigh(studies, cpu)
    own = depth_claim(gpu_landscape(gpu_outcome, CORPUS, loss_margin=0.03, usable_tolerance=0.25), curse_share=0.35)
    assert own.verdict == "holds"
    v4 = weighed["V4"]
    assert v4.evidence["by_run"][studies[0].label]["pairs"] == 8 >= G.registered_pairs()["V4"]
    assert v4.evidence["decided_on"] == studies[0].label and v4.verdict == "holds"
    assert v4.evidence["by_run"][WHERE]["verdict"] == cpu["V4"].verdict
    assert "| V4 | Synthetic GPU" in text and f"| V4 | {WHERE} |" in text
    # registered at more seeds than the study trained, this run answers and the study is still shown
    short, text = weigh(studies, cpu, registered={"V4": 9})
    assert short["V4"].evidence["decided_on"] == WHERE and short["V4"].verdict == cpu["V4"].verdict
    assert "| V4 | Synthetic GPU" in text and "| 8 of 9 |" in text


def test_a_gpu_does_not_hold_on_v2_is_a_depends_on_scale_caveat_whichever_run_answers(tmp_path):
    top = max(profile_settings("smoke")["deep_lr_grid"])

    def diverged(tag):  # pre-LN alone fails at the top of the grid: the output-normalising ranges are strictly wider
        return tag["scale"] == "deep" and tag["label"] == "pre" and tag["lr"] == top

    def cpu_growth(tag):
        return 3.0 if tag.get("placement", tag["label"]) == "pre" else 1.2 + 0.001 * tag["seed"]

    cpu = cpu_findings(make_runs(growth=cpu_growth, diverged=diverged))
    assert cpu["V2"].verdict == "holds"

    def gpu_growth(tag):  # relative growth 0.8 and 0.9 over the two seeds: more than the 0.5 allowed
        return 3.0 if tag["label"] == "pre" else 2.4 + 0.3 * tag["seed"]

    gpu_outcome = outcome(E.placements(tiny_landscape(), "cpu"), growth=gpu_growth)
    studies = commit(tmp_path, {"placements": gpu_outcome})
    weighed, text = weigh(studies, cpu)
    gpu = gpu_landscape(gpu_outcome, CORPUS, loss_margin=0.03, usable_tolerance=0.25)
    own = placement_claim(gpu, placement_measures(gpu), pre_growth_needed=2.0, max_relative_growth=0.5)
    assert own.verdict == "does not hold"
    label = studies[0].label
    scale = f"depends on scale: 'holds' on {WHERE}, 'does not hold' on {label}"
    v2 = weighed["V2"]
    assert v2.evidence["by_run"][label]["verdict"] == "does not hold"
    # the tiny study has 2 of the 4 seeds the GPU design registers: this run answers, its "holds" unsoftened
    assert v2.evidence["decided_on"] == WHERE and v2.verdict == "holds" and scale in v2.caveats
    assert "| V2 | Synthetic GPU" in text
    # registered at its 2 seeds, the study answers: its "does not hold" stands, with the same caveat the other way
    answered, _ = weigh(studies, cpu, registered={"V2": 2})
    assert answered["V2"].evidence["decided_on"] == label and answered["V2"].verdict == "does not hold"
    assert f"depends on scale: 'does not hold' on {label}, 'holds' on {WHERE}" in answered["V2"].caveats


def test_a_missing_experiment_is_reported_as_missing(tmp_path):
    cpu = cpu_findings(make_runs())
    studies = commit(tmp_path, {"placements": outcome(E.placements(tiny_landscape(), "cpu"))})
    weighed, text = weigh(studies, cpu)
    assert weighed["V3"] is cpu["V3"] and weighed["V4"] is cpu["V4"] and weighed["V1"] is cpu["V1"]
    assert "V4: not measured on GPU" in text and "`depth_scaling` experiment (listed as missing)" in text
    assert "V3: not measured on GPU" in text and "V1: not measured on GPU: it did not finish the `width`" in text
    assert weighed["V2"].evidence["decided_on"] in (WHERE, studies[0].label)


def test_without_a_committed_study_the_verdicts_stand_in_one_sentence():
    cpu = cpu_findings(make_runs())
    weighed, text = weigh([], cpu)
    assert all(weighed[claim] is cpu[claim] for claim in cpu)
    assert text.startswith("No GPU study is committed") and text.count(". ") == 0


def test_the_tiny_study_feeds_the_chapter_and_v1_names_what_it_lacks(carry, tmp_path):  # noqa: F811
    output = tmp_path / "gpu-study.json"
    done = _study(
        "--profile",
        "tiny",
        "--device",
        "cpu",
        "--carry",
        str(carry),
        "--output",
        str(output),
        "--only",
        "depth_scaling,width",
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(output.read_text())
    corpus = load_corpus()
    study = G.GpuStudy(document, "gpu-study.json")
    cpu = cpu_findings(make_runs())
    weighed, text = landscape_gpu_claims([study], corpus, cpu, where=WHERE, **RULES)
    gpu = gpu_landscape(document["experiments"]["depth_scaling"], corpus, loss_margin=0.03, usable_tolerance=0.25)
    own = depth_claim(gpu, curse_share=0.35)
    assert weighed["V4"].evidence["by_run"][study.label]["verdict"] == own.verdict
    # the study's width experiment trains no wide learning-rate grid, so V3's registered protocol is not weighed on it
    assert "V3: not weighed on GPU" in text and "V2: not measured on GPU" in text
    assert weighed["V3"] is cpu["V3"]
    assert "V1: not measured on GPU: its width experiment trains no RMSNorm under the authors' AdamW" in text
    assert "DyT by the authors' recipe" in text


def test_a_gpu_width_experiment_counts_for_v3_only_with_the_whole_wide_grid():
    settings = {"qk_lr_grid": [0.01, 1.0], "qk_seeds": 2}
    runs = [
        {"tag": {"label": label, "lr": lr, "seed": s}}
        for label in ("rms", "rms+qk")
        for lr in (0.01, 1.0)
        for s in (0, 1)
    ]
    assert _trains_wide_grid({"settings": settings, "runs": runs})
    assert not _trains_wide_grid({"settings": settings, "runs": runs[1:]})
    assert not _trains_wide_grid({"settings": {}, "runs": runs})
