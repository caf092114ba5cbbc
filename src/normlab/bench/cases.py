"""The cases a profile times, and the call each one makes.

A case is one implementation of one norm, at one shape, dtype and direction.
Implementations are discovered at run time from `normlab.BACKENDS` (and, for
the chunked LayerNorm statistics, from `normlab.norms.backends.triton`); one that cannot run on
the device becomes a skipped case with the reason, never a crash or a zero.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

import normlab
from normlab.bench import peers
from normlab.bench.profiles import DTYPES, PAPER_PARTIAL, Profile

# Backends whose every op is an ATen op the dispatch-mode tracer can see (a
# compiled graph must not run under a dispatch mode: dynamo refuses it).
TRACEABLE_BACKENDS = ("reference", "eager", "torch")


@dataclass(frozen=True)
class Case:
    study: str
    norm: str  # "layer", "rms" or "copy"
    implementation: str  # label in tables and figures
    backend: str | None
    direction: str  # "forward" or "forward+backward"
    dtype: str
    rows: int
    d: int
    mode: str = "alloc"  # "alloc": the call allocates its output; "into": writes a pre-allocated one
    options: tuple = field(default_factory=tuple)  # extra keyword arguments, as sorted (name, value) pairs

    @property
    def key(self) -> tuple:
        return (self.study, self.norm, self.implementation, self.direction, self.dtype, self.rows, self.d, self.mode)


def _norm_function(norm: str) -> Callable:
    return normlab.layer_norm if norm == "layer" else normlab.rms_norm


def api_has_out(norm: str) -> bool:
    return "out" in inspect.signature(_norm_function(norm)).parameters


# chunked LayerNorm statistics: our label -> the keyword normlab.norms.backends.triton.triton_layer_norm takes
CHUNKED_STATISTICS = {"two-pass": "two_pass", "welford": "welford"}


def chunked_layer_norm_api():
    """The kernels' LayerNorm entry point with a choice of chunked statistics, or (None, reason).

    `normlab.norms.backends.triton.triton_layer_norm(..., stats="two_pass" | "welford", onchip_limit=0)` forces the chunked
    kernel at any row length; see the note at the top of normlab/norms/backends/triton/__init__.py.
    """
    try:
        from normlab.norms.backends import triton
    except ImportError as error:
        return None, f"normlab.norms.backends.triton (the Triton kernels) cannot be imported here: {error}"
    function = getattr(triton, "triton_layer_norm", None)
    parameters = inspect.signature(function).parameters if function is not None else {}
    if "stats" not in parameters or "onchip_limit" not in parameters:
        return (
            None,
            "normlab.norms.backends.triton.triton_layer_norm has no stats=/onchip_limit= choice (two-pass vs Welford) to compare",
        )
    return function, tuple(CHUNKED_STATISTICS)


def build_cases(profile: Profile, backends: tuple[str, ...] | None = None) -> list[Case]:
    """The profile's cases; `backends` narrows normlab's backends and the profile's peers alike (None: all)."""
    peer_names = tuple(p for p in profile.peers if backends is None or p in backends)
    backends = tuple(b for b in normlab.BACKENDS if backends is None or b in backends)
    cases: list[Case] = []

    def norms_over(study, direction, dtype, rows, d):
        for norm in ("layer", "rms"):
            for backend in backends:
                cases.append(Case(study, norm, backend, backend, direction, dtype, rows, d, "alloc"))
                if direction == "forward":
                    cases.append(Case(study, norm, backend, backend, direction, dtype, rows, d, "into"))
            for peer in peer_names:  # a peer's own API allocates its output: "alloc" only
                cases.append(Case(study, norm, peer, peer, direction, dtype, rows, d, "alloc"))

    for dtype in profile.sweep_dtypes:
        for d in profile.sweep_d:
            if d <= profile.dtype_max_d.get(dtype, d):
                norms_over("sweep", "forward", dtype, profile.sweep_rows(d), d)
    for dtype in profile.backward_dtypes:
        for d in profile.backward_d:
            if d <= profile.backward_dtype_max_d.get(dtype, d):
                norms_over("backward", "forward+backward", dtype, profile.train_rows, d)
    for dtype in profile.small_dtypes:
        for d in profile.small_d:
            for rows in profile.small_rows:
                norms_over("small-batch", "forward", dtype, rows, d)
    for d in profile.partial_d:
        for backend in backends:
            for partial in (1.0, PAPER_PARTIAL):
                label = f"{backend} p={partial:.2%}" if partial < 1 else f"{backend} full"
                cases.append(
                    Case(
                        "partial",
                        "rms",
                        label,
                        backend,
                        "forward",
                        "float32",
                        profile.train_rows,
                        d,
                        "alloc",
                        (("partial", partial),),
                    )
                )
    for d in profile.chunked_d:
        for statistics in CHUNKED_STATISTICS:
            cases.append(
                Case(
                    "chunked",
                    "layer",
                    f"triton chunked {statistics}",
                    "triton",
                    "forward",
                    "float32",
                    profile.chunked_rows,
                    d,
                    "alloc",
                    (("statistics", statistics),),
                )
            )
        cases.append(
            Case("chunked", "rms", "triton chunked", "triton", "forward", "float32", profile.chunked_rows, d, "alloc")
        )
    return cases


