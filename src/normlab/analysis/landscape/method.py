"""Method, and the margins fixed before measuring: the chapter's runs with those margins (`Landscape`: pick
runs, pair them by seed, usable learning-rate ranges), the opening every claim's verdict paragraph shares
(`verdict_lead`), and the overview of sizes, runs and how far the loss flattened.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

from normlab.analysis.landscape.profiles import MAX_LOGIT_PROBED, SCALES, is_dyt, paired_seeds
from normlab.analysis.landscape.summaries import usable_flags, usable_lr_range
from normlab.analysis.shared.looks import disclosed, looks
from normlab.analysis.shared.missing_runs import RunGaps, not_testable
from normlab.analysis.shared.paired import paired_or_none
from normlab.gpt.model import GPT, GPTConfig
from normlab.study.findings import Finding
from normlab.study.present import significant
from normlab.study.trained import ArmLosses


def frame_of(runs: list[dict]) -> pd.DataFrame:
    """One row per run: its scale, label, learning rate, seed, width, DyT's α₀ (the norms' not in front of
    attention) and whether it is its variant's own, and its outcome."""
    rows = []
    for r in runs:
        t = r["tag"]
        rows.append(
            {
                "scale": t["scale"],
                "label": t["label"],
                "lr": t["lr"],
                "seed": t["seed"],
                "width": r["model"]["width"],
                "alpha": r["model"].get("dyt_alpha", 0.5) if is_dyt(t["label"]) else None,
                "reference_alpha": t.get("reference_alpha", True),
                "final": r["final_val_loss"],
                "diverged": r["diverged"],
                "final_drop": r["final_drop"],
                "step_time": r["median_step_time"],
            }
        )
    return pd.DataFrame(rows)


def finals(runs: list[dict]) -> list[float]:
    """Final validation losses, NaN for a run that diverged."""
    return [r["final_val_loss"] if not r["diverged"] else math.nan for r in runs]


def range_summary(ranges: dict, label: str) -> dict:
    """The usable learning-rate range of `label` over its grid seeds: the narrowest (lowest top, lowest bottom),
    and the lowest learning rate at which any seed was unusable above its range (a loss gap or a divergence)."""
    highs = [v["lr_high"] for (lab, _), v in ranges.items() if lab == label and v["lr_high"]]
    lows = [v["lr_low"] for (lab, _), v in ranges.items() if lab == label and v["lr_low"]]
    fails = [v["fails_at"] for (lab, _), v in ranges.items() if lab == label]
    return {
        "lr_low": min(lows) if lows else None,
        "lr_high": min(highs) if highs else None,
        "unusable_above": min([f for f in fails if f is not None], default=None),
        "decades": math.log10(min(highs) / min(lows)) if highs and lows else 0.0,
    }


# The runs each claim's verdict rests on: (scale, labels), None for every label of the scale. A claim that lost one
# of them to a job failing every attempt is not testable here: the chapter registers no fewer pairs than it designs.
CLAIM_RUNS = {"V1": ("small", None), "V2": ("deep", None), "V3": ("small", MAX_LOGIT_PROBED), "V4": ("deepest", None)}


