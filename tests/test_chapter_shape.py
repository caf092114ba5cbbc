"""Chapters read prose first: in every chapter source, markdown lines are at least code lines, and no code cell is
long. The logic lives in the chapter's package `normlab.analysis.<chapter>` (findings, and one call per figure in its
`figures` module)."""

from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
LONGEST_CODE_CELL = 25


def cells(source: str) -> list[tuple[str, list[str]]]:
    """(kind, lines) per jupytext percent cell: kind is 'markdown', 'code', or 'header' before the first cell."""
    found: list[tuple[str, list[str]]] = []
    for line in source.splitlines():
        if line.startswith("# %%"):
            found.append(("markdown" if "[markdown]" in line else "code", []))
        elif found:
            found[-1][1].append(line)
        else:
            found.append(("header", [line]))
    return found


def is_code(line: str) -> bool:
    """A non-blank code line, other than those that hand the prose its numbers (normlab.study.prose.state): what they
    state is read in the markdown, so they count with neither side."""
    return bool(line.strip()) and not line.startswith(("state(", "from normlab.study.prose import"))


def counts(source: str) -> tuple[int, int, int]:
    """Non-blank markdown lines, code lines (`is_code`), and the longest code cell's code lines."""
    parsed = cells(source)
    markdown = sum(1 for kind, lines in parsed if kind == "markdown" for line in lines if line.strip() not in ("", "#"))
    code_cells = [sum(map(is_code, lines)) for kind, lines in parsed if kind == "code"]
    return markdown, sum(code_cells), max(code_cells, default=0)


def test_counts_on_a_known_source():
    source = "# ---\n# jupyter: x\n# ---\n# %% [markdown]\n# # Title\n#\n# Two lines.\n\n# %%\nx = 1\n\ny = 2\n# %% tags=['remove-input']\nprint(x)\n"
    assert counts(source) == (2, 3, 2)
    stated = source.replace("y = 2\n", "y = 2\nfrom normlab.study.prose import state\nstate(margin=y)\n")
    assert counts(stated) == (2, 3, 2)


@pytest.mark.parametrize("chapter", sorted(p.stem for p in NOTEBOOKS.glob("*.py")))
def test_chapter_reads_prose_first(chapter):
    markdown, code, longest = counts((NOTEBOOKS / f"{chapter}.py").read_text())
    assert markdown >= code, (
        f"{chapter}: {markdown} markdown lines against {code} code lines; move logic to normlab.analysis"
    )
    assert longest <= LONGEST_CODE_CELL, f"{chapter}: a code cell of {longest} lines (at most {LONGEST_CODE_CELL})"


@pytest.mark.parametrize("notebook", sorted(NOTEBOOKS.glob("*.py")), ids=lambda p: p.stem)
def test_papermill_reads_every_parameter_of_the_parameters_cell(notebook, caplog):
    # papermill parses the cell line by line; a line it cannot parse (a tuple assignment, an '=' in a comment) is a
    # warning on every run's terminal, and that parameter is reported "unknown" when the runner passes it
    from papermill.translators import PythonTranslator

    starts = notebook.read_text().split("\n# %%")
    parameter_cells = [cell.split("\n", 1)[1] for cell in starts if '"parameters"' in cell.split("\n", 1)[0]]
    assert len(parameter_cells) == 1, f"{notebook.name}: one cell tagged parameters"
    source = parameter_cells[0]
    names = {parameter.name for parameter in PythonTranslator.inspect({"source": source})}
    assignments = [line.split("=")[0].strip() for line in source.splitlines() if "=" in line]
    assert "Unable to parse" not in caplog.text and names == set(assignments) >= {"profile", "results_dir"}
