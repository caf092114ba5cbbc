"""One rule for the family of verdicts read from paired intervals: Holm's step-down over their levels.

Each chapter reads its paired intervals at 95% (`normlab.analysis.shared.paired`). Read one at a time, each may call
a difference real by chance 5% of the time; over a family of m such readings the chance that at least one does is
up to 1 − 0.95^m. Holm's step-down procedure (Holm 1979) keeps that family-wise error at most α for any dependence
between the readings, and rejects at least what Bonferroni rejects; a false-discovery-rate rule would allow a share
of the family's findings to be false, which a ledger of verdicts read one by one should not.

A reading's level is the smallest two-sided level at which its Student-t interval still reads as the chapter read it
at 95% (interval inversion): the interval d̄ ± t_{1−α/2}·se over n pairs

- lies wholly inside ±margin ("equivalent") while t_{1−α/2}·se < margin − |d̄|: level 2·P(T_{n−1} > (margin − |d̄|)/se);
- lies wholly beyond one side of the margin ("different") while t·se < |d̄| − margin: level 2·P(T > (|d̄| − margin)/se);
- lies wholly above or wholly below +margin ("plus_margin": V1's non-inferiority, V3's and V4's rules) while
  t·se < |d̄ − margin|: level 2·P(T > |d̄ − margin|/se);
- excludes zero while t·se < |d̄|: level 2·P(T > |d̄|/se).

At 95% the reading holds exactly when its level is at most 0.05, so the levels order the family as the chapters'
intervals do. An interval the chapter found inconclusive concluded nothing: its level is the smaller of the two
conclusions', above 0.05, and it stays in the family (the family is every registered reading, fixed before the runs,
not the ones that came out significant).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
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


def holm(levels: dict[str, float], alpha: float) -> dict[str, float]:
    """Holm's adjusted levels: a reading survives the family's rule when its adjusted level is at most `alpha`.

    With the m levels in ascending order p(1) <= ... <= p(m), the i-th adjusted level is the running maximum of
    min(1, (m − j + 1)·p(j)) over j <= i; ties keep their order, which does not change any adjusted level."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie strictly between 0 and 1, got {alpha!r}")
    bad = {name: level for name, level in levels.items() if not (0.0 <= level <= 1.0)}
    if bad:
        raise ValueError(f"levels must lie in [0, 1]; got {bad}")
    ordered = sorted(levels, key=levels.get)
    m, running, adjusted = len(ordered), 0.0, {}
    for rank, name in enumerate(ordered):
        running = max(running, min(1.0, (m - rank) * levels[name]))
        adjusted[name] = running
    return adjusted


def evidence_at(evidence: dict, path: str):
    """The value at `path` (keys joined by "/") in a claim's evidence, or a KeyError naming the missing key."""
    node = evidence
    for key in path.split("/"):
        if not isinstance(node, dict) or key not in node:
            raise KeyError(f"the evidence has no {key!r} on the way to {path!r}")
        node = node[key]
    return node


# --- The registered family (data/design.toml's [multiplicity] table) and its table for one build -------------------

RULES = ("holm",)
DECIDED = ("holds", "holds with caveats", "does not hold")  # the verdicts a reading can have decided
READING_TEXT = {"margin": "inside or beyond ±margin", "plus_margin": "above or below +margin", "zero": "away from zero"}
# Every caveat the rule adds starts with one of these, so that a page can tell it from a chapter's own caveats.
NOT_SURVIVING, NOT_CHECKED = "does not survive Holm's rule", "cannot be checked against Holm's rule"


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
    entries: tuple[Entry, ...]


def _design_path() -> Path:
    from normlab.study import paths

    return paths.ROOT / "data" / "design.toml"


