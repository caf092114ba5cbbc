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
# autograd Jacobian, is below `MACHINE_TOL` (set below).
#
# A point to keep in mind throughout: with $\hat x = x/r$ one has $\|\hat x\|^2 = d$, not 1, so
# $I - \hat x\hat x^\top$ is **not** a projector (its eigenvalue along $\hat x$ is $1-d$).
# The projector onto the complement of $x$ is $I - \hat x\hat x^\top/d$.
#
# Each verdict records its key number with a spread: its standard deviation over the random tokens drawn in this run.

# %% tags=["parameters", "remove-cell"]
profile = "smoke"
results_dir = "build/results"

# %% tags=["remove-cell"]
SETTINGS = {
    # dims: feature sizes checked; tokens: random tokens per size; scales: points in the 1/r sweep;
    # fit_tokens/fit_steps: the B14 gain-fitting experiment.
    "smoke": {
        "dims": [8, 32],
        "tokens": 4,
        "scales": 9,
        "eps_points": 7,
        "fit_tokens": 256,
        "fit_steps": 150,
        "gain_trials": 24,
    },
    "cpu": {
        "dims": [8, 64, 256],
        "tokens": 24,
        "scales": 33,
        "eps_points": 25,
        "fit_tokens": 4096,
        "fit_steps": 400,
        "gain_trials": 2000,
    },
    "gpu": {
        "dims": [8, 64, 256, 512],
        "tokens": 32,
        "scales": 33,
        "eps_points": 25,
        "fit_tokens": 8192,
        "fit_steps": 400,
        "gain_trials": 4000,
    },
}
if profile not in SETTINGS:
    raise ValueError(f"profile must be one of {sorted(SETTINGS)}, got {profile!r}")
settings = SETTINGS[profile]
if not (settings["dims"] and all(isinstance(d, int) and d >= 4 for d in settings["dims"])):
    raise ValueError(f"dims must be a non-empty list of ints >= 4, got {settings['dims']}")
for key in ("tokens", "scales", "eps_points", "fit_tokens", "fit_steps", "gain_trials"):
    if not (isinstance(settings[key], int) and settings[key] >= 2):
        raise ValueError(f"{key} must be an int >= 2, got {settings[key]!r}")

# %% tags=["remove-cell"]
import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
import torch
from IPython.display import Markdown

from normlab.analysis import jacobians as J
from normlab.study import Results, decide
from normlab.study.present import claims_box, significant, table, verdict_table
from normlab.study.results import load_evidence

sns.set_theme(style="whitegrid", context="notebook")
# Jacobians are computed on the CPU in float64 in every profile: the point is precision, not speed.
torch.manual_seed(0)
results = Results("jacobians", profile, results_dir)

MACHINE_TOL = 1e-12  # relative max error below which a closed form "holds to machine precision"
WRONG_TOL = 1e-2  # relative max error above which a printed form is "wrong", not merely rounded
EPS_TYPICAL = 1e-6  # LLaMA's RMSNorm eps, used where a realistic eps is needed
EPS_CHECK = 1e-2  # a deliberately large eps, so eps-aware forms are tested where eps matters

# %% tags=["remove-input"]
claims_box(["B3", "B12", "B13", "B14"])

# %% [markdown]
# (jacobians-formulas)=
# ## Closed forms against autograd
#
# For each feature size, random tokens $x = a\,z + b\mathbf 1$ (with $z$ standard normal, $a$ log-uniform in
# $[10^{-2}, 10^{2}]$ and $b$ normal), a random gain $g$ and a random upstream gradient $\delta$.
# Every closed form is compared with the autograd Jacobian of the reference norm (`normlab.norms.reference`) in float64.
# The ε-free norms are evaluated with ε = 1e-300, which float64 cannot distinguish from 0 at these scales.
# {numref}`fig-jacobians-errors` shows every form's error.


# %% tags=["remove-cell"]
def random_token(d, generator):
    scale = 10 ** (4 * torch.rand((), generator=generator, dtype=torch.float64) - 2)
    shift = torch.randn((), generator=generator, dtype=torch.float64)
    return scale * torch.randn(d, generator=generator, dtype=torch.float64) + shift


generator = torch.Generator().manual_seed(1)
rows = []
for d in settings["dims"]:
    for token in range(settings["tokens"]):
        x = random_token(d, generator)
        gain = torch.randn(d, generator=generator, dtype=torch.float64)
        upstream = torch.randn(d, generator=generator, dtype=torch.float64)
        eps = EPS_CHECK * float(x.pow(2).mean())  # eps relative to the token's scale, so it always matters
        for form, error in J.formula_errors(x, gain, upstream, eps).items():
            rows.append({"d": d, "token": token, "form": form, "relative max error": error})
