"""The registered design (data/design.toml): every claim's quantity, unit, thresholds with their basis, test, pairs
per profile and the run that answers it, plus the log of changes made after results were seen.

Chapters take their constants from it (`value("A9", "margin")`, `values("B17", "spread_limit", ...)`), so that
a threshold has one source, and read them where they use them, never at import (a profile table names its registered
pairs with `pairs_at_lookup`, read by `lookup_profile`); `check_constant` refuses a chapter constant that disagrees
with it, and `check_recorded` lets the ledger refuse a verdict judged against a threshold the design does not hold.
`load` refuses, naming the claim, a file whose entry lacks a unit, a threshold's basis or source, or its pairs where
the claim trains, and an ID that data/claims.md does not list.
"""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass, field
from pathlib import Path

import tomllib

from normlab.runtime.profiles import ReadAtLookup
from normlab.study import paths, verdict_rules
from normlab.study.claims import parse_claims

DESIGN = paths.ROOT / "data" / "design.toml"
PROFILES = ("smoke", "cpu", "gpu")
CLAIM_FIELDS = ("chapter", "quantity", "unit", "test")
# The builds that may answer a claim (`answered_by`, in order: the first that measured the claim answers), each as the
# design page names it. "this-build": this build's own run at its profile (on a GPU machine, the gpu profile's);
# "gpu-bench": a committed GPU bench, data/gpu-bench*.json, read by normlab.runtime.elsewhere. A verdict weighed across
# runs names the build that answered it in its evidence (`answered_by`, normlab.analysis.shared.scale_rule; a record
# without one was answered by this build), and the ledger refuses one the claim does not register (check_answered).
THIS_BUILD, GPU_BENCH = "this-build", "gpu-bench"
ANSWERING_BUILDS = {
    THIS_BUILD: "this build's run at its profile",
    GPU_BENCH: "a committed GPU bench (`data/gpu-bench*.json`) where one measured the claim",
}
THRESHOLD_FIELDS = ("value", "basis", "source")
CHANGE_FIELDS = ("date", "claim", "field", "old", "new", "why", "look")
SOURCE_NUMBER_FIELDS = ("value", "unit", "where")
CONFIRMATION_FIELDS = ("registered", "decides", "pilot", "pilot_sd", "alpha", "power", "true_difference", "test")
PILOT_FIELDS = ("first_seed", "pairs", "build", "record", "evidence")
CONFIRMATION_READINGS = ("inside", "below")
# The updates a trained design may name: normlab.gpt.train.STEPS (tests/test_design.py holds them equal; the design
# reads no training code).
TRAINERS = ("reference", "compiled")
# The smoke profile checks a chapter's plumbing in seconds and decides nothing, so its runs take the reference step
# whatever the design registers: compiling a step costs minutes on a cold cache (V7's smoke section 242 s cold, 29 s
# warm), which `make test`, running every chapter at smoke from a fresh clone, cannot afford. The compiled step's own
# agreement with the reference is tested apart (tests/test_fast_step.py, tests/test_train_steps.py).
SMOKE_STEP = "reference"
# a recorded threshold equal to a registered one within float rounding of a typed decimal
RELATIVE_TOLERANCE = 1e-9


# The threshold every trained claim registers: how far below the byte frequencies' entropy each arm's final
# validation loss must end for the arm to count as trained (normlab.study.trained).
TRAINED_MINIMUM = "trained_minimum"


class DesignError(ValueError):
    """A design file, or a constant checked against it, that the build must not use; the message names the claim."""


@dataclass(frozen=True)
class Threshold:
    name: str
    value: float | tuple | dict
    unit: str
    basis: str
    source: str
    same_as: str | None = None  # "ID.NAME" where this threshold reuses another claim's


