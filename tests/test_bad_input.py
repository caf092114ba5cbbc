"""Bad calls fail with a ValueError/TypeError naming the argument, before anything is written."""

import pytest
import torch

import normlab
from normlab.norms.backends.triton import launch, triton_layer_norm, triton_rms_norm

# CPU runs the Triton backend in the interpreter; a GPU run (scripts/gpu_check.sh) uses CUDA.
DEVICE = "cpu" if launch.INTERPRETED or not torch.cuda.is_available() else "cuda"
BACKENDS = ("reference", "eager", "torch", "compile", "triton", "cpp", "auto")
D = 8


def good():
    torch.manual_seed(0)
    return {
        name: tensor.to(DEVICE)
        for name, tensor in dict(
            x=torch.randn(3, D), weight=torch.randn(D), bias=torch.randn(D), residual=torch.randn(3, D)
        ).items()
    }


# (description, overrides of the good call, error type, argument the message must name)
RMS_CASES = [
    ("weight of wrong shape", dict(weight=torch.ones(D + 1)), ValueError, "weight"),
    ("2-d weight", dict(weight=torch.ones(1, D)), ValueError, "weight"),
    ("integer x", dict(x=torch.ones(3, D, dtype=torch.int64)), TypeError, "x"),
    ("complex x", dict(x=torch.ones(3, D, dtype=torch.complex64)), TypeError, "x"),
    ("weight on another device", dict(weight=torch.ones(D, device="meta")), ValueError, "weight"),
    ("residual on another device", dict(residual=torch.ones(3, D, device="meta")), ValueError, "residual"),
    ("zero eps", dict(eps=0.0), ValueError, "eps"),
    ("negative eps", dict(eps=-1e-6), ValueError, "eps"),
    ("partial of zero", dict(partial=0.0), ValueError, "partial"),
    ("partial above one", dict(partial=1.5), ValueError, "partial"),
    ("residual of another shape", dict(residual=torch.ones(3, D + 1)), ValueError, "residual"),
    ("unknown eps placement", dict(eps_placement="middle"), ValueError, "eps_placement"),
]
LAYER_CASES = [case for case in RMS_CASES if case[1].keys() & {"weight", "x", "eps", "residual"}] + [
    ("bias of wrong shape", dict(bias=torch.ones(D - 1)), ValueError, "bias"),
    ("bias on another device", dict(bias=torch.ones(D, device="meta")), ValueError, "bias"),
]


@pytest.fixture
def launches(monkeypatch):
    """Records every output allocation of the Triton launchers: none may happen on a bad call."""
    calls = []
    original = launch._empty
    monkeypatch.setattr(launch, "_empty", lambda *args: calls.append(args) or original(*args))
    return calls


def _rms_call(args, backend):
    extra = {k: args[k] for k in ("eps", "partial", "eps_placement") if k in args}
    return normlab.rms_norm(args["x"], args["weight"], residual=args["residual"], backend=backend, **extra)


def _layer_call(args, backend):
    extra = {k: args[k] for k in ("eps",) if k in args}
    return normlab.layer_norm(
        args["x"], args["weight"], args["bias"], residual=args["residual"], backend=backend, **extra
    )


def _assert_rejected(call, overrides, error, argument, launches):
    args = {**good(), **overrides}
    before = {k: v.clone() for k, v in args.items() if isinstance(v, torch.Tensor) and v.device.type != "meta"}
    with pytest.raises(error, match=rf"\b{argument}\b"):
        call(args)
    assert not launches
    for name, value in before.items():
        assert torch.equal(args[name], value), f"{name} was modified"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", RMS_CASES, ids=lambda c: c[0])
def test_rms_norm_rejects(case, backend, launches):
    _, overrides, error, argument = case
    _assert_rejected(lambda args: _rms_call(args, backend), overrides, error, argument, launches)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", LAYER_CASES, ids=lambda c: c[0])
def test_layer_norm_rejects(case, backend, launches):
    _, overrides, error, argument = case
    _assert_rejected(lambda args: _layer_call(args, backend), overrides, error, argument, launches)


@pytest.mark.parametrize("case", RMS_CASES[:5], ids=lambda c: c[0])
def test_triton_entry_points_validate_too(case, launches):
    _, overrides, error, argument = case
    _assert_rejected(
        lambda a: triton_rms_norm(a["x"], a["weight"], residual=a["residual"]), overrides, error, argument, launches
    )
    _assert_rejected(
        lambda a: triton_layer_norm(a["x"], a["weight"], a["bias"], residual=a["residual"]),
        overrides,
        error,
        argument,
        launches,
    )


@pytest.mark.parametrize("backend", ("best", None, "Triton"))
def test_unknown_backend(backend):
    x = torch.randn(2, D)
    with pytest.raises(ValueError, match="backend"):
        normlab.rms_norm(x, backend=backend)
    with pytest.raises(ValueError, match="backend"):
        normlab.layer_norm(x, backend=backend)
    with pytest.raises(ValueError, match="backend"):
        normlab.RMSNorm(D, backend=backend)(x)


@pytest.mark.parametrize("backend", ("reference", "eager", "torch", "triton", "auto"))
def test_nan_and_inf_stay_in_their_row(backend):
    torch.manual_seed(1)
    x = torch.randn(4, 32, device=DEVICE)
    x[1, 7], x[2, 0] = float("nan"), float("inf")
    w, b = torch.randn(32, device=DEVICE), torch.randn(32, device=DEVICE)
    for y in (normlab.rms_norm(x, w, backend=backend), normlab.layer_norm(x, w, b, backend=backend)):
        assert torch.isfinite(y[[0, 3]]).all()
        assert not torch.isfinite(y[1]).any()
        assert not torch.isfinite(y[2]).all()