errors = pd.DataFrame(rows)
# Exact zeros cannot sit on a log axis; they are drawn at 1e-18 and kept as 0 in the numbers.
errors["plotted error"] = errors["relative max error"].clip(lower=1e-18)
worst = errors.groupby("form", sort=False)["relative max error"].max()
# run-to-run spread of each form's error: its sd over the random tokens of this run
error_sd = errors.groupby("form", sort=False)["relative max error"].std()

# %% tags=["remove-input"] mystnb={"figure": {"caption": "Largest entry-wise error of each closed form against the autograd Jacobian (float64), one dot per random token, coloured by d. What to see: the printed B12 and B13 forms sit at order one, every corrected form at rounding level, left of the dashed tolerance.", "name": "fig-jacobians-errors"}}
fig, ax = plt.subplots(figsize=(8, 4.5))
sns.stripplot(data=errors, y="form", x="plotted error", hue="d", palette="viridis", ax=ax, size=4, jitter=0.25)
ax.set_xscale("log")
ax.axvline(MACHINE_TOL, color="black", ls="--", lw=1, label=f"machine-precision tolerance {MACHINE_TOL:g}")
ax.set_xlabel("max |formula − autograd| / max |autograd| (dimensionless)")
ax.set_ylabel("")
ax.set_title("Closed forms vs autograd, float64")
ax.legend(loc="center right", fontsize=8, title="d / tolerance")
plt.tight_layout()
plt.show()

# %% tags=["remove-cell"]
printed_jacobian_error = float(worst["B12 printed: (1/r)(I - x̂x̂ᵀ)"])
exact_jacobian_error = float(
    worst[["exact: (1/r)(I - x̂x̂ᵀ/d)", "exact, ε inside: (1/s)(I - yyᵀ/d)", "exact, ε outside"]].max()
)
layer_norm_error = float(worst[["LN exact: (1/s)(P - yyᵀ/d)", "LN = J_RMS(Px)·P (autograd both)"]].max())
printed_input_grad_error = float(worst["B13 printed: ∂ℓ/∂x"])
exact_input_grad_error = float(worst["exact: ∂ℓ/∂x"])
gain_grad_error = float(worst["B13: ∂ℓ/∂g = δ⊙x̂"])

# %% tags=["remove-input"]
table(
    worst.rename("worst relative error").reset_index().assign(sd=error_sd.values),
    caption="Worst relative error of each closed form against autograd over all tokens, and its sd over tokens.",
)

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
heat_x = torch.randn(16, generator=generator, dtype=torch.float64) + 1.5
heat_r, heat_sigma = J.rms(heat_x), (heat_x - heat_x.mean()).pow(2).mean().sqrt()
panels = {
    "exact RMSNorm: r·J": heat_r * J.autograd_jacobian(J.rms_normalise, heat_x),
    "B12 as printed: r·(1/r)(I − x̂x̂ᵀ)": heat_r * J.rms_jacobian_as_printed(heat_x),
    "LayerNorm: σ·J": heat_sigma * J.autograd_jacobian(J.layer_normalise, heat_x),
    "zero-mean x: r·(J_RMS − J_LN)": None,
}
centred_x = heat_x - heat_x.mean()
panels["zero-mean x: r·(J_RMS − J_LN)"] = J.rms(centred_x) * (
    J.autograd_jacobian(J.rms_normalise, centred_x) - J.autograd_jacobian(J.layer_normalise, centred_x)
)

# %% tags=["remove-input"] mystnb={"figure": {"caption": "One token, d = 16: the exact RMSNorm Jacobian, the matrix B12 prints, LayerNorm's Jacobian, and for a zero-mean token the difference of the two norms' Jacobians. What to see: the exact matrix is dominated by the identity, the printed one by −x̂x̂ᵀ; the difference is a constant matrix, 11ᵀ/d.", "name": "fig-jacobians-heatmaps"}}
fig, axes = plt.subplots(1, 4, figsize=(17, 4))
for ax, (title, matrix) in zip(axes, panels.items()):
    limit = float(matrix.abs().max())
    image = ax.imshow(matrix.numpy(), cmap="RdBu_r", vmin=-limit, vmax=limit)
    fig.colorbar(image, ax=ax, shrink=0.7, label="entry (dimensionless)")
    ax.grid(False)
    ax.set_xticks(range(0, 16, 5))
    ax.set_yticks(range(0, 16, 5))
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("input feature j")
    ax.set_ylabel("output feature i")
plt.tight_layout()
plt.show()

