"""One source for every threshold a chapter states: its prose and captions paste the number from the code (MyST-NB's
`{glue:text}` role, filled by `normlab.study.prose.state`), so a chapter whose prose types a number that its code
defines as a threshold fails here.

The code's thresholds: every numeric literal in a module-level UPPER_CASE assignment of a code cell (`MARGIN = 0.02`,
`B17_RULE = dict(spread_limit=10.0, ...)`, `MASSIVE = MassiveRule(ratio=1000, floor=100)`), and every numeric literal
passed by keyword to the chapter's analysis (a call on a name imported from `normlab.analysis`, its figures aside:
`invariance_findings(sweep, shift_sensitive=0.1)`). The prose: every markdown cell and every figure caption
(`mystnb.figure.caption` in a cell's metadata), with glue roles, cross-references, code spans and quotations taken out
(a claim quoted in quotation marks or a blockquote is the articles' number, which a threshold may restate but never is).

A typed number counts in any of the forms a page writes it: `0.02`, `1e-6`, `10⁻⁶`, `2 × 10⁻⁵`, `$10^{-4}$`,
`$2 \\times 10^{-5}$`, `1,000`, and a percentage (`75%` is 0.75). Two forms are not a threshold and pass: a percentage
that names an interval's level (`95% interval`, `95% confidence sequence`: the paired modules' fixed level), and a whole number below
10 not written as a factor (`Gemma 2`, `2 layers`; `2×` counts).
"""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path

import jupytext
import pytest

from normlab.study import design
from normlab.study.prose import number_text, percent, state

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
CONSTANT_NAME = re.compile(r"[A-Z][A-Z0-9_]*")
SUPERSCRIPTS = str.maketrans("⁻⁰¹²³⁴⁵⁶⁷⁸⁹", "-0123456789")
# Pasted, referenced or quoted text is not typed by the chapter: {glue:text}`margin`, {numref}`fig-x`, `code`,
# (label)=, a claim quoted "in quotation marks" or as a > blockquote line.
NOT_TYPED = re.compile(r"\{[\w:-]+\}`[^`]*`|`[^`]*`|^\s*\([\w-]+\)=\s*$|\"[^\"\n]*\"|“[^”\n]*”|^\s*>.*$", re.MULTILINE)
NUMBER = re.compile(
    r"(?<![\w.,])"  # not the tail of an identifier (A9, B16, fp32) or of another number
    r"(?P<mantissa>\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)"
    r"(?:(?P<e>[eE][-+]?\d+)"
    r"|\s*(?:×|x|\\times|\\cdot)\s*10(?:(?P<times>[⁻⁰¹²³⁴⁵⁶⁷⁸⁹]+)|\^\{?(?P<times_tex>-?\d+)\}?)"
    r"|(?P<power>[⁻⁰¹²³⁴⁵⁶⁷⁸⁹]+)|\^\{?(?P<power_tex>-?\d+)\}?)?"
    r"(?P<percent>\s?%)?"
    r"(?![\w.]\d)"
)
INTERVAL_LEVEL = re.compile(r"\s*(?:confidence\s+|t-)?(?:interval|sequence)")
FACTOR = re.compile(r"\s?×")


def analysis_names(code: str) -> set[str]:
    """The names a code cell imports from the chapter's analysis, its figures module aside."""
    names = set()
    for statement in ast.parse(code).body:
        if isinstance(statement, ast.ImportFrom) and (statement.module or "").startswith("normlab.analysis"):
            names.update(alias.asname or alias.name for alias in statement.names if alias.name != "figures")
    return names


def called_name(call: ast.Call) -> str | None:
    """`f` for f(...), `module` for module.f(...) and module.sub.f(...)."""
    node = call.func
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def is_constant_name(target: ast.expr) -> bool:
    """`MARGIN`, or `TOL, REPEATS` unpacked from a tuple."""
    if isinstance(target, ast.Tuple):
        return all(map(is_constant_name, target.elts))
    return isinstance(target, ast.Name) and CONSTANT_NAME.fullmatch(target.id) is not None


