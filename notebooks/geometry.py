# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Geometry and invariance
#
# What each norm computes, what it is blind to, how large its output set is, and what ε does. Every formula in the
# two articles is evaluated literally (`normlab.analysis.geometry`) and compared with PyTorch's own implementations;
# every invariance is measured as the largest output change over many random inputs, in float64 and in the
# precisions models actually run in.
#
# The two articles disagree on where ε goes in RMSNorm: the explainer (A2) writes $x/(\mathrm{RMS}(x)+\varepsilon)$,
# ε **outside** the root; the essay (B2) writes $x/\sqrt{\overline{x^2}+\varepsilon}$, ε **inside**. Section
# {ref}`geometry-eps-placement` looks up which one real implementations use and measures when the difference is visible.
#
# Every verdict below records its key number with a spread: the same measurement repeated on independently drawn
# random inputs within this run.
# Each spread comes from three such draws (REPEATS).

# %% tags=["parameters", "remove-cell"]
profile = "smoke"
overrides = {}  # settings that replace the profile sizes (from `make book SET`)
results_dir = "build/results"

# %% tags=["remove-cell"]
import matplotlib.pyplot as plt
import seaborn as sns
import torch
from IPython.display import Markdown

from normlab.analysis.geometry import (
    dimension,
    eps_placement,
    figures,
    formulas,
    invariance,
    mean_dominated,
    parameters,
    settings,
)
from normlab.study import Results, design
from normlab.study.present import claims_box, table, verdict_table
from normlab.study.prose import percent, state

sns.set_theme(style="whitegrid", context="notebook")
sizes = settings.chapter_settings(profile, overrides)  # batch and sweep sizes; on the CPU: precision, not timing
d, generator = sizes["d"], torch.Generator().manual_seed(0)
results = Results("geometry", profile, results_dir, overrides)
FORMULA_TOL, INVARIANCE_TOL = design.value("A1", "formula_tol"), design.value("A4", "invariance_tol")
REPEATS = 3  # timed repeats of each check, for the spread of run times (not a threshold)
VISIBLE_CHANGE = design.value("A4", "visible_change")
state(formula_tol=FORMULA_TOL, invariance_tol=INVARIANCE_TOL, **{f"visible_{k}": v for k, v in VISIBLE_CHANGE.items()})

# %% tags=["remove-input"]
claims_box(["A1", "A2", "A3", "A4", "A6", "B2", "B3", "B4", "B11", "B16", "Q1"], overrides=overrides)

# %% [markdown]
# (geometry-formulas)=
# ## The formulas against PyTorch
#
# A1 and B2 write LayerNorm the same way; B2 writes RMSNorm with ε inside the root, A2 with ε outside. Each is
# transcribed literally and compared with `torch.nn.functional.layer_norm` / `rms_norm` on random tokens with random
# offsets and scales, random γ and β, in float64 ({ref}`table of formula errors <tab-geometry-formulas>`).
# A formula counts as what PyTorch computes when its largest difference stays below {glue:text}`formula_tol`
# (FORMULA_TOL).

# %% tags=["remove-cell"]
formula_check = formulas.check_formulas(sizes["tokens"], d, generator, REPEATS)

# %% tags=["remove-input"]
table(
    formula_check.by_eps(),
    caption="Largest absolute difference between each formula as written and PyTorch, float64, per ε.",
)

# %% [markdown]
# (tab-geometry-formulas)=
# In the table above, rounding-level differences (around 1e-15) mean the formula is what PyTorch computes.

# %% [markdown]
# A3 says RMSNorm drops both the centring and β. Checked three ways: `torch.nn.RMSNorm` and `normlab.RMSNorm` have a
# single parameter, the gain; `F.rms_norm` equals $x/\sqrt{\overline{x^2}+\varepsilon}\odot\gamma$ with no mean
# anywhere (above); and its outputs are not centred: the per-token mean of the output stays far from 0.
# A3 asks for the median per-token |mean| of RMSNorm's output to exceed {glue:text}`uncentred`, and LayerNorm's to stay below
# {glue:text}`formula_tol` (FORMULA_TOL).

