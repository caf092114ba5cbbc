"""One rule for the family of verdicts read from paired intervals: Bonferroni's over every registered reading.

Each chapter reads its paired intervals at 95% (`normlab.analysis.shared.paired`). Read one at a time, each may call
a difference real by chance 5% of the time; over a family of m such readings the chance that at least one does is
up to 1 − 0.95^m. Bonferroni's rule (a reading survives when m times its level is at most α) keeps that family-wise
error at most α for any dependence between the readings.

The family is a rule, not a list: every reading a claim's registered verdict is read from, declared on the claim in
data/design.toml (`readings`), including the readings of claims registered after the rule; m counts them all,
measured in a build or not. The rule was adopted on 2026-12-07, after the study's builds had been read (the design
page says which); it replaced Holm's step-down, registered on 2026-12-05 after the same kind of look, which only
added caveats because its adjusted levels needed every chapter's results before any verdict could be decided.
`judge` applies it where a verdict is recorded (`Results.record`): a reading that decides alone but does not survive
does not decide its claim.

A reading's level is the smallest two-sided level at which its Student-t interval still reads as the chapter read it
at 95% (interval inversion): the interval d̄ ± t_{1−α/2}·se over n pairs

- lies wholly inside ±margin ("equivalent") while t_{1−α/2}·se < margin − |d̄|: level 2·P(T_{n−1} > (margin − |d̄|)/se);
- lies wholly beyond one side of the margin ("different") while t·se < |d̄| − margin: level 2·P(T > (|d̄| − margin)/se);
- lies wholly above or wholly below +margin ("plus_margin": V1's non-inferiority, V3's and V4's rules) while
  t·se < |d̄ − margin|: level 2·P(T > |d̄ − margin|/se);
- excludes zero while t·se < |d̄|: level 2·P(T > |d̄|/se).

At 95% the reading holds exactly when its level is at most 0.05. An interval the chapter found inconclusive concluded
nothing: its level is the smaller of the two conclusions', above 0.05, and it stays in the family.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import tomllib

EQUIVALENT, DIFFERENT, INCONCLUSIVE = "equivalent", "different", "inconclusive"
# against ±margin (equivalent or different), against +margin alone (wholly above or below it), or against 0
READINGS = ("margin", "plus_margin", "zero")


def _continued_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularised incomplete beta function (modified Lentz's method)."""
    tiny, eps = 1e-300, 1e-15
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    value = d
    for m in range(1, 500):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            value *= c * d
        if abs(c * d - 1.0) < eps:
            break
    return value


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularised incomplete beta function."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _continued_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _continued_fraction(b, a, 1.0 - x) / b


def t_survival(t: float, df: float) -> float:
    """P(T > t) for Student's t with `df` degrees of freedom."""
    if not df > 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df!r}")
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    tail = 0.5 * _incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return tail if t >= 0 else 1.0 - tail


def interval_level(mean: float, standard_error: float, pairs: int, reading: str, margin: float | None = None) -> float:
    """The smallest two-sided level at which the t-interval of `pairs` paired differences (mean `mean`, standard
    error `standard_error`) still reads as it does at 95% (see the module's docstring)."""
    if reading not in READINGS:
        raise ValueError(f"reading must be one of {READINGS}, got {reading!r}")
    if isinstance(pairs, bool) or not isinstance(pairs, int) or pairs < 2:
        raise ValueError(f"pairs must be an int >= 2 (a spread needs two), got {pairs!r}")
    if not (math.isfinite(mean) and math.isfinite(standard_error) and standard_error >= 0):
        raise ValueError(f"mean and standard error must be finite (se >= 0), got {mean!r} and {standard_error!r}")
    if reading != "zero" and not (margin is not None and math.isfinite(margin) and margin > 0):
        raise ValueError(f"a reading against the margin needs a positive finite margin, got {margin!r}")
    distance = {
        "zero": abs(mean),
        "margin": abs(abs(mean) - (margin or 0.0)),
        "plus_margin": abs(mean - (margin or 0.0)),
    }[reading]
    if standard_error == 0:
        return 0.0 if distance > 0 else 1.0
    return min(1.0, 2.0 * t_survival(distance / standard_error, pairs - 1))


