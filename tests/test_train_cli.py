"""The command-line trainer: --help, the run directory, and data parallel training under torchrun (gloo, CPU)."""

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
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]


def _run(command, **kwargs):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run(command, capture_output=True, text=True, timeout=240, env=env, **kwargs)


# The trainer with float64 models: ranks sum gradients in another order than one process, which float64 keeps to
# ~1e-14 where float32's rounding, through Adam's g/√v, can move a weight by a whole step on another CPU.
FLOAT64_TRAINER = (
    "import runpy, sys, torch\n"
    "torch.set_default_dtype(torch.float64)\n"
    "runpy.run_module('normlab.train', run_name='__main__', alter_sys=True)\n"
)


def _train(run_dir, *extra, ranks=1, float64=False):
    if float64:
        launcher = Path(run_dir).parent / "float64_train.py"
        launcher.write_text(FLOAT64_TRAINER)
        program = [str(launcher)]
    else:
        program = ["-m", "normlab.train"]
    prefix = TORCHRUN if ranks > 1 else [sys.executable]
    result = _run(prefix + program + ["--run-dir", str(run_dir)] + TINY + list(extra))
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


def test_two_gloo_ranks_match_one_process_and_resume_with_another_rank_count(tmp_path):
    single, parallel = tmp_path / "single", tmp_path / "parallel"
    _train(single, float64=True)
    # Two ranks, each with half of every global batch of 4; stopped after 2 steps, then resumed by one process.
    _train(parallel, "--stop-after", "2", ranks=2, float64=True)
    assert json.loads((parallel / "summary.json").read_text())["finished"] is False
    _train(parallel, float64=True)
    for name in ("config.json", "metrics.jsonl", "checkpoint.pt", "summary.json"):
        assert (parallel / name).is_file()
    assert len(_losses(parallel)) == 4
    ours, theirs = load_checkpoint(parallel / "checkpoint.pt"), load_checkpoint(single / "checkpoint.pt")
    assert ours["step"] == theirs["step"] == 4
    assert theirs["model"]["lm_head.weight"].dtype == torch.float64  # the launcher reached the model
    # Bounds as derived in tests/test_batched.py: over S = 4 steps at lr 3e-3, Adam's lr·δ/ε with δ ≤ 10³·u₆₄
    # gives 4 · 3e-3 · 10³ · 1.1e-16 / 1e-8 = 1.3e-10 of weight (held to 1e-9), and losses agree to the forward's
    # rounding plus that drift (held to 1e-10). A wrong shard or a missed all-reduce moves both by 1e-4 or more.
    torch.testing.assert_close(torch.tensor(_losses(parallel)), torch.tensor(_losses(single)), rtol=0, atol=1e-10)
    for name, tensor in theirs["model"].items():
        torch.testing.assert_close(ours["model"][name], tensor, rtol=0, atol=1e-9, msg=name)


def test_ranks_that_disagree_on_the_config_are_refused(tmp_path):
    script = tmp_path / "disagree.py"
    script.write_text(
        "import os, sys\n"
        "from normlab.gpt.cli import main\n"
        f"sys.exit(main(['--run-dir', {str(tmp_path / 'run')!r}] + {TINY!r} + ['--seed', os.environ['RANK']]))\n"
    )
    result = _run(TORCHRUN + [str(script)])
    assert result.returncode != 0
    assert "ranks disagree on the train config" in result.stderr
    assert not (tmp_path / "run" / "checkpoint.pt").exists()


def test_a_checkpoint_path_that_is_a_directory_is_refused(tmp_path):
    (tmp_path / "run" / "checkpoint.pt").mkdir(parents=True)
    result = _run([sys.executable, "-m", "normlab.train", "--run-dir", str(tmp_path / "run")] + TINY)
    assert result.returncode != 0
    assert "is a directory; give a file inside it" in result.stderr
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