# %% tags=["remove-cell"]
A3_RULE = design.values("A3", "uncentred")  # as stated above
state(**A3_RULE)
a3 = formulas.a3_no_centring(formula_check, FORMULA_TOL, **A3_RULE, repeats=REPEATS)
for claim_id, finding in (
    ("A1", formulas.a1_layer_norm_formula(formula_check, FORMULA_TOL)),
    ("B2", formulas.b2_formulas(formula_check, FORMULA_TOL)),
    ("A3", a3),
):
    finding.record(results, claim_id, "geometry-formulas")

# %% tags=["remove-input"]
Markdown(formulas.formulas_paragraph(formula_check, a3))

# %% [markdown]
# (geometry-invariance)=
# ## Shift and scale invariance
#
# For standard-normal tokens ($\sigma \approx 1$) we add $c\,\mathbf 1$ or multiply by $a$ and record the largest output
# change. The shifted input is rounded in its own dtype before normalising, exactly as in a model: that rounding, not
# the formula, is what limits LayerNorm's shift invariance at huge shifts. In float64, ε is set to {glue:text}`eps_free` (i.e. 0)
# to test the mathematics; in float32 and bfloat16 the defaults are used (LayerNorm {glue:text}`layer_norm_eps`,
# RMSNorm {glue:text}`rms_norm_eps`).
# {numref}`fig-geometry-invariance` shows the change against the size of the shift (left) and of the scale (right):
# LayerNorm stays at rounding level under shifts until the shift swamps the dtype's precision; RMSNorm moves by order
# one as soon as the shift is comparable with σ; both are flat under scaling.
#
# In float64 a norm counts as invariant when its output moves by less than {glue:text}`invariance_tol` (INVARIANCE_TOL).
# In float32 a change above {glue:text}`visible_float32` is a visible break; bfloat16 already rounds unit-size outputs
# by up to 4e-3, so its bar is {glue:text}`visible_bfloat16`. A4 asks LayerNorm to stay invariant under shifts up to
# {glue:text}`shift_regime`·σ, far beyond any residual-stream offset and still inside float64's precision; A4 and B4
# call RMSNorm shift sensitive if a shift of one σ moves it by more than {glue:text}`shift_sensitive`.

# %% tags=["remove-cell"]
sweep = invariance.sweep_invariance(sizes["tokens"], d, sizes["points"], generator)

# %% tags=["remove-input"] mystnb={"figure": {"caption": "Largest output change under a shift x + c·1 (left) and a scale a·x (right), per norm and dtype; dotted lines: the visible-change bars for float32 and bfloat16. What to see: LayerNorm ignores shifts until rounding of x + c takes over (earlier in lower precision), RMSNorm does not; both ignore scales.", "name": "fig-geometry-invariance"}}
figures.invariance(sweep.changes, VISIBLE_CHANGE)
plt.show()

# %% [markdown]
# LayerNorm's output also depends only on the *direction* of the centred input (B3): with $P = I - \mathbf 1\mathbf 1^\top/d$,
# $\mathrm{LN}(x) = \sqrt d\,Px/\|Px\|$ when ε → 0, so its outputs lie on a sphere of radius $\sqrt d$ inside the
# hyperplane $\mathbf 1^\top y = 0$.

# %% tags=["remove-cell"]
A4_RULE = design.values("A4", "shift_regime", "shift_sensitive")  # as stated above
state(
    **A4_RULE,
    eps_free=invariance.EPS_FREE,
    layer_norm_eps=invariance.LAYER_NORM_EPS,
    rms_norm_eps=invariance.RMS_NORM_EPS,
)
found_invariance = invariance.invariance_findings(
    sweep, INVARIANCE_TOL, VISIBLE_CHANGE, FORMULA_TOL, **A4_RULE, repeats=REPEATS
)
found_invariance.a4.record(results, "A4", "geometry-invariance")
results.record_evidence("B3", found_invariance.b3_summary, found_invariance.b3_evidence, section="geometry-invariance")
found_invariance.b4.record(results, "B4", "geometry-invariance")