class Landscape:
    """The chapter's runs, with the margins stated before measuring, and the lookups its analyses share.

    `runs` may hold the place of a run that failed every attempt (`missing`, its name, beside its `tag` and
    `model`, as `runs.run_jobs` leaves it): such runs are kept apart in `missing`, pairs that lost one are compared on
    the seeds both sides have, a grid seed that lost one has no usable range, and `judge` makes each claim that rests
    on one not testable here, naming it."""

    def __init__(self, settings: dict, runs: list[dict], corpus, *, loss_margin: float, usable_tolerance: float):
        self.settings = settings
        self.missing = [r for r in runs if "missing" in r]
        runs = [r for r in runs if "missing" not in r]
        self.runs = runs
        self.entropy = corpus.unigram_entropy_nats
        self.corpus_sha256 = corpus.sha256
        self.loss_margin = loss_margin
        self.usable_tolerance = usable_tolerance
        self.frame = frame_of(runs)
        self._ranges: dict = {}

    def gaps(self, claim_id: str) -> RunGaps:
        """The missing runs `claim_id`'s verdict rests on (`CLAIM_RUNS`)."""
        scale, labels = CLAIM_RUNS[claim_id]
        lost = [
            r for r in self.missing if r["tag"]["scale"] == scale and (labels is None or r["tag"]["label"] in labels)
        ]
        return RunGaps(tuple(r["missing"] for r in lost), lost[0]["where"] if lost else RunGaps.where)

    def judge(self, claim_id: str, finding: Finding) -> Finding:
        """`finding`, not testable here and naming them where runs it rests on are missing; else unchanged."""
        gaps = self.gaps(claim_id)
        if not gaps:
            return finding
        return not_testable(finding, gaps, "runs it rests on failed, and its design registers every pair it trains")

    def arms(self, scale: str, names: dict[str, str]) -> ArmLosses:
        """Each arm's (label: name) mean final and step-0 validation loss at the scale's reference learning rate and
        the seeds its pairs read, beside the byte frequencies' entropy, for the did-it-train rule."""
        size = GPT(GPTConfig(**self.settings[scale])).num_parameters()
        steps = self.settings[f"{scale}_train"]["steps"]
        return arm_losses(
            {label: self.pick(scale, label) for label in names},
            self.entropy,
            scale=f"{size:,} parameters, {steps} steps",
            names=names,
        )

    def missing_paragraph(self) -> str:
        """The page's sentence on the runs that failed every attempt; '' when none did."""
        lost = RunGaps(tuple(r["missing"] for r in self.missing), self.missing[0]["where"] if self.missing else "")
        return lost.paragraph(
            "Pairs that lost a run are compared on the seeds both sides have, a grid seed that lost a run has no "
            "usable range, and each claim resting on a missing run is not testable here."
        )

    def pick(self, scale: str, label: str, lr=None, width=None, alpha=None) -> list[dict]:
        """The runs of one variant at one learning rate, width and α₀ (defaults: the scale's reference learning
        rate and width, the variant's own α₀), by seed."""
        return self._pick(self.runs, scale, label, lr, width, alpha)

    def _pick(self, runs: list[dict], scale: str, label: str, lr=None, width=None, alpha=None) -> list[dict]:
        lr = self.settings[f"{scale}_train"]["lr"] if lr is None else lr
        width = self.settings[scale]["width"] if width is None else width
        seeds = paired_seeds(self.settings, scale)
        keep = []
        for r in runs:
            t = r["tag"]
            if (
                t["seed"] in seeds  # V3's wide grid trains more seeds; the pairs are the design's
                and t["scale"] == scale
                and t["label"] == label
                and t["lr"] == lr
                and r["model"]["width"] == width
                and (t.get("reference_alpha", True) if alpha is None else r["model"].get("dyt_alpha", 0.5) == alpha)
            ):
                keep.append(r)
        return sorted(keep, key=lambda r: r["tag"]["seed"])

    def versus(self, scale: str, baseline: str, variant: str, **kw) -> dict | None:
        """Paired final-loss difference variant − baseline over seeds; None where a run diverged."""
        a, b = self.pick(scale, baseline, **kw), self.pick(scale, variant, **kw)
        lost = {r["tag"]["seed"] for label in (baseline, variant) for r in self._pick(self.missing, scale, label, **kw)}
        a, b = ([r for r in side if r["tag"]["seed"] not in lost] for side in (a, b))  # the complete pairs
        if [r["tag"]["seed"] for r in a] != [r["tag"]["seed"] for r in b]:
            raise RuntimeError(f"{variant} and {baseline} are not paired by seed")
        return paired_or_none(finals(a), finals(b), self.loss_margin)

    def ranges(self, scale: str, compared: Sequence[str]) -> dict:
        """Usable LR range per (label, seed) of the variants a claim compares, on its scale's grid seeds. Each run
        is judged against the best run among `compared` alone: a variant the claim does not involve (one trained
        under another optimiser, say) must not move the bar."""
        key = (scale, tuple(sorted(compared)))
        if key in self._ranges:
            return self._ranges[key]
        F = self.frame
        seeds = range(self.settings["grid_seeds" if scale == "small" else "deep_grid_seeds"])
        grid = self.settings["lr_grid" if scale == "small" else "deep_lr_grid"]
        part = F[
            (F.scale == scale)
            & F.label.isin(compared)
            & (F.width == self.settings[scale]["width"])
            & F.seed.isin(seeds)
            & F.lr.isin(grid)
        ]
        part = part[part.reference_alpha]
        best = float(part.loc[~part.diverged, "final"].min())
        out = {}
        lost = {  # the grid points of `part` that failed every attempt
            (r["tag"]["label"], r["tag"]["seed"])
            for r in self.missing
            if r["tag"]["scale"] == scale
            and r["tag"]["label"] in compared
            and r["tag"]["seed"] in seeds
            and r["model"]["width"] == self.settings[scale]["width"]
            and r["tag"].get("reference_alpha", True)
        }
        for (label, seed), g in part.groupby(["label", "seed"]):
            if (label, seed) in lost:
                continue  # a grid with a hole has no contiguous usable range
            g = g.sort_values("lr")
            flags = usable_flags(g.final.tolist(), g.diverged.tolist(), best, self.usable_tolerance)
            out[(label, seed)] = usable_lr_range(g.lr.tolist(), flags)
        self._ranges[key] = out
        return out

    def stable_ranges(self, scale: str, labels: Sequence[str], grid=None, seeds=None) -> dict:
        """Per (label, seed) over the scale's grid seeds (or `seeds`) and grid (or `grid`): the contiguous stretch of
        learning rates at which the run did not diverge (the study's run record: a non-finite loss or gradient, or a
        final loss above the initial one), and the first learning rate above it that diverged (`fails_at`). No loss
        bar: a run that trained worse but did not diverge is stable."""
        F = self.frame
        if seeds is None:
            seeds = range(self.settings["grid_seeds" if scale == "small" else "deep_grid_seeds"])
        if grid is None:
            grid = self.settings["lr_grid" if scale == "small" else "deep_lr_grid"]
        part = F[
            (F.scale == scale)
            & F.label.isin(labels)
            & (F.width == self.settings[scale]["width"])
            & F.seed.isin(seeds)
            & F.lr.isin(grid)
        ]
        part = part[part.reference_alpha]
        return {
            (label, seed): usable_lr_range(g.sort_values("lr").lr.tolist(), (~g.sort_values("lr").diverged).tolist())
            for (label, seed), g in part.groupby(["label", "seed"])
        }

    def usable_range(self, scale: str, label: str, compared: Sequence[str]) -> dict:
        """`range_summary` of one variant on its scale's grid, judged within the variants `compared`."""
        if label not in compared:
            raise ValueError(f"usable_range: {label!r} is not among the compared variants {tuple(compared)}")
        return range_summary(self.ranges(scale, compared), label)