@dataclass(frozen=True)
class Confirmation:
    """A confirmation registered before it ran: the pilot (the runs taken so far, by seed, whose looks are spent),
    the spread it recorded per claim, and the fixed-N test on fresh seeds that alone decides `decides`. Its pairs are
    the owning claim's cpu pairs; `normlab.analysis.shared.confirmation.registered` checks them against the power
    computation (`normlab.study.sample_size`)."""

    owner: str  # the claim whose [claims.ID.confirmation] table holds it, whose runs it trains
    registered: str  # the date it was registered, before any confirmatory run
    decides: tuple[str, ...]  # the claims its fixed-N interval decides, each sized for
    also_read: tuple[str, ...]  # claims read on the same runs, not sized for
    pilot_seeds: tuple[int, ...]
    pilot_build: str  # the committed build folder whose results file holds the pilot's runs
    pilot_record: str  # that folder's results file
    pilot_evidence: dict[str, str]  # per claim decided: the evidence key of its paired result in that file
    pilot_sd: dict[str, float]  # per claim decided: sd of the pilot's paired differences, in the claim's unit
    alpha: float
    power: float
    true_difference: float  # the difference at which `power` is registered
    test: str
    seeds: tuple[int, ...]  # the fresh seeds, first_seed .. first_seed + pairs − 1
    setting: str  # "<chapter>:<profile key>" of the first seed
    margin: str = "margin"  # the threshold the decided claims' interval is read against
    # "inside": the interval wholly inside ±margin (an equivalence); "below": wholly below +margin (a rule that reads
    # the interval against +margin alone, V4's): what `power` is the chance of
    reading: str = "inside"
    # per claim decided, a larger spread recorded elsewhere (another machine's build, not committed) that sizes the
    # pairs when it exceeds the pilot's, with its source in sizing_basis
    sizing_sd: dict[str, float] | None = None
    sizing_basis: str = ""

    @property
    def one_sided(self) -> bool:
        """Whether the interval is read against +margin alone (reading "below") rather than inside ±margin."""
        return self.reading == "below"

    def sizing(self, claim_id: str) -> float:
        """The spread the pairs are sized on: the pilot's, or the registered larger one recorded elsewhere."""
        return max(self.pilot_sd[claim_id], (self.sizing_sd or {}).get(claim_id, 0.0))


@dataclass(frozen=True)
class ClaimDesign:
    id: str
    chapter: str
    quantity: str
    unit: str
    test: str
    answered_by: tuple[str, ...]  # names of ANSWERING_BUILDS, in order; the last is this build
    thresholds: dict[str, Threshold]
    trains: bool = False
    trainer: str | None = None  # where it trains: the update its runs use (TRAINERS)
    pairs: dict[str, int] = field(default_factory=dict)
    pairs_setting: str | None = None
    looks: tuple[int, ...] = ()
    confirmation: Confirmation | None = None  # where the claim's pilot is followed by a registered confirmation
    # what would decide a claim beyond this build's reach: a registered design for another machine ([claims.ID.decision],
    # checked by the owning chapter's analysis against its pilot and the power calculation)
    decision: dict | None = None
    # the date of its [[change]] entry with field = "registration"; None for the claims of `assembled` (the design as
    # first assembled from the chapters, before this rule)
    registered: str | None = None
    # the source's own numbers the chapter quotes ([claims.ID.source_numbers.NAME]: value, unit, where); a page that
    # writes one differently is refused by the book's {source} role (book/_ext/normlab_check.py)
    source_numbers: dict[str, dict] = field(default_factory=dict)
    answered_note: str | None = None  # what this build's answer rests on, where it is not a run ("a formula")
    # why an arm that fails to train is itself the answer (a claim about training without tuning); None for every
    # other trained claim, whose comparison with an arm that did not train is no verdict on the norm
    # (normlab.study.trained)
    untrained_answers: str | None = None
    # why the verdict can change with the machine alone (its key number is a time, or a share of time, on the
    # machine that ran it); the reproducibility page sets each build's number beside the others'
    depends_on_machine: str | None = None
    # how its registered readings decide its verdict, where declared (`verdict_rules`, `verdict_needs`): applied by
    # normlab.study.verdict_rules, and the rule's text rendered from it
    verdict_rules: verdict_rules.VerdictRules | None = None