# %% tags=["remove-cell"]
difference = panels["zero-mean x: r·(J_RMS − J_LN)"]
mean_projection_gap = float((difference - torch.full((16, 16), 1 / 16, dtype=torch.float64)).abs().max())

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
# with ε = 1e-6 at unit scale.

# %% tags=["remove-cell"]
structure_rows = []
for d in settings["dims"]:
    for _token in range(settings["tokens"]):
        x = torch.randn(d, generator=generator, dtype=torch.float64) + torch.randn(
            (), generator=generator, dtype=torch.float64
        )
        for eps in (0.0, EPS_TYPICAL):
            measured = J.null_directions(x, eps)
            structure_rows.append({"d": d, "eps": eps, **measured})
structure = pd.DataFrame(structure_rows)
free = structure[structure.eps == 0]
rank_ok = bool(((free["RMS rank"] == free.d - 1) & (free["LN rank"] == free.d - 2)).all())
null_kept = {col: float(free[col].max()) for col in ("RMS: J x", "LN: J x", "LN: J 1")}
rms_keeps_ones = float(free["RMS: J 1"].min())
with_eps = structure[structure.eps > 0]
eps_scale_leak = float(with_eps["RMS: J x"].max())
eps_shift_leak = float(with_eps["LN: J 1"].max())
summary_table = structure.groupby("eps")[["RMS: J x", "RMS: J 1", "LN: J x", "LN: J 1"]].max()
ln_leak_sd = float(free[["LN: J x", "LN: J 1"]].max(axis=1).std())

# %% tags=["remove-input"]
table(
    summary_table.reset_index(),
    caption=f"Largest share of each direction a Jacobian keeps, ‖Jv‖/(‖J‖‖v‖), per ε "
    f"(0 = removed). Ranks d − 1 (RMSNorm) and d − 2 (LayerNorm) for every token with ε = 0: {rank_ok}.",
)

# %% [markdown]
# With ε = 0, RMSNorm's Jacobian removes exactly one direction ($x$) and LayerNorm's two ($x$ and $\mathbf 1$), at
# rounding level; RMSNorm keeps the mean direction. With ε > 0 the scale direction is no longer removed exactly
# (the leak is of order $\varepsilon/\overline{x^2}$) while LayerNorm's shift direction still is: ε sits after the
# centring.

# %% tags=["remove-cell"]
gradient_cosines = []
for d in settings["dims"]:
    for _ in range(settings["tokens"]):
        x, gain, upstream = (torch.randn(d, generator=generator, dtype=torch.float64) for _ in range(3))
        grad_x, _ = J.autograd_rms_gradients(x + 3.0, gain, upstream)
        gradient_cosines.append(abs(J.cosine(grad_x, x + 3.0)))
max_gradient_cosine = max(gradient_cosines)

# %% [markdown]
# (jacobians-b3)=
# ### B3: combining the invariance part and the Jacobian part
#
# > B3: LayerNorm "is unchanged by x ↦ x + c·1 and by x ↦ a·x; its output depends only on the direction of x after
# > removing the mean direction: it projects onto the subspace orthogonal to 1, then normalises."
#
# The geometry chapter measures the invariances and the form $\sqrt d\,Px/\|Px\|$ and leaves them as evidence; this
# chapter measures the Jacobian. **Rule:** B3 holds if both parts hold (the geometry part: shift and scale invariance in
# float64 and the direction form to rounding; this part: $J_{LN} = J_{RMS}(Px)\,P$ to `MACHINE_TOL`, both invariant
# directions removed, rank d − 2). It carries a caveat if the geometry part found the shift invariance broken by
# float32 or bfloat16 rounding within its sweep, or if the geometry chapter has not run (then only this part is judged).

# %% tags=["remove-cell"]
geometry_b3 = load_evidence("geometry", "B3", results_dir)
jacobian_part = bool(
    layer_norm_error < MACHINE_TOL
    and null_kept["LN: J 1"] < MACHINE_TOL
    and null_kept["LN: J x"] < MACHINE_TOL
    and rank_ok
)
if geometry_b3 is None:
    geometry_part, geometry_caveat, geometry_text = (
        True,
        True,
        "the geometry chapter has not run, so its invariance part is missing",
    )
else:
    g = geometry_b3["evidence"]
    geometry_part = bool(g.get("shift_ok") and g.get("scale_ok") and g.get("direction_ok"))
    geometry_caveat = bool(g.get("precision_caveat"))
    geometry_text = "geometry part: " + geometry_b3["summary"]
