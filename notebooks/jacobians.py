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
# # Jacobians and gradients
#
# The essay (article B) argues that RMSNorm keeps LayerNorm's gradient-stabilising mechanism:
# with $r = \sqrt{\|x\|^2/d}$ and $\hat x = x/r$ it writes
#
# $$ \frac{\partial \hat x}{\partial x} = \frac{1}{r}\left(I - \hat x \hat x^\top\right) \quad\text{(B12)},\qquad
#    \frac{\partial\ell}{\partial g} = \delta\odot\hat x,\quad
#    \frac{\partial\ell}{\partial x} = \frac{1}{r}\left(I - \hat x \hat x^\top\right)(g\odot\delta) \quad\text{(B13)}. $$
#
# This chapter checks every one of these expressions against `torch.autograd.functional.jacobian`
# applied to the project's reference norms in float64, and reports the exact form wherever a printed one fails.
# A formula **holds to machine precision** when its largest entry-wise error, divided by the largest entry of the
# autograd Jacobian, is below {glue:text}`machine_tol` (`MACHINE_TOL`); a printed form whose error exceeds
# {glue:text}`wrong_tol` (`WRONG_TOL`) is *wrong*, not merely rounded.
#
# A point to keep in mind throughout: with $\hat x = x/r$ one has $\|\hat x\|^2 = d$, not 1, so
# $I - \hat x\hat x^\top$ is **not** a projector (its eigenvalue along $\hat x$ is $1-d$).
# The projector onto the complement of $x$ is $I - \hat x\hat x^\top/d$.
#
# Each verdict records its key number with a spread: its standard deviation over the random tokens drawn in this run.

# %% tags=["parameters", "remove-cell"]
profile = "smoke"
overrides = {}  # settings that replace the profile sizes (from `make book SET`)
results_dir = "build/results"

# %% tags=["remove-cell"]
import matplotlib.pyplot as plt
import seaborn as sns
import torch
from IPython.display import Markdown

from normlab.analysis.jacobians import figures, profiles
from normlab.study import Results, design
from normlab.study.present import claims_box, verdict_table
from normlab.study.prose import state
from normlab.study.results import load_evidence

settings = profiles.profile_settings(profile, overrides)
sns.set_theme(style="whitegrid", context="notebook")
# Jacobians are computed on the CPU in float64 in every profile: the point is precision, not speed.
torch.manual_seed(0)
results = Results("jacobians", profile, results_dir, overrides)

# relative max error below which a closed form "holds to machine precision"
MACHINE_TOL = design.value("B3", "machine_tol")
# relative max error above which a printed form is "wrong", not merely rounded
WRONG_TOL = design.value("B12", "wrong_tol")
EPS_TYPICAL = design.value("B12", "eps_typical")  # LLaMA's RMSNorm eps, used where a realistic eps is needed
# a deliberately large eps, so eps-aware forms are tested where eps matters
EPS_CHECK = design.value("B12", "eps_check")
state(machine_tol=MACHINE_TOL, wrong_tol=WRONG_TOL, eps_typical=EPS_TYPICAL, eps_check=EPS_CHECK)

# %% tags=["remove-input"]
claims_box(["B3", "B12", "B13", "B14"], overrides=overrides)

# %% [markdown]
# (jacobians-formulas)=
# ## Closed forms against autograd
#
# For each feature size, random tokens $x = a\,z + b\mathbf 1$ (with $z$ standard normal, $a$ log-uniform in
# [{glue:text}`scale_low`, {glue:text}`scale_high`] and $b$ normal), a random gain $g$ and a random upstream gradient $\delta$.
# Every closed form is compared with the autograd Jacobian of the reference norm (`normlab.norms.reference`) in float64.
# The ε-free norms are evaluated with ε = {glue:text}`eps_free`, which float64 cannot distinguish from 0 at these
# scales; the forms that include ε are checked with a deliberately large ε = {glue:text}`eps_check`, where it matters.
# {numref}`fig-jacobians-errors` shows every form's error.


# %% tags=["remove-cell"]
from normlab.analysis.jacobians import against_autograd, closed_forms

low, high = against_autograd.SCALE_DECADES
state(eps_free=closed_forms.EPS_FREE, scale_low=10.0**low, scale_high=10.0**high)
# One generator feeds every section in page order, so each section's tokens depend on the ones before.
generator = torch.Generator().manual_seed(1)
formulas = against_autograd.FormulaCheck(
    against_autograd.formula_error_table(settings["dims"], settings["tokens"], generator, EPS_CHECK)
)

