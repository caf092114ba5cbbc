"""Section "The committed GPU study (B17, B18, B19)": each committed GPU study's runs judged by the same rules,
shown beside this run, and one verdict made of them by the one rule for several runs
(`normlab.analysis.shared.scale_rule`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import pandas as pd

from normlab.analysis.depth.identity_path import b17_finding, b17_headline, b17_measures, scale_text
from normlab.analysis.depth.initialisation import InitStudy
from normlab.analysis.depth.interlock import ablation_study, b19_finding, interaction_text
from normlab.analysis.depth.post_ln_decay import b18_finding, b18_headline, b18_measures
from normlab.analysis.depth.training_at_depth import TrainingStudy, job_outcome
from normlab.analysis.shared import scale_rule
from normlab.analysis.shared.gpu_study import complete_seeds
from normlab.analysis.shared.paired import interval_text
from normlab.study.findings import Finding
from normlab.study.key_numbers import NATS_PER_BYTE

GPU_ABSENT_WHY = "they change the model's shapes, and the GPU study trains each batch of models at one shape"


def gpu_runs_frame(outcome: dict, unigram_entropy: float) -> pd.DataFrame:
    """One row per run of a GPU-study experiment: its tag (placement, norm, seed, depth, setting, label, lr) and
    `job_outcome` (the same reading of divergence and of 'trained' as this run's)."""
    if not outcome.get("runs"):
        raise ValueError("the GPU study's experiment has no runs; re-run it, or remove the file")
    return pd.DataFrame([{**r["tag"], **job_outcome(r, unigram_entropy)} for r in outcome["runs"]])


def gpu_training(outcome: dict, depth: int, unigram_entropy: float) -> TrainingStudy:
    """The GPU study's `placement_depth` runs at `depth` in the chapter's own frames (its ablation lives apart)."""
    runs = gpu_runs_frame(outcome, unigram_entropy)
    runs = runs[runs["depth"] == depth].assign(config=lambda f: f["placement"] + "-" + f["norm"])
    return TrainingStudy(
        paired=runs[runs["setting"] == "paired"],
        no_warmup=runs[runs["setting"] == "no warm-up"],
        ablation=pd.DataFrame(),
    )


def gpu_ablation(outcome: dict, unigram_entropy: float) -> TrainingStudy:
    """The GPU study's `ablation` runs (all at the base learning rate; it has no stress runs)."""
    runs = gpu_runs_frame(outcome, unigram_entropy).assign(setting="base lr")
    return TrainingStudy(paired=pd.DataFrame(), no_warmup=pd.DataFrame(), ablation=runs)


def deciding_depth(outcome: dict, claim: str) -> int | None:
    """The deepest depth of a GPU `placement_depth` experiment with every run `claim`'s rule needs: paired runs of
    the four models (B17 and B18), and for B17 the no-warm-up runs as well."""
    tags = [r["tag"] for r in outcome["runs"]]
    usable = []
    for depth in sorted({t["depth"] for t in tags}):
        at = [t for t in tags if t["depth"] == depth]
        paired = {(t["placement"], t["norm"]) for t in at if t["setting"] == "paired"}
        nowarm = {t["placement"] for t in at if t["setting"] == "no warm-up"}
        if paired >= {(p, n) for p in ("pre", "post") for n in ("rms", "layer")} and (
            claim != "B17" or nowarm >= {"pre", "post"}
        ):
            usable.append(depth)
    return max(usable) if usable else None


def paired_at(outcome: dict, depth: int) -> list[dict]:
    """A `placement_depth` experiment's paired runs at `depth`: the pairs B17 and B18 are judged on."""
    return [r for r in outcome["runs"] if r["tag"]["depth"] == depth and r["tag"]["setting"] == "paired"]


def _gpu_placement_findings(study, init, settings, margin, b17_rule, b18_rule, corpus) -> tuple[dict, list[str]]:
    """B17 and B18 through the chapter's own measures on the GPU runs at their deciding depths, each with the
    pairs it was judged on; the initialisation half is this run's `init` (the GPU study trains only). Also a line
    per other depth."""
    outcome = study.experiment("placement_depth")
    entropy, findings, notes = corpus.unigram_entropy_nats, {}, []
    depths = sorted({r["tag"]["depth"] for r in outcome["runs"]})
    for claim in ("B17", "B18"):
        depth = deciding_depth(outcome, claim)
        if depth is None:
            notes.append(f"{claim} is not measured on GPU: {study.source} lacks runs its rule needs at every depth.")
            continue
        training = gpu_training(outcome, depth, entropy)
        if claim == "B17":
            numbers = b17_measures(init, training, settings, margin)
            gpu = outcome.get("settings") or {}
            at_init = scale_text(settings, init.deepest)
            numbers["scale"] = (
                (at_init.split(";")[0] + "; " if at_init else "")
                + f"training on the GPU study at depth {depth}, width {gpu.get('width', '?')}, "
                f"{gpu.get('steps', '?')} steps"
            )
            finding = b17_finding(
                numbers, deepest=init.deepest, deep=depth, margin=margin, **b17_rule, corpus_sha256=corpus.sha256
            )
        else:
            numbers = b18_measures(init, training, margin)
            gpu = outcome.get("settings") or {}
            pairs = numbers["pair"]["pairs"] if numbers["pair"] else 0
            scale = (
                f"the GPU study: depth {depth}, width {gpu.get('width', '?')}, {gpu.get('steps', '?')} steps, "
                f"{pairs} pairs"
            )
            finding = b18_finding(numbers, deep=depth, deepest=init.deepest, margin=margin, **b18_rule, scale=scale)
        findings[claim] = (finding, complete_seeds(paired_at(outcome, depth)))
        others = [
            f"at {d} blocks "
            + interval_text(b18_measures(init, gpu_training(outcome, d, entropy), margin)["pair"], NATS_PER_BYTE)
            for d in depths
            if d != depth and claim == "B18"
        ]
        notes.append(
            f"{claim} on GPU is judged at {depth} blocks, the deepest with every run its rule needs"
            + (
                f"; its paired post-RMSNorm − post-LayerNorm loss is also measured {'; '.join(others)}"
                if others
                else ""
            )
            + "."
        )
    return findings, notes


def _gpu_ablation_finding(study, corpus, margin) -> tuple[tuple[Finding, int] | None, list[str]]:
    outcome = study.experiment("ablation")
    ablation = ablation_study(gpu_ablation(outcome, corpus.unigram_entropy_nats), margin)
    why = f" ({GPU_ABSENT_WHY})" if ablation.absent else ""
    if ablation.interaction is None:
        reason = interaction_text(ablation).removeprefix("not computable ").strip("()")
        return None, [f"B19 is not measured on GPU: {reason}."]
    s = outcome["settings"]
    finding = b19_finding(ablation, depth=s["depth"], steps=s["steps"], seeds=s["seeds"], margin=margin)
    notes = [f"B19 on GPU: {', '.join(ablation.absent)} not run{why}."] if ablation.absent else []
    return (finding, complete_seeds(outcome["runs"])), notes


def depth_claims(
    studies: list,
    cpu_findings: dict[str, Finding],
    *,
    init: InitStudy,
    settings: dict,
    margin: float,
    b17_rule: dict,
    b18_rule: dict,
    corpus,
    where: str,
    registered: Mapping[str, int] | None = None,
) -> tuple[dict[str, Finding], str]:
    """B17, B18 and B19 answered by the scale rule: every committed GPU study's runs through this chapter's own
    measures and findings, beside this run's finding (`cpu_findings`). `registered`: claim -> the pairs a GPU study
    must reach to answer (default: the GPU design's, `gpu_study.registered_pairs`). Returns the findings to record
    (this run's, unchanged, for a claim no study measured) and the markdown to show."""
    from normlab.analysis.shared import gpu_study

    if not studies:
        return with_headlines(cpu_findings), gpu_study.none_committed("placement_depth", studies)
    registered = gpu_study.registered_pairs() if registered is None else registered
    runs = {claim: [gpu_study.this_build(where, finding)] for claim, finding in cpu_findings.items()}
    notes, sentences = [], []
    for experiment in ("placement_depth", "ablation"):
        found = gpu_study.studies_with(studies, experiment)
        if not found:
            sentences.append(gpu_study.none_committed(experiment, studies))
        for study in found:
            if experiment == "placement_depth":
                measured, said = _gpu_placement_findings(study, init, settings, margin, b17_rule, b18_rule, corpus)
            else:
                one, said = _gpu_ablation_finding(study, corpus, margin)
                measured = {} if one is None else {"B19": one}
            notes += [f"{study.source}: {line}" for line in said] if len(found) > 1 else said
            for claim, (finding, pairs) in measured.items():
                run = gpu_study.gpu_run(study, finding, pairs=pairs, registered=registered.get(claim))
                runs[claim].append(run)
    combined, sides = dict(cpu_findings), {}
    for claim, each in runs.items():
        if len(each) > 1:
            combined[claim] = scale_rule.answer(each)
            sides[claim] = (each, combined[claim])
    parts = [scale_rule.side_by_side(sides)] if sides else []
    parts += [" ".join(notes + sentences)] if notes or sentences else []
    return with_headlines(combined), "\n\n".join(parts)


def with_headlines(findings: dict[str, Finding]) -> dict[str, Finding]:
    """The findings to record, B17 and B18 with the opening page's sentences written from their final verdicts."""
    writers = {"B17": b17_headline, "B18": b18_headline}
    return {claim: replace(f, headline=writers[claim](f)) if claim in writers else f for claim, f in findings.items()}
