"""The quality chapter's sizes per profile (`PROFILES`), checked by `settings_for`, and its trainer."""

from __future__ import annotations

from normlab.runtime.profiles import lookup_profile
from normlab.study import design

NORMS = ("layer", "rms")


# One trainer: the pool, one training per worker process (or per GPU). A vmapped trainer that trained K models as one
# (normlab.gpt.batched, removed 2026-12-05) measured 0.99-1.07x the pool and no profile selected it.
TRAINERS = ("pool",)
CPU_TRAINER = "pool"


# The paired seeds (or chunks, repeats) per profile: registered in data/design.toml, their one home, read from it
# when a profile is looked up (`lookup_profile`), not when this module is imported.
REGISTERED_SEEDS = design.pairs_at_lookup("quality:seeds")

PROFILES = {
    # seconds: proves the pipeline, not the claims
    "smoke": dict(
        width=32,
        depth=2,
        heads=4,
        context=32,
        batch_size=8,
        steps=30,
        lr=1e-2,
        warmup_steps=5,
        seeds=REGISTERED_SEEDS,
        first_seed=1000,
        eval_batches=4,
        timing_repeats=5,
        minilm_texts=4,
        trainer=CPU_TRAINER,
        # a tiny ladder around the chapter's own size (41.8k parameters): proves the path in seconds
        ladder=(dict(width=16, depth=1, heads=2, seeds=2), dict(width=48, depth=2, heads=4, seeds=2)),
    ),
    # 2 cores: A9's registered confirmation, 19 fresh pairs (seeds 1000-1018) x 600 steps, two single-threaded
    # trainings at a time. The pilot (seeds 0-23, grown from 6 to 12 to 24 pairs after inconclusive looks) is not
    # retrained: its committed build is shown beside the confirmation, which alone decides (data/design.toml).
    "cpu": dict(
        width=64,
        depth=4,
        heads=4,
        context=64,
        batch_size=16,
        steps=600,
        lr=5e-3,
        warmup_steps=60,
        seeds=REGISTERED_SEEDS,
        first_seed=1000,
        eval_batches=8,
        timing_repeats=15,
        minilm_texts=32,
        trainer=CPU_TRAINER,
        # The chapter's own size (235k parameters) is the ladder's top rung; 15k spans 16x below it. A 669k rung
        # (width 112, depth 4, 4 pairs) stood above it until 2026-12-08: it cost about 4 minutes of the 45-minute
        # build, and at 4 pairs its 95% interval's half-width (0.069 nats per byte at e3911fe) was 3.4 times the
        # ±0.02 margin, too wide to move the trend's reading (data/design.toml's change log, 2026-12-08).
        ladder=(dict(width=16, depth=2, heads=2, seeds=6),),
    ),
    # one run per GPU, on one H200 (batch 8 x context 128 is the cpu profile's 1024 tokens a step)
    "gpu": dict(
        width=256,
        depth=8,
        heads=4,
        context=128,
        batch_size=8,
        steps=2000,
        lr=2e-3,
        warmup_steps=100,
        seeds=REGISTERED_SEEDS,
        first_seed=0,  # the GPU design's pairs were fixed before any look: no pilot, no confirmation
        eval_batches=20,
        timing_repeats=50,
        minilm_texts=64,
        trainer="pool",  # one run per GPU
        ladder=(dict(width=128, depth=4, heads=4, seeds=8), dict(width=768, depth=12, heads=12, seeds=4)),
    ),
}


PAIRS = {"seeds": 5}  # the least pairs for a paired verdict outside the smoke profile


def settings_for(profile: str, overrides: dict | None = None) -> dict:
    """The chapter's sizes for `profile` with `overrides` applied, checked: a clear ValueError for a profile or a
    size that cannot work."""
    settings = lookup_profile(PROFILES, profile, owner="the quality chapter", overrides=overrides, minimum_pairs=PAIRS)
    if settings["width"] % settings["heads"]:
        raise ValueError(f"heads must divide width for profile {profile!r}: {settings}")
    if settings["trainer"] not in TRAINERS:
        raise ValueError(f"trainer must be one of {TRAINERS} for profile {profile!r}, got {settings['trainer']!r}")
    for rung in settings["ladder"]:
        if rung["width"] % rung["heads"] or (rung["width"] // rung["heads"]) % 2:
            raise ValueError(f"ladder rung {rung}: heads must divide width into an even head size (RoPE)")
        if rung["seeds"] < (2 if profile == "smoke" else 3):
            raise ValueError(f"ladder rung {rung}: a paired interval needs at least 3 pairs outside the smoke profile")
    return settings
