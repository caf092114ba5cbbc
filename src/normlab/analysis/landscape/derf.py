"""V7, Dynamic erf (Derf) beside DyT and RMSNorm in V1's model: the paired differences of the validation loss and of
the generalisation gap (validation minus the training loss in evaluation mode), the verdict (`derf_claim`), its
table (`derf_table`) and paragraph (`derf_paragraph`).

The source (Chen et al., arXiv 2512.10938) says Derf beats the norms and DyT, and that the gain is generalisation
rather than fit, read from the training loss in evaluation mode. So the verdict reads three paired intervals:
Derf − RMSNorm and Derf − DyT of the final validation loss against V1's +margin (non-inferiority), and Derf − RMSNorm
of the gap against zero.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from normlab.analysis.landscape.dyt import learned
from normlab.analysis.landscape.method import arm_losses, measured, paired_finding, run_scale, verdict_lead
from normlab.analysis.landscape.profiles import DERF_ARMS
from normlab.analysis.landscape.summaries import non_inferiority
from normlab.analysis.shared.paired import interval_text, paired_or_none
from normlab.gpt.model import GPT, GPTConfig
from normlab.study import design, prose
from normlab.study.findings import Finding
from normlab.study.key_numbers import NATS_PER_BYTE, KeyNumber
from normlab.study.present import significant
from normlab.study.verdict_rules import ABOVE, BELOW, side_of

V7_KEY = KeyNumber("paired final validation loss, Derf − RMSNorm", NATS_PER_BYTE)
ARM_NAMES = {"v7-rms": "RMSNorm", "v7-dyt": "DyT (V1's recipe)", "v7-derf": "Derf (authors' module)"}
# What V7's registered design does not take from the Derf authors' GPT-2 recipe (github.com/zlab-princeton/Derf,
# 'language model': nanoGPT's train.py with their train_derf.patch): their AdamW decays only the weight matrices and
# their training script starts every Derf layer's α at 1.0 (attn_alpha_init_value, ffn_alpha_init_value,
# dec_alpha_init_value override the module's default, 0.5). The sentence naming an arm that did not train says so
# (the arms' `scale`), and the page's Markdown says it in full.
# evidence key: (row name, baseline arm, variant arm, the measure read)
DERF_PAIRS = {
    "derf_minus_rms": ("Derf − RMSNorm, validation loss", "v7-rms", "v7-derf", "val"),
    "derf_minus_dyt": ("Derf − DyT, validation loss", "v7-dyt", "v7-derf", "val"),
    "dyt_minus_rms": ("DyT − RMSNorm, validation loss", "v7-rms", "v7-dyt", "val"),
    "fit_derf_minus_rms": ("Derf − RMSNorm, training loss (evaluation mode)", "v7-rms", "v7-derf", "fit"),
    "gap_derf_minus_rms": ("Derf − RMSNorm, generalisation gap", "v7-rms", "v7-derf", "gap"),
    "gap_derf_minus_dyt": ("Derf − DyT, generalisation gap", "v7-dyt", "v7-derf", "gap"),
}


def _measure(run: dict, measure: str) -> float:
    """A run's validation loss, evaluation-mode training loss, or their difference (the gap); NaN where it diverged
    or went missing, so that its pair drops out of every interval (`paired_or_none` returns None)."""
    if "missing" in run or run["diverged"] or run.get("train_loss_eval") is None:
        return math.nan
    val, fit = float(run["final_val_loss"]), float(run["train_loss_eval"])
    return {"val": val, "fit": fit, "gap": val - fit}[measure]


def arm_runs(runs: list[dict]) -> dict[str, list[dict]]:
    """V7's runs by arm, each sorted by seed; refuses arms that are not paired seed for seed."""
    by_arm = {label: sorted((r for r in runs if r["tag"]["label"] == label), key=lambda r: r["tag"]["seed"])
              for label in DERF_ARMS}  # fmt: skip
    seeds = {label: [r["tag"]["seed"] for r in arm] for label, arm in by_arm.items()}
    if len({tuple(s) for s in seeds.values()}) != 1 or not seeds["v7-rms"]:
        raise ValueError(f"V7's arms must be paired seed for seed, got seeds {seeds}")
    return by_arm


