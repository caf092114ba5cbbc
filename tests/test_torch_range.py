"""The torch range is written once (src/normlab/norms/torch_range.toml); everything that states it agrees with it.

The package metadata's floors, the README's block and the matrix's committed results (data/torch-range.json, which
`make test-torch-range` writes) are read here and compared with the file, so a release added to the range without
running the matrix, or a floor edited by hand, fails here.
"""

from __future__ import annotations

import re

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.version import Version

from normlab.norms import torch_versions
from normlab.study import paths, torch_matrix

PYPROJECT = tomllib.loads((paths.ROOT / "pyproject.toml").read_text())["project"]
RANGE = torch_versions.RANGE


def _requirement(name: str, requirements: list[str]) -> Requirement:
    (found,) = [r for r in map(Requirement, requirements) if r.name == name]
    return found


def _floor(requirement: Requirement) -> Version:
    (floor,) = [Version(s.version) for s in requirement.specifier if s.operator == ">="]
    return floor


@pytest.fixture(scope="module")
def matrix() -> dict:
    return torch_matrix.read_matrix()


def test_the_metadata_floor_of_torch_is_the_oldest_release_of_the_range():
    torch = _requirement("torch", PYPROJECT["dependencies"])
    assert _floor(torch) == Version(torch_versions.OLDEST), f"pyproject.toml says {torch}, the range starts at "
    assert len(torch.specifier) == 1, "no upper bound: a newer torch than the newest tested is let through"


def test_the_metadata_pythons_are_the_range_pythons():
    assert PYPROJECT["requires-python"] == f">={min(RANGE['pythons'], key=Version)}"
    classified = [c.rsplit(" :: ", 1)[1] for c in PYPROJECT["classifiers"] if re.fullmatch(r".*Python :: 3\.\d+", c)]
    assert classified == RANGE["pythons"]


def test_the_ci_cell_is_the_oldest_torch_of_the_range():
    assert RANGE["ci"]["torch"] == min(RANGE["torch"], key=torch_versions.release)
    assert RANGE["ci"]["python"] in RANGE["pythons"]
    assert "make test-torch-oldest" in (paths.ROOT / ".ci" / "run").read_text()


def test_every_committed_cell_passed_and_each_release_and_python_of_the_range_has_a_passing_cell(matrix):
    """A cell that failed is not committed as part of the range; a release or Python of the range that no cell ran
    is not claimed. A cell not yet run shows as 'not run' in the table (checked below), never as passed."""
    in_range = {(p, t) for p in RANGE["pythons"] for t in RANGE["torch"]}
    ran = [(r["python"], r["torch_requested"]) for r in matrix["cells"]]
    assert set(ran) <= in_range and len(ran) == len(set(ran)), "a cell outside the range, or one recorded twice"
    for record in matrix["cells"]:
        cell = f"Python {record['python']}, torch {record['torch_requested']}"
        assert record["outcome"] == "passed" and record["failures"] == record["errors"] == 0, cell
        assert record["passed"] > 0, cell
        # The torch the cell asked for is the one it ran, after normlab's wheel was installed beside it.
        assert torch_versions.release(record["installed"]["torch"]) == torch_versions.release(record["torch_requested"])
    assert {t for _, t in ran} == set(RANGE["torch"]), "a torch release of the range that no cell passed on"
    assert {p for p, _ in ran} == set(RANGE["pythons"]), "a Python of the range that no cell passed on"
    assert (RANGE["ci"]["python"], RANGE["ci"]["torch"]) in ran, "the cell CI runs has not passed here"


def test_a_cell_not_run_says_so_in_the_table(matrix):
    header, rows = torch_matrix.table_rows({**matrix, "cells": matrix["cells"][:1]})
    texts = [cell for row in rows for cell in row[1:]]
    assert texts.count("not run") == len(RANGE["pythons"]) * len(RANGE["torch"]) - 1
    assert sum(text.startswith("passed: ") for text in texts) == 1


def test_the_triton_extra_admits_the_triton_of_every_torch_in_the_range(matrix):
    triton = _requirement("triton", PYPROJECT["optional-dependencies"]["triton"])
    for record in matrix["cells"]:
        installed = Version(record["installed"]["triton"])
        assert installed in triton.specifier, f"torch {record['torch_requested']} brings triton {installed}"


def test_the_readme_block_is_rendered_from_the_committed_matrix(matrix):
    readme = (paths.ROOT / "README.md").read_text()
    assert torch_matrix.current_block(readme) == torch_matrix.readme_block(matrix), "run `nox -s matrix_table`"
    assert f"Tested: {torch_versions.tested_range()}" in readme
