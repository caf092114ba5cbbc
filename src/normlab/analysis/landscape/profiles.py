"""The chapter's profiles (model sizes, grids, seeds per profile), its variants and their recipes, and
`profile_settings`, which checks a profile against what the chapter's design needs.
"""

from __future__ import annotations

import math

from normlab.norms.dyt import authors_alpha_init
from normlab.runtime.profiles import lookup_profile
from normlab.study import design

# The paired seeds (or chunks, repeats) per profile: registered in data/design.toml, their one home, read from it
# when a profile is looked up (`lookup_profile`), not when this module is imported.
REGISTERED_SEEDS = design.pairs_at_lookup("landscape:seeds")
REGISTERED_QK_SEEDS = design.pairs_at_lookup("landscape:qk_seeds")
REGISTERED_DERF_SEEDS = design.pairs_at_lookup("landscape:derf_seeds")
REGISTERED_REGIME_SEEDS = design.pairs_at_lookup("landscape:regime_seeds")
# V4's registered confirmation (data/design.toml, [claims.V4.confirmation]): its pairs and fresh seeds; the gpu
# profile has no confirmation and trains its pairs from seed 0
REGISTERED_V4_SEEDS = design.pairs_at_lookup("landscape:v4_seeds")
V4_FIRST_SEED = design.first_seed_at_lookup("V4")
# V7's seeds start here: its registration logged timing runs on seeds 0 and 1, which are not reused
DERF_SEED_BASE = 200
# V6's seeds start here, apart from every other design's. Its first design (registered 2026-12-05: token budgets of
# 6, 35 and 200 steps) trained seeds 600-602; its second (registered 2026-12-07: training-set sizes at fixed steps, as
# Verma ran it) starts at 700, so that no run of the first is reused or pooled; seeds 690-691 were trial runs of the
# second design before its registration (its change-log entry), never reused
REGIME_SEED_BASE = 700