# %% tags=["remove-input"]
Markdown(found_invariance.paragraph)

# %% [markdown]
# (geometry-dimension)=
# ## The dimension of the output set
#
# Stack the outputs of many random tokens and look at the singular values. LayerNorm's outputs live in the
# $(d-1)$-dimensional hyperplane $\mathbf 1^\top y = 0$; RMSNorm's span all $d$ dimensions (both lie on a sphere of
# radius $\sqrt d$, so the sets themselves are spheres of dimension $d-2$ and $d-1$). The extra dimension is the
# per-token mean of the output, which RMSNorm keeps and LayerNorm sets to 0. {numref}`fig-geometry-spectrum` shows
# the singular values: LayerNorm's last one drops to rounding level, RMSNorm's does not.

# %% tags=["remove-cell"]
rank = dimension.measure_output_rank(sizes["rank_tokens"], sizes["rank_d"], generator)

# %% tags=["remove-input"] mystnb={"figure": {"caption": "Singular values of the stacked outputs of many random tokens, relative to the largest. What to see: LayerNorm's smallest singular value falls to rounding level (its outputs span d − 1 dimensions), RMSNorm's stays at order one (d dimensions).", "name": "fig-geometry-spectrum"}}
figures.spectrum(rank.spectra, sizes["rank_tokens"], sizes["rank_d"])
plt.show()

# %% tags=["remove-cell"]
# B16 is judged in the quality chapter, with the training runs; this chapter leaves the geometric part as evidence.
results.record_evidence("B16", *dimension.b16_geometric_part(rank), section="geometry-dimension")

# %% [markdown]
# (geometry-parameters)=
# ## Parameters and memory
#
# A6 counts parameters: LayerNorm stores γ and β, RMSNorm only γ. We count them on `torch.nn` and `normlab` modules and,
# as a second measure of memory, the bytes autograd keeps for the backward pass of one float32 batch. A6 holds with a
# caveat if the norms are under {glue:text}`negligible_share` of a d = 768 block's weights, or if the activation memory
# is not smaller.

# %% tags=["remove-cell"]
memory = parameters.measure_parameters(d, sizes["tokens"])

# %% tags=["remove-input"]
table(
    memory.table,
    caption=f"Parameters per module at d = {d}, and the bytes PyTorch keeps for the backward of a "
    f"{sizes['tokens']}×{d} float32 batch (input included).",
)

# %% tags=["remove-cell"]
A6_RULE = design.values("A6", "negligible_share")  # as stated above
state(negligible_share=percent(A6_RULE["negligible_share"]))
parameters.a6_parameter_saving(memory, **A6_RULE).record(results, "A6", "geometry-parameters")

