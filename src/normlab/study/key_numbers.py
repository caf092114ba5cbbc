"""A key number in its unit: how the chapters' sentences and the ledger's pages write the number a verdict turns on.

Every verdict names its key number's unit, so that a page can show it without knowing the claim:

- `DIMENSIONLESS` ("1", the SI unit of a pure number) for an error, a difference of outputs or a ratio shown
  bare: it is written as the plain number;
- `SHARE` ("%") for a share, recorded as a fraction and written as a percent;
- `FACTOR` ("×") for a factor, written "×1.7";
- `POINTS` ("percentage points") for a change of a share, recorded as a difference of fractions and written as
  "+3.1 percentage points";
- a loss in `NATS_PER_BYTE` (the byte-level GPTs this book trains) or `NATS_PER_TOKEN` (a real model's tokenizer):
  the two are not comparable, about 4 bytes to a token, so a loss never says "nats" alone;
- any other unit is a word written after the number ("passes", "decades").

A record without a unit (a results file written before units were recorded) is written as the plain number.
"""

from __future__ import annotations

from dataclasses import dataclass

from normlab.study.present import significant

DIMENSIONLESS = "1"
SHARE = "%"
FACTOR = "×"
POINTS = "percentage points"
NATS_PER_BYTE = "nats per byte"
NATS_PER_TOKEN = "nats per token"


def format_value(value, unit: str | None, *, trim: bool = False) -> str:
    """`value` in `unit`; `trim` drops trailing zeros, for thresholds stated as round numbers."""
    if value is None:
        return "—"
    percent = unit in (SHARE, POINTS)
    if not percent and float(value).is_integer() and abs(value) < 1e6:
        shown = str(int(value))  # a count (parameters, ops, families) or a round threshold
    else:
        shown = significant(100 * float(value), 2) if percent else significant(value)
    if trim and "." in shown:
        mantissa, _, exponent = shown.partition("e")
        shown = mantissa.rstrip("0").rstrip(".") + (f"e{exponent}" if exponent else "")
    if unit == SHARE:
        return f"{shown}%"
    if unit == FACTOR:
        return f"×{shown}"
    return shown if unit in (None, DIMENSIONLESS) else f"{shown} {unit}"


def format_spread(value, unit: str | None) -> str:
    """A spread (or a difference) in the key number's unit; a spread of a factor is a plain number, not a factor."""
    return significant(value) if unit == FACTOR else format_value(value, unit)


def within(value, threshold) -> bool:
    """|value| ≤ |threshold|: a two-sided margin or limit."""
    return abs(float(value)) <= abs(float(threshold))


@dataclass(frozen=True)
class KeyNumber:
    """What a claim's key number measures (`meaning`, in words, as the ledger shows it) and its `unit`.

    The chapter that decides the claim passes both onto its `Finding`, and writes its sentences with these methods,
    so that the chapter's page, the ledger and the opening page show the number alike.
    """

    meaning: str
    unit: str

    @classmethod
    def of(cls, finding) -> KeyNumber:
        """The key number a finding (or a results record) states."""
        get = finding.get if isinstance(finding, dict) else lambda name: getattr(finding, name)
        return cls(get("meaning"), get("unit"))

    def format(self, value, *, trim: bool = False) -> str:
        return format_value(value, self.unit, trim=trim)

    def limit(self, value) -> str:
        """A threshold, written as the round number it was stated as."""
        return format_value(value, self.unit, trim=True)

    def signed(self, value) -> str:
        """The value with its sign: '+0.012 nats per byte', '-0.012 nats per byte', '0 nats per byte'."""
        text = self.format(value)
        return text if text.startswith(("-", "—")) or float(value) == 0 else f"+{text}"

    def format_spread(self, value) -> str:
        return format_spread(value, self.unit)

    def fields(self) -> dict:
        """`meaning` and `unit` as keyword arguments of a `Finding`."""
        return {"meaning": self.meaning, "unit": self.unit}
