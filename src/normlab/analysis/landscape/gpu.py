"""The GPU study beside this run: each committed GPU study's runs judged by this chapter's own V2-V4 rules, shown
beside this run's findings, and one verdict made of them by the one rule for several runs
(`normlab.analysis.shared.scale_rule`, in `landscape_gpu_claims`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from normlab.analysis.landscape.curse_of_depth import depth_claim
from normlab.analysis.landscape.method import Landscape
from normlab.analysis.landscape.placement import placement_claim, placement_measures
from normlab.analysis.landscape.qk_norm import final_logits, qk_claim

GPU_EXPERIMENTS = {"V2": "placements", "V3": "width", "V4": "depth_scaling"}  # normlab.gpt.experiments' names
V1_NEEDS = ("rms-authors", "dyt-authors", "layer")  # V1's primary pair and its LayerNorm caveat
V1_NAMES = {
    "rms-authors": "RMSNorm under the authors' AdamW",
    "dyt-authors": "DyT by the authors' recipe",
    "layer": "LayerNorm",
}


def _trains_wide_grid(outcome: dict) -> bool:
    """Whether a GPU width experiment trains V3's wide grid (`qk_lr_grid`) on its seeds, with and without QK-norm."""
    grid, seeds = outcome["settings"].get("qk_lr_grid"), outcome["settings"].get("qk_seeds")
    if not grid or not seeds:
        return False
    have = {(r["tag"]["label"], r["tag"]["lr"], r["tag"]["seed"]) for r in outcome["runs"]}
    return all((label, lr, s) in have for label in ("rms", "rms+qk") for lr in grid for s in range(seeds))


def gpu_runs(outcome: dict, entropy: float) -> list[dict]:
    """A GPU experiment's records (normlab.gpt.experiments) as `landscape_run` records: diverged as the study's one
    run record says (normlab.gpt.run_record), and trained when it did not diverge and ended below the unigram
    entropy. The GPU study trains K models at once, so a model has no step time
    of its own, and it probes no attention logits, gradients or DyT traces: those fields are empty."""
    runs = []
    for record in outcome["runs"]:
        val = [tuple(point) for point in record["val"]]
        final = float(record["final_val_loss"])
        diverged = bool(record["diverged"])
        runs.append(
            {
                "tag": {**record["tag"], "reference_alpha": True},
                "model": record["model"],
                "train": record["train"],
                "diverged": diverged,
                "trained": (not diverged) and final < entropy,
                "final_val_loss": final,
                "initial_val_loss": record["initial_val_loss"],
                "final_drop": record["final_drop"],
                "steps_done": record["steps_done"],
                "median_step_time": math.nan,
                "val": val,
                "stream_rms": [tuple(row) for row in record.get("stream_rms", [])],
                "grad_norms": [],
                "max_logit": [],
                "dyt_trace": [],
                "drop_one": record.get("drop_one"),
                "corpus_sha256": record["corpus_sha256"],
            }
        )
    return runs


def gpu_landscape(outcome: dict, corpus, *, loss_margin: float, usable_tolerance: float) -> Landscape:
    """The chapter's lookups over one GPU experiment, at the GPU profile's own scales and grids, with the margins
    this chapter stated before measuring."""
    return Landscape(
        outcome["settings"],
        gpu_runs(outcome, corpus.unigram_entropy_nats),
        corpus,
        loss_margin=loss_margin,
        usable_tolerance=usable_tolerance,
    )


def v1_not_on_gpu(outcome: dict | None) -> str:
    """Why the GPU study cannot weigh V1: what of the chapter's design its width experiment lacks."""
    if outcome is None:
        return "it did not finish the `width` experiment"
    labels = {r["tag"]["label"] for r in outcome["runs"]}
    lacking = [label for label in V1_NEEDS if label not in labels]
    if "alpha_widths" not in outcome["settings"]:
        lacking.append("α₀ sweep over two widths")
    shown = [V1_NAMES.get(item, item) for item in lacking]
    return "its width experiment trains " + (
        f"no {', no '.join(shown)}" if lacking else "the full design, which this chapter does not yet weigh"
    )


