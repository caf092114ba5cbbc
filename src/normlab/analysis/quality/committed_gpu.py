"""Section "The committed GPU study (A9, B7)": each committed GPU study's pairs judged by the quality chapter's own
rules, shown beside this run, and one verdict made of them by the one rule for several runs
(`normlab.analysis.shared.scale_rule`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from normlab.analysis.quality import loss_parity, step_time
from normlab.analysis.quality.training import parameter_count
from normlab.analysis.shared import scale_rule
from normlab.analysis.shared.gpu_study import (
    complete_seeds,
    gpu_run,
    none_committed,
    registered_pairs,
    studies_with,
    this_build,
)
from normlab.study.findings import Finding


def _quality_runs(outcome: dict) -> dict:
    return {(r["tag"]["norm"], r["tag"]["seed"]): r for r in outcome["runs"]}


def _gpu_findings(study, cpu: dict) -> tuple[Finding, Finding]:
    """A9 and B7 on one study's pairs, through the chapter's own `loss_parity`, `a9_finding` and `b7_finding`."""
    outcome = study.experiment("quality")
    parity = loss_parity.loss_parity(_quality_runs(outcome), cpu["margin"])
    s = outcome["settings"]
    common = {
        "corpus_sha256": study.document["corpus"]["sha256"],
        "steps": s["steps"],
        "pairs": s["seeds"],
        "width": s["width"],
        "depth": s["depth"],
        "parameters": parameter_count(s),
        "device": study.hardware,
        "hardware": study.hardware,
        "margin_nats": cpu["margin"],
        "initial_val_loss": parity.initial_loss,
        "final_val_loss": parity.final_loss,
        "loss_drop_last_10pct_steps": parity.last_drop,
        "diverged_runs": len(parity.diverged),
    }
    gpu_a9 = loss_parity.a9_finding(parity, cpu["margin"], common, cpu["resume"])
    gpu_b7 = step_time.b7_finding(
        parity,
        cpu["timings"],
        cpu["speed"],
        visible=cpu["visible"],
        margin=cpu["margin"],
        backend=cpu["backend"],
        common=common,
    )
    return gpu_a9, gpu_b7


def quality_claims(
    studies, a9: Finding, b7: Finding, cpu: dict, *, registered: Mapping[str, int] | None = None
) -> tuple[Finding, Finding, str]:
    """A9 and B7 answered by the scale rule: every committed study that finished the quality experiment, its pairs
    through the chapter's own rules (B7's step-time half stays this run's: the GPU trains K models at once and
    times them together), beside this run's. `cpu`: margin, visible, backend, timings, speed, resume, where.
    `registered`: claim -> the pairs a GPU study must reach to answer (default: the GPU design's,
    `gpu_study.registered_pairs`). A9 comes back with the opening page's sentence, written from its final verdict."""
    found = studies_with(studies, "quality")
    if not found:
        return _headlined(a9), b7, none_committed("quality", studies)
    registered = registered_pairs() if registered is None else registered
    runs = {"A9": [this_build(cpu["where"], a9)], "B7": [this_build(cpu["where"], b7)]}
    for study in found:
        pairs = complete_seeds(study.experiment("quality")["runs"])
        for claim, finding in zip(("A9", "B7"), _gpu_findings(study, cpu)):
            runs[claim].append(gpu_run(study, finding, pairs=pairs, registered=registered.get(claim)))
    combined = {claim: (each, scale_rule.answer(each)) for claim, each in runs.items()}
    return _headlined(combined["A9"][1]), combined["B7"][1], scale_rule.side_by_side(combined)


def _headlined(a9: Finding) -> Finding:
    return replace(a9, headline=loss_parity.a9_headline(a9))
