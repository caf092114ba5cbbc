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

# %% tags=["parameters", "remove-cell"]
profile = "smoke"
results_dir = "build/results"

# %% tags=["remove-cell"]
SETTINGS = {
    # tokens/d: the random batch for formula and invariance checks; points: resolution of every sweep;
    # rank_tokens/rank_d: the batch whose output rank is measured.
    "smoke": {"tokens": 64, "d": 64, "points": 9, "rank_tokens": 256, "rank_d": 32},
    "cpu": {"tokens": 1024, "d": 256, "points": 31, "rank_tokens": 4096, "rank_d": 256},
    "gpu": {"tokens": 8192, "d": 512, "points": 41, "rank_tokens": 8192, "rank_d": 512},
}
if profile not in SETTINGS:
    raise ValueError(f"profile must be one of {sorted(SETTINGS)}, got {profile!r}")
settings = SETTINGS[profile]
for key, minimum in (("tokens", 8), ("d", 8), ("points", 5), ("rank_d", 4)):
    if not (isinstance(settings[key], int) and settings[key] >= minimum):
        raise ValueError(f"{key} must be an int >= {minimum}, got {settings[key]!r}")
if settings["rank_tokens"] < 2 * settings["rank_d"]:
    raise ValueError(f"rank_tokens must be at least 2 * rank_d so the rank is not limited by the batch, got {settings}")
REPEATS = 3  # independent random draws behind each key number's spread

# %% tags=["remove-cell"]
import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
import torch
import torch.nn.functional as F
from IPython.display import Markdown

import normlab
from normlab.analysis import geometry as G
from normlab.norms.reference import layer_norm_reference, rms_norm_reference
from normlab.study import Results, decide
from normlab.study.present import claims_box, significant, table, verdict_table

sns.set_theme(style="whitegrid", context="notebook")
# Everything runs on the CPU in every profile: these are precision measurements, not timings.
generator = torch.Generator().manual_seed(0)
results = Results("geometry", profile, results_dir)
d = settings["d"]

FORMULA_TOL = 1e-12  # float64 max abs difference for "the formula is what torch computes"
INVARIANCE_TOL = 1e-9  # float64 max output change for "invariant"
# Output change that counts as a visible break of an invariance. bfloat16 already rounds unit-size outputs by up
# to 4e-3, so it needs a larger bar than float32.
VISIBLE_CHANGE = {"float32": 1e-3, "bfloat16": 0.1}
EPS_FREE = 1e-300  # ε that float64 cannot tell from 0 at these scales
RESOLUTION = {"float32": torch.finfo(torch.float32).eps, "bfloat16": torch.finfo(torch.bfloat16).eps}

# %% tags=["remove-input"]
claims_box(["A1", "A2", "A3", "A4", "A6", "B2", "B3", "B4", "B11", "B16", "Q1"])

# %% [markdown]
# (geometry-formulas)=
# ## The formulas against PyTorch
#
# A1 and B2 write LayerNorm the same way; B2 writes RMSNorm with ε inside the root, A2 with ε outside. Each is
# transcribed literally and compared with `torch.nn.functional.layer_norm` / `rms_norm` on random tokens with random
# offsets and scales, random γ and β, in float64 ({ref}`table of formula errors <tab-geometry-formulas>`).

# %% tags=["remove-cell"]
x = G.random_tokens(settings["tokens"], d, generator)
gamma = torch.randn(d, generator=generator, dtype=torch.float64)
beta = torch.randn(d, generator=generator, dtype=torch.float64)
formula_rows = []
for eps in (1e-6, 1e-5, 1e-2):
    formula_rows += [
        {
            "formula": "A1/B2 LayerNorm vs F.layer_norm",
            "eps": eps,
            "max abs diff": G.max_abs_difference(
                G.layer_norm_as_written(x, gamma, beta, eps), F.layer_norm(x, (d,), gamma, beta, eps)
            ),
        },
        {
            "formula": "B2 RMSNorm (ε inside) vs F.rms_norm",
            "eps": eps,
            "max abs diff": G.max_abs_difference(G.rms_norm_eps_inside(x, gamma, eps), F.rms_norm(x, (d,), gamma, eps)),
        },
        {
            "formula": "A2 RMSNorm (ε outside) vs F.rms_norm",
            "eps": eps,
            "max abs diff": G.max_abs_difference(
                G.rms_norm_eps_outside(x, gamma, eps), F.rms_norm(x, (d,), gamma, eps)
            ),
        },
        {
            "formula": "A2 RMSNorm (ε outside) vs normlab reference, outside",
            "eps": eps,
            "max abs diff": G.max_abs_difference(
                G.rms_norm_eps_outside(x, gamma, eps), rms_norm_reference(x, gamma, eps, eps_placement="outside")
            ),
        },
    ]
formulas = pd.DataFrame(formula_rows)
worst_formula = formulas.groupby("formula", sort=False)["max abs diff"].max()
ln_formula_error = float(worst_formula["A1/B2 LayerNorm vs F.layer_norm"])
b2_rms_error = float(worst_formula["B2 RMSNorm (ε inside) vs F.rms_norm"])
a2_vs_torch = float(worst_formula["A2 RMSNorm (ε outside) vs F.rms_norm"])
a2_vs_outside_reference = float(worst_formula["A2 RMSNorm (ε outside) vs normlab reference, outside"])


def formula_errors(generator):
    """The worst formula error (LayerNorm and ε-inside RMSNorm against torch) on a fresh random batch."""
    xs = G.random_tokens(settings["tokens"], d, generator)
    g, b = (torch.randn(d, generator=generator, dtype=torch.float64) for _ in range(2))
    return max(
        G.max_abs_difference(G.layer_norm_as_written(xs, g, b, 1e-5), F.layer_norm(xs, (d,), g, b, 1e-5)),
        G.max_abs_difference(G.rms_norm_eps_inside(xs, g, 1e-5), F.rms_norm(xs, (d,), g, 1e-5)),
    )


def a2_gap(generator):
    xs = G.random_tokens(settings["tokens"], d, generator)
    return G.max_abs_difference(G.rms_norm_eps_outside(xs, 1.0, 1e-5), F.rms_norm(xs, (d,), None, 1e-5))


_, formula_spread, _ = G.repeated(formula_errors, REPEATS)
_, a2_gap_spread, _ = G.repeated(a2_gap, REPEATS)

