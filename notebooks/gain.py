# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # The gain: scale invariance, effective learning rate and weight decay
#
# Claim B15 says that because RMSNorm is scale invariant, multiplying the gain g by a scales the output by a and
# "the next normalisation eats it", so ‖g‖ barely changes the forward pass but linearly scales the effective
# learning rate, and weight decay on g acts as a learning-rate schedule, which would explain why normalised
# networks are sensitive to the weight-decay coefficient.
#
# In a **pre-LN** block (LLaMA style) the gain is *not* followed by a norm: RMSNorm(x)·g feeds a linear layer,
# whose output is added to the trunk. So the gain is not scale invariant there, and we measure how much scaling it
# changes the loss. The symmetry that does exist is a rescaling of the gain by a together with the next linear
# layer's input weights by 1/a: the function is unchanged (Kunin et al. 2021, *Neural Mechanics*, ICLR). Under that
# symmetry we measure how one optimizer step's change to the layer depends on a, under Adam and under SGD.
# Where weights *are* scale invariant (any weight matrix followed by a norm), the classical results apply, and we
# check them on an exact toy:
#
# - van Laarhoven 2017: the gradient of a scale-invariant w is orthogonal to w and scales as 1/‖w‖, so SGD's
#   effective step on its direction is η/‖w‖².
# - Li & Arora 2020 (ICLR): SGD with weight decay λ on scale-invariant weights follows the same directions as SGD
#   without decay under η_t = η(1−ηλ)^−(2t+1).
# - Wan et al. 2021 (NeurIPS) and Kosson, Messmer & Jaggi 2024 (ICML): the equilibrium norm and angular update under
#   weight decay, for SGD with momentum and for AdamW. The formulas are stated as re-derived under the papers'
#   assumptions (their text was not checked here); the measurements test them directly.

# %% tags=["parameters", "remove-cell"]
profile = "smoke"
results_dir = "build/results"

# %% tags=["remove-cell"]
import math
import time
import warnings

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
import torch
from IPython.display import Markdown

from normlab.analysis import gain as G
from normlab.analysis.shared.paired import paired_difference
from normlab.analysis.shared.parity import interval_text
from normlab.analysis.shared.runs import flat_eval_every, train_job
from normlab.gpt.corpus import load_corpus
from normlab.gpt.model import GPT, GPTConfig
from normlab.runtime.parallel import run_parallel
from normlab.study import Results, decide
from normlab.study.present import claims_box, table, verdict_table

warnings.filterwarnings("ignore", category=UserWarning, module="seaborn")
warnings.filterwarnings("ignore", category=FutureWarning)

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
        seeds=2,
        factors=[0.25, 0.5, 1, 2, 4],
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
        seeds=5,
        factors=[0.25, 0.5, 0.71, 1, 1.41, 2, 4],
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
        seeds=8,
        factors=[0.25, 0.5, 0.71, 1, 1.41, 2, 4],
    ),
}
if profile not in PROFILES:
    raise ValueError(f"profile must be one of {list(PROFILES)}, got {profile!r}")
P = PROFILES[profile]
if P["seeds"] < 5 and profile != "smoke":
    raise ValueError("the paired decay sweep needs at least 5 pairs outside the smoke profile")
if not P["gain_decays"] or min(P["gain_decays"]) < 0 or 0.0 not in P["gain_decays"]:
    raise ValueError(f"gain_decays must be non-negative and include 0.0 (the baseline), got {P['gain_decays']!r}")
gpus = torch.cuda.device_count() if profile == "gpu" else 0
if profile == "gpu" and not gpus:
    raise ValueError("the gpu profile needs CUDA; run with profile='cpu' on this machine")
devices = [f"cuda:{i}" for i in range(gpus)] or None
torch.set_num_threads(1)
sns.set_theme(style="whitegrid")
results = Results("gain", profile, results_dir)
corpus = load_corpus()
started = time.perf_counter()
TOL = 0.10  # relative tolerance for the equilibrium formulas
MARGIN = 0.02  # nats per byte for the paired decay sweep; reason in the text

# %% tags=["remove-input"]
claims_box(["B15"])

