"""V6, DyT's regime as Verma ran it: DyT (Verma's: α₀ 2, no β, no embedding scale) against RMSNorm, paired by seed,
in V1's model for a fixed number of steps on training sets of several sizes (prefixes of the corpus's training split,
so that the smallest is passed over many times and the largest about once), and on the largest with a GELU MLP in
place of SwiGLU. The verdict (`regime_claim`) reads two paired intervals, each a difference of two paired differences
DyT − RMSNorm per seed:

- the regime difference, DyT − RMSNorm on the largest training set minus on the smallest, against +margin (Verma,
  arXiv 2604.23434: DyT helps on 1M tokens and hurts on 118M, both trained 5,000 steps);
- the gate difference, DyT − RMSNorm with GELU minus with SwiGLU on the largest set, against ±margin (Verma localises
  Llama-DyT's collapse to SwiGLU's gating, ablated at 118M).

DyT's saturated share (|αx| > 2, Verma's definition) at the end of each run is reported beside them, and the record
holds each set's size, the passes over it and the steps. The first design of V6 (registered 2026-12-05) varied the
steps instead, on data that never repeats; its runs are not read here (the design page's change log keeps it).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from normlab.analysis.landscape.method import arm_losses, measured, paired_finding, run_scale, verdict_lead
from normlab.analysis.landscape.profiles import regime_passes
from normlab.analysis.landscape.summaries import non_inferiority
from normlab.analysis.shared.paired import interval_text, paired_or_none
from normlab.gpt.model import GPT, GPTConfig
from normlab.study import design, prose
from normlab.study.findings import Finding
from normlab.study.key_numbers import NATS_PER_BYTE, KeyNumber
from normlab.study.present import significant
from normlab.study.verdict_rules import ABOVE, BELOW, INSIDE, against_margin

V6_KEY = KeyNumber("paired regime difference of DyT − RMSNorm, largest training set minus smallest", NATS_PER_BYTE)
ARM_NAMES = {"v6-rms": "RMSNorm", "v6-dyt": "DyT"}


def _loss(run: dict) -> float:
    """A run's final validation loss; NaN where it diverged or went missing, so its pair drops out of every interval."""
    if "missing" in run or run["diverged"]:
        return math.nan
    return float(run["final_val_loss"])


def cells(runs: list[dict]) -> dict[tuple[int, str], dict[str, list[dict]]]:
    """V6's runs by (training-set bytes, MLP) and arm, each arm sorted by seed; refuses a cell whose arms are not
    paired seed for seed, or a design whose cells do not all share the same seeds."""
    out: dict[tuple[int, str], dict[str, list[dict]]] = {}
    for r in runs:
        t = r["tag"]
        out.setdefault((t["train_bytes"], t["mlp"]), {}).setdefault(t["label"], []).append(r)
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


def sizes(runs: list[dict]) -> list[int]:
    """The SwiGLU cells' training-set sizes in bytes, smallest first."""
    return sorted(size for size, mlp in cells(runs) if mlp == "swiglu")


def regime_pairs(runs: list[dict], margin: float) -> dict:
    """The paired intervals V6 reads and reports: DyT − RMSNorm on each SwiGLU training set
    ('dyt_minus_rms/<bytes>') and with GELU ('dyt_minus_rms/gelu'); the regime difference (largest minus smallest
    set) and the gate difference (GELU minus SwiGLU on the largest), each paired by seed across cells."""
    by_cell = cells(runs)
    steps = sizes(runs)
    largest, smallest = steps[-1], steps[0]
    if (largest, "gelu") not in by_cell:
        raise ValueError(f"V6 needs the GELU pair on its largest training set, {largest} bytes")
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
    side = against_margin(paired, paired["margin"])
    return {BELOW: "gate matters", ABOVE: "GELU worse", INSIDE: "no difference"}.get(side, "undecided")


def saturation(runs: list[dict]) -> dict[str, float | None]:
    """DyT's mean saturated share over seeds per cell ('<bytes>' for SwiGLU, 'gelu'), None where no run measured it."""
    out = {}
    for (size, mlp), arms in cells(runs).items():
        shares = [r["saturated_share"] for r in arms["v6-dyt"] if r.get("saturated_share") is not None]
        out["gelu" if mlp == "gelu" else str(size)] = float(np.mean(shares)) if shares else None
    return out


