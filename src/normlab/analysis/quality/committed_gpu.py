"""Section "The committed GPU study (A9, B7)": a committed GPU study's pairs judged by the quality chapter's own
rules and weighed beside this run (`normlab.analysis.shared.gpu_study.weigh`)."""

from __future__ import annotations

from dataclasses import replace

from normlab.analysis.quality import loss_parity, step_time
from normlab.analysis.quality.training import parameter_count
from normlab.analysis.shared.gpu_study import Side, interval_power, latest_with, none_committed, side_by_side, weigh
from normlab.study.findings import Finding


def _quality_runs(outcome: dict) -> dict:
    return {(r["tag"]["norm"], r["tag"]["seed"]): r for r in outcome["runs"]}


def quality_claims(studies, a9: Finding, b7: Finding, cpu: dict) -> tuple[Finding, Finding, str]:
    """A9 and B7 weighed: the GPU study's pairs through the quality chapter's `loss_parity`, `a9_finding` and
    `b7_finding` (B7's step-time half stays this run's: the GPU trains K models at once and times them together).
    `cpu`: margin, visible, backend, timings, speed, resume, parity (this run's), where. A9 comes back with the
    opening page's sentence, written from its final verdict."""
    study = latest_with(studies, "quality")
    if study is None:
        return _headlined(a9), b7, none_committed("quality", studies)
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
    mine = cpu["parity"]
    sides = {
        "A9": (
            Side(cpu["where"], a9, interval_power(mine.final_pair), False),
            Side.of_study(study, gpu_a9, interval_power(parity.final_pair)),
        ),
        "B7": (
            Side(cpu["where"], b7, interval_power(mine.curve_pair), False),
            Side.of_study(study, gpu_b7, interval_power(parity.curve_pair)),
        ),
    }
    combined = {claim: (c, g, weigh(c, g)) for claim, (c, g) in sides.items()}
    return _headlined(combined["A9"][2]), combined["B7"][2], side_by_side(combined)


def _headlined(a9: Finding) -> Finding:
    return replace(a9, headline=loss_parity.a9_headline(a9))