# %% tags=["remove-input"]
table(
    formulas.pivot(index="formula", columns="eps", values="max abs diff").reset_index(),
    caption="Largest absolute difference between each formula as written and PyTorch, float64, per ε.",
)

# %% [markdown]
# (tab-geometry-formulas)=
# In the table above, rounding-level differences (around 1e-15) mean the formula is what PyTorch computes.

# %% [markdown]
# A3 says RMSNorm drops both the centring and β. Checked three ways: `torch.nn.RMSNorm` and `normlab.RMSNorm` have a
# single parameter, the gain; `F.rms_norm` equals $x/\sqrt{\overline{x^2}+\varepsilon}\odot\gamma$ with no mean
# anywhere (above); and its outputs are not centred: the per-token mean of the output stays far from 0.

# %% tags=["remove-cell"]
torch_rms_parameters = dict(torch.nn.RMSNorm(d).named_parameters())
normlab_rms_parameters = dict(normlab.RMSNorm(d).named_parameters())
rms_output_means = F.rms_norm(x, (d,), None, 1e-6).mean(-1).abs()
ln_output_means = F.layer_norm(x, (d,), None, None, 1e-5).mean(-1).abs()
a3_ok = (
    list(torch_rms_parameters) == ["weight"]
    and list(normlab_rms_parameters) == ["weight"]
    and b2_rms_error < FORMULA_TOL
    and float(rms_output_means.median()) > 0.1
    and float(ln_output_means.max()) < FORMULA_TOL
)
_, rms_mean_spread, _ = G.repeated(
    lambda gen: F.rms_norm(G.random_tokens(settings["tokens"], d, gen), (d,), None, 1e-6).mean(-1).abs().median(),
    REPEATS,
)

# %% tags=["remove-cell"]
results.record(
    "A1",
    decide(ln_formula_error < FORMULA_TOL),
    f"A1's LayerNorm formula matches F.layer_norm to {ln_formula_error:.0e} (float64, ε ∈ {{1e-6, 1e-5, 1e-2}}, random γ, β).",
    {"max_abs_diff": ln_formula_error, "tolerance": FORMULA_TOL, "tokens": settings["tokens"], "d": d},
    section="geometry-formulas",
    key_number=ln_formula_error,
    threshold=FORMULA_TOL,
    spread=formula_spread,
    rule="Holds if the formula as written matches F.layer_norm to FORMULA_TOL (float64) at every ε tried.",
)
results.record(
    "B2",
    decide(ln_formula_error < FORMULA_TOL and b2_rms_error < FORMULA_TOL),
    f"B2's formulas (ε inside the root for RMSNorm) match F.layer_norm and F.rms_norm to {max(ln_formula_error, b2_rms_error):.0e}; "
    f"B2 and A2 disagree on where ε goes, and PyTorch follows B2.",
    {
        "layer_norm_max_abs_diff": ln_formula_error,
        "rms_norm_max_abs_diff": b2_rms_error,
        "a2_outside_vs_torch_max_abs_diff": a2_vs_torch,
        "tolerance": FORMULA_TOL,
    },
    section="geometry-formulas",
    key_number=max(ln_formula_error, b2_rms_error),
    threshold=FORMULA_TOL,
    spread=formula_spread,
    rule="Holds if both formulas as written match PyTorch to FORMULA_TOL (float64).",
)
results.record(
    "A3",
    decide(a3_ok),
    f"torch.nn.RMSNorm and normlab.RMSNorm hold only a gain, F.rms_norm subtracts no mean (formula match {b2_rms_error:.0e}), "
    f"and its outputs keep a per-token mean (median |mean(y)| = {float(rms_output_means.median()):.2f}; LayerNorm ≤ {float(ln_output_means.max()):.0e}).",
    {
        "torch_parameters": list(torch_rms_parameters),
        "normlab_parameters": list(normlab_rms_parameters),
        "rms_output_mean_median": float(rms_output_means.median()),
        "ln_output_mean_max": float(ln_output_means.max()),
        "formula_max_abs_diff": b2_rms_error,
    },
    section="geometry-formulas",
    key_number=float(rms_output_means.median()),
    threshold=0.1,
    spread=rms_mean_spread,
    rule="Holds if both RMSNorm modules hold only a gain, F.rms_norm matches a formula without a mean, and the median "
    "per-token |mean| of its output exceeds 0.1 (not centred).",
)

# %% tags=["remove-input"]
Markdown(
    f"**A1, B2, A3.** The formulas match PyTorch to {significant(max(ln_formula_error, b2_rms_error))} (float64). "
    f"RMSNorm modules hold only `weight`; the median |per-token mean| of RMSNorm's output is "
    f"{float(rms_output_means.median()):.2f}, LayerNorm's at most {significant(float(ln_output_means.max()))}."
)

# %% [markdown]
# (geometry-invariance)=
# ## Shift and scale invariance
#
# For standard-normal tokens ($\sigma \approx 1$) we add $c\,\mathbf 1$ or multiply by $a$ and record the largest output
# change. The shifted input is rounded in its own dtype before normalising, exactly as in a model: that rounding, not
# the formula, is what limits LayerNorm's shift invariance at huge shifts. In float64, ε is set to 1e-300 (i.e. 0) to
# test the mathematics; in float32 and bfloat16 the defaults are used (LayerNorm 1e-5, RMSNorm 1e-6).
# {numref}`fig-geometry-invariance` shows the change against the size of the shift (left) and of the scale (right):
# LayerNorm stays at rounding level under shifts until the shift swamps the dtype's precision; RMSNorm moves by order
# one as soon as the shift is comparable with σ; both are flat under scaling.

# %% tags=["remove-cell"]
base = torch.randn(settings["tokens"], d, generator=generator, dtype=torch.float64)
shifts = torch.logspace(-2, 8, settings["points"], dtype=torch.float64).tolist()
scales = torch.logspace(-4, 4, settings["points"], dtype=torch.float64).tolist()
norms = {
    "LayerNorm": {
        "float64": lambda v: layer_norm_reference(v, eps=EPS_FREE),
        "default ε": lambda v: F.layer_norm(v, (d,), eps=1e-5),
    },
    "RMSNorm": {
        "float64": lambda v: rms_norm_reference(v, eps=EPS_FREE),
        "default ε": lambda v: F.rms_norm(v, (d,), eps=1e-6),
    },
}
invariance_rows = []
for name, variants in norms.items():
    for dtype_name, dtype, variant in (
        ("float64", torch.float64, "float64"),
        ("float32", torch.float32, "default ε"),
        ("bfloat16", torch.bfloat16, "default ε"),
    ):
        cast = base.to(dtype)
        for c, change in zip(shifts, G.shift_change(variants[variant], cast, shifts).tolist()):
            invariance_rows.append(
                {"norm": name, "dtype": dtype_name, "transform": "shift x + c·1", "amount": c, "max change": change}
            )
        for a, change in zip(scales, G.scale_change(variants[variant], cast, scales).tolist()):
            invariance_rows.append(
                {"norm": name, "dtype": dtype_name, "transform": "scale a·x", "amount": a, "max change": change}
            )