def paired_finding(verdict: str, summary: str, evidence: dict, primary: dict | None, margin: float, key) -> Finding:
    """A verdict whose key number is the paired interval `primary` (None where a run diverged) read against `margin`:
    its mean difference, its sd of differences as the spread, and `key`'s meaning and unit (a KeyNumber)."""
    return Finding(
        verdict,
        summary,
        evidence,
        key_number=primary["mean_difference"] if primary else None,
        threshold=margin,
        spread=primary["sd_of_differences"] if primary else None,
        meaning=key.meaning,
        unit=key.unit,
    )


def _mean_of(runs: Sequence[dict], key: str) -> float:
    """The mean of `key` over the runs that finished without diverging; NaN where none did (an arm that did not
    train, for the did-it-train rule)."""
    values = [float(r[key]) for r in runs if "missing" not in r and not r["diverged"] and math.isfinite(r[key])]
    return sum(values) / len(values) if values else math.nan


def arm_losses(
    arms: dict[str, Sequence[dict]],
    entropy: float,
    *,
    scale: str,
    names: dict | None = None,
    answers: Sequence[str] = (),
) -> ArmLosses:
    """Each arm's mean final and step-0 validation loss over its finished runs, beside the byte frequencies' entropy
    (normlab.study.trained.ArmLosses), for the did-it-train rule `Results.record` applies; `answers`: the arms whose
    failure to train answers a claim that registers `untrained_answers` (V1's DyT arms)."""
    return ArmLosses(
        final={arm: _mean_of(runs, "final_val_loss") for arm, runs in arms.items()},
        initial={arm: _mean_of(runs, "initial_val_loss") for arm, runs in arms.items()},
        entropy=entropy,
        scale=scale,
        names=dict(names or {}),
        answers=tuple(answers),
    )


def looks_table(claim_ids: Sequence[str]) -> pd.DataFrame:
    """Per claim, each look before a registration or change of its design: the date, what changed, what had been
    seen (the change log's entries, `looks`)."""
    return pd.DataFrame(
        [
            {"claim": claim_id, "date": c["date"], "what changed": c["field"], "seen before": c["look"]}
            for claim_id in claim_ids
            for c in looks(claim_id)
        ]
    )