# %% tags=["remove-input"] mystnb={"figure": {"caption": "Largest entry-wise error of each closed form against the autograd Jacobian (float64), one dot per random token, coloured by d. What to see: the printed B12 and B13 forms sit at order one, every corrected form at rounding level, left of the dashed tolerance.", "name": "fig-jacobians-errors"}}
figures.errors_figure(formulas.errors, MACHINE_TOL)
plt.show()

# %% tags=["remove-input"]
against_autograd.formula_table(formulas)

# %% [markdown]
# The printed B12 and B13 forms are off by an amount of order one, while
# $\frac{1}{r}\left(I - \hat x\hat x^\top/d\right)$ — equivalently $\frac{1}{r}\left(I - uu^\top\right)$ with
# $u = x/\|x\|$ — matches autograd to rounding. With ε inside the root the exact form is
# $\frac{1}{s}\left(I - yy^\top/d\right)$ with $s=\sqrt{\overline{x^2}+\varepsilon}$ and $y = x/s$; with ε outside it is
# $\frac{1}{r+\varepsilon}\left(I - \frac{xx^\top}{d\,r\,(r+\varepsilon)}\right)$.
#
# (jacobians-heatmaps)=
# ## What the matrices look like
#
# One token with $d = 16$ and a mean offset: the exact RMSNorm Jacobian, the printed B12 matrix, LayerNorm's
# Jacobian, and the difference RMSNorm − LayerNorm. Entries are scaled by $r$ (resp. $\sigma$) so that the
# colour scale is dimensionless ({numref}`fig-jacobians-heatmaps`).

# %% tags=["remove-cell"]
from normlab.analysis.jacobians import matrices

panels = matrices.heatmap_panels(generator)

# %% tags=["remove-input"] mystnb={"figure": {"caption": "One token, d = 16: the exact RMSNorm Jacobian, the matrix B12 prints, LayerNorm's Jacobian, and for a zero-mean token the difference of the two norms' Jacobians. What to see: the exact matrix is dominated by the identity, the printed one by −x̂x̂ᵀ; the difference is a constant matrix, 11ᵀ/d.", "name": "fig-jacobians-heatmaps"}}
figures.heatmaps_figure(panels)
plt.show()

# %% tags=["remove-cell"]
mean_projection_gap = matrices.mean_projection_gap(panels[matrices.ZERO_MEAN_DIFFERENCE])

# %% [markdown]
# The printed matrix is dominated by $-\hat x\hat x^\top$ (entries of order 1 everywhere), the exact one by the identity.
# For a zero-mean input the two norms' Jacobians differ by exactly $\frac1r\,\mathbf 1\mathbf 1^\top/d$: the extra
# projection onto the mean direction.
#
# (jacobians-structure)=
# ## Null directions, ranks and LayerNorm's extra projection
#
# A norm that is invariant to a direction must have a Jacobian that maps it to 0. For each token we measure
# $\|Jv\| / (\|J\|_2\|v\|)$ for $v = x$ (scale) and $v = \mathbf 1$ (shift), and the numerical rank, with ε = 0 and
# with ε = {glue:text}`eps_typical` (LLaMA's) at unit scale.

# %% tags=["remove-cell"]
from normlab.analysis.jacobians import null_space

structure = null_space.StructureCheck(
    null_space.structure_table(settings["dims"], settings["tokens"], generator, EPS_TYPICAL)
)

# %% tags=["remove-input"]
null_space.structure_summary_table(structure)

# %% [markdown]
# With ε = 0, RMSNorm's Jacobian removes exactly one direction ($x$) and LayerNorm's two ($x$ and $\mathbf 1$), at
# rounding level; RMSNorm keeps the mean direction. With ε > 0 the scale direction is no longer removed exactly
# (the leak is of order $\varepsilon/\overline{x^2}$) while LayerNorm's shift direction still is: ε sits after the
# centring.

# %% tags=["remove-cell"]
max_gradient_cosine = null_space.max_gradient_cosine(settings["dims"], settings["tokens"], generator)