PROFILES = {
    # seconds: proves the pipeline, not the claims
    "smoke": dict(
        small=dict(width=16, depth=2, heads=2, context=16),
        small_train=dict(steps=20, batch_size=4, warmup_steps=2, lr=1e-2),
        lr_grid=[1e-2, 1e-1],
        qk_lr_grid=[1e-2, 1e-1, 1.0],
        qk_seeds=REGISTERED_QK_SEEDS,
        seeds=REGISTERED_SEEDS,
        grid_seeds=1,
        deep_grid_seeds=1,
        alphas=[0.2, 0.8],
        alpha_widths=[16, 32],
        deep=dict(width=16, depth=3, heads=2, context=16),
        deep_train=dict(steps=20, batch_size=4, warmup_steps=2, lr=1e-2),
        deep_lr_grid=[1e-2, 1e-1],
        deepest=dict(width=16, depth=4, heads=2, context=16),
        deepest_train=dict(steps=20, batch_size=4, warmup_steps=2, lr=1e-2),
        timing_repeats=3,
        # V7 (Derf): V1's small model and steps, trained with the compiled trainer, which runs on the CPU
        derf=dict(
            model=dict(width=16, depth=2, heads=2, context=16),
            train=dict(steps=20, batch_size=4, warmup_steps=2, lr=1e-2),
        ),
        derf_seeds=REGISTERED_DERF_SEEDS,
        # V6 (DyT's regime, as Verma ran it): a fixed number of steps, the training set a prefix of these sizes
        regime_steps=20,
        regime_sizes=[40, 160, 1000],
        regime_seeds=REGISTERED_REGIME_SEEDS,
        v4_seeds=REGISTERED_V4_SEEDS,
        v4_first_seed=V4_FIRST_SEED,
        workers=None,
        devices=None,
    ),
    # 2 CPU cores: sized for under 14 minutes before V3's wide grid (2026-12-03) added 52 small runs on a quiet machine, both cores busy with one-thread runs (86 runs:
    # 68 measured about 7 minutes' worth; the DyT variants of V1 add 18 of the cheapest, small runs, about 25
    # seconds of one core each; a first sizing with 96 runs at 200-250 steps and 24 blocks measured about 15
    # minutes' worth)
    "cpu": dict(
        small=dict(width=64, depth=4, heads=4, context=64),
        small_train=dict(steps=200, batch_size=16, warmup_steps=20, lr=5e-3),
        lr_grid=[5e-3, 1.5e-2, 5e-2, 1.5e-1],
        # V3 under Wortsman et al.'s protocol: half-decade steps from 1.5e-3 to 1.5 (the design's lr_range and
        # lr_step), every point on qk_seeds seeds, without and with QK-norm only
        qk_lr_grid=[1.5e-3, 5e-3, 1.5e-2, 5e-2, 1.5e-1, 5e-1, 1.5],
        qk_seeds=REGISTERED_QK_SEEDS,
        seeds=REGISTERED_SEEDS,
        grid_seeds=2,
        deep_grid_seeds=1,
        alphas=[0.05, 0.2, 0.8],
        alpha_widths=[32, 64],
        deep=dict(width=32, depth=12, heads=4, context=64),
        deep_train=dict(steps=150, batch_size=16, warmup_steps=15, lr=5e-3),
        deep_lr_grid=[5e-3, 1.5e-2, 5e-2],
        deepest=dict(width=32, depth=16, heads=4, context=64),
        deepest_train=dict(steps=150, batch_size=16, warmup_steps=15, lr=5e-3),
        timing_repeats=15,
        derf=dict(
            model=dict(width=64, depth=4, heads=4, context=64),
            train=dict(steps=200, batch_size=16, warmup_steps=20, lr=5e-3),
        ),
        derf_seeds=REGISTERED_DERF_SEEDS,
        # V6 (registered 2026-12-07, data/design.toml): 120 steps of V1's batch (122,880 bytes), the training set a
        # prefix of 750, 7,500 and 88,000 bytes: 164, 16.4 and 1.40 passes, Verma's over WikiText-103's 1M and 10M
        # subsets and its full 118M tokens at 5,000 steps of 64 x 512 tokens
        regime_steps=120,
        regime_sizes=[750, 7_500, 88_000],
        regime_seeds=REGISTERED_REGIME_SEEDS,
        v4_seeds=REGISTERED_V4_SEEDS,
        v4_first_seed=V4_FIRST_SEED,
        workers=None,
        devices=None,
    ),
    # one H200, with eight one-thread worker processes sharing the GPU when the chapter itself trains it
    "gpu": dict(
        small=dict(width=256, depth=6, heads=4, context=128),
        small_train=dict(steps=400, batch_size=8, warmup_steps=40, lr=3e-3),
        lr_grid=[1e-3, 3e-3, 1e-2, 3e-2, 1e-1],
        # V3 under Wortsman et al.'s protocol: the design's wide grid (lr_range 1.5e-3..1.5, half-decade steps) on
        # qk_seeds seeds, without and with QK-norm
        qk_lr_grid=[1.5e-3, 5e-3, 1.5e-2, 5e-2, 1.5e-1, 5e-1, 1.5],
        qk_seeds=REGISTERED_QK_SEEDS,
        seeds=REGISTERED_SEEDS,
        grid_seeds=2,
        deep_grid_seeds=2,
        deep=dict(width=128, depth=24, heads=4, context=128),
        deep_train=dict(steps=300, batch_size=8, warmup_steps=30, lr=3e-3),
        deep_lr_grid=[1e-3, 3e-3, 1e-2],
        deepest=dict(width=128, depth=32, heads=4, context=128),
        deepest_train=dict(steps=300, batch_size=8, warmup_steps=30, lr=3e-3),
        alphas=[0.05, 0.1, 0.2, 0.4, 0.8],
        alpha_widths=[128, 256],
        timing_repeats=30,
        # the compiled trainer runs on the CPU, so V7 trains the cpu profile's sizes here (its design says so)
        derf=dict(
            model=dict(width=64, depth=4, heads=4, context=64),
            train=dict(steps=200, batch_size=16, warmup_steps=20, lr=5e-3),
        ),
        derf_seeds=REGISTERED_DERF_SEEDS,
        # V6 trains the cpu profile's sizes here too (the compiled trainer runs on the CPU)
        regime=dict(
            model=dict(width=64, depth=4, heads=4, context=64),
            train=dict(steps=200, batch_size=16, warmup_steps=20, lr=5e-3),
        ),
        regime_steps=120,
        regime_sizes=[750, 7_500, 88_000],
        regime_seeds=REGISTERED_REGIME_SEEDS,
        v4_seeds=REGISTERED_V4_SEEDS,
        v4_first_seed=0,
        workers=None,
        devices=["cuda:0"] * 8,
    ),
}

