"""V6, DyT's regime and V1's failure explained: DyT (V1's authors' recipe) against RMSNorm, paired by seed, at three
token budgets of V1's model and batch, and at V1's budget with a GELU MLP in place of SwiGLU. The verdict
(`regime_claim`) reads two paired intervals, each a difference of two paired differences DyT − RMSNorm per seed:

- the regime difference, DyT − RMSNorm at the largest budget minus at the smallest, against +margin (Verma, arXiv
  2604.23434: DyT helps at few tokens per parameter and hurts at many);
- the gate difference, DyT − RMSNorm with GELU minus with SwiGLU at V1's budget, against ±margin (Verma localises
  Llama-DyT's collapse to SwiGLU's gating).

DyT's saturated share (|αx| > 2, Verma's definition) at the end of each run is reported beside them.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from normlab.analysis.landscape.method import measured, paired_finding, run_scale, verdict_lead
from normlab.analysis.landscape.summaries import non_inferiority
from normlab.analysis.shared.paired import interval_text, paired_or_none
from normlab.gpt.model import GPT, GPTConfig
from normlab.study import prose
from normlab.study.findings import Finding
from normlab.study.key_numbers import NATS_PER_BYTE, KeyNumber
from normlab.study.present import significant

V6_KEY = KeyNumber("paired regime difference of DyT − RMSNorm, largest budget minus smallest", NATS_PER_BYTE)


def _loss(run: dict) -> float:
    """A run's final validation loss; NaN where it diverged or went missing, so its pair drops out of every interval."""
    if "missing" in run or run["diverged"]:
        return math.nan
    return float(run["final_val_loss"])


def cells(runs: list[dict]) -> dict[tuple[int, str], dict[str, list[dict]]]:
    """V6's runs by (steps, MLP) and arm, each arm sorted by seed; refuses a cell whose arms are not paired seed for
    seed, or a design whose cells do not all share the same seeds."""
    out: dict[tuple[int, str], dict[str, list[dict]]] = {}
    for r in runs:
        t = r["tag"]
        out.setdefault((t["steps"], t["mlp"]), {}).setdefault(t["label"], []).append(r)
    seeds = set()
    for key, arms in out.items():
        for arm in arms.values():
            arm.sort(key=lambda r: r["tag"]["seed"])
        found = {label: tuple(r["tag"]["seed"] for r in arm) for label, arm in arms.items()}
        if set(found) != {"v6-rms", "v6-dyt"} or len(set(found.values())) != 1:
            raise ValueError(f"V6's arms at {key} must be RMSNorm and DyT paired seed for seed, got seeds {found}")
        seeds.add(found["v6-rms"])
    if len(seeds) != 1:
        raise ValueError(
            f"V6's cells must share their seeds (the regime and gate differences pair across them): {seeds}"
        )
    return dict(sorted(out.items()))


def differences(arms: dict[str, list[dict]]) -> list[float]:
    """Per seed, DyT − RMSNorm of the final validation loss (NaN where either diverged)."""
    return [_loss(d) - _loss(r) for r, d in zip(arms["v6-rms"], arms["v6-dyt"])]


def budgets(runs: list[dict]) -> list[int]:
    """The SwiGLU budgets' step counts, smallest first."""
    return sorted(steps for steps, mlp in cells(runs) if mlp == "swiglu")


def regime_pairs(runs: list[dict], margin: float) -> dict:
    """The paired intervals V6 reads and reports: DyT − RMSNorm at each SwiGLU budget ('dyt_minus_rms/<steps>') and
    with GELU ('dyt_minus_rms/gelu'); the regime difference (largest minus smallest budget) and the gate difference
    (GELU minus SwiGLU at the largest), each paired by seed across cells."""
    by_cell = cells(runs)
    steps = budgets(runs)
    largest, smallest = steps[-1], steps[0]
    if (largest, "gelu") not in by_cell:
        raise ValueError(f"V6 needs the GELU pair at its largest budget, {largest} steps")
    diff = {key: differences(arms) for key, arms in by_cell.items()}
    zero = [0.0] * len(diff[(largest, "swiglu")])
    out = {f"dyt_minus_rms/{s}": paired_or_none(zero, diff[(s, "swiglu")], margin) for s in steps}
    out["dyt_minus_rms/gelu"] = paired_or_none(zero, diff[(largest, "gelu")], margin)
    out["regime_difference"] = paired_or_none(diff[(smallest, "swiglu")], diff[(largest, "swiglu")], margin)
    out["gate_difference"] = paired_or_none(diff[(largest, "swiglu")], diff[(largest, "gelu")], margin)
    return out