invariance = pd.DataFrame(invariance_rows)
# Scale invariance with the default ε in float64: ε, not rounding, is what breaks it at small scales.
eps_scale_change = {name: G.scale_change(variants["default ε"], base, scales) for name, variants in norms.items()}

# %% tags=["remove-input"] mystnb={"figure": {"caption": "Largest output change under a shift x + c·1 (left) and a scale a·x (right), per norm and dtype; dotted lines: the visible-change bars for float32 and bfloat16. What to see: LayerNorm ignores shifts until rounding of x + c takes over (earlier in lower precision), RMSNorm does not; both ignore scales.", "name": "fig-geometry-invariance"}}
grid = sns.relplot(
    data=invariance.assign(**{"plotted change": invariance["max change"].clip(lower=1e-17)}),
    x="amount",
    y="plotted change",
    hue="norm",
    style="dtype",
    col="transform",
    kind="line",
    markers=True,
    height=3.8,
    aspect=1.2,
    facet_kws={"sharex": False},
)
for ax in grid.axes.flat:
    ax.set_xscale("log")
    ax.set_yscale("log")
    for level in VISIBLE_CHANGE.values():
        ax.axhline(level, color="grey", ls=":", lw=1)
    ax.set_ylabel("max |N(T x) − N(x)| (output units)")
grid.axes.flat[0].set_xlabel("shift c (in units of the tokens' σ ≈ 1)")
grid.axes.flat[1].set_xlabel("scale factor a (dimensionless)")
plt.show()


# %% tags=["remove-cell"]
def sweep(norm_name, dtype_name, transform):
    frame = invariance[
        (invariance["norm"] == norm_name) & (invariance["dtype"] == dtype_name) & (invariance["transform"] == transform)
    ]
    return frame.amount.to_numpy(), frame["max change"].to_numpy()


ln_shift_limit = {
    dt: G.largest_passing(
        *sweep("LayerNorm", dt, "shift x + c·1"), INVARIANCE_TOL if dt == "float64" else VISIBLE_CHANGE[dt]
    )
    for dt in ("float64", "float32", "bfloat16")
}
ln_scale_change_64 = float(sweep("LayerNorm", "float64", "scale a·x")[1].max())
rms_scale_change_64 = float(sweep("RMSNorm", "float64", "scale a·x")[1].max())
rms_shift_amounts, rms_shift_changes = sweep("RMSNorm", "float64", "shift x + c·1")
rms_shift_at_sigma = float(np.interp(0.0, np.log10(rms_shift_amounts), rms_shift_changes))  # change at c = σ
smallest_scale_ok = {
    name: min((a for a, ch in zip(scales, changes.tolist()) if ch < VISIBLE_CHANGE["float32"]), default=math.inf)
    for name, changes in eps_scale_change.items()
}


def rms_shift_at_one_sigma(generator):
    tokens = torch.randn(settings["tokens"], d, generator=generator, dtype=torch.float64)
    return float(G.shift_change(norms["RMSNorm"]["float64"], tokens, [1.0])[0])


def ln_shift_at_regime(generator):
    tokens = torch.randn(settings["tokens"], d, generator=generator, dtype=torch.float64)
    return float(G.shift_change(norms["LayerNorm"]["float64"], tokens, [1e4])[0])


_, rms_shift_spread, _ = G.repeated(rms_shift_at_one_sigma, REPEATS)
ln_shift_regime_mean, ln_shift_regime_spread, _ = G.repeated(ln_shift_at_regime, REPEATS)

# %% [markdown]
# LayerNorm's output also depends only on the *direction* of the centred input (B3): with $P = I - \mathbf 1\mathbf 1^\top/d$,
# $\mathrm{LN}(x) = \sqrt d\,Px/\|Px\|$ when ε → 0, so its outputs lie on a sphere of radius $\sqrt d$ inside the
# hyperplane $\mathbf 1^\top y = 0$.

# %% tags=["remove-cell"]
centred = base - base.mean(-1, keepdim=True)
direction_form = math.sqrt(d) * centred / centred.norm(dim=-1, keepdim=True)
ln_free = layer_norm_reference(base, eps=EPS_FREE)
direction_error = G.max_abs_difference(ln_free, direction_form)
sum_error = float(ln_free.sum(-1).abs().max())
radius_error = float((ln_free.norm(dim=-1) - math.sqrt(d)).abs().max())

