"""Batch invariance and determinism of the backends that claim them: triton, cpp and torch.

A row's y and its dx are the same bits whatever the number of rows in the call and wherever the row sits in it
(so whichever program, tile or thread handles it), and the weight's gradient is the same bits when the same call
is repeated. Rows of one (64, d) input are computed in calls of 1, 7 and 64 rows and as a slice of a larger call
(96 rows, at an offset that moves every row to another tile position and program), and compared bit for bit.

The Triton kernels run in the interpreter here (small shapes: it is slow), on-chip and chunked. On a GPU the same
file checks the compiled kernels; there the on-chip tile height does not depend on the row count (launch._tile),
so each row's reduction has one layout whatever the call.
"""

import pytest
import torch

import normlab
from normlab.norms.backends import cpp
from normlab.norms.backends.triton import launch

DEVICE = "cpu" if launch.INTERPRETED or not torch.cuda.is_available() else "cuda"
ROWS, BIGGER, OFFSET = 64, 96, 13
CALL_SIZES = (1, 7, ROWS)
ALONE = (0, 5, 31, 63)  # rows computed in calls of one row (every row would take 64 interpreter launches)
WIDTHS = (64, 100)  # a power of two, and a width that leaves masked columns

# (backend, norm, on-chip limit for triton: None keeps the default; 32 sends these widths to the chunked kernels)
CASES = [
    ("triton", "rms", None),
    ("triton", "rms", 32),
    ("triton", "layer", None),
    ("triton", "layer", 32),
    ("cpp", "rms", None),
    ("torch", "rms", None),
    ("torch", "layer", None),
]


def _case_id(case) -> str:
    return f"{case[0]}-{case[1]}" + ("-chunked" if case[2] else "")


def _skip_unavailable(backend):
    if backend == "cpp" and (DEVICE != "cpu" or not cpp.available()):
        pytest.skip("the cpp backend needs a C++ compiler with OpenMP and CPU tensors")


@pytest.fixture
def limits(monkeypatch, request):
    """The on-chip limit (and a small chunk) the Triton path reads from launch at each call."""

    def set_limit(onchip_limit):
        if onchip_limit is not None:
            monkeypatch.setattr(launch, "ONCHIP_LIMIT", onchip_limit)
            monkeypatch.setattr(launch, "CHUNK", 32)  # 4 chunks of a 100-wide row, the last masked

    return set_limit


def _norm(backend, kind, weight, bias):
    if kind == "rms":
        return lambda x: normlab.rms_norm(x, weight, 1e-6, backend=backend)
    return lambda x: normlab.layer_norm(x, weight, bias, 1e-5, backend=backend)


def _forward_backward(norm, x, dy, params):
    """y, dx and each parameter's gradient of one call."""
    x = x.detach().clone().requires_grad_()
    y = norm(x)
    grads = torch.autograd.grad(y, (x, *params), dy)
    return y.detach(), grads[0], grads[1:]


def _same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(torch.int32), b.view(torch.int32))


# The chunked kernels take 6-12 s a width in the interpreter: they run at the masked width alone.
ROW_CASES = [pytest.param(c, d, id=f"{_case_id(c)}-{d}") for c in CASES for d in WIDTHS if not c[2] or d == WIDTHS[-1]]


@pytest.mark.parametrize("case, d", ROW_CASES)
def test_a_row_is_the_same_bits_in_any_call(case, d, limits):
    backend, kind, onchip_limit = case
    _skip_unavailable(backend)
    limits(onchip_limit)
    generator = torch.Generator().manual_seed(d)
    make = lambda *shape: torch.randn(*shape, generator=generator).to(DEVICE)  # noqa: E731
    x, dy = make(ROWS, d), make(ROWS, d)
    weight = (1 + 0.1 * make(d)).requires_grad_()
    bias = make(d).requires_grad_() if kind == "layer" else None
    params = [p for p in (weight, bias) if p is not None]
    norm = _norm(backend, kind, weight, bias)

    y, dx, _ = _forward_backward(norm, x, dy, params)
    pieces = {size: [] for size in CALL_SIZES}
    for size in CALL_SIZES:
        starts = ALONE if size == 1 else range(0, ROWS, size)
        for start in starts:
            stop = min(start + size, ROWS)
            # a fresh tensor: the call's rows start at a new address, not inside x's storage
            y_part, dx_part, _ = _forward_backward(norm, x[start:stop].clone(), dy[start:stop].clone(), params)
            pieces[size].append((start, stop, y_part, dx_part))
    for size, parts in pieces.items():
        for start, stop, y_part, dx_part in parts:
            assert _same_bits(y_part, y[start:stop]), (backend, kind, size, start, "y")
            assert _same_bits(dx_part, dx[start:stop]), (backend, kind, size, start, "dx")

    # the rows as a slice of a larger call, moved by OFFSET rows: other tiles, other programs
    big_x, big_dy = make(BIGGER, d), make(BIGGER, d)
    big_x[OFFSET : OFFSET + ROWS], big_dy[OFFSET : OFFSET + ROWS] = x, dy
    y_big, dx_big, _ = _forward_backward(norm, big_x, big_dy, params)
    assert _same_bits(y_big[OFFSET : OFFSET + ROWS], y), (backend, kind, "inside a larger call", "y")
    assert _same_bits(dx_big[OFFSET : OFFSET + ROWS], dx), (backend, kind, "inside a larger call", "dx")


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_parameter_gradients_repeat_bit_for_bit(case, limits):
    backend, kind, onchip_limit = case
    _skip_unavailable(backend)
    limits(onchip_limit)
    d = 100
    generator = torch.Generator().manual_seed(7)
    make = lambda *shape: torch.randn(*shape, generator=generator).to(DEVICE)  # noqa: E731
    weight = (1 + 0.1 * make(d)).requires_grad_()
    bias = make(d).requires_grad_() if kind == "layer" else None
    params = [p for p in (weight, bias) if p is not None]
    norm = _norm(backend, kind, weight, bias)
    for rows in (5, 29):  # fewer rows than programs, and several rows per program (4 fake SMs)
        x, dy = make(rows, d), make(rows, d)
        first = _forward_backward(norm, x, dy, params)
        for _ in range(2):
            again = _forward_backward(norm, x.clone(), dy.clone(), params)
            assert _same_bits(again[0], first[0]) and _same_bits(again[1], first[1])
            for a, b in zip(again[2], first[2]):
                assert _same_bits(a, b), (backend, kind, rows)
