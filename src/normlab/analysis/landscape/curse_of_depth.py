"""V4, the Curse of Depth and LayerNorm Scaling: the later half's share of the drop-one loss with and without
1/√l scaling, and the verdict (`depth_claim`) with its paragraph (`depth_paragraph`).
"""

from __future__ import annotations

import math

import numpy as np

from normlab.analysis.landscape.method import Landscape, measured, verdict_lead
from normlab.analysis.landscape.summaries import growth_ratio, later_half_share, non_inferiority
from normlab.analysis.shared import confirmation as confirmations
from normlab.analysis.shared.confirmation import RegisteredConfirmation, evidence
from normlab.analysis.shared.paired import paired_or_none
from normlab.study import design
from normlab.study.findings import Finding
from normlab.study.key_numbers import NATS_PER_BYTE, POINTS, KeyNumber
from normlab.study.present import significant, table
from normlab.study.results import decide
from normlab.study.verdict_rules import ABOVE, ACROSS, BELOW, side_of

# the share is a fraction of the drop-one loss; its change under scaling is a difference of two shares, so it is
# written in percentage points of that loss (a change from 30% to 33% is +3 percentage points)
V4_KEY = KeyNumber("change in the later half's share of the drop-one loss under 1/√l", POINTS)


def share_verdict(curse: float, share_change: dict | None, *, curse_share: float, share_margin: float, loss_ok: bool):
    """V4's rule: not testable without the curse (pre-LN's later half above `curse_share`) or an interval; holds
    when the paired interval of the share change lies above +`share_margin` (caveat when the final loss is not
    within the loss margin), does not hold when it lies entirely below +`share_margin`, otherwise not testable."""
    if share_change is None or not math.isfinite(curse) or curse > curse_share:
        return "not testable here"
    side = side_of(share_change, share_margin)
    if side == ABOVE:
        return decide(True, caveat=not loss_ok)
    return "does not hold" if side == BELOW else "not testable here"


def depth_claim(
    study: Landscape,
    *,
    curse_share: float,
    share_margin: float | None = None,
    confirmation: RegisteredConfirmation | None = None,
) -> Finding:
    """V4: the curse is present when pre-LN's later half carries at most `curse_share` of the drop-one loss; the
    remedy (LayerNorm Scaling without GPT-2's scaled initialisation, as Sun et al. apply it) works when it raises
    that share by more than `share_margin` (the registered design's, by default): `share_verdict`. The runs are the
    registered `confirmation`'s fresh seeds where one decides (cpu, smoke); its pilot is recorded beside them."""
    share_margin = design.value("V4", "share_margin") if share_margin is None else share_margin
    P = study.settings
    plain, scaled = study.pick("deepest", "pre"), study.pick("deepest", "1/√l")
    share_plain = [later_half_share(r["drop_one"]) if r["drop_one"] else math.nan for r in plain]
    share_scaled = [later_half_share(r["drop_one"]) if r["drop_one"] else math.nan for r in scaled]
    share_change = paired_or_none(share_plain, share_scaled, share_margin)
    scaling_loss = study.versus("deepest", "pre", "1/√l")
    curse = float(np.nanmean(share_plain))
    first_block = float(np.mean([r["drop_one"][0] for r in plain if r["drop_one"]]))
    first_share = float(
        np.mean(
            [
                max(r["drop_one"][0], 0) / max(sum(max(v, 0) for v in r["drop_one"]), 1e-12)
                for r in plain
                if r["drop_one"]
            ]
        )
    )
    growth_plain = float(np.nanmean([growth_ratio(r["stream_rms"]) for r in plain]))
    growth_scaled = float(np.nanmean([growth_ratio(r["stream_rms"]) for r in scaled]))
    loss_ok = non_inferiority(scaling_loss) == "no worse"
    verdict = share_verdict(curse, share_change, curse_share=curse_share, share_margin=share_margin, loss_ok=loss_ok)
    spans = share_change is not None and side_of(share_change, share_margin) == ACROSS
    fragile = f"fragile: the interval spans the +{100 * share_margin:g}-point margin" if spans else None

    def shown(key: str, paired: dict | None, write=significant) -> str:
        return write(paired[key]) if paired else "—"

    def points(value) -> str:  # an end of the interval, in the key number's percentage points
        return V4_KEY.signed(value).removesuffix(f" {POINTS}")

    pairs = share_change["pairs"] if share_change else 0
    decided_by = f", {pairs} {'confirmation ' if confirmation else ''}pairs"
    summary = (
        # the first sentence (the ledger's): the curse's test and the key number against its margin; the loss after it
        f"At depth {P['deepest']['depth']} pre-LN's later half of blocks carries {significant(curse)} of the "
        f"drop-one loss (curse threshold {curse_share:g}"
        + (": above it, no curse" if math.isfinite(curse) and curse > curse_share else "")
        + f"); 1/√l changes that share by {shown('mean_difference', share_change, V4_KEY.signed)} (95% CI "
        f"{shown('ci_low', share_change, points)}..{shown('ci_high', share_change, points)}, margin "
        f"+{100 * share_margin:g}{decided_by})"
        + (", undecided" if spans else "")
        + f". It changes the final loss by {shown('mean_difference', scaling_loss)} {NATS_PER_BYTE}"
        + (f" ({fragile})" if fragile else "")
        + "."
    )
    return Finding(
        verdict,
        summary,
        {
            "first_block_drop_loss": first_block,
            "first_block_share": first_share,
            "later_half_share_plain": share_plain,
            "later_half_share_scaled": share_scaled,
            "share_change": share_change,
            "share_margin": share_margin,
            "fragile": fragile,
            "scaled_variant": {k: v for k, v in scaled[0]["model"].items() if k in ("depth_scaling", "init")}
            if scaled
            else None,
            "final_loss_scaled_minus_plain": scaling_loss,
            "growth_plain": growth_plain,
            "growth_scaled": growth_scaled,
            "model": P["deepest"],
            "train": P["deepest_train"],
            "corpus_sha256": study.corpus_sha256,
            **(evidence(confirmation, "V4", confirmation.pilot_pair("V4")) if confirmation else {}),
        },
        key_number=share_change["mean_difference"] if share_change else None,
        threshold=share_margin,
        spread=share_change["standard_error"] if share_change else None,
        meaning=V4_KEY.meaning,
        unit=V4_KEY.unit,
        arms=study.arms("deepest", {"pre": "pre-LN", "1/√l": "LayerNorm Scaling"}),
    )