def parse(path: Path | None = None, claim_ids: set[str] | None = None) -> Family | None:
    """The [multiplicity] table of the design file, checked; None where the file registers none.

    Refused, naming the claim or the field: an unknown claim, a reading other than READINGS, an entry without its
    evidence path, one registered twice, a rule other than Holm's, an α outside (0, 1), a missing text."""
    path = Path(path or _design_path())
    document = tomllib.loads(path.read_text(encoding="utf-8"))
    table = document.get("multiplicity")
    if table is None:
        return None
    if claim_ids is None:
        from normlab.study.claims import parse_claims

        claim_ids = {c.id for c in parse_claims()}
    where = f"{path}: [multiplicity]"
    if table.get("rule") not in RULES:
        raise FamilyError(f"{where}: rule must be one of {RULES}, got {table.get('rule')!r}")
    alpha = table.get("alpha")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        raise FamilyError(f"{where}: alpha must lie strictly between 0 and 1, got {alpha!r}")
    for key in ("registered", "family_definition", "basis", "not_surviving"):
        if not isinstance(table.get(key), str) or not table[key].strip():
            raise FamilyError(f"{where}: {key} must be a text that says it (the design page shows it)")
    entries, seen = [], set()
    for index, raw in enumerate(table.get("family") or []):
        claim = raw.get("claim") if isinstance(raw, dict) else None
        if claim not in claim_ids:
            raise FamilyError(f"{where}: family entry {index + 1} names unknown claim {claim!r} (see data/claims.md)")
        if raw.get("reading") not in READINGS:
            raise FamilyError(
                f"{where}: {claim}'s reading of {raw.get('evidence')!r} is {raw.get('reading')!r}; it must be one of "
                f"{', '.join(READINGS)}"
            )
        if not isinstance(raw.get("evidence"), str) or not raw["evidence"].strip():
            raise FamilyError(f"{where}: {claim}'s family entry {index + 1} names no evidence path")
        bears_on = tuple(raw.get("bears_on", DECIDED))
        if not bears_on or set(bears_on) - set(DECIDED):
            raise FamilyError(
                f"{where}: {claim}'s reading of {raw['evidence']!r} bears on {list(bears_on)}; it must name some of "
                f"{', '.join(DECIDED)}"
            )
        entry = Entry(claim, raw["evidence"], raw["reading"], bears_on)
        if (claim, entry.evidence) in seen:
            raise FamilyError(f"{where}: {claim}'s reading of {entry.evidence!r} is registered twice")
        seen.add((claim, entry.evidence))
        entries.append(entry)
    if not entries:
        raise FamilyError(f"{where}: the family lists no reading")
    return Family(
        table["rule"],
        float(alpha),
        table["registered"],
        table["family_definition"],
        table["basis"],
        table["not_surviving"],
        tuple(entries),
    )


@dataclass(frozen=True)
class Row:
    """One registered reading in one build: measured (with its level and Holm's adjusted level), not measured here,
    or recorded without the spread its level needs (counted at level 1)."""

    entry: Entry
    status: str
    verdict: str | None = None  # the claim's recorded verdict, where the build judged it
    level: float | None = None
    adjusted: float | None = None
    outcome: str | None = None
    reading: Reading | None = None  # where measured: its pairs, spread and margin

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
    def counted(self) -> list[Row]:
        """The readings this build made: measured, or recorded without their spread (counted at level 1)."""
        return [row for row in self.rows if row.status != NOT_MEASURED]

    def decided(self) -> list[Row]:
        return [row for row in self.rows if row.decides(self.family.alpha)]

    def surviving(self) -> list[Row]:
        return [row for row in self.rows if row.survives(self.family.alpha)]

    def lost(self) -> list[Row]:
        """Readings that decide at 95% alone but not under the family's rule."""
        return [row for row in self.decided() if not row.survives(self.family.alpha)]

    def caveats(self) -> dict[str, list[str]]:
        """Per claim with a decided verdict the reading bears on, the caveats the registered rule gives it."""
        alpha, m, out = self.family.alpha, len(self.counted), {}
        for row in self.rows:
            if row.verdict not in row.entry.bears_on:
                continue
            path = f"`{row.entry.evidence}`"
            if row.status == NO_SPREAD:
                text = (
                    f"{NOT_CHECKED} over the {m} readings of paired intervals: the chapter records {path} without its "
                    "pairs or spread (counted at level 1)"
                )
            elif row.decides(alpha) and not row.survives(alpha):
                text = (
                    f"{NOT_SURVIVING} over the {m} readings of paired intervals in this build: {path} decides at 95% "
                    f"alone (level {level_text(row.level)}) but not with the family (adjusted level "
                    f"{level_text(row.adjusted)}, above {alpha:g}); the verdict is kept"
                )
            else:
                continue
            out.setdefault(row.entry.claim, []).append(text)
        return out

    def caveated_claims(self) -> list[str]:
        return list(self.caveats())


