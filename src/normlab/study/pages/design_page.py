"""The design page: the registered design (data/design.toml) as the book shows it, every claim's quantity, unit,
test, pairs and answering run, its thresholds with their basis and source, and the log of changes made after
results were seen."""

from __future__ import annotations

from normlab.study import multiplicity, verdict_rules
from normlab.study.design import ANSWERING_BUILDS, PROFILES, Design
from normlab.study.prose import number_text
from normlab.study.sample_size import confirmation_pairs, pass_probability


def shown_value(value) -> str:
    """A registered value as the prose writes it: `0.02`, `0.01–0.1`, `float32 0.001, bfloat16 0.1`."""
    if isinstance(value, dict):
        return ", ".join(f"{key} {number_text(number)}" for key, number in value.items())
    if isinstance(value, tuple):
        return "–".join(number_text(number) for number in value)
    return number_text(value)


def _clause(text) -> str:
    """A registered text as a clause that the page ends with its own full stop."""
    return str(text).rstrip().rstrip(".")


TRAINER_TEXT = {
    "reference": "the reference step (normlab.gpt.train), as every design registered before 2026-12-05",
    "compiled": 'the compiled step (TrainConfig(step="compiled"), normlab.gpt.train.CompiledStep)',
}


def answered_text(entry) -> str:
    """'a committed GPU bench (...) where one measured the claim, else this build's run at its profile (a formula)'."""
    text = ", else ".join(ANSWERING_BUILDS[name] for name in entry.answered_by)
    return f"{text} ({_clause(entry.answered_note)})" if entry.answered_note else text


def pairs_text(entry) -> str:
    if not entry.pairs:
        return "—"
    text = ", ".join(f"{profile} {entry.pairs[profile]}" for profile in PROFILES if profile in entry.pairs)
    if entry.looks:
        text += (
            f" (the pilot's runs were looked at after {', '.join(map(str, entry.looks))} pairs before their number was "
            "final, so they decide nothing: the cpu pairs are a confirmation registered before it ran, see below)"
        )
    return text


def confirmation_lines(design: Design) -> list[str]:
    """The confirmations section: each one's pilot, inputs, the pairs those inputs give, and its fresh seeds."""
    lines = [
        "## Confirmations",
        "",
        "A claim whose pairs grew after looks, or whose verdict its pairs could not hold steady, keeps those runs as a "
        "*pilot*: shown, never pooled, deciding nothing. A *confirmation* registered before it ran decides instead: "
        "its pairs are the fewest whose 95% t-interval lies inside the margin (or, for a rule read against +margin "
        "alone, wholly below it) with the registered power at the registered true difference, computed by "
        "`normlab.study.sample_size.confirmation_pairs` from a recorded spread (the pilot's, or a larger one recorded "
        "on another machine, named with its source), never a mean, on seeds no earlier run used. The chapter refuses "
        "a registered number other than this computation gives.",
        "",
    ]
    for c in design.confirmations():
        margin = design.value(c.owner, c.margin)
        unit = design.claim(c.owner).thresholds[c.margin].unit  # the margin's (a claim may have two units)
        pairs = design.claim(c.owner).pairs["cpu"]
        one_sided = c.one_sided

        def spread(claim: str, sd: float) -> str:
            text = f"pilot spread (sd of the paired differences) {sd:g} {unit}"
            if c.sizing(claim) > sd:
                text += f", sized on {c.sizing(claim):g} ({c.sizing_basis})"
            return text

        sizes = "; ".join(
            f"{claim}: {spread(claim, sd)} → "
            f"{confirmation_pairs(c.sizing(claim), margin, c.power, c.true_difference, one_sided)} pairs; at the "
            f"registered {pairs}, power "
            f"{pass_probability(pairs, c.sizing(claim), margin, c.true_difference, one_sided):.3f} at "
            f"{c.true_difference:g} and {pass_probability(pairs, c.sizing(claim), margin, margin / 2, one_sided):.3f} "
            f"at half the margin (which would need "
            f"{confirmation_pairs(c.sizing(claim), margin, c.power, margin / 2, one_sided)} pairs for power {c.power:g})"
            for claim, sd in c.pilot_sd.items()
        )
        read_against = f"+{margin:g} {unit} (the interval wholly below it)" if one_sided else f"±{margin:g} {unit}"
        read = f"; read on the same runs: {', '.join(c.also_read)}" if c.also_read else ""
        lines += [
            f"**{c.owner}**, registered {c.registered}: decides {', '.join(c.decides)}{read}.",
            "",
            f"- Pilot: seeds {c.pilot_seeds[0]}–{c.pilot_seeds[-1]} ({len(c.pilot_seeds)} pairs), committed build "
            f"`{c.pilot_build}/{c.pilot_record}`.",
            f"- Inputs: margin {read_against}, α = {c.alpha:g}, power {c.power:g} at a true difference of "
            f"{c.true_difference:g}. {sizes}.",
            f"- Confirmation: {pairs} pairs, fresh seeds {c.seeds[0]}–{c.seeds[-1]} (`{c.setting}`). "
            f"Test: {_clause(c.test)}.",
            "",
        ]
    return lines