# %% tags=["remove-cell"]
SHIFT_REGIME = 1e4  # shifts up to 1e4·σ: far beyond any residual-stream offset, still inside float64's precision
shift_ok = ln_shift_limit["float64"] >= SHIFT_REGIME
scale_ok = ln_scale_change_64 < INVARIANCE_TOL and rms_scale_change_64 < INVARIANCE_TOL
rms_shift_sensitive = rms_shift_at_sigma > 0.1
precision_caveat = ln_shift_limit["float32"] < shifts[-1] or ln_shift_limit["bfloat16"] < shifts[-1]
invariance_evidence = {
    "ln_shift_limit_sigma": ln_shift_limit,
    "ln_scale_change_eps0": ln_scale_change_64,
    "rms_scale_change_eps0": rms_scale_change_64,
    "rms_shift_change_at_c_sigma": rms_shift_at_sigma,
    "smallest_scale_without_visible_change_default_eps": smallest_scale_ok,
    "tolerances": {"float64": INVARIANCE_TOL, "visible": VISIBLE_CHANGE},
    "shift_regime": SHIFT_REGIME,
}
results.record(
    "A4",
    decide(shift_ok and scale_ok and rms_shift_sensitive, caveat=precision_caveat),
    f"In float64 LayerNorm is unchanged (< {INVARIANCE_TOL:g}) by shifts up to {ln_shift_limit['float64']:.0e}σ and both norms by any scale, "
    f"while RMSNorm moves by {rms_shift_at_sigma:.1f} at c = σ; in float32 LayerNorm's shift invariance is visibly broken beyond "
    f"{ln_shift_limit['float32']:.0e}σ (bfloat16: {ln_shift_limit['bfloat16']:.0e}σ) because x + c is rounded.",
    invariance_evidence,
    section="geometry-invariance",
    key_number=ln_shift_regime_mean,
    threshold=INVARIANCE_TOL,
    spread=ln_shift_regime_spread,
    rule=f"Holds if, in float64, LayerNorm's output moves by less than INVARIANCE_TOL under shifts up to {SHIFT_REGIME:g}σ "
    "(the key number: the change at that shift) and both norms under any scale, while RMSNorm moves by more than 0.1 "
    "at c = σ; a caveat where float32 or bfloat16 rounding breaks the shift invariance within the sweep.",
)
# B3 is judged in the Jacobian chapter, which combines this invariance part with its own Jacobian part.
results.record_evidence(
    "B3",
    f"Invariance part: LayerNorm equals √d·Px/‖Px‖ (P = I − 11ᵀ/d) to {direction_error:.0e} and ignores shifts up to "
    f"{ln_shift_limit['float64']:.0e}σ and scales in float64; in float32 rounding of x + c breaks shift invariance beyond "
    f"{ln_shift_limit['float32']:.0e}σ.",
    {
        **invariance_evidence,
        "direction_form_error": direction_error,
        "output_sum_max": sum_error,
        "radius_error": radius_error,
        "shift_ok": bool(shift_ok),
        "scale_ok": bool(scale_ok),
        "direction_ok": bool(direction_error < FORMULA_TOL and sum_error < FORMULA_TOL),
        "precision_caveat": bool(precision_caveat),
        "formula_tolerance": FORMULA_TOL,
    },
    section="geometry-invariance",
)
results.record(
    "B4",
    decide(rms_scale_change_64 < INVARIANCE_TOL and rms_shift_sensitive),
    f"RMSNorm is scale invariant (change {rms_scale_change_64:.0e} with ε → 0) but a shift of one σ changes its output by "
    f"{rms_shift_at_sigma:.2f} (max abs, unit-RMS outputs).",
    {
        "rms_scale_change_eps0": rms_scale_change_64,
        "rms_shift_change_at_c_sigma": rms_shift_at_sigma,
        "rms_shift_changes": dict(zip(map(str, rms_shift_amounts.tolist()), rms_shift_changes.tolist())),
    },
    section="geometry-invariance",
    key_number=rms_shift_at_sigma,
    threshold=0.1,
    spread=rms_shift_spread,
    rule="Holds if RMSNorm's float64 output moves by less than INVARIANCE_TOL under any scale and by more than 0.1 "
    "under a shift of one σ (the key number).",
)

# %% tags=["remove-input"]
Markdown(
    f"**A4, B4.** In float64 LayerNorm is unchanged by shifts up to {ln_shift_limit['float64']:.0e}σ "
    f"(float32: {ln_shift_limit['float32']:.0e}σ; bfloat16: {ln_shift_limit['bfloat16']:.0e}σ) and both norms by any scale "
    f"(change ≤ {significant(max(ln_scale_change_64, rms_scale_change_64))}); a shift of one σ moves RMSNorm's output by "
    f"{rms_shift_at_sigma:.2f}. LayerNorm's output equals √d·Px/‖Px‖ to {significant(direction_error)}: it lies on a sphere "
    f"in the hyperplane 1ᵀy = 0 (evidence for B3, which the Jacobian chapter judges)."
)

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
rank_d = settings["rank_d"]
rank_inputs = G.random_tokens(settings["rank_tokens"], rank_d, generator)
rank_outputs = {
    "LayerNorm": layer_norm_reference(rank_inputs, eps=1e-5),
    "RMSNorm": rms_norm_reference(rank_inputs, eps=1e-6),
}
ranks = {name: G.numerical_rank(y) for name, y in rank_outputs.items()}
spectra = pd.concat(
    [
        pd.DataFrame(
            {"norm": name, "index": np.arange(1, rank_d + 1), "singular value / largest": G.singular_values(y).numpy()}
        )
        for name, y in rank_outputs.items()
    ]
)
mean_channel_spread = {name: float(y.mean(-1).std()) for name, y in rank_outputs.items()}

# %% tags=["remove-input"] mystnb={"figure": {"caption": "Singular values of the stacked outputs of many random tokens, relative to the largest. What to see: LayerNorm's smallest singular value falls to rounding level (its outputs span d − 1 dimensions), RMSNorm's stays at order one (d dimensions).", "name": "fig-geometry-spectrum"}}
fig, ax = plt.subplots(figsize=(7, 4))
sns.lineplot(
    data=spectra.assign(**{"singular value / largest": spectra["singular value / largest"].clip(lower=1e-18)}),
    x="index",
    y="singular value / largest",
    hue="norm",
    style="norm",
    markers=True,
    ax=ax,
)
ax.set_yscale("log")
ax.axhline(1e-10, color="grey", ls=":", lw=1, label="rank threshold 1e-10")
ax.set_xlabel("singular value index (1 = largest)")
ax.set_ylabel("σ_k / σ_1 (dimensionless)")
ax.set_title(f"Outputs of {settings['rank_tokens']} random tokens, d = {rank_d}")
ax.legend()
plt.tight_layout()
plt.show()

# %% tags=["remove-cell"]
# The claim's further parts (drift of layer means, g using or suppressing the freedom) need training runs: the quality chapter, which records B16 too.
DYNAMICS_TESTED_HERE = False
rank_ok = ranks["LayerNorm"] == rank_d - 1 and ranks["RMSNorm"] == rank_d
# B16 is judged in the quality chapter; this chapter leaves the geometric part as evidence.
results.record_evidence(
    "B16",
    f"Geometric part: the outputs of {settings['rank_tokens']} random tokens have rank {ranks['RMSNorm']} under RMSNorm and {ranks['LayerNorm']} under "
    f"LayerNorm (d = {rank_d}): one more dimension, the output mean (spread {mean_channel_spread['RMSNorm']:.2f} vs "
    f"{mean_channel_spread['LayerNorm']:.0e}); whether training uses or suppresses it is measured in the quality chapter.",
    {
        "ranks": ranks,
        "d": rank_d,
        "tokens": settings["rank_tokens"],
        "output_mean_spread": mean_channel_spread,
        "rank_one_more": bool(rank_ok),
        "smallest_singular_value": {name: float(G.singular_values(y)[-1]) for name, y in rank_outputs.items()},
    },
    section="geometry-dimension",
)

