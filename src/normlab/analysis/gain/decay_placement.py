"""Section "Weight decay on input norms' gains against output norms'" (claim V5): Wang et al. 2026's two kinds of norm.

Wang et al. (arXiv 2605.26895) say that weight decay on the gains helps the norms whose output feeds a linear map
(Input-Norm) and harms the norms on a sublayer's output (Output-Norm). A Peri-LN GPT has both in every block
(`normlab.gpt.train.norm_role`): three arms, paired by seed (same initial weights and batches), put AdamW's
decoupled decay λ_g on the input norms' gains only, on the output norms' gains only, or on neither; everything
else, the final norm's undecayed gain and the matrices' decay included, is the same in all three. Each effect
(arm − neither, final validation loss) is read against ±margin, and the verdict rule is the registered one
(data/design.toml, [claims.V5]).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from normlab.analysis.shared.missing_runs import CompletedRuns, PairsLeft, complete_pairs, completed, registered_pairs
from normlab.analysis.shared.paired import interval_text, paired_or_none
from normlab.analysis.shared.runs import flat_eval_every, train_job
from normlab.gpt.model import GPT, GPTConfig
from normlab.gpt.train import norm_role
from normlab.runtime.parallel import run_parallel
from normlab.study import design
from normlab.study.findings import Finding
from normlab.study.key_numbers import NATS_PER_BYTE, KeyNumber
from normlab.study.verdict_rules import ABOVE, BELOW, INSIDE, against_margin

ARMS = ("neither", "input", "output")  # which norms' gains carry λ_g; "neither" is the baseline
DECAYED = ("input", "output")
# What Wang et al. say decay does to each kind of norm's gain (a reading of the paired interval)
CLAIMED = {"input": "helps", "output": "hurts"}
V5_KEY = KeyNumber("paired final-loss change from decaying the input norms' gains only", NATS_PER_BYTE)
# The look before the 2026-12-05 design's registration (its [[change]] entry in data/design.toml, commit eafd9ea):
# the caveat its verdict carries wherever it is shown, beside the design that decides.
EARLIER_LOOK = (
    "the design registered 2026-12-05 (commit eafd9ea; λ_g = 3, 30 times the matrices' decay) was seen before its "
    "registration: two seed-0 timing runs ended at 2.513 nats per byte with no gain decayed and 2.633 with the input "
    "norms' gains decayed; it is shown beside the design that decides, never pooled with it"
)
ARM_LABEL = {
    "neither": "no gain decayed",
    "input": "input norms' gains decayed",
    "output": "output norms' gains decayed",
}


# V5's two designs, each a key of the chapter's settings (its sizes; its pairs under "<key>_seeds"): the one
# registered 2026-12-05 (λ_g = 3, shown beside) and the one registered 2026-12-07 (the source's decay, which decides)
EARLIER, DECIDING = "placement", "source_placement"


def placement_model(settings: dict, design: str = EARLIER) -> dict:
    """The Peri-LN GPT's configuration (GPTConfig keywords) at one design's sizes."""
    sizes = settings[design]
    return dict(context=sizes["context"], width=sizes["width"], depth=sizes["depth"], heads=4, placement="peri")


def parameter_count(settings: dict, design: str = EARLIER) -> int:
    """The Peri-LN GPT's parameter count; built under a forked RNG, so the chapter's random state is untouched."""
    with torch.random.fork_rng():
        return GPT(GPTConfig(**placement_model(settings, design))).num_parameters()


def placement_jobs(
    settings: dict, gain_decay: float, design: str = EARLIER
) -> tuple[list[dict], list[tuple[str, int]]]:
    """The three arms' training jobs for each seed, keyed (arm, seed): a Peri-LN GPT at one design's sizes
    (settings[design]), trained with the registered step (settings["placement_step"]); the arms differ only in
    `gain_decay_on`."""
    if not (isinstance(gain_decay, (int, float)) and math.isfinite(gain_decay) and gain_decay > 0):
        raise ValueError(f"gain_decay must be a positive finite number (the registered λ_g), got {gain_decay!r}")
    sizes = settings[design]
    model = placement_model(settings, design)
    train = dict(
        steps=sizes["steps"],
        batch_size=sizes["batch"],
        lr=sizes["lr"],
        warmup_steps=sizes["steps"] // 10,
        eval_every=flat_eval_every(sizes["steps"]),
        eval_batches=4,
        stream_every=0,
        step=settings["placement_step"],
    )
    decay = {"neither": {}, **{arm: dict(gain_weight_decay=gain_decay, gain_decay_on=arm) for arm in DECAYED}}
    seeds = range(sizes["first_seed"], sizes["first_seed"] + settings[f"{design}_seeds"])
    keys = [(arm, seed) for seed in seeds for arm in ARMS]
    jobs = [
        dict(model=model, train={**train, "seed": seed, **decay[arm]}, history_columns=("gain_norm/*",))
        for arm, seed in keys
    ]
    return jobs, keys


def train_placement(settings: dict, gain_decay: float, design: str = EARLIER) -> CompletedRuns:
    """Every arm of every seed in parallel CPU workers (the compiled step trains on the CPU): {(arm, seed): run},
    complete pairs only; a run that failed every attempt leaves its seed out, and `gaps` names it."""
    jobs, keys = placement_jobs(settings, gain_decay, design)
    names = [f"{ARM_LABEL[arm]} (λ_g = {gain_decay:g}) seed {seed}" for arm, seed in keys]
    outputs = run_parallel(train_job, jobs, devices=None, desc="gain decay placement", names=names, missing="keep")
    return complete_pairs(completed(outputs, keys), ARMS)


def placement_left(runs: CompletedRuns, settings: dict, design: str = EARLIER) -> PairsLeft:
    """What missing runs left of the design: its complete seeds against the registered pairs."""
    seeds = len({seed for _, seed in runs})
    return PairsLeft(runs.gaps, seeds, registered_pairs(settings[f"{design}_seeds"], 5))


def reading(pair: dict | None, margin: float) -> str | None:
    """A paired interval of (arm − neither) read against ±margin: "helps" (wholly below −margin), "hurts" (wholly
    above +margin), "no effect" (wholly inside), "undecided"; None where no pair could be formed (a run diverged)."""
    if pair is None:
        return None
    return {BELOW: "helps", ABOVE: "hurts", INSIDE: "no effect"}.get(against_margin(pair, margin), "undecided")


@dataclass
class PlacementStudy:
    effects: dict  # "input"/"output" -> paired_difference of (arm − neither), or None
    between: dict | None  # output − input, descriptive
    readings: dict  # "input"/"output" -> reading()
    gain_paths: pd.DataFrame  # step, arm, role, seed, gain_rms (the mean RMS of that role's gains)
    final_gain: dict  # arm -> role -> final gain RMS, mean over seeds
    final_loss: dict  # arm -> mean final validation loss
    loss_drop: float  # mean loss fall over the last 10% of steps
    timescale: float  # ηλT at the peak rate
    gain_decay: float
    margin: float
    pairs: int
    sizes: dict
    parameters: int  # the model's parameter count


def gain_paths(runs: dict, width: int) -> pd.DataFrame:
    """Per run, the mean RMS of the input norms' gains and of the output norms' gains at every step."""
    frames = []
    for (arm, seed), out in runs.items():
        by_role = {"input": [], "output": []}
        for column, values in out["history"].items():
            role = norm_role(column.removeprefix("gain_norm/"), "peri")
            if role in by_role:
                by_role[role].append(values)
        for role, series in by_role.items():
            if series:
                rms = np.mean(series, axis=0) / math.sqrt(width)
                frames.append(
                    pd.DataFrame(
                        {"step": np.arange(1, len(rms) + 1), "gain_rms": rms, "arm": arm, "role": role}
                    ).assign(seed=seed)
                )
    return (
        pd.concat(frames, ignore_index=True)
        if frames
        else pd.DataFrame(columns=["step", "gain_rms", "arm", "role", "seed"])
    )


def final_value(run: dict) -> float:
    """A run's final validation loss, NaN where it diverged, so that `paired_or_none` forms no pair with it."""
    return math.nan if run["diverged"] else run["final_val_loss"]


