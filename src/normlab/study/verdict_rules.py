"""A claim's verdict read from its registered readings by the ordered rules its design declares, and the rule's text
rendered from the same declaration (issue 56: every claim's rule written once, and applied by one function).

In `data/design.toml` a claim declares its `readings` (each a paired interval of its evidence, read against ±margin,
+margin or zero: `normlab.study.multiplicity`) and its `verdict_rules`, an ordered list of
`{ verdict = "...", when = { <evidence> = "<outcome>", ... } }`. An outcome is where the interval lies against the
reading's line or lines: "below", "above", "inside" (between −margin and +margin; ±margin readings only), "across"
(it reaches a line), or "missing" (no interval: a run it needs diverged). The first rule whose every outcome matches decides;
"not testable here" when none does, or when a reading named in `verdict_needs` (the first reading where not given;
`[]` for none) has no interval (a run diverged).
"""

from __future__ import annotations

from dataclasses import dataclass

BELOW, ABOVE, ACROSS, INSIDE = "below", "above", "across", "inside"


def side_of(paired: dict, line: float) -> str:
    """Where a paired interval lies against one line (a margin, or zero): BELOW when its high end is under the line,
    ABOVE when its low end is over it, ACROSS when the line lies inside it, ends included. Every one-sided reading of
    an interval (no worse than +margin, wholly above a threshold, against zero) is this."""
    if paired["ci_high"] < line:
        return BELOW
    if paired["ci_low"] > line:
        return ABOVE
    return ACROSS


def against_margin(paired: dict, margin: float) -> str:
    """A paired interval against ±margin: BELOW when it lies wholly below −margin, ABOVE wholly above +margin, INSIDE
    wholly between them, ACROSS otherwise (it reaches a margin line, ends included)."""
    lower, upper = side_of(paired, -margin), side_of(paired, margin)
    if lower == BELOW:
        return BELOW
    if upper == ABOVE:
        return ABOVE
    return INSIDE if (lower, upper) == (ABOVE, BELOW) else ACROSS


NOT_TESTABLE = "not testable here"
RULE_VERDICTS = ("holds", "holds with caveats", "does not hold", NOT_TESTABLE)
MISSING = "missing"  # a reading with no interval: a run it needs diverged
OUTCOMES = {
    "margin": (BELOW, ABOVE, INSIDE, ACROSS, MISSING),
    "plus_margin": (BELOW, ABOVE, ACROSS, MISSING),
    "zero": (BELOW, ABOVE, ACROSS, MISSING),
}
LINE_TEXT = {"margin": ("−margin", "+margin"), "plus_margin": ("+margin",), "zero": ("zero",)}


class RuleError(ValueError):
    """A claim's verdict rules that cannot be applied as registered."""


@dataclass(frozen=True)
class Rule:
    verdict: str
    when: tuple[tuple[str, str], ...]  # (evidence key, outcome), every one needed


@dataclass(frozen=True)
class VerdictRules:
    readings: dict[str, str]  # evidence key -> reading kind ("margin", "plus_margin", "zero"), in the design's order
    rules: tuple[Rule, ...]
    needs: tuple[str, ...]  # the readings without whose interval the claim is not testable here


