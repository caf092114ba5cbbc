"""The chapter's settings per profile (smoke, cpu, gpu), checked before anything is loaded."""

from __future__ import annotations

import torch

from normlab.runtime.profiles import lookup_profile
from normlab.study import design

# The paired seeds (or chunks, repeats) per profile: registered in data/design.toml, their one home, read from it
# when a profile is looked up (`lookup_profile`), not when this module is imported.
REGISTERED_LOSS_CHUNKS = design.pairs_at_lookup("realmodels:loss_chunks")
REGISTERED_REPEATS = design.pairs_at_lookup("realmodels:repeats")

PROFILES = {
    # A two-layer cut of SmolLM2 and a few dozen tokens: checks the whole chapter in about a minute.
    "smoke": dict(
        layers=2,
        stream_chunks=2,
        loss_chunks=REGISTERED_LOSS_CHUNKS,
        sweep_chunks=2,
        sweep_length=16,
        map_chunks=1,
        massive_length=16,
        length=32,
        batch=4,
        prompt=32,
        decode_steps=2,
        repeats=REGISTERED_REPEATS,
        hook_repeats=2,
        backends=["reference", "torch", "auto"],
        minilm_texts=8,
        gradient_chunks=2,  # V9's one backward pass (eager attention, weights frozen)
        gradient_length=32,
        device="cpu",
    ),
    "cpu": dict(
        layers=30,
        stream_chunks=8,
        loss_chunks=REGISTERED_LOSS_CHUNKS,
        sweep_chunks=4,
        sweep_length=64,
        map_chunks=1,
        massive_length=128,
        length=256,
        batch=4,
        prompt=512,
        decode_steps=8,
        repeats=REGISTERED_REPEATS,
        hook_repeats=3,
        backends=["reference", "torch", "compile", "auto"],
        minilm_texts=32,
        gradient_chunks=4,
        gradient_length=256,
        device="cpu",
    ),
    "gpu": dict(
        layers=30,
        stream_chunks=32,
        loss_chunks=REGISTERED_LOSS_CHUNKS,
        sweep_chunks=16,
        sweep_length=512,
        map_chunks=4,
        massive_length=512,
        length=512,
        batch=16,
        prompt=512,
        decode_steps=32,
        repeats=REGISTERED_REPEATS,
        hook_repeats=0,
        backends=["reference", "torch", "compile", "triton", "auto"],
        minilm_texts=64,
        gradient_chunks=16,
        gradient_length=512,
        device="cuda",
    ),
}


_POSITIVE = (
    "layers",
    "stream_chunks",
    "loss_chunks",
    "sweep_chunks",
    "sweep_length",
    "map_chunks",
    "massive_length",
    "length",
    "batch",
    "prompt",
    "decode_steps",
    "repeats",
    "gradient_chunks",
    "gradient_length",
)


def profile_settings(profile: str, overrides: dict | None = None) -> dict:
    """The chapter's settings for `profile` with `overrides` applied, checked: sizes positive, pairs where intervals
    need them, CUDA there."""
    settings = lookup_profile(PROFILES, profile, owner="the realmodels chapter", overrides=overrides)
    for key in _POSITIVE:
        if not isinstance(settings[key], int) or settings[key] <= 0:
            raise ValueError(f"{key} must be a positive int, got {settings[key]!r}")
    if settings["loss_chunks"] < 2 or settings["repeats"] < 2:
        raise ValueError("loss_chunks and repeats must be at least 2: the intervals and spreads need pairs")
    if settings["device"] == "cuda" and not torch.cuda.is_available():
        raise ValueError("the gpu profile needs CUDA; run with profile='cpu' on this machine")
    return settings