def placement_study(
    runs: dict, settings: dict, *, gain_decay: float, margin: float, design: str = EARLIER
) -> PlacementStudy:
    """The two effects and their readings against ±`margin` (nats per byte), with the gains' trajectories."""
    sizes = settings[design]
    seeds = sorted({seed for _, seed in runs})
    final = {arm: [final_value(runs[(arm, s)]) for s in seeds] for arm in ARMS} if seeds else {a: [] for a in ARMS}
    effects = {arm: paired_or_none(final["neither"], final[arm], margin) for arm in DECAYED}
    between = paired_or_none(final["input"], final["output"], margin)
    paths = gain_paths(runs, sizes["width"])
    final_gain: dict = {}
    if len(paths):
        last = paths.sort_values("step").groupby(["arm", "role", "seed"])["gain_rms"].last()
        for (arm, role), value in last.groupby(level=["arm", "role"]).mean().items():
            final_gain.setdefault(arm, {})[role] = float(value)
    return PlacementStudy(
        effects=effects,
        between=between,
        readings={arm: reading(effects[arm], margin) for arm in DECAYED},
        gain_paths=paths,
        final_gain=final_gain,
        final_loss={arm: float(np.nanmean(final[arm])) if final[arm] else math.nan for arm in ARMS},
        loss_drop=float(np.nanmean([out["final_drop"] for out in runs.values()])) if runs else math.nan,
        timescale=sizes["lr"] * gain_decay * sizes["steps"],
        gain_decay=gain_decay,
        margin=margin,
        pairs=len(seeds),
        sizes=sizes,
        parameters=parameter_count(settings, design),
    )


