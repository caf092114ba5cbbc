"""The torch-only GPU study (normlab.study.gpu) at its tiny size on the CPU, and the chapters' weighing of a
committed study (normlab.analysis.shared.gpu_study) with a synthetic file written to a temporary data folder."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from normlab.analysis.quality import committed_gpu
from normlab.analysis.shared import gpu_study as G
from normlab.gpt import experiments as E
from normlab.gpt.corpus import load_corpus, load_saved_corpus, save_corpus
from normlab.runtime.code_identity import FINGERPRINT_KEY, loaded_source
from normlab.study.findings import Finding
from normlab.study.results import LedgerError

ROOT = Path(__file__).resolve().parents[1]
HIDDEN = ("pandas", "tqdm", "matplotlib", "seaborn", "papermill", "transformers", "scipy")
BLOCKER = f"""
import importlib.machinery, sys
_find = importlib.machinery.PathFinder.find_spec
def _hidden(name, path=None, target=None):
    return None if name.split(".")[0] in {HIDDEN!r} else _find(name, path, target)
importlib.machinery.PathFinder.find_spec = _hidden
from normlab.study.gpu import main
sys.exit(main(sys.argv[1:]))
"""


def _study(*args: str) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-c", BLOCKER, *args], capture_output=True, text=True, timeout=600, env=env, cwd=ROOT
    )


@pytest.fixture(scope="module")
def carry(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("carry")
    save_corpus(load_corpus(), folder, git_commit="0" * 40)
    return folder


@pytest.fixture(scope="module")
def tiny(carry, tmp_path_factory) -> dict:
    """The tiny profile's quality experiment, run without pandas or tqdm, as the GPU machine runs it."""
    output = tmp_path_factory.mktemp("out") / "gpu-study.json"
    done = _study(
        "--profile", "tiny", "--device", "cpu", "--carry", str(carry), "--output", str(output), "--only", "quality"
    )
    assert done.returncode == 0, done.stderr
    assert "[gpu-study] quality (A9, B7)" in done.stderr and "quality done in" in done.stderr
    return json.loads(output.read_text())


def test_the_study_runs_torch_only_and_writes_its_provenance(tiny):
    assert tiny["schema"] == G.SCHEMA and tiny["profile"] == "tiny" and tiny["finished"]
    assert tiny["missing"] == [] and tiny["failed"] == {}
    assert tiny["corpus"]["sha256"] == load_corpus().sha256
    assert tiny["git_commit"] and tiny["versions"]["torch"] and "cpu" in tiny["hardware"]
    assert "study/gpu.py" in tiny[FINGERPRINT_KEY] and "gpt/model.py" in tiny[FINGERPRINT_KEY]  # the code it trained
    quality = tiny["experiments"]["quality"]
    assert quality["seconds"] > 0 and quality["models"] == 2 * E.PROFILES["tiny"]["quality"]["seeds"]
    run = quality["runs"][0]
    assert {"final_val_loss", "val", "diverged", "final_drop"} <= set(run) and run["tag"]["norm"] in ("layer", "rms")


def test_models_that_do_not_fit_are_refused_before_training(carry, tmp_path):
    output = tmp_path / "study.json"
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
        "quality",
        "--memory-limit-gib",
        "0.00001",
    )
    assert done.returncode == 2 and "at most K=" in done.stderr and "'quality'" in done.stderr, done.stderr
    assert not output.exists()


def test_a_changed_carried_corpus_is_refused(carry, tmp_path):
    for name in ("corpus.json", "corpus.bin"):
        (tmp_path / name).write_bytes((carry / name).read_bytes())
    data = bytearray((tmp_path / "corpus.bin").read_bytes())
    data[10] ^= 1
    (tmp_path / "corpus.bin").write_bytes(bytes(data))
    with pytest.raises(ValueError, match="corpus.bin.*make gpu-carry"):
        load_saved_corpus(tmp_path)


def test_the_gpu_profile_is_sized_within_the_budget():
    total = sum(row["seconds"] for row in E.sizing("gpu"))
    assert total <= E.PLANNED_SHARE * E.GPU_BUDGET_SECONDS
    quality = E.PROFILES["gpu"]["quality"]
    assert quality["seeds"] >= 16 and quality["width"] >= 256 and quality["depth"] >= 8 and quality["steps"] >= 2000


# ---- the committed file's checks -----------------------------------------------------------------------------


def _write(folder: Path, document: dict, name: str = "gpu-study.json") -> Path:
    path = folder / name
    path.write_text(json.dumps(document))
    return path


