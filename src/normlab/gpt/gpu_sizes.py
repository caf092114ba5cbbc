"""The training chapters' sizes at the gpu profile, in the chapters' own key names: one table that the chapters'
gpu profiles (`normlab.analysis.<chapter>.profiles`) and the GPU study's experiments (`normlab.gpt.experiments`)
both read, so that the design a chapter states is the design the GPU study trains.

It lives on the GPT testbed's floor because the GPU study runs on a torch-only machine and must not import the
chapters. Sized for one H200 in under 8 minutes for the whole study (`normlab.gpt.experiments.sizing("gpu")`).
Sizes that only the GPU study has (the ladder's rungs, the depth chapter's two depths) stay in
`normlab.gpt.experiments.PROFILES`.
"""

from __future__ import annotations

# A9, B7: batch 8 x context 128 is the CPU profile's 1024 tokens a step.
QUALITY = dict(width=256, depth=8, heads=4, context=128, batch_size=8, steps=2000, lr=2e-3, warmup_steps=100, seeds=16)

# V1-V4: the landscape chapter's three scales and learning-rate grids.
LANDSCAPE = dict(
    small=dict(width=256, depth=6, heads=4, context=128),
    small_train=dict(steps=400, batch_size=8, warmup_steps=40, lr=3e-3),
    lr_grid=[1e-3, 3e-3, 1e-2, 3e-2, 1e-1],
    # V3 under Wortsman et al.'s protocol: the design's wide grid (lr_range 1.5e-3..1.5, half-decade steps) on
    # qk_seeds seeds, without and with QK-norm
    qk_lr_grid=[1.5e-3, 5e-3, 1.5e-2, 5e-2, 1.5e-1, 5e-1, 1.5],
    qk_seeds=5,
    seeds=4,
    grid_seeds=2,
    deep_grid_seeds=2,
    deep=dict(width=128, depth=24, heads=4, context=128),
    deep_train=dict(steps=300, batch_size=8, warmup_steps=30, lr=3e-3),
    deep_lr_grid=[1e-3, 3e-3, 1e-2],
    deepest=dict(width=128, depth=32, heads=4, context=128),
    deepest_train=dict(steps=300, batch_size=8, warmup_steps=30, lr=3e-3),
)