def data_scale(runs: list[dict]) -> dict:
    """Per SwiGLU training set (keyed by its bytes): the passes the fixed steps make over it, and its bytes per
    parameter of the RMSNorm arm (Verma's T/P is the training set's tokens per parameter); and the steps, the bytes
    a run trains on, and the sizes."""
    by_cell = cells(runs)
    passes, per_parameter = {}, {}
    steps = None
    for size in sizes(runs):
        run = by_cell[(size, "swiglu")]["v6-rms"][0]  # a missing run keeps its tag and model
        steps, batch, context = run["tag"]["steps"], run["tag"]["batch_size"], run["model"]["context"]
        passes[str(size)] = regime_passes(steps, batch, context, size)
        per_parameter[str(size)] = size / GPT(GPTConfig(**run["model"])).num_parameters()
    trained = steps * batch * context
    return {"sizes": sizes(runs), "passes": passes, "bytes_per_parameter": per_parameter, "steps": steps,
            "bytes_trained": trained}  # fmt: skip


def fragile(paired: dict | None, line: float) -> bool:
    """The registered fragility: the interval's end nearest `line` lies within the interval's half-width of it, so
    a spread like this one could move the interval across it."""
    if paired is None:
        return False
    half = (paired["ci_high"] - paired["ci_low"]) / 2
    return min(abs(paired["ci_low"] - line), abs(paired["ci_high"] - line)) < half


def regime_claim(runs: list[dict], margin: float, bound: float, entropy: float) -> Finding:
    """V6's measurements, and its verdict by its registered readings and verdict rules (data/design.toml)."""
    pairs = regime_pairs(runs, margin)
    regime = non_inferiority(pairs["regime_difference"])  # 'worse' = wholly at or above +margin
    gate = gate_reading(pairs["gate_difference"])
    primary = pairs["regime_difference"]
    verdict = design.registered_verdict("V6", pairs)
    scale = data_scale(runs)
    steps, (smallest, *_, largest) = scale["steps"], scale["sizes"]
    passes = scale["passes"]
    if primary is None:
        summary = "A run diverged, so there is no paired interval of the regime difference."
    else:
        summary = (
            f"At {steps} steps, DyT − RMSNorm on {largest:,} training bytes ({passes[str(largest)]:.3g} passes) minus "
            f"on {smallest:,} ({passes[str(smallest)]:.3g} passes), the regime difference, "
            f"{interval_text(primary, NATS_PER_BYTE, margin=False)}: "
            + {"worse": "wholly above", "no worse": "wholly below", "undecided": "across"}[regime]
            + f" the +{margin} margin. With GELU in place of SwiGLU on {largest:,} bytes, DyT − RMSNorm changes by "
            f"{interval_text(pairs['gate_difference'], NATS_PER_BYTE, margin=False)} (the gate difference): {gate}."
        )
    model = cells(runs)[(largest, "swiglu")]["v6-rms"][0]["model"]
    evidence = {
        **pairs,
        "regime_reading": regime,
        "regime_fragile": fragile(primary, margin),
        "gate_reading": gate,
        "saturated_share": saturation(runs),
        "saturation_bound": bound,
        **scale,
        "parameters": GPT(GPTConfig(**model)).num_parameters(),
        **run_scale(runs, ("batch_size", "lr", "warmup_steps", "min_lr_ratio", "weight_decay_on")),
        "margin": margin,
    }
    finding = paired_finding(verdict, summary, evidence, primary, margin, V6_KEY)
    finding.headline = regime_headline(finding)
    # the arms whose runs the verdict reads: both norms on the smallest and the largest set, and with GELU
    read = {key: arms for key, arms in cells(runs).items() if key[0] in (smallest, largest)}
    finding.arms = arm_losses(
        {f"{label} {size} {mlp}": arms[label] for (size, mlp), arms in read.items() for label in ARM_NAMES},
        entropy,
        scale=f"{finding.evidence['parameters']:,} parameters, {steps} steps",
        names={
            f"{label} {size} {mlp}": f"{name} on {size:,} bytes" + (" with GELU" if mlp == "gelu" else "")
            for (size, mlp) in read
            for label, name in ARM_NAMES.items()
        },
    )
    return finding


