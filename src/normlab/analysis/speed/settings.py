"""The speed chapter's settings: the benchmark profile each chapter profile runs, and the check of its
thresholds."""

from __future__ import annotations

from normlab.runtime.profiles import lookup_profile

# The target shapes compiled for sm_90 (section "Predicted from the compiled code"): both norms, forward and backward,
# plain and fused, at the training batch's rows. Smoke compiles d = 4096 in bf16 alone (8 configurations).
TARGET_SHAPES = dict(widths=[4096, 8192, 16384], dtypes=["bf16", "fp32"], flags=["plain", "fused"], rows=8192)
SMOKE_SHAPES = dict(TARGET_SHAPES, widths=[4096], dtypes=["bf16"])

# chapter profile -> the benchmark profile it runs (normlab.bench.profiles), and the shapes compiled for sm_90
PROFILES = {
    "smoke": dict(bench="smoke", compiled=SMOKE_SHAPES),
    "cpu": dict(bench="cpu", compiled=TARGET_SHAPES),
    "gpu": dict(bench="gpu", compiled=TARGET_SHAPES),
}


def bench_profile(profile: str, overrides: dict | None = None) -> str:
    """The benchmark profile the chapter runs at `profile` (`overrides` may name another: bench=smoke)."""
    return lookup_profile(PROFILES, profile, owner="the speed chapter", overrides=overrides)["bench"]


def compiled_shapes(profile: str, overrides: dict | None = None) -> dict:
    """The shapes the chapter compiles for sm_90 at `profile` (`overrides` may change them: compiled.widths=[8192])."""
    return lookup_profile(PROFILES, profile, owner="the speed chapter", overrides=overrides)["compiled"]


def check_thresholds(equal_time: float, extra_pass: float, welford_equal: float, memory_bound: float, worth_it: float):
    """Each of the chapter's thresholds is a fraction in (0, 1); the error names the chapter's constant."""
    named = {
        "EQUAL_TIME": equal_time,
        "EXTRA_PASS": extra_pass,
        "WELFORD_EQUAL": welford_equal,
        "MEMORY_BOUND": memory_bound,
        "WORTH_IT": worth_it,
    }
    for name, value in named.items():
        if not 0 < value < 1:
            raise ValueError(f"{name} must lie in (0, 1), got {value}")