results.record(
    "B3",
    decide(jacobian_part and geometry_part, caveat=geometry_caveat),
    f"Jacobian part: J_LN = J_RMS(Px)·P with P = I − 11ᵀ/d to {layer_norm_error:.1e} (relative) and J_LN annihilates 1 "
    f"and x (leak ≤ {max(null_kept['LN: J 1'], null_kept['LN: J x']):.0e}), rank d−2; {geometry_text}",
    {
        "layer_norm_jacobian_error": layer_norm_error,
        "ln_shift_leak": null_kept["LN: J 1"],
        "ln_scale_leak": null_kept["LN: J x"],
        "ranks_as_expected": rank_ok,
        "ln_shift_leak_with_eps_1e-6": eps_shift_leak,
        "tolerance": MACHINE_TOL,
        "jacobian_part_holds": jacobian_part,
        "geometry_part_present": geometry_b3 is not None,
        "geometry_part_holds": geometry_part if geometry_b3 is not None else None,
        "geometry_precision_caveat": geometry_caveat,
    },
    section="jacobians-b3",
    key_number=layer_norm_error,
    threshold=MACHINE_TOL,
    spread=float(error_sd[["LN exact: (1/s)(P - yyᵀ/d)", "LN = J_RMS(Px)·P (autograd both)"]].max()),
    rule="Holds if the geometry chapter's invariance part and this chapter's Jacobian part both hold; a caveat if the "
    "geometry part found rounding breaking the shift invariance, or is missing.",
)

# %% tags=["remove-input"]
Markdown(f"**B3** — {results.claims[-1]['verdict']}: {results.claims[-1]['summary']}")

# %% [markdown]
# (jacobians-scaling)=
# ## Gradients shrink as 1/r
#
# Scale a token by $a$ and measure $a\,\|\partial\ell/\partial x\|_{ax} / \|\partial\ell/\partial x\|_{x}$: it is 1
# wherever the gradient scales as $1/r$. With ε = 0 the law is exact; with ε inside the root it fails once
# $a^2\overline{x^2}$ approaches ε ({numref}`fig-jacobians-scaling`).

# %% tags=["remove-cell"]
scales = torch.logspace(-6, 4, settings["scales"], dtype=torch.float64)
scaling_rows = []
for d in settings["dims"]:
    x, gain, upstream = (torch.randn(d, generator=generator, dtype=torch.float64) for _ in range(3))
    mean_square = float(x.pow(2).mean())
    for eps in (0.0, EPS_TYPICAL):
        ratios = J.gradient_scale_ratios(x, gain, upstream, scales, eps)
        for a, ratio in zip(scales.tolist(), ratios.tolist()):
            scaling_rows.append(
                {
                    "d": d,
                    "eps": eps,
                    "scale a": a,
                    "a²·mean(x²)/ε": a * a * mean_square / eps if eps else math.inf,
                    "ratio": ratio,
                    "rms of a·x": a * math.sqrt(mean_square),
                }
            )
scaling = pd.DataFrame(scaling_rows)
exact_scaling_error = float((scaling[scaling.eps == 0].ratio - 1).abs().max())
eps_rows = scaling[scaling.eps > 0]
# Where the 1/r law breaks by more than 1 % with a realistic ε, in units of the token's RMS.
broken = eps_rows[(eps_rows.ratio - 1).abs() > 0.01]
rms_where_broken = float(broken["rms of a·x"].max()) if len(broken) else 0.0

# %% tags=["remove-input"] mystnb={"figure": {"caption": "Input-gradient norm times the input scale a, relative to a = 1: exactly 1 where gradients shrink as 1/r. What to see: with ε = 0 the law is exact at every scale; with ε = 1e-6 it fails only when the input's RMS approaches √ε.", "name": "fig-jacobians-scaling"}}
fig, ax = plt.subplots(figsize=(7, 4))
sns.lineplot(
    data=scaling.assign(eps=scaling.eps.map({0.0: "ε = 0", EPS_TYPICAL: f"ε = {EPS_TYPICAL:g}"})),
    x="rms of a·x",
    y="ratio",
    hue="eps",
    style="d",
    markers=True,
    ax=ax,
)
ax.set_xscale("log")
ax.axvline(math.sqrt(EPS_TYPICAL), color="grey", ls=":", lw=1, label="RMS = √ε")
ax.set_xlabel("RMS of the scaled input a·x (input units)")
ax.set_ylabel("a·‖∂ℓ/∂x(a·x)‖ / ‖∂ℓ/∂x(x)‖ (1 = exact 1/r law)")
ax.set_title("Gradient norm × input scale")
ax.legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# (jacobians-eps)=
# ## How much ε changes the Jacobian
#
# The ε-free form $\frac1r(I-\hat x\hat x^\top/d)$ against the true Jacobian with ε, as a function of
# $\varepsilon/\overline{x^2}$ (RMSNorm) or $\varepsilon/\sigma^2$ (LayerNorm). The exact ε-aware forms above hold at every ε;
# this measures how far off one is when ignoring ε, as the essay does ({numref}`fig-jacobians-eps`).

