"""Where the study's inputs and generated outputs live, relative to the repository root."""

from __future__ import annotations

import os
from pathlib import Path


def repo_root() -> Path:
    """The checkout this package was installed from (editable install), or NORMLAB_ROOT."""
    if "NORMLAB_ROOT" in os.environ:
        return Path(os.environ["NORMLAB_ROOT"]).resolve()
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "_config.yml").exists() and (parent / "notebooks").is_dir():
            return parent
    return Path.cwd()


ROOT = repo_root()
NOTEBOOKS = ROOT / "notebooks"
BUILD = ROOT / "build"
EXECUTED = BUILD / "executed"
RESULTS = BUILD / "results"
PAGES = BUILD / "pages"
CLAIMS = ROOT / "data" / "claims.md"
PACKAGE = Path(__file__).resolve().parents[1]