# %% [markdown]
# (gain-forward)=
# ## Forward: is the gain scale invariant, and what is?
#
# A small LLaMA-style GPT (pre-LN RMSNorm) and its post-LN twin are trained; then at each norm location we
# multiply the gains by a and measure the validation loss. In pre-LN the locations are the attention-input
# norms, the MLP-input norms and the final norm; in post-LN the norms sit on the trunk. "Barely changes the
# forward pass" is taken as less than 1% of the loss for a ∈ {0.5, 2}. Then, in the pre-LN model, the symmetry:
# every gain times a and its next linear layer's input weights times 1/a. {numref}`fig-gain-forward` shows how
# far the loss moves when only the gains are scaled.

# %% tags=["remove-cell"]
sweep_steps = P["sweep_steps"]
model_kw = dict(context=P["context"], width=P["width"], depth=P["depth"], heads=4)
train_kw = dict(
    steps=P["trained_steps"],
    batch_size=P["batch"],
    lr=P["lr"],
    warmup_steps=P["trained_steps"] // 10,
    eval_every=0,
    eval_batches=2,
    stream_every=0,
    seed=0,
)
decay_kw = dict(
    steps=sweep_steps,
    batch_size=P["batch"],
    lr=P["lr"],
    warmup_steps=sweep_steps // 10,
    eval_every=flat_eval_every(sweep_steps),
    eval_batches=4,
    stream_every=0,
)
jobs = [dict(model={**model_kw, "placement": p}, train=train_kw, keep_weights=True) for p in ("pre", "post")]
decay_keys = [(wd, seed) for seed in range(P["seeds"]) for wd in P["gain_decays"]]
jobs += [
    dict(model=model_kw, train={**decay_kw, "seed": seed, "gain_weight_decay": wd}, history_columns=("gain_norm/*",))
    for wd, seed in decay_keys
]
outputs = run_parallel(train_job, jobs, devices=devices, desc="gain runs")
gpt = {}
for placement, out in zip(("pre", "post"), outputs[:2]):
    gpt[placement] = GPT(GPTConfig(**model_kw, placement=placement))
    gpt[placement].load_state_dict(out["state_dict"])
decay_runs = dict(zip(decay_keys, outputs[2:]))
generator = torch.Generator().manual_seed(777)
eval_batches = [corpus.batch("val", P["batch"], P["context"], generator) for _ in range(4)]
sensitivity = pd.concat(
    [G.gain_sensitivity(gpt[p], eval_batches, P["factors"]).assign(model=f"{p}-LN RMSNorm") for p in gpt],
    ignore_index=True,
)
base_losses = {
    m: float(sensitivity[(sensitivity["model"] == m) & (sensitivity["factor"] == 1)]["loss"].mean())
    for m in sensitivity["model"].unique()
}
near = sensitivity[sensitivity["factor"].isin([0.5, 2.0])].copy()
near["relative"] = near["delta_loss"].abs() / near["model"].map(base_losses)
by_location = near.groupby(["model", "location"])["relative"].max()
forward_holds = bool((by_location < 0.01).all())
symmetry = G.rescale_symmetry(gpt["pre"], eval_batches, P["factors"])
symmetry_max = float(symmetry["delta_loss_rescaled_pair"].abs().max())

# %% tags=["remove-input"] mystnb={"figure": {"caption": "Validation loss change when the gains at one location are multiplied by a, in trained pre-LN and post-LN models. Flat lines would mean the forward pass ignores the gain's scale; in pre-LN nothing after the gain re-normalises it.", "name": "fig-gain-forward"}}
fig, ax = plt.subplots(figsize=(7, 4))
sns.lineplot(data=sensitivity, x="factor", y="delta_loss", hue="location", style="model", marker="o", ax=ax)
ax.set(xscale="log", xlabel="gain multiplier a (log scale)", ylabel="Δ validation loss (nats/byte)")
ax.axhline(0, color="grey", lw=0.8)
plt.tight_layout()
plt.show()

# %% tags=["remove-input"]
table(
    symmetry[["factor", "delta_loss_gain_alone", "delta_loss_rescaled_pair"]].rename(
        columns={
            "factor": "a",
            "delta_loss_gain_alone": "Δ loss, every gain × a",
            "delta_loss_rescaled_pair": "Δ loss, gain × a and next linear × 1/a",
        }
    ),
    caption="Pre-LN model: the gain alone against the (gain, next linear) rescale symmetry (nats/byte)",
)