# %% tags=["remove-cell"]
ratios_eps = torch.logspace(-10, 1, settings["eps_points"], dtype=torch.float64)
eps_rows = []
for d in settings["dims"]:
    x = torch.randn(d, generator=generator, dtype=torch.float64) + 2.0
    mean_square, variance = float(x.pow(2).mean()), float((x - x.mean()).pow(2).mean())
    for relative in ratios_eps.tolist():
        rms_true = J.autograd_jacobian(lambda v: J.rms_normalise(v, relative * mean_square), x)
        ln_true = J.autograd_jacobian(lambda v: J.layer_normalise(v, relative * variance), x)
        eps_rows.append(
            {
                "d": d,
                "ε / statistic": relative,
                "norm": "RMSNorm (ε / mean(x²))",
                "relative gap": J.relative_max_error(J.rms_jacobian(x), rms_true),
            }
        )
        eps_rows.append(
            {
                "d": d,
                "ε / statistic": relative,
                "norm": "LayerNorm (ε / σ²)",
                "relative gap": J.relative_max_error(J.layer_norm_jacobian(x), ln_true),
            }
        )
eps_effect = pd.DataFrame(eps_rows)

# %% tags=["remove-input"] mystnb={"figure": {"caption": "Relative error of the ε-free Jacobian against the true one, as ε grows relative to mean(x²) (RMSNorm) or σ² (LayerNorm); dotted: error = ε/statistic. What to see: ignoring ε costs about ε divided by the statistic, negligible for any realistic activation scale.", "name": "fig-jacobians-eps"}}
fig, ax = plt.subplots(figsize=(7, 4))
sns.lineplot(data=eps_effect, x="ε / statistic", y="relative gap", hue="norm", style="d", ax=ax)
ax.plot(ratios_eps, ratios_eps, color="black", ls=":", lw=1, label="gap = ε / statistic")
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_xlabel("ε divided by mean(x²) (RMSNorm) or σ² (LayerNorm)")
ax.set_ylabel("max |J_ε-free − J_ε| / max |J_ε|")
ax.set_title("Error of ignoring ε in the Jacobian")
ax.legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% tags=["remove-cell"]
# Gap per unit of ε/statistic in the small-ε regime: the slope of the linear law.
small = eps_effect[eps_effect["ε / statistic"] <= 1e-4]
gap_per_eps = float((small["relative gap"] / small["ε / statistic"]).max())

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
radial_rows = []
for d in settings["dims"]:
    for _ in range(settings["tokens"]):
        x = torch.randn(d, generator=generator, dtype=torch.float64) + torch.randn(
            (), generator=generator, dtype=torch.float64
        )
        v = torch.randn(d, generator=generator, dtype=torch.float64)
        radial_rows.append({"d": d, **J.radial_tangential(x, v)})
radial = pd.DataFrame(radial_rows)
radial_worst = radial[["radial kept", "tangential error", "output change along y"]].max()
radial_sd = radial[["radial kept", "tangential error", "output change along y"]].std()
radial_removed = bool(radial_worst["radial kept"] < MACHINE_TOL)
tangential_passed = bool(radial_worst["tangential error"] < MACHINE_TOL)
moves_on_sphere = bool(radial_worst["output change along y"] < MACHINE_TOL)

# %% tags=["remove-input"]
table(
    pd.DataFrame(
        {
            "quantity": [
                "share of the radial part kept, ‖J v_r‖/(‖J‖‖v_r‖)",
                "tangential part: ‖J v_t − v_t/r‖ / ‖v_t/r‖",
                "output change along y: |y·Jv| / (‖y‖‖Jv‖)",
            ],
            "worst over tokens": radial_worst.values,
            "sd over tokens": radial_sd.values,
        }
    ),
    caption=f"RMSNorm's Jacobian (ε = 0) applied to the radial and tangential parts of random changes, "
    f"{len(radial)} tokens, d ∈ {settings['dims']}.",
)

# %% [markdown]
# (tab-jacobians-radial)=
# The table shows the split. The Jacobian removes the **radial** part exactly and passes the **tangential** part
# unchanged except for the factor 1/r; every change of the output is orthogonal to the output itself. So the
# first half of the essay's remark is right: the component along $\hat x$ is what the normalisation removes (a
# change of the input's length does nothing). The second half is backwards: what passes through is precisely the part
# that *rotates* the normalised vector. Since its length is pinned at $\sqrt d$, an update can change **only** the
# direction of the normalised vector, never its length.