def derf_pairs(runs: list[dict], margin: float) -> dict:
    """The paired intervals V7 reads (and the ones reported beside them), keyed as in its evidence."""
    by_arm = arm_runs(runs)
    out = {}
    for key, (_, baseline, variant, measure) in DERF_PAIRS.items():
        a = [_measure(r, measure) for r in by_arm[baseline]]
        b = [_measure(r, measure) for r in by_arm[variant]]
        out[key] = paired_or_none(a, b, margin)
    return out


def arm_means(runs: list[dict]) -> dict[str, dict]:
    """Per arm: mean validation loss, evaluation-mode training loss and gap over the seeds that finished."""
    out = {}
    for label, arm in arm_runs(runs).items():
        row = {}
        for measure in ("val", "fit", "gap"):
            values = [v for v in (_measure(r, measure) for r in arm) if math.isfinite(v)]
            row[measure] = float(np.mean(values)) if values else None
        row["diverged"] = sum(1 for r in arm if "missing" in r or r["diverged"])
        out[label] = row
    return out


def _gap_reading(paired: dict | None) -> str:
    """The gap difference against zero: 'smaller' when its interval lies wholly below 0, 'larger' wholly above."""
    if paired is None:
        return "not measured"
    return {BELOW: "smaller", ABOVE: "larger"}.get(side_of(paired, 0.0), "undecided")


def derf_claim(runs: list[dict], margin: float, entropy: float) -> Finding:
    """V7's measurements, and its verdict by its registered readings and verdict rules (data/design.toml)."""
    pairs = derf_pairs(runs, margin)
    means = arm_means(runs)
    versus_rms = non_inferiority(pairs["derf_minus_rms"])
    versus_dyt = non_inferiority(pairs["derf_minus_dyt"])
    gap = _gap_reading(pairs["gap_derf_minus_rms"])
    primary = pairs["derf_minus_rms"]
    verdict = design.registered_verdict("V7", pairs)
    if primary is None:
        summary = "A run diverged, so there is no paired interval of Derf − RMSNorm."
    else:
        summary = (
            "With V1's AdamW (decay on every parameter) and α₀ 0.5, not the Derf authors' (decay on the weight "
            "matrices only, α₀ 1.0), "
            f"final validation loss, Derf − RMSNorm {interval_text(primary, NATS_PER_BYTE, margin=False)}: "
            f"{versus_rms} against +{margin}; Derf − DyT "
            f"{interval_text(pairs['derf_minus_dyt'], NATS_PER_BYTE, margin=False)}: {versus_dyt}. "
            f"Derf's generalisation gap (validation minus evaluation-mode training loss) against RMSNorm's "
            f"{interval_text(pairs['gap_derf_minus_rms'], NATS_PER_BYTE, margin=False)}: {gap} "
            + ("(wholly below zero)." if gap == "smaller" else "(not wholly below zero).")
        )
    evidence = {
        **pairs,
        "versus_rms": versus_rms,
        "versus_dyt": versus_dyt,
        "gap_reading": gap,
        "arm_means": means,
        "unigram_entropy_nats": entropy,
        "parameters": {
            label: GPT(GPTConfig(**r["model"])).num_parameters()
            for label, arm in arm_runs(runs).items()
            for r in arm[:1]
        },  # fmt: skip
        **run_scale(runs, ("steps", "batch_size", "warmup_steps", "lr")),
        "margin": margin,
    }
    finding = paired_finding(verdict, summary, evidence, primary, margin, V7_KEY)
    finding.headline = derf_headline(finding)
    model, train = evidence["model"], evidence["train"]
    finding.arms = arm_losses(
        arm_runs(runs),
        entropy,
        scale=f"width {model['width']}, {train['steps']} steps, V1's AdamW and α₀ 0.5, not the Derf authors'",
        names={label: name.split(" (")[0] for label, name in ARM_NAMES.items()},
    )
    return finding