def owner_records(runs: list[dict]) -> dict[str, dict]:
    """Each claim's verdict record (the owner's: a record with a verdict) in the build's results."""
    out = {}
    for run in runs:
        for record in run.get("claims", ()):
            if record.get("verdict") is not None:
                out[record["id"]] = record
    return out


def family_table(runs: list[dict], registered: Family) -> FamilyTable:
    """The registered family read off this build's results: each reading's level, Holm's adjusted level over the
    readings this build made (a reading recorded without its spread counts at level 1, which can only raise the
    others' adjusted levels), and the verdict it belongs to. A reading whose interval is absent (the claim not run
    at this profile, a run diverged) is listed as not measured here and not counted."""
    records = owner_records(runs)
    found: list[tuple[Entry, str, str | None, Reading | None]] = []
    for entry in registered.entries:
        record = records.get(entry.claim)
        verdict = record.get("verdict") if record else None
        try:
            interval = evidence_at((record or {}).get("evidence") or {}, entry.evidence)
        except KeyError:
            interval = None
        if interval is None:
            found.append((entry, NOT_MEASURED, verdict, None))
            continue
        try:
            if not isinstance(interval, dict):
                raise ValueError("not an interval record")
            found.append((entry, MEASURED, verdict, reading_of(entry.claim, entry.evidence, interval, entry.reading)))
        except ValueError:
            found.append((entry, NO_SPREAD, verdict, None))
    levels = {
        index: (reading.level if reading else 1.0)
        for index, (_, status, _, reading) in enumerate(found)
        if status != NOT_MEASURED
    }
    adjusted = holm(levels, registered.alpha) if levels else {}
    rows = []
    for index, (entry, status, verdict, reading) in enumerate(found):
        if status == MEASURED:
            rows.append(Row(entry, status, verdict, reading.level, adjusted[index], reading.outcome, reading))
        else:
            rows.append(Row(entry, status, verdict))
    return FamilyTable(registered, tuple(rows))


def with_caveats(runs: list[dict], table: FamilyTable) -> list[dict]:
    """The runs with each decided verdict's family caveats appended to its record's caveats (copies; the files and
    the runs passed in are left as they are)."""
    caveats = table.caveats()
    if not caveats:
        return runs
    out = []
    for run in runs:
        claims = []
        for record in run.get("claims", ()):
            if record.get("verdict") is not None and record["id"] in caveats:
                record = {**record, "caveats": [*(record.get("caveats") or ()), *caveats[record["id"]]]}
            claims.append(record)
        out.append({**run, "claims": claims})
    return out


def _listed(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def under_the_rule(row: Row, alpha: float) -> str:
    """What the rule made of one reading, for the design page's table."""
    if row.status == NOT_MEASURED:
        return "not measured here"
    if row.status == NO_SPREAD:
        return "spread not recorded (counted at level 1)"
    if row.survives(alpha):
        return "survives"
    return "does not survive" if row.decides(alpha) else "undecided at 95%"


def summary_sentence(table: FamilyTable, where: str = "Holm's rule over the family") -> str:
    """The opening page's count: how many readings decide alone, how many survive, which verdicts carry a caveat."""
    alpha, counted, decided = table.family.alpha, table.counted, table.decided()
    surviving = [row for row in decided if row.survives(alpha)]
    text = (
        f"Of the {len(counted)} readings of paired intervals in this build, {len(decided)} decide at 95% read alone; "
        f"{len(surviving) or 'none'} of those {'survives' if len(surviving) == 1 else 'survive'} {where}."
    )
    caveats = table.caveats()
    if not caveats:
        return text + " No verdict carries a caveat for it."
    lost = [c for c, texts in caveats.items() if any(t.startswith(NOT_SURVIVING) for t in texts)]
    unchecked = [c for c, texts in caveats.items() if c not in lost]
    parts = []
    if lost:
        parts.append(f"{_listed(lost)} {'rests' if len(lost) == 1 else 'rest'} on a reading that does not survive")
    if unchecked:
        parts.append(
            f"{_listed(unchecked)} on one {'its chapter records' if len(unchecked) == 1 else 'their chapters record'} "
            "without its spread"
        )
    n = len(caveats)
    return text + f" {n} verdict{'s carry' if n > 1 else ' carries'} a caveat for it: {', '.join(parts)}."