def thresholds(code: str, analysis: set[str]) -> dict[float, str]:
    """The numeric literals a code cell defines as thresholds, each with the line that defines it; `analysis` names
    what the notebook imported from `normlab.analysis`."""
    found: dict[float, str] = {}
    for statement in ast.parse(code).body:
        values: list[ast.expr] = []
        if isinstance(statement, ast.Assign) and all(map(is_constant_name, statement.targets)):
            values.append(statement.value)
        for node in ast.walk(statement):
            if isinstance(node, ast.Call) and called_name(node) in analysis:
                values.extend(keyword.value for keyword in node.keywords if keyword.arg is not None)
        line = ast.get_source_segment(code, statement).splitlines()[0]
        for value in values:
            for node in ast.walk(value):
                if isinstance(node, ast.Constant) and type(node.value) in (int, float):
                    found.setdefault(float(node.value), line)
        for number in design_numbers(statement):
            found.setdefault(number, line)
    return found


def design_numbers(statement: ast.stmt) -> list[float]:
    """The registered values a statement reads from the design (`design.value("A9", "margin")`, `design.values(...)`):
    thresholds too, though no literal in the chapter writes them."""
    numbers = []
    for node in ast.walk(statement):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("value", "values")
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "design"
            and all(isinstance(arg, ast.Constant) and isinstance(arg.value, str) for arg in node.args)
        ):
            claim, *names = (arg.value for arg in node.args)
            for name in names:
                registered = design.value(claim, name)
                parts = registered.values() if isinstance(registered, dict) else registered
                numbers.extend(float(v) for v in (parts if isinstance(parts, (tuple, type({}.values()))) else [parts]))
    return numbers


def typed_numbers(text: str) -> list[tuple[float, str]]:
    """Each number typed in a piece of prose, as (value, the text that typed it)."""
    found = []
    prose = NOT_TYPED.sub(" ", text)
    for match in NUMBER.finditer(prose):
        if match["percent"] and INTERVAL_LEVEL.match(prose, match.end()):
            continue
        if re.fullmatch(r"\d", match.group(0)) and not FACTOR.match(prose, match.end()):
            continue
        value = float(match["mantissa"].replace(",", ""))
        if match["e"]:
            value *= 10 ** int(match["e"][1:])
        elif match["times"] or match["times_tex"]:
            value *= 10 ** int((match["times"] or match["times_tex"]).translate(SUPERSCRIPTS))
        elif match["power"] or match["power_tex"]:
            value = value ** int((match["power"] or match["power_tex"]).translate(SUPERSCRIPTS))
        if match["percent"]:
            value /= 100
        found.append((value, match.group(0)))
    return found


def prose_pieces(notebook) -> list[tuple[str, str]]:
    """(where, text) for every markdown cell and every figure caption of a notebook."""
    pieces = []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "markdown":
            pieces.append((f"markdown cell {index}", cell.source))
        caption = cell.metadata.get("mystnb", {}).get("figure", {}).get("caption")
        if caption:
            pieces.append((f"caption of cell {index}", caption))
    return pieces


def typed_thresholds(notebook) -> list[tuple[str, str, str]]:
    """(where, the typed text, the defining line) for each threshold of the code that the prose types."""
    code = [cell.source for cell in notebook.cells if cell.cell_type == "code"]
    analysis = set().union(*(analysis_names(source) for source in code))
    defined: dict[float, str] = {}
    for source in code:
        for value, line in thresholds(source, analysis).items():
            defined.setdefault(value, line)
    problems = []
    for where, text in prose_pieces(notebook):
        for typed, written in typed_numbers(text):
            for value, line in defined.items():
                if math.isclose(typed, value, rel_tol=1e-9):
                    problems.append((where, written, line))
    return problems