# %% tags=["remove-input"]
worst = by_location.idxmax()
Markdown(
    f"Scaling one location's gains by 0.5 or 2 changes the loss by up to {by_location.max():.1%} (at {worst[1]}, "
    f"{worst[0]}); the forward pass is {'barely' if forward_holds else 'clearly'} affected. With the next linear "
    f"layer scaled by 1/a as well, the loss changes by at most {symmetry_max:.1e} nats (float32 rounding): that is "
    f"the symmetry pre-LN has."
)

# %% [markdown]
# (gain-effective-update)=
# ## Effective update under the rescale symmetry: Adam against SGD
#
# The function depends on a gain g and the next linear W only through E = W·diag(g). After the rescale (g·a, W/a),
# E is unchanged, but the gradients are not: W's gradient is multiplied by a and g's by 1/a. One optimizer step's
# change of E therefore depends on a. We take one step (fresh optimizer, same batch) at each a, on freshly
# initialised pre-LN models of several seeds, and split ‖ΔE‖/‖E‖ into the part through W's update and through g's.
# Derivation: under SGD the W-part goes as a² and the g-part as a⁻²; Adam's step ignores the gradient's scale, so
# a and a⁻¹. B15's "linearly scales the effective learning rate" is then true, for the next layer, under Adam:
# exponent +1 (threshold ±0.15). {numref}`fig-gain-update` shows the two parts for each optimizer.

# %% tags=["remove-cell"]
update_rows = []
batch = corpus.batch("train", P["batch"], P["context"], torch.Generator().manual_seed(5))
for seed in range(3):
    torch.manual_seed(seed)
    fresh = GPT(GPTConfig(**model_kw))
    for optimizer, lr in (("sgd", 0.1), ("adam", 1e-3)):
        update_rows.append(G.effective_update(fresh, batch, P["factors"], optimizer=optimizer, lr=lr).assign(seed=seed))
updates = pd.concat(update_rows, ignore_index=True)
update_exponents = pd.DataFrame(
    [
        {
            "optimizer": opt,
            "seed": seed,
            "exponent via W (a ≥ 1)": G.fit_power_law(part[part.factor >= 1].factor, part[part.factor >= 1].via_W),
            "exponent via g": G.fit_power_law(part.factor, part.via_g),
        }
        for (opt, seed), part in updates.groupby(["optimizer", "seed"])
    ]
)
adam_w = update_exponents[update_exponents.optimizer == "adam"]["exponent via W (a ≥ 1)"]
sgd_w_update = float(update_exponents[update_exponents.optimizer == "sgd"]["exponent via W (a ≥ 1)"].mean())
adam_exponent, adam_exponent_sd = float(adam_w.mean()), float(adam_w.std())
linear_under_adam = abs(adam_exponent - 1) <= 0.15

# %% tags=["remove-input"] mystnb={"figure": {"caption": "Relative change of the function-level weight E = W·diag(g) in one optimizer step, after the (g·a, W/a) rescale, split into the part through W (solid) and through g (dashed). Adam's W-part rises linearly with a, SGD's quadratically.", "name": "fig-gain-update"}}
long = updates.melt(
    id_vars=["optimizer", "factor", "seed"], value_vars=["via_W", "via_g"], var_name="path", value_name="change"
)
fig, ax = plt.subplots(figsize=(7, 4))
sns.lineplot(data=long, x="factor", y="change", hue="optimizer", style="path", marker="o", ax=ax)
ax.set(xscale="log", yscale="log", xlabel="rescale factor a of the gain", ylabel="‖ΔE‖ / ‖E‖ in one step")
plt.tight_layout()
plt.show()

# %% tags=["remove-input"]
table(
    update_exponents.groupby("optimizer")[["exponent via W (a ≥ 1)", "exponent via g"]]
    .agg(["mean", "std"])
    .pipe(lambda d: d.set_axis([f"{a}, {b}" for a, b in d.columns], axis=1))
    .reset_index(),
    caption="Fitted exponents of the one-step change of E against a (3 seeds)",
)

# %% [markdown]
# (gain-effective-lr)=
# ## Scale-invariant weights: the classical results on an exact toy
#
# A float64 chain x → W1 → RMS-normalise → ⊙g → W2 → RMS-normalise → readout, with no ε, in which W1, g and W2
# are each exactly scale invariant. We rescale one group to several norms, train for a few steps with a torch
# optimizer and measure its effective learning rate (angular update over the gradient on the unit sphere):
# theory says ‖w‖⁻² under SGD and ‖w‖⁻¹ under Adam (tolerance ±0.15). Then Li & Arora's equivalence, and the
# equilibrium norm and angular update under weight decay, each within ±10% (AdamW with β₂ = 0.99 so its
# second-moment estimate reaches steady state within the run); see {numref}`fig-gain-toy`.