@dataclass(frozen=True)
class Reading:
    """One registered reading of the family: a claim's deciding interval, where it is in the claim's evidence, and
    its level."""

    claim_id: str
    evidence: str  # the path of the interval in the claim's evidence, keys joined by "/"
    reading: str
    level: float
    outcome: str  # equivalent, different, inconclusive (margin readings) or excludes zero / includes zero
    pairs: int = 0
    sd: float = math.nan  # spread of the paired differences, in the claim's unit
    margin: float | None = None


def reading_of(claim_id: str, evidence_path: str, interval: dict, reading: str) -> Reading:
    """A paired interval as `normlab.analysis.shared.paired.paired_difference` records it, read as registered."""
    missing = [key for key in ("pairs", "mean_difference", "sd_of_differences") if interval.get(key) is None]
    if reading != "zero" and interval.get("margin") is None:
        missing.append("margin")
    if missing:
        raise ValueError(
            f"{claim_id}: the interval at {evidence_path!r} records no {', '.join(missing)}; the family rule needs "
            "them to compute its level (record the interval with paired_difference)"
        )
    pairs = int(interval["pairs"])
    se = float(interval["sd_of_differences"]) / math.sqrt(pairs)
    level = interval_level(float(interval["mean_difference"]), se, pairs, reading, interval.get("margin"))
    if reading == "zero":
        outcome = "excludes zero" if interval["ci_low"] > 0 or interval["ci_high"] < 0 else "includes zero"
    elif reading == "plus_margin":
        margin = interval["margin"]
        outcome = (
            "above +margin"
            if interval["ci_low"] > margin
            else "below +margin"
            if interval["ci_high"] < margin
            else ("spans +margin")
        )
    else:
        outcome = interval.get("outcome") or INCONCLUSIVE
    return Reading(
        claim_id,
        evidence_path,
        reading,
        level,
        outcome,
        pairs,
        float(interval["sd_of_differences"]),
        interval.get("margin"),
    )


def bonferroni(level: float, m: int) -> float:
    """Bonferroni's adjusted level of one reading in a family of `m`: min(1, m·level). A reading survives the
    family's rule when it is at most α."""
    if not 0.0 <= level <= 1.0:
        raise ValueError(f"a level must lie in [0, 1], got {level!r}")
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        raise ValueError(f"the family's size must be a positive whole number of readings, got {m!r}")
    return min(1.0, m * level)


def evidence_at(evidence: dict, path: str):
    """The value at `path` (keys joined by "/") in a claim's evidence, or a KeyError naming the missing key."""
    node = evidence
    for key in path.split("/"):
        if not isinstance(node, dict) or key not in node:
            raise KeyError(f"the evidence has no {key!r} on the way to {path!r}")
        node = node[key]
    return node


# --- The registered family (data/design.toml's [multiplicity] table) and its table for one build -------------------

RULES = ("bonferroni",)
DECIDED = ("holds", "holds with caveats", "does not hold")  # the verdicts a reading can have decided
READING_TEXT = {"margin": "inside or beyond ±margin", "plus_margin": "above or below +margin", "zero": "away from zero"}
# Every caveat the rule adds starts with one of these, so that a page can tell it from a chapter's own caveats.
NOT_SURVIVING, NOT_CHECKED = "does not survive the family's rule", "cannot be checked against the family's rule"


# The first words of a verdict's summary where a reading that did not survive left it undecided.
UNDECIDED = "Not decided under the family's rule:"


def is_family_caveat(caveat: str) -> bool:
    return str(caveat).startswith((NOT_SURVIVING, NOT_CHECKED))


MEASURED, NOT_MEASURED, NO_SPREAD = "measured", "not measured here", "spread not recorded"


class FamilyError(ValueError):
    """A [multiplicity] table the ledger cannot apply; the message names the claim or field and the fix."""


@dataclass(frozen=True)
class Entry:
    """One registered reading: which claim's verdict reads it, where its interval is in the claim's evidence, how."""

    claim: str
    evidence: str
    reading: str
    bears_on: tuple[str, ...] = DECIDED  # the verdicts it can decide; a caveat-only reading: holds, with caveats