PLANTED = """# %% [markdown]
# The margin is 0.02 nats, fixed before any run; at most 75% of blocks, within 10⁻⁶ or 2 × 10⁻⁵ of it,
# below 1,000×, growing at least 2× (Gemma 2, 2 layers), with a 95% interval, for claims A9 and B16; 1e-9;
# in math $10^{-9}$ and $2 \\times 10^{-5}$.

# %% tags=["remove-input"] mystnb={"figure": {"caption": "Against the ±0.1 band.", "name": "fig-x"}}
from normlab.analysis.chapter import figures, judging

MARGIN = 0.02
RULE = dict(share=0.75, band=0.1, growth=2.0)
judging.judge(runs, tolerance=1e-6, small=2e-5)
MASSIVE = Rule(ratio=1000)
TOL, REPEATS = 1e-9, 3
figures.plot(runs, width=0.3)
table(runs, digits=4)
seeds = 95

# %% [markdown]
# Pasted: {glue:text}`margin`, {numref}`fig-x`, `MARGIN = 0.02`, 95% interval, A9, B16, width 0.3, 4 digits.
# Quoted: the article says "75% of blocks" and “0.02 nats”.
#
# > A9: "within 0.02" of each other, or 75% of them.
"""


def test_the_checker_finds_every_planted_number():
    problems = typed_thresholds(jupytext.reads(PLANTED, fmt="py:percent"))
    assert [(where, typed) for where, typed, _ in problems] == [
        ("markdown cell 0", "0.02"),
        ("markdown cell 0", "75%"),
        ("markdown cell 0", "10⁻⁶"),
        ("markdown cell 0", "2 × 10⁻⁵"),
        ("markdown cell 0", "1,000"),
        ("markdown cell 0", "2"),
        ("markdown cell 0", "1e-9"),
        ("markdown cell 0", "10^{-9}"),
        ("markdown cell 0", "2 \\times 10^{-5}"),
        ("caption of cell 1", "0.1"),
    ]
    assert problems[0][2] == "MARGIN = 0.02"


def test_the_checker_passes_pasted_and_unrelated_numbers():
    pasted = PLANTED.split("# %% [markdown]")[-1]
    assert typed_thresholds(jupytext.reads("# %%\nMARGIN = 0.02\n# %% [markdown]" + pasted, fmt="py:percent")) == []
    assert typed_numbers("a 95% interval, a 95 % confidence interval, a 95% confidence sequence, Gemma 2") == []
    assert typed_numbers("the confirmation's 95% t-interval") == []
    # A lower-case name is a setting and a display call's argument is layout; neither is a threshold.
    assert thresholds("seeds = 95\nP = settings_for(profile)\ntable(frame, digits=4)\n", {"judging"}) == {}


@pytest.mark.parametrize(
    ("value", "text"),
    [(0.02, "0.02"), (0.95, "0.95"), (10.0, "10"), (1000, "1000"), (1e-3, "0.001"), (1e-4, "10⁻⁴"), (1e4, "10⁴")]
    + [(1e-6, "10⁻⁶"), (2e-5, "2 × 10⁻⁵"), (1e-300, "10⁻³⁰⁰"), (1 - 0.95, "0.05")],
)
def test_a_stated_number_reads_as_typed_and_the_checker_reads_it_back(value, text):
    assert number_text(value) == text
    assert [typed for typed, _ in typed_numbers(f"at most {text} here")] == [pytest.approx(value, rel=1e-12)]


def test_percent_drops_float_noise():
    assert [percent(1 - 0.95), percent(0.75), percent(0.07), percent(0.1)] == ["5%", "75%", "7%", "10%"]


def test_state_refuses_what_is_not_a_number():
    with pytest.raises(TypeError, match="finite numbers or text"):
        state(margin=[0.02])
    with pytest.raises(TypeError, match="finite numbers or text"):
        state(margin=float("nan"))


@pytest.mark.parametrize("chapter", sorted(path.stem for path in NOTEBOOKS.glob("*.py")))
def test_prose_pastes_every_threshold_the_code_defines(chapter):
    problems = typed_thresholds(jupytext.read(NOTEBOOKS / f"{chapter}.py"))
    assert not problems, (
        f"{chapter}: the prose types numbers its code defines; state each with normlab.study.prose.state(...) "
        "and paste it with {glue:text}`name`:\n  "
        + "\n  ".join(f"{where} types {typed!r}, which the code defines in `{line}`" for where, typed, line in problems)
    )
