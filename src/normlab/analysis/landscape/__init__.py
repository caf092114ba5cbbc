"""The normalisation landscape (V1-V4): DyT, the norm's placement, QK-norm and LayerNorm Scaling.

The chapter (`notebooks/landscape.py`), section by section, and the module that computes each:

- *Method, and the margins fixed before measuring*: `runs` trains every run of the design (`landscape_jobs`,
  `run_jobs`); `method` holds them with the margins (`Landscape`) and writes the `overview`.
- *V1: Dynamic Tanh in place of every norm*: `dyt`.
- *V2: where the norm goes*: `placement`.
- *V3: QK-norm and the learning-rate range*: `qk_norm`.
- *V4: the Curse of Depth and LayerNorm Scaling*: `curse_of_depth`.
- *The landscape at a glance*: `at_a_glance`.
- Every section's figure: `figures`.

The building blocks the sections share: `profiles` (the profiles' sizes, grids and seeds, and the variants),
`probes` (what is measured inside a model: attention logits, gradients, DyT saturation) and `summaries` (pure
functions of run records: usable learning-rate ranges, hidden growth, drop-one shares, non-inferiority).

Callers import the section modules; this package re-exports nothing.
"""