@dataclass(frozen=True)
class Design:
    claims: dict[str, ClaimDesign]
    changes: list[dict]
    path: Path

    def confirmations(self) -> list[Confirmation]:
        return [entry.confirmation for entry in self.claims.values() if entry.confirmation is not None]

    def confirmation_of(self, claim_id: str) -> Confirmation | None:
        """The confirmation that decides `claim_id`, or on whose runs it is read; None without one."""
        self.claim(claim_id)
        found = [c for c in self.confirmations() if claim_id in c.decides or claim_id in c.also_read]
        return found[0] if found else None

    def claim(self, claim_id: str) -> ClaimDesign:
        if claim_id not in self.claims:
            raise DesignError(f"claim {claim_id!r} is not in {self.path}; add a [claims.{claim_id}] table")
        return self.claims[claim_id]

    def threshold(self, claim_id: str, name: str) -> Threshold:
        entry = self.claim(claim_id)
        if name not in entry.thresholds:
            raise DesignError(
                f"claim {claim_id} has no threshold {name!r} in {self.path} (it has: "
                f"{', '.join(sorted(entry.thresholds)) or 'none'}); add [claims.{claim_id}.thresholds.{name}] with "
                "value, basis and source"
            )
        return entry.thresholds[name]

    def source_number(self, claim_id: str, name: str) -> dict:
        """The source's own number `name` as the design holds it: value, unit, where."""
        numbers = self.claim(claim_id).source_numbers
        if name not in numbers:
            raise DesignError(
                f"claim {claim_id} registers no source number {name!r} (it has {sorted(numbers) or 'none'}); add "
                f"[claims.{claim_id}.source_numbers.{name}] with value, unit and where"
            )
        return numbers[name]

    def value(self, claim_id: str, name: str):
        """The registered value: a float, a (low, high) tuple, or a dict of floats."""
        return self.threshold(claim_id, name).value

    def values(self, claim_id: str, *names: str) -> dict:
        """Several of one claim's values as keyword arguments, e.g. `values("B17", "spread_limit", ...)`."""
        return {name: self.value(claim_id, name) for name in names}

    def check_constant(self, claim_id: str, name: str, constant) -> None:
        """Refuse a chapter constant that is not the registered value, naming both."""
        registered = self.value(claim_id, name)
        if not _same(registered, constant):
            raise DesignError(
                f"claim {claim_id}: the chapter judges {name} against {constant!r}, but {self.path} registers "
                f"{registered!r}; read it with design.value({claim_id!r}, {name!r}), or change the design and log "
                "the change in a [[change]] table"
            )

    def check_recorded(self, claim_id: str, threshold: float | None) -> None:
        """Refuse a verdict's recorded threshold that is none of its claim's registered values, naming both."""
        if threshold is None:
            return
        registered = sorted({number for t in self.claim(claim_id).thresholds.values() for number in _numbers(t.value)})
        if not any(_same(number, threshold) for number in registered):
            raise DesignError(
                f"claim {claim_id}'s verdict was judged against {threshold!r}, which {self.path} does not register "
                f"(its values: {', '.join(f'{n:g}' for n in registered) or 'none'}); register it with its basis, "
                "or judge against the registered value"
            )

    def check_answered(self, claim_id: str, build: str) -> None:
        """Refuse a verdict answered by a build its claim does not register as answering it, naming both."""
        registered = self.claim(claim_id).answered_by
        if build not in registered:
            raise DesignError(
                f"claim {claim_id}'s verdict was answered by {build!r}, but {self.path} registers answered_by = "
                f"{list(registered)}; register that build (and log the change), or answer from a registered one"
            )

    def check_reads(self, claim_id: str, reads) -> None:
        """Refuse a verdict whose rule reads a quantity (a threshold, by name) that the claim does not register,
        naming the claim and what it registers."""
        registered = self.claim(claim_id).thresholds
        unknown = [name for name in reads or () if name not in registered]
        if unknown:
            raise DesignError(
                f"claim {claim_id}'s verdict reads {', '.join(repr(n) for n in unknown)}, which {self.path} does not "
                f"register for it (it registers: {', '.join(sorted(registered)) or 'none'}); register it under "
                f"[claims.{claim_id}.thresholds] with its basis and source, or read a registered one"
            )

    def pairs_of(self, setting: str) -> dict[str, int]:
        """The pairs per profile registered for a chapter's setting ("quality:seeds"): the one home of those numbers,
        which the chapter's profiles read. Claims read on the same runs must register the same pairs."""
        sharing = {entry.id: entry.pairs for entry in self.claims.values() if entry.pairs_setting == setting}
        if not sharing:
            raise DesignError(f"{self.path} registers no claim with pairs_setting = {setting!r}")
        (first, pairs), *others = sharing.items()
        for claim_id, other in others:
            if other != pairs:
                raise DesignError(
                    f"claims {first} and {claim_id} are read on the same runs ({setting}) but register different "
                    f"pairs, {pairs} and {other}; register one count per profile for both"
                )
        return dict(pairs)

    def check_ran_pairs(self, run: dict) -> None:
        """Refuse a chapter's results whose paired runs are not the registered pairs, naming both: a verdict of a
        claim whose pairs setting the run overrode (`make book SET=quality.seeds=...`) to another count."""
        overrides, notebook = run.get("overrides") or {}, run.get("notebook")
        for record in run["claims"]:
            entry = self.claims.get(record["id"])
            if record.get("verdict") is None or entry is None or not entry.pairs_setting:
                continue
            chapter, key = entry.pairs_setting.split(":", 1)
            registered = entry.pairs.get(run.get("profile"))
            if chapter == notebook and key in overrides and overrides[key] != registered:
                raise DesignError(
                    f"claim {entry.id}: the {chapter} chapter ran {key} = {overrides[key]!r} (an override), but "
                    f"{self.path} registers {registered} pairs at profile {run.get('profile')!r}; rebuild without "
                    "the override, or register the new count (a [[change]] entry if results were seen)"
                )