# %% [markdown]
# (jacobians-b3)=
# ### B3: combining the invariance part and the Jacobian part
#
# > B3: LayerNorm "is unchanged by x ↦ x + c·1 and by x ↦ a·x; its output depends only on the direction of x after
# > removing the mean direction: it projects onto the subspace orthogonal to 1, then normalises."
#
# The geometry chapter measures the invariances and the form $\sqrt d\,Px/\|Px\|$ and leaves them as evidence; this
# chapter measures the Jacobian. **Rule:** B3 holds if both parts hold (the geometry part: shift and scale invariance in
# float64 and the direction form to rounding; this part: $J_{LN} = J_{RMS}(Px)\,P$ to {glue:text}`machine_tol`, both invariant
# directions removed, rank d − 2). It carries a caveat if the geometry part found the shift invariance broken by
# float32 or bfloat16 rounding within its sweep, or if the geometry chapter has not run (then only this part is judged).

# %% tags=["remove-cell"]
b3 = null_space.b3_finding(formulas, structure, load_evidence("geometry", "B3", results_dir), MACHINE_TOL)
_ = b3.record(results, "B3", "jacobians-b3")

# %% tags=["remove-input"]
from normlab.analysis.jacobians import verdicts

Markdown(verdicts.verdict_line("B3", b3))

# %% [markdown]
# (jacobians-scaling)=
# ## Gradients shrink as 1/r
#
# Scale a token by $a$ and measure $a\,\|\partial\ell/\partial x\|_{ax} / \|\partial\ell/\partial x\|_{x}$: it is 1
# wherever the gradient scales as $1/r$. With ε = 0 the law is exact; with ε inside the root it fails once
# $a^2\overline{x^2}$ approaches ε ({numref}`fig-jacobians-scaling`).

# %% tags=["remove-cell"]
from normlab.analysis.jacobians import one_over_r

scaling = one_over_r.scaling_table(settings["dims"], settings["scales"], generator, EPS_TYPICAL)

# %% tags=["remove-input"] mystnb={"figure": {"caption": "Input-gradient norm times the input scale a, relative to a = 1: exactly 1 where gradients shrink as 1/r. What to see: with ε = 0 the law is exact at every scale; with ε = {glue:text}`eps_typical` it fails only when the input's RMS approaches √ε.", "name": "fig-jacobians-scaling"}}
figures.scaling_figure(scaling, EPS_TYPICAL)
plt.show()

# %% [markdown]
# (jacobians-eps)=
# ## How much ε changes the Jacobian
#
# The ε-free form $\frac1r(I-\hat x\hat x^\top/d)$ against the true Jacobian with ε, as a function of
# $\varepsilon/\overline{x^2}$ (RMSNorm) or $\varepsilon/\sigma^2$ (LayerNorm). The exact ε-aware forms above hold at every ε;
# this measures how far off one is when ignoring ε, as the essay does ({numref}`fig-jacobians-eps`).

# %% tags=["remove-cell"]
from normlab.analysis.jacobians import epsilon

eps_effect = epsilon.eps_effect_table(settings["dims"], settings["eps_points"], generator)

# %% tags=["remove-input"] mystnb={"figure": {"caption": "Relative error of the ε-free Jacobian against the true one, as ε grows relative to mean(x²) (RMSNorm) or σ² (LayerNorm); dotted: error = ε/statistic. What to see: ignoring ε costs about ε divided by the statistic, negligible for any realistic activation scale.", "name": "fig-jacobians-eps"}}
figures.eps_figure(eps_effect.frame, eps_effect.ratios)
plt.show()

# %% [markdown]
# (jacobians-radial)=
# ### Which part of an update the normalisation removes
#
# The essay reads the projection this way (article B, our translation): "the gradient, as it flows back, automatically
# loses its component along $\hat x$; a parameter update does not change the direction of the normalised vector, only
# adjusts its 'content'". To test it, split a change $v$ of $x$ into its **radial** part (along $x$) and its
# **tangential** part (orthogonal to $x$), and apply the exact Jacobian to each, for random tokens and changes
# ({ref}`table <tab-jacobians-radial>`).

# %% tags=["remove-cell"]
from normlab.analysis.jacobians import update_parts

radial = update_parts.RadialCheck(
    update_parts.radial_table(settings["dims"], settings["tokens"], generator), MACHINE_TOL
)

# %% tags=["remove-input"]
update_parts.radial_summary_table(radial, settings["dims"])