def gate_reading(paired: dict | None) -> str:
    """The gate difference against ±margin: 'gate matters' wholly below −margin, 'GELU worse' wholly above +margin,
    'no difference' wholly inside, else 'undecided'."""
    if paired is None:
        return "not measured"
    m = paired["margin"]
    if paired["ci_high"] < -m:
        return "gate matters"
    if paired["ci_low"] > m:
        return "GELU worse"
    if -m < paired["ci_low"] and paired["ci_high"] < m:
        return "no difference"
    return "undecided"


def saturation(runs: list[dict]) -> dict[str, float | None]:
    """DyT's mean saturated share over seeds per cell ('<steps>' for SwiGLU, 'gelu'), None where no run measured it."""
    out = {}
    for (steps, mlp), arms in cells(runs).items():
        shares = [r["saturated_share"] for r in arms["v6-dyt"] if r.get("saturated_share") is not None]
        out["gelu" if mlp == "gelu" else str(steps)] = float(np.mean(shares)) if shares else None
    return out


def tokens_per_parameter(runs: list[dict]) -> dict[str, float]:
    """Per SwiGLU budget, the tokens trained on over the RMSNorm arm's parameters."""
    by_cell = cells(runs)
    out = {}
    for steps in budgets(runs):
        run = by_cell[(steps, "swiglu")]["v6-rms"][0]  # a missing run keeps its tag and model
        tokens = steps * run["tag"]["batch_size"] * run["model"]["context"]
        out[str(steps)] = tokens / GPT(GPTConfig(**run["model"])).num_parameters()
    return out


def fragile(paired: dict | None, line: float) -> bool:
    """The registered fragility: the interval's end nearest `line` lies within the interval's half-width of it, so
    a spread like this one could move the interval across it."""
    if paired is None:
        return False
    half = (paired["ci_high"] - paired["ci_low"]) / 2
    return min(abs(paired["ci_low"] - line), abs(paired["ci_high"] - line)) < half


def regime_claim(runs: list[dict], margin: float, bound: float) -> Finding:
    """V6 by its registered rule (data/design.toml): holds when the regime difference lies above +margin (DyT
    worsens with more tokens) and the gate difference below −margin; holds with caveats when only the regime
    difference does; does not hold when the regime difference lies wholly below +margin; else not testable here."""
    pairs = regime_pairs(runs, margin)
    regime = non_inferiority(pairs["regime_difference"])  # 'worse' = wholly at or above +margin
    gate = gate_reading(pairs["gate_difference"])
    primary = pairs["regime_difference"]
    if primary is None:
        verdict = "not testable here"
    elif regime == "worse":
        verdict = "holds" if gate == "gate matters" else "holds with caveats"
    elif regime == "no worse":
        verdict = "does not hold"
    else:
        verdict = "not testable here"
    steps = budgets(runs)
    if primary is None:
        summary = "A run diverged, so there is no paired interval of the regime difference."
    else:
        summary = (
            f"DyT − RMSNorm at {steps[-1]} steps minus at {steps[0]} steps (the regime difference) "
            f"{interval_text(primary, NATS_PER_BYTE, margin=False)}: "
            + {"worse": "wholly above", "no worse": "wholly below", "undecided": "across"}[regime]
            + f" the +{margin} margin. With GELU in place of SwiGLU at {steps[-1]} steps, DyT − RMSNorm changes by "
            f"{interval_text(pairs['gate_difference'], NATS_PER_BYTE, margin=False)} (the gate difference): {gate}."
        )
    evidence = {
        **pairs,
        "regime_reading": regime,
        "regime_fragile": fragile(primary, margin),
        "gate_reading": gate,
        "saturated_share": saturation(runs),
        "saturation_bound": bound,
        "tokens_per_parameter": tokens_per_parameter(runs),
        "budgets": steps,
        "parameters": GPT(GPTConfig(**cells(runs)[(steps[-1], "swiglu")]["v6-rms"][0]["model"])).num_parameters(),
        **run_scale(runs, ("batch_size", "lr")),
        "margin": margin,
    }
    finding = paired_finding(verdict, summary, evidence, primary, margin, V6_KEY)
    finding.headline = regime_headline(finding)
    return finding


def regime_headline(v6: Finding) -> str | None:
    """The opening page's sentence on V6, from the recorded key number, threshold and verdict."""
    k, t = v6.key_number, v6.threshold
    if k is None or t is None:
        return None
    key = KeyNumber.of(v6)
    where = {"worse": "above", "no worse": "below", "undecided": "across"}[v6.evidence["regime_reading"]]
    return (
        f"DyT's loss against RMSNorm's moves {key.format(abs(k))} {'up' if k > 0 else 'down'} from the smallest "
        f"token budget to V1's, its interval {where} the +{key.limit(t)} margin; with GELU for SwiGLU: "
        f"{v6.evidence['gate_reading']}."
    )