def _numbers(value) -> list[float]:
    if isinstance(value, dict):
        return [float(v) for v in value.values()]
    if isinstance(value, tuple):
        return [float(v) for v in value]
    return [float(value)]


def _same(registered, constant) -> bool:
    if isinstance(registered, dict):
        return (
            isinstance(constant, dict)
            and registered.keys() == constant.keys()
            and all(_same(registered[k], constant[k]) for k in registered)
        )
    if isinstance(registered, tuple):
        return (
            isinstance(constant, (tuple, list))
            and len(constant) == len(registered)
            and all(_same(a, b) for a, b in zip(registered, constant))
        )
    if isinstance(constant, bool) or not isinstance(constant, numbers.Real):
        return False
    return math.isclose(float(registered), float(constant), rel_tol=RELATIVE_TOLERANCE, abs_tol=1e-300)


def _text(table: dict, key: str, where: str, fix: str) -> str:
    value = table.get(key)
    if not isinstance(value, str) or not value.strip():
        raise DesignError(f"{where} lacks {key!r} (got {value!r}); {fix}")
    return value.strip()


def _number_value(raw, where: str):
    def number(item):
        if isinstance(item, bool) or not isinstance(item, numbers.Real) or not math.isfinite(float(item)):
            raise DesignError(f"{where}: value {item!r} is not a finite number")
        return item

    if isinstance(raw, dict):
        return {str(k): number(v) for k, v in raw.items()}
    if isinstance(raw, list):
        if len(raw) != 2 or float(number(raw[0])) > float(number(raw[1])):
            raise DesignError(f"{where}: a range must be [low, high], got {raw!r}")
        return tuple(raw)
    return number(raw)


def _parse_claim(claim_id: str, table: dict, path: Path) -> tuple[dict, dict]:
    where = f"{path}: claim {claim_id}"
    fixed = {key: _text(table, key, where, f'add {key} = "..." to [claims.{claim_id}]') for key in CLAIM_FIELDS}
    raw_thresholds = table.get("thresholds") or {}
    if not raw_thresholds:
        raise DesignError(
            f"{where} has no threshold or margin; add [claims.{claim_id}.thresholds.NAME] with value, basis and source"
        )
    trains = bool(table.get("trains", False))
    trainer = table.get("trainer")
    if trains and trainer not in TRAINERS:
        raise DesignError(
            f"{where} trains models, so it names the update its runs use: trainer = one of "
            f"{', '.join(map(repr, TRAINERS))} (got {trainer!r}); designs registered from 2026-12-05 use 'compiled'"
        )
    if trainer is not None and not trains:
        raise DesignError(f"{where} names trainer = {trainer!r} but trains no model; drop it or set trains = true")
    pairs = table.get("pairs") or {}
    if trains and sorted(pairs) != sorted(PROFILES):
        raise DesignError(
            f"{where} trains models but registers pairs for {sorted(pairs) or 'no profile'}; "
            f"add pairs = {{ smoke = N, cpu = N, gpu = N }} to [claims.{claim_id}]"
        )
    for profile, count in pairs.items():
        if profile not in PROFILES or isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise DesignError(f"{where}: pairs.{profile} = {count!r}; profiles are {PROFILES}, counts positive ints")
    if pairs and not table.get("pairs_setting"):
        raise DesignError(f'{where} registers pairs without pairs_setting = "<chapter>:<profile key>"')
    if trains and TRAINED_MINIMUM not in raw_thresholds:
        raise DesignError(
            f"{where} trains models but registers no minimum for 'did each arm train'; add "
            f"[claims.{claim_id}.thresholds.{TRAINED_MINIMUM}] (how far below the byte frequencies' entropy every "
            f'arm\'s final loss must end, in nats per byte) or same_as = "V1"'
        )
    untrained_answers = table.get("untrained_answers")
    if untrained_answers is not None and (not trains or not isinstance(untrained_answers, str)):
        raise DesignError(
            f"{where}: untrained_answers = {untrained_answers!r}; on a claim that trains, give the sentence saying "
            "why an arm that fails to train answers the claim (a claim about training without tuning), or drop it"
        )
    answered_by = table.get("answered_by")
    if (
        not isinstance(answered_by, list)
        or not answered_by
        or any(name not in ANSWERING_BUILDS for name in answered_by)
        or len(set(answered_by)) < len(answered_by)
        or answered_by[-1] != THIS_BUILD
    ):
        raise DesignError(
            f"{where}: answered_by = {answered_by!r}; give the builds that may answer it, in order, from "
            f"{', '.join(map(repr, ANSWERING_BUILDS))}, ending with {THIS_BUILD!r} (this build answers where no "
            f'other measured the claim): answered_by = ["{THIS_BUILD}"]'
        )
    answered_note = table.get("answered_note")
    if answered_note is not None and (not isinstance(answered_note, str) or not answered_note.strip()):
        raise DesignError(f"{where}: answered_note = {answered_note!r}; give a sentence, or drop it")
    confirmation = _parse_confirmation(claim_id, table, where)
    source_numbers = table.get("source_numbers") or {}
    for name, number in source_numbers.items():
        for key in SOURCE_NUMBER_FIELDS:
            if key not in number:
                raise DesignError(
                    f"{where}: source number {name!r} lacks {key}; give value, unit and where (paper, section)"
                )
    return (
        dict(
            fixed,
            trains=trains,
            trainer=trainer,
            pairs=dict(pairs),
            pairs_setting=table.get("pairs_setting"),
            looks=tuple(table.get("looks", ())),
            confirmation=confirmation,
            decision=_parse_decision(table, where),
            registered=table.get("registered"),
            source_numbers={name: dict(number) for name, number in source_numbers.items()},
            answered_by=tuple(answered_by),
            answered_note=answered_note,
            untrained_answers=untrained_answers,
            depends_on_machine=table.get("depends_on_machine"),
            verdict_rules=verdict_rules.parse(claim_id, table, where),
        ),
        raw_thresholds,
    )


