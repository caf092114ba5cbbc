"""The benchmark grids: which cases each profile times, and the checks on what a caller asks for.

Profiles:
    smoke  tiny sizes, seconds; used by the tests and the smoke build.
    cpu    the full CPU study, under 5 minutes on 2 cores.
    gpu    the full GPU study, under 8 minutes on one H200.

Each profile is a set of studies; a study is a grid of cases that answers one
question (the LN/RMS ratio across d, small-batch latency, pRMSNorm, ...).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from normlab.bench.timing import TimingSettings

PROFILES = ("smoke", "cpu", "gpu")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
STUDIES = ("sweep", "backward", "small-batch", "partial", "chunked")
PAPER_PARTIAL = 0.0625  # pRMSNorm's p = 6.25%, the setting Zhang & Sennrich (2019) used


@dataclass(frozen=True)
class Profile:
    name: str
    device: str
    train_rows: int  # the training-like batch (rows = batch x sequence)
    sweep_d: tuple[int, ...]  # row lengths for the forward LN/RMS ratio across d
    sweep_dtypes: tuple[str, ...]
    backward_d: tuple[int, ...]
    backward_dtypes: tuple[str, ...]
    small_rows: tuple[int, ...]  # inference batches (latency bound)
    small_d: tuple[int, ...]
    small_dtypes: tuple[str, ...]
    partial_d: tuple[int, ...]
    chunked_d: tuple[int, ...]  # rows too long for one program: the chunked kernels
    chunked_rows: int
    timing: TimingSettings
    # backend -> (studies it is timed in, why not elsewhere); absent: timed everywhere
    limited: dict = field(default_factory=dict)
    # dtype -> largest d timed in the sweep / the backward study (bf16 on CPU is slow to emulate)
    dtype_max_d: dict = field(default_factory=dict)
    backward_dtype_max_d: dict = field(default_factory=dict)
    # the sweep keeps rows x d at most this (None: no cap), so the longest rows fit the profile's time
    max_elements: int | None = None
    # other libraries' norms (normlab.bench.peers) timed beside normlab's in the sweep, backward and small-batch studies
    peers: tuple[str, ...] = ()

    def sweep_rows(self, d: int) -> int:
        if self.max_elements is None:
            return self.train_rows
        return max(1, min(self.train_rows, self.max_elements // d))


_COMPILE_BUDGET = (
    "torch.compile builds a new graph per dtype and direction (seconds each on 2 cores), "
    "which this profile's time budget cannot afford"
)

PROFILE_SETTINGS = {
    "smoke": Profile(
        name="smoke",
        device="cpu",
        train_rows=256,
        sweep_d=(256, 1024),
        sweep_dtypes=("float32", "bfloat16"),
        backward_d=(256,),
        backward_dtypes=("float32",),
        small_rows=(1, 16),
        small_d=(256,),
        small_dtypes=("float32",),
        partial_d=(1024,),
        chunked_d=(4096,),
        chunked_rows=64,
        timing=TimingSettings(
            warmup=1,
            min_repeats=5,
            max_repeats=7,
            budget_s=0.01,
            min_repeat_s=1e-3,
            rotation_bytes=1 << 20,
            max_buffers=4,
        ),
        limited={"compile": ((), _COMPILE_BUDGET)},
        dtype_max_d={"bfloat16": 256},
    ),
    "cpu": Profile(
        name="cpu",
        device="cpu",
        train_rows=8192,
        sweep_d=(256, 1024, 4096, 16384),
        sweep_dtypes=("float32", "bfloat16"),
        backward_d=(256, 1024),
        backward_dtypes=("float32", "bfloat16"),
        small_rows=(1, 16),
        small_d=(4096,),
        small_dtypes=("float32", "bfloat16"),
        partial_d=(4096,),
        chunked_d=(65536,),
        chunked_rows=1024,
        timing=TimingSettings(
            warmup=1,
            # 0.5 s until 2026-12-08, most of the study's time: an A/B/A/B run of the torch, cpp and reference cases
            # here (77 cases) found no shift at 0.1 s beyond the drift between two runs at the same setting (median
            # log ratios 0.1 s / 0.5 s -0.06 and +0.13, 0.5 s / 0.5 s +0.04, 0.1 s / 0.1 s +0.29), and 40% less time
            warmup_s=0.1,
            min_repeats=3,
            max_repeats=25,
            budget_s=0.3,
            min_repeat_s=2e-3,
            rotation_bytes=64 << 20,
            max_buffers=32,
        ),
        # bf16 arithmetic is emulated on this CPU (several times slower than fp32), so it gets the short rows
        dtype_max_d={"bfloat16": 1024},
        backward_dtype_max_d={"bfloat16": 256},
        max_elements=8192 * 4096,
    ),
    "gpu": Profile(
        name="gpu",
        device="cuda",
        train_rows=8192,
        sweep_d=(256, 1024, 4096, 8192, 16384, 32768, 65536),
        sweep_dtypes=("float32", "bfloat16"),
        backward_d=(1024, 4096, 16384),
        backward_dtypes=("float32", "bfloat16"),
        small_rows=(1, 16),
        small_d=(4096,),
        small_dtypes=("float32", "bfloat16"),
        partial_d=(4096, 16384),
        chunked_d=(16384, 65536),
        chunked_rows=4096,
        timing=TimingSettings(
            warmup=5,
            warmup_s=0.02,
            min_repeats=10,
            max_repeats=50,
            budget_s=0.15,
            min_repeat_s=1e-3,
            rotation_bytes=512 << 20,
            max_buffers=16,
        ),
        peers=("liger",),
    ),
}


def check_choice(name: str, value, valid) -> None:
    if value not in valid:
        raise ValueError(f"unknown {name} {value!r}; valid {name}s: {', '.join(map(str, valid))}")


def get_profile(name: str, *, backends=None, dtypes=None) -> tuple[Profile, tuple[str, ...] | None]:
    """The profile's settings, narrowed to `dtypes` if given; unknown names fail with the valid lists."""
    check_choice("profile", name, PROFILES)
    profile = PROFILE_SETTINGS[name]
    if dtypes is not None:
        for dtype in dtypes:
            check_choice("dtype", dtype, tuple(DTYPES))
        keep = lambda chosen: tuple(d for d in chosen if d in dtypes)  # noqa: E731
        profile = replace(
            profile,
            sweep_dtypes=keep(profile.sweep_dtypes),
            backward_dtypes=keep(profile.backward_dtypes),
            small_dtypes=keep(profile.small_dtypes),
        )
    if backends is not None:
        from normlab import BACKENDS
        from normlab.bench.peers import PEERS

        for backend in backends:
            check_choice("backend", backend, (*BACKENDS, *PEERS))
        backends = tuple(backends)
    return profile, backends
