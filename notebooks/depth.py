# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Depth: pre-LN or post-LN, RMSNorm or LayerNorm
#
# The essay (claims B17, B18) says RMSNorm belongs with pre-LN, `x + f(RMS(x))`, because the trunk then
# stays an identity path, and that with post-LN RMSNorm's scale invariance makes deep-signal decay worse
# than LayerNorm's. B19 says the LLaMA-style parts (pre-LN + RMSNorm + SwiGLU + RoPE) interlock.
#
# The result we hold the gradient measurements against is Xiong et al. 2020, *On Layer Normalization in
# the Transformer Architecture* (ICML; arXiv:2002.04745): by mean-field analysis **at initialisation**, the
# gradient of the weights near the output of a **post-LN** Transformer is large and does not shrink with the
# number of layers L, while for **pre-LN** it scales like O(1/√L) (their Theorem 1, for the last FFN
# matrix W^{2,L}); that is why post-LN needs a learning-rate warm-up and pre-LN does not. Their analysis
# assumes an initialisation without depth scaling. Our GPT (like GPT-2) shrinks the projections that write
# into the trunk by 1/√(2·depth), so we measure both initialisations.

# %% tags=["parameters"]
profile = "smoke"
results_dir = "build/results"

# %%
import math
import time

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
import torch
from tqdm.auto import tqdm

from normlab.analysis import depth as D
from normlab.corpus import load_corpus
from normlab.model import GPTConfig
from normlab.study import Results, decide
from normlab.train import TrainConfig

PROFILES = {
    "smoke": dict(init_depths=[1, 2, 4], init_width=32, init_context=16, init_batch=2, init_seeds=[0],
                  train_depths=[1, 2], train_width=32, train_context=16, train_batch=4, train_steps=6,
                  lrs=[3e-3], warmups=[0, 2], ablation_depth=1, ablation_steps=6, ablation_seeds=[0, 1],
                  stress_lr_factor=3.0, device="cpu", threads=1),
    "cpu": dict(init_depths=[2, 4, 8, 16, 32], init_width=48, init_context=32, init_batch=4, init_seeds=[0, 1],
                train_depths=[2, 6], train_width=32, train_context=32, train_batch=8, train_steps=100,
                lrs=[3e-3, 1e-2, 3e-2], warmups=[0, 25], ablation_depth=3, ablation_steps=120, ablation_seeds=[0, 1],
                stress_lr_factor=3.0, device="cpu", threads=1),
    "gpu": dict(init_depths=[2, 4, 8, 16, 32, 64, 128], init_width=256, init_context=128, init_batch=16,
                init_seeds=[0, 1, 2], train_depths=[2, 8, 24], train_width=256, train_context=128, train_batch=32,
                train_steps=400, lrs=[1e-3, 3e-3, 1e-2], warmups=[0, 100], ablation_depth=8, ablation_steps=600,
                ablation_seeds=[0, 1, 2], stress_lr_factor=3.0, device="cuda", threads=4),
}
if profile not in PROFILES:
    raise ValueError(f"profile must be one of {list(PROFILES)}, got {profile!r}")
P = PROFILES[profile]
P["init_depths"] = D.validate_depths(P["init_depths"], "init_depths")
P["train_depths"] = D.validate_depths(P["train_depths"], "train_depths")
D.validate_depths([P["ablation_depth"]], "ablation_depth")
for key in ("init_width", "init_context", "init_batch", "train_width", "train_context", "train_batch",
            "train_steps", "ablation_steps"):
    if not isinstance(P[key], int) or P[key] <= 0:
        raise ValueError(f"{key} must be a positive int, got {P[key]!r}")
if not P["lrs"] or min(P["lrs"]) <= 0:
    raise ValueError(f"lrs must be a non-empty list of positive learning rates, got {P['lrs']!r}")
if not P["warmups"] or min(P["warmups"]) < 0 or max(P["warmups"]) >= P["train_steps"]:
    raise ValueError(f"warmups must be non-negative step counts below train_steps, got {P['warmups']!r}")
if len(P["ablation_seeds"]) < 2:
    raise ValueError("ablation_seeds needs at least two seeds to show a spread")
if P["device"] == "cuda" and not torch.cuda.is_available():
    raise ValueError("the gpu profile needs CUDA; run with profile='cpu' on this machine")
torch.set_num_threads(P["threads"])
results = Results("depth", profile, results_dir)
corpus = load_corpus()
started = time.perf_counter()
print(f"corpus sha256 {corpus.sha256}; unigram entropy {corpus.unigram_entropy_nats:.3f} nats/byte")

