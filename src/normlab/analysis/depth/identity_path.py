"""Verdicts, B17 (pre-LN keeps the trunk an identity path, so gradients flow back undamped): pre-LN's
block-to-block gradient spread, training without warm-up, the paired pre − post final loss, and whether the
last layer's gradients lie under Xiong et al. 2020's bound at initialisation (Theorem 1, Xavier initialisation).
The fitted depth exponents describe the measured slope; they decide nothing."""

from __future__ import annotations

import numpy as np
import pandas as pd

from normlab.analysis.depth.initialisation import InitStudy, gradient_spread, worst_bound_ratio, xiong_bound
from normlab.analysis.depth.training_at_depth import TrainingStudy, final_losses
from normlab.analysis.shared.paired import interval_text, paired_or_none
from normlab.study import decide
from normlab.study.findings import Finding
from normlab.study.key_numbers import FACTOR, NATS_PER_BYTE, KeyNumber
from normlab.study.present import significant

B17_KEY = KeyNumber("largest ratio of pre-LN per-block gradient norms at the deepest depth", FACTOR)


def b17_measures(init: InitStudy, training: TrainingStudy, settings: dict, margin: float) -> dict:
    """Pre-LN's worst block-to-block gradient ratio at the deepest depth (over both initialisations, and its
    spread seed by seed), how often each placement trained without warm-up, the paired pre − post final
    loss (RMSNorm), the largest measured/bound ratio under Xavier initialisation per placement (`xiong_bound`), and
    the fitted depth exponents."""
    runs, deepest, exponents = training.paired, init.deepest, init.exponents
    spreads = init.spreads
    deep_pre = pd.concat(
        [
            spreads[s][(spreads[s]["depth"] == deepest) & spreads[s]["config"].str.startswith("pre")]
            for s in (False, True)
        ]
    )
    # Spread over seeds: the same key number (worst pre-LN block-to-block ratio at the deepest depth) seed by seed.
    per_seed = [
        max(
            float(g[(g["depth"] == deepest) & g["config"].str.startswith("pre")]["max_over_min"].max())
            for g in (gradient_spread(init.profiles[s][init.profiles[s]["seed"] == seed]) for s in (False, True))
        )
        for seed in settings["init_seeds"]
    ]
    nowarm = training.no_warmup
    bounds = xiong_bound(init.profiles[False])
    return {
        "bound_ratio_pre": worst_bound_ratio(bounds, "pre"),
        "bound_ratio_post": worst_bound_ratio(bounds, "post"),
        "pre_spread": float(deep_pre["max_over_min"].max()),
        "pre_spread_sd": float(np.std(per_seed, ddof=1)) if len(per_seed) > 1 else None,
        "pre_rate": float(nowarm[nowarm["placement"] == "pre"]["trained"].mean()),
        "post_rate": float(nowarm[nowarm["placement"] == "post"]["trained"].mean()),
        "pair": paired_or_none(
            final_losses(runs, placement="post", norm="rms"), final_losses(runs, placement="pre", norm="rms"), margin
        ),
        "xiong_pre": float(np.mean([exponents[False][c] for c in ("pre-rms", "pre-layer")])),
        "xiong_post": float(np.mean([exponents[False][c] for c in ("post-rms", "post-layer")])),
        "gpt2_pre": float(np.mean([exponents[True][c] for c in ("pre-rms", "pre-layer")])),
        "gpt2_post": float(np.mean([exponents[True][c] for c in ("post-rms", "post-layer")])),
        "drop": float(runs["final_drop"].mean()),
    }


# What "undamped" can mean: the result the essay leans on bounds the gradient at initialisation only.
B17_UNDAMPED = (
    "'Undamped' is read against Xiong et al. 2020, whose statement is a bound at initialisation: there the trunk is "
    "an identity path, but the bound on the last layer's gradient in pre-LN still shrinks as 1/√L."
)


def under_bound(measures: dict, bound_slack: float) -> bool | None:
    """Whether both placements' last-layer gradients lie under Xiong et al.'s bound (constant set at the shallowest
    depth) within ×(1 + `bound_slack`) at every deeper depth; None when a single depth leaves nothing to test."""
    ratios = [measures.get("bound_ratio_pre"), measures.get("bound_ratio_post")]
    if any(r is None for r in ratios):
        return None
    return all(r <= 1.0 + bound_slack for r in ratios)


def b17_verdict(measures: dict, *, spread_limit: float, bound_slack: float) -> str:
    """Holds when pre-LN's gradient spread is within ×`spread_limit` and pre-LN trains without warm-up at least
    as often as post-LN; caveat when post-LN trains as well, pre-LN's paired loss is not better, or the last
    layer's gradients do not lie under Xiong et al.'s bound (`under_bound`), or cannot be tested against it."""
    m, pair = measures, measures["pair"]
    pre_better = pair is not None and pair["outcome"] == "different" and pair["mean_difference"] < 0
    holds = m["pre_spread"] <= spread_limit and m["pre_rate"] >= m["post_rate"] and m["pre_rate"] > 0
    bound_kept = under_bound(m, bound_slack)
    return decide(holds, caveat=(m["post_rate"] >= m["pre_rate"]) or not pre_better or not bound_kept)


def _ratio(value: float | None) -> str:
    return "untested (one depth)" if value is None else f"×{value:.2f}"