def decision_text(decision: dict) -> str:
    """A registered design for another machine, the one that would decide the claim, in one item."""
    d, m, t, pilot = decision, decision["model"], decision["train"], decision["pilot"]
    last = d["first_seed"] + d["pairs"] - 1
    return (
        f"- What would decide it, registered {d['registered']} for the {d['runs_on'].upper()} study: {d['pairs']} pairs "
        f"(seeds {d['first_seed']}–{last}) at depth {m['depth']}, width {m['width']}, {t['steps']} steps, sized from "
        f"the pilot's spread alone ({pilot['pairs']} pairs of {pilot['build']}, sd {number_text(d['pilot_sd'])}) for "
        f"power {number_text(d['power'])} at a true difference of {number_text(d['true_difference'])}, α "
        f"{number_text(d['alpha'])}. Test: {_clause(d['test'])}."
    )


def family_lines(table: multiplicity.FamilyTable) -> list[str]:
    """The registered multiplicity rule, its basis, when it was adopted and what had been seen, and the family as this
    build's results read it."""
    family, alpha, m = table.family, table.family.alpha, table.family.size
    lines = [
        "(family-rule)=",
        "## One rule for the family",
        "",
        f"Registered {family.registered}: **Bonferroni's rule over the family's {m} registered readings, α = "
        f"{alpha:g} family-wise.** Each chapter reads its paired intervals at 95%; read one at a time, many such "
        "readings call some difference real by chance. The rule below says which readings form the family and what "
        "a verdict is when its reading does not survive.",
        "",
        f"- The family: {_clause(family.definition)}.",
        f"- Why this rule: {_clause(family.basis)}.",
        f"- A verdict whose reading does not survive: {_clause(family.not_surviving)}.",
        f"- What had been seen when it was adopted: {_clause(family.seen_at_adoption)}.",
        "",
        f"The family in this build. *Level*: the smallest two-sided level at which the reading's t-interval still "
        f"reads as its chapter read it at 95% (at most {alpha:g} exactly when it decides read alone). *Adjusted*: "
        f"{m} times the level (at most 1), over every registered reading, measured here or not. A reading survives "
        f"when its adjusted level is at most {alpha:g}. *Verdict*: the claim's verdict with the rule applied.",
        "",
        "| Claim | Verdict | Interval | Read against | Level | Adjusted | Under the rule |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in table.rows:
        lines.append(
            f"| {row.entry.claim} | {row.verdict or 'not judged here'} | `{row.entry.evidence}` | "
            f"{multiplicity.READING_TEXT[row.entry.reading]} | {multiplicity.level_text(row.level)} | "
            f"{multiplicity.level_text(row.adjusted)} | {multiplicity.under_the_rule(row, alpha)} |"
        )
    lines += ["", multiplicity.summary_sentence(table), ""]
    return lines


def _spread_text(value: float | None) -> str:
    return "—" if value is None else f"{value:.3g}"


def _margin_unit(design: Design, claim_id: str, margin: float | None) -> str:
    """The unit of the registered threshold the interval was read against (its value is the interval's margin)."""
    entry = design.claim(claim_id)
    for threshold in entry.thresholds.values():
        if margin is not None and isinstance(threshold.value, (int, float)) and abs(threshold.value - margin) < 1e-12:
            return threshold.unit
    return entry.unit


def resolution_lines(table: multiplicity.FamilyTable, design: Design) -> list[str]:
    """Per measured reading of the family: what its registered pairs resolve at the spread this build measured."""
    found = [r for r in (multiplicity.resolution(row) for row in table.rows) if r is not None]
    if not found:
        return []
    power = f"{multiplicity.POWER:.0%}"
    lines = [
        "(design-resolution)=",
        "### What each design can resolve",
        "",
        f"From the spread of each reading's paired differences in this build: the half-width of its 95% interval at "
        f"the registered pairs; the narrowest margin those pairs would decide as no difference with {power} "
        f"probability when there is none (inside ±margin; for a reading against +margin alone, wholly below it), and "
        f"the pairs the registered margin needs for that (normlab.study.sample_size, the confirmations' own power "
        f"rule). A design whose finest margin is wider than its registered one can only say *not testable here* about "
        f"a difference smaller than that, unless the difference lies far from the margin.",
        "",
        "| Claim | Interval | Unit | Pairs | Spread (sd) | 95% half-width | Margin | Finest margin | Pairs the margin needs |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for found_row in found:
        row, reading = found_row.row, found_row.row.reading
        needed = found_row.pairs_for_margin
        lines.append(
            f"| {row.entry.claim} | `{row.entry.evidence}` | {_margin_unit(design, row.entry.claim, reading.margin)} | "
            f"{reading.pairs} | "
            f"{_spread_text(reading.sd)} | {_spread_text(found_row.half_width)} | {_spread_text(reading.margin)} | "
            f"{_spread_text(found_row.finest_margin)} | "
            f"{'—' if found_row.finest_margin is None else (needed if needed is not None else 'more than 100,000')} |"
        )
    lines.append("")
    return lines


def looks_before_registration(design: Design, claim_id: str) -> list[str]:
    """What its registration entries say was seen of a claim before it was registered (its outcome, a trial run of
    its design), each with its date; none where every entry says it was registered before any look ("none: ...")."""
    return [
        f"{change['date']}: {change['look']}"
        for change in design.changes
        if change["claim"] == claim_id
        and change["field"] == "registration"
        and not str(change.get("look", "none")).lower().startswith("none")
    ]


def render_design(design: Design, claim_order: list[str], family: multiplicity.FamilyTable | None = None) -> str:
    """The design page; `family` (multiplicity.family_table on this build's results) adds the family's section."""
    lines = [
        "(registered-design)=",
        "# The registered design",
        "",
        "Every verdict in this book is judged against a threshold registered in `data/design.toml`, with its unit, "
        "its basis in that unit and its source. The chapters read their constants from that file, and the ledger "
        "refuses a verdict judged against a value it does not hold. *Pairs* are the paired seeds (or repeats, or "
        "text chunks) per profile; *answered by* names the builds that may answer the claim, in order: the first "
        "that measured it answers, and a verdict answered by a build its claim does not name is refused.",
        "",
        "## Claims and their thresholds",
        "",
    ]
    for claim_id in claim_order:
        entry = design.claim(claim_id)
        lines += [
            f"**{claim_id}** ({entry.chapter}): {_clause(entry.quantity)}, in {entry.unit}.",
            "",
            f"- Test: {_clause(entry.test)}.",
            f"- Pairs: {pairs_text(entry)}; answered by {answered_text(entry)}.",
        ]
        if entry.verdict_rules is not None:
            lines.append(f"- Verdict: {verdict_rules.rule_text(entry.verdict_rules)}")
        if entry.registered:
            lines.append(f"- Registered {entry.registered}, before its first run (its entry under *Registrations*).")
        for look in looks_before_registration(design, claim_id):
            lines.append(f"- **Seen before its registration:** {_clause(look)}.")
        if entry.trainer:
            lines.append(f"- Trainer: {TRAINER_TEXT[entry.trainer]}.")
        for name, number in entry.source_numbers.items():
            lines.append(
                f"- Source's number `{name}` = {shown_value(number['value'])} ({number['unit']}): {_clause(number['where'])}."
            )
        for threshold in entry.thresholds.values():
            if threshold.same_as:
                reason = f"the same as {threshold.same_as.replace('.', '’s ')}."
            else:
                reason = f"{_clause(threshold.basis)}. Source: {_clause(threshold.source)}."
            lines.append(f"- `{threshold.name}` = {shown_value(threshold.value)} ({threshold.unit}): {reason}")
        if entry.decision:
            lines.append(decision_text(entry.decision))
        lines.append("")
    lines += confirmation_lines(design)
    if family is not None:
        lines += family_lines(family)
        lines += resolution_lines(family, design)
    registrations = [change for change in design.changes if change["field"] == "registration"]
    if registrations:
        lines += [
            "## Registrations",
            "",
            "The claims added after the design was first assembled, each registered before its first run; the ledger "
            "refuses a results file that ran one earlier.",
            "",
        ]
        lines += [
            f"- **{change['date']}, {change['claim']}:** {_clause(change['new'])}. Why: {_clause(change['why'])}. "
            f"Looked at before: {_clause(change['look'])}."
            for change in registrations
        ]
        lines.append("")
    lines += [
        "## Changes after results were seen",
        "",
        "Each change made to the design after a look at the data, with the look that prompted it. Values not listed "
        "here were fixed in the chapters' code before their first run.",
        "",
    ]
    for change in design.changes:
        if change["field"] == "registration":
            continue
        lines.append(
            f"- **{change['date']}, {change['claim']}, {change['field']}:** {change['old']} → {change['new']}. "
            f"Why: {_clause(change['why'])}. Prompted by: {_clause(change['look'])}."
        )
    return "\n".join(lines) + "\n"