# V1's DyT variants. "dyt-authors" is the authors' LLaMA recipe (github.com/jiachenzhu/DyT, other_tasks/LLaMA): DyT
# without β in every norm, α₀ for the norm in front of attention apart from the others, by width
# (normlab.norms.dyt.authors_alpha_init), the embeddings times a learnable sqrt(width) (norm="dyt"'s default), and
# AdamW's decay on every parameter. "dyt-rmsfinal" keeps it in the blocks with an RMSNorm before the head, and
# "rms-authors" is RMSNorm under the same optimiser: the authors' own baseline, so that each of those pairs differs in
# the norm alone. "dyt" (β, α₀ = 0.5 everywhere, the scalars undecayed) and "dyt-plain" (the same without the
# embedding scale) are the study's earlier recipe: kept, at the reference learning rate only, because their pair
# measures what the embedding scale does.
AUTHORS_DYT = dict(norm="dyt", dyt_bias=False)  # plus the authors' α₀ for the width, filled in by `small_variant`
SMALL_VARIANTS = {
    "rms": dict(norm="rms"),
    "layer": dict(norm="layer"),
    "rms-authors": dict(norm="rms"),
    "dyt-authors": AUTHORS_DYT,
    "dyt-rmsfinal": dict(AUTHORS_DYT, final_norm_kind="rms"),
    "dyt": dict(norm="dyt"),
    "dyt-plain": dict(norm="dyt", embedding_scale=False),
    "rms+qk": dict(qk_norm=True),
}
AUTHORS_TRAIN = dict(weight_decay_on="all")  # their AdamW: decay 0.1 on every parameter (main_training_llama.py)
VARIANT_TRAIN = {label: AUTHORS_TRAIN for label in ("rms-authors", "dyt-authors", "dyt-rmsfinal")}
AUTHORS_ALPHA = ("dyt-authors", "dyt-rmsfinal")  # the variants whose α₀ is the authors' by width
REFERENCE_LR_ONLY = ("rms-authors", "dyt", "dyt-plain")  # paired at the reference learning rate, no grid
MAX_LOGIT_PROBED = ("rms", "rms+qk")  # V3 tracks their largest attention logit through training


# V7's three arms, paired by seed under one optimiser (V1's: the DyT authors' AdamW, decay on every parameter) and the
# compiled trainer: RMSNorm, DyT by V1's authors' recipe (its α₀ filled in by `derf_arm`), and Derf by its authors'
# GPT-2 module (normlab.norms.derf: every norm Derf with β, α₀ 0.5, s₀ 0, the embeddings times a learnable √width);
# their training script starts α at 1.0 and their AdamW decays the matrices only, which this registered design does not.
DERF_ARMS = {"v7-rms": dict(norm="rms"), "v7-dyt": AUTHORS_DYT, "v7-derf": dict(norm="derf")}
DERF_TRAIN = dict(AUTHORS_TRAIN, device="cpu")  # the step is the design's: settings["derf_step"]


def derf_arm(label: str, width: int) -> dict:
    """The model options of a V7 arm at this width (DyT's α₀ the authors' for the width, as in V1)."""
    if label not in DERF_ARMS:
        raise ValueError(f"derf_arm: unknown V7 arm {label!r}; choose one of {', '.join(DERF_ARMS)}")
    model = dict(DERF_ARMS[label])
    if model["norm"] == "dyt":
        attention, other = authors_alpha_init(width)
        model.update(dyt_alpha_attention=attention, dyt_alpha=other)
    return model