# %% [markdown]
# (geometry-eps-placement)=
# ## Where ε goes (A2 vs B2, Q1)
#
# ### What real implementations do
#
# Read from the source (repository, file, commit of the copy read):
#
# | Implementation | Source | ε placement | Default ε | Gain | Compute dtype |
# |---|---|---|---|---|---|
# | RMSNorm authors, PyTorch | `bzhangGo/rmsnorm`, `rmsnorm_torch.py` (2e726f1) | **outside**: `x / (rms_x + eps)`, `rms_x = ‖x‖·d^(-1/2)` | `1e-8` | `scale` (ones); optional bias, off by default | input dtype |
# | RMSNorm authors, TensorFlow | `bzhangGo/rmsnorm`, `rmsnorm_tensorflow.py` (2e726f1) | inside: `scale * x * tf.rsqrt(ms + eps)` | `1e-8` | `scale` (ones); optional offset | input dtype |
# | RMSNorm authors, Theano | `bzhangGo/rmsnorm`, `layers.py` (2e726f1) | inside: `x / sqrt(mean(x²) + 1e-5)` | `1e-5` | applied outside the function | input dtype |
# | "zero", the authors' Transformer toolkit | `bzhangGo/zero`, `func.py`, `rms_norm` (d97e2c2) | inside: `scale * x * tf.rsqrt(ms + eps)` | `dtype.epsilon()` | `scale` (ones) | configured float type |
# | Meta LLaMA reference | `meta-llama/llama`, `llama/model.py` (8580eb9) | inside: `x * rsqrt(mean(x²) + eps)` | `1e-6` (class), `norm_eps` `1e-5` in `ModelArgs` | `weight` (ones), applied after casting back | float32, cast back before the gain |
# | HF `LlamaRMSNorm` | `huggingface/transformers`, `src/transformers/models/llama/modeling_llama.py` (5dd4a63) | inside: `rsqrt(variance + eps)` | `1e-6` (`rms_norm_eps` from the config) | `weight` (ones), after casting back | float32 |
# | HF `T5LayerNorm` | `huggingface/transformers`, `src/transformers/models/t5/modeling_t5.py` (6b8b757) | inside: `rsqrt(variance + eps)` | `1e-6` | `weight` (ones); cast to the weight's dtype if half | variance in float32 (apex `FusedRMSNorm` replaces it when installed) |
# | HF `GemmaRMSNorm` | `huggingface/transformers`, `src/transformers/models/gemma/modeling_gemma.py` (c4cdd1a) | inside: `rsqrt(mean(x²) + eps)` | `1e-6` | **(1 + weight)**, weight initialised to zeros, multiplied in float32 before the cast | float32 throughout |
# | `torch.nn.RMSNorm` / `F.rms_norm` | PyTorch docstring (installed version) and measured below | inside: `sqrt(eps + mean(x²))` | `None` → `finfo(compute dtype).eps` | `weight` (ones) | see below |
#
# The four rows from the authors were read in their repositories at the commits given; the others are the copies of the
# files the search index holds, and later revisions may have moved code around. The PyTorch row is measured here, not
# only read. Of the authors' four implementations only the PyTorch file puts ε outside the root; their TensorFlow and
# Theano code and the toolkit they trained the Transformer with put it inside. The paper's equations, as transcribed,
# have no ε at all (the PDF was not checked here). So "ε outside is the authors' form" is true of one file in four.

# %% tags=["remove-input"]
measured = eps_placement.probe_torch_placement(d, generator)
Markdown(measured.sentence())

# %% [markdown]
# ### When the placement matters
#
# Tokens with a prescribed RMS $r$; outputs and input gradients of the two placements compared in float64, and the
# share of output elements that differ once each exact result is rounded to float32 or bfloat16. For $r \gg \sqrt\varepsilon$
# the relative difference is $\approx |\varepsilon/r - \varepsilon/(2r^2)|$: the first term (ε outside) dominates for
# $r \gg 1/2$, the second (ε inside) for $r \ll 1/2$, and they cancel near $r = 1/2$. It therefore exceeds a dtype's
# resolution $u$ below $r^* \approx \max(\varepsilon/u, \sqrt{\varepsilon/2u})$. {numref}`fig-geometry-placement` shows
# the gap in float64 (left) and the share of stored outputs that change (right).
#
# Q1 holds if PyTorch measures as ε inside and every measured crossover lies within a factor {glue:text}`agreement` of
# that prediction; it carries a caveat if, with LLaMA's ε = {glue:text}`eps`, float32 outputs differ above RMS
# {glue:text}`visible_rms`.

# %% tags=["remove-cell"]
placement = eps_placement.sweep_placement(d, sizes["points"], generator)

