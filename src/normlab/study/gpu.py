"""The GPU study: every training chapter's GPU experiments in one process, with torch alone.

    python -m normlab.study.gpu --write-carry                      # here: the corpus the chapters train on
    python -m normlab.study.gpu --profile gpu [--budget-s 540]     # on the GPU machine: into $OUT/gpu-study.json
    python -m normlab.study.gpu --profile gpu --shard 0/2 --output data/gpu-study-shard0.json  # half the seeds

The file goes to --output, else $OUT/gpu-study.json when $OUT is set (a lent GPU machine returns only what is
under $OUT), else data/gpu-study.json. --budget-s fits the study into one call: experiments are taken in
their registered order (E.EXPERIMENTS, the verdicts nearest a decision first) while their estimated seconds
fit the budget's planned share; the rest are listed under `deferred` (and `missing`) without training. The
plan, each experiment's estimate and the total, is printed before anything trains, and each experiment's
record keeps its estimate beside its measured seconds, so the estimate can be checked against the machine
(the tiny dry run records the same pair).

A lent GPU machine has Python 3.12 and torch, and nothing else (no pandas, tqdm or papermill; no network). Its
standard library is not this machine's, so it would build another corpus: `--write-carry` writes this machine's
exact corpus bytes, with their SHA-256 and the commit, to `build/gpu-carry/` (carry that folder to the machine),
and the study refuses bytes whose SHA-256 is not the recorded one.

The experiments are `normlab.gpt.experiments` (many paired models trained at once, `train_batched`). Before
anything trains, each batch's memory is checked, and K models that do not fit are refused with the largest K
that does. With `--shard I/N` the process trains only the members whose seed is I modulo N (`shard_of`), in
each experiment, so N processes on N GPUs or machines share the seeds with none twice; the chapters' loader
merges the N files into one sample (`normlab.analysis.shared.gpu_study.merge_shards`). Each experiment prints
a line to stderr when it starts and when it ends, and the JSON is rewritten
(atomically) after each one: a run cut short keeps the experiments it finished, and lists the rest under
`missing`. The JSON carries the results contract's provenance (hardware, versions, commit, started and finished
times, the corpus's SHA-256, each experiment's seconds), the schema and the profile.

Sizing of the gpu profile (`normlab.gpt.experiments.sizing("gpu")`, estimated, not timed: the FLOPs at an assumed
40 TFLOP/s plus the kernel launches of launch-bound deep stacks; the file records the real seconds):

    experiment       models batches PFLOP launch-s  total-s
    quality              32       1  2.66       26       93
    placement_depth      72       4  1.04      101      127
    ablation             48       1  0.32       14       22
    placements           32       3  0.32       61       69
    depth_scaling         8       1  0.11       13       16
    ladder               32       2  0.85       12       33
    width                36       5  0.46       26       38
    total               260      17  5.76      253      397   (of 480 s: 17% left for what the estimate misses)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import traceback
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import torch

from normlab.gpt import experiments as E
from normlab.gpt.corpus import load_corpus, load_saved_corpus, save_corpus
from normlab.runtime.code_identity import FINGERPRINT_KEY, loaded_source
from normlab.runtime.environment import git_commit, hardware, versions

SCHEMA = "normlab.gpu-study/1"
PROFILES = tuple(E.PROFILES)
DEFAULT_CARRY = Path("build/gpu-carry")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def write_atomically(document: dict, path: Path) -> None:
    """Replace `path` by `document` in one rename, so a reader never sees half a file. It records the normlab modules
    loaded at that moment with their hashes: the code its runs so far were trained with."""
    document[FINGERPRINT_KEY] = loaded_source()
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(document, out, indent=1, allow_nan=True)
            out.write("\n")
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_carry(folder: Path = DEFAULT_CARRY) -> Path:
    """This machine's corpus and the commit it was built at, for the GPU machine."""
    return save_corpus(load_corpus(), folder, git_commit=git_commit())


def _say(line: str) -> None:
    print(f"[gpu-study] {line}", file=sys.__stderr__ or sys.stderr, flush=True)


def _device(name: str) -> str:
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(f"--device {name}: CUDA is not available on this machine; use --device cpu (tiny profile)")
    return name


