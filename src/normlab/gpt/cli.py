"""The command-line trainer: `python -m normlab.train`, one model in one process.

    python -m normlab.train --run-dir runs/rms --norm rms --width 256 --depth 6 --steps 2000
    python -m normlab.train --config run.json --run-dir runs/rms          # a JSON file, flags override it

Every field of GPTConfig and TrainConfig is a flag (`--help` lists them with their defaults). A
config file is JSON: {"model": {GPTConfig fields}, "train": {TrainConfig fields}}. The run
directory gets:

    config.json     the resolved model and train configs, the corpus checksum, the torch version
    metrics.jsonl   one JSON line per training step (loss, lr, step time, gradient norms), appended
    checkpoint.pt   the resumable state (normlab.gpt.train's checksummed format), every --checkpoint-every steps
    summary.json    final validation loss, steps done, divergence, median step time
    history.csv, val.csv

Run the same command again to resume from checkpoint.pt. Many models train as jobs of
`normlab.runtime.parallel.run_parallel` (this machine's pool, or a Dask cluster), not through this command.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
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
        description="Train normlab's small GPT on the bundled corpus, one model in this process, and write a run "
        "directory.",
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


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    model_config, train_config = resolve_configs(args)
    run_dir = Path(args.run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise SystemExit(f"--run-dir {run_dir} exists and is not a directory")
    train_config = dataclasses.replace(
        train_config, checkpoint_path=str(run_dir / "checkpoint.pt"), interrupt_after=args.stop_after
    )
    corpus = load_corpus()
    metrics = run_dir / "metrics.jsonl"
    run_dir.mkdir(parents=True, exist_ok=True)
    resuming = (run_dir / "checkpoint.pt").exists()
    (run_dir / "config.json").write_text(
        json.dumps(
            {
                "model": model_config.to_dict(),
                "train": train_config.to_dict(),
                "corpus_sha256": corpus.sha256,
                "torch": torch.__version__,
            },
            indent=2,
        )
    )
    if not resuming and metrics.exists():
        metrics.unlink()  # a fresh run: no stale lines from an earlier one

    def on_step(row: dict, model) -> None:
        with metrics.open("a") as f:
            f.write(json.dumps(row) + "\n")

    result = train(model_config, train_config, corpus, on_step=on_step)
    result.history.to_csv(run_dir / "history.csv", index=False)
    result.val.to_csv(run_dir / "val.csv", index=False)
    summary = {
        "steps_done": result.steps_done,
        "finished": not result.interrupted,
        "final_val_loss": result.final_val_loss,
        "diverged": result.diverged,
        "final_train_loss": float(result.history["loss"].iloc[-1]) if len(result.history) else None,
        "median_step_time_s": result.median_step_time() if len(result.history) else None,
        "corpus_sha256": result.corpus_sha256,
    }
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary), file=sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
