"""The trainer against this machine's matmul rate, for the models the confirmations train (normlab.bench.training).

For the quality chapter's cpu model (A9's confirmation, both norms) and the depth chapter's ablation model (B19's
confirmation) and its 12-block model: steps per second of the trainer's step and of the bare step, the share of the
step in matrix products and in attention, and the step's matrix products timed alone in float32 (and bfloat16 where
the CPU multiplies it natively), one thread, as each of the study's workers trains. Writes the results with their
provenance (hardware, versions, commit, times, load average) to --output and prints a table.

Then, per model, the faster steps (normlab.gpt.train.CompiledStep, normlab.gpt.fast_step.StackedStep) beside the reference trainer's step, timed in interleaved
rounds in one run (normlab.bench.training.candidate_throughput): model-steps per second, the share of a model-step in
matrix products, and a model-step against the reference's float32 matmul floor. The stacked trainer (K seeds as batched
products) is timed for the depth models (width 32). Last, the quality model's norms side by side in one run: RMSNorm on
auto's CPU kernel, on F.rms_norm and on the compiled backend, and LayerNorm (F.layer_norm), each in the reference trainer.

    PYTHONPATH=src python scripts/trainer_throughput.py --output data/trainer-throughput.json
"""

from __future__ import annotations

import argparse
import json
import os
from datetime import datetime, timezone
from pathlib import Path

from normlab.analysis.depth import profiles as depth_profiles
from normlab.analysis.quality import profiles as quality_profiles
from normlab.analysis.quality import training as quality_training
from normlab.bench.training import _reference_trainer_step, candidate_throughput, step_candidates, trainer_throughput
from normlab.gpt.corpus import load_corpus
from normlab.gpt.model import GPTConfig
from normlab.gpt.train import TrainConfig
from normlab.runtime.environment import git_commit, hardware, versions


def models() -> dict[str, tuple[GPTConfig, TrainConfig]]:
    q = quality_profiles.settings_for("cpu")
    d = depth_profiles.settings_for("cpu")
    found = {}
    for norm in ("rms", "layer"):
        found[f"quality cpu, {norm} (A9 confirmation)"] = (
            GPTConfig(**quality_training.model_config(q, norm)),
            TrainConfig(**quality_training.train_config(q, 1000)),
        )
    depth_train = dict(batch_size=d["batch"], lr=d["lr"], steps=d["ablation_steps"], eval_every=0, stream_every=0)
    for name, depth in (
        ("depth ablation, 4 blocks (B19 confirmation)", d["ablation_depth"]),
        ("depth, 12 blocks", d["deep"]),
    ):
        model = GPTConfig(vocab_size=256, context=d["context"], width=d["width"], depth=depth, heads=4, norm="rms")
        found[name] = (model, TrainConfig(**depth_train, seed=1000))
    return found


def _print_candidates(name: str, found: dict) -> None:
    print(f"{name}, faster steps side by side:")
    for label, r in found.items():
        print(
            f"  {label:42s} {r['model_steps_per_s']:7.1f} model-steps/s (sd {r['model_steps_per_s_sd']:.1f}); "
            f"matmul {r['matmul_share']:.0%}; {r['step_over_matmul_floor_fp32']:.2f}× the fp32 matmul floor; "
            f"warm-up {r['warmup_s']:.1f} s"
        )


def _norm_comparison(corpus, *, floor: float, args) -> dict:
    """The quality model's reference trainer step with each norm and RMSNorm backend, interleaved in one run."""
    q = quality_profiles.settings_for("cpu")
    train = TrainConfig(**quality_training.train_config(q, 1000))
    found = {}
    for label, norm, backend in (
        ("RMSNorm, auto (cpp kernel)", "rms", "auto"),
        ("RMSNorm, torch (F.rms_norm)", "rms", "torch"),
        ("RMSNorm, compile (inductor)", "rms", "compile"),
        ("LayerNorm, auto (F.layer_norm)", "layer", "auto"),
    ):
        model = GPTConfig(**quality_training.model_config(q, norm) | {"norm_backend": backend})
        found[label] = ((lambda model=model: _reference_trainer_step(model, train, corpus)), 1)
    return candidate_throughput(found, floor, steps=args.steps, rounds=args.rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", type=Path, default=None, help="write the JSON here (default: print only)")
    parser.add_argument("--steps", type=int, default=20, help="steps per timed round")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of the steps timed side by side")
    parser.add_argument("--no-candidates", action="store_true", help="time the reference trainer only")
    args = parser.parse_args()
    corpus = load_corpus()
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    load_before = os.getloadavg()[0]
    rows = {}
    for name, (model, train) in models().items():
        rows[name] = trainer_throughput(model, train, corpus, steps=args.steps, rounds=args.rounds)
        r = rows[name]
        print(
            f"{name}: trainer {r['trainer_steps_per_s']:.1f} steps/s (bare {r['bare_steps_per_s']:.1f}); "
            f"matmul {r['matmul_share']:.0%} of the step at {r['matmul_gflops_achieved']:.0f} GFLOP/s "
            f"(alone {r['matmul_gflops_alone_fp32']:.0f} fp32"
            + (f", {r['matmul_gflops_alone_bf16']:.0f} bf16" if r["matmul_gflops_alone_bf16"] else "")
            + f"); attention {r['attention_share']:.0%}; step {r['step_over_matmul_floor_fp32']:.1f}× its fp32 matmul floor"
        )
    for name, (model, train) in models().items() if not args.no_candidates else ():
        found = step_candidates(model, train, corpus, stacked=(2, 4, 8) if model.width <= 32 else ())
        floor = rows[name]["matmul_floor_s_fp32"]
        rows[name]["candidates"] = candidate_throughput(found, floor, steps=args.steps, rounds=args.rounds)
        _print_candidates(name, rows[name]["candidates"])
    norms = None
    if not args.no_candidates:
        norms = _norm_comparison(
            corpus, floor=rows["quality cpu, rms (A9 confirmation)"]["matmul_floor_s_fp32"], args=args
        )
        _print_candidates("quality cpu, RMSNorm and LayerNorm in one run (reference trainer)", norms)
    record = {
        "benchmark": "trainer throughput against the machine's matmul rate (scripts/trainer_throughput.py)",
        "hardware": hardware(),
        "versions": versions(),
        "git_commit": git_commit(),
        "started": started,
        "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "load_average_before": load_before,
        "threads_per_worker": 1,
        "models": rows,
        "norms_side_by_side": norms,
    }
    if args.output:
        args.output.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