def parse_shard(text: str) -> tuple[int, int]:
    """'I/N' as (I, N), with 0 <= I < N."""
    index, slash, count = text.partition("/")
    if not (slash and index.isdigit() and count.isdigit()) or not 0 <= int(index) < int(count):
        raise ValueError(f"--shard must be I/N with 0 <= I < N (for example 0/2), got {text!r}")
    return int(index), int(count)


def shard_of(experiment: E.Experiment, index: int, count: int) -> tuple[E.Experiment, list[int]]:
    """The members of `experiment` whose seed is `index` modulo `count`, and each one's position in the whole
    experiment's run list (so that the merged shards list their runs in the unsharded order)."""
    batches, positions, start = [], [], 0
    for batch in experiment.batches:
        keep = [i for i, seed in enumerate(batch.seeds) if seed % count == index]
        positions += [start + i for i in keep]
        start += len(batch.seeds)
        if keep:
            batches.append(
                replace(
                    batch,
                    configs=[batch.configs[i] for i in keep],
                    seeds=[batch.seeds[i] for i in keep],
                    tags=[batch.tags[i] for i in keep],
                )
            )
    return replace(experiment, batches=batches), positions


def default_output() -> Path:
    """$OUT/gpu-study.json where the GPU machine's $OUT is set (only that folder comes back), else data/."""
    out = os.environ.get("OUT")
    return Path(out) / "gpu-study.json" if out else Path("data/gpu-study.json")


def within_budget(
    chosen: list, budget_s: float | None, estimates: dict[str, float] | None = None
) -> tuple[list, list, dict[str, float]]:
    """(experiments to run, deferred ones, estimated seconds of each): the registered order, cut where the
    running estimate would pass the budget's planned share (E.PLANNED_SHARE: room for what it misses).
    `estimates` (from E.sizing, which builds each batch's model once) saves computing them again."""
    if estimates is None:
        estimates = {e.name: E.estimated_seconds(e) for e in chosen}
    if budget_s is None:
        return chosen, [], estimates
    if budget_s <= 0:
        raise ValueError(f"--budget-s must be positive, got {budget_s}")
    running, total = [], 0.0
    for experiment in chosen:
        if total + estimates[experiment.name] > E.PLANNED_SHARE * budget_s:
            break
        running.append(experiment)
        total += estimates[experiment.name]
    return running, chosen[len(running) :], estimates


