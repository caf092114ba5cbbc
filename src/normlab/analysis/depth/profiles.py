"""The depth chapter's sizes per profile (`PROFILES`), checked by `settings_for`, and the depth lists' check."""

from __future__ import annotations

import numpy as np

from normlab.runtime.profiles import lookup_profile
from normlab.study import design


def validate_depths(depths, name: str = "depths") -> list[int]:
    """A non-empty list of positive ints, sorted and deduplicated; anything else is a clear ValueError."""
    if isinstance(depths, (int, str)) or not hasattr(depths, "__iter__"):
        raise ValueError(f"{name} must be a list of positive ints such as [2, 4, 8], got {depths!r}")
    depths = list(depths)
    if not depths:
        raise ValueError(f"{name} is empty; give at least one positive depth, e.g. [2, 4, 8]")
    bad = [d for d in depths if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d <= 0]
    if bad:
        raise ValueError(f"{name} must hold positive ints only; these are not: {bad!r}")
    return sorted({int(d) for d in depths})


# The paired seeds (or chunks, repeats) per profile: registered in data/design.toml, their one home, read from it
# when a profile is looked up (`lookup_profile`), not when this module is imported.
REGISTERED_SEEDS = design.pairs_at_lookup("depth:seeds")
REGISTERED_ABLATION_SEEDS = design.pairs_at_lookup("depth:ablation_seeds")
REGISTERED_FINAL_NORM_SEEDS = design.pairs_at_lookup("depth:final_norm_seeds")
# V8's registered confirmation (data/design.toml, [claims.V8.confirmation]) trains fresh seeds from here; the gpu
# profile has no confirmation and trains its pairs from seed 0
FINAL_NORM_FIRST_SEED = design.first_seed_at_lookup("V8")

PROFILES = {
    "smoke": dict(
        init_depths=[1, 2, 4],
        init_width=32,
        init_context=16,
        init_batch=2,
        init_seeds=[0],
        deep=2,
        width=32,
        context=16,
        batch=4,
        steps=20,
        lr=3e-3,
        warmup=4,
        stress_lrs=[3e-2],
        seeds=REGISTERED_SEEDS,
        ablation_seeds=REGISTERED_ABLATION_SEEDS,
        ablation_first_seed=1000,
        ablation_depth=1,
        ablation_steps=20,
        final_norm_seeds=REGISTERED_FINAL_NORM_SEEDS,
        final_norm_first_seed=FINAL_NORM_FIRST_SEED,
    ),
    # 2 cores: pre/post x RMS/Layer at depth 12 (5 pairs), a no-warm-up sweep, the ablation. The ablation is B19's
    # registered confirmation: 23 fresh seeds (1000-1022), sized from the pilot's spread (seeds 0-13, grown from 5
    # after a look; data/design.toml), whose committed build is shown beside it and decides nothing.
    "cpu": dict(
        init_depths=[2, 4, 8, 16, 32],
        init_width=48,
        init_context=32,
        init_batch=4,
        init_seeds=[0, 1],
        deep=12,
        width=32,
        context=32,
        batch=8,
        steps=300,
        lr=3e-3,
        warmup=30,
        stress_lrs=[1e-2, 3e-2],
        seeds=REGISTERED_SEEDS,
        ablation_seeds=REGISTERED_ABLATION_SEEDS,
        ablation_first_seed=1000,
        ablation_depth=4,
        ablation_steps=300,
        final_norm_seeds=REGISTERED_FINAL_NORM_SEEDS,
        final_norm_first_seed=FINAL_NORM_FIRST_SEED,
    ),
    "gpu": dict(
        init_depths=[2, 4, 8, 16, 32, 64, 128],
        init_width=256,
        init_context=128,
        init_batch=16,
        init_seeds=[0, 1, 2],
        deep=24,
        width=256,
        context=128,
        batch=32,
        steps=1000,
        lr=1e-3,
        warmup=100,
        stress_lrs=[3e-3, 1e-2],
        seeds=REGISTERED_SEEDS,
        ablation_seeds=REGISTERED_ABLATION_SEEDS,
        ablation_first_seed=0,  # the GPU design's seeds were fixed before any look
        ablation_depth=8,
        ablation_steps=1000,
        final_norm_seeds=REGISTERED_FINAL_NORM_SEEDS,
        final_norm_first_seed=0,
    ),
}


# the least pairs for a paired verdict outside the smoke profile (V8's confirmation decides on every one of its
# registered pairs, never on fewer)
PAIRS = {"seeds": 5, "ablation_seeds": 5, "final_norm_seeds": 4}


def settings_for(profile: str, overrides: dict | None = None) -> dict:
    """The chapter's sizes for `profile` with `overrides` applied, checked: a clear ValueError for a profile or a
    size that cannot work."""
    settings = lookup_profile(PROFILES, profile, owner="the depth chapter", overrides=overrides, minimum_pairs=PAIRS)
    settings["init_depths"] = validate_depths(settings["init_depths"], "init_depths")
    validate_depths([settings["deep"], settings["ablation_depth"]], "deep/ablation_depth")
    settings["final_norm_step"] = design.training_step("V8", profile)  # the registered trainer; the reference at smoke
    return settings
