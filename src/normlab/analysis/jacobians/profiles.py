"""The Jacobians chapter's sizes per profile (`PROFILES`), checked by `profile_settings`."""

from __future__ import annotations

from normlab.runtime.profiles import lookup_profile

PROFILES = {
    # dims: feature sizes checked; tokens: random tokens per size; scales: points in the 1/r sweep;
    # fit_tokens/fit_steps: the B14 gain-fitting experiment.
    "smoke": {
        "dims": [8, 32],
        "tokens": 4,
        "scales": 9,
        "eps_points": 7,
        "fit_tokens": 256,
        "fit_steps": 150,
        "gain_trials": 24,
    },
    "cpu": {
        "dims": [8, 64, 256],
        "tokens": 24,
        "scales": 33,
        "eps_points": 25,
        "fit_tokens": 4096,
        "fit_steps": 400,
        "gain_trials": 2000,
    },
    "gpu": {
        "dims": [8, 64, 256, 512],
        "tokens": 32,
        "scales": 33,
        "eps_points": 25,
        "fit_tokens": 8192,
        "fit_steps": 400,
        "gain_trials": 4000,
    },
}


def profile_settings(profile: str, overrides: dict | None = None) -> dict:
    """The chapter's settings for `profile` with `overrides` applied, checked: dims are ints >= 4, every count an
    int >= 2."""
    chosen = lookup_profile(PROFILES, profile, owner="the jacobians chapter", overrides=overrides)
    if not (chosen["dims"] and all(isinstance(d, int) and d >= 4 for d in chosen["dims"])):
        raise ValueError(f"dims must be a non-empty list of ints >= 4, got {chosen['dims']}")
    for key in ("tokens", "scales", "eps_points", "fit_tokens", "fit_steps", "gain_trials"):
        if not (isinstance(chosen[key], int) and chosen[key] >= 2):
            raise ValueError(f"{key} must be an int >= 2, got {chosen[key]!r}")
    return chosen