def depth_paragraph(v4: Finding, *, curse_share: float) -> str:
    """V4's verdict paragraph: the finding's verdict and sentence, whether the curse shows against `curse_share`,
    what dropping the first block costs, the hidden growth, and what this scale can show, all read from its
    evidence."""
    e = v4.evidence
    curse = float(np.nanmean([measured(share) for share in e["later_half_share_plain"]]))
    first_block, first_share = measured(e["first_block_drop_loss"]), measured(e["first_block_share"])
    share_change, model, train = e["share_change"], e["model"], e["train"]
    unmoved = bool(share_change) and side_of(share_change, 0.0) == ACROSS
    below_margin = bool(share_change) and side_of(share_change, e.get("share_margin", 0.0)) == BELOW
    return (
        verdict_lead("V4", v4)
        + (
            f"The curse shows at this scale (later half at or below {100 * curse_share:g}%)"
            if curse <= curse_share
            else "The curse does not show at this scale"
        )
        + f"; dropping the first block alone costs {significant(first_block)} {NATS_PER_BYTE} ({significant(100 * first_share)}% "
        "of the total), "
        f"{'so the share mostly measures how special the first block is; ' if first_share > 0.5 else ''}"
        + (
            "scaling did not move the share by a measurable amount"
            if unmoved
            else "scaling moved the share, "
            + (
                "by less than the margin"
                if below_margin
                else "by an amount the interval does not bound below the margin"
            )
        )
        + ". "
        f"Hidden RMS grows {significant(measured(e['growth_plain']))}× from the first to the last block without scaling "
        f"and {significant(measured(e['growth_scaled']))}× with it. **What this scale can and cannot show:** Sun et al. "
        "found idle deep layers in models of 130M–7B parameters trained on billions of tokens; "
        f"{model['depth']} narrow blocks trained for {train['steps']} steps may not have reached the regime where later "
        "layers collapse to identity, so an absent curse here is a null result, not a refutation."
    )


def design_text(registered: RegisteredConfirmation | None, settings: dict) -> str:
    """'8 pairs, seeds 1300–1307', as the chapter's test paragraph names the runs that decide."""
    if registered is None:
        return f"this profile has no confirmation: {settings['v4_seeds']} pairs from seed {settings['v4_first_seed']}"
    return f"{registered.pairs} pairs, {confirmations.seeds_text(registered.seeds)}"


def pilot_table(registered: RegisteredConfirmation, v4: Finding):
    """The page's table: V4's pilot beside its confirmation, the share change under 1/√l."""
    return table(
        confirmations.side_by_side(registered, {"V4": v4.evidence["share_change"]}),
        caption="V4's pilot beside its registered confirmation (the share change under 1/√l, as a fraction of the "
        "drop-one loss): only the confirmation decides",
    )