def test_bad_committed_files_are_refused_naming_the_file(tiny, tmp_path):
    known = lambda commit: commit == tiny["git_commit"]  # noqa: E731
    path = _write(tmp_path, tiny)
    path.write_text(path.read_text()[:200])
    with pytest.raises(LedgerError, match="gpu-study.json: not valid JSON.*truncated"):
        G.committed(tmp_path, known=known)
    for change, message in (
        ({"schema": "other/1"}, "schema 'other/1'"),
        ({"profile": "huge"}, "profile 'huge' is not one"),
        ({"git_commit": "f" * 40}, "does not have"),
    ):
        _write(tmp_path, {**tiny, **change})
        with pytest.raises(LedgerError, match=message):
            G.committed(tmp_path, known=known)
    _write(tmp_path, tiny)
    with pytest.raises(LedgerError, match="not the same text"):
        G.committed(tmp_path, corpus_sha256="a" * 64, known=known)
    assert G.committed(tmp_path, corpus_sha256=tiny["corpus"]["sha256"], known=known)[0].source == "gpu-study.json"


def test_an_unknown_commit_is_checked_with_git():
    assert not G.commit_known("f" * 40)


def test_the_quality_chapter_weighs_a_committed_study_with_its_own_rule(tiny, tmp_path):
    pd = pytest.importorskip("pandas")
    from normlab.analysis.quality import loss_parity

    study = G.GpuStudy(tiny, "gpu-study.json")
    runs = committed_gpu._quality_runs(tiny["experiments"]["quality"])
    parity = loss_parity.loss_parity(runs, 0.02)
    timings = pd.DataFrame([{"model": m, "repeat": i, "step_time": 0.01} for m in ("layer", "rms") for i in range(3)])
    speed = {"ratio": 0.97, "spread": 0.01}
    cpu = dict(
        margin=0.02,
        visible=0.95,
        backend="torch",
        timings=timings,
        speed=speed,
        parity=parity,
        resume={"difference": 0.0, "matches": True},
        where="CPU",
    )
    a9 = Finding("does not hold", "cpu.", {}, 0.1, 0.02, 0.01)
    b7 = Finding("not testable here", "cpu.", {}, 0.97, 0.95, 0.01)
    pairs = E.PROFILES["tiny"]["quality"]["seeds"]
    new_a9, new_b7, table = committed_gpu.quality_claims([study], a9, b7, cpu)
    expected = loss_parity.final_loss_verdict(parity)[0]
    assert new_a9.evidence["by_run"][study.label]["verdict"] == expected  # the chapter's own rule on the GPU runs
    # the tiny study has 3 of the 16 pairs the GPU design registers: this run answers, the study shown beside it
    assert new_a9.evidence["decided_on"] == "CPU" and new_a9.evidence["by_run"][study.label]["pairs"] == pairs
    assert "| A9 |" in table and "| B7 |" in table and study.label in table and f"| {pairs} of 16 |" in table
    # registered at the tiny study's own pairs, it answers
    answered, _, _ = committed_gpu.quality_claims([study], a9, b7, cpu, registered={"A9": pairs, "B7": pairs})
    assert answered.evidence["decided_on"] == study.label and answered.verdict == expected
    same_a9, _, sentence = committed_gpu.quality_claims([], a9, b7, cpu)
    assert "No GPU study is committed" in sentence
    # this run's verdict unchanged, with the opening page's sentence written from it
    assert replace(same_a9, headline=None) == a9 and same_a9.headline == loss_parity.a9_headline(a9)


# ---- the depth chapter (B17, B18, B19) ------------------------------------------------------------------------

DEPTH_CORPUS = SimpleNamespace(unigram_entropy_nats=5.0, sha256="c" * 64)
DEPTH_RULES = dict(b17_rule=dict(spread_limit=10.0, bound_slack=0.25), b18_rule=dict(ratio_drop=0.1, cosine_rise=0.02))


def _run(tag: dict, final: float) -> dict:
    return {"tag": tag, "final_val_loss": final, "initial_val_loss": 5.5, "val": [[0, 5.5], [300, final]],
            "diverged": False, "final_drop": 0.001, "steps_done": 300}  # fmt: skip