# %% [markdown]
# (depth-init)=
# ## At initialisation: gradients, residual norm and token similarity
#
# Four models, {pre, post} × {LayerNorm, RMSNorm}, at each depth, on the same batch of real text. Per block
# we record the gradient norm of its weight matrices, the norm of the residual stream after it, and the mean
# cosine similarity between different tokens of a sequence (1 means every token looks the same).

# %%
CONFIGS = {f"{placement}-{norm}": {"norm": norm, "placement": placement}
           for placement in ("pre", "post") for norm in ("rms", "layer")}
generator = torch.Generator().manual_seed(1234)
x, y = corpus.batch("val", P["init_batch"], P["init_context"], generator)
tokens = torch.cat([x, y[:, -1:]], dim=1)
profiles = {}
for scaled in (False, True):
    frame = D.init_profile(P["init_depths"], CONFIGS, tokens, width=P["init_width"], seeds=P["init_seeds"],
                           depth_scaled_init=scaled)
    frame["init"] = "GPT-2 (depth-scaled)" if scaled else "Xiong (unscaled)"
    profiles[scaled] = frame
init = pd.concat(profiles.values(), ignore_index=True)
exponents = {scaled: D.depth_exponents(profiles[scaled]).set_index("config")["exponent"] for scaled in (False, True)}
spreads = {scaled: D.gradient_spread(profiles[scaled]) for scaled in (False, True)}
print(pd.DataFrame({"exponent, Xiong init": exponents[False], "exponent, GPT-2 init": exponents[True]}))

# %%
last = init[init["layer"] == init["depth"]]
fig, ax = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
for axis, (name, part) in zip(ax, last.groupby("init")):
    sns.lineplot(data=part, x="depth", y="grad_mlp_down", hue="config", marker="o", errorbar=("pi", 100), ax=axis)
    reference = part[part["config"] == "pre-rms"].groupby("depth")["grad_mlp_down"].mean()
    d0 = reference.index.min()
    axis.plot(reference.index, reference.loc[d0] * np.sqrt(d0 / reference.index), "k--", label="∝ 1/√L")
    axis.set(xscale="log", yscale="log", xlabel="depth L (blocks)", ylabel="‖∂loss/∂W_down‖ of the last block (nats per unit weight)",
             title=f"last-block gradient at init — {name}")
    axis.legend(fontsize=8)
plt.tight_layout()

# %% [markdown]
# Xiong et al.'s theorem is about how the last layer's gradient scales with depth. Its levels are another matter:
# here pre-LN's last-block gradient sits far *above* post-LN's. The printout below shows why, with numbers from
# this run: in pre-LN the final norm divides by the trunk's norm, and with embeddings initialised at
# std 0.02 (GPT-2's choice) that trunk is small, so the final norm amplifies the gradient it passes back. In post-LN
# every block's output has already been normalised to unit RMS.

# %%
xiong_last = last[last["init"] == "Xiong (unscaled)"]
level = xiong_last.groupby(["depth", "config"])["grad_mlp_down"].mean().unstack("config")
trunk = init[(init["init"] == "Xiong (unscaled)") & (init["layer"] == init["depth"])]
trunk_norm = trunk.groupby(["depth", "config"])["residual_norm"].mean().unstack("config")
print(pd.DataFrame({
    "pre/post last-block gradient": level[["pre-rms", "pre-layer"]].mean(axis=1) / level[["post-rms", "post-layer"]].mean(axis=1),
    "pre-LN trunk norm at the final norm": trunk_norm[["pre-rms", "pre-layer"]].mean(axis=1),
    "post-LN trunk norm (normalised)": trunk_norm[["post-rms", "post-layer"]].mean(axis=1),
}).round(3))

# %%
deepest = max(P["init_depths"])
at_depth = init[(init["depth"] == deepest) & (init["layer"] > 0)]
fig, ax = plt.subplots(1, 3, figsize=(15, 4))
sns.lineplot(data=at_depth, x="layer", y="grad_norm", hue="config", style="init", errorbar=("pi", 100), ax=ax[0])
ax[0].set(yscale="log", xlabel="block", ylabel="gradient norm of the block's weights (nats per unit weight)",
          title=f"per-block gradient, depth {deepest}")
stream = init[init["depth"] == deepest]
sns.lineplot(data=stream, x="layer", y="residual_norm", hue="config", style="init", errorbar=("pi", 100), ax=ax[1])
ax[1].set(xlabel="layer (0 = embeddings)", ylabel="mean ‖residual stream‖ per token (activation units)",
          title="residual-stream norm")
