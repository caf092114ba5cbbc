"""Section "Time per step (B7, second half; evidence for B6)": the two models' training steps timed in
alternation, B7's verdict from both halves (`b7_finding`) and the paragraph that shows it (`b7_paragraph`), and
B6's model-level evidence."""

from __future__ import annotations

import pandas as pd

from normlab.analysis.quality import loss_parity
from normlab.analysis.quality.loss_parity import LossParity, a9_reading, farthest_end_key
from normlab.analysis.quality.profiles import NORMS
from normlab.analysis.quality.training import model_config
from normlab.analysis.shared import confirmation
from normlab.analysis.shared.paired import interval_text
from normlab.analysis.shared.parity import equivalence_verdict, ratio_with_spread
from normlab.gpt.model import GPTConfig
from normlab.gpt.train import compare_step_times
from normlab.study import decide
from normlab.study.findings import Finding
from normlab.study.key_numbers import DIMENSIONLESS, NATS_PER_BYTE, KeyNumber

B7_KEY = KeyNumber("ratio of step times, RMSNorm / LayerNorm", DIMENSIONLESS)
B7_CURVES_KEY = KeyNumber(
    "farthest end of the confirmation's 95% t-interval of the whole-curve loss, RMSNorm − LayerNorm", NATS_PER_BYTE
)


def step_times(settings: dict, corpus, device: str) -> tuple[pd.DataFrame, dict]:
    """Training steps of the two models timed in alternation: the timings, and the median per-round ratio
    RMSNorm / LayerNorm with its bootstrap spread (`ratio_with_spread`)."""
    timings = compare_step_times(
        {norm: GPTConfig(**model_config(settings, norm)) for norm in NORMS},
        corpus,
        batch_size=settings["batch_size"],
        repeats=settings["timing_repeats"],
        device=device,
    )
    wide = timings.pivot(index="repeat", columns="model", values="step_time")
    return timings, ratio_with_spread(wide["rms"], wide["layer"])


def curves_verdict(parity: LossParity) -> str:
    """B7's first half: the whole-curve paired difference judged for equivalence ('diverged' when a run did)."""
    return "diverged" if parity.curve_pair is None else equivalence_verdict(parity.curve_pair)


def b7_verdict(curves: str, ratio: float, visible: float) -> str:
    """Both halves (the curves' verdict `curves` equivalent, step-time ratio ≤ `visible`): holds; the curves alone:
    with caveats."""
    if curves == "diverged":
        return "does not hold"
    if curves in ("not testable here", "does not hold"):
        return curves
    return decide(True, caveat=not ratio <= visible)


def b7_key(curves: str, pair: dict | None, speed: dict, *, visible: float, margin: float) -> dict:
    """The number B7's verdict turned on, with its threshold and spread: the curves' interval against the margin when
    the curves half did not hold (then the verdict is that half's), else the step-time ratio against `visible`."""
    if curves == "holds":
        return dict(key_number=speed["ratio"], threshold=visible, spread=speed["spread"], **B7_KEY.fields())
    return dict(**farthest_end_key(pair), threshold=margin, **B7_CURVES_KEY.fields())


def b7_finding(
    parity: LossParity,
    timings: pd.DataFrame,
    speed: dict,
    *,
    visible: float,
    margin: float,
    backend: str,
    common: dict,
    registered: confirmation.RegisteredConfirmation | None = None,
) -> Finding:
    """B7 from both halves; with the `registered` confirmation (this build's runs), the pilot's curve sequence is
    recorded beside it (the chapter judges its completeness: `PairsLeft.judge`)."""
    curves = curves_verdict(parity)
    pair = parity.curve_pair
    ratio = speed["ratio"]
    medians = timings.groupby("model").step_time.describe(percentiles=[0.25, 0.5, 0.75])
    text = (
        f"{interval_text(pair, NATS_PER_BYTE)}; step time RMSNorm/LayerNorm "
        f"{ratio:.3f} ± {speed['spread']:.3f} (visible if ≤ {visible})"
    )
    return Finding(
        b7_verdict(curves, ratio, visible),
        f"Curves {curves if curves != 'holds' else 'coincide'}: {text}.",
        {
            **common,
            "paired_curve_loss": pair,
            **(confirmation.evidence(registered, "B7", registered.pilot_pair("B7")) if registered else {}),
            "curves_half": curves,
            "step_time_ratio_rms_over_layer": ratio,
            "step_time_ratio_spread": speed["spread"],
            "visible_drop_threshold": visible,
            "visible": ratio <= visible,
            "median_step_s_layer": medians.loc["layer", "50%"],
            "median_step_s_rms": medians.loc["rms", "50%"],
            "backend": backend,
            "narang_2021_t5_steps_per_s": {"rmsnorm": 3.68, "vanilla": 3.50},
        },
        **b7_key(curves, pair, speed, visible=visible, margin=margin),
        caveats=(loss_parity.B7_LOOKED,) if registered else (),
        reads=("margin", "visible"),
    )


def b7_paragraph(b7: Finding, *, repeats: int, device: str) -> str:
    """B7's verdict paragraph: the verdict, the curves' interval and the step-time ratio as `b7` records them, over
    `repeats` timing rounds on `device`."""
    e = b7.evidence
    pair, ratio = e["paired_curve_loss"], e["step_time_ratio_rms_over_layer"]
    return (
        f"**B7 verdict: {b7.verdict}.** Mean validation loss over the curve, RMSNorm − "
        f"LayerNorm: {interval_text(pair, NATS_PER_BYTE)}.{confirmation.resolution_sentence(b7, NATS_PER_BYTE)} "
        f"RMSNorm's step takes {ratio:.3f}× LayerNorm's (spread {e['step_time_ratio_spread']:.3f}, {repeats} "
        f"rounds) with backend `{e['backend']}` on {device}: {'visibly' if e['visible'] else 'not visibly'} "
        f"shorter. B7 holds only if both halves do; coinciding curves alone give 'holds with caveats', and curves "
        "that do not coincide, or cannot be told apart here, give their own verdict whatever the step time."
    )


def step_time_evidence(parity: LossParity, speed: dict, *, backend: str, device: str) -> tuple[str, dict]:
    """B6's model-level part (the speed chapter owns B6): the sentence and the numbers, no verdict."""
    ratio = speed["ratio"]
    speedup = 1.0 / ratio - 1.0
    pair = parity.final_pair
    summary = (
        f"Model-level step here: RMSNorm's training step takes {ratio:.3f}× LayerNorm's (spread {speed['spread']:.3f}), "
        f"a speed-up of {100 * speedup:+.1f}% (backend {backend!r}, {device}), with final-loss difference "
        f"{a9_reading(parity)[1]}."
    )
    evidence = {
        "step_time_ratio_rms_over_layer": ratio,
        "spread": speed["spread"],
        "speedup": speedup,
        "backend": backend,
        "device": device,
        "a9_outcome": pair["outcome"] if pair else "diverged",
    }
    return summary, evidence
