"""normlab: tested LayerNorm and RMSNorm kernels, and the study that compares them.

Three products, one floor each, every floor importing only from the floors below it:

- `normlab.norms`: the norm library (torch and numpy only); this module re-exports its public API;
- `normlab.runtime`: progress bars, the worker pool and provenance, shared by what follows;
- `normlab.gpt`: the GPT testbed (extra `gpt`);
- `normlab.bench`: the benchmark harness;
- `normlab.study` and `normlab.analysis`: the study's plumbing and its per-chapter analyses (extra `study`).
"""

from importlib import metadata

from normlab.norms import torch_versions as _torch_versions

# Before anything below touches torch: an older torch is one line naming the range, not an error from deep inside.
_torch_versions.require_supported_torch()

from normlab.norms.dyt import DyT, dyt, dyt_reference  # noqa: E402
from normlab.norms.functional import BACKENDS, layer_norm, rms_norm  # noqa: E402
from normlab.norms.modules import LayerNorm, RMSNorm  # noqa: E402
from normlab.norms.reference import layer_norm_reference, rms_norm_reference  # noqa: E402

__all__ = [
    "BACKENDS",
    "DyT",
    "dyt",
    "dyt_reference",
    "LayerNorm",
    "RMSNorm",
    "layer_norm",
    "layer_norm_reference",
    "rms_norm",
    "rms_norm_reference",
]


def _version() -> str:
    """The installed distribution's version (pyproject.toml is its one source)."""
    try:
        return metadata.version("normlab")
    except metadata.PackageNotFoundError:  # a source tree on sys.path that was never installed
        return "0+unknown"


__version__ = _version()