def _seed_range(table: dict, where: str) -> tuple[int, ...]:
    first, pairs = table.get("first_seed"), table.get("pairs")
    for name, value in (("first_seed", first), ("pairs", pairs)):
        if isinstance(value, bool) or not isinstance(value, int) or value < (0 if name == "first_seed" else 1):
            raise DesignError(f"{where}: {name} = {value!r}; give a non-negative first seed and a positive count")
    return tuple(range(first, first + pairs))


DECISION_FIELDS = (
    "registered",
    "runs_on",
    "pilot",
    "pilot_sd",
    "alpha",
    "power",
    "true_difference",
    "pairs",
    "first_seed",
    "model",
    "train",
    "test",
)


def _parse_decision(table: dict, where: str) -> dict | None:
    """The claim's [claims.ID.decision] table with every field present; None without one. Its numbers are checked
    by the chapter that owns the claim (the power calculation, the pilot's spread)."""
    raw = table.get("decision")
    if raw is None:
        return None
    missing = [key for key in DECISION_FIELDS if key not in raw]
    if missing:
        raise DesignError(
            f"{where}, decision lacks {', '.join(missing)}; a decision registers {', '.join(DECISION_FIELDS)}"
        )
    pilot = raw["pilot"]
    if raw["first_seed"] < pilot.get("first_seed", 0) + pilot.get("pairs", 0):
        raise DesignError(
            f"{where}, decision: first_seed {raw['first_seed']} overlaps the pilot's seeds; use fresh ones"
        )
    return dict(raw)