def placement_frame(study: PlacementStudy) -> pd.DataFrame:
    """One row per decayed arm: its paired loss change against no gain decay, the interval, the reading, the
    direction Wang et al. give, and the final RMS of each kind of gain."""
    rows = []
    for arm in DECAYED:
        pair = study.effects[arm]
        gains = study.final_gain.get(arm, {})
        rows.append(
            {
                "λ_g on": f"{arm} norms' gains",
                "Δ loss vs none (nats per byte)": pair["mean_difference"] if pair else math.nan,
                "95% CI low": pair["ci_low"] if pair else math.nan,
                "95% CI high": pair["ci_high"] if pair else math.nan,
                "reading": study.readings[arm] or "no pair (diverged)",
                "Wang et al.": CLAIMED[arm],
                "input gain RMS": gains.get("input", math.nan),
                "output gain RMS": gains.get("output", math.nan),
            }
        )
    return pd.DataFrame(rows)


def _scale(study: PlacementStudy) -> str:
    s = study.sizes
    return (
        f"Peri-LN GPT, width {s['width']}, depth {s['depth']}, {s['steps']} steps, batch {s['batch']}×{s['context']} "
        f"tokens, {study.pairs} pairs"
    )


def _effects(study: PlacementStudy) -> dict:
    """The study's two effects under the keys V5's readings name (data/design.toml)."""
    return {"input_minus_neither": study.effects["input"], "output_minus_neither": study.effects["output"]}


def v5_finding(
    study: PlacementStudy, *, trainer: str, corpus_sha256: str | None = None, earlier: PlacementStudy | None = None
) -> Finding:
    """V5's verdict from the two readings of the design that decides (its registered verdict rules), with its
    evidence and one summary sentence (the chapter adds its arms' losses before judging);
    `earlier`: the 2026-12-05 design's study, shown beside it, never pooled, its look named among the caveats."""
    verdict = design.registered_verdict("V5", _effects(study))
    key = study.effects["input"]
    summary = _summary(study)
    evidence = {
        **_effects(study),
        "output_minus_input": study.between,
        "readings": dict(study.readings),
        "source_direction": dict(CLAIMED),
        "gain_decay": study.gain_decay,
        "eta_lambda_T": study.timescale,
        "final_gain_rms": study.final_gain,
        "final_val_loss": study.final_loss,
        "loss_drop_last_10pct": study.loss_drop,
        "margin_nats": study.margin,
        "sizes": dict(study.sizes),
        "corpus_sha256": corpus_sha256,
        "trainer": trainer,
    }
    caveats = ()
    if earlier is not None:
        evidence["earlier_design"] = {
            "registered": "2026-12-05",
            "verdict": design.registered_verdict("V5", _effects(earlier)),
            **_effects(earlier),
            "readings": dict(earlier.readings),
            "gain_decay": earlier.gain_decay,
            "eta_lambda_T": earlier.timescale,
            "final_gain_rms": earlier.final_gain,
            "final_val_loss": earlier.final_loss,
            "sizes": dict(earlier.sizes),
            "pairs": earlier.pairs,
            "look": EARLIER_LOOK,
        }
        summary += (
            f" The earlier design (λ_g = {earlier.gain_decay:g}, registered 2026-12-05 after a look) reads "
            f"{evidence['earlier_design']['verdict']}, shown beside, never pooled."
        )
        caveats = (f"Not pooled: {EARLIER_LOOK}.",)
    return Finding(
        verdict,
        summary,
        evidence,
        key_number=key["mean_difference"] if key else None,
        threshold=study.margin,
        spread=key["standard_error"] if key else None,
        meaning=V5_KEY.meaning,
        unit=V5_KEY.unit,
        reads=("margin",),
        scale=_scale(study),
        caveats=caveats,
    )


