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


def test_the_committed_matrix_ran_every_cell_of_the_range_and_each_passed(matrix):
    ran = {(r["python"], r["torch_requested"]) for r in matrix["cells"]}
    assert ran == {(p, t) for p in RANGE["pythons"] for t in RANGE["torch"]}, "run `make test-torch-range`"
    for record in matrix["cells"]:
        cell = f"Python {record['python']}, torch {record['torch_requested']}"
        assert record["outcome"] == "passed" and record["failures"] == record["errors"] == 0, cell
        assert record["passed"] > 0, cell
        # The torch the cell asked for is the one it ran, after normlab's wheel was installed beside it.
        assert torch_versions.release(record["installed"]["torch"]) == torch_versions.release(record["torch_requested"])


def test_the_triton_extra_admits_the_triton_of_every_torch_in_the_range(matrix):
    triton = _requirement("triton", PYPROJECT["optional-dependencies"]["triton"])
    for record in matrix["cells"]:
        installed = Version(record["installed"]["triton"])
        assert installed in triton.specifier, f"torch {record['torch_requested']} brings triton {installed}"


def test_the_readme_block_is_rendered_from_the_committed_matrix(matrix):
    readme = (paths.ROOT / "README.md").read_text()
    assert torch_matrix.current_block(readme) == torch_matrix.readme_block(matrix), "run `nox -s matrix_table`"
    assert f"Tested: {torch_versions.tested_range()}" in readme