@dataclass(frozen=True)
class Family:
    rule: str
    alpha: float
    registered: str
    definition: str
    basis: str
    not_surviving: str
    seen_at_adoption: str
    entries: tuple[Entry, ...]

    @property
    def size(self) -> int:
        """m: every registered reading, measured in a build or not."""
        return len(self.entries)

    @property
    def claims(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(entry.claim for entry in self.entries))

    def of(self, claim_id: str) -> list[Entry]:
        return [entry for entry in self.entries if entry.claim == claim_id]


def _design_path() -> Path:
    from normlab.study import paths

    return paths.ROOT / "data" / "design.toml"


def parse(path: Path | None = None, claim_ids: set[str] | None = None) -> Family | None:
    """The family rule of the design file: its [multiplicity] table and every claim's `readings`, checked; None where
    the file registers no rule.

    The family is every reading declared on a claim, in the file's order. Refused, naming the claim or the field: a
    family listed in [multiplicity] (the family is a rule over the claims' readings, not a list), a claim not in
    data/claims.md, a reading other than READINGS, a reading without its evidence path or registered twice, a rule
    other than Bonferroni's, an α outside (0, 1), a missing text, readings without a rule."""
    path = Path(path or _design_path())
    document = tomllib.loads(path.read_text(encoding="utf-8"))
    table = document.get("multiplicity")
    claims = document.get("claims") or {}
    declared = [claim for claim, entry in claims.items() if isinstance(entry, dict) and entry.get("readings")]
    if table is None:
        if declared:
            raise FamilyError(
                f"{path}: claim(s) {', '.join(declared)} declare readings but no [multiplicity] table registers the "
                "rule that reads them"
            )
        return None
    if claim_ids is None:
        from normlab.study.claims import parse_claims

        claim_ids = {c.id for c in parse_claims()}
    where = f"{path}: [multiplicity]"
    if "family" in table:
        first = (table["family"] or [{}])[0]
        raise FamilyError(
            f"{where} lists a family (first entry: {first!r}); the family is a rule, every reading declared on a "
            "claim: move each entry to its claim as readings = [{ evidence = ..., reading = ... }]"
        )
    if table.get("rule") not in RULES:
        raise FamilyError(f"{where}: rule must be one of {RULES}, got {table.get('rule')!r}")
    alpha = table.get("alpha")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        raise FamilyError(f"{where}: alpha must lie strictly between 0 and 1, got {alpha!r}")
    for key in ("registered", "family_definition", "basis", "not_surviving", "seen_at_adoption"):
        if not isinstance(table.get(key), str) or not table[key].strip():
            raise FamilyError(f"{where}: {key} must be a text that says it (the design page shows it)")
    entries, seen = [], set()
    for claim in declared:
        if claim not in claim_ids:
            raise FamilyError(f"{path}: claim {claim!r} declares readings but is not in data/claims.md")
        for index, raw in enumerate(claims[claim]["readings"]):
            raw = raw if isinstance(raw, dict) else {}
            if raw.get("reading") not in READINGS:
                raise FamilyError(
                    f"{path}: claim {claim}'s reading of {raw.get('evidence')!r} is {raw.get('reading')!r}; it must "
                    f"be one of {', '.join(READINGS)}"
                )
            if not isinstance(raw.get("evidence"), str) or not raw["evidence"].strip():
                raise FamilyError(f"{path}: claim {claim}'s reading {index + 1} names no evidence path")
            bears_on = tuple(raw.get("bears_on", DECIDED))
            if not bears_on or set(bears_on) - set(DECIDED):
                raise FamilyError(
                    f"{path}: claim {claim}'s reading of {raw['evidence']!r} bears on {list(bears_on)}; it must name "
                    f"some of {', '.join(DECIDED)}"
                )
            entry = Entry(claim, raw["evidence"], raw["reading"], bears_on)
            if (claim, entry.evidence) in seen:
                raise FamilyError(f"{path}: claim {claim}'s reading of {entry.evidence!r} is registered twice")
            seen.add((claim, entry.evidence))
            entries.append(entry)
    if not entries:
        raise FamilyError(f"{where}: no claim declares a reading, so the rule has no family")
    return Family(
        table["rule"],
        float(alpha),
        table["registered"],
        table["family_definition"],
        table["basis"],
        table["not_surviving"],
        table["seen_at_adoption"],
        tuple(entries),
    )