def derf_headline(v7: Finding) -> str | None:
    """The opening page's sentence on V7, from the recorded key number, threshold and verdict."""
    k, t = v7.key_number, v7.threshold
    if k is None or t is None:
        return None
    key = KeyNumber.of(v7)
    where = {"no worse": "below", "worse": "beyond", "undecided": "across"}[v7.evidence["versus_rms"]]
    return (
        f"Dynamic erf, with V1's AdamW and α₀ 0.5 rather than its authors', ends {key.format(abs(k))} "
        f"{'worse' if k > 0 else 'better'} than RMSNorm, its interval {where} the +{key.limit(t)} margin."
    )


def derf_table(v7: Finding) -> pd.DataFrame:
    """Per arm: mean final validation loss, evaluation-mode training loss and gap; then the paired differences."""
    e = v7.evidence
    rows = [
        {
            "compared": ARM_NAMES[label],
            "validation loss": m["val"],
            "training loss (eval mode)": m["fit"],
            "gap": m["gap"],
            "95% low": None,
            "95% high": None,
        }
        for label, m in e["arm_means"].items()
    ]
    for key, (name, *_rest) in DERF_PAIRS.items():
        p = e[key]
        measure = DERF_PAIRS[key][3]
        column = {"val": "validation loss", "fit": "training loss (eval mode)", "gap": "gap"}[measure]
        row = {"compared": name, "validation loss": None, "training loss (eval mode)": None, "gap": None,
               "95% low": None if p is None else p["ci_low"], "95% high": None if p is None else p["ci_high"]}  # fmt: skip
        row[column] = None if p is None else p["mean_difference"]
        rows.append(row)
    return pd.DataFrame(rows)


def derf_paragraph(v7: Finding) -> str:
    """V7's verdict paragraph: the verdict, then the arms' losses, the source's own GPT-2 numbers beside them, and
    what this scale can show."""
    e = v7.evidence
    m = {label: {k: measured(v) for k, v in row.items() if k != "diverged"} for label, row in e["arm_means"].items()}
    entropy = e["unigram_entropy_nats"]
    src = {name: prose.source("V7", f"gpt2_val_loss_{name}") for name in ("layernorm", "dyt", "derf")}
    outcome = {label: learned(row["val"], entropy) for label, row in m.items()}
    names = {"v7-derf": "Derf", "v7-dyt": "DyT", "v7-rms": "RMSNorm"}
    by_outcome: dict[str, list[str]] = {}
    for label, name in names.items():
        by_outcome.setdefault(outcome[label], []).append(name)
    outcomes = "; ".join(f"{' and '.join(arms)} {result}" for result, arms in by_outcome.items())
    return (
        verdict_lead("V7", v7)
        + f"Averaged over {len(e['seeds'])} seeds, the final validation loss is {significant(m['v7-rms']['val'])} "
        f"nats per byte with RMSNorm, {significant(m['v7-dyt']['val'])} with DyT and "
        f"{significant(m['v7-derf']['val'])} with Derf (the byte frequencies' entropy is {significant(entropy)}): "
        f"{outcomes}. "
        f"The training loss in evaluation mode, "
        f"over every tenth batch each run trained on, is {significant(m['v7-rms']['fit'])}, "
        f"{significant(m['v7-dyt']['fit'])} and {significant(m['v7-derf']['fit'])}, so the generalisation gaps are "
        f"{significant(m['v7-rms']['gap'])}, {significant(m['v7-dyt']['gap'])} and "
        f"{significant(m['v7-derf']['gap'])}. In the authors' GPT-2 runs on OpenWebText, validation losses in nats "
        f"per token were {src['layernorm']} with LayerNorm, {src['dyt']} with DyT and {src['derf']} with Derf. "
        f"**What this scale can and cannot show:** whether Derf, untuned, trains this small byte-level model as well "
        f"as RMSNorm under the same optimiser, and whether any gain shows in the gap rather than in the fit. It cannot "
        f"show the authors' 124M-parameter GPT-2 result: the model here has "
        f"{e['parameters']['v7-derf']:,} parameters and trains {e['train']['steps']} steps, the optimiser is V1's "
        "(the DyT authors' AdamW, decay on every parameter) rather than the Derf authors' nanoGPT AdamW (decay on the "
        "weight matrices only), and α₀ is the Derf module's default, 0.5, where their training script starts every "
        "Derf layer at 1.0."
    )