# %% tags=["remove-cell"]
results.record(
    "B12",
    decide(
        exact_jacobian_error < MACHINE_TOL
        and layer_norm_error < MACHINE_TOL
        and exact_scaling_error < MACHINE_TOL
        and null_kept["RMS: J x"] < MACHINE_TOL
        and rank_ok,
        caveat=printed_jacobian_error > WRONG_TOL,
    ),
    f"The printed (1/r)(I − x̂x̂ᵀ) is off by {printed_jacobian_error:.1f} (relative max error): since ‖x̂‖² = d the exact "
    f"Jacobian is (1/r)(I − x̂x̂ᵀ/d), matching autograd to {exact_jacobian_error:.0e}; the projection, the exact 1/r law "
    f"(error {exact_scaling_error:.0e}) and LayerNorm's extra projection J_LN = J_RMS(Px)·P all hold. It removes the radial part "
    f"of a change (kept ≤ {float(radial_worst['radial kept']):.0e}) and passes the tangential part as v/r, so an update can only "
    f"turn the normalised vector: the essay's 'the update does not change its direction' is backwards.",
    {
        "printed_form_error": printed_jacobian_error,
        "exact_form_error": exact_jacobian_error,
        "layer_norm_form_error": layer_norm_error,
        "one_over_r_error_eps0": exact_scaling_error,
        "rms_scale_leak": null_kept["RMS: J x"],
        "rms_keeps_mean_direction_min": rms_keeps_ones,
        "rms_scale_leak_with_eps_1e-6": eps_scale_leak,
        "one_over_r_broken_below_rms_eps_1e-6": rms_where_broken,
        "eps_free_gap_per_eps_ratio": gap_per_eps,
        "zero_mean_difference_vs_11T_over_d": mean_projection_gap,
        "tolerance": MACHINE_TOL,
        "wrong_threshold": WRONG_TOL,
        "dims": settings["dims"],
        "radial_part_kept_max": float(radial_worst["radial kept"]),
        "tangential_part_error_max": float(radial_worst["tangential error"]),
        "output_change_along_y_max": float(radial_worst["output change along y"]),
        "essay_radial_removed_right": radial_removed,
        "essay_direction_unchanged_right": False if tangential_passed and moves_on_sphere else None,
    },
    section="jacobians-formulas",
    key_number=printed_jacobian_error,
    threshold=WRONG_TOL,
    spread=float(error_sd["B12 printed: (1/r)(I - x̂x̂ᵀ)"]),
    rule="Holds if the exact Jacobian (1/r)(I − x̂x̂ᵀ/d), the 1/r law, the removed scale direction and LayerNorm's extra "
    "projection all match autograd to MACHINE_TOL; a caveat if the printed form is off by more than WRONG_TOL (the key number).",
)

# %% [markdown]
# (jacobians-gain)=
# ## The gain in the backward pass
#
# B13 also says "the larger the gain, the larger the gradient sent back to $x$". For a fixed upstream $\delta$ the
# exact $\partial\ell/\partial x = J\,(g\odot\delta)$ is linear in $g$, so scaling the whole gain by $a$ scales the
# gradient by exactly $a$. Per channel it is not monotone: $J$ projects $g\odot\delta$, so raising one $|g_i|$ by 10 %
# can shrink $\|\partial\ell/\partial x\|$. We count how often.

# %% tags=["remove-cell"]
uniform_errors, per_channel_increase = [], []
for trial in range(settings["gain_trials"]):
    d = settings["dims"][trial % len(settings["dims"])]
    x, gain, upstream = (torch.randn(d, generator=generator, dtype=torch.float64) for _ in range(3))
    base = J.autograd_rms_gradients(x, gain, upstream)[0].norm()
    a = float(10 ** (2 * torch.rand((), generator=generator) - 1))
    scaled = J.autograd_rms_gradients(x, a * gain, upstream)[0].norm()
    uniform_errors.append(abs(float(scaled / (a * base)) - 1))
    channel = int(torch.randint(d, (), generator=generator))
    bumped = gain.clone()
    bumped[channel] *= 1.1
    per_channel_increase.append(bool(J.autograd_rms_gradients(x, bumped, upstream)[0].norm() > base))
uniform_gain_error = max(uniform_errors)
share_increasing = float(np.mean(per_channel_increase))