# V6's two arms as Verma ran them (github.com/lucky-verma/dyt-composition-study, code/model.py and train.py): RMSNorm,
# and DyT in every norm, the final one included, without β (their launchers pass --bias=False), α₀ = 2.0 everywhere
# (their dyt_alpha_init) and no embedding scale (their nanoGPT has none); both under nanoGPT's AdamW (decay 0.1 on the
# weight matrices only, betas 0.9 and 0.95, clipping at 1), so that the pair differs in the norm alone. Each with
# SwiGLU at every training-set size and with GELU at the largest (Verma's R5 ablation, --ablate_swiglu, at 118M).
VERMA_ALPHA = 2.0
REGIME_ARMS = {
    "v6-rms": dict(norm="rms"),
    "v6-dyt": dict(norm="dyt", dyt_bias=False, dyt_alpha=VERMA_ALPHA, embedding_scale=False),
}
REGIME_MLPS = ("swiglu", "gelu")
# Verma's schedule: 2,000 warm-up steps of 5,000, then a cosine over 600,000 (lr_decay_iters) that has barely begun
# by step 5,000: a warm-up of 40% of the steps, then a constant rate
REGIME_TRAIN = dict(weight_decay_on="matrices", min_lr_ratio=1.0, device="cpu")
REGIME_WARMUP_SHARE = 0.4
# The passes Verma's 5,000 steps of 64 x 512 tokens make over its training sets (1M, 10M and the full WikiText-103
# train split, about 118M GPT-2 tokens): 163.84, 16.38 and 1.39; outside smoke, the profile's sizes must give these
# within REGIME_PASS_TOLERANCE
VERMA_PASSES = (163.84, 16.384, 1.39)
REGIME_PASS_TOLERANCE = 0.05


def regime_arm(label: str, mlp: str = "swiglu") -> dict:
    """The model options of a V6 arm with this MLP."""
    if label not in REGIME_ARMS:
        raise ValueError(f"regime_arm: unknown V6 arm {label!r}; choose one of {', '.join(REGIME_ARMS)}")
    if mlp not in REGIME_MLPS:
        raise ValueError(f"regime_arm: V6 compares the MLPs {REGIME_MLPS}, got {mlp!r}")
    return {**REGIME_ARMS[label], "mlp": mlp}


def regime_passes(steps: int, batch_size: int, context: int, size: int) -> float:
    """How many times a run of `steps` batches of `batch_size` windows of `context` bytes passes over a training set
    of `size` bytes, on average (windows are drawn at random, as nanoGPT's get_batch draws them)."""
    return steps * batch_size * context / size


def check_regime_sizes(profile: str, sizes: list[int], steps: int, batch_size: int, context: int) -> None:
    """V6's training sets: increasing, each longer than a window, and outside smoke Verma's passes (VERMA_PASSES)."""
    if len(sizes) < 2 or sorted(set(sizes)) != list(sizes) or sizes[0] < context + 2:
        raise ValueError(
            f"profile {profile!r}: regime_sizes must be 2 or more increasing byte counts, each at least a window of "
            f"{context + 2} bytes, got {sizes}"
        )
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 10:
        raise ValueError(f"profile {profile!r}: regime_steps must be one step count of at least 10, got {steps!r}")
    if profile == "smoke":
        return
    passes = [regime_passes(steps, batch_size, context, size) for size in sizes]
    if len(passes) != len(VERMA_PASSES) or any(
        abs(p / v - 1) > REGIME_PASS_TOLERANCE for p, v in zip(passes, VERMA_PASSES)
    ):
        raise ValueError(
            f"profile {profile!r}: regime_sizes {sizes} at {steps} steps of {batch_size} x {context} bytes give "
            f"{', '.join(f'{p:.3g}' for p in passes)} passes, not Verma's {', '.join(f'{v:g}' for v in VERMA_PASSES)} "
            "(data/design.toml, V6); change one to match and log the change"
        )


def small_variant(label: str, width: int, alpha_other: float | None = None) -> dict:
    """The model options of a small-scale variant at this width. For the authors' recipe, α₀ is theirs for the
    width; `alpha_other` moves the α₀ of the norms not in front of attention, and the attention norm's with it,
    at the ratio the authors keep at every width (4 to 1)."""
    model = dict(SMALL_VARIANTS[label])
    if label in AUTHORS_ALPHA:
        attention, other = authors_alpha_init(width)
        if alpha_other is not None:
            attention, other = attention / other * alpha_other, alpha_other
        model.update(dyt_alpha_attention=attention, dyt_alpha=other)
    elif alpha_other is not None:
        raise ValueError(f"small_variant: only {AUTHORS_ALPHA} take an α₀ here, got {label!r}")
    return model