def record(finding: Finding, results, claim_id: str, section: str) -> Finding:
    """Record `finding`, every look at its claim disclosed in its caveats (`disclosed`), and return it as recorded:
    the verdict, sentence and headline after the did-it-train rule (`Results.record`), and each arm's losses beside
    the entropy in its evidence (`arms_trained`), so that the page shows what the ledger shows."""
    entry = disclosed(finding, claim_id).record(results, claim_id, section)
    finding.verdict, finding.summary, finding.headline = entry["verdict"], entry["summary"], entry["headline"]
    finding.evidence = {**finding.evidence, "arms_trained": entry["evidence"]["arms_trained"]}
    return finding


def arms_table(findings: dict[str, Finding]) -> pd.DataFrame:
    """Per claim and arm, as recorded: the mean final and step-0 validation loss, how far the final loss ends below
    the byte frequencies' entropy, and whether that clears the registered minimum."""
    rows = []
    for claim, finding in findings.items():
        record_ = finding.evidence["arms_trained"]
        for arm, losses in record_["arms"].items():
            rows.append(
                {
                    "claim": claim,
                    "arm": arm,
                    "step 0": losses["initial_val_loss"],
                    "final": losses["final_val_loss"],
                    "entropy": record_["unigram_entropy_nats"],
                    "below entropy": losses["below_entropy"],
                    "trained": "yes" if losses["trained"] else "no",
                }
            )
    return pd.DataFrame(rows)


def run_scale(runs: list[dict], train_keys: Sequence[str]) -> dict:
    """The evidence that says at what scale `runs` trained: model shape, the `train_keys` of their schedule, the
    trainer and the seeds. A missing run keeps its model and tag, so the first complete run is read if any."""
    some = next((r for r in runs if "missing" not in r), runs[0])
    return {
        "model": {k: v for k, v in some["model"].items() if k in ("width", "depth", "heads", "context")},
        "train": {k: v for k, v in some.get("train", {}).items() if k in train_keys},
        "trainer": some["train"]["step"],
        "seeds": sorted({r["tag"]["seed"] for r in runs}),
    }


def verdict_lead(claim_id: str, finding: Finding) -> str:
    """The start of a claim's verdict paragraph: its verdict in bold and its sentence, as the finding records them;
    each claim's paragraph goes on with what the runs say around it, read from the finding's evidence."""
    return f"**Verdict ({claim_id}): {finding.verdict}.** {finding.summary} "


def measured(value) -> float:
    """An evidence number as a float, NaN where the finding holds None (a number the run could not measure), so
    that comparisons with it are false, as they were before the finding stored it."""
    return math.nan if value is None else float(value)


def overview(study: Landscape) -> str:
    """Model sizes, run count, corpus, divergences, and whether the loss flattened against the loss margin."""
    P, F, runs = study.settings, study.frame, study.runs
    still_falling = float(F.final_drop.dropna().median())
    sizes = {scale: GPT(GPTConfig(**P[scale])).num_parameters() for scale in SCALES}
    return (
        "Model sizes: "
        + ", ".join(
            f"{scale} {P[scale]['depth']} blocks × width {P[scale]['width']} = {sizes[scale]:,} parameters"
            for scale in sizes
        )
        + ". "
        f"{len(runs)} runs on corpus SHA-256 `{runs[0]['corpus_sha256'][:12]}…`; {int(F.diverged.sum())} diverged. "
        f"Over the last 10% of their steps the runs' validation loss still fell by a median of "
        f"{significant(still_falling)} nats per byte: the loss has "
        f"{'flattened' if still_falling < study.loss_margin else 'not quite flattened'} "
        f"against the margin of {study.loss_margin:g} nats per byte."
    )


# What each source trained, for the sentence on what would decide V2 and V4 (and whether it was checked).
SOURCE_SCALES = {
    "V2": "Kim et al. (Peri-LN) train models of 400M to 3.2B parameters on tens of billions of tokens, and OLMo 2 "
    "models of 7B and 13B on trillions (from the papers' setups as the study's sources transcribe them, not checked "
    "against the papers here)",
    "V4": "Sun et al. train LLaMA models of 130M to 7B parameters on billions of tokens (the abstract of arXiv "
    "2502.05795, checked against its arXiv HTML); their smallest, LLaMA-130M, has 12 blocks of width 768 (from memory "
    "of the paper's setup, not checked)",
}


def what_would_decide(claim: str) -> str:
    """What would decide `claim` (V2 or V4): the source's scale, which no run here reaches."""
    return f"**What would decide {claim}.** {SOURCE_SCALES[claim]}. That scale does not fit a cpu book."