def _parse_confirmation(claim_id: str, table: dict, where: str) -> Confirmation | None:
    """The claim's [claims.ID.confirmation] table, checked; None without one. Seeds shared with the pilot are
    refused here, naming them: a confirmation on the pilot's runs would be another look, not a confirmation."""
    raw = table.get("confirmation")
    if raw is None:
        return None
    where = f"{where}, confirmation"
    missing = [key for key in CONFIRMATION_FIELDS if key not in raw]
    if missing:
        raise DesignError(
            f"{where} lacks {', '.join(missing)}; a confirmation registers {', '.join(CONFIRMATION_FIELDS)}"
        )
    pilot = raw["pilot"]
    if not isinstance(pilot, dict) or any(key not in pilot for key in PILOT_FIELDS):
        raise DesignError(f"{where}: pilot must be a table with {', '.join(PILOT_FIELDS)}")
    pairs = (table.get("pairs") or {}).get("cpu")
    if not table.get("trains") or pairs is None:
        raise DesignError(f"{where}: a confirmation needs the claim's trained pairs (trains = true, pairs.cpu)")
    if "first_seed" not in raw or "setting" not in raw:
        raise DesignError(f'{where}: give first_seed (the fresh seeds start there) and setting = "<chapter>:<key>"')
    seeds = _seed_range({"first_seed": raw["first_seed"], "pairs": pairs}, where)
    pilot_seeds = _seed_range(pilot, f"{where}, pilot")
    shared = sorted(set(seeds) & set(pilot_seeds))
    if shared:
        raise DesignError(
            f"{where}: its seeds {seeds[0]}..{seeds[-1]} overlap the pilot's {pilot_seeds[0]}..{pilot_seeds[-1]} at "
            f"{', '.join(map(str, shared))}; a "
            "confirmation trains fresh seeds: move first_seed past the pilot's last seed"
        )
    decides = tuple(raw["decides"])
    sd = raw["pilot_sd"]
    for name, per_claim in (("pilot_sd", sd), ("pilot.evidence", pilot["evidence"])):
        if not isinstance(per_claim, dict) or sorted(per_claim) != sorted(decides):
            raise DesignError(f"{where}: {name} must give one entry per claim it decides ({', '.join(decides)})")
    if claim_id not in decides:
        raise DesignError(f"{where}: decides must include {claim_id}, whose runs it trains")
    reading = str(raw.get("reading", "inside"))
    if reading not in CONFIRMATION_READINGS:
        raise DesignError(f"{where}: reading must be one of {', '.join(CONFIRMATION_READINGS)}, got {reading!r}")
    sizing_sd = raw.get("sizing_sd")
    if sizing_sd is not None:
        if not isinstance(sizing_sd, dict) or not set(sizing_sd) <= set(decides):
            raise DesignError(f"{where}: sizing_sd must give spreads only for claims it decides ({', '.join(decides)})")
        if not str(raw.get("sizing_basis", "")).strip():
            raise DesignError(f"{where}: sizing_sd needs sizing_basis, saying where that spread was recorded")
        sizing_sd = {key: float(value) for key, value in sizing_sd.items()}
    return Confirmation(
        owner=claim_id,
        registered=str(raw["registered"]),
        decides=decides,
        also_read=tuple(raw.get("also_read", ())),
        pilot_seeds=pilot_seeds,
        pilot_build=str(pilot["build"]),
        pilot_record=str(pilot["record"]),
        pilot_evidence={key: str(value) for key, value in pilot["evidence"].items()},
        pilot_sd={key: float(value) for key, value in sd.items()},
        alpha=float(raw["alpha"]),
        power=float(raw["power"]),
        true_difference=float(raw["true_difference"]),
        test=str(raw["test"]),
        seeds=seeds,
        setting=str(raw["setting"]),
        margin=str(raw.get("margin", "margin")),
        reading=reading,
        sizing_sd=sizing_sd,
        sizing_basis=str(raw.get("sizing_basis", "")),
    )


def _resolve(claim_id: str, name: str, raw: dict, claims_raw: dict, unit: str, path: Path, seen=()) -> Threshold:
    where = f"{path}: claim {claim_id}, threshold {name}"
    if "same_as" in raw:
        target_id, _, target_name = str(raw["same_as"]).partition(".")
        target_name = target_name or name
        target = (claims_raw.get(target_id, {}).get("thresholds") or {}).get(target_name)
        if target is None:
            raise DesignError(f"{where}: same_as = {raw['same_as']!r} names no registered threshold")
        if (target_id, target_name) in seen:
            raise DesignError(f"{where}: same_as forms a loop")
        other = _resolve(
            target_id,
            target_name,
            target,
            claims_raw,
            claims_raw[target_id].get("unit", unit),
            path,
            (*seen, (claim_id, name)),
        )
        return Threshold(name, other.value, other.unit, other.basis, other.source, f"{target_id}.{target_name}")
    if "value" not in raw:
        raise DesignError(f'{where} has no value; add value = ... (or same_as = "OTHER_ID")')
    basis = _text(raw, "basis", where, "say why this value, in the threshold's unit")
    source = _text(raw, "source", where, 'name the paper and section, or write "chosen: <the reason>"')
    return Threshold(name, _number_value(raw["value"], where), raw.get("unit", unit), basis, source)


