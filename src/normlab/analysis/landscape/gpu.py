"""The GPU study beside this run: a committed GPU study's runs judged by this chapter's own V2-V4 rules, and
combined with this run's findings by the shared rule (`landscape_gpu_claims`).
"""

from __future__ import annotations

import math

import numpy as np

from normlab.analysis.landscape.curse_of_depth import depth_claim
from normlab.analysis.landscape.method import Landscape
from normlab.analysis.landscape.placement import placement_claim, placement_measures
from normlab.analysis.landscape.qk_norm import final_logits, qk_claim
from normlab.study.findings import Finding

GPU_EXPERIMENTS = {"V2": "placements", "V3": "width", "V4": "depth_scaling"}  # normlab.gpt.experiments' names
V1_NEEDS = ("rms-authors", "dyt-authors", "layer")  # V1's primary pair and its LayerNorm caveat
V1_NAMES = {
    "rms-authors": "RMSNorm under the authors' AdamW",
    "dyt-authors": "DyT by the authors' recipe",
    "layer": "LayerNorm",
}


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


def placement_power(finding: Finding) -> float | None:
    """V2's power: the half-width of the 95% t-interval over seeds of the weaker output-normalising placement's
    growth relative to pre-LN's, over the threshold it is judged against; None with fewer than two finite seeds."""
    from normlab.analysis.shared.parity import t975

    evidence = finding.evidence
    means = evidence["relative_growth_mean"]
    finite = {p: m for p, m in means.items() if m is not None and math.isfinite(m)}
    if not finite or not finding.threshold:
        return None
    worse = max(finite, key=finite.get)
    ratios = np.array(evidence["growth"][worse], dtype=float) / np.array(evidence["growth"]["pre"], dtype=float)
    ratios = ratios[np.isfinite(ratios)]
    if len(ratios) < 2:
        return None
    half_width = t975(len(ratios) - 1) * float(np.std(ratios, ddof=1)) / math.sqrt(len(ratios))
    return half_width / finding.threshold


def depth_power(finding: Finding) -> float | None:
    """V4's power: the paired interval of the later-half share's change, half-width over its margin."""
    from normlab.analysis.shared.gpu_study import interval_power

    return interval_power(finding.evidence.get("share_change"))


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
) -> tuple[dict, str]:
    """V2, V3 and V4 weighed: each GPU experiment's runs judged by this chapter's own `placement_claim`, `qk_claim`
    and `depth_claim` with the margins stated before measuring, then combined with this run's finding by the shared
    rule (`gpu_study.weigh`). `cpu`: this run's findings by claim (V1 to V4). Returns the findings to record (V1
    unchanged: the GPU study does not train its design, and the text says why) and the markdown to show."""
    from normlab.analysis.shared import gpu_study as G

    if not studies:
        return dict(cpu), G.none_committed(GPU_EXPERIMENTS["V2"], studies)
    found = {claim: G.latest_with(studies, name) for claim, name in GPU_EXPERIMENTS.items()}
    combined, sides, notes = dict(cpu), {}, []
    for claim, study in found.items():
        if study is None:
            names = ", ".join(s.source for s in studies)
            notes.append(
                f"{claim}: not measured on GPU: the committed study ({names}) lacks the `{GPU_EXPERIMENTS[claim]}` "
                "experiment (listed as missing), so this run's verdict stands."
            )
            continue
        gpu = gpu_landscape(
            study.experiment(GPU_EXPERIMENTS[claim]), corpus, loss_margin=loss_margin, usable_tolerance=usable_tolerance
        )
        if claim == "V2":
            measures = placement_measures(gpu)
            finding = placement_claim(
                gpu, measures, pre_growth_needed=pre_growth_needed, max_relative_growth=max_relative_growth
            )
            powers = (placement_power(cpu[claim]), placement_power(finding))
        elif claim == "V3":
            finding = qk_claim(gpu, final_logits(gpu), min_seeds=qk_min_seeds)
            powers = (None, None)  # this run decides V3, the GPU may add a caveat
        else:
            finding = depth_claim(gpu, curse_share=curse_share)
            powers = (depth_power(cpu[claim]), depth_power(finding))
        cpu_side = G.Side(where, cpu[claim], powers[0], False)
        gpu_side = G.Side.of_study(study, finding, powers[1])
        sides[claim] = (cpu_side, gpu_side, G.weigh(cpu_side, gpu_side))
        combined[claim] = sides[claim][2]
    width = found["V3"]
    notes.insert(0, f"V1: not measured on GPU: {v1_not_on_gpu(width and width.experiment('width'))}.")
    table = G.side_by_side(sides) if sides else ""
    return combined, "\n\n".join(part for part in (table, " ".join(notes)) if part)