# %% [markdown]
# (geometry-parameters)=
# ## Parameters and memory
#
# A6 counts parameters: LayerNorm stores γ and β, RMSNorm only γ. We count them on `torch.nn` and `normlab` modules
# and, as a second measure of memory, the bytes autograd keeps for the backward pass of one float32 batch.

# %% tags=["remove-cell"]
parameter_rows = []
for name, module in (
    ("torch.nn.LayerNorm", torch.nn.LayerNorm(d)),
    ("torch.nn.RMSNorm", torch.nn.RMSNorm(d)),
    ("normlab.LayerNorm", normlab.LayerNorm(d)),
    ("normlab.RMSNorm", normlab.RMSNorm(d)),
):
    parameter_rows.append(
        {
            "module": name,
            "parameters": G.parameter_count(module),
            "parameter bytes (float32)": G.parameter_bytes(module),
        }
    )
batch = torch.randn(settings["tokens"], d, requires_grad=True)
weight, bias = torch.ones(d, requires_grad=True), torch.zeros(d, requires_grad=True)
saved = {
    "LayerNorm": G.saved_for_backward_bytes(lambda v: F.layer_norm(v, (d,), weight, bias, 1e-5), batch),
    "RMSNorm": G.saved_for_backward_bytes(lambda v: F.rms_norm(v, (d,), weight, 1e-6), batch),
}
parameters_table = pd.DataFrame(parameter_rows)
# For scale: a GPT-2-small-shaped block (d = 768) has ~12·d² weights and two norms.
block_share = {name: 2 * k * 768 / (12 * 768**2) for name, k in (("LayerNorm", 2), ("RMSNorm", 1))}

# %% tags=["remove-input"]
table(
    parameters_table.assign(
        **{"bytes kept for backward": [saved["LayerNorm"], saved["RMSNorm"], saved["LayerNorm"], saved["RMSNorm"]]}
    ),
    caption=f"Parameters per module at d = {d}, and the bytes PyTorch keeps for the backward of a "
    f"{settings['tokens']}×{d} float32 batch (input included).",
)

# %% tags=["remove-cell"]
counts = dict(zip(parameters_table.module, parameters_table.parameters))
a6_ok = (
    counts["torch.nn.LayerNorm"] == 2 * d
    and counts["torch.nn.RMSNorm"] == d
    and counts["normlab.LayerNorm"] == 2 * d
    and counts["normlab.RMSNorm"] == d
)
results.record(
    # Caveat when the saving is negligible at model scale, or when activation memory does not follow the parameter count.
    "A6",
    decide(a6_ok, caveat=block_share["LayerNorm"] < 0.01 or saved["RMSNorm"] >= saved["LayerNorm"]),
    f"LayerNorm holds 2d = {2 * d} parameters and RMSNorm d = {d} (torch.nn and normlab alike); the saving is real but tiny: "
    f"norms are {block_share['LayerNorm']:.2%} vs {block_share['RMSNorm']:.2%} of a d = 768 block's weights, and for activations "
    f"PyTorch's CPU kernels keep {saved['LayerNorm']} B (LayerNorm) vs {saved['RMSNorm']} B (RMSNorm) for the backward of a "
    f"{settings['tokens']}×{d} float32 batch.",
    {"parameters": counts, "saved_for_backward_bytes": saved, "share_of_block_weights_d768": block_share},
    section="geometry-parameters",
    key_number=counts["torch.nn.LayerNorm"] - counts["torch.nn.RMSNorm"],
    threshold=0,
    spread=0.0,
    rule="Holds if LayerNorm holds 2d parameters and RMSNorm d (key number: the difference, d; a count does not vary "
    "between draws); a caveat if the norms are under 1% of a d = 768 block's weights or activation memory is not smaller.",
)

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
# | RMSNorm authors, PyTorch | `bzhangGo/rmsnorm`, `rmsnorm_torch.py` (2e726f1) | **outside**: `x / (rms_x + eps)`, `rms_x = ‖x‖·d^(-1/2)` | 1e-8 | `scale` (ones); optional bias, off by default | input dtype |
# | RMSNorm authors, TensorFlow | `bzhangGo/rmsnorm`, `rmsnorm_tensorflow.py` (2e726f1) | inside: `scale * x * tf.rsqrt(ms + eps)` | 1e-8 | `scale` (ones); optional offset | input dtype |
# | RMSNorm authors, Theano | `bzhangGo/rmsnorm`, `layers.py` (2e726f1) | inside: `x / sqrt(mean(x²) + 1e-5)` | 1e-5 | applied outside the function | input dtype |
# | "zero", the authors' Transformer toolkit | `bzhangGo/zero`, `func.py`, `rms_norm` (d97e2c2) | inside: `scale * x * tf.rsqrt(ms + eps)` | `dtype.epsilon()` | `scale` (ones) | configured float type |
# | Meta LLaMA reference | `meta-llama/llama`, `llama/model.py` (8580eb9) | inside: `x * rsqrt(mean(x²) + eps)` | 1e-6 (class), `norm_eps` 1e-5 in `ModelArgs` | `weight` (ones), applied after casting back | float32, cast back before the gain |
# | HF `LlamaRMSNorm` | `huggingface/transformers`, `src/transformers/models/llama/modeling_llama.py` (5dd4a63) | inside: `rsqrt(variance + eps)` | 1e-6 (`rms_norm_eps` from the config) | `weight` (ones), after casting back | float32 |
# | HF `T5LayerNorm` | `huggingface/transformers`, `src/transformers/models/t5/modeling_t5.py` (6b8b757) | inside: `rsqrt(variance + eps)` | 1e-6 | `weight` (ones); cast to the weight's dtype if half | variance in float32 (apex `FusedRMSNorm` replaces it when installed) |
# | HF `GemmaRMSNorm` | `huggingface/transformers`, `src/transformers/models/gemma/modeling_gemma.py` (c4cdd1a) | inside: `rsqrt(mean(x²) + eps)` | 1e-6 | **(1 + weight)**, weight initialised to zeros, multiplied in float32 before the cast | float32 throughout |
# | `torch.nn.RMSNorm` / `F.rms_norm` | PyTorch docstring (installed version) and measured below | inside: `sqrt(eps + mean(x²))` | `None` → `finfo(compute dtype).eps` | `weight` (ones) | see below |
#
# The four rows from the authors were read in their repositories at the commits given; the others are the copies of the
# files the search index holds, and later revisions may have moved code around. The PyTorch row is measured here, not
# only read. Of the authors' four implementations only the PyTorch file puts ε outside the root; their TensorFlow and
# Theano code and the toolkit they trained the Transformer with put it inside. The paper's equations, as transcribed,
# have no ε at all (the PDF was not checked here). So "ε outside is the authors' form" is true of one file in four.