# %% tags=["remove-cell"]
results.record(
    "B13",
    decide(
        exact_input_grad_error < MACHINE_TOL and gain_grad_error < MACHINE_TOL and uniform_gain_error < MACHINE_TOL,
        caveat=printed_input_grad_error > WRONG_TOL or share_increasing < 1.0,
    ),
    f"∂ℓ/∂g = δ⊙x̂ holds ({gain_grad_error:.0e}), but the printed ∂ℓ/∂x is off by {printed_input_grad_error:.1f} — the exact "
    f"form is (1/r)(I − x̂x̂ᵀ/d)(g⊙δ) ({exact_input_grad_error:.0e}); a larger gain gives a larger gradient exactly for a "
    f"uniform rescaling of g, but raising one channel's gain does so in only {share_increasing:.0%} of trials.",
    {
        "gain_gradient_error": gain_grad_error,
        "printed_input_gradient_error": printed_input_grad_error,
        "exact_input_gradient_error": exact_input_grad_error,
        "uniform_gain_scaling_error": uniform_gain_error,
        "share_single_channel_increase": share_increasing,
        "gain_trials": len(per_channel_increase),
        "max_abs_cos_grad_x": max_gradient_cosine,
        "tolerance": MACHINE_TOL,
    },
    section="jacobians-gain",
    key_number=printed_input_grad_error,
    threshold=WRONG_TOL,
    spread=float(error_sd["B13 printed: ∂ℓ/∂x"]),
    rule="Holds if ∂ℓ/∂g = δ⊙x̂, the exact ∂ℓ/∂x and the uniform-gain scaling match autograd to MACHINE_TOL; a caveat if "
    "the printed ∂ℓ/∂x is off by more than WRONG_TOL (the key number) or raising one channel's gain does not always "
    "raise the gradient.",
)

# %% tags=["remove-input"]
Markdown(
    f"**B12** — {results.claims[-2]['verdict']}: {results.claims[-2]['summary']}\n\n"
    f"**B13** — {results.claims[-1]['verdict']}: {results.claims[-1]['summary']}\n\n"
    f"Radial against tangential: the radial part is kept at most {significant(float(radial_worst['radial kept']))}, the "
    f"tangential part passes as v/r to {significant(float(radial_worst['tangential error']))}: the essay is right that the "
    f"component along x̂ is removed, and wrong that updates leave the normalised vector's direction unchanged; its "
    f"direction is all they can change."
)

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
#    learned $g$ with the per-channel Pearson correlation of $t$ and $\hat x$.
#
# The targets have true slopes that include 0 (a channel with no signal), so we also see whether $g$ suppresses it
# ({numref}`fig-jacobians-gain`).
# Whether a real network uses or suppresses the mean-direction freedom this way is a question for the gain chapter.

# %% tags=["remove-cell"]
d_fit = 8
true_slopes = torch.tensor([2.0, -1.0, 0.0, 0.5, 3.0, 1.0, 0.0, -2.0], dtype=torch.float64)
fit_x = torch.randn(settings["fit_tokens"], d_fit, generator=generator, dtype=torch.float64) + 0.5
fit_hat = J.rms_normalise(fit_x)
noise_scale = torch.linspace(0.2, 2.0, d_fit, dtype=torch.float64)
fit_target = fit_hat * true_slopes + noise_scale * torch.randn(
    settings["fit_tokens"], d_fit, generator=generator, dtype=torch.float64
)

# Part 1: batch gradient against autograd, with an arbitrary upstream error.
batch_upstream = torch.randn(settings["fit_tokens"], d_fit, generator=generator, dtype=torch.float64)
gain_leaf = torch.randn(d_fit, dtype=torch.float64, requires_grad=True)
(auto_gain_grad,) = torch.autograd.grad(
    J.rms_norm_reference(fit_x, gain_leaf, eps=J.EPS_FREE), gain_leaf, batch_upstream
)
batch_gain_error = J.relative_max_error(J.gain_gradient(fit_x, batch_upstream), auto_gain_grad)

# Part 2: fit g alone by gradient descent and compare with slopes and correlations.
trajectory = J.fit_gain(fit_x, fit_target, steps=settings["fit_steps"], lr=0.5)
slopes = J.regression_gain(fit_x, fit_target)
pearson = torch.stack([torch.corrcoef(torch.stack([fit_hat[:, i], fit_target[:, i]]))[0, 1] for i in range(d_fit)])
fit_error = float((trajectory[-1] - slopes).abs().max())
correlation_gap = float((trajectory[-1] - pearson).abs().max())
null_channels = true_slopes == 0
suppression = float(trajectory[-1][null_channels].abs().max())
suppression_bound = 4 * float(noise_scale.max()) / math.sqrt(settings["fit_tokens"])  # ~4 standard errors