READ_AS = {"helps": "helps", "hurts": "hurts", "no effect": "has no effect", "undecided": "is undecided"}


def _summary(study: PlacementStudy) -> str:
    """The ledger's summary: a lead of both intervals against the margin and the source's directions (under the
    ledger's 40 words, naming no reading a decided verdict would contradict), then the readings and the scale."""
    pairs = study.effects
    if any(pairs[arm] is None for arm in DECAYED):
        lost = " and ".join(f"the {arm} norms'" for arm in DECAYED if pairs[arm] is None)
        return (
            f"A run diverged, so {lost} paired effect could not be formed; Wang et al. expect decay on the input "
            "norms' gains to help and on the output norms' to hurt."
        )
    i, o = pairs["input"], pairs["output"]
    # the first sentence names how little time the decay had to act, beside the source's long pre-training runs
    lead = (
        f"At λ_g = {study.gain_decay:g} for {study.timescale:.1f} decay timescales, fewer than the source's runs, "
        f"decaying the input norms' gains alone changes the final loss by {i['mean_difference']:+.4f} nats per byte "
        f"(95% CI {i['ci_low']:+.4f}..{i['ci_high']:+.4f}), the output norms' by {o['mean_difference']:+.4f} "
        f"({o['ci_low']:+.4f}..{o['ci_high']:+.4f}), against ±{study.margin:g}."
    )
    return (
        f"{lead} Wang et al. expect a fall, then a rise; here decay on the input norms' gains "
        f"{READ_AS[study.readings['input']]} and on the output norms' {READ_AS[study.readings['output']]} "
        f"({_scale(study)}, {study.parameters:,} parameters, ηλT = {study.timescale:.1f})."
    )


def _effect(study: PlacementStudy, arm: str) -> str:
    """'+0.1137 nats per byte (95% CI +0.0893..+0.1382, 10 pairs): hurts beyond the ±0.02 margin, where Wang et al.
    say it helps'."""
    pair, found = study.effects[arm], study.readings[arm]
    if pair is None:
        return interval_text(None, NATS_PER_BYTE)
    said = {
        "helps": f"helps beyond the ±{study.margin:g} margin",
        "hurts": f"hurts beyond the ±{study.margin:g} margin",
        "no effect": f"no effect, inside the ±{study.margin:g} margin",
        "undecided": f"undecided against the ±{study.margin:g} margin",
    }[found]
    return f"{interval_text(pair, NATS_PER_BYTE, margin=False)}: {said}, where Wang et al. say it {CLAIMED[arm]}"


def _direction(arm: str, pair: dict | None) -> str:
    if pair is None:
        return f"the {arm} norms' pair could not be formed (a run diverged)"
    sign = "lowers" if pair["mean_difference"] < 0 else "raises"
    agrees = (pair["mean_difference"] < 0) == (CLAIMED[arm] == "helps")
    return f"decay on the {arm} norms' gains {sign} the mean loss, {'as' if agrees else 'against what'} Wang et al. say"


def placement_text(study: PlacementStudy, verdict: str, source_size: str, label: str = "V5 verdict") -> str:
    """One design's paragraph: each effect with its reading, the directions against Wang et al.'s, the gains'
    final RMS, how much the loss still fell, and its verdict (`verdict`, as recorded, after `label`).
    `source_size` is the source's smallest model, written with `normlab.study.prose.source`."""
    gains = study.final_gain
    gain_sentence = ""
    if all(arm in gains and {"input", "output"} <= gains[arm].keys() for arm in ARMS):
        gain_sentence = (
            f" The input norms' gains end at RMS {gains['input']['input']:.2f} when decayed, against "
            f"{gains['neither']['input']:.2f} undecayed; the output norms' at {gains['output']['output']:.2f} against "
            f"{gains['neither']['output']:.2f}."
        )
    between = interval_text(study.between, NATS_PER_BYTE, margin=False)
    return (
        f"Decay on the input norms' gains only changes the final loss by {_effect(study, 'input')}. Decay on the "
        f"output norms' gains only changes it by {_effect(study, 'output')}. Read by the means alone, "
        f"{_direction('input', study.effects['input'])}, and {_direction('output', study.effects['output'])}. "
        f"Decaying the output norms' gains instead of the input norms' changes the loss by {between}."
        f"{gain_sentence} The loss still fell {study.loss_drop:.4f} {NATS_PER_BYTE} over the last 10% of steps. "
        f"The model has {study.parameters:,} parameters and trains for {study.sizes['steps']} steps; Wang et al.'s "
        f"smallest has {source_size} billion.\n\n**{label}: {verdict}.**"
    )
