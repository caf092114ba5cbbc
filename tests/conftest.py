"""Shared test setup. Kept minimal: several test modules rely on it.

Triton kernels run on CPU only in Triton's interpreter, which must be switched
on before triton defines any kernel, i.e. before the first import. setdefault
lets a GPU run override it (TRITON_INTERPRET=0 pytest ...).
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402


@pytest.fixture(scope="module")
def one_thread():
    """Small models on shared cores: one thread avoids threads of several processes spinning against each other."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