def regime_table(v6: Finding) -> pd.DataFrame:
    """Per budget: tokens per parameter, DyT − RMSNorm with its interval, DyT's saturated share; then the two
    differences the verdict reads."""
    e = v6.evidence
    rows = []
    for steps in e["budgets"]:
        p = e[f"dyt_minus_rms/{steps}"]
        rows.append(_row(f"{steps} steps, SwiGLU", e["tokens_per_parameter"][str(steps)], p,
                         e["saturated_share"].get(str(steps))))  # fmt: skip
    largest = e["budgets"][-1]
    rows.append(_row(f"{largest} steps, GELU", e["tokens_per_parameter"][str(largest)], e["dyt_minus_rms/gelu"],
                     e["saturated_share"].get("gelu")))  # fmt: skip
    rows.append(_row("regime difference (largest − smallest budget)", None, e["regime_difference"], None))
    rows.append(_row("gate difference (GELU − SwiGLU)", None, e["gate_difference"], None))
    return pd.DataFrame(rows)


def _row(name: str, tpp: float | None, p: dict | None, share: float | None) -> dict:
    return {
        "compared": name,
        "tokens per parameter": tpp,
        "DyT − RMSNorm": None if p is None else p["mean_difference"],
        "95% low": None if p is None else p["ci_low"],
        "95% high": None if p is None else p["ci_high"],
        "DyT saturated share": share,
    }


def regime_paragraph(v6: Finding) -> str:
    """V6's verdict paragraph: the verdict, the per-budget differences and saturated shares beside the source's own
    numbers, and what this scale can show."""
    e = v6.evidence
    steps = e["budgets"]
    tpp = e["tokens_per_parameter"]
    share = {k: measured(v) for k, v in e["saturated_share"].items()}
    diff = {s: measured(None if e[f"dyt_minus_rms/{s}"] is None else e[f"dyt_minus_rms/{s}"]["mean_difference"])
            for s in steps}  # fmt: skip
    src = {name: prose.source("V6", name) for name in (
        "gain_1m_tokens", "penalty_118m_tokens", "saturated_1m_tokens", "saturated_118m_tokens",
        "tokens_per_parameter_max")}  # fmt: skip
    per_budget = "; ".join(
        f"{significant(diff[s])} nats per byte at {significant(tpp[str(s)])} tokens per parameter "
        f"({s} steps, {significant(100 * share[str(s)])}% of DyT's inputs saturated)"
        for s in steps
    )
    return (
        verdict_lead("V6", v6)
        + f"Averaged over {len(e['seeds'])} seeds, DyT − RMSNorm is {per_budget}; with GELU at {steps[-1]} steps it "
        f"is {significant(measured(e['dyt_minus_rms/gelu'] and e['dyt_minus_rms/gelu']['mean_difference']))} "
        f"({significant(100 * share['gelu'])}% saturated). Verma's GPT-2 runs at 64M parameters found DyT's "
        f"validation loss {src['gain_1m_tokens']}% lower than LayerNorm's at 1M tokens and "
        f"{src['penalty_118m_tokens']}% higher at 118M, with {src['saturated_1m_tokens']}% of DyT's activations "
        f"saturated (|αx| > 2) against {src['saturated_118m_tokens']}%, all below {src['tokens_per_parameter_max']} "
        f"tokens per parameter. Here DyT's saturated share {_direction(share[str(steps[0])], share[str(steps[-1])])} "
        f"from the smallest budget to the largest, where Verma's falls as the tokens grow"
        + (
            "; the regime difference's interval ends within its half-width of the margin, so the verdict is fragile. "
            if e["regime_fragile"] and v6.verdict != "not testable here"
            else ". "
        )
        + "**What this scale can and cannot show:** whether DyT's deficit against RMSNorm in "
        f"this {e['parameters']:,}-parameter byte-level model grows with the tokens it trains on, over a range of "
        "tokens per parameter close to Verma's, and whether swapping SwiGLU for GELU changes it at V1's budget. It "
        "cannot show Verma's GPT-2 or Llama scales, and its reference is RMSNorm, not LayerNorm; the smallest budget "
        f"trains {steps[0]} steps, so its difference measures how fast each model leaves its initial loss, not a "
        "trained model's quality."
    )


def _direction(low_budget: float, high_budget: float) -> str:
    """How DyT's saturated share moves from the smallest budget to the largest, in words."""
    if not (math.isfinite(low_budget) and math.isfinite(high_budget)):
        return "was not measured at both ends"
    if high_budget == low_budget:
        return f"stays at {significant(100 * low_budget)}%"
    word = "rises" if high_budget > low_budget else "falls"
    return f"{word} from {significant(100 * low_budget)}% to {significant(100 * high_budget)}%"
