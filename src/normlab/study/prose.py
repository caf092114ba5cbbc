"""The numbers a chapter's prose states, pasted from the constants its code judges with, so that each has one source.

A notebook defines a threshold once (`MARGIN = 0.02`) and states it with `state(margin=MARGIN)`; its markdown and
figure captions then write {glue:text}`margin` where the number goes (MyST-NB's glue: the executed notebook carries
the text, and the book pastes it wherever the page names the key, before or after the defining cell). The text is
formatted as a reader writes a threshold: `0.02`, `0.95`, `10⁻⁶`, `2 × 10⁻⁵`; `percent` writes a share as `5%`.
tests/test_prose_constants.py fails when a chapter's prose types such a number instead.
"""

from __future__ import annotations

import math
import numbers

SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")
# Enough digits for any threshold typed by hand, few enough to drop float noise such as 1 - 0.95 = 0.05000000000000004.
DIGITS = 12


def number_text(value: numbers.Real) -> str:
    """A threshold as prose writes it: its shortest exact form, with a power of ten from 10⁴ up and 10⁻⁴ down."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise TypeError(f"state() takes finite numbers or text, not {value!r}; pass the constant the code judges with")
    mantissa, exponent = f"{float(value):.{DIGITS - 1}e}".split("e")
    mantissa = mantissa.rstrip("0").rstrip(".")
    if -4 < int(exponent) < 4:
        return f"{round(float(value), DIGITS - int(exponent)):.{DIGITS}g}"
    power = f"10{str(int(exponent)).translate(SUPERSCRIPT)}"
    return power if mantissa == "1" else f"{mantissa} × {power}"


def percent(share: numbers.Real) -> str:
    """A share as a percentage, for prose that writes 0.05 as `5%`."""
    return f"{number_text(round(float(share) * 100, DIGITS - 2))}%"


def state(**stated: numbers.Real | str) -> None:
    """Give each number its key for the prose's {glue:text}`key`; a number is formatted by `number_text`, text is
    pasted as given (e.g. `percent(1 - VISIBLE)`). Nothing is shown in the cell itself."""
    from myst_nb import glue  # the study's extra (jupyter-book); the norm library itself never needs it

    for key, value in stated.items():
        glue(key, value if isinstance(value, str) else number_text(value), display=False)


def source(claim_id: str, name: str) -> str:
    """A source's own number, registered in the design ([claims.ID.source_numbers.NAME]), as the role the book checks:
    {source}`ID.NAME=VALUE` renders VALUE with its citation, and a page whose VALUE differs from the design's copy
    fails the build naming both (book/_ext/normlab_check.py). Prose typed in a markdown cell writes the same role."""
    from normlab.study import design

    return f"{{source}}`{claim_id}.{name}={number_text(design.source_number(claim_id, name)['value'])}`"