def parse(path: Path, claim_ids: set[str] | None = None) -> Design:
    """Read and check a design file; every refusal names the claim and the fix."""
    path = Path(path)
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as error:
        raise DesignError(f"{path}: not valid TOML ({error})") from None
    claims_raw = document.get("claims") or {}
    known = claim_ids if claim_ids is not None else {c.id for c in parse_claims(paths.CLAIMS)}
    unknown = sorted(set(claims_raw) - known)
    if unknown:
        raise DesignError(f"{path}: unknown claim ID(s) {', '.join(unknown)}; the IDs are those of data/claims.md")
    missing = sorted(known - set(claims_raw))
    if missing:
        raise DesignError(f"{path}: no entry for claim(s) {', '.join(missing)}; add a [claims.ID] table for each")
    claims = {}
    for claim_id, table in claims_raw.items():
        fields, raw_thresholds = _parse_claim(claim_id, table, path)
        thresholds = {
            name: _resolve(claim_id, name, raw, claims_raw, fields["unit"], path)
            for name, raw in raw_thresholds.items()
        }
        claims[claim_id] = ClaimDesign(claim_id, thresholds=thresholds, **fields)
    _check_confirmations(claims, known, path)
    changes = document.get("change") or []
    for index, change in enumerate(changes):
        for key in CHANGE_FIELDS:
            _text(change, key, f"{path}: change {index + 1}", f"each [[change]] needs {', '.join(CHANGE_FIELDS)}")
        if change["claim"] not in known:
            raise DesignError(f"{path}: change {index + 1} names unknown claim {change['claim']!r}")
    _check_registrations(claims, set(document.get("assembled") or ()), changes, path)
    return Design(claims, [dict(change) for change in changes], path)


def _check_registrations(claims: dict[str, ClaimDesign], assembled: set[str], changes: list[dict], path: Path) -> None:
    """A claim added after the design was assembled carries `registered` and a [[change]] entry of that date with
    field = "registration", so that its design is on record before any run (check_runs refuses earlier runs)."""
    for claim_id, entry in claims.items():
        if claim_id in assembled:
            continue
        entries = [c for c in changes if c["claim"] == claim_id and c["field"] == "registration"]
        if entry.registered is None or not entries:
            raise DesignError(
                f"{path}: claim {claim_id} is not in `assembled` and has no registration; add registered = "
                f'"YYYY-MM-DD" to [claims.{claim_id}] and a [[change]] with claim = "{claim_id}", field = '
                f'"registration", dated that day, before its first run'
            )
        if all(c["date"] != entry.registered for c in entries):
            raise DesignError(
                f"{path}: claim {claim_id} says registered = {entry.registered!r}, but its registration entry is "
                f"dated {entries[0]['date']!r}; make them the same day"
            )


def _check_confirmations(claims: dict[str, ClaimDesign], known: set[str], path: Path) -> None:
    """Every claim a confirmation names exists, and none is decided or read by two confirmations."""
    owners: dict[str, str] = {}
    for entry in claims.values():
        confirmation = entry.confirmation
        if confirmation is None:
            continue
        for claim_id in (*confirmation.decides, *confirmation.also_read):
            if claim_id not in known:
                raise DesignError(f"{path}: claim {entry.id}'s confirmation names unknown claim {claim_id!r}")
            if claim_id in owners:
                raise DesignError(
                    f"{path}: claim {claim_id} is named by the confirmations of both {owners[claim_id]} and {entry.id}"
                )
            owners[claim_id] = entry.id


@functools.lru_cache(maxsize=4)
def _cached(path: str, mtime: float) -> Design:
    return parse(Path(path))


def load(path: Path | None = None) -> Design:
    """The committed design, read once per file version."""
    path = Path(path or DESIGN)
    if not path.exists():
        raise DesignError(f"{path}: the registered design is missing; restore data/design.toml from git")
    return _cached(str(path), path.stat().st_mtime)


def value(claim_id: str, name: str):
    """A registered threshold of the committed design: `margin = design.value("A9", "margin")`, where it is used."""
    return load().value(claim_id, name)


def values(claim_id: str, *names: str) -> dict:
    """Several registered thresholds of one claim as keyword arguments."""
    return load().values(claim_id, *names)


def training_step(claim_id: str, profile: str) -> str:
    """The update a claim's runs use at `profile` (TrainConfig.step): the registered trainer, SMOKE_STEP at smoke."""
    if profile not in PROFILES:
        raise DesignError(f"unknown profile {profile!r}; the profiles are {', '.join(PROFILES)}")
    trainer = load().claim(claim_id).trainer
    if trainer is None:
        raise DesignError(f"claim {claim_id} trains no model, so it registers no trainer")
    return SMOKE_STEP if profile == "smoke" else trainer