# %% tags=["remove-cell"]
probe = G.random_tokens(64, d, generator)
torch_inside_error = G.max_abs_difference(F.rms_norm(probe, (d,), None, 1e-6), G.rms_norm_eps_inside(probe, 1.0, 1e-6))
torch_outside_gap = G.max_abs_difference(F.rms_norm(probe, (d,), None, 1e-6), G.rms_norm_eps_outside(probe, 1.0, 1e-6))
probe32 = probe.float()
default_eps32 = torch.finfo(torch.float32).eps
torch_default_eps_error = G.max_abs_difference(
    torch.nn.RMSNorm(d, elementwise_affine=False)(probe32), G.rms_norm_eps_inside(probe32.double(), 1.0, default_eps32)
)

# %% tags=["remove-input"]
Markdown(
    f"Measured: `F.rms_norm` matches ε inside to {significant(torch_inside_error)} and differs from ε outside by "
    f"{significant(torch_outside_gap)}; `torch.nn.RMSNorm(eps=None)` on float32 matches ε inside with "
    f"`finfo(float32).eps` to {significant(torch_default_eps_error)}."
)

# %% [markdown]
# ### When the placement matters
#
# Tokens with a prescribed RMS $r$; outputs and input gradients of the two placements compared in float64, and the
# share of output elements that differ once each exact result is rounded to float32 or bfloat16. For $r \gg \sqrt\varepsilon$
# the relative difference is $\approx |\varepsilon/r - \varepsilon/(2r^2)|$: the first term (ε outside) dominates for
# $r \gg 1/2$, the second (ε inside) for $r \ll 1/2$, and they cancel near $r = 1/2$. It therefore exceeds a dtype's
# resolution $u$ below $r^* \approx \max(\varepsilon/u, \sqrt{\varepsilon/2u})$. {numref}`fig-geometry-placement` shows
# the gap in float64 (left) and the share of stored outputs that change (right).

# %% tags=["remove-cell"]
rms_values = torch.logspace(-9, 4, 4 * settings["points"], dtype=torch.float64).tolist()
placement_rows, crossovers = [], {}
for eps in (1e-8, 1e-6, 1e-5):
    tokens = G.tokens_with_rms(rms_values, d, generator)
    upstream = torch.randn(tokens.shape, generator=generator, dtype=torch.float64)
    output_gap = G.placement_output_gap(tokens, eps)
    gradient_gap = G.placement_gradient_gap(tokens, eps, upstream)
    share32 = G.placement_rounded_disagreement(tokens, eps, torch.float32)
    share16 = G.placement_rounded_disagreement(tokens, eps, torch.bfloat16)
    for r, out, grad, s32, s16 in zip(
        rms_values, output_gap.tolist(), gradient_gap.tolist(), share32.tolist(), share16.tolist()
    ):
        placement_rows.append(
            {
                "eps": f"ε = {eps:g}",
                "RMS of x": r,
                "output gap": out,
                "gradient gap": grad,
                "float32 elements differing": s32,
                "bfloat16 elements differing": s16,
            }
        )
    for dtype_name, resolution in RESOLUTION.items():
        crossovers[(eps, dtype_name)] = {
            "output": G.crossover_rms(rms_values, output_gap, resolution),
            "gradient": G.crossover_rms(rms_values, gradient_gap, resolution),
            "predicted": G.predicted_crossover_rms(eps, resolution),
        }
placement = pd.DataFrame(placement_rows)

# %% tags=["remove-input"] mystnb={"figure": {"caption": "ε inside against ε outside the root, as a function of the input's RMS. Left: relative gap of outputs and input gradients in float64, with the float32 and bfloat16 resolutions dotted. Right: share of output elements whose stored value differs. What to see: the gap matters only at small RMS (below about 1 for float32 with ε = 1e-6) and almost never in bfloat16.", "name": "fig-geometry-placement"}}
fig, axes = plt.subplots(1, 2, figsize=(13, 4))
long = placement.melt(
    id_vars=["eps", "RMS of x"], value_vars=["output gap", "gradient gap"], var_name="quantity", value_name="gap"
)
sns.lineplot(
    data=long.assign(gap=long.gap.clip(lower=1e-18)), x="RMS of x", y="gap", hue="eps", style="quantity", ax=axes[0]
)
for dtype_name, resolution in RESOLUTION.items():
    axes[0].axhline(resolution, color="grey", ls=":", lw=1)
    axes[0].annotate(f"{dtype_name} resolution", (rms_values[0], resolution), fontsize=8, va="bottom")
axes[0].set_xscale("log")
axes[0].set_yscale("log")
axes[0].set_xlabel("RMS of the input x (input units)")
axes[0].set_ylabel("max |inside − outside| / max |inside|")
axes[0].set_title("ε inside vs outside the root, float64")
axes[0].legend(loc="upper right", fontsize=8)
shares = placement.melt(
    id_vars=["eps", "RMS of x"],
    value_vars=["float32 elements differing", "bfloat16 elements differing"],
    var_name="dtype",
    value_name="share",
)
sns.lineplot(data=shares, x="RMS of x", y="share", hue="eps", style="dtype", ax=axes[1])
axes[1].set_xscale("log")
axes[1].set_xlabel("RMS of the input x (input units)")
axes[1].set_ylabel("share of output elements that differ after rounding")
axes[1].set_title("Is the difference visible in the stored output?")
plt.tight_layout()
plt.show()

# %% tags=["remove-input"]
crossover_table = pd.DataFrame([{"ε": eps, "dtype": dt, **values} for (eps, dt), values in crossovers.items()])
table(
    crossover_table.rename(
        columns={
            "output": "output crossover RMS",
            "gradient": "gradient crossover RMS",
            "predicted": "predicted max(ε/u, √(ε/2u))",
        }
    ),
    caption="RMS below which the two placements differ by more than the dtype's resolution: measured and predicted.",
)