def slope_correlation_gap(seed):
    """|least-squares slope − Pearson r| on a fresh draw of the same experiment: the spread of B14's key number."""
    gen = torch.Generator().manual_seed(seed)
    xs = torch.randn(settings["fit_tokens"], d_fit, generator=gen, dtype=torch.float64) + 0.5
    hat = J.rms_normalise(xs)
    target = hat * true_slopes + noise_scale * torch.randn(
        settings["fit_tokens"], d_fit, generator=gen, dtype=torch.float64
    )
    r = torch.stack([torch.corrcoef(torch.stack([hat[:, i], target[:, i]]))[0, 1] for i in range(d_fit)])
    return float((J.regression_gain(xs, target) - r).abs().max())


correlation_gap_sd = float(np.std([slope_correlation_gap(100 + i) for i in range(3)], ddof=1))

# %% tags=["remove-input"] mystnb={"figure": {"caption": "Left: gradient descent on the gain alone, each channel converging to its least-squares slope (dotted). Right: the learned gain beside the slope and the Pearson correlation per channel. What to see: the gain reaches the uncentred regression slope, which differs from the correlation coefficient; no-signal channels go to about 0.", "name": "fig-jacobians-gain"}}
steps_axis = np.arange(trajectory.shape[0])
fig, axes = plt.subplots(1, 2, figsize=(13, 4))
for i in range(d_fit):
    axes[0].plot(steps_axis, trajectory[:, i].numpy(), lw=1.2, label=f"channel {i}")
    axes[0].axhline(float(slopes[i]), color=axes[0].lines[-1].get_color(), ls=":", lw=1)
axes[0].set_xlabel("gradient-descent step on g")
axes[0].set_ylabel("gain g_i (dimensionless)")
axes[0].set_title("g converges to the per-channel least-squares slope (dotted)")
axes[0].legend(fontsize=7, ncol=2)
comparison = pd.DataFrame(
    {
        "channel": np.arange(d_fit),
        "learned g": trajectory[-1].numpy(),
        "least-squares slope Σx̂t/Σx̂²": slopes.numpy(),
        "Pearson r(x̂, t)": pearson.numpy(),
    }
)
comparison.melt(id_vars="channel", var_name="quantity", value_name="value").pipe(
    lambda frame: sns.barplot(data=frame, x="channel", y="value", hue="quantity", ax=axes[1])
)
axes[1].set_xlabel("channel i")
axes[1].set_ylabel("value (dimensionless)")
axes[1].set_title("learned gain vs slope vs correlation")
axes[1].legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% tags=["remove-cell"]
CORRELATION_TOL = 0.05  # |g − Pearson r| above this means g is not literally a correlation coefficient
FIT_TOL = 1e-8  # gradient descent must reach the least-squares slope to this absolute error
results.record(
    "B14",
    decide(
        batch_gain_error < MACHINE_TOL and fit_error < FIT_TOL and suppression < suppression_bound,
        caveat=correlation_gap > CORRELATION_TOL,
    ),
    f"∂ℓ/∂g = Σ δ⊙x̂ matches autograd ({batch_gain_error:.0e}) and g converges to the per-channel least-squares slope "
    f"Σx̂t/Σx̂² (|g − slope| = {fit_error:.0e}), suppressing no-signal channels (|g| ≤ {suppression:.3f}); that is an "
    f"uncentred regression slope, not a correlation coefficient (|g − Pearson r| up to {correlation_gap:.2f}).",
    {
        "batch_gain_gradient_error": batch_gain_error,
        "fit_error_vs_slope": fit_error,
        "max_gap_vs_pearson": correlation_gap,
        "no_signal_channel_max_abs_gain": suppression,
        "suppression_bound": suppression_bound,
        "fit_tokens": settings["fit_tokens"],
        "fit_steps": settings["fit_steps"],
        "learned_gain": trajectory[-1],
        "least_squares_slope": slopes,
        "pearson": pearson,
        "tolerances": {"machine": MACHINE_TOL, "fit": FIT_TOL, "correlation": CORRELATION_TOL},
    },
    section="jacobians-b14",
    key_number=correlation_gap,
    threshold=CORRELATION_TOL,
    spread=correlation_gap_sd,
    rule="Holds if the batch gain gradient matches autograd, descent reaches the least-squares slope and no-signal "
    "channels stay within 4 standard errors of 0; a caveat if the learned gain differs from the Pearson correlation "
    "by more than CORRELATION_TOL (the key number).",
)

# %% tags=["remove-input"]
Markdown(f"**B14** — {results.claims[-1]['verdict']}: {results.claims[-1]['summary']}")

# %% [markdown]
# ## Verdicts

# %% tags=["remove-input"]
verdict_table(results)

# %% tags=["remove-cell"]
_ = results.save()