def bound_sentence(measures: dict, bound_slack: float) -> str:
    """What the bound test found, the fitted exponents beside it as a description."""
    m = measures
    kept = under_bound(m, bound_slack)
    said = {None: "cannot be tested with one depth", True: "lie under it", False: "do not lie under it"}[kept]
    return (
        f"Under Xavier initialisation, the last layer's gradients at the deeper depths reach {_ratio(m['bound_ratio_pre'])}"
        f" (pre-LN) and {_ratio(m['bound_ratio_post'])} (post-LN) of Xiong et al.'s bound through the shallowest "
        f"depth: they {said} (allowed ×{1 + bound_slack:g}). As a description only, the fitted slopes are "
        f"L^{m['xiong_pre']:.2f} (pre) and L^{m['xiong_post']:.2f} (post), L^{m['gpt2_pre']:.2f} (pre) under "
        "GPT-2's initialisation."
    )


def b17_paragraph(b17: Finding, measures: dict, *, deepest: int, deep: int) -> str:
    """B17's verdict paragraph: the measured numbers, and the verdict and threshold as `b17` records them."""
    m = measures
    return (
        f"Pre-LN per-block gradients at depth {deepest} differ by at most ×{m['pre_spread']:.2f} (threshold "
        f"×{b17.threshold:g}). Without warm-up at depth {deep}, pre-LN trained in {m['pre_rate']:.0%} of runs and "
        f"post-LN in {m['post_rate']:.0%}. Paired final loss, pre-LN − post-LN (RMSNorm): {interval_text(m['pair'], NATS_PER_BYTE)}. "
        f"{bound_sentence(m, b17.evidence['bound_slack'])} Over the last 10% of the paired runs the loss "
        f"still fell {m['drop']:.4f} nats per byte. {B17_UNDAMPED}\n\n"
        f"**B17 verdict: {b17.verdict}.**"
    )


def b17_finding(
    measures: dict,
    *,
    deepest: int,
    deep: int,
    margin: float,
    spread_limit: float,
    bound_slack: float,
    corpus_sha256: str,
) -> Finding:
    m = measures
    return Finding(
        b17_verdict(m, spread_limit=spread_limit, bound_slack=bound_slack),
        f"Pre-LN per-block gradient norms at depth {deepest} differ by at most ×{m['pre_spread']:.2f} (threshold "
        f"×{spread_limit:g}); without warm-up at depth {deep} pre-LN trained in {m['pre_rate']:.0%} of runs vs "
        f"post-LN {m['post_rate']:.0%}; paired pre − post final loss {interval_text(m['pair'], NATS_PER_BYTE)}. "
        + bound_sentence(m, bound_slack)
        + " "
        + B17_UNDAMPED,
        {
            "deepest_init_depth": deepest,
            "train_depth": deep,
            "pre_ln_gradient_max_over_min": m["pre_spread"],
            "pre_trained_rate_no_warmup": m["pre_rate"],
            "post_trained_rate_no_warmup": m["post_rate"],
            "paired_pre_minus_post_rms": m["pair"],
            "bound_ratio_pre_xavier": m.get("bound_ratio_pre"),
            "bound_ratio_post_xavier": m.get("bound_ratio_post"),
            "bound_slack": bound_slack,
            "under_xiong_bound": under_bound(m, bound_slack),
            "exponent_pre_xiong_init": m["xiong_pre"],
            "exponent_post_xiong_init": m["xiong_post"],
            "exponent_pre_gpt2_init": m["gpt2_pre"],
            "exponent_post_gpt2_init": m["gpt2_post"],
            "loss_drop_last_10pct": m["drop"],
            "margin_nats": margin,
            "corpus_sha256": corpus_sha256,
        },
        key_number=m["pre_spread"],
        threshold=spread_limit,
        spread=m["pre_spread_sd"],
        **B17_KEY.fields(),
        rule=f"Pre-LN per-block gradient spread ≤ ×{spread_limit:g} and pre-LN trains without warm-up at least as "
        "often as post-LN; caveat when post-LN trains as well, pre-LN's paired loss is not better, or the last "
        f"layer's gradients under Xavier initialisation exceed Xiong et al.'s bound (constant set at the shallowest "
        f"depth) by more than ×{1 + bound_slack:g}.",
    )


def _b17_training(evidence: dict) -> str:
    """The rule's other part, when it is what failed: pre-LN must train without warm-up at least as often."""
    pre, post = evidence.get("pre_trained_rate_no_warmup"), evidence.get("post_trained_rate_no_warmup")
    if pre is None or post is None:
        return ", but the verdict fails on training without warm-up"
    return f", but without warm-up pre-LN trained in {pre:.0%} of runs and post-LN in {post:.0%}"


def _bound_clause(under: bool | None) -> str:
    if under is None:
        return ""
    return f"; under Xavier initialisation the measured gradients {'lie' if under else 'do not lie'} under it"


def b17_headline(b17: Finding) -> str | None:
    """The opening page's sentence on B17, from the (weighed) finding; None without a key number or threshold."""
    k, t, e = b17.key_number, b17.threshold, b17.evidence
    if k is None or t is None:
        return None
    depth = f" at depth {e['deepest_init_depth']}" if e.get("deepest_init_depth") else ""
    slope = e.get("exponent_pre_xiong_init")
    return (
        f"In pre-LN at initialisation the per-block gradient norms{depth} stay within {B17_KEY.format(k)} of one "
        f"another ({'inside' if k <= t else 'beyond'} the limit of {B17_KEY.limit(t)})"
        + (_b17_training(e) if b17.verdict == "does not hold" and k <= t else "")
        + "; "
        + "the essay's 'undamped' rests on Xiong et al. 2020's bound at initialisation, which for the last layer's "
        "gradient in pre-LN shrinks as 1/√L"
        + _bound_clause(e.get("under_xiong_bound"))
        + (f" (fitted slope, a description: L^{significant(slope, 2)})" if slope is not None else "")
        + "."
    )