def landscape_gpu_claims(
    studies: list,
    corpus,
    cpu: dict,
    *,
    where: str,
    loss_margin: float,
    usable_tolerance: float,
    pre_growth_needed: float,
    max_relative_growth: float,
    curse_share: float,
    qk_min_seeds: int,
    qk_sensitivity_margin: float,
    share_margin: float | None = None,
    registered: Mapping[str, int] | None = None,
) -> tuple[dict, str]:
    """V2, V3 and V4 answered by the scale rule: each committed GPU study's runs judged by this chapter's own
    `placement_claim`, `qk_claim` and `depth_claim` with the margins stated before measuring, beside this run's
    finding. `cpu`: this run's findings by claim (V1 to V4). `registered`: claim -> the seeds a GPU study must reach
    to answer (default: the GPU design's, `gpu_study.registered_pairs`). Returns the findings to record (V1
    unchanged: the GPU study does not train its design, and the text says why) and the markdown to show."""
    from normlab.analysis.shared import gpu_study as G
    from normlab.analysis.shared import scale_rule

    if not studies:
        return dict(cpu), G.none_committed(GPU_EXPERIMENTS["V2"], studies)
    registered = G.registered_pairs() if registered is None else registered
    combined, sides, notes = dict(cpu), {}, []
    for claim, name in GPU_EXPERIMENTS.items():
        found = G.studies_with(studies, name)
        if not found:
            names = ", ".join(s.source for s in studies)
            notes.append(
                f"{claim}: not measured on GPU: the committed study ({names}) lacks the `{name}` "
                "experiment (listed as missing), so this run's verdict stands."
            )
            continue
        if claim == "V3" and not any(_trains_wide_grid(s.experiment(name)) for s in found):
            notes.append(
                "V3: not weighed on GPU: the committed study's width experiment does not train the wide "
                "learning-rate grid that V3's registered protocol needs (Wortsman et al.'s), so this run's verdict "
                "stands."
            )
            continue
        runs = [G.this_build(where, cpu[claim])]
        for study in found:
            outcome = study.experiment(name)
            gpu = gpu_landscape(outcome, corpus, loss_margin=loss_margin, usable_tolerance=usable_tolerance)
            if claim == "V2":
                measures = placement_measures(gpu)
                finding = placement_claim(
                    gpu, measures, pre_growth_needed=pre_growth_needed, max_relative_growth=max_relative_growth
                )
            elif claim == "V3":
                finding = qk_claim(
                    gpu, final_logits(gpu), min_seeds=qk_min_seeds, sensitivity_margin=qk_sensitivity_margin
                )
            else:
                finding = depth_claim(gpu, curse_share=curse_share, share_margin=share_margin)
            pairs = G.complete_seeds(outcome["runs"])
            runs.append(G.gpu_run(study, finding, pairs=pairs, registered=registered.get(claim)))
        combined[claim] = scale_rule.answer(runs)
        sides[claim] = (runs, combined[claim])
    width = G.studies_with(studies, GPU_EXPERIMENTS["V3"])
    notes.insert(0, f"V1: not measured on GPU: {v1_not_on_gpu(width[0].experiment('width') if width else None)}.")
    table = scale_rule.side_by_side(sides) if sides else ""
    return combined, "\n\n".join(part for part in (table, " ".join(notes)) if part)


# What each source trained, for the sentence on what would decide V2 and V4 (and whether it was checked).
SOURCE_SCALES = {
    "V2": "Kim et al. (Peri-LN) train models of 400M to 3.2B parameters on tens of billions of tokens, and OLMo 2 "
    "models of 7B and 13B on trillions (from the papers' setups as the study's sources transcribe them, not checked "
    "against the papers here)",
    "V4": "Sun et al. train LLaMA models of 130M to 7B parameters on billions of tokens (the abstract of arXiv "
    "2502.05795, checked against its arXiv HTML); their smallest, LLaMA-130M, has 12 blocks of width 768 (from memory "
    "of the paper's setup, not checked)",
}
GPU_SCALE = {"V2": "deep", "V4": "deepest"}


def gpu_design(claim: str, registered_seeds: int) -> str:
    """What would decide `claim` (V2 or V4): the source's scale, and the GPU study's registered design for it
    (`normlab.gpt.gpu_sizes.LANDSCAPE`: blocks, width, steps, seeds) with its estimated time on one H200 from the GPU
    study's own sizing (`normlab.gpt.experiments.estimated_seconds`)."""
    from normlab.gpt import experiments as E
    from normlab.gpt import gpu_sizes

    name = GPU_EXPERIMENTS[claim]
    (experiment,) = E.experiments("gpu", only=[name])
    sizes = gpu_sizes.LANDSCAPE
    scale, train = sizes[GPU_SCALE[claim]], sizes[f"{GPU_SCALE[claim]}_train"]
    models = sum(len(b.configs) for b in experiment.batches)
    return (
        f"**What would decide {claim}.** {SOURCE_SCALES[claim]}. That scale does not fit a cpu book. The GPU study "
        f"registers the design that comes nearest on one lent H200 (`{name}` in `normlab.gpt.experiments`): "
        f"{scale['depth']} blocks of width {scale['width']}, {train['steps']} steps of {train['batch_size']} × "
        f"{scale['context']} bytes, {registered_seeds} seeds, {models} models trained together, estimated at "
        f"{E.estimated_seconds(experiment):.0f} s on one H200 by the study's sizing (an assumed throughput, not a "
        "measurement); the section on the GPU study below weighs it wherever one is committed under `data/`."
    )