# %% tags=["remove-cell"]
llama_eps = 1e-6
fp32_crossover = crossovers[(llama_eps, "float32")]["output"]
bf16_crossover = crossovers[(llama_eps, "bfloat16")]["output"]
at_unit_rms = placement[(placement.eps == f"ε = {llama_eps:g}")].iloc[
    (placement[placement.eps == f"ε = {llama_eps:g}"]["RMS of x"] - 1.0).abs().argsort()[:1]
]
share32_at_1 = float(at_unit_rms["float32 elements differing"].iloc[0])
share16_at_1 = float(at_unit_rms["bfloat16 elements differing"].iloc[0])
# The measured crossovers must agree with the leading-order prediction max(ε/u, √(ε/2u)) within a factor 2.
predicted_ok = all(0.5 < v["output"] / v["predicted"] < 2 for v in crossovers.values())
torch_is_inside = (
    torch_inside_error < FORMULA_TOL and torch_outside_gap > FORMULA_TOL and torch_default_eps_error < 1e-6
)


def fp32_crossover_draw(generator):
    tokens = G.tokens_with_rms(rms_values, d, generator)
    return G.crossover_rms(rms_values, G.placement_output_gap(tokens, llama_eps), RESOLUTION["float32"])


_, crossover_spread, _ = G.repeated(fp32_crossover_draw, REPEATS)
results.record(
    "Q1",
    decide(torch_is_inside and predicted_ok, caveat=fp32_crossover > 1.0),
    f"All checked implementations put ε inside the root (torch measured: {torch_inside_error:.0e}) except one file, the "
    f"RMSNorm authors' PyTorch code (their TensorFlow, Theano and 'zero' code put it inside); "
    f"the outputs differ by ≈ |ε/r − ε/(2r²)|, which for ε = 1e-6 exceeds float32 resolution below r ≈ {fp32_crossover:.1f} "
    f"({share32_at_1:.0%} of float32 outputs differ at r = 1) and bfloat16 resolution only below r ≈ {bf16_crossover:.1e}.",
    {
        "torch_vs_inside_max_abs": torch_inside_error,
        "torch_vs_outside_max_abs": torch_outside_gap,
        "torch_default_eps_is_finfo_eps_error": torch_default_eps_error,
        "crossovers": {f"eps={eps:g}/{dt}": v for (eps, dt), v in crossovers.items()},
        "float32_share_differing_at_rms_1": share32_at_1,
        "bfloat16_share_differing_at_rms_1": share16_at_1,
        "sources": {
            "authors_pytorch": "bzhangGo/rmsnorm@2e726f1 rmsnorm_torch.py (outside, eps 1e-8)",
            "authors_tensorflow": "bzhangGo/rmsnorm@2e726f1 rmsnorm_tensorflow.py (inside, eps 1e-8)",
            "authors_theano": "bzhangGo/rmsnorm@2e726f1 layers.py (inside, eps 1e-5)",
            "authors_zero_toolkit": "bzhangGo/zero@d97e2c2 func.py rms_norm (inside)",
            "meta": "meta-llama/llama llama/model.py (inside)",
            "hf_llama": "transformers models/llama/modeling_llama.py (inside)",
            "hf_t5": "transformers models/t5/modeling_t5.py (inside)",
            "hf_gemma": "transformers models/gemma/modeling_gemma.py (inside, 1 + weight, float32)",
            "torch": "torch.nn.RMSNorm / F.rms_norm (inside, measured)",
        },
    },
    section="geometry-eps-placement",
    key_number=fp32_crossover,
    threshold=1.0,
    spread=crossover_spread,
    rule="Holds if torch measures as ε inside and the measured crossovers agree with max(ε/u, √(ε/2u)) within 2×; a "
    "caveat if for ε = 1e-6 the placements differ in float32 above RMS 1 (the key number: that crossover RMS).",
)
results.record(
    "A2",
    decide(a2_vs_outside_reference < FORMULA_TOL, caveat=a2_vs_torch > FORMULA_TOL),
    f"A2's ε-outside formula is a valid RMSNorm (matched to {a2_vs_outside_reference:.0e}), but it is the form of only one of the "
    f"authors' four implementations (their PyTorch file; their TensorFlow, Theano and 'zero' code put ε inside, and the "
    f"paper's equations have none), and "
    f"it is not what PyTorch, LLaMA, T5 or Gemma compute (ε inside, as B2 writes): on these random tokens the two differ by up to "
    f"{a2_vs_torch:.0e} (max abs), a difference visible in float32 for any RMS below ≈ {fp32_crossover:.1f} when ε = 1e-6.",
    {
        "vs_outside_reference": a2_vs_outside_reference,
        "vs_torch": a2_vs_torch,
        "float32_crossover_rms_eps_1e-6": fp32_crossover,
        "bfloat16_crossover_rms_eps_1e-6": bf16_crossover,
        "tolerance": FORMULA_TOL,
        "authors_implementations_with_eps_outside": "1 of 4 (rmsnorm_torch.py)",
    },
    section="geometry-eps-placement",
    key_number=a2_vs_torch,
    threshold=FORMULA_TOL,
    spread=a2_gap_spread,
    rule="Holds if A2's formula matches an ε-outside RMSNorm to FORMULA_TOL; a caveat if it differs from what PyTorch "
    "computes by more than FORMULA_TOL (the key number).",
)

# %% tags=["remove-input"]
Markdown(
    f"**Q1, A2.** PyTorch, LLaMA, T5, Gemma and three of the authors' four implementations put ε inside the root. "
    f"The two placements differ by ≈ |ε/r − ε/(2r²)|: for ε = 1e-6 the stored float32 output changes below "
    f"RMS ≈ {fp32_crossover:.2g} ({share32_at_1:.0%} of elements at RMS 1), bfloat16 only below {bf16_crossover:.1e}."
)

# %% [markdown]
# (geometry-mean-dominated)=
# ## Mean-dominated inputs and ε (B11)
#
# Tokens $x = c\,\mathbf 1 + s\,z$: a common offset $c$ plus noise of size $s$. B11 says RMSNorm's ε pads the mean square
# $\overline{x^2} = c^2 + s^2$ and hardly matters when that is large, while LayerNorm's ε pads the variance $s^2$ and takes
# over when the input is nearly constant. Both norms use ε = 1e-5 here so that only the placement under the root differs.
# The effect of ε is $\max|N_\varepsilon(x) - N_0(x)| / \max|N_0(x)|$ in float64; {numref}`fig-geometry-b11` shows it
# (left) with the share of the output that is the common offset (right).