sns.lineplot(data=stream, x="layer", y="token_cosine", hue="config", style="init", errorbar=("pi", 100), ax=ax[2])
ax[2].set(xlabel="layer (0 = embeddings)", ylabel="mean pairwise cosine between tokens (1 = identical)",
          title="token similarity")
for axis in ax[1:]:
    axis.legend(fontsize=7)
plt.tight_layout()

# %% [markdown]
# (depth-training)=
# ## Short training: which combinations train, which diverge
#
# Every {pre, post} × {RMSNorm, LayerNorm} at a few depths, with and without warm-up, over a small
# learning-rate sweep (AdamW, cosine decay, gradient clipping at 1.0, one seed per cell). A run *trained* if
# it did not diverge and its final validation loss is below the corpus's unigram entropy (it learned more
# than the byte frequencies); it *diverged* if the loss became non-finite or ended above where it started.

# %%
base_model = GPTConfig(context=P["train_context"], width=P["train_width"], depth=2, heads=4)
base_train = TrainConfig(steps=P["train_steps"], batch_size=P["train_batch"], lr=P["lrs"][0], warmup_steps=0,
                         eval_every=0, eval_batches=2, stream_every=0, progress=False, device=P["device"], seed=0)
grid = [{"model": {"norm": norm, "placement": placement, "depth": depth},
         "train": {"lr": lr, "warmup_steps": warmup}}
        for placement in ("pre", "post") for norm in ("rms", "layer")
        for depth in P["train_depths"] for lr in P["lrs"] for warmup in P["warmups"]]
runs = D.train_grid(grid, base_model, base_train, corpus, progress=lambda g: tqdm(g, desc="depth grid"))
runs["config"] = runs["placement"] + "-" + runs["norm"]
runs["warm-up"] = np.where(runs["warmup_steps"] > 0, "with warm-up", "no warm-up")
print(runs[["config", "depth", "lr", "warmup_steps", "diverged", "trained", "final_val_loss"]].to_string(index=False))

# %%
grid_plot = sns.catplot(data=runs.assign(final=runs["final_val_loss"].clip(upper=6.0)), x="depth", y="final",
                        hue="config", col="warm-up", row="lr", kind="point", height=3, aspect=1.4)
grid_plot.set_axis_labels("depth (blocks)", "final validation loss (nats/byte)")
for axis in grid_plot.axes.flat:
    axis.axhline(corpus.unigram_entropy_nats, color="grey", ls=":", lw=1)

# %% [markdown]
# (depth-b19)=
# ## B19: swap one LLaMA-style part at a time
#
# The full LLaMA style against one swap at a time, and one double swap (norm and placement together) to look
# for an interaction: if the parts interlock, the double swap's effect is not the sum of the single ones.
# Each configuration is trained with several seeds at the base learning rate, and once at a stress learning
# rate (×`stress_lr_factor`, no warm-up) to probe stability.

