"""The geometry chapter's batch and sweep sizes per profile, and how its sentences write a tolerance.

The chapter's random draws all come from one generator, in the order the sections run, so the sections must be
called in that order for the published numbers to repeat.
"""

from __future__ import annotations

import re

from normlab.runtime.profiles import lookup_profile

PROFILES = {
    # tokens/d: the random batch for formula and invariance checks; points: resolution of every sweep;
    # rank_tokens/rank_d: the batch whose output rank is measured.
    "smoke": {"tokens": 64, "d": 64, "points": 9, "rank_tokens": 256, "rank_d": 32},
    "cpu": {"tokens": 1024, "d": 256, "points": 31, "rank_tokens": 4096, "rank_d": 256},
    "gpu": {"tokens": 8192, "d": 512, "points": 41, "rank_tokens": 8192, "rank_d": 512},
}


def chapter_settings(profile: str, overrides: dict | None = None) -> dict:
    """The sizes of the chapter's batches and sweeps for a profile with `overrides` applied, checked."""
    settings = lookup_profile(PROFILES, profile, owner="the geometry chapter", overrides=overrides)
    for key, minimum in (("tokens", 8), ("d", 8), ("points", 5), ("rank_d", 4)):
        if not (isinstance(settings[key], int) and settings[key] >= minimum):
            raise ValueError(f"{key} must be an int >= {minimum}, got {settings[key]!r}")
    if settings["rank_tokens"] < 2 * settings["rank_d"]:
        raise ValueError(
            f"rank_tokens must be at least 2 * rank_d so the rank is not limited by the batch, got {settings}"
        )
    return settings


def short(value: float) -> str:
    """1e-06 written as 1e-6, the way the chapter's sentences write a tolerance."""
    return re.sub(r"e([+-])0*(\d)", r"e\1\2", f"{value:.0e}")