def parse(claim_id: str, table: dict, where: str) -> VerdictRules | None:
    """The claim's `verdict_rules` checked against its `readings`; None where it declares none. Refused, naming the
    claim and the field: a rule without a verdict of RULE_VERDICTS, a condition on an evidence key the claim does not
    read, an outcome its reading cannot have, a rule with no condition, a need that is not a reading."""
    raw_rules = table.get("verdict_rules")
    if raw_rules is None:
        if "verdict_needs" in table:
            raise RuleError(f"{where}: verdict_needs without verdict_rules; declare the rules or drop it")
        return None
    readings = {r.get("evidence"): r.get("reading") for r in table.get("readings") or () if isinstance(r, dict)}
    if not readings:
        raise RuleError(
            f"{where} declares verdict_rules but no readings; add readings = [{{ evidence = ..., reading = ... }}]"
        )
    if not isinstance(raw_rules, list) or not raw_rules:
        raise RuleError(f"{where}: verdict_rules must be a non-empty list of {{ verdict = ..., when = {{...}} }}")
    rules = []
    for index, raw in enumerate(raw_rules, start=1):
        raw = raw if isinstance(raw, dict) else {}
        verdict, when = raw.get("verdict"), raw.get("when")
        if verdict not in RULE_VERDICTS:
            raise RuleError(f"{where}: verdict rule {index} gives verdict {verdict!r}; one of {RULE_VERDICTS}")
        if not isinstance(when, dict) or not when:
            raise RuleError(
                f"{where}: verdict rule {index} ({verdict}) has no condition; give when = {{ <evidence> = <outcome> }}"
            )
        for key, outcome in when.items():
            if key not in readings:
                raise RuleError(
                    f"{where}: verdict rule {index} ({verdict}) reads {key!r}, which is not among the claim's "
                    f"readings ({', '.join(readings)}); declare it in readings or correct the key"
                )
            if outcome not in OUTCOMES.get(readings[key], ()):
                raise RuleError(
                    f"{where}: verdict rule {index} ({verdict}) asks {key!r} to be {outcome!r}; a {readings[key]} "
                    f"reading is one of {', '.join(OUTCOMES.get(readings[key], ()))}"
                )
        rules.append(Rule(verdict, tuple(when.items())))
    raw_needs = table.get("verdict_needs")
    needs = (next(iter(readings)),) if raw_needs is None else tuple(raw_needs)
    unknown = [key for key in needs if key not in readings]
    if unknown:
        raise RuleError(
            f"{where}: verdict_needs names {unknown}, not among the claim's readings ({', '.join(readings)})"
        )
    return VerdictRules(readings, tuple(rules), needs)


def outcome(reading: str, interval: dict | None) -> str | None:
    """Where a paired interval (with its `margin`) lies for a reading of this kind; None where there is none."""
    if interval is None:
        return None
    if reading == "margin":
        return against_margin(interval, interval["margin"])
    return side_of(interval, 0.0 if reading == "zero" else interval["margin"])


def outcomes(claim_id: str, declared: VerdictRules, evidence: dict) -> dict[str, str | None]:
    """Each registered reading's outcome on the measured evidence. Refused, naming the claim and the key: a reading
    whose key the analysis did not measure (absent from the evidence; a measured None is a run that diverged)."""
    missing = [key for key in declared.readings if key not in evidence]
    if missing:
        raise RuleError(
            f"claim {claim_id} reads {missing} (data/design.toml, readings), but its analysis measured no such "
            f"evidence (it has: {', '.join(sorted(evidence))}); measure it under that key or correct the reading"
        )
    return {key: outcome(kind, evidence[key]) for key, kind in declared.readings.items()}


def decide(declared: VerdictRules, found: dict[str, str | None]) -> str:
    """The first rule whose every condition the outcomes meet; not testable here where a needed reading has no
    interval or no rule applies."""
    if any(found.get(key) is None for key in declared.needs):
        return NOT_TESTABLE
    for rule in declared.rules:
        if all((found.get(key) or MISSING) == wanted for key, wanted in rule.when):
            return rule.verdict
    return NOT_TESTABLE


def _name(key: str) -> str:
    """An evidence key as the rule's text names it: 'derf_minus_rms' -> 'derf − rms'."""
    return key.replace("_minus_", " − ").replace("_", " ")


def _condition_text(declared: VerdictRules, key: str, wanted: str) -> str:
    lines = LINE_TEXT[declared.readings[key]]
    name = _name(key)
    if wanted == INSIDE:
        return f"{name} wholly between {lines[0]} and {lines[1]}"
    if wanted == ACROSS:
        return f"{name} reaching {' or '.join(lines)}"
    if wanted == MISSING:
        return f"no interval of {name} (a run diverged)"
    line = lines[0] if wanted == BELOW else lines[-1]
    return f"{name} wholly {wanted} {line}"


def rule_text(declared: VerdictRules) -> str:
    """The verdict rules as one sentence, in their order: '...: does not hold when derf − rms wholly above +margin;
    holds when ...; otherwise, or without an interval of derf − rms (a run diverged), not testable here.'"""
    parts = [
        f"{rule.verdict} when " + " and ".join(_condition_text(declared, key, wanted) for key, wanted in rule.when)
        for rule in declared.rules
    ]
    needs = " and ".join(map(_name, declared.needs))
    otherwise = f"otherwise, or without an interval of {needs} (a run diverged)" if needs else "otherwise"
    return (
        "Decided by the first rule that applies (each interval a paired 95% t-interval): "
        + "; ".join(parts)
        + f"; {otherwise}, not testable here."
    )