def _depth_document(post_rms_shift: float, noise: float, ablation_labels=tuple(E.ABLATION_SWAPS)) -> dict:
    """A study whose post-RMSNorm runs lose `post_rms_shift` nats against post-LayerNorm (± `noise` by seed) at
    24 and 48 blocks, with no-warm-up runs at 24 only, and an ablation whose double swap adds up exactly."""
    seeds = range(8)
    runs = []
    for depth in (24, 48):
        for seed in seeds:
            for placement in ("pre", "post"):
                for norm in ("rms", "layer"):
                    loss = 2.0 + 0.01 * seed
                    if (placement, norm) == ("post", "rms"):
                        loss += post_rms_shift + noise * (-1) ** seed
                    tag = dict(depth=depth, setting="paired", label=f"{placement}-{norm}", placement=placement,
                               norm=norm, seed=seed)  # fmt: skip
                    runs.append(_run(tag, loss))
        if depth == 24:
            for placement in ("pre", "post"):
                for norm in ("rms", "layer"):
                    tag = dict(depth=depth, setting="no warm-up", label=f"{placement}-{norm}", placement=placement,
                               norm=norm, seed=0, lr=1e-2)  # fmt: skip
                    runs.append(_run(tag, 2.5))
    effect = {"llama": 0.0, "rms→layer": 0.05, "pre→post": 0.03, "rms→layer + pre→post": 0.08}
    ablation = [
        _run({"label": label, **E.ABLATION_SWAPS[label], "seed": seed}, 2.0 + 0.1 * seed + effect[label] + 0.001 * seed)
        for label in ablation_labels
        for seed in seeds
    ]
    return {
        "schema": G.SCHEMA, "profile": "gpu", "hardware": {"gpu": "Test GPU"}, "versions": {"torch": "x"},
        "git_commit": "0" * 40, "started": "2026-12-01T00:00:00+00:00", "corpus": {"sha256": DEPTH_CORPUS.sha256},
        "missing": [],
        "experiments": {
            "placement_depth": {"settings": {}, "runs": runs},
            "ablation": {"settings": {"depth": 8, "steps": 300, "seeds": 8}, "runs": ablation},
        },
    }  # fmt: skip


def _pair_finding(verdict: str, key: str, half_width: float) -> Finding:
    pair = {"half_width": half_width, "margin": 0.02, "mean_difference": 0.0}
    return Finding(verdict, f"CPU says {verdict}.", {key: pair}, 0.0, 0.02, half_width / 2)


def _depth_weighed(tmp_path, document: dict, name: str = "gpu-study.json", **cpu: Finding):
    from normlab.analysis.depth import committed_gpu
    from test_findings_depth import synthetic_init

    _write(tmp_path, document, name)
    studies = G.committed(tmp_path, corpus_sha256=DEPTH_CORPUS.sha256, known=lambda commit: True)
    mine = {
        "B17": _pair_finding("holds", "paired_pre_minus_post_rms", 0.05),
        "B18": _pair_finding("not testable here", "paired_post_rms_minus_layer", 0.05),
        "B19": _pair_finding("not testable here", "interaction", 0.05),
        **cpu,
    }
    weighed, text = committed_gpu.depth_claims(
        studies, mine, init=synthetic_init(), settings={"init_seeds": [0, 1]}, margin=0.02, corpus=DEPTH_CORPUS,
        where="CPU", **DEPTH_RULES,
    )  # fmt: skip
    return studies[0], mine, weighed, text


def test_the_depth_chapter_lets_a_gpu_study_that_meets_its_pairs_answer(tmp_path):
    study, mine, weighed, text = _depth_weighed(tmp_path, _depth_document(post_rms_shift=0.06, noise=0.002))
    b18 = weighed["B18"]
    assert b18.evidence["decided_on"] == study.label and b18.evidence["train_depth"] == 48  # the deepest depth
    assert b18.verdict == b18.evidence["by_run"][study.label]["verdict"] == "holds"  # worse beyond the margin
    assert b18.evidence["by_run"][study.label]["pairs"] == 8 == G.registered_pairs()["B18"]
    assert b18.evidence["by_run"]["CPU"]["verdict"] == "not testable here"
    assert not [c for c in b18.caveats if c.startswith("depends on scale")]  # "not testable here" is no verdict
    assert weighed["B17"].evidence["train_depth"] == 24  # the no-warm-up runs are at 24 blocks only
    assert "| B18 | Test GPU" in text and "judged at 48 blocks" in text and "at 24 blocks" in text
    # the ablation has 8 of the 12 pairs the design registers: this run answers B19, the study shown beside it
    b19 = weighed["B19"]
    assert b19.evidence["decided_on"] == "CPU" and b19.evidence["by_run"][study.label]["registered_pairs"] == 12


