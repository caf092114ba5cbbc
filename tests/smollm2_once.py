"""One SmolLM2 load per test session (the GGUF dequantisation costs seconds), shared by the test modules."""

from __future__ import annotations

import functools

import pytest


@functools.lru_cache(maxsize=1)
def smollm2():
    from normlab.analysis.realmodels import load

    try:
        load.smollm2_dir()
    except FileNotFoundError as error:
        pytest.skip(str(error))
    return load.load_smollm2()