def source_number(claim_id: str, name: str) -> dict:
    """A source's own number as the design holds it (value, unit, where), for a chapter to set beside its measurement."""
    return load().source_number(claim_id, name)


def confirmation_of(claim_id: str) -> Confirmation | None:
    """The registered confirmation deciding `claim_id` (or on whose runs it is read); None without one."""
    return load().confirmation_of(claim_id)


def registered_verdict(claim_id: str, evidence: dict) -> str:
    """`claim_id`'s verdict read from the measured `evidence` by its registered readings and `verdict_rules`
    (normlab.study.verdict_rules): the one place such a verdict is decided. Refused, naming the claim: a claim that
    declares no verdict rules, a reading whose key the evidence lacks."""
    declared = load().claim(claim_id).verdict_rules
    if declared is None:
        raise DesignError(
            f"claim {claim_id} declares no verdict_rules in data/design.toml, so its readings decide nothing; add "
            f"verdict_rules = [{{ verdict = ..., when = {{ <evidence> = <outcome> }} }}] to [claims.{claim_id}]"
        )
    return verdict_rules.decide(declared, verdict_rules.outcomes(claim_id, declared, evidence))


def looks(claim_id: str) -> tuple[int, ...]:
    """The pair counts at which a claim's interval was read before its sample size was final (empty: fixed ahead)."""
    return load().claim(claim_id).looks


def check_constant(claim_id: str, name: str, constant) -> None:
    load().check_constant(claim_id, name, constant)


def pairs(setting: str) -> dict[str, int]:
    """The committed design's pairs per profile for a chapter setting: `design.pairs("quality:seeds")["cpu"]`."""
    return load().pairs_of(setting)


def pairs_at_lookup(setting: str) -> ReadAtLookup:
    """A chapter setting's registered pairs as its profile table's entry, e.g.
    `seeds=design.pairs_at_lookup("quality:seeds")`: read from the committed design when a profile is looked up
    (`lookup_profile`), never when the chapter is imported."""
    return ReadAtLookup(f"design.pairs({setting!r})", lambda profile: pairs(setting)[profile])


def first_seed_at_lookup(claim_id: str) -> ReadAtLookup:
    """The first fresh seed of the confirmation deciding `claim_id`, as a profile table's entry: read when a profile is
    looked up (`lookup_profile`), never when the chapter is imported."""

    def read(profile: str) -> int:
        confirmation = confirmation_of(claim_id)
        if confirmation is None:
            raise DesignError(f"claim {claim_id} has no registered confirmation, so no first fresh seed")
        return confirmation.seeds[0]

    return ReadAtLookup(f"design.confirmation_of({claim_id!r}).seeds[0]", read)


def check_runs(runs: list[dict], design: Design | None = None) -> None:
    """Refuse any results file whose verdict was judged against a threshold the design does not hold, whose rule
    reads a quantity the design does not register for its claim, or whose paired runs are not the registered pairs."""
    design = design or load()
    for run in runs:
        try:
            design.check_ran_pairs(run)
        except DesignError as error:
            raise DesignError(f"{run.get('_file', run['notebook'])}: {error}") from None
        for record in run["claims"]:
            registered = design.claims[record["id"]].registered if record["id"] in design.claims else None
            if registered is not None and str(run.get("started", ""))[:10] < registered:
                raise DesignError(
                    f"{run.get('_file', run['notebook'])}: claim {record['id']} was run on "
                    f"{str(run.get('started'))[:10]}, before its design was registered on {registered}; rerun the chapter"
                )
            trained_with = (record.get("evidence") or {}).get("trainer")
            if trained_with is not None and record["id"] in design.claims:
                expected = SMOKE_STEP if run.get("profile") == "smoke" else design.claims[record["id"]].trainer
                if trained_with != expected:
                    raise DesignError(
                        f"{run.get('_file', run['notebook'])}: claim {record['id']} trained with {trained_with!r} at "
                        f"profile {run.get('profile')!r}, but its design registers {expected!r} there; rerun the chapter "
                        "without overriding its step"
                    )
            if record.get("verdict") is not None:
                try:
                    design.check_recorded(record["id"], record.get("threshold"))
                    design.check_reads(record["id"], record.get("reads"))
                    design.check_answered(record["id"], (record.get("evidence") or {}).get("answered_by", THIS_BUILD))
                except DesignError as error:
                    raise DesignError(f"{run.get('_file', run['notebook'])}: {error}") from None