@dataclass(frozen=True)
class Row:
    """One registered reading in one build: measured (with its level and its adjusted level over the family), not
    measured here, or recorded without the spread its level needs."""

    entry: Entry
    status: str
    verdict: str | None = None  # the claim's recorded verdict, where the build judged it
    level: float | None = None
    adjusted: float | None = None
    outcome: str | None = None
    reading: Reading | None = None  # where measured: its pairs, spread and margin
    undecided_by_rule: bool = False  # its claim's verdict is not testable here because a reading did not survive

    def decides(self, alpha: float) -> bool:
        """The reading decides read alone at 95% (its level at most α)."""
        return self.level is not None and self.level <= alpha

    def survives(self, alpha: float) -> bool:
        return self.adjusted is not None and self.adjusted <= alpha


POWER = 0.9  # the power at which the family's sizes are stated, as the registered confirmations use


@dataclass(frozen=True)
class Resolution:
    """What one measured reading's design can resolve, from the spread this build measured: the 95% interval's
    half-width at the registered pairs, and, for a reading against a margin, the narrowest margin those pairs decide
    as "no difference" (against ±margin: inside it; against +margin alone: wholly below it) with probability POWER at
    a true difference of 0, and the pairs the registered margin needs for that."""

    row: Row
    half_width: float
    finest_margin: float | None
    pairs_for_margin: int | None  # None past sample_size.MOST_PAIRS, or where the reading is against zero


def resolution(row: Row) -> Resolution | None:
    """None where the reading was not measured with its spread."""
    from normlab.study import sample_size

    reading = row.reading
    if reading is None or not (reading.pairs >= 2 and math.isfinite(reading.sd) and reading.sd > 0):
        return None
    half_width = sample_size.t975(reading.pairs - 1) * reading.sd / math.sqrt(reading.pairs)
    if reading.reading not in ("margin", "plus_margin") or not reading.margin:
        return Resolution(row, half_width, None, None)
    one_sided = reading.reading == "plus_margin"
    try:
        needed = sample_size.confirmation_pairs(reading.sd, reading.margin, POWER, one_sided=one_sided)
    except ValueError:  # beyond MOST_PAIRS
        needed = None
    finest = sample_size.smallest_margin(reading.pairs, reading.sd, POWER, one_sided=one_sided)
    return Resolution(row, half_width, finest, needed)


def level_text(level: float | None) -> str:
    """A level as the pages write it: 0.003, <0.001, or — where none was computed."""
    if level is None:
        return "—"
    return "<0.001" if level < 0.001 else f"{level:.3f}"


@dataclass(frozen=True)
class FamilyTable:
    family: Family
    rows: tuple[Row, ...]

    @property
    def measured(self) -> list[Row]:
        """The readings this build made: measured, or recorded without their spread."""
        return [row for row in self.rows if row.status != NOT_MEASURED]

    def decided(self) -> list[Row]:
        return [row for row in self.rows if row.decides(self.family.alpha)]

    def surviving(self) -> list[Row]:
        return [row for row in self.rows if row.survives(self.family.alpha)]

    def lost(self) -> list[Row]:
        """Readings that decide at 95% alone but not under the family's rule."""
        return [row for row in self.decided() if not row.survives(self.family.alpha)]


def read_row(entry: Entry, evidence: dict, verdict: str | None, m: int) -> Row:
    """One registered reading of one claim's evidence: measured (its level and adjusted level in a family of `m`),
    recorded without the spread its level needs, or not measured here (its interval absent: the claim not run at
    this profile, a run diverged)."""
    try:
        interval = evidence_at(evidence or {}, entry.evidence)
    except KeyError:
        interval = None
    if interval is None:
        return Row(entry, NOT_MEASURED, verdict)
    try:
        if not isinstance(interval, dict):
            raise ValueError("not an interval record")
        reading = reading_of(entry.claim, entry.evidence, interval, entry.reading)
    except ValueError:
        return Row(entry, NO_SPREAD, verdict)
    return Row(entry, MEASURED, verdict, reading.level, bonferroni(reading.level, m), reading.outcome, reading)


@dataclass(frozen=True)
class Judged:
    verdict: str
    summary: str
    caveats: tuple[str, ...]


