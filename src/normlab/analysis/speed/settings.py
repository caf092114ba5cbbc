"""The speed chapter's settings: the benchmark profile each chapter profile runs, and the check of its
thresholds."""

from __future__ import annotations

from normlab.runtime.profiles import lookup_profile

# chapter profile -> the benchmark profile it runs (normlab.bench.profiles)
PROFILES = {"smoke": dict(bench="smoke"), "cpu": dict(bench="cpu"), "gpu": dict(bench="gpu")}


def bench_profile(profile: str, overrides: dict | None = None) -> str:
    """The benchmark profile the chapter runs at `profile` (`overrides` may name another: bench=smoke)."""
    return lookup_profile(PROFILES, profile, owner="the speed chapter", overrides=overrides)["bench"]


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
