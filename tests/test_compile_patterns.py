"""The compile path never gives up: many call patterns in one process, on backend="compile" and on auto.

dynamo keeps at most 8 graphs per compiled function and, under fullgraph=True,
raises on the 9th. A model easily makes more than 8 patterns (every hidden
width, dtype, residual or not, grad or not), so normlab.norms.backends.compiled gives each
signature its own function and keeps shapes (weights included) dynamic. These
tests make well over 16 distinct patterns and require: no error, no warning
(auto's fallback warns), and results equal to the float64 reference.
"""

import warnings

import pytest
import torch

import normlab
from normlab.norms import functional
from normlab.norms.backends import compiled
from normlab.norms.backends import cpp as cpu
from normlab.norms.reference import layer_norm_reference, rms_norm_reference

# Tolerance on the float64 reference, per dtype: a few units of the dtype's rounding.
TOLERANCE = {torch.float32: 2e-5, torch.float64: 1e-10, torch.bfloat16: 2e-2, torch.float16: 3e-3}


def _error(actual, expected):
    actual, expected = actual.double(), expected.double()
    return ((actual - expected).norm() / expected.norm().clamp_min(1e-30)).item()


def _patterns():
    """(width, dtype, residual, grad, retain_graph, backend, module-or-functional): 33 distinct patterns."""
    out = []
    for width in (8, 16, 24, 40, 48, 56, 64, 72, 80):  # 9 widths: more than dynamo's 8 graphs per function
        out.append((width, torch.float32, False, True, False))
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
        for residual in (False, True):
            for grad in (False, True):
                out.append((32, dtype, residual, grad, grad and residual))
    return out


def _run_pattern(norm, width, dtype, residual, grad, retain_graph, backend):
    torch.manual_seed(width)
    x = torch.randn(6, 5, width, dtype=dtype)
    r = torch.randn(6, 5, width, dtype=dtype) if residual else None
    if norm == "rms":
        module = normlab.RMSNorm(width, backend=backend, dtype=dtype)
        reference = lambda x, r, w: rms_norm_reference(x, w, module.eps, residual=r)  # noqa: E731
        params = [module.weight]
    else:
        module = normlab.LayerNorm(width, backend=backend, dtype=dtype)
        reference = lambda x, r, w, b: layer_norm_reference(x, w, b, module.eps, residual=r)  # noqa: E731
        params = [module.weight, module.bias]
    with torch.no_grad():
        for p in params:
            p.add_(0.1 * torch.randn_like(p))
    x.requires_grad_(grad)
    context = torch.enable_grad() if grad else torch.no_grad()
    with context:
        out = module(x) if r is None else module(x, r)
    y = out if r is None else out[0]
    assert y.dtype == dtype
    x64 = x.detach().double().requires_grad_(grad)
    p64 = [p.detach().double().requires_grad_(grad) for p in params]
    out64 = reference(x64, None if r is None else r.double(), *p64)
    y64 = out64 if r is None else out64[0]
    assert _error(y, y64) < TOLERANCE[dtype]
    if not grad:
        assert not y.requires_grad
        return
    upstream = torch.randn_like(y64)
    loss = (y.double() * upstream).sum()
    first = torch.autograd.grad(loss, [x] + params, retain_graph=retain_graph)
    if retain_graph:  # a second backward through the same graph (AOT-autograd's donated buffers refused this)
        second = torch.autograd.grad(loss, [x] + params)
        for a, b in zip(first, second):
            assert torch.equal(a, b)
    expected = torch.autograd.grad((y64 * upstream).sum(), [x64] + p64)
    for got, want in zip(first, expected):
        assert _error(got, want) < 4 * TOLERANCE[dtype]


@pytest.mark.parametrize("backend", ("compile", "auto"))
def test_many_call_patterns_never_fail_or_fall_back(backend, monkeypatch):
    if backend == "auto":
        monkeypatch.setattr(functional, "AUTO_CPU_COMPILE_MIN_NUMEL", 0)  # small shapes, compiled path
    calls = []
    original = functional._run_compiled
    monkeypatch.setattr(functional, "_run_compiled", lambda *args: calls.append(args[0]) or original(*args))
    kernel = cpu.cpp_rms_norm
    monkeypatch.setattr(cpu, "cpp_rms_norm", lambda x, *args: calls.append(("cpp", x.dtype)) or kernel(x, *args))
    patterns = _patterns()
    assert len(set(patterns)) >= 16
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # auto's fallback warning, dynamo's recompile warnings
        for pattern in patterns:
            _run_pattern("rms", *pattern, backend)
        for pattern in patterns[::3]:
            _run_pattern("layer", *pattern, backend)
    # Every RMSNorm call went through the compiled path; on auto, float32/float64 take the CPU kernel instead
    # (LayerNorm's auto is native on CPU).
    rms_calls = [call for call in calls if call != "layer"]
    kernel_dtypes = {call[1] for call in rms_calls if call != "rms"}
    assert len(rms_calls) == len(patterns)
    assert kernel_dtypes == (set() if backend == "compile" else {torch.float32, torch.float64})
    assert not functional._compile_failures


def test_each_signature_has_its_own_compiled_function():
    before = compiled.signatures_compiled()
    x = torch.randn(4, 12, dtype=torch.float16)
    normlab.rms_norm(x, torch.ones(12, dtype=torch.float16), eps=3e-4, backend="compile")
    normlab.rms_norm(x, torch.ones(12, dtype=torch.float16), eps=3e-4, backend="compile")  # same signature: cached
    assert compiled.signatures_compiled() == before + 1


def test_auto_warns_naming_what_failed_and_only_for_that_signature(monkeypatch):
    monkeypatch.setattr(functional, "AUTO_CPU_COMPILE_MIN_NUMEL", 0)
    monkeypatch.setattr(functional, "_compile_failures", {})
    original = functional._run_compiled

    def broken(kind, x, *args):
        if x.dtype == torch.float64:
            raise RuntimeError("no C++ compiler for this test")
        return original(kind, x, *args)

    monkeypatch.setattr(functional, "_run_compiled", broken)
    x = torch.randn(3, 16, dtype=torch.float64)
    with pytest.warns(UserWarning, match=r"failed to compile the rms norm .*float64.*no C\+\+ compiler for this test"):
        y = normlab.rms_norm(x, torch.ones(16, dtype=torch.float64), partial=0.5)
    assert _error(y, rms_norm_reference(x, torch.ones(16, dtype=torch.float64), partial=0.5)) < 1e-12
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        normlab.rms_norm(x, torch.ones(16, dtype=torch.float64), partial=0.5)  # warned once
        normlab.rms_norm(x.float(), torch.ones(16), partial=0.5)  # another signature still compiles
