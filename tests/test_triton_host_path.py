"""The triton backend's host path: what a call issues besides its kernels, and the launch cache.

The ATen-op tests stub the interpreter's kernels (as scripts/triton_host_overhead.py does), so what is
recorded is exactly what the Python host path issues: every ATen op the profiler sees, and every
kernel launch. On a GPU each ATen op that computes (zeros, fill_, sum, a cast) is a launch of its own.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import normlab
from normlab.norms import functional
from normlab.norms.backends.triton import custom_ops, launch, triton_layer_norm, triton_rms_norm

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not launch.INTERPRETED, reason="the stubbed host path needs Triton's interpreter")

# ATen ops that allocate, view or inspect: none of them launches a GPU kernel.
NO_LAUNCH_OPS = {
    "aten::empty",
    "aten::empty_strided",
    "aten::empty_like",
    "aten::new_empty",
    "aten::view",
    "aten::reshape",
    "aten::_reshape_alias",
    "aten::as_strided",
    "aten::alias",
    "aten::detach",
    "aten::contiguous",
    "aten::promote_types",
    "aten::result_type",
}
SMALL = dict(onchip_limit=64, chunk=32)  # rows of 100 go to the chunked kernels


@pytest.fixture
def launches(monkeypatch):
    """Kernel names launched; the kernels themselves do nothing (outputs stay uninitialised)."""
    from triton.runtime.interpreter import InterpretedFunction

    names = []
    monkeypatch.setattr(
        InterpretedFunction, "run", lambda self, *args, grid, warmup, **kw: names.append(self.fn.__name__)
    )
    return names


def aten_ops_issued(fn) -> set[str]:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        fn()
    return {event.name for event in profile.events() if event.name.startswith("aten::")}


def test_the_profile_sees_aten_work():
    # The check below can fail: an ATen reduction and a cast show up by name.
    x = torch.randn(4, 8)
    assert {"aten::sum", "aten::_to_copy"} <= aten_ops_issued(lambda: x.sum(0).to(torch.float16))


CASES = {
    "rms": lambda x, w, b, r: triton_rms_norm(x, w, residual=r),
    "rms, no weight": lambda x, w, b, r: triton_rms_norm(x, residual=r),
    "rms chunked": lambda x, w, b, r: triton_rms_norm(x, w, residual=r, **SMALL),
    "layer": lambda x, w, b, r: triton_layer_norm(x, w, b, residual=r),
    "layer, weight only": lambda x, w, b, r: triton_layer_norm(x, w, residual=r),
    "layer chunked": lambda x, w, b, r: triton_layer_norm(x, w, b, residual=r, **SMALL),
    # the public entry point, through the memo of plans (bias only where the case name asks for one)
    "functional rms": lambda x, w, b, r: normlab.rms_norm(x, w, residual=r, backend="triton"),
    "functional layer": lambda x, w, b, r: normlab.layer_norm(x, w, b, residual=r, backend="triton"),
}


@pytest.mark.parametrize("residual", ("none", "s used", "s unused", "only s"))
@pytest.mark.parametrize("case", CASES)
def test_forward_and_backward_issue_only_their_kernels(case, residual, launches):
    d = 100
    x, dy = torch.randn(6, d, requires_grad=True), torch.randn(6, d)
    weight = None if "no weight" in case else torch.randn(d, requires_grad=True)
    bias = torch.randn(d, requires_grad=True) if case in ("layer", "layer chunked", "functional layer") else None
    r = None if residual == "none" else torch.randn(6, d, requires_grad=True)
    leaves = [t for t in (x, weight, bias, r) if t is not None]
    outputs = {}

    def forward():
        out = CASES[case](x, weight, bias, r)
        outputs["y"], outputs["s"] = (out, None) if r is None else out

    def backward():
        used = {"none": ["y"], "s used": ["y", "s"], "s unused": ["y"], "only s": ["s"]}[residual]
        torch.autograd.grad([outputs[name] for name in used], leaves, [dy] * len(used), allow_unused=True)

    assert aten_ops_issued(forward) <= NO_LAUNCH_OPS
    assert len(launches) == 1 and "forward" in launches[0]
    launches.clear()
    assert aten_ops_issued(backward) <= NO_LAUNCH_OPS
    if residual == "only s":  # y's gradient is zero: ds passes through, and nothing is launched
        assert launches == []
        return
    reduces = weight is not None or bias is not None
    assert len(launches) == 1 + reduces and "backward" in launches[0]
    assert launches[1:] == (["sum_partials"] if reduces else [])


@pytest.mark.parametrize("kind", ("rms", "layer"))
@pytest.mark.parametrize("entry", ("kernels", "functional"))
def test_when_only_s_reaches_the_loss_x_and_the_residual_get_ds(kind, entry):
    x, r = (torch.randn(6, 40, dtype=torch.float64, requires_grad=True) for _ in range(2))
    weight = torch.randn(40, dtype=torch.float64, requires_grad=True)
    ds = torch.randn(6, 40, dtype=torch.float64)
    if entry == "functional":
        norm = normlab.rms_norm if kind == "rms" else normlab.layer_norm
        _, s = norm(x, weight, residual=r, backend="triton")
    else:
        _, s = (triton_rms_norm if kind == "rms" else triton_layer_norm)(x, weight, residual=r)
    dx, dr, dweight = torch.autograd.grad(s, (x, r, weight), ds, allow_unused=True)
    # the same as autograd through the plain sum s = x + r
    assert torch.equal(dx, ds) and torch.equal(dr, ds) and dweight is None


def test_autograd_keeps_the_statistics_on_ctx():
    x, weight = torch.randn(3, 8, requires_grad=True), torch.randn(8, requires_grad=True)
    y, s, mean_square = custom_ops.rms_norm_forward_call(x, weight, None, 1e-6, 0.0, True, 8, 64, 32)
    assert s is None and mean_square is None and y.requires_grad
    with torch.no_grad():  # no autograd: the launcher's statistics come back
        _, _, mean_square = custom_ops.rms_norm_forward_call(x, weight, None, 1e-6, 0.0, True, 8, 64, 32)
    assert mean_square.shape == (3,)


# ---------------------------------------------------------------- one process, many cases

# (kind, dtype, width, residual, weight, entry): alternated in one process, each also run in a fresh one.
# entry "kernels" calls triton_rms_norm / triton_layer_norm (with small limits past 64 features: the chunked
# kernels); "functional" calls normlab.rms_norm / layer_norm, through the memo of plans.
MIXED = [
    ("rms", "float32", 100, False, True, "kernels"),
    ("rms", "bfloat16", 48, True, True, "functional"),
    ("layer", "float16", 100, True, False, "kernels"),
    ("rms", "float32", 48, True, False, "functional"),
    ("layer", "float32", 130, False, True, "kernels"),
    ("rms", "bfloat16", 48, False, True, "functional"),
    ("layer", "bfloat16", 48, True, True, "functional"),
    ("rms", "float32", 48, True, True, "functional"),
]


def run_case(kind, dtype, width, residual, weight, entry="kernels"):
    """y and every gradient of one case, as lists of floats (exact: the dtypes here convert to float exactly)."""
    generator = torch.Generator().manual_seed(width)
    dtype = getattr(torch, dtype)
    make = lambda *shape: torch.randn(*shape, generator=generator).to(dtype).requires_grad_()  # noqa: E731
    x, w, b = make(5, width), make(width) if weight else None, make(width) if weight else None
    r, dy = make(5, width) if residual else None, torch.randn(5, width, generator=generator).to(dtype)
    limits = SMALL if width > 64 else {}
    if entry == "functional":
        out = (
            normlab.rms_norm(x, w, residual=r, backend="triton")
            if kind == "rms"
            else normlab.layer_norm(x, w, b, residual=r, backend="triton")
        )
    else:
        out = (
            triton_rms_norm(x, w, residual=r, **limits)
            if kind == "rms"
            else triton_layer_norm(x, w, b, residual=r, **limits)
        )
    y = out[0] if residual else out
    leaves = [t for t in (x, w, b if kind == "layer" else None, r) if t is not None]
    grads = torch.autograd.grad(y, leaves, dy)
    return [t.detach().double().flatten().tolist() for t in (y, *grads)]


def test_alternating_cases_match_fresh_processes():
    in_one_process = [run_case(*case) for case in MIXED + MIXED[::-1]]
    assert in_one_process[: len(MIXED)] == in_one_process[len(MIXED) :][::-1]
    program = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); import test_triton_host_path as t; "
        "print(json.dumps(t.run_case(*json.loads(sys.argv[2]))))"
    )
    env = dict(os.environ, TRITON_INTERPRET="1")
    for case, ours in zip(MIXED, in_one_process):
        done = subprocess.run(
            [sys.executable, "-c", program, str(REPO / "tests"), json.dumps(case)],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert json.loads(done.stdout.splitlines()[-1]) == ours, case


# ---------------------------------------------------------------- the memo of plans refuses what validation refuses

D = 16


def _bad_calls():
    """(name, call, error, what the message names): each differs from a memoised good call in one checked property."""
    x, w, r = torch.randn(4, D), torch.randn(D), torch.randn(4, D)
    return [
        (
            "residual of another shape",
            lambda: normlab.rms_norm(x, w, residual=torch.randn(3, D), backend="triton"),
            ValueError,
            "residual",
        ),
        (
            "x 1-D against a 2-D residual",
            lambda: normlab.rms_norm(x[0], w, residual=r, backend="triton"),
            ValueError,
            "residual",
        ),
        (
            "weight of another width",
            lambda: normlab.rms_norm(x, torch.randn(D + 1), backend="triton"),
            ValueError,
            "weight",
        ),
        ("weight 2-D", lambda: normlab.rms_norm(x, w[None], backend="triton"), ValueError, "weight"),
        (
            "weight on another device",
            lambda: normlab.rms_norm(x, torch.ones(D, device="meta"), backend="triton"),
            ValueError,
            "weight",
        ),
        ("eps a bool", lambda: normlab.rms_norm(x, w, True, backend="triton"), TypeError, "eps"),
        ("eps zero", lambda: normlab.rms_norm(x, w, 0.0, backend="triton"), ValueError, "eps"),
        ("offset without a weight", lambda: normlab.rms_norm(x, offset=1.0, backend="triton"), ValueError, "offset"),
        (
            "residual_in_fp32 not a bool",
            lambda: normlab.rms_norm(x, w, residual=r, residual_in_fp32=1, backend="triton"),
            TypeError,
            "residual_in_fp32",
        ),
        ("integer x", lambda: normlab.rms_norm(x.long(), w, backend="triton"), TypeError, "x"),
        (
            "layer: bias of another width",
            lambda: normlab.layer_norm(x, w, torch.randn(D - 1), backend="triton"),
            ValueError,
            "bias",
        ),
        (
            "layer: residual of another shape",
            lambda: normlab.layer_norm(x, w, residual=torch.randn(4, 1, D), backend="triton"),
            ValueError,
            "residual",
        ),
    ]


def test_a_memoised_kind_of_call_still_refuses_every_bad_call():
    x, w, r = torch.randn(4, D), torch.randn(D), torch.randn(4, D)
    functional._RMS_PLANS.clear()
    functional._LAYER_PLANS.clear()
    good = [
        lambda: normlab.rms_norm(x, w, residual=r, backend="triton"),
        lambda: normlab.rms_norm(x[0], w, residual=r[0], backend="triton"),
        lambda: normlab.rms_norm(x, w, backend="triton"),
        lambda: normlab.rms_norm(x, w, 1e-6, backend="triton"),
        lambda: normlab.rms_norm(x, w, 1.0, backend="triton"),
        lambda: normlab.rms_norm(x, backend="triton"),
        lambda: normlab.rms_norm(x, w, residual=r, residual_in_fp32=True, backend="triton"),
        lambda: normlab.layer_norm(x, w, w, backend="triton"),
        lambda: normlab.layer_norm(x, w, residual=r, backend="triton"),
    ]
    for call in good:
        call()
        call()  # the second through the memo
    # five kinds of RMSNorm call: 1-D x with a 1-D residual is the 2-D kind, eps=1e-6 the default one
    assert len(functional._RMS_PLANS) == 5 and len(functional._LAYER_PLANS) == 2
    kinds = (len(functional._RMS_PLANS), len(functional._LAYER_PLANS))
    for _name, call, error, argument in _bad_calls():
        with pytest.raises(error, match=rf"\b{argument}\b"):
            call()
    assert (len(functional._RMS_PLANS), len(functional._LAYER_PLANS)) == kinds  # no bad call got a plan


def test_the_memo_gives_what_the_full_path_gives(monkeypatch):
    torch.manual_seed(3)
    x, w, r = torch.randn(5, D), torch.randn(D), torch.randn(5, D, dtype=torch.float64)
    calls = [
        lambda: normlab.rms_norm(x, w, residual=r, backend="triton"),  # mixed dtypes: s in fp64, y in fp32
        lambda: normlab.rms_norm(x, w, offset=1.0, partial=0.5, eps_placement="outside", backend="triton"),
        lambda: normlab.layer_norm(x, w, w, residual=r, backend="triton"),
        lambda: normlab.rms_norm(x, w, residual=r, backend="torch"),
        lambda: normlab.layer_norm(x, w, backend="auto"),
    ]
    memoised = [[call(), call()][1] for call in calls]
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)  # the full path, as under torch.compile
    for call, ours in zip(calls, memoised):
        theirs = call()
        for a, b in zip(
            ours if isinstance(ours, tuple) else (ours,), theirs if isinstance(theirs, tuple) else (theirs,)
        ):
            assert a.dtype == b.dtype and torch.equal(a, b)


# ---------------------------------------------------------------- the compiled kernels' launch cache

CACHE_CHECK = r"""
import json, os, sys
os.environ.pop("TRITON_INTERPRET", None)
sys.argv.append("--compiled-launcher")  # the script's import-time switch: the interpreter off
sys.path.insert(0, sys.argv[1])
import torch
import triton_host_overhead
from normlab.norms.backends.triton import launch

