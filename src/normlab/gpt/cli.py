"""The command-line trainer: `python -m normlab.train` (one process, or many under torchrun).

    python -m normlab.train --run-dir runs/rms --norm rms --width 256 --depth 6 --steps 2000
    python -m normlab.train --config run.json --run-dir runs/rms          # a JSON file, flags override it
    torchrun --nproc_per_node 8 -m normlab.train --config run.json --run-dir runs/rms --device cuda

Every field of GPTConfig and TrainConfig is a flag (`--help` lists them with their defaults). A
config file is JSON: {"model": {GPTConfig fields}, "train": {TrainConfig fields}}. The run
directory gets:

    config.json     the resolved model and train configs, the corpus checksum, the world size
    metrics.jsonl   one JSON line per training step (loss, lr, step time, gradient norms), appended
    checkpoint.pt   the resumable state (normlab.gpt.train's checksummed format), every --checkpoint-every steps
    summary.json    final validation loss, steps done, divergence, median step time
    history.csv, val.csv

Run the same command again to resume from checkpoint.pt (with any number of ranks: the global
batch stays --batch-size). Under torchrun each rank gets its own share of every batch
(DistributedDataParallel; gloo on CPU, NCCL on CUDA, one GPU per rank), and only rank 0 writes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

import torch

from normlab.gpt.corpus import load_corpus
from normlab.gpt.model import GPTConfig
from normlab.gpt.train import TrainConfig, train

# Fields the CLI sets itself (the checkpoint lives in the run directory; progress is a flag of its own).
_MANAGED = {"checkpoint_path", "interrupt_after"}


def _parse_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _flag_type(default):
    if isinstance(default, bool):
        return _parse_bool
    if isinstance(default, int):
        return int
    if isinstance(default, float):
        return float
    return str


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m normlab.train",
        description="Train normlab's small GPT on the bundled corpus and write a run directory. "
        "Runs unchanged under torchrun (data parallel).",
    )
    parser.add_argument("--run-dir", required=True, help="directory for config, metrics, checkpoint and summary")
    parser.add_argument(
        "--stop-after",
        type=int,
        default=None,
        help="stop after this many steps in this call, checkpoint written (a job with a time limit); "
        "run the same command again to continue",
    )
    parser.add_argument(
        "--config", help='JSON file: {"model": {...GPTConfig}, "train": {...TrainConfig}}; flags override it'
    )
    for title, cls, skip in (
        ("model (GPTConfig)", GPTConfig, set()),
        ("training (TrainConfig)", TrainConfig, _MANAGED),
    ):
        group = parser.add_argument_group(title)
        for field in dataclasses.fields(cls):
            if field.name in skip:
                continue
            default = field.default if field.default is not dataclasses.MISSING else field.default_factory()
            flag = "--" + field.name.replace("_", "-")
            if isinstance(default, tuple):
                group.add_argument(
                    flag,
                    dest=field.name,
                    type=float,
                    nargs=len(default),
                    default=None,
                    help=f"(default {' '.join(map(str, default))})",
                )
            elif default is None:
                group.add_argument(flag, dest=field.name, type=int, default=None, help="(default: none)")
            else:
                group.add_argument(
                    flag, dest=field.name, type=_flag_type(default), default=None, help=f"(default {default})"
                )
    return parser


def resolve_configs(args: argparse.Namespace) -> tuple[GPTConfig, TrainConfig]:
    """Defaults, then the config file, then the flags given on the command line."""
    values = {"model": {}, "train": {}}
    if args.config:
        path = Path(args.config)
        if not path.is_file():
            raise SystemExit(f"--config {path}: no such file")
        try:
            loaded = json.loads(path.read_text())
        except json.JSONDecodeError as error:
            raise SystemExit(f"--config {path} is not valid JSON: {error}") from None
        unknown = set(loaded) - {"model", "train"}
        if unknown:
            raise SystemExit(f"--config {path}: unknown sections {sorted(unknown)}; use 'model' and 'train'")
        values["model"].update(loaded.get("model", {}))
        values["train"].update(loaded.get("train", {}))
    for section, cls in (("model", GPTConfig), ("train", TrainConfig)):
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(values[section]) - names
        if unknown:
            raise SystemExit(f"config section {section!r} has unknown fields {sorted(unknown)}; valid: {sorted(names)}")
        for name in names:
            given = getattr(args, name, None)
            if given is not None:
                values[section][name] = tuple(given) if isinstance(given, list) else given
    managed = _MANAGED & set(values["train"])
    if managed:
        raise SystemExit(
            f"config sets {sorted(managed)}, which the CLI manages (the checkpoint is RUN_DIR/checkpoint.pt)"
        )
    try:
        return GPTConfig(**values["model"]), TrainConfig(**values["train"])
    except (TypeError, ValueError) as error:
        raise SystemExit(str(error)) from None


def _setup_distributed(device: str) -> tuple[int, int, str]:
    """Join the process group torchrun describes in the environment; returns (rank, world, device)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return 0, 1, device
    import torch.distributed as dist

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device.startswith("cuda"):
        device = f"cuda:{local_rank}"
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend="nccl" if device.startswith("cuda") else "gloo")
    return dist.get_rank(), world, device


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    model_config, train_config = resolve_configs(args)
    run_dir = Path(args.run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise SystemExit(f"--run-dir {run_dir} exists and is not a directory")
    rank, world, device = _setup_distributed(train_config.device)
    # One thread per process when several ranks share a CPU machine, so they do not oversubscribe it.
    if world > 1 and not device.startswith("cuda"):
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    train_config = dataclasses.replace(
        train_config,
        device=device,
        checkpoint_path=str(run_dir / "checkpoint.pt"),
        progress=train_config.progress and rank == 0,
        interrupt_after=args.stop_after,
    )
    corpus = load_corpus()
    metrics = run_dir / "metrics.jsonl"
    if rank == 0:
        run_dir.mkdir(parents=True, exist_ok=True)
        resuming = (run_dir / "checkpoint.pt").exists()
        (run_dir / "config.json").write_text(
            json.dumps(
                {
                    "model": model_config.to_dict(),
                    "train": train_config.to_dict(),
                    "corpus_sha256": corpus.sha256,
                    "world_size": world,
                    "torch": torch.__version__,
                },
                indent=2,
            )
        )
        if not resuming and metrics.exists():
            metrics.unlink()  # a fresh run: no stale lines from an earlier one

    def on_step(row: dict) -> None:
        with metrics.open("a") as f:
            f.write(json.dumps(row) + "\n")

    try:
        result = train(model_config, train_config, corpus, on_step=on_step)
    finally:
        if world > 1:
            torch.distributed.destroy_process_group()
    if rank == 0:
        result.history.to_csv(run_dir / "history.csv", index=False)
        result.val.to_csv(run_dir / "val.csv", index=False)
        summary = {
            "steps_done": result.steps_done,
            "finished": not result.interrupted,
            "final_val_loss": result.final_val_loss,
            "diverged": result.diverged,
            "final_train_loss": float(result.history["loss"].iloc[-1]) if len(result.history) else None,
            "median_step_time_s": result.median_step_time() if len(result.history) else None,
            "world_size": world,
            "corpus_sha256": result.corpus_sha256,
        }
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
        print(json.dumps(summary), file=sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