# %% tags=["remove-cell"]
B11_EPS = 1e-5
noise_levels = torch.logspace(-6, 1, 2 * settings["points"], dtype=torch.float64).tolist()
offsets = [0.0, 1.0, 100.0]
ln_eps = lambda v, e: layer_norm_reference(v, eps=e)
rms_eps = lambda v, e: rms_norm_reference(v, eps=e)
b11_rows = []
for c in offsets:
    for s in noise_levels:
        tokens = G.mean_dominated_tokens(c, s, 32, d, generator)
        for name, norm, statistic in (("LayerNorm", ln_eps, s * s), ("RMSNorm", rms_eps, c * c + s * s)):
            b11_rows.append(
                {
                    "norm": name,
                    "offset c": c,
                    "noise s": s,
                    "statistic / ε": statistic / B11_EPS,
                    "ε effect": G.eps_effect(norm, tokens, B11_EPS),
                    "output share along 1": G.mean_direction_share(norm(tokens, B11_EPS)),
                }
            )
b11 = pd.DataFrame(b11_rows)

# %% tags=["remove-input"] mystnb={"figure": {"caption": "Left: how much ε changes each norm's output as the per-token noise s shrinks, for three offsets c. Right: the share of the output's energy along the all-ones direction. What to see: RMSNorm's ε matters only when the whole mean square approaches ε; LayerNorm's takes over as soon as the noise does, whatever the offset; and on mean-dominated inputs RMSNorm's output is almost all offset.", "name": "fig-geometry-b11"}}
fig, axes = plt.subplots(1, 2, figsize=(13, 4))
sns.lineplot(
    data=b11.assign(**{"ε effect": b11["ε effect"].clip(lower=1e-18)}),
    x="noise s",
    y="ε effect",
    hue="norm",
    style="offset c",
    markers=True,
    ax=axes[0],
)
axes[0].set_xscale("log")
axes[0].set_yscale("log")
axes[0].axvline(math.sqrt(B11_EPS), color="grey", ls=":", lw=1, label="s = √ε")
axes[0].set_xlabel("per-token noise s (input units; offset c in line style)")
axes[0].set_ylabel("relative output change caused by ε")
axes[0].set_title(f"What ε = {B11_EPS:g} does")
sns.lineplot(
    data=b11[b11["offset c"] > 0].assign(**{"noise / offset": lambda f: f["noise s"] / f["offset c"]}),
    x="noise / offset",
    y="output share along 1",
    hue="norm",
    style="offset c",
    ax=axes[1],
)
axes[1].set_xscale("log")
axes[1].set_xlabel("noise s / offset c (dimensionless)")
axes[1].set_ylabel("share of output energy along 1")
axes[1].set_title("How much of the output is the common offset")
plt.tight_layout()
plt.show()

# %% tags=["remove-cell"]
rms_large = b11[(b11.norm == "RMSNorm") & (b11["statistic / ε"] >= 1e5)]  # mean square ≥ 1: a typical residual stream
ln_small_var = b11[(b11.norm == "LayerNorm") & (b11["statistic / ε"] <= 1.0)]  # variance ≤ ε: near-constant input
ln_large_var = b11[(b11.norm == "LayerNorm") & (b11["statistic / ε"] >= 1e3)]
rms_effect_large = float(rms_large["ε effect"].max())
ln_effect_small = float(ln_small_var["ε effect"].min())
ln_effect_large = float(ln_large_var["ε effect"].max())
dominated = b11[(b11.norm == "RMSNorm") & (b11["offset c"] == 100.0) & (b11["noise s"] <= 1.0)]
rms_offset_share = float(dominated["output share along 1"].min())
rms_signal_share = 1 - rms_offset_share  # what is left for the per-token signal
# spread of the LayerNorm small-variance effect: the same (c, s) point drawn again
near_constant = b11[(b11.norm == "LayerNorm") & (b11["statistic / ε"] <= 1.0)].sort_values("ε effect").iloc[0]
_, ln_effect_spread, _ = G.repeated(
    lambda gen: G.eps_effect(
        ln_eps, G.mean_dominated_tokens(near_constant["offset c"], near_constant["noise s"], 32, d, gen), B11_EPS
    ),
    REPEATS,
)

# %% tags=["remove-cell"]
results.record(
    "B11",
    decide(rms_effect_large < 1e-4 and ln_effect_small > 0.25 and ln_effect_large < 1e-3 and rms_offset_share > 0.99),
    f"With ε = {B11_EPS:g}, RMSNorm's output moves by ≤ {rms_effect_large:.0e} once mean(x²) ≥ 1, whereas LayerNorm's shrinks by "
    f"≥ {ln_effect_small:.0%} when σ² ≤ ε; on mean-dominated inputs (c = 100, s ≤ 1) at most {rms_signal_share:.1e} of RMSNorm's "
    f"output energy is per-token signal (the rest is along 1), the case LayerNorm handles and RMSNorm gives up.",
    {
        "eps": B11_EPS,
        "rms_effect_mean_square_ge_1": rms_effect_large,
        "ln_effect_variance_le_eps_min": ln_effect_small,
        "ln_effect_variance_ge_1e3_eps_max": ln_effect_large,
        "rms_output_share_along_1_mean_dominated": rms_offset_share,
        "rms_signal_share_mean_dominated": rms_signal_share,
    },
    section="geometry-mean-dominated",
    key_number=ln_effect_small,
    threshold=0.25,
    spread=ln_effect_spread,
    rule="Holds if RMSNorm's ε effect is below 1e-4 once mean(x²) ≥ 1, LayerNorm's exceeds 25% when σ² ≤ ε (the key number: "
    "its smallest value there) and stays below 1e-3 when σ² ≥ 1e3·ε, and mean-dominated RMSNorm outputs are > 99% offset.",
)

# %% tags=["remove-input"]
Markdown(
    f"**B11.** With ε = {B11_EPS:g}, RMSNorm's output moves by at most {significant(rms_effect_large)} once mean(x²) ≥ 1; "
    f"LayerNorm's shrinks by at least {ln_effect_small:.0%} once σ² ≤ ε. On mean-dominated inputs (c = 100, s ≤ 1) at most "
    f"{significant(rms_signal_share)} of RMSNorm's output energy is per-token signal."
)

# %% [markdown]
# ## Verdicts
#
# B3 and B16 appear as evidence: B3 is judged in the Jacobian chapter, B16 in the quality chapter.

# %% tags=["remove-input"]
verdict_table(results)

# %% tags=["remove-cell"]
_ = results.save()