# %% [markdown]
# (tab-jacobians-radial)=
# The table shows the split. The Jacobian removes the **radial** part exactly and passes the **tangential** part
# unchanged except for the factor 1/r; every change of the output is orthogonal to the output itself. So the
# first half of the essay's remark is right: the component along $\hat x$ is what the normalisation removes (a
# change of the input's length does nothing). The second half is backwards: what passes through is precisely the part
# that *rotates* the normalised vector. Since its length is pinned at $\sqrt d$, an update can change **only** the
# direction of the normalised vector, never its length.

# %% tags=["remove-cell"]
b12 = update_parts.b12_finding(
    formulas,
    structure,
    scaling,
    eps_effect.frame,
    mean_projection_gap,
    radial,
    settings["dims"],
    MACHINE_TOL,
    WRONG_TOL,
)
_ = b12.record(results, "B12", "jacobians-formulas")

# %% [markdown]
# (jacobians-gain)=
# ## The gain in the backward pass
#
# B13 also says "the larger the gain, the larger the gradient sent back to $x$". For a fixed upstream $\delta$ the
# exact $\partial\ell/\partial x = J\,(g\odot\delta)$ is linear in $g$, so scaling the whole gain by $a$ scales the
# gradient by exactly $a$. Per channel it is not monotone: $J$ projects $g\odot\delta$, so raising one $|g_i|$ by 10 %
# can shrink $\|\partial\ell/\partial x\|$. We count how often.

# %% tags=["remove-cell"]
from normlab.analysis.jacobians import gain_backward

gain_trials = gain_backward.gain_trials(settings["dims"], settings["gain_trials"], generator)

# %% tags=["remove-cell"]
b13 = gain_backward.b13_finding(formulas, gain_trials, max_gradient_cosine, MACHINE_TOL, WRONG_TOL)
_ = b13.record(results, "B13", "jacobians-gain")

# %% tags=["remove-input"]
Markdown(gain_backward.b12_b13_paragraph(b12, b13, radial))

# %% [markdown]
# (jacobians-b14)=
# ## What the gain learns
#
# B14 reads $\partial\ell/\partial g = \sum_\text{tokens}\delta\odot\hat x$ as "g learns the per-channel correlation
# between upstream error and normalised input". Two testable parts:
#
# 1. the batch gradient is exactly that per-channel sum (checked against autograd on a batch);
# 2. gradient descent on $g$ stops where that sum is zero. In the simplest setting — fit $\hat x\odot g$ to targets $t$ —
#    this is the per-channel least-squares slope $\sum \hat x t / \sum \hat x^2$. Is that a *correlation*? We compare the
#    learned $g$ with the per-channel Pearson correlation of $t$ and $\hat x$: gradient descent must reach the slope
#    within {glue:text}`fit_tol`, and $g$ is not literally a correlation where it differs from Pearson's $r$ by more
#    than {glue:text}`correlation_tol`.
#
# The targets have true slopes that include 0 (a channel with no signal), so we also see whether $g$ suppresses it
# ({numref}`fig-jacobians-gain`).
# Whether a real network uses or suppresses the mean-direction freedom this way is a question for the gain chapter.

# %% tags=["remove-cell"]
from normlab.analysis.jacobians import gain_fit

fit = gain_fit.gain_fit(settings["fit_tokens"], settings["fit_steps"], generator)

# %% tags=["remove-input"] mystnb={"figure": {"caption": "Left: gradient descent on the gain alone, each channel converging to its least-squares slope (dotted). Right: the learned gain beside the slope and the Pearson correlation per channel. What to see: the gain reaches the uncentred regression slope, which differs from the correlation coefficient; no-signal channels go to about 0.", "name": "fig-jacobians-gain"}}
figures.gain_fit_figure(fit.trajectory, fit.slopes, fit.pearson)
plt.show()

# %% tags=["remove-cell"]
# |g − Pearson r| above this means g is not literally a correlation coefficient
CORRELATION_TOL = design.value("B14", "correlation_tol")
FIT_TOL = design.value("B14", "fit_tol")  # gradient descent must reach the least-squares slope to this absolute error
state(fit_tol=FIT_TOL, correlation_tol=CORRELATION_TOL)
b14 = gain_fit.b14_finding(fit, MACHINE_TOL, FIT_TOL, CORRELATION_TOL)
_ = b14.record(results, "B14", "jacobians-b14")

# %% tags=["remove-input"]
Markdown(verdicts.verdict_line("B14", b14))

# %% [markdown]
# ## Verdicts

# %% tags=["remove-input"]
verdict_table(results)

# %% tags=["remove-cell"]
_ = results.save()