def regime_headline(v6: Finding) -> str | None:
    """The opening page's sentence on V6, from the recorded key number, threshold and verdict."""
    k, t = v6.key_number, v6.threshold
    if k is None or t is None:
        return None
    key = KeyNumber.of(v6)
    where = {"worse": "above", "no worse": "below", "undecided": "across"}[v6.evidence["regime_reading"]]
    return (
        f"At fixed steps, DyT − RMSNorm moves {key.format(abs(k))} {'up' if k > 0 else 'down'} from the smallest "
        f"training set to the largest, its interval {where} the +{key.limit(t)} margin; GELU for SwiGLU: "
        f"{v6.evidence['gate_reading']}."
    )


def regime_table(v6: Finding) -> pd.DataFrame:
    """Per training set: its bytes, the passes over it, DyT − RMSNorm with its interval, DyT's saturated share;
    then the two differences the verdict reads."""
    e = v6.evidence
    rows = []
    for size in e["sizes"]:
        p = e[f"dyt_minus_rms/{size}"]
        rows.append(_row(f"{size:,} bytes, SwiGLU", e["passes"][str(size)], p, e["saturated_share"].get(str(size))))
    largest = e["sizes"][-1]
    rows.append(_row(f"{largest:,} bytes, GELU", e["passes"][str(largest)], e["dyt_minus_rms/gelu"],
                     e["saturated_share"].get("gelu")))  # fmt: skip
    rows.append(_row("regime difference (largest − smallest set)", None, e["regime_difference"], None))
    rows.append(_row("gate difference (GELU − SwiGLU)", None, e["gate_difference"], None))
    return pd.DataFrame(rows)


def _row(name: str, passes: float | None, p: dict | None, share: float | None) -> dict:
    return {
        "compared": name,
        "passes over the set": passes,
        "DyT − RMSNorm": None if p is None else p["mean_difference"],
        "95% low": None if p is None else p["ci_low"],
        "95% high": None if p is None else p["ci_high"],
        "DyT saturated share": share,
    }


def regime_paragraph(v6: Finding) -> str:
    """V6's verdict paragraph: the verdict, the per-set differences and saturated shares beside the source's own
    numbers. What could not be matched stays in the page's Markdown."""
    e = v6.evidence
    sets = e["sizes"]
    share = {k: measured(v) for k, v in e["saturated_share"].items()}
    diff = {s: measured(None if e[f"dyt_minus_rms/{s}"] is None else e[f"dyt_minus_rms/{s}"]["mean_difference"])
            for s in sets}  # fmt: skip
    src = {name: prose.source("V6", name) for name in (
        "gain_1m_tokens", "penalty_118m_tokens", "saturated_1m_tokens", "saturated_118m_tokens")}  # fmt: skip
    per_set = "; ".join(
        f"{significant(diff[s])} nats per byte on {s:,} bytes ({significant(e['passes'][str(s)])} passes, "
        f"{significant(100 * share[str(s)])}% of DyT's inputs saturated)"
        for s in sets
    )
    gelu = e["dyt_minus_rms/gelu"]
    return (
        verdict_lead("V6", v6)
        + f"Averaged over {len(e['seeds'])} seeds, DyT − RMSNorm is {per_set}; with GELU on {sets[-1]:,} bytes it "
        f"is {significant(measured(gelu and gelu['mean_difference']))} "
        f"({significant(100 * share['gelu'])}% saturated). Verma's GPT-2 runs at 64M parameters found DyT's "
        f"validation loss {src['gain_1m_tokens']}% lower than LayerNorm's on 1M tokens and "
        f"{src['penalty_118m_tokens']}% higher on 118M, with {src['saturated_1m_tokens']}% of DyT's activations "
        f"saturated (|αx| > 2) against {src['saturated_118m_tokens']}%. Here DyT's saturated share "
        f"{_direction(share[str(sets[0])], share[str(sets[-1])])} from the smallest set to the largest"
        + (
            "; the regime difference's interval ends within its half-width of the margin, so the verdict is fragile."
            if e["regime_fragile"] and v6.verdict != "not testable here"
            else "."
        )
    )


def _direction(small_set: float, large_set: float) -> str:
    """How DyT's saturated share moves from the smallest training set to the largest, in words."""
    if not (math.isfinite(small_set) and math.isfinite(large_set)):
        return "was not measured at both ends"
    if large_set == small_set:
        return f"stays at {significant(100 * small_set)}%"
    word = "rises" if large_set > small_set else "falls"
    return f"{word} from {significant(100 * small_set)}% to {significant(100 * large_set)}%"
