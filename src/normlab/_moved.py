"""Old module paths from before normlab 0.2's layout, each answered with the path it moved to.

For one release an import of an old path fails with a message naming the new one, rather than a bare
"No module named ...". (`normlab.train` itself still exists: it is the `python -m normlab.train` entry point.)
"""

from __future__ import annotations

import importlib.abc
import sys

MOVED = {
    "normlab.reference": "normlab.norms.reference",
    "normlab.validation": "normlab.norms.validation",
    "normlab.composite": "normlab.norms.backends.composite",
    "normlab.compiled": "normlab.norms.backends.compiled",
    "normlab.functional": "normlab.norms.functional",
    "normlab.modules": "normlab.norms.modules",
    "normlab.dyt": "normlab.norms.dyt",
    "normlab.ops": "normlab.norms.backends.triton",
    "normlab.cpu": "normlab.norms.backends.cpp",
    "normlab.integrations": "normlab.norms.huggingface",
    "normlab.integrations.transformers": "normlab.norms.huggingface",
    "normlab.model": "normlab.gpt.model",
    "normlab.cli_train": "normlab.gpt.cli",
    "normlab.corpus": "normlab.gpt.corpus",
    "normlab.residual": "normlab.gpt.residual_stream",
    "normlab.parallel": "normlab.runtime.parallel",
    "normlab.progress": "normlab.runtime.progress",
    "normlab.study.environment": "normlab.runtime.environment",
    "normlab.bench.claims": "normlab.analysis.speed",
    "normlab.analysis.paired": "normlab.analysis.shared.paired",
    "normlab.analysis.parity": "normlab.analysis.shared.parity",
    "normlab.analysis.runs": "normlab.analysis.shared.runs",
    "normlab.analysis.stream": "normlab.analysis.shared.stream",
    "normlab.analysis.minilm": "normlab.analysis.shared.minilm",
}


def new_path(old: str) -> str | None:
    """Where a module that moved lives now (submodules of a moved package included), or None."""
    for prefix in sorted(MOVED, key=len, reverse=True):
        if old == prefix or old.startswith(prefix + "."):
            return MOVED[prefix] + old[len(prefix) :]
    return None


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        moved = new_path(fullname)
        if moved is not None:
            # No `name=`: the import system would then swallow the error inside `from normlab import ops`.
            raise ModuleNotFoundError(f"{fullname} moved to {moved} in normlab 0.2; import it from there")
        return None


def install() -> None:
    if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.append(MovedModuleFinder())
