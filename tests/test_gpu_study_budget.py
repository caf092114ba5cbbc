"""The GPU study's lease mode: its file lands in $OUT, experiments run in their registered order while their
estimates fit --budget-s, and the plan is printed before anything trains."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from normlab.gpt import experiments as E
from normlab.gpt.corpus import load_corpus, save_corpus
from normlab.study import gpu

ROOT = Path(__file__).resolve().parents[1]


def test_the_budget_keeps_the_registered_order_and_cuts_where_the_estimate_passes_it():
    # The tiny profile: building the gpu profile's 260 models takes minutes on a small CPU. That the whole gpu
    # profile fits the session's --budget-s 480 is tests/test_gpu_study.py's sizing check (at most
    # E.PLANNED_SHARE x 480 s estimated).
    chosen = E.experiments("tiny", "cpu")
    estimates = {e.name: E.estimated_seconds(e) for e in chosen}
    first_two = estimates[chosen[0].name] + estimates[chosen[1].name]
    running, deferred, _ = gpu.within_budget(chosen, first_two / E.PLANNED_SHARE * 1.0001)
    assert [e.name for e in running] == list(E.EXPERIMENTS[:2])
    assert [e.name for e in deferred] == list(E.EXPERIMENTS[2:])
    assert gpu.within_budget(chosen, None)[1] == []
    with pytest.raises(ValueError, match="--budget-s must be positive"):
        gpu.within_budget(chosen, 0)


def test_the_output_goes_to_out_when_it_is_set(monkeypatch, tmp_path):
    monkeypatch.setenv("OUT", str(tmp_path))
    assert gpu.default_output() == tmp_path / "gpu-study.json"
    monkeypatch.delenv("OUT")
    assert gpu.default_output() == Path("data/gpu-study.json")


def test_a_budget_that_fits_nothing_prints_its_plan_and_writes_into_out_without_training(tmp_path):
    # The estimate beside the measured seconds of an experiment that ran: tests/test_gpu_session.py's dry run.
    carry = tmp_path / "carry"
    save_corpus(load_corpus(), carry, git_commit="0" * 40)
    tiny = {e.name: E.estimated_seconds(e) for e in E.experiments("tiny", "cpu", ["quality", "ablation"])}
    budget = 0.5 * tiny["quality"]  # not even the first experiment fits
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OUT=str(tmp_path / "out"))
    args = ["--profile", "tiny", "--device", "cpu", "--carry", str(carry), "--only", "quality,ablation"]
    done = subprocess.run(
        [sys.executable, "-m", "normlab.study.gpu", *args, "--budget-s", str(budget)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "plan: nothing" in done.stderr and "deferred: quality, ablation" in done.stderr
    document = json.loads((tmp_path / "out" / "gpu-study.json").read_text())
    assert document["experiments"] == {} and document["missing"] == ["quality", "ablation"]
    assert all("budget" in why for why in document["deferred"].values()) and document["finished"]