# %%
ablation_grid = [{"label": label, "model": {**D.LLAMA, **swap, "depth": P["ablation_depth"]},
                  "train": {"seed": seed, "lr": P["lrs"][0], "warmup_steps": min(P["warmups"][-1], P["ablation_steps"] // 5)}}
                 for label, swap in D.ABLATIONS.items() for seed in P["ablation_seeds"]]
ablation_grid += [{"label": label, "model": {**D.LLAMA, **swap, "depth": P["ablation_depth"]},
                   "train": {"seed": 0, "lr": P["lrs"][0] * P["stress_lr_factor"], "warmup_steps": 0}}
                  for label, swap in D.ABLATIONS.items()]
ablation_base = TrainConfig(steps=P["ablation_steps"], batch_size=P["train_batch"], lr=P["lrs"][0], warmup_steps=0,
                            eval_every=0, eval_batches=2, stream_every=0, progress=False, device=P["device"])
ablation = D.train_grid(ablation_grid, base_model, ablation_base, corpus, progress=lambda g: tqdm(g, desc="ablation"))
ablation["setting"] = np.where(ablation["lr"] > P["lrs"][0], "stress lr", "base lr")
base = ablation[ablation["setting"] == "base lr"]
summary = base.groupby("label", sort=False)["final_val_loss"].agg(["mean", "min", "max"])
summary["spread"] = summary["max"] - summary["min"]
summary["delta_vs_llama"] = summary["mean"] - summary.loc["llama", "mean"]
summary["beyond_spread"] = summary["delta_vs_llama"].abs() > (summary["spread"] + summary.loc["llama", "spread"]) / 2
stress = ablation[ablation["setting"] == "stress lr"].set_index("label")
summary["stress_final"] = stress["final_val_loss"]
summary["stress_diverged"] = stress["diverged"]
print(summary.round(4).to_string())

# %%
fig, ax = plt.subplots(figsize=(9, 4))
sns.stripplot(data=ablation, x="label", y="final_val_loss", hue="setting", dodge=True, size=7, ax=ax)
ax.set(xlabel="configuration (one LLaMA-style part swapped)", ylabel="final validation loss (nats/byte)",
       title=f"ablation at depth {P['ablation_depth']}: each dot one seed")
ax.tick_params(axis="x", rotation=20)
plt.tight_layout()

# %% [markdown]
# ## Verdicts
#
# **B17** (pre-LN keeps the trunk an identity path, so gradients flow back undamped): at the deepest depth,
# the per-block gradient norms of the pre-LN models may differ by at most a factor of 10 from block to block,
# and in the training grid pre-LN must train (without warm-up) at least as often as post-LN.
# We also hold the last-block gradient against Xiong et al.'s O(1/√L) (pre-LN) and O(1) (post-LN), exponents
# −0.5 and 0, tolerance ±0.2.

# %%
deep_pre = spreads[False][(spreads[False]["depth"] == deepest) & spreads[False]["config"].str.startswith("pre")]
deep_pre_scaled = spreads[True][(spreads[True]["depth"] == deepest) & spreads[True]["config"].str.startswith("pre")]
pre_spread = float(max(deep_pre["max_over_min"].max(), deep_pre_scaled["max_over_min"].max()))
no_warm = runs[runs["warmup_steps"] == 0]
pre_rate = float(no_warm[no_warm["placement"] == "pre"]["trained"].mean())
post_rate = float(no_warm[no_warm["placement"] == "post"]["trained"].mean())
post_warm_rate = float(runs[(runs["placement"] == "post") & (runs["warmup_steps"] > 0)]["trained"].mean())
xiong_pre = float(np.mean([exponents[False][c] for c in ("pre-rms", "pre-layer")]))
xiong_post = float(np.mean([exponents[False][c] for c in ("post-rms", "post-layer")]))
xiong_match = abs(xiong_pre + 0.5) <= 0.2 and abs(xiong_post) <= 0.2
b17_holds = pre_spread <= 10 and pre_rate >= post_rate and pre_rate > 0
results.record(
    "B17", decide(b17_holds, caveat=(post_rate == 1.0 or not xiong_match)),
    f"At depth {deepest} the pre-LN per-block gradient norms differ by at most ×{pre_spread:.2f} (threshold ×10); "
    f"without warm-up pre-LN trained in {pre_rate:.0%} of grid runs vs post-LN {post_rate:.0%} "
    f"(post-LN with warm-up {post_warm_rate:.0%}) at depths {P['train_depths']}, lr ≤ {max(P['lrs']):g}, {P['train_steps']} steps "
    f"with gradient clipping; last-block gradient ~ L^{xiong_pre:.2f} (pre) and L^{xiong_post:.2f} (post) "
    f"vs Xiong et al. 2020's L^-0.5 and L^0.",
    {"deepest_depth": deepest, "pre_ln_gradient_max_over_min": pre_spread, "pre_trained_rate_no_warmup": pre_rate,
     "post_trained_rate_no_warmup": post_rate, "post_trained_rate_with_warmup": post_warm_rate,
     "exponent_pre_xiong_init": xiong_pre, "exponent_post_xiong_init": xiong_post,
     "exponent_pre_gpt2_init": float(np.mean([exponents[True][c] for c in ("pre-rms", "pre-layer")])),
     "exponent_post_gpt2_init": float(np.mean([exponents[True][c] for c in ("post-rms", "post-layer")])),
     "xiong_reference": "Xiong et al. 2020 Thm 1: post-LN last-layer grad O(d sqrt(ln d)), pre-LN O(d sqrt(ln d / L))",
     "corpus_sha256": corpus.sha256},
    section="depth-init")

# %% [markdown]
# **B18** (with post-LN, RMSNorm's deep-signal decay is worse than LayerNorm's): we compare post-RMS with
# post-LayerNorm on (i) the first-block/last-block gradient ratio at initialisation at the deepest depth
# (worse means smaller by more than 10%), (ii) the token similarity at the last layer (worse means higher by
# more than 0.02), and (iii) the final validation loss in the training grid at the deepest trained depth (worse means
# higher by more than the seed-to-seed spread measured in the ablation). The claim holds if post-RMS is worse
# on the training measure and on at least one initialisation measure.

# %%
def _pick(frame, config, column):
    return float(frame[(frame["config"] == config) & (frame["depth"] == deepest)][column].mean())

ratio_rms, ratio_ln = _pick(spreads[False], "post-rms", "first_over_last"), _pick(spreads[False], "post-layer", "first_over_last")
top = init[(init["depth"] == deepest) & (init["layer"] == deepest) & (init["init"] == "Xiong (unscaled)")]
cos_rms = float(top[top["config"] == "post-rms"]["token_cosine"].mean())
cos_ln = float(top[top["config"] == "post-layer"]["token_cosine"].mean())
deep_train = max(P["train_depths"])
post_deep = runs[(runs["placement"] == "post") & (runs["depth"] == deep_train)]
paired = post_deep.pivot_table(index=["lr", "warmup_steps"], columns="norm", values="final_val_loss")
gaps = (paired["rms"] - paired["layer"]).to_numpy(dtype=float)
gaps = gaps[np.isfinite(gaps)]  # a diverged run has no comparable final loss; its rate below says so
loss_gap = float(gaps.mean()) if len(gaps) else 0.0
noise = float(summary["spread"].max())
init_worse = (ratio_rms < 0.9 * ratio_ln) or (cos_rms > cos_ln + 0.02)
train_worse = loss_gap > noise
results.record(
    "B18", decide(train_worse and init_worse, caveat=False),
    f"Post-LN at depth {deepest}: first/last-block gradient ratio {ratio_rms:.3f} (RMSNorm) vs {ratio_ln:.3f} (LayerNorm), "
    f"last-layer token cosine {cos_rms:.3f} vs {cos_ln:.3f}; after training at depth {deep_train}, RMSNorm minus LayerNorm "
    f"final loss {loss_gap:+.3f} nats against a seed spread of {noise:.3f}.",
    {"deepest_init_depth": deepest, "post_rms_first_over_last": ratio_rms, "post_layer_first_over_last": ratio_ln,
     "post_rms_token_cosine": cos_rms, "post_layer_token_cosine": cos_ln, "train_depth": deep_train,
     "post_rms_minus_layer_final_loss": loss_gap, "seed_spread": noise,
     "post_rms_trained_rate": float(post_deep[post_deep["norm"] == "rms"]["trained"].mean()),
     "post_layer_trained_rate": float(post_deep[post_deep["norm"] == "layer"]["trained"].mean())},
    section="depth-training")

# %% [markdown]
# **B19** (the parts interlock; replacing one means re-validating the rest): a swap *matters* when its mean
# final loss differs from the LLaMA style by more than the mean of the two seed ranges, or when it diverges at the stress
# learning rate while LLaMA style does not. Holds if every single swap matters, holds with caveats if some do,
# does not hold if none does. The interaction is Δ(double swap) − Δ(norm swap) − Δ(placement swap).

# %%
singles = ["rms→layer", "swiglu→gelu", "rope→learned", "pre→post"]
llama_stress_diverged = bool(summary.loc["llama", "stress_diverged"])
matters = {s: bool(summary.loc[s, "beyond_spread"]) or (bool(summary.loc[s, "stress_diverged"]) and not llama_stress_diverged)
           for s in singles}
interaction = float(summary.loc["rms→layer + pre→post", "delta_vs_llama"] - summary.loc["rms→layer", "delta_vs_llama"]
                    - summary.loc["pre→post", "delta_vs_llama"])
n_matter = sum(matters.values())
results.record(
    "B19", decide(n_matter > 0, caveat=n_matter < len(singles)),
    f"{n_matter} of {len(singles)} single swaps change the final loss beyond the seed spread or break stability "
    f"(Δ vs LLaMA style: " + ", ".join(f"{s} {summary.loc[s, 'delta_vs_llama']:+.3f}" for s in singles) +
    f" nats); interaction of norm and placement swaps {interaction:+.3f} nats.",
    {"depth": P["ablation_depth"], "steps": P["ablation_steps"], "seeds": len(P["ablation_seeds"]),
     "delta_vs_llama": {s: float(summary.loc[s, "delta_vs_llama"]) for s in summary.index},
     "seed_spread": {s: float(summary.loc[s, "spread"]) for s in summary.index},
     "stress_diverged": {s: bool(summary.loc[s, "stress_diverged"]) for s in summary.index},
     "matters": matters, "interaction_norm_placement": interaction},
    section="depth-b19")

# %%
results.save()
print(f"depth chapter ran in {time.perf_counter() - started:.0f} s")
