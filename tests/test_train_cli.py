"""The command-line trainer: --help, the run directory, a run stopped and resumed, and the refusals."""

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from normlab.gpt.train import load_checkpoint

TINY = [
    "--width",
    "32",
    "--depth",
    "1",
    "--heads",
    "2",
    "--context",
    "16",
    "--steps",
    "4",
    "--batch-size",
    "4",
    "--warmup-steps",
    "1",
    "--eval-every",
    "0",
    "--stream-every",
    "0",
    "--eval-batches",
    "1",
    "--progress",
    "false",
]


def _run(command, **kwargs):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run(command, capture_output=True, text=True, timeout=240, env=env, **kwargs)


def _train(run_dir, *extra):
    result = _run([sys.executable, "-m", "normlab.train", "--run-dir", str(run_dir)] + TINY + list(extra))
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def _losses(run_dir):
    return [json.loads(line)["loss"] for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]


def test_help_lists_the_options():
    result = _run([sys.executable, "-m", "normlab.train", "--help"])
    assert result.returncode == 0
    for flag in (
        "--run-dir",
        "--config",
        "--width",
        "--norm",
        "--batch-size",
        "--lr",
        "--checkpoint-every",
        "--stop-after",
    ):
        assert flag in result.stdout


def test_a_run_stopped_and_resumed_matches_one_run_through(tmp_path):
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    _train(whole)
    _train(resumed, "--stop-after", "2")
    assert json.loads((resumed / "summary.json").read_text())["finished"] is False
    _train(resumed)
    for name in ("config.json", "metrics.jsonl", "checkpoint.pt", "summary.json", "history.csv", "val.csv"):
        assert (resumed / name).is_file()
    assert json.loads((resumed / "summary.json").read_text())["finished"] is True
    assert _losses(resumed) == _losses(whole) and len(_losses(whole)) == 4
    ours, theirs = load_checkpoint(resumed / "checkpoint.pt"), load_checkpoint(whole / "checkpoint.pt")
    assert ours["step"] == theirs["step"] == 4
    for name, tensor in theirs["model"].items():
        assert torch.equal(ours["model"][name], tensor), name


def test_a_checkpoint_path_that_is_a_directory_is_refused(tmp_path):
    (tmp_path / "run" / "checkpoint.pt").mkdir(parents=True)
    result = _run([sys.executable, "-m", "normlab.train", "--run-dir", str(tmp_path / "run")] + TINY)
    assert result.returncode != 0
    assert "is a directory; give a file inside it" in result.stderr
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