def run_study(
    profile: str,
    output: Path,
    *,
    carry: Path = DEFAULT_CARRY,
    device: str = "auto",
    only: list[str] | None = None,
    memory_limit_bytes: int | None = None,
    shard: tuple[int, int] | None = None,
    budget_s: float | None = None,
) -> dict:
    """Run the profile's experiments (or shard (I, N) of their seeds), rewriting `output` after each; returns the
    final document."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; valid profiles: {', '.join(PROFILES)}")
    device = _device(device)
    corpus, manifest = load_saved_corpus(carry)
    if device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = True  # both norms of a pair alike; recorded below
    else:
        torch.set_num_threads(1)  # the tiny profile's models are far too small to gain from threads that contend
    chosen = E.experiments(profile, device, only)
    positions: dict[str, list[int]] = {}
    if shard is not None:
        sharded = [shard_of(experiment, *shard) for experiment in chosen]
        chosen = [experiment for experiment, _ in sharded]
        positions = {experiment.name: where for experiment, where in sharded}
    sizing = {row["experiment"]: row for row in E.sizing(profile)} if profile != "tiny" else {}
    # a shard's estimates are its own experiments' (the sizing table is the whole profile's)
    estimates = {name: row["seconds"] for name, row in sizing.items()} if sizing and shard is None else None
    chosen, deferred, estimates = within_budget(chosen, budget_s, estimates)
    E.check_memory(chosen, memory_limit_bytes)  # refuses before anything trains
    total = sum(estimates[e.name] for e in chosen)
    _say(
        f"plan: {', '.join(f'{e.name} ~{estimates[e.name]:.0f} s' for e in chosen) or 'nothing'}; "
        f"estimated {total:.0f} s"
        + (f" of a {budget_s:.0f} s budget" if budget_s else "")
        + (f"; deferred: {', '.join(e.name for e in deferred)}" if deferred else "")
    )
    document = {
        "schema": SCHEMA,
        "profile": profile,
        "device": device,
        "matmul": "tf32" if device.startswith("cuda") else "float32",
        "hardware": hardware(),
        "versions": versions(),
        # the machine may have no git: the commit the carried corpus was written at is the tree that runs
        "git_commit": git_commit() or manifest.get("git_commit"),
        "started": _now(),
        "finished": None,
        "corpus": {k: manifest.get(k) for k in ("sha256", "val_sha256", "train_bytes", "val_bytes", "python_version")},
        "sizing": sizing,
        "experiments": {},
        "missing": [e.name for e in chosen + deferred],
        "deferred": {
            e.name: f"over the {budget_s:.0f} s budget (estimated {estimates[e.name]:.0f} s)" for e in deferred
        },
        "budget_s": budget_s,
        "failed": {},
    }
    if shard is not None:
        document["shard"] = {"index": shard[0], "count": shard[1], "rule": "seed % count == index"}
    write_atomically(document, output)
    for experiment in chosen:
        models = sum(len(b.configs) for b in experiment.batches)
        _say(
            f"{experiment.name} ({', '.join(experiment.claims)}): {models} models in {len(experiment.batches)} batches"
        )
        try:
            outcome = E.run_experiment(experiment, corpus, memory_limit_bytes=memory_limit_bytes)
        except Exception as error:  # one failed experiment must not lose the others; the file says what failed
            document["failed"][experiment.name] = f"{type(error).__name__}: {error}"
            _say(f"{experiment.name} failed: {error}")
            traceback.print_exc(file=sys.__stderr__ or sys.stderr)
        else:
            if shard is not None:
                outcome["positions"] = positions[experiment.name]
            document["experiments"][experiment.name] = outcome | {"estimated_seconds": estimates[experiment.name]}
            document["missing"].remove(experiment.name)
            _say(f"{experiment.name} done in {outcome['seconds']:.1f} s")
        write_atomically(document, output)
    document["finished"] = _now()
    write_atomically(document, output)
    return document


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m normlab.study.gpu", description=__doc__.split("\n")[0])
    parser.add_argument("--write-carry", action="store_true", help="write this machine's corpus to --carry and stop")
    parser.add_argument("--profile", choices=PROFILES, default="gpu")
    parser.add_argument("--output", type=Path, default=None, help="default: $OUT/gpu-study.json, else data/")
    parser.add_argument("--budget-s", type=float, help="run only the experiments whose estimates fit this many s")
    parser.add_argument("--carry", type=Path, default=DEFAULT_CARRY, help="the folder --write-carry wrote")
    parser.add_argument("--device", default="auto", help="auto (cuda if present), cuda, cuda:N or cpu")
    parser.add_argument("--only", help=f"comma-separated experiments, of: {', '.join(E.EXPERIMENTS)}")
    parser.add_argument("--shard", help="I/N: train only the seeds that are I modulo N (one of N processes)")
    parser.add_argument("--memory-limit-gib", type=float, help="plan against this much memory, not what is free")
    args = parser.parse_args(argv)
    if args.write_carry:
        path = write_carry(args.carry)
        _say(f"corpus written to {path.parent} (SHA-256 {json.loads(path.read_text())['sha256'][:16]}…)")
        return 0
    limit = None if args.memory_limit_gib is None else int(args.memory_limit_gib * 2**30)
    output = args.output or default_output()
    try:
        shard = parse_shard(args.shard) if args.shard else None
        document = run_study(
            args.profile,
            output,
            carry=args.carry,
            device=args.device,
            only=args.only.split(",") if args.only else None,
            memory_limit_bytes=limit,
            shard=shard,
            budget_s=args.budget_s,
        )
    except (MemoryError, ValueError, FileNotFoundError) as error:
        print(f"python -m normlab.study.gpu: {error}", file=sys.stderr)
        return 2
    _say(f"wrote {output}: {len(document['experiments'])} experiments, missing {document['missing'] or 'none'}")
    return 1 if document["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