def skip_reason(case: Case, profile: Profile, device: torch.device) -> str | None:
    """Why a case cannot be timed here, or None."""
    if case.backend in peers.PEERS:
        return peers.unavailable(case.backend, device)
    if case.backend in profile.limited:
        studies, why = profile.limited[case.backend]
        if case.study not in studies:
            return f"{case.backend} is not timed in the {case.study} study of the {profile.name} profile: {why}"
    if case.backend == "triton" and device.type != "cuda":
        return "Triton runs on CPU only in its interpreter, which is not a speed measurement; needs a GPU"
    if case.mode == "into" and not api_has_out(case.norm):
        name = "layer_norm" if case.norm == "layer" else "rms_norm"
        return f"normlab.{name} has no out= argument, so there is no into-preallocated call to time (copy_ is still reported)"
    if case.study == "chunked":
        function, detail = chunked_layer_norm_api()
        if function is None:
            return detail
    return None


@dataclass
class Prepared:
    call: Callable[..., object]
    input_sets: list[tuple]
    bytes_per_set: int


def make_inputs(case: Case, device: torch.device, generator: torch.Generator):
    """One set of inputs: x (and dy for the backward), with the parameters, drawn on the device itself."""
    dtype = DTYPES[case.dtype]

    def normal(*shape, scale=1.0, shift=0.0):
        values = torch.randn(*shape, generator=generator, device=device, dtype=torch.float32)
        return (values * scale + shift).to(dtype)

    x = normal(case.rows, case.d)
    weight = normal(case.d, scale=0.1, shift=1.0)
    bias = normal(case.d, scale=0.1) if case.norm == "layer" else None
    dy = normal(case.rows, case.d) if case.direction == "forward+backward" else None
    return x, weight, bias, dy


def make_call(case: Case) -> Callable:
    """The callable the timer runs; its arguments are one input set."""
    options = dict(case.options)
    if case.norm == "copy":
        return (lambda x, out: out.copy_(x)) if case.mode == "into" else (lambda x: x.clone())
    if case.study == "chunked":
        function, _ = chunked_layer_norm_api()
        if case.norm == "layer":
            stats = CHUNKED_STATISTICS[options["statistics"]]
            return lambda x, weight, bias: function(x, weight, bias, 1e-5, stats=stats, onchip_limit=0)
        from normlab.norms.backends.triton import triton_rms_norm

        return lambda x, weight: triton_rms_norm(x, weight, 1e-6, onchip_limit=0)
    if case.backend in peers.PEERS:
        return peers.peer_call(case.backend, case.norm, case.direction)
    norm = _norm_function(case.norm)
    backend = case.backend
    if case.direction == "forward":
        if case.norm == "layer":
            if case.mode == "into":
                return lambda x, weight, bias, out: norm(x, weight, bias, backend=backend, out=out)
            return lambda x, weight, bias: norm(x, weight, bias, backend=backend)
        if case.mode == "into":
            return lambda x, weight, out: norm(x, weight, backend=backend, out=out, **options)
        return lambda x, weight: norm(x, weight, backend=backend, **options)

    # forward+backward: gradients returned, not accumulated (accumulating would add a pass)
    if case.norm == "layer":

        def step(x, weight, bias, dy):
            y = norm(x, weight, bias, backend=backend)
            return torch.autograd.grad(y, (x, weight, bias), dy)
    else:

        def step(x, weight, dy):
            y = norm(x, weight, backend=backend, **options)
            return torch.autograd.grad(y, (x, weight), dy)

    return step


def prepare(case: Case, device: torch.device, buffers: int, seed: int = 0) -> Prepared:
    generator = torch.Generator(device=device).manual_seed(seed)
    sets = []
    for _ in range(buffers):
        x, weight, bias, dy = make_inputs(case, device, generator)
        if case.norm == "copy":
            sets.append((x, torch.empty_like(x)) if case.mode == "into" else (x,))
            continue
        if case.direction == "forward+backward":
            x.requires_grad_(True)
            weight.requires_grad_(True)
            if bias is not None:
                bias.requires_grad_(True)
        args = [x, weight] + ([bias] if case.norm == "layer" else [])
        if case.mode == "into":
            args.append(torch.empty_like(x))
        if dy is not None:
            args.append(dy)
        sets.append(tuple(args))
    per_set = sum(t.numel() * t.element_size() for t in sets[0] if isinstance(t, torch.Tensor))
    return Prepared(make_call(case), sets, per_set)


def copy_case(case: Case) -> Case:
    """The same-size copy a case is compared with: clone for an allocating call, copy_ for an into call."""
    return Case(
        case.study,
        "copy",
        "copy (copy_)" if case.mode == "into" else "copy (clone)",
        None,
        "forward",
        case.dtype,
        case.rows,
        case.d,
        case.mode,
    )