def is_dyt(label: str) -> bool:
    return label.startswith("dyt")


PLACEMENTS = ("pre", "post", "peri", "post-sublayer")
SCALES = ("small", "deep", "deepest")
SCALE_COST = {"small": 1, "deep": 3, "deepest": 6}  # relative run time, to start the longest runs first


def check_qk_grid(profile: str, settings: dict) -> None:
    """V3's wide grid: sorted, at least two seeds, and outside the smoke profile the design's `lr_range` end to end
    in steps averaging its `lr_step` decades."""
    grid, seeds = settings["qk_lr_grid"], settings["qk_seeds"]
    if grid != sorted(grid) or len(set(grid)) != len(grid) or len(grid) < 2:
        raise ValueError(f"profile {profile!r}: qk_lr_grid must be at least two increasing learning rates, got {grid}")
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 2:
        raise ValueError(f"profile {profile!r}: qk_seeds must be an int >= 2 (a paired interval), got {seeds!r}")
    if profile == "smoke":
        return
    low, high = design.value("V3", "lr_range")
    step = design.value("V3", "lr_step")
    mean_step = math.log10(grid[-1] / grid[0]) / (len(grid) - 1)
    if not (
        math.isclose(grid[0], low) and math.isclose(grid[-1], high) and math.isclose(mean_step, step, rel_tol=0.05)
    ):
        raise ValueError(
            f"profile {profile!r}: qk_lr_grid {grid} is not the registered V3 grid ({low:g} to {high:g} in steps of "
            f"{step:g} decades, data/design.toml); change one to match and log the change"
        )


def paired_seeds(settings: dict, scale: str) -> range:
    """The seeds a scale's paired comparisons read: V4's (the deepest scale) are its registered confirmation's fresh
    seeds, every other scale's the design's first `seeds`."""
    if scale == "deepest":
        return range(settings["v4_first_seed"], settings["v4_first_seed"] + settings["v4_seeds"])
    return range(settings["seeds"])


def profile_settings(profile: str, overrides: dict | None = None) -> dict:
    """The profile's settings (a copy) with `overrides` applied, checked for what the chapter's design needs."""
    settings = lookup_profile(PROFILES, profile, owner="the landscape chapter", overrides=overrides)
    for scale, grid_name in (("small", "lr_grid"), ("deep", "deep_lr_grid")):
        if settings[f"{scale}_train"]["lr"] not in settings[grid_name]:
            raise ValueError(f"profile {profile!r}: the {scale} reference learning rate must lie on {grid_name}")
    if settings["seeds"] < 2 or max(settings["grid_seeds"], settings["deep_grid_seeds"]) > settings["seeds"]:
        raise ValueError("paired intervals need at least 2 seeds, and grid seeds <= seeds")
    for width in settings["alpha_widths"]:
        if authors_alpha_init(width)[1] not in settings["alphas"]:
            raise ValueError(f"profile {profile!r}: the authors' α₀ at width {width} must lie on alphas")
    check_qk_grid(profile, settings)
    if settings["derf_seeds"] < 2:
        raise ValueError(f"profile {profile!r}: derf_seeds must be at least 2 (a paired interval)")
    if profile != "gpu":  # V7 is registered at V1's sizes: they follow the small scale, overrides included
        settings["derf"] = dict(model=dict(settings["small"]), train=dict(settings["small_train"]))
    settings["derf_step"] = design.training_step("V7", profile)  # the registered trainer; the reference at smoke
    if settings["regime_seeds"] < 2:
        raise ValueError(f"profile {profile!r}: regime_seeds must be at least 2 (a paired interval)")
    if profile != "gpu":  # V6 is registered at V1's model, batch and learning rate, as V7
        settings["regime"] = dict(model=dict(settings["small"]), train=dict(settings["small_train"]))
    check_regime_sizes(
        profile,
        settings["regime_sizes"],
        settings["regime_steps"],
        settings["regime"]["train"]["batch_size"],
        settings["regime"]["model"]["context"],
    )
    settings["regime_step"] = design.training_step("V6", profile)
    if profile != "smoke" and settings["deep"]["depth"] < 12:
        raise ValueError("V2 needs at least 12 blocks, where placement matters")
    return settings
