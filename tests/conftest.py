"""Shared test setup. Kept minimal: several test modules rely on it.

Triton kernels run on CPU only in Triton's interpreter, which must be switched
on before triton defines any kernel, i.e. before the first import. setdefault
lets a GPU run override it (TRITON_INTERPRET=0 pytest ...).

Under pytest-xdist (`make test` runs two workers) each worker and the processes it starts (papermill kernels,
pool workers) get one thread: two workers on two cores, each with as many threads as cores, spin against each other.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Whole modules per worker (their module fixtures run once), and every reader of the smoke run on one worker."""
    from xdist.scheduler import LoadScopeScheduling

    from smoke_book import READERS

    class SmokeBookScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return "smoke-book" if module in READERS else module

    return SmokeBookScheduling(config, log)


@pytest.fixture(scope="session")
def smoke_book():
    """The copy under build/smoke-book/ in which every chapter ran at the smoke profile, once this session."""
    import smoke_book

    return smoke_book.run_chapters()


@pytest.fixture(scope="module")
def one_thread():
    """Small models on shared cores: one thread avoids threads of several processes spinning against each other."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def float64():
    """Models built in float64: two code paths that reduce in another order then agree to about 1e-14, on any CPU.

    In float32 they agree only to rounding that AdamW can amplify to a whole step (see tests/test_batched.py), so a
    float32 tolerance set on one CPU fails on another whose ATen kernels reduce in another order.
    """
    import torch

    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(before)
