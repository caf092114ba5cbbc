"""V1, Dynamic Tanh in place of every norm: the paired differences (as text, `interval`, and as table rows), the α₀
sweep, the probes at initialisation, the final DyT layer's saturation through training, and the verdict
(`dyt_claim`, with the opening page's sentence `dyt_headline`) and its paragraph (`dyt_paragraph`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch

from normlab.analysis.landscape.method import Landscape, arm_losses, finals, measured, paired_finding, verdict_lead
from normlab.analysis.landscape.probes import block_gradient_scale, probe_batches
from normlab.analysis.landscape.profiles import AUTHORS_TRAIN, SMALL_VARIANTS, small_variant
from normlab.analysis.landscape.summaries import non_inferiority
from normlab.analysis.shared.paired import interval_text
from normlab.gpt.model import GPT, GPTConfig
from normlab.norms.dyt import authors_alpha_init
from normlab.study.findings import Finding
from normlab.study.key_numbers import NATS_PER_BYTE, KeyNumber
from normlab.study.present import significant
from normlab.study.results import decide


def paired_row(name: str, scale: str, paired: dict | None) -> dict:
    if paired is None:
        return {
            "variant": name,
            "scale": scale,
            "mean difference": None,
            "95% low": None,
            "95% high": None,
            "outcome": "a run diverged",
        }
    return {
        "variant": name,
        "scale": scale,
        "mean difference": paired["mean_difference"],
        "95% low": paired["ci_low"],
        "95% high": paired["ci_high"],
        "outcome": non_inferiority(paired),
    }


DYT_PAIRS = {  # evidence key: (row name, baseline, variant), all at the small scale and reference learning rate
    "dyt_minus_rms": ("DyT, authors' recipe − RMSNorm, same AdamW", "rms-authors", "dyt-authors"),
    "dyt_rmsfinal_minus_rms": ("DyT blocks, RMSNorm final − RMSNorm, same AdamW", "rms-authors", "dyt-rmsfinal"),
    "dyt_minus_dyt_rmsfinal": ("DyT final norm − RMSNorm final norm (DyT blocks)", "dyt-rmsfinal", "dyt-authors"),
    "dyt_minus_layer": ("DyT, authors' recipe − LayerNorm", "layer", "dyt-authors"),
    "rms_authors_minus_rms": ("RMSNorm: authors' AdamW − the study's", "rms", "rms-authors"),
    "dyt_study_minus_rms": ("DyT, study's recipe − RMSNorm", "rms", "dyt"),
    "dyt_minus_dyt_plain": ("study's DyT − DyT plain (the embedding scale)", "dyt-plain", "dyt"),
    "layer_minus_rms": ("LayerNorm − RMSNorm", "rms", "layer"),
}
TRACED = ("dyt-authors", "dyt-rmsfinal", "dyt")  # the DyT variants whose trace V1 reads and draws
# the arms whose runs V1's verdict reads (its pairs, its diagnosis and its LayerNorm caveat), with their names
V1_ARMS = {
    "dyt-authors": "DyT (authors' recipe)",
    "dyt-rmsfinal": "DyT with an RMSNorm final norm",
    "rms-authors": "RMSNorm (authors' AdamW)",
    "layer": "LayerNorm",
}
# the arms whose failure to train answers V1 (DyT without tuning); RMSNorm or LayerNorm short of the minimum leaves
# V1 not testable here
V1_ANSWERS = ("dyt-authors", "dyt-rmsfinal")
V1_KEY = KeyNumber("paired final loss, DyT − RMSNorm", NATS_PER_BYTE)


def dyt_pairs(study: Landscape) -> dict:
    """The paired final-loss differences V1 reads, keyed as in its evidence."""
    return {key: study.versus("small", baseline, variant) for key, (_, baseline, variant) in DYT_PAIRS.items()}


def dyt_pairs_table(pairs: dict) -> pd.DataFrame:
    return pd.DataFrame([paired_row(DYT_PAIRS[key][0], "small", paired) for key, paired in pairs.items()])


BASELINE_UNDER_AUTHORS_ADAMW = "rms-authors"  # RMSNorm trained with DyT's optimiser: V1's pairs differ in the norm


def alpha_sensitivity(study: Landscape) -> pd.DataFrame:
    """Per width: the authors' recipe's best α₀ (of the norms not in front of attention; that one's is 4×) and its
    loss, its loss at the authors' α₀, RMSNorm's loss under the same AdamW (the authors' baseline, so the two differ
    in the norm alone), and how many α₀ diverged (seed 0, reference learning rate)."""
    P, F = study.settings, study.frame
    rows = []
    for width in P["alpha_widths"]:
        g = F[
            (F.scale == "small")
            & (F.label == "dyt-authors")
            & (F.width == width)
            & (F.seed == 0)
            & (F.lr == P["small_train"]["lr"])
        ]
        alphas_diverged = int(g.diverged.sum())
        swept = sorted(float(a) for a in g.alpha)
        g = g[~g.diverged]
        base = F[
            (F.scale == "small")
            & (F.label == BASELINE_UNDER_AUTHORS_ADAMW)
            & (F.width == width)
            & (F.seed == 0)
            & (F.lr == P["small_train"]["lr"])
        ]
        best = g.loc[g.final.idxmin()] if len(g) else None
        default = g[g.reference_alpha].final
        rows.append(
            {
                "width": width,
                "authors' α₀": authors_alpha_init(width)[1],
                "best α₀": None if best is None else float(best.alpha),
                "best DyT loss": None if best is None else float(best.final),
                "α₀ swept": ", ".join(significant(a, 2) for a in swept),
                "optimum interior": best is not None and swept[0] < float(best.alpha) < swept[-1],
                "DyT loss at the authors' α₀": float(default.iloc[0]) if len(default) else None,
                "RMSNorm loss, authors' AdamW": float(base.final.iloc[0]),
                "α₀ values that diverged": alphas_diverged,
            }
        )
    return pd.DataFrame(rows)


def dyt_probes(settings: dict, corpus) -> dict:
    """What DyT's first layer sees at initialisation, and how much gradient reaches the blocks then."""
    # The embeddings (times the scale, with the recipe), whose RMS sets where on tanh's curve the first layer works.
    torch.manual_seed(0)
    init_model = GPT(GPTConfig(**settings["small"], norm="dyt"))
    embedding_rms = float(init_model.token_embedding.weight.detach().pow(2).mean().sqrt())
    scaled_embedding_rms = embedding_rms * float(init_model.embedding_scale.detach())
    # Same seed and batch for each model: AdamW's eps (1e-8) damps a gradient of that size instead of normalising it.
    batch_size = settings["small_train"]["batch_size"]
    grad_x, grad_y = probe_batches(corpus, GPTConfig(**settings["small"]), batch_size, 1, "cpu")[0]
    block_grad = {}
    for label in ("rms", "dyt-authors", "dyt", "dyt-plain"):
        torch.manual_seed(0)
        model = GPTConfig(**settings["small"], **small_variant(label, settings["small"]["width"]))
        block_grad[label] = block_gradient_scale(GPT(model), grad_x, grad_y)
    return {"embedding_rms": embedding_rms, "scaled_embedding_rms": scaled_embedding_rms, "block_grad": block_grad}


def _layer_order(name: str) -> tuple:
    """Module order of a norm's name: the blocks' norms by block and position, then the final norm."""
    pieces = name.split(".")
    return (math.inf,) if pieces[0] == "final_norm" else (int(pieces[1]), pieces[2])


def final_dyt_layer(point: dict) -> str:
    """The last DyT layer a trace point names: the final norm if it is DyT, else the last block's second norm."""
    return max(point["saturated_share"], key=_layer_order)


def saturation_onset(trace: Sequence[dict], threshold: float) -> dict:
    """A run's final DyT layer through its trace: its saturated share at the end, the first traced step at which
    the share reached `threshold` (None if it never did), and the last hidden RMS and block gradient at the end."""
    if not trace:
        raise ValueError("saturation_onset needs a trace with at least one point (run with trace_dyt=True)")
    layer = final_dyt_layer(trace[-1])
    reached = [p["step"] for p in trace if p["saturated_share"][layer] >= threshold]
    last = trace[-1]
    return {
        "layer": layer,
        "final_share": last["saturated_share"][layer],
        "onset_step": reached[0] if reached else None,
        "final_hidden_rms": last["final_hidden_rms"],
        "final_block_gradient": last["block_gradient"],
        "last_step": last["step"],
    }


def traced_saturation(runs: Sequence[dict], threshold: float) -> dict:
    """`saturation_onset` over the seeds of one variant: saturated when every seed's final DyT layer ends at or above
    `threshold`; the share's range over seeds, and the latest onset step (None unless every seed saturated)."""
    per_seed = [
        {"seed": r.get("tag", {}).get("seed", i), **saturation_onset(r["dyt_trace"], threshold)}
        for i, r in enumerate(runs)
        if r["dyt_trace"] and not r["diverged"]
    ]
    if not per_seed:
        return {"seeds": 0, "saturated": False, "layer": None, "share_low": None, "share_high": None,
                "onset_step": None, "per_seed": []}  # fmt: skip
    shares = [s["final_share"] for s in per_seed]
    onsets = [s["onset_step"] for s in per_seed]
    saturated = min(shares) >= threshold
    return {
        "seeds": len(per_seed),
        "saturated": saturated,
        "layer": per_seed[0]["layer"],
        "share_low": min(shares),
        "share_high": max(shares),
        "onset_step": max(onsets) if saturated else None,
        "per_seed": per_seed,
    }


def _percent(share: float) -> str:
    return f"{significant(100 * share, 2)}%"


def _percent_range(low: float, high: float) -> str:
    return _percent(low) if _percent(low) == _percent(high) else f"{_percent(low)}–{_percent(high)}"


def dyt_diagnosis(
    authors: dict,
    rmsfinal: dict,
    rmsfinal_vs_rms: dict | None,
    *,
    margin: float,
    threshold: float,
    means: tuple[float, float] | None = None,
) -> str:
    """The sentence that names the part of the authors' recipe that fails, from the measured numbers: whether the
    final DyT layer saturates (`traced_saturation` of the recipe, against `threshold`), and whether DyT in the blocks
    with an RMSNorm final norm is within `margin` nats of RMSNorm (the paired interval), and where its own last DyT
    layer sits."""
    if authors["seeds"] == 0:
        first = "No run of the authors' recipe finished with a trace, so its final DyT layer cannot be read"
    elif authors["saturated"]:
        first = (
            f"The part of the authors' recipe that fails is its final DyT layer: it saturates, with "
            f"{_percent_range(authors['share_low'], authors['share_high'])} of its inputs where float32's "
            f"tanh′(αx) is exactly 0 at the end (over {authors['seeds']} seeds), and at least "
            f"{_percent(threshold)} from step {authors['onset_step']} on"
            + (f", the last hidden state's RMS ending at {_hidden_rms(authors)}" if authors.get("per_seed") else "")
        )
    else:
        first = (
            f"The authors' final DyT layer does not saturate: at most {_percent(authors['share_high'])} of its inputs "
            f"sit where tanh′(αx) is 0 at the end (threshold {_percent(threshold)}): it is not stuck on tanh's flat "
            "tails"
        )
    outcome = non_inferiority(rmsfinal_vs_rms)
    lead = "with an RMSNorm final norm, DyT in the blocks is"
    if means is not None and all(math.isfinite(m) for m in means):
        lead = (
            f"with an RMSNorm final norm, DyT in the blocks ends at {significant(means[0])} nats per byte against "
            f"RMSNorm's {significant(means[1])}, and is"
        )
    if rmsfinal_vs_rms is None:
        second = "with an RMSNorm final norm a run diverged, so there is no paired interval"
    elif outcome == "no worse":
        second = f"{lead} within the margin (+{margin} nats per byte) of RMSNorm ({interval_text(rmsfinal_vs_rms, NATS_PER_BYTE, margin=False)})"
    elif outcome == "worse":
        second = (
            f"{lead} still worse than RMSNorm beyond the margin of +{margin} nats per byte ({interval_text(rmsfinal_vs_rms, NATS_PER_BYTE, margin=False)}), so the "
            "blocks' DyT layers fail too"
        )
    else:
        second = f"{lead} neither within the margin (+{margin} nats per byte) of RMSNorm nor beyond it ({interval_text(rmsfinal_vs_rms, NATS_PER_BYTE, margin=False)})"
    if rmsfinal["seeds"]:
        second += (
            f", and its last DyT layer (the last block's) ends with "
            f"{_percent_range(rmsfinal['share_low'], rmsfinal['share_high'])} of its inputs saturated"
        )
    return f"{first}; {second}."


def _hidden_rms(saturation: dict) -> str:
    """The last hidden state's RMS at the end over the seeds of `traced_saturation`, as a range."""
    values = [s["final_hidden_rms"] for s in saturation["per_seed"] if s.get("final_hidden_rms") is not None]
    if not values:
        return "not measured"
    low, high = significant(min(values)), significant(max(values))
    return low if low == high else f"{low}–{high}"


def trace_table(runs_by_label: dict[str, dict]) -> dict:
    """Each variant's trace, compact for the evidence: steps, α per DyT layer, the last hidden RMS, the final DyT
    layer's saturated share and the gradient reaching the blocks."""
    out = {}
    for label, run in runs_by_label.items():
        trace = run["dyt_trace"]
        if not trace:
            out[label] = None
            continue
        layer = final_dyt_layer(trace[-1])
        out[label] = {
            "final_dyt_layer": layer,
            "step": [p["step"] for p in trace],
            "alpha": {name: [p["alpha"][name] for p in trace] for name in trace[0]["alpha"]},
            "final_hidden_rms": [p["final_hidden_rms"] for p in trace],
            "final_layer_saturated_share": [p["saturated_share"][layer] for p in trace],
            "block_gradient": [p["block_gradient"] for p in trace],
        }
    return out


def traced_runs(study: Landscape, seed: int = 0) -> dict[str, dict]:
    """One run per traced DyT variant at the reference learning rate: the one of `seed`."""
    return {label: run for label in TRACED for run in study.pick("small", label) if run["tag"]["seed"] == seed}


def _mean_final(runs: Sequence[dict]) -> float:
    """The mean final loss over the runs that did not diverge; NaN where none finished."""
    values = [v for v in finals(runs) if math.isfinite(v)]
    return float(np.mean(values)) if values else math.nan


def learned(final: float, entropy: float) -> str:
    """How far a final loss got: past byte frequencies (the unigram entropy) by at least 0.25 nats, or not."""
    if final >= entropy:
        return "did not even reach byte frequencies"
    return "learned little beyond byte frequencies" if entropy - final < 0.25 else "learned context"


def dyt_claim(study: Landscape, pairs: dict, alphas: pd.DataFrame, probes: dict, *, saturated_share: float) -> Finding:
    """V1 by non-inferiority of the authors' recipe against RMSNorm under the same optimiser, at the study's loss
    margin; the caveats are LayerNorm (the same margin) and α₀'s tuning (the authors' α₀ more than the margin off the
    best, or the best α₀ differing by width). The diagnosis sentence reads the traces against `saturated_share`."""
    P, margin, entropy = study.settings, study.loss_margin, study.entropy
    best_alphas = alphas["best α₀"].tolist()
    default_gap = (alphas["DyT loss at the authors' α₀"] - alphas["best DyT loss"]).max()
    tuning_matters = bool(default_gap > margin) or len(set(best_alphas)) > 1
    primary = pairs["dyt_minus_rms"]
    v1_outcome = non_inferiority(primary)
    v1_layer = non_inferiority(pairs["dyt_minus_layer"])
    if v1_outcome == "no worse":
        verdict = decide(True, caveat=tuning_matters or v1_layer != "no worse")
    elif v1_outcome == "worse":
        verdict = "does not hold"
    else:
        verdict = "not testable here"
    saturation = {label: traced_saturation(study.pick("small", label), saturated_share) for label in TRACED}
    finals_by_label = {label: _mean_final(study.pick("small", label)) for label in SMALL_VARIANTS}
    diagnosis = dyt_diagnosis(
        saturation["dyt-authors"],
        saturation["dyt-rmsfinal"],
        pairs["dyt_rmsfinal_minus_rms"],
        margin=margin,
        threshold=saturated_share,
        means=(finals_by_label["dyt-rmsfinal"], finals_by_label["rms-authors"]),
    )
    # the page and the ledger lead with what the record shows: where DyT fails, and DyT with an RMSNorm final norm
    summary = diagnosis + (
        (
            f" DyT by the authors' LLaMA recipe − RMSNorm under the same AdamW, final loss {interval_text(primary, NATS_PER_BYTE, margin=False)}: "
            f"{v1_outcome} against a +{margin} margin. Best α₀ "
            + ", ".join(
                f"{significant(a, 2)} at width {w}" + ("" if inside else " (at the sweep's edge, not an optimum)")
                for w, a, inside in zip(P["alpha_widths"], best_alphas, alphas["optimum interior"])
            )
            + "."
        )
        if primary
        else " A DyT or RMSNorm run diverged at the reference learning rate, so no paired interval exists."
    )
    v1_compared = ("rms", "dyt-authors", "dyt-rmsfinal")
    ranges = {label: study.usable_range("small", label, v1_compared) for label in v1_compared}
    attention_alpha, other_alpha = authors_alpha_init(P["small"]["width"])
    evidence = {
        "parameters": GPT(GPTConfig(**P["small"])).num_parameters(),
        "alpha_optimum_interior": [bool(v) for v in alphas["optimum interior"]],
        "embedding_rms_at_init": probes["embedding_rms"],
        "scaled_embedding_rms_at_init": probes["scaled_embedding_rms"],
        "mean_final_loss": finals_by_label,
        "unigram_entropy_nats": entropy,
        "block_gradient_at_init": probes["block_grad"],
        "authors_alpha_init": {"attention": attention_alpha, "other": other_alpha},
        "saturated_share_threshold": saturated_share,
        "saturation": {label: {k: v for k, v in s.items() if k != "per_seed"} for label, s in saturation.items()},
        "saturation_per_seed": {label: s["per_seed"] for label, s in saturation.items()},
        "trace_seed0": trace_table(traced_runs(study)),
        **pairs,
        "alpha_sensitivity": alphas.to_dict("records"),
        "default_alpha_gap_to_best": float(default_gap),
        "lr_range": ranges,
        "model": P["small"],
        "train": P["small_train"],
        "authors_train": AUTHORS_TRAIN,
        "corpus_sha256": study.corpus_sha256,
        "margin": margin,
    }
    finding = paired_finding(verdict, summary, evidence, primary, margin, V1_KEY)
    finding.headline = dyt_headline(finding)
    authors = saturation["dyt-authors"]
    why = (
        f"; its final DyT layer saturated from step {authors['onset_step']}, the last hidden state's RMS ending at "
        f"{_hidden_rms(authors)}"
        if authors["saturated"]
        else ""
    )
    finding.arms = arm_losses(
        {label: study.pick("small", label) for label in V1_ARMS},
        entropy,
        scale=f"{evidence['parameters']:,} parameters, {P['small_train']['steps']} steps{why}",
        names=V1_ARMS,
        answers=V1_ANSWERS,
    )
    return finding


def dyt_headline(v1: Finding) -> str | None:
    """The opening page's sentence on V1 (at most 35 words), from the key number, threshold and verdict the finding
    records and its traces: where the final DyT layer saturates, the sentence leads with that and with how DyT in
    the blocks with an RMSNorm final norm compares; otherwise with the interval against the margin. None without a
    key number or threshold."""
    k, t, e = v1.key_number, v1.threshold, v1.evidence
    if k is None or t is None:
        return None
    key = KeyNumber.of(v1)
    # the verdict reads the paired interval against +margin (`non_inferiority`), so the sentence does too
    interval = {"no worse": "below", "worse": "beyond", "undecided": "across"}[non_inferiority(e.get("dyt_minus_rms"))]
    scale = f" at {e['parameters'] / 1000:,.0f}k parameters, {e['train']['steps']} steps" if "parameters" in e else ""
    worse = "worse" if k > 0 else "better"
    if e["saturation"]["dyt-authors"]["saturated"]:
        # what the record shows leads: where DyT fails, and DyT in the blocks with an RMSNorm final norm
        sentence = f"Dynamic Tanh by its authors' recipe ends {key.format(abs(k))} {worse} than RMSNorm{scale}: its final layer saturates"
        rmsfinal = e.get("dyt_rmsfinal_minus_rms")
        if rmsfinal is None:
            return sentence + "."
        other = rmsfinal["mean_difference"]
        return (
            f"{sentence}; in the blocks with an RMSNorm final norm it ends {significant(abs(other))} "
            f"{'worse' if other > 0 else 'better'}."
        )
    sentence = (
        f"Dynamic Tanh by its authors' recipe ends {key.format(abs(k))} {worse} than RMSNorm"
        f"{scale}, its interval {interval} the +{key.limit(t)} margin"
    )
    return sentence + {
        "does not hold": ": untuned, it does not match RMSNorm.",
        "holds": ": untuned, it matches RMSNorm.",
        "holds with caveats": ": it matches only with tuning.",
    }.get(v1.verdict, ".")


def dyt_paragraph(v1: Finding) -> str:
    """V1's verdict paragraph: the finding's verdict and sentence, then what the runs say around it (losses,
    the last hidden state and the gradient reaching the blocks, the earlier recipes, the usable learning rates) and
    what this scale can show, all read from its evidence."""
    e = v1.evidence
    finals_by_label = {label: measured(loss) for label, loss in e["mean_final_loss"].items()}
    entropy, ranges, block_grad = e["unigram_entropy_nats"], e["lr_range"], e["block_gradient_at_init"]
    per_seed = e["saturation_per_seed"]
    width, steps = e["model"]["width"], e["train"]["steps"]
    end_gradient = (
        ", ".join(f"{significant(s['final_block_gradient'])} in seed {s['seed']}" for s in per_seed["dyt-authors"])
        if per_seed["dyt-authors"]
        else "not measured"
    )
    end_rms = {label: [measured(s["final_hidden_rms"]) for s in seeds] for label, seeds in per_seed.items()}
    rms_range = {
        label: f"{significant(min(v))}–{significant(max(v))}" if v else "not measured" for label, v in end_rms.items()
    }
    return (
        verdict_lead("V1", v1)
        + f"Averaged over seeds, the authors' recipe ends at {significant(finals_by_label['dyt-authors'])} nats per "
        f"byte and {learned(finals_by_label['dyt-authors'], entropy)}; with an RMSNorm final norm at "
        f"{significant(finals_by_label['dyt-rmsfinal'])}; RMSNorm under the same AdamW at "
        f"{significant(finals_by_label['rms-authors'])} and under the study's at {significant(finals_by_label['rms'])} "
        f"(unigram entropy {significant(entropy)}). "
        f"At the end of training the last hidden state, the final norm's input, has RMS {rms_range['dyt-authors']} "
        f"with the authors' recipe and {rms_range['dyt-rmsfinal']} with an RMSNorm final norm, and the mean gradient "
        f"reaching the blocks' matrices in the authors' recipe is {end_gradient} (at initialisation "
        f"{significant(block_grad['dyt-authors'])}; RMSNorm's {significant(block_grad['rms'])}). "
        f"The study's earlier recipe (β, α₀ = 0.5 everywhere, the scalars undecayed) ends at "
        f"{significant(finals_by_label['dyt'])} and plain DyT, without the embedding scale, at "
        f"{significant(finals_by_label['dyt-plain'])}: the scale lifts the first layer's input from RMS "
        f"{significant(e['embedding_rms_at_init'])} to {significant(e['scaled_embedding_rms_at_init'])}. "
        f"Usable learning rates reach {significant(ranges['dyt-authors']['lr_high'])} with the authors' recipe, "
        f"{significant(ranges['dyt-rmsfinal']['lr_high'])} with an RMSNorm final norm and "
        f"{significant(ranges['rms']['lr_high'])} for RMSNorm. "
        f"**What this scale can and cannot show:** a small model can show whether the authors' recipe trains at all "
        f"at this width and learning rate, and which layer stops it. It cannot show their large-model parity: at "
        f"width {width} the √width scale is {significant(math.sqrt(width))}, not the 64 of "
        f"a 4096-wide LLaMA; the runs are {steps} steps, not billions of tokens; and the authors "
        f"give α₀ only for widths of 4096 and more, so the α₀ here is their narrowest model's, checked by the sweep."
    )