def judge(claim_id: str, verdict: str, summary: str, evidence: dict, family: Family) -> Judged:
    """The family's rule on one verdict as it is recorded (the registered `not_surviving`): a reading that decides at
    95% alone but not over the family does not decide its claim. Where it could decide any verdict, the verdict is
    not testable here, its first sentence naming the reading; where it only chooses between holds and holds with
    caveats, a 'holds' becomes 'holds with caveats'. A reading recorded without its spread gives a caveat."""
    alpha, m = family.alpha, family.size
    lead, caveats, result = None, [], verdict
    for row in (read_row(entry, evidence, verdict, m) for entry in family.of(claim_id)):
        if verdict not in row.entry.bears_on:
            continue
        path = f"`{row.entry.evidence}`"
        if row.status == NO_SPREAD:
            caveats.append(f"{NOT_CHECKED}: the chapter records {path} without its pairs or spread")
        elif row.decides(alpha) and not row.survives(alpha):
            text = (
                f"{path} decides at 95% alone (level {level_text(row.level)}) but not over the family's {m} "
                f"registered readings (adjusted level {level_text(row.adjusted)}, above {alpha:g})"
            )
            if row.entry.bears_on == DECIDED:
                lead = lead or text
                continue
            caveats.append(f"{NOT_SURVIVING}: {text}")
            result = "holds with caveats" if result == "holds" else result
    if lead is not None:
        # the chapter's own sentences still read the interval at 95% alone ("worse", "the answer"): say so once
        summary = f"{UNDECIDED} {lead}. The rest of this summary reads it at 95% alone. {summary}"
        return Judged("not testable here", summary, tuple(caveats))
    return Judged(result, summary, tuple(caveats))


def owner_records(runs: list[dict]) -> dict[str, dict]:
    """Each claim's verdict record (the owner's: a record with a verdict) in the build's results."""
    out = {}
    for run in runs:
        for record in run.get("claims", ()):
            if record.get("verdict") is not None:
                out[record["id"]] = record
    return out


def family_table(runs: list[dict], registered: Family) -> FamilyTable:
    """The registered family read off this build's results, for the pages: each reading's level, its adjusted level
    over the family's m registered readings, and the verdict recorded for its claim (the rule already applied:
    `judge`, at `Results.record`)."""
    records = owner_records(runs)
    rows = []
    for entry in registered.entries:
        record = records.get(entry.claim) or {}
        row = read_row(entry, record.get("evidence") or {}, record.get("verdict"), registered.size)
        undecided = str(record.get("summary", "")).startswith(UNDECIDED) and row.decides(registered.alpha)
        rows.append(replace(row, undecided_by_rule=undecided and not row.survives(registered.alpha)))
    return FamilyTable(registered, tuple(rows))


def _listed(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def under_the_rule(row: Row, alpha: float) -> str:
    """What the rule made of one reading, for the design page's table."""
    if row.status == NOT_MEASURED:
        return "not measured here"
    if row.status == NO_SPREAD:
        return "spread not recorded (cannot be checked)"
    if row.survives(alpha):
        return "survives"
    return "does not survive" if row.decides(alpha) else "undecided at 95%"


def summary_sentence(table: FamilyTable, where: str = "the family's rule") -> str:
    """The opening page's count: how many readings decide alone, how many survive, which verdicts the rule left
    undecided or caveated."""
    alpha, decided, lost = table.family.alpha, table.decided(), table.lost()
    surviving = [row for row in decided if row.survives(alpha)]
    text = (
        f"Of the family's {table.family.size} registered readings of paired intervals, this build measured "
        f"{len(table.measured)}; {len(decided)} decide at 95% read alone, and {len(surviving) or 'none'} of those "
        f"{'survives' if len(surviving) == 1 else 'survive'} {where}."
    )
    undecided = sorted({row.entry.claim for row in lost if row.undecided_by_rule})
    # a reading that only chooses between holds and holds with caveats gives a caveat where its claim's verdict is one
    # of those two; a claim not testable here for another reason carries none
    caveated = sorted(
        {row.entry.claim for row in lost if row.verdict in row.entry.bears_on and row.verdict != "not testable here"}
        - set(undecided)
    )
    parts = []
    if undecided:
        parts.append(f"{_listed(undecided)} {'is' if len(undecided) == 1 else 'are'} not testable here because of it")
    if caveated:
        parts.append(f"{_listed(caveated)} carr{'ies' if len(caveated) == 1 else 'y'} a caveat for it")
    return text + (f" {'; '.join(parts)}." if parts else " It changes no verdict in this build.")
