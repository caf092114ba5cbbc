"""Section "The final norm's role" (claim V8, TaperNorm: Kanavalau, Amo Alonso & Lall, arXiv 2602.10408 v2).

Three pre-LN RMSNorm models trained as pairs over seeds (same seed: identical initial values in every shared
parameter, the same batches), differing only in which norms they keep:

- "all norms": the baseline;
- "block norms removed": every norm inside the blocks replaced by the identity from step 0, the final norm kept. The
  source tapers them into learned sample-independent maps during training with a gated schedule; removal from step 0
  is another intervention, and the verdict's first sentence names it as what was tested;
- "final norm removed": the blocks keep their norms, the head reads the trunk directly.

Besides the validation loss, each run records the pre-logit scale over training on one fixed validation batch: the
RMS of the head's input (the last hidden state the logits are read from, after the final norm where there is one),
the RMS of the trunk's output before any final norm, and the RMS of the logits. `scale_job` is the picklable job;
`train_arms` trains every arm and seed in the study's pool; `v8_measures` pairs them; `v8_finding` decides.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch

from normlab.analysis.shared import confirmation as confirmations
from normlab.analysis.shared.missing_runs import PairsLeft, RunGaps, completed
from normlab.analysis.shared.paired import interval_text, paired_or_none
from normlab.study import design
from normlab.study.findings import Finding
from normlab.study.trained import ArmLosses
from normlab.study.verdict_rules import ABOVE, BELOW, side_of

ALL, BLOCKS_REMOVED, FINAL_REMOVED = "all norms", "block norms removed", "final norm removed"
# The registration's own pilot (seeds 900-902, not committed): its mean loss difference, block norms removed − all
# norms, in nats per byte, as data/design.toml's V8 registration entry records it. With the committed pilot's mean it
# says what the confirmation, sized for a true difference of 0, was likely to find.
REGISTRATION_PILOT_MEAN = 0.038
# What was seen before V8's registrations (data/design.toml's change log), for its caveats; the page says the same.
V8_LOOKED = (
    "a pilot's outcome was seen before each registration: seeds 900-902 (+0.038 nats per byte, logits' RMS ratio "
    "about 1.7) before the design (2026-12-05), and the first design's 4 pairs (seeds 0-3) in every cpu build before "
    "the confirmation (6aa0565)"
)
ARMS = {ALL: {}, BLOCKS_REMOVED: {"drop_block_norms": True}, FINAL_REMOVED: {"drop_final_norm": True}}
PROBES = 10  # pre-logit scale measured at step 0 and ten evenly spaced steps


def _rms(x: torch.Tensor) -> float:
    return float(x.double().pow(2).mean().sqrt())


@torch.no_grad()
def pre_logit_scale(model, idx: torch.Tensor) -> dict:
    """RMS of the head's input (`hidden`), of the trunk's output before any final norm (`trunk`) and of the logits,
    for the token batch `idx`, in evaluation mode (the model's mode is restored)."""
    seen = {}
    handles = [
        model.lm_head.register_forward_pre_hook(lambda module, args: seen.__setitem__("hidden", args[0])),
        model.blocks[-1].register_forward_hook(lambda module, args, out: seen.__setitem__("trunk", out)),
    ]
    was_training = model.training
    model.eval()
    try:
        logits, _ = model(idx)
    finally:
        model.train(was_training)
        for handle in handles:
            handle.remove()
    return {"hidden_rms": _rms(seen["hidden"]), "trunk_rms": _rms(seen["trunk"]), "logit_rms": _rms(logits)}


def probe_steps(steps: int) -> set[int]:
    """The steps after which the scale is measured (step 0 is measured on the initial model)."""
    return {max(1, round(steps * k / PROBES)) for k in range(1, PROBES + 1)}


def scale_job(model: dict, train: dict) -> dict:
    """Train GPTConfig(**model) with TrainConfig(**train) on the study corpus (the worker's device), measuring the
    pre-logit scale at `probe_steps`: the run record (`normlab.gpt.run_record`) plus `scale`, a list of
    {step, hidden_rms, trunk_rms, logit_rms}."""
    from normlab.gpt.corpus import load_corpus
    from normlab.gpt.model import GPT, GPTConfig
    from normlab.gpt.run_record import run_record
    from normlab.gpt.train import TrainConfig
    from normlab.gpt.train import train as train_model
    from normlab.runtime.parallel import worker_device

    corpus = load_corpus()
    mcfg = GPTConfig(**model)
    tcfg = TrainConfig(**{"progress": False, **train, "device": train.get("device") or worker_device()})
    # one fixed validation batch, the same for every arm and seed
    probe = corpus.batch("val", tcfg.batch_size, mcfg.context, torch.Generator().manual_seed(0))[0]
    torch.manual_seed(tcfg.seed)  # the trainer's own construction: the initial model of this run
    scale = [{"step": 0, **pre_logit_scale(GPT(mcfg), probe)}]
    due = probe_steps(tcfg.steps)

    def on_step(row, trained_model):
        if row["step"] in due:
            scale.append({"step": int(row["step"]), **pre_logit_scale(trained_model, probe.to(tcfg.device))})

    result = train_model(mcfg, tcfg, corpus, on_step=on_step)
    return {**run_record(result), "scale": scale}


def arm_job(model: dict, train: dict, seeds) -> list[dict]:
    """`scale_job` for each seed in turn, in one process: the compiled step is traced once per model
    configuration and process, and that tracing, not the training, is most of a small run's time."""
    return [scale_job(model, {**train, "seed": int(seed)}) for seed in seeds]


def arm_jobs(settings: dict, seeds) -> tuple[list[dict], list[str], list[str]]:
    """Jobs of at least two seeds of one arm each (half the seeds, so both workers stay busy), at the depth
    chapter's ablation size with the design's trainer (settings["final_norm_step"]); their names and arms."""
    steps = settings["ablation_steps"]
    base_model = dict(
        depth=settings["ablation_depth"],
        width=settings["width"],
        context=settings["context"],
        norm="rms",
        placement="pre",
    )
    base_train = dict(
        steps=steps,
        batch_size=settings["batch"],
        lr=settings["lr"],
        warmup_steps=steps // 10,
        eval_every=max(1, steps // PROBES),
        stream_every=0,
        step=settings["final_norm_step"],
    )
    seeds = [int(seed) for seed in seeds]
    size = max(2, math.ceil(len(seeds) / 2))
    chunks = [seeds[i : i + size] for i in range(0, len(seeds), size)]
    jobs, names, arms = [], [], []
    for chunk in chunks:
        for arm, change in ARMS.items():
            jobs.append(dict(model={**base_model, **change}, train=base_train, seeds=chunk))
            names.append(f"V8 {arm}, seeds {chunk}")
            arms.append(arm)
    return jobs, names, arms


def train_arms(settings: dict, seeds, devices=None) -> tuple[pd.DataFrame, RunGaps]:
    """Every arm at every seed in the study's pool: one row per run that completed (seed, arm, final_val_loss,
    diverged, val, scale), and the runs that failed every attempt, by name."""
    from normlab.runtime.parallel import run_parallel

    seeds = list(seeds)
    if not seeds:
        raise ValueError("seeds is empty; give the registered seeds of V8 (design.pairs('depth:final_norm_seeds'))")
    jobs, names, arms = arm_jobs(settings, seeds)
    outputs = run_parallel(arm_job, jobs, devices=devices, desc="V8 final norm", names=names, missing="keep")
    done = completed(outputs, range(len(jobs)))  # a lost job's seeds are then not comparable: final_rows drops them
    rows = [
        {"seed": seed, "arm": arms[index], **record}
        for index, out in done.items()
        for seed, record in zip(jobs[index]["seeds"], out)
    ]
    return pd.DataFrame(rows), done.gaps


def seeds_of(settings: dict) -> range:
    """V8's paired seeds at this profile: its registered confirmation's fresh ones where it has one."""
    return range(settings["final_norm_first_seed"], settings["final_norm_first_seed"] + settings["final_norm_seeds"])


def pairs_left(runs: pd.DataFrame, gaps: RunGaps, settings: dict) -> PairsLeft:
    """What lost runs left of V8's design: the seeds whose three arms all completed, of the registered pairs."""
    return PairsLeft(gaps, int(final_rows(runs)["seed"].nunique()) if len(runs) else 0, settings["final_norm_seeds"])


def final_rows(runs: pd.DataFrame) -> pd.DataFrame:
    """Per seed with all three arms: the final validation loss and the final pre-logit scale of each arm (a run that
    diverged counts as NaN, so its seed's pairs are not comparable)."""
    records = []
    for _, run in runs.iterrows():
        last = run["scale"][-1]
        ok = not run["diverged"]
        records.append(
            {
                "seed": run["seed"],
                "arm": run["arm"],
                "val_loss": run["final_val_loss"] if ok else math.nan,
                **{k: (last[k] if ok else math.nan) for k in ("hidden_rms", "trunk_rms", "logit_rms")},
            }
        )
    frame = pd.DataFrame(records, columns=["seed", "arm", "val_loss", "hidden_rms", "trunk_rms", "logit_rms"])
    complete = frame.groupby("seed")["arm"].nunique() == len(ARMS)
    return frame[frame["seed"].isin(complete[complete].index)].sort_values(["seed", "arm"])


def scale_curves(runs: pd.DataFrame) -> pd.DataFrame:
    """Long frame of the scale over training: seed, arm, step, hidden_rms, trunk_rms, logit_rms, and val_loss where
    an evaluation fell on that step."""
    rows = []
    for _, run in runs.iterrows():
        val = dict(run["val"])
        for point in run["scale"]:
            rows.append({"seed": run["seed"], "arm": run["arm"], **point, "val_loss": val.get(point["step"], math.nan)})
    return pd.DataFrame(rows)


def _side(finals: pd.DataFrame, arm: str, column: str) -> list[float]:
    return finals[finals["arm"] == arm].sort_values("seed")[column].astype(float).tolist()


def v8_measures(finals: pd.DataFrame, margin: float, logit_ratio: float) -> dict:
    """The paired readings: (b) − (a) final validation loss against +margin; log of the logits' RMS ratio (c)/(a)
    against log(logit_ratio) (its interval, exponentiated, is the ratio's); and, described, (c) − (a) loss and the
    head input's RMS ratio (c)/(a)."""
    if not (isinstance(logit_ratio, (int, float)) and logit_ratio > 1 and math.isfinite(logit_ratio)):
        raise ValueError(f"logit_ratio must be a finite ratio above 1 (growth), got {logit_ratio!r}")
    base = _side(finals, ALL, "val_loss")
    log = lambda values: [math.log(v) if v > 0 else math.nan for v in values]  # noqa: E731
    return {
        "pairs": len(base),
        "removed_minus_all": paired_or_none(base, _side(finals, BLOCKS_REMOVED, "val_loss"), margin),
        "log_logit_ratio": paired_or_none(
            log(_side(finals, ALL, "logit_rms")), log(_side(finals, FINAL_REMOVED, "logit_rms")), math.log(logit_ratio)
        ),
        "final_removed_minus_all": paired_or_none(base, _side(finals, FINAL_REMOVED, "val_loss"), margin),
        "log_hidden_ratio": paired_or_none(
            log(_side(finals, ALL, "hidden_rms")),
            log(_side(finals, FINAL_REMOVED, "hidden_rms")),
            math.log(logit_ratio),
        ),
        "means": {
            arm: {
                c: float(np.mean(_side(finals, arm, c))) for c in ("val_loss", "hidden_rms", "trunk_rms", "logit_rms")
            }
            for arm in ARMS
        },
    }


def _part(interval: dict | None) -> str:
    """One part's reading against its registered +threshold: 'below', 'above' or 'undecided' (None: undecided)."""
    if interval is None:
        return "undecided"
    return {BELOW: "below", ABOVE: "above"}.get(side_of(interval, interval["margin"]), "undecided")


def _ratio_text(interval: dict | None) -> str:
    if interval is None:
        return "not comparable (a run diverged, or fewer than two pairs ran)"
    e = math.exp
    return (
        f"×{e(interval['mean_difference']):.2f} (95% CI ×{e(interval['ci_low']):.2f}..×{e(interval['ci_high']):.2f}, "
        f"{interval['pairs']} pairs)"
    )


def v8_finding(
    measures: dict,
    *,
    margin: float,
    logit_ratio: float,
    scale: str,
    trainer: str,
    confirmation: confirmations.RegisteredConfirmation | None = None,
) -> Finding:
    """V8's finding: its verdict by its registered readings and verdict rules (data/design.toml), the loss part
    ('small increase', the paired (b) − (a) interval against +margin) and the logit part ('logit growth', the log of
    the logits' RMS ratio (c)/(a) against log logit_ratio). With the registered `confirmation` (cpu, smoke) the
    measures are its fresh seeds', and its design and pilot are recorded beside them."""
    loss, ratio = measures["removed_minus_all"], measures["log_logit_ratio"]
    failed = [
        name
        for name, bad in (("small increase", _part(loss) == "above"), ("logit growth", _part(ratio) == "below"))
        if bad
    ]
    verdict = design.registered_verdict("V8", measures)
    fragile = verdict == "not testable here"
    summary = (
        "Block norms removed from step 0 (not tapered during training, as the source does) − all norms: "
        f"{interval_text(loss, 'nats per byte', margin=False)} against +{margin:g}; "
        f"logits' RMS, final norm removed ÷ all norms: {_ratio_text(ratio)} against ×{logit_ratio:g}"
    )
    caveats = (
        "the block norms were removed from step 0 rather than tapered into learned sample-independent maps during "
        "training by the source's gated schedule",
    )
    if verdict == "holds with caveats":
        caveats += (f"one small model ({scale})",)
    if confirmation is not None:
        sized = confirmations.registered("V8")  # the registered (cpu) confirmation's pairs, whatever this profile ran
        pilot = sized.pilot_pair("V8")["mean_difference"]
        likely = [sized.power("V8", mean) for mean in (REGISTRATION_PILOT_MEAN, pilot)]
        caveats += (
            f"its confirmation was sized for a true difference of 0, though both pilots' means (+{REGISTRATION_PILOT_MEAN:.3f} "
            f"and +{pilot:.3f} nats per byte) lay above the +{margin:g} margin: at those means its loss interval had a "
            f"{likely[0]:.1%} and {likely[1]:.1%} chance of ending below the margin, so an undecided result was the "
            "likely outcome",
            V8_LOOKED,
        )
    key = None if ratio is None else math.exp(ratio["mean_difference"])
    # the key number is a ratio, so its spread is the sd of the per-seed ratios (not of their logs)
    spread = None if ratio is None else float(np.std([math.exp(d) for d in ratio["differences"]], ddof=1))
    return Finding(
        verdict,
        summary,
        {
            "removed_minus_all": loss,
            "log_logit_ratio": ratio,
            "final_removed_minus_all": measures["final_removed_minus_all"],
            "log_hidden_ratio": measures["log_hidden_ratio"],
            "means": measures["means"],
            "failed_parts": failed,
            "fragile": fragile,
            "trainer": trainer,
            **(confirmations.evidence(confirmation, "V8", confirmation.pilot_pair("V8")) if confirmation else {}),
        },
        key_number=key,
        threshold=logit_ratio,
        spread=spread,
        meaning="RMS of the logits without the final norm ÷ with it, at the end of training",
        unit="ratio",
        caveats=caveats,
        reads=("margin", "logit_ratio"),
        scale=scale,
    )


def v8_paragraph(finding: Finding) -> str:
    """The verdict's sentence for the page."""
    ev = finding.evidence
    loss, ratio, other = ev["removed_minus_all"], ev["log_logit_ratio"], ev["final_removed_minus_all"]
    text = (
        f"**V8: {finding.verdict}.** Removing the block norms from step 0 (final norm kept; the source tapers them "
        f"during training instead) changes the final validation loss by "
        f"{interval_text(loss, 'nats per byte', margin=False)}. Removing the final norm (block norms kept) multiplies "
        f"the logits' RMS at the end of training by {_ratio_text(ratio)} and changes the loss by "
        f"{interval_text(other, 'nats per byte', margin=False)}."
    )
    parts = {"small increase": _part(loss) == "below", "logit growth": _part(ratio) == "above"}
    shown = [name for name, ok in parts.items() if ok]
    open_ = [name for name, ok in parts.items() if not ok and name not in ev["failed_parts"]]
    for label, names in (("Shown", shown), ("Contradicted by its interval", ev["failed_parts"]), ("Undecided", open_)):
        if names:
            text += f" {label}: {' and '.join(names)}."
    if _part(loss) == "undecided" and loss is not None and side_of(loss, 0.0) == ABOVE:
        text += (
            " Descriptive only, never registered and deciding nothing: the loss interval lies wholly above zero, a "
            "reading against zero added after the pilot was seen."
        )
    if finding.verdict == "not testable here":
        text += " An undecided part leaves the claim not testable here at these pairs (fragile)."
    if finding.caveats:
        text += " Caveats: " + "; ".join(finding.caveats) + "."
    return text


def v8_arms(runs: pd.DataFrame, entropy: float, scale: str) -> ArmLosses:
    """Each arm's mean final and step-0 validation loss over its seeds (`ArmLosses`); an arm with a diverged run (a
    non-finite loss) or no run is NaN, which did not train."""

    def mean(arm: str, column: str) -> float:
        values = runs[runs["arm"] == arm][column].astype(float) if len(runs) else pd.Series([], dtype=float)
        return float(values.mean()) if len(values) and np.isfinite(values).all() else math.nan

    return ArmLosses(
        final={arm: mean(arm, "final_val_loss") for arm in ARMS},
        initial={arm: mean(arm, "initial_val_loss") for arm in ARMS},
        entropy=entropy,
        scale=scale,
    )