def test_a_gpu_does_not_hold_against_a_cpu_holds_stands_with_a_depends_on_scale_caveat(tmp_path):
    narrow = _pair_finding("holds", "paired_post_rms_minus_layer", 0.001)  # however narrow this run's interval
    study, mine, weighed, text = _depth_weighed(tmp_path, _depth_document(0.0, noise=0.004), B18=narrow)
    b18 = weighed["B18"]
    assert b18.evidence["by_run"][study.label]["verdict"] == "does not hold"  # the GPU interval sits inside ±0.02
    assert b18.evidence["decided_on"] == study.label and b18.verdict == "does not hold"
    assert f"depends on scale: 'does not hold' on {study.label}, 'holds' on CPU" in b18.caveats
    assert "(depends on scale)" in text
    # the reverse: a GPU "holds" against a CPU "does not hold" is treated alike
    against = _pair_finding("does not hold", "paired_post_rms_minus_layer", 0.001)
    study, _, weighed, _ = _depth_weighed(tmp_path, _depth_document(0.06, noise=0.002), B18=against)
    assert weighed["B18"].verdict == "holds"
    assert f"depends on scale: 'holds' on {study.label}, 'does not hold' on CPU" in weighed["B18"].caveats


def test_a_tiny_study_is_refused_outside_the_tests(tmp_path, monkeypatch):
    path = _write(tmp_path, {**_depth_document(0.06, 0.002), "profile": "tiny"})
    assert G.load(path, known=lambda commit: True).document["profile"] == "tiny"  # the tests accept it
    monkeypatch.delenv(G.ACCEPT_TINY)
    with pytest.raises(LedgerError, match="gpu-study.json: a `tiny` study.*only `gpu` studies"):
        G.committed(tmp_path, known=lambda commit: True)


def test_a_study_whose_code_is_not_this_trees_is_labelled_on_every_verdict_it_shapes(tmp_path):
    foreign = {**_depth_document(0.06, 0.002), FINGERPRINT_KEY: {"gpt/model.py": "0" * 64}}
    study, mine, weighed, text = _depth_weighed(tmp_path, foreign)
    label = "gpu-study.json: measured at 0000000; since then 1 file of the GPT testbed changed, not yet re-measured"
    assert study.code_caveat == label
    answered_there = [claim for claim, f in weighed.items() if f.evidence.get("decided_on") == study.label]
    assert "B18" in answered_there and all(label in weighed[claim].caveats for claim in answered_there)
    # B19: this run answers (8 of 12 pairs) and the study's verdict differs: its caveat rests on the study, labelled
    b19 = weighed["B19"]
    assert b19.evidence["decided_on"] == "CPU" and label not in b19.caveats  # "not testable here" here: no caveat
    differing = _pair_finding("holds", "interaction", 0.001)
    _, _, weighed, _ = _depth_weighed(tmp_path, foreign, B19=differing)
    assert weighed["B19"].evidence["decided_on"] == "CPU" and weighed["B19"].verdict == "holds"
    assert label in weighed["B19"].caveats and any(c.startswith("depends on scale") for c in weighed["B19"].caveats)
    # a study trained with this tree's code: no label
    same = {**_depth_document(0.06, 0.002), FINGERPRINT_KEY: loaded_source()}
    _, _, weighed, _ = _depth_weighed(tmp_path, same)
    assert weighed["B18"].caveats == ()


def test_b19_on_gpu_skips_the_swaps_it_could_not_batch(tmp_path):
    study, mine, weighed, text = _depth_weighed(tmp_path, _depth_document(0.06, 0.002))
    gpu_b19 = weighed["B19"].evidence["by_run"][study.label]
    assert gpu_b19["verdict"] == "does not hold"  # the double swap adds up exactly
    assert "Not run here: swiglu→gelu, rope→learned." in gpu_b19["summary"]
    assert gpu_b19["evidence"]["absent_swaps"] == ["swiglu→gelu", "rope→learned"]
    assert "swiglu→gelu, rope→learned not run (they change the model's shapes" in text
    without_double = _depth_document(0.06, 0.002, ablation_labels=("llama", "rms→layer", "pre→post"))
    _, mine, weighed, text = _depth_weighed(tmp_path, without_double)
    assert weighed["B19"] is mine["B19"]  # no number on GPU: this run's verdict stands
    assert "B19 is not measured on GPU: rms→layer + pre→post not run." in text


def test_the_depth_chapter_without_a_committed_study_keeps_its_verdicts():
    from normlab.analysis.depth import committed_gpu

    mine = {"B17": _pair_finding("holds", "paired_pre_minus_post_rms", 0.05)}
    weighed, text = committed_gpu.depth_claims(
        [], mine, init=None, settings={}, margin=0.02, corpus=DEPTH_CORPUS, where="CPU", **DEPTH_RULES
    )
    assert text.startswith("No GPU study is committed") and "\n" not in text
    # this run's verdict unchanged, with the opening page's sentence written from it
    assert replace(weighed["B17"], headline=None) == mine["B17"]
    assert weighed["B17"].headline.startswith("Pre-LN's per-block gradient norms spread by")