triton_host_overhead.install_stand_in_driver()
launcher = launch.SUM_PARTIALS
kernel = launcher.kernel
report = []

def call(partial_dtype, out_dtype, programs, n, offset, block, has_bias):
    storage = torch.zeros(programs * n + offset, dtype=partial_dtype)
    partial = storage[offset:].view(programs, n)  # offset 1: an address not 16-byte aligned
    dw = torch.empty(n + offset, dtype=out_dtype)[offset:]
    args = (partial, partial, dw, dw, programs, n)
    flags = dict(HAS_WEIGHT=True, HAS_BIAS=has_bias, LINES=4, BLOCK=block, num_warps=1)
    launcher((1,), *args, **flags)
    launcher((1,), *args, **flags)  # the second call takes the direct route
    ours = launcher.compiled_for(*args, **flags)
    tritons = kernel.run(*args, grid=(1,), warmup=True, **flags)  # what JITFunction.run would launch
    report.append(ours is tritons)

for case in json.loads(sys.argv[2]):
    call(getattr(torch, case[0]), getattr(torch, case[1]), *case[2:])
print(json.dumps({"same": report, "compiled": len(launcher.compiled), "triton_kernels": len(kernel.device_caches[0][0])}))
"""


def test_launch_cache_picks_the_kernel_triton_would():
    """Compiled for sm_90 with the stand-in driver: per call, the cached kernel is JITFunction.run's own."""
    cases = [
        ("float32", "float32", 8, 64, 0, 32, False),
        ("float32", "bfloat16", 8, 64, 0, 32, False),  # the output's dtype
        ("float32", "float32", 8, 64, 1, 32, False),  # misaligned addresses
        ("float32", "float32", 8, 60, 0, 32, False),  # a width not divisible by 16
        ("float32", "float32", 1, 64, 0, 32, False),  # one program line: not specialised, same kernel
        ("float32", "float32", 8, 64, 0, 16, True),  # constexprs
        ("float64", "float64", 8, 64, 0, 32, False),
        ("float32", "float32", 8, 64, 0, 32, False),  # back to the first
    ]
    done = subprocess.run(
        [sys.executable, "-c", CACHE_CHECK, str(REPO / "scripts"), json.dumps(cases)],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"},
        timeout=600,
    )
    if done.returncode != 0 and "ptxas" in done.stderr:
        pytest.skip(f"no ptxas for sm_90 here: {done.stderr.strip().splitlines()[-1]}")
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["same"] == [True] * len(cases)
    # Six distinct kernels; the one-line call shares the first's (programs is not specialised).
    assert result["triton_kernels"] == 6 and result["compiled"] == 6