# %% tags=["remove-cell"]
chain = G.make_toy_chain(seed=0)
toy_invariance = G.check_scale_invariance(chain, factors=(0.25, 4.0))
scans = []
for optimizer, lr in (("sgd", 0.002), ("adamw", 0.001)):
    for scaled in ("W1", "g"):
        scans.append(
            G.effective_lr_scan(chain, scaled, P["scan_norms"], optimizer=optimizer, lr=lr, steps=P["scan_steps"])
        )
scan = pd.concat(scans, ignore_index=True)
exponents = {(opt, sc): G.effective_lr_exponents(part) for (opt, sc), part in scan.groupby(["optimizer", "scaled"])}
sgd_g, adam_g = exponents[("sgd", "g")]["g"], exponents[("adamw", "g")]["g"]
sgd_w, adam_w_toy = exponents[("sgd", "W1")]["W1"], exponents[("adamw", "W1")]["W1"]
theory_holds = all(abs(v - t) <= 0.15 for v, t in ((sgd_g, -2), (sgd_w, -2), (adam_g, -1), (adam_w_toy, -1)))
equivalence_angle = G.sgd_direction_equivalence(chain, scale=3.0, lr=0.05, steps=P["schedule_steps"] // 4 + 5)
schedule = G.weight_decay_as_schedule(chain, lr=0.1, weight_decay=0.05, steps=P["schedule_steps"])
schedule_angle = float(schedule["angle"].max())
noise_chain = G.make_toy_chain(seed=1, random_labels=True)
elements = noise_chain.params["W1"].numel()
checks, trajectories = [], []
for optimizer, lr, wd in [("sgd", 0.1, 0.1), ("sgdm", 0.05, 0.1), ("adamw", 0.01, 0.5)]:
    run = G.equilibrium_run(noise_chain, optimizer, lr, wd, P["equilibrium_steps"], betas=(0.9, 0.99))
    checks.append({**G.equilibrium_check(run, optimizer, lr, wd, elements), "setting": "toy chain"})
    trajectories.append(run.assign(optimizer=optimizer, setting="toy chain"))
    walk = G.random_walk_equilibrium_run(optimizer, elements, lr, wd, P["equilibrium_steps"], betas=(0.9, 0.99))
    checks.append({**G.equilibrium_check(walk, optimizer, lr, wd, elements), "setting": "random walk"})
    trajectories.append(walk.assign(optimizer=optimizer, setting="random walk"))
equilibrium = pd.DataFrame(checks)
within = lambda r: abs(r - 1) <= TOL
sgd_ok = equilibrium[equilibrium["optimizer"].isin(["sgd", "sgdm"])]
sgd_equilibrium_ok = bool(sgd_ok["norm_ratio"].map(within).all() and sgd_ok["angular_ratio"].map(within).all())
adam_walk = equilibrium[(equilibrium["optimizer"] == "adamw") & (equilibrium["setting"] == "random walk")].iloc[0]
adam_toy = equilibrium[(equilibrium["optimizer"] == "adamw") & (equilibrium["setting"] == "toy chain")].iloc[0]
schedule_holds = (
    schedule_angle < 1e-9
    and sgd_equilibrium_ok
    and within(adam_walk["norm_ratio"])
    and within(adam_walk["angular_ratio"])
)

# %% tags=["remove-input"] mystnb={"figure": {"caption": "Toy chain. Left: SGD with weight decay and SGD without decay under Li & Arora's growing learning rate take the same directions with different norms. Middle and right: norm and angular update under weight decay approach the equilibrium formulas (dotted).", "name": "fig-gain-toy"}}
fig, ax = plt.subplots(1, 3, figsize=(15, 4))
ax[0].plot(schedule["step"], schedule["norm_with_decay"], label="SGD + weight decay")
ax[0].plot(schedule["step"], schedule["norm_scheduled"], label="SGD, growing LR, no decay")
ax[0].set(xlabel="step", ylabel="‖W1‖", title="same directions, different norms")
ax[0].legend(fontsize=8)
traj = pd.concat(trajectories, ignore_index=True)
traj["window"] = traj["step"] // max(1, P["equilibrium_steps"] // 50)
smooth = (
    traj.groupby(["optimizer", "setting", "window"])
    .agg(step=("step", "mean"), norm=("norm", "mean"), angular_update=("angular_update", "mean"))
    .reset_index()
)
sns.lineplot(data=smooth, x="step", y="norm", hue="optimizer", style="setting", ax=ax[1])
sns.lineplot(data=smooth, x="step", y="angular_update", hue="optimizer", style="setting", ax=ax[2], legend=False)
for _, check in equilibrium[equilibrium["setting"] == "random walk"].iterrows():
    ax[1].axhline(check["predicted_norm"], ls=":", lw=1, color="grey")
    ax[2].axhline(check["predicted_angular_update"], ls=":", lw=1, color="grey")
ax[1].set(xlabel="step", ylabel="‖w‖", title="norm → equilibrium")
ax[2].set(xlabel="step", ylabel="angular update per step (rad)", yscale="log", title="angular update")
plt.tight_layout()
plt.show()

# %% tags=["remove-input"]
table(
    pd.DataFrame(
        [
            {"check": "exponent of effective LR, SGD, scaled g", "measured": sgd_g, "expected": -2.0},
            {"check": "exponent of effective LR, SGD, scaled W1", "measured": sgd_w, "expected": -2.0},
            {"check": "exponent of effective LR, Adam, scaled g", "measured": adam_g, "expected": -1.0},
            {"check": "exponent of effective LR, Adam, scaled W1", "measured": adam_w_toy, "expected": -1.0},
            {"check": "Li & Arora: largest angle between the runs (rad)", "measured": schedule_angle, "expected": 0.0},
            {
                "check": "SGD from (3·W1, η) vs (W1, η/9): largest angle (rad)",
                "measured": equivalence_angle,
                "expected": 0.0,
            },
            *[
                {
                    "check": f"equilibrium norm / formula, {r.optimizer}, {r.setting}",
                    "measured": r.norm_ratio,
                    "expected": 1.0,
                }
                for r in equilibrium.itertuples()
            ],
            *[
                {
                    "check": f"angular update / formula, {r.optimizer}, {r.setting}",
                    "measured": r.angular_ratio,
                    "expected": 1.0,
                }
                for r in equilibrium.itertuples()
            ],
        ]
    ),
    caption="Scale-invariant weights on the exact toy",
)

# %% [markdown]
# (gain-wd-gpt)=
# ## Weight decay on the gains of the small GPT
#
# AdamW's decoupled decay multiplies a parameter by (1 − ηλ) each step, so it acts on a timescale of 1/(ηλ) steps.
# A sweep only tests decay if ηλT, the number of timescales in a run of T steps, is well above 1; at the peak
# learning rate η = 3·10⁻³ and T = 300 steps (cpu profile), λ_g = 1, 10 and 30 give ηλT ≈ 0.9, 9 and 27 (the cosine
# schedule's average rate is about 0.55η, so roughly half that). The runs are pairs: the same seed, initial weights
# and batches, only the gains' decay coefficient differs. **Margin, stated before measuring: 0.02 nats** (the
# smallest difference between norm variants reported as real, Narang et al. 2021's T5-base 1.821 vs 1.838; from a
# transcription). "Sensitive" means the paired final-loss change lies wholly beyond the margin; {numref}`fig-gain-decay`
# shows the paired changes and the gains' trajectories.
#
# Which models decay their gains at all? GPT-2's and nanoGPT's training code, and the LLaMA recipes that follow it,
# exempt all 1-D parameters (gains and biases) from weight decay, as `normlab.gpt.train` does by default
# (`gain_weight_decay=0`). Gemma parametrises the gain as (1 + w) with w initialised at 0: decay pulls w, not the
# gain, towards 0, so under decay the gain tends to 1 (the identity), not to 0.

# %% tags=["remove-cell"]
decays = [wd for wd in P["gain_decays"] if wd > 0]
final = {wd: [decay_runs[(wd, s)]["final_val_loss"] for s in range(P["seeds"])] for wd in P["gain_decays"]}
decay_pairs = {
    wd: paired_difference(final[0.0], final[wd], MARGIN)
    for wd in decays
    if all(math.isfinite(v) for v in final[0.0] + final[wd])
}
timescales = {wd: P["lr"] * wd * sweep_steps for wd in decays}
gain_paths = pd.concat(
    [
        pd.DataFrame(
            {
                "step": np.arange(1, len(next(iter(out["history"].values()), [])) + 1),
                "gain_rms": np.mean([v for v in out["history"].values()], axis=0) / math.sqrt(P["width"]),
                "gain_decay": wd,
                "seed": seed,
            }
        )
        for (wd, seed), out in decay_runs.items()
        if out["history"]
    ],
    ignore_index=True,
)
final_gain = gain_paths.groupby(["gain_decay", "seed"]).last()["gain_rms"].groupby("gain_decay").mean()
strongest = max(decay_pairs) if decay_pairs else None
sensitive = strongest is not None and decay_pairs[strongest]["outcome"] == "different"
insensitive = strongest is not None and decay_pairs[strongest]["outcome"] == "equivalent"
sweep_drop = float(np.nanmean([out["final_drop"] for out in decay_runs.values()]))

# %% tags=["remove-input"] mystnb={"figure": {"caption": "Left: paired final-loss change from decaying the gains, one dot per seed, mean and 95% interval, against the ±0.02-nat margin (green); ηλT above each label. Right: RMS of the gains over training for each decay coefficient (band: seeds).", "name": "fig-gain-decay"}}
fig, ax = plt.subplots(1, 2, figsize=(13, 4))
for row, (_wd, pair) in enumerate(decay_pairs.items()):
    ax[0].scatter(pair["differences"], [row] * pair["pairs"], color="grey", s=12)
    ax[0].errorbar(
        [pair["mean_difference"]],
        [row],
        xerr=[[pair["half_width"]], [pair["half_width"]]],
        fmt="o",
        capsize=5,
        color="C0",
    )
ax[0].axvspan(-MARGIN, MARGIN, color="green", alpha=0.15)
ax[0].axvline(0, color="k", lw=0.8)
ax[0].set(
    yticks=range(len(decay_pairs)),
    yticklabels=[f"λ_g = {wd:g} (ηλT = {timescales[wd]:.1f})" for wd in decay_pairs],
    xlabel="final validation loss, decayed − undecayed (nats/byte)",
)
sns.lineplot(
    data=gain_paths, x="step", y="gain_rms", hue="gain_decay", errorbar=("pi", 100), palette="viridis", ax=ax[1]
)
ax[1].set(yscale="log", xlabel="step", ylabel="mean RMS of the norm gains")
plt.tight_layout()
plt.show()

# %% tags=["remove-input"]
table(
    pd.DataFrame(
        [
            {
                "λ_g": wd,
                "ηλT": timescales[wd],
                "Δ loss (nats)": p["mean_difference"],
                "95% CI low": p["ci_low"],
                "95% CI high": p["ci_high"],
                "outcome": p["outcome"],
                "pairs needed": p["pairs_needed"],
                "final gain RMS": float(final_gain.get(wd, math.nan)),
            }
            for wd, p in decay_pairs.items()
        ]
    ),
    caption=f"Paired effect of decaying the gains ({P['seeds']} pairs; undecayed final gain RMS {float(final_gain.get(0.0, math.nan)):.3f})",
)

# %% [markdown]
# ## Verdict for B15
#
# Four parts, each against its threshold above: (1) forward invariance (every location's loss change < 1% for
# a ∈ {0.5, 2}); (2) "linearly scales the effective learning rate", read under the symmetry pre-LN has: Adam's
# one-step change of the next layer through W goes as a^k with k within ±0.15 of 1; (3) decay as a learning-rate
# schedule where weights are scale invariant (Li & Arora to 10⁻⁹ rad and the equilibrium formulas within ±10% in
# their own setting); (4) sensitivity: at the strongest decay (ηλT ≫ 1), the paired final-loss change lies beyond
# the ±0.02-nat margin. All four: holds; two or three: holds with caveats; fewer: does not hold. If the sweep's
# interval is wider than the margin, part (4) counts as failed and the summary says it was not testable. The key
# number is the strongest decay's paired loss change, against the margin.

# %% tags=["remove-cell"]
parts = {
    "forward_invariance": forward_holds,
    "linear_under_adam": bool(linear_under_adam),
    "wd_as_schedule_scale_invariant": bool(schedule_holds),
    "sensitive_to_gain_decay": bool(sensitive),
}
passed = sum(parts.values())
b15 = decide(passed >= 2, caveat=passed < 4)
sweep_text = (
    f"λ_g = {strongest:g} (ηλT = {timescales[strongest]:.0f}) changes the final loss by "
    f"{interval_text(decay_pairs[strongest])}"
    if strongest is not None
    else "the decay sweep diverged"
)
key_pair = decay_pairs.get(strongest) if strongest is not None else None

# %% tags=["remove-input"]
Markdown(
    f"{passed}/4 parts hold. (1) Gains ×0.5 or ×2 change the loss by up to {by_location.max():.1%}; the (gain·a, "
    f"linear/a) symmetry leaves it within {symmetry_max:.0e}. (2) Under the symmetry, Adam's one-step change of the "
    f"next layer goes as a^{adam_exponent:.2f} (sd {adam_exponent_sd:.2f}), SGD's as a^{sgd_w_update:.2f}. (3) Decay ≡ "
    f"growing learning rate to {schedule_angle:.0e} rad on scale-invariant weights; equilibrium formulas "
    f"{'within' if schedule_holds else 'not within'} ±10%. (4) {sweep_text}; loss still fell {sweep_drop:.4f} nats over "
    f"the last 10% of steps. With that decay the gains end at RMS {float(final_gain.get(strongest, math.nan)):.3f} against "
    f"{float(final_gain.get(0.0, math.nan)):.3f} undecayed: in pre-LN, decay that has time to act shrinks what the next "
    f"layer sees, a change of the function and not only of a learning rate.\n\n**B15 verdict: {b15}.**"
)

# %% tags=["remove-cell"]
_ = results.record(
    "B15",
    b15,
    f"{passed}/4 parts hold: gains ×0.5/×2 move the pre-LN loss by up to {by_location.max():.1%} (the gain·a, linear/a "
    f"symmetry by {symmetry_max:.0e}); under it Adam's update of the next layer scales as a^{adam_exponent:.2f} and SGD's "
    f"as a^{sgd_w_update:.2f}; Li & Arora's equivalence to {schedule_angle:.0e} rad; {sweep_text}.",
    {
        "parts": parts,
        "forward": {
            "toy_max_abs_delta_loss": toy_invariance,
            "symmetry_max_abs_delta_loss": symmetry_max,
            "relative_loss_change_at_a_0.5_or_2": {f"{m} / {loc}": float(v) for (m, loc), v in by_location.items()},
        },
        "effective_update": {
            "adam_exponent_via_W": adam_exponent,
            "adam_exponent_sd": adam_exponent_sd,
            "sgd_exponent_via_W": sgd_w_update,
            "reference": "Kunin et al. 2021 rescale symmetry (g*a, W/a); SGD a^2, Adam a^1 derived",
        },
        "effective_lr": {
            "sgd_exponent_gain": sgd_g,
            "sgd_exponent_W1": sgd_w,
            "adam_exponent_gain": adam_g,
            "adam_exponent_W1": adam_w_toy,
            "theory_minus2_minus1_holds": bool(theory_holds),
            "sgd_direction_equivalence_rad": equivalence_angle,
        },
        "wd_schedule": {
            "li_arora_max_angle_rad": schedule_angle,
            "equilibrium": equilibrium.drop(columns=["lr", "weight_decay"]).to_dict("records"),
            "tolerance": TOL,
            "adamw_toy_norm_ratio": float(adam_toy["norm_ratio"]),
            "adamw_toy_angular_ratio": float(adam_toy["angular_ratio"]),
        },
        "decay_sweep": {
            "pairs": {str(wd): p for wd, p in decay_pairs.items()},
            "eta_lambda_T": {str(k): v for k, v in timescales.items()},
            "final_gain_rms": {str(k): float(v) for k, v in final_gain.items()},
            "margin_nats": MARGIN,
            "loss_drop_last_10pct": sweep_drop,
            "sensitive": sensitive,
            "insensitive": insensitive,
        },
        "corpus_sha256": corpus.sha256,
    },
    section="gain-wd-gpt",
    key_number=key_pair["mean_difference"] if key_pair else None,
    threshold=MARGIN,
    spread=key_pair["sd_of_differences"] / math.sqrt(key_pair["pairs"]) if key_pair else None,
    rule="Four parts (forward invariance, Adam's linear scaling under the rescale symmetry, decay as a schedule on "
    "scale-invariant weights, paired sensitivity to gain decay at ηλT ≫ 1 beyond ±0.02 nats): all hold → holds; "
    "two or three → with caveats.",
)

# %% tags=["remove-input"]
verdict_table(results)

# %% tags=["remove-cell"]
results.save()
elapsed = time.perf_counter() - started
