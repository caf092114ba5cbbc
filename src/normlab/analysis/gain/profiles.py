"""The gain chapter's sizes per profile, checked, and the small GPT's shape they give."""

from __future__ import annotations

from normlab.runtime.profiles import ReadAtLookup, lookup_profile
from normlab.study import design

# The paired seeds (or chunks, repeats) per profile: registered in data/design.toml, their one home, read from it
# when a profile is looked up (`lookup_profile`), not when this module is imported.
REGISTERED_SEEDS = design.pairs_at_lookup("gain:seeds")
PLACEMENT_SEEDS = design.pairs_at_lookup("gain:placement_seeds")  # V5's pairs

# V5's Peri-LN runs (section "Weight decay on input norms' gains against output norms'"): the decay sweep's sizes,
# trained with the compiled step on the CPU at every profile; seeds from first_seed on (0-4 ran B15's sweep, and 0 a
# timing run of V5 before its registration).
PLACEMENT = {
    "smoke": dict(width=32, depth=1, context=16, batch=4, steps=20, lr=3e-3, first_seed=100),
    "cpu": dict(width=48, depth=2, context=32, batch=8, steps=300, lr=3e-3, first_seed=100),
    "gpu": dict(width=48, depth=2, context=32, batch=8, steps=300, lr=3e-3, first_seed=100),
}


def _registered_count(name: str, *, per_profile: bool) -> ReadAtLookup:
    """V5's registered count `name` (per profile, or one for all), an int read when a profile is looked up."""

    def read(profile: str) -> int:
        value = design.value("V5", name)
        return int(value[profile] if per_profile else value)

    return ReadAtLookup(f"design.value('V5', {name!r})", read)


# V5's design registered 2026-12-07, the one that decides: the same Peri-LN GPT at the source's decay (λ_g = the
# matrices' own 0.1), longer runs and fresh seeds, all registered in data/design.toml ([claims.V5], source_*); the
# 2026-12-05 design above runs beside it, never pooled.
SOURCE_PAIRS = _registered_count("source_pairs", per_profile=True)
SOURCE_STEPS = _registered_count("source_steps", per_profile=True)
SOURCE_FIRST_SEED = _registered_count("source_first_seed", per_profile=False)
SOURCE_PLACEMENT = {
    profile: {**sizes, "steps": SOURCE_STEPS, "first_seed": SOURCE_FIRST_SEED} for profile, sizes in PLACEMENT.items()
}

PROFILES = {
    "smoke": dict(
        scan_norms=[0.5, 1, 2, 4],
        scan_steps=2,
        schedule_steps=20,
        equilibrium_steps=150,
        width=32,
        depth=1,
        context=16,
        batch=4,
        trained_steps=10,
        sweep_steps=20,
        lr=3e-3,
        gain_decays=[0.0, 30.0],
        seeds=REGISTERED_SEEDS,
        placement_seeds=PLACEMENT_SEEDS,
        placement=PLACEMENT["smoke"],
        source_placement=SOURCE_PLACEMENT["smoke"],
        source_placement_seeds=SOURCE_PAIRS,
        factors=[0.25, 0.5, 1, 2, 4],
        qk=dict(width=32, depth=1, context=16, batch=4, steps=3, lr=0.01),
    ),
    "cpu": dict(
        scan_norms=[0.5, 1, 2, 4, 8],
        scan_steps=4,
        schedule_steps=200,
        equilibrium_steps=1500,
        width=48,
        depth=2,
        context=32,
        batch=8,
        trained_steps=200,
        sweep_steps=300,
        lr=3e-3,
        gain_decays=[0.0, 1.0, 10.0, 30.0],
        seeds=REGISTERED_SEEDS,
        placement_seeds=PLACEMENT_SEEDS,
        placement=PLACEMENT["cpu"],
        source_placement=SOURCE_PLACEMENT["cpu"],
        source_placement_seeds=SOURCE_PAIRS,
        factors=[0.25, 0.5, 0.71, 1, 1.41, 2, 4],
        qk=dict(width=48, depth=2, context=32, batch=8, steps=20, lr=0.01),
    ),
    "gpu": dict(
        scan_norms=[0.25, 0.5, 1, 2, 4, 8],
        scan_steps=8,
        schedule_steps=500,
        equilibrium_steps=4000,
        width=256,
        depth=6,
        context=128,
        batch=32,
        trained_steps=1500,
        sweep_steps=1000,
        lr=1e-3,
        gain_decays=[0.0, 1.0, 10.0, 30.0],
        seeds=REGISTERED_SEEDS,
        placement_seeds=PLACEMENT_SEEDS,
        placement=PLACEMENT["gpu"],
        source_placement=SOURCE_PLACEMENT["gpu"],
        source_placement_seeds=SOURCE_PAIRS,
        factors=[0.25, 0.5, 0.71, 1, 1.41, 2, 4],
        # The law is exact at any size, and float64 runs on the CPU: the GPU profile keeps this study small.
        qk=dict(width=64, depth=2, context=64, batch=8, steps=40, lr=0.01),
    ),
}


PAIRS = {
    "seeds": 5,
    "placement_seeds": 5,
    "source_placement_seeds": 5,
}  # the least pairs for a paired verdict outside the smoke profile


def profile_settings(profile: str, overrides: dict | None = None) -> dict:
    """The chapter's sizes for one profile with `overrides` applied, checked: the paired decay sweep needs 5 pairs
    and an undecayed baseline."""
    settings = lookup_profile(PROFILES, profile, owner="the gain chapter", overrides=overrides, minimum_pairs=PAIRS)
    decays = settings["gain_decays"]
    if not decays or min(decays) < 0 or 0.0 not in decays:
        raise ValueError(f"gain_decays must be non-negative and include 0.0 (the baseline), got {decays!r}")
    settings["placement_step"] = design.training_step("V5", profile)  # the registered trainer; the reference at smoke
    return settings


def model_settings(settings: dict) -> dict:
    """The small GPT's shape (pre-LN unless a placement is added)."""
    return dict(context=settings["context"], width=settings["width"], depth=settings["depth"], heads=4)