# %% tags=["remove-input"] mystnb={"figure": {"caption": "ε inside against ε outside the root, as a function of the input's RMS. Left: relative gap of outputs and input gradients in float64, with the float32 and bfloat16 resolutions dotted. Right: share of output elements whose stored value differs. What to see: the gap matters only at small RMS (below about 1 for float32 with ε = {glue:text}`eps`) and almost never in bfloat16.", "name": "fig-geometry-placement"}}
figures.placement(placement.gaps)
plt.show()

# %% tags=["remove-input"]
table(
    placement.crossover_table(),
    caption="RMS below which the two placements differ by more than the dtype's resolution: measured and predicted.",
)

# %% tags=["remove-cell"]
Q1_RULE = design.values("Q1", "eps", "agreement", "visible_rms", "float32_tol")  # as stated above
state(**Q1_RULE)
placed = eps_placement.placement_findings(placement, measured, formula_check, FORMULA_TOL, **Q1_RULE, repeats=REPEATS)
placed.q1.record(results, "Q1", "geometry-eps-placement")
placed.a2.record(results, "A2", "geometry-eps-placement")

# %% tags=["remove-input"]
Markdown(placed.paragraph)

# %% [markdown]
# (geometry-mean-dominated)=
# ## Mean-dominated inputs and ε (B11)
#
# Tokens $x = c\,\mathbf 1 + s\,z$: a common offset $c$ plus noise of size $s$. B11 says RMSNorm's ε pads the mean square
# $\overline{x^2} = c^2 + s^2$ and hardly matters when that is large, while LayerNorm's ε pads the variance $s^2$ and takes
# over when the input is nearly constant. Both norms use ε = {glue:text}`b11_eps` here so that only the placement under the root differs.
# The effect of ε is $\max|N_\varepsilon(x) - N_0(x)| / \max|N_0(x)|$ in float64; {numref}`fig-geometry-b11` shows it
# (left) with the share of the output that is the common offset (right).
#
# B11 holds if RMSNorm's ε effect stays below {glue:text}`rms_negligible` once mean(x²) ≥ 1, LayerNorm's exceeds
# {glue:text}`ln_takes_over` when σ² ≤ ε and stays below {glue:text}`ln_negligible` when σ² ≥ 1e3·ε, and RMSNorm's
# output on mean-dominated inputs (c = 100, s ≤ 1) lies more than {glue:text}`offset_dominated` along 1.

# %% tags=["remove-cell"]
B11_EPS = design.value("B11", "eps")
# as stated above
B11_RULE = design.values("B11", "rms_negligible", "ln_takes_over", "ln_negligible", "offset_dominated")
state(b11_eps=B11_EPS, rms_negligible=B11_RULE["rms_negligible"], ln_negligible=B11_RULE["ln_negligible"])
state(ln_takes_over=percent(B11_RULE["ln_takes_over"]), offset_dominated=percent(B11_RULE["offset_dominated"]))
b11 = mean_dominated.sweep_mean_dominated(d, sizes["points"], B11_EPS, generator)

# %% tags=["remove-input"] mystnb={"figure": {"caption": "Left: how much ε changes each norm's output as the per-token noise s shrinks, for three offsets c. Right: the share of the output's energy along the all-ones direction. What to see: RMSNorm's ε matters only when the whole mean square approaches ε; LayerNorm's takes over as soon as the noise does, whatever the offset; and on mean-dominated inputs RMSNorm's output is almost all offset.", "name": "fig-geometry-b11"}}
figures.mean_dominated(b11, B11_EPS)
plt.show()

# %% tags=["remove-cell"]
b11_finding, b11_sentence = mean_dominated.b11_eps_on_mean_dominated(b11, B11_EPS, d, **B11_RULE, repeats=REPEATS)
b11_finding.record(results, "B11", "geometry-mean-dominated")

# %% tags=["remove-input"]
Markdown(b11_sentence)

# %% [markdown]
# ## Verdicts
#
# B3 and B16 appear as evidence: B3 is judged in the Jacobian chapter, B16 in the quality chapter.

# %% tags=["remove-input"]
verdict_table(results)

# %% tags=["remove-cell"]
_ = results.save()
