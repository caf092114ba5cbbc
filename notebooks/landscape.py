# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Beyond the two norms: DyT, Peri-LN, QK-norm and LayerNorm Scaling
#
# The articles ask whether RMSNorm can replace LayerNorm. Models built since ask more: can a Transformer drop
# normalisation altogether (Dynamic Tanh, DyT)? Should the norm sit before the sublayer, after it, or on both
# sides (Peri-LN, Gemma 2/3, OLMo 2)? Must queries and keys be normalised (QK-norm)? Do the deep layers of a
# pre-LN model go to waste (the Curse of Depth, and its remedy LayerNorm Scaling)?
#
# This chapter tests the four claims on the book's own byte-level GPT (`normlab.gpt.model.GPT`), corpus and pipeline,
# each against the LLaMA-style baseline (pre-LN RMSNorm, SwiGLU, RoPE) with paired runs: same seed, same initial value
# of every shared parameter, same batches. The papers trained models of hundreds of millions to billions of parameters;
# the models here are thousands of times smaller (their sizes are given below). A claim that does not show at this scale
# is **not refuted** by that: each verdict says what small scale can and cannot show.

# %% tags=["parameters", "remove-cell"]
profile = "smoke"
overrides = {}  # settings that replace the profile sizes (from `make book SET`)
results_dir = "build/results"

# %% tags=["remove-cell"]
import warnings

import matplotlib.pyplot as plt
import seaborn as sns
import torch
from IPython.display import Markdown

from normlab.analysis.landscape import (
    at_a_glance,
    curse_of_depth,
    derf,
    dyt,
    figures,
    method,
    placement,
    profiles,
    qk_norm,
    regime,
    runs,
)
from normlab.analysis.shared import confirmation
from normlab.gpt.corpus import load_corpus
from normlab.gpt.model import GPT, GPTConfig
from normlab.norms.derf import DEFAULT_ALPHA_INIT, DEFAULT_SHIFT_INIT
from normlab.study import Results, design
from normlab.study.key_numbers import POINTS, format_value
from normlab.study.present import claims_box, significant, table, verdict_table
from normlab.study.prose import percent, state

# %% tags=["remove-cell"]
P = profiles.profile_settings(profile, overrides)  # the profiles' model sizes, grids and seeds
warnings.filterwarnings("ignore", message=".*Converting a tensor with requires_grad.*")
device = "cuda" if profile == "gpu" and torch.cuda.is_available() else "cpu"
torch.set_num_threads(1)
sns.set_theme(style="whitegrid")
results = Results("landscape", profile, results_dir, overrides)
corpus = load_corpus()

# %% tags=["remove-input"]
claims_box(["V1", "V7", "V6", "V2", "V3", "V4"], overrides=overrides)

# %% [markdown]
# (landscape-method)=
# ## Method, and the margins fixed before measuring
#
# Three model scales, each trained with warm-up and cosine decay, AdamW and gradient clipping at 1
# (`normlab.gpt.train.train`):
#
# - **small** (the quality chapter's scale) for DyT and QK-norm (V1, V3), with a learning-rate grid;
# - **deep** (at least 12 blocks on the cpu profile) for the four placements (V2), with a learning-rate grid;
# - **deepest** (the deepest this machine affords) for LayerNorm Scaling (V4).
#
# Every variant changes one thing against LLaMA-style pre-LN RMSNorm at the same scale. All runs are independent
# and run in parallel worker processes, one thread each. Margins, stated here before any run:
#
# - **Loss margin: {glue:text}`loss_margin` nats per byte** on the final validation loss. That is about 2% of a trained
#   small model's loss (1.5–2 nats per byte on the cpu profile), below what a reader would call a change of quality. A
#   variant "matches" the baseline when the 95% paired interval of (variant − baseline) lies entirely below
#   +{glue:text}`loss_margin` (non-inferiority), and is "worse" when it lies entirely at or above
#   +{glue:text}`loss_margin`.
# - **Usable learning rate**: a run that did not diverge and ended within **{glue:text}`usable_tolerance` nats per byte** of the
#   best run among the variants a claim compares, at that scale: with and without QK-norm for V3, the four placements
#   for V2, DyT's two recipes and RMSNorm for V1 (a loss {glue:text}`usable_tolerance` nats per byte worse is a visibly weaker
#   model, but one that trained). The usable range is the contiguous stretch of grid points that are usable; "first
#   unusable" is the grid point above it that is not, by a loss gap or a divergence. Usable is a measure of quality,
#   not of stability: V3, a claim about divergence, reads divergence alone. This rule first read "the best run at that scale": once DyT with
#   an RMSNorm final norm, under the authors' AdamW, was added and trained 0.2 nats per byte better than any other variant, that
#   bar would have judged QK-norm against a model V3 is no part of, so the bar is now each claim's own.
# - **V1's α₀ sweep** (registered on 3 December 2026, before it ran): while the best α₀ at a width is the sweep's lowest,
#   the sweep adds the value {glue:text}`alpha_step` times lower, down to {glue:text}`alpha_floor`, round after round.

# %% tags=["remove-cell"]
LOSS_MARGIN = design.value("V1", "margin")
USABLE_TOLERANCE = design.value("V1", "usable_tolerance")
ALPHA_RULE = design.values("V1", "alpha_step", "alpha_floor")
state(
    loss_margin=LOSS_MARGIN,
    usable_tolerance=USABLE_TOLERANCE,
    alpha_step=f"{ALPHA_RULE['alpha_step']:g}",
    alpha_floor=significant(ALPHA_RULE["alpha_floor"]),
)
trained = runs.run_jobs(runs.landscape_jobs(P, device), P)
trained += runs.extend_alpha_sweep(P, trained, device, step=ALPHA_RULE["alpha_step"], floor=ALPHA_RULE["alpha_floor"])
study = method.Landscape(P, trained, corpus, loss_margin=LOSS_MARGIN, usable_tolerance=USABLE_TOLERANCE)

# %% tags=["remove-input"]
Markdown(method.overview(study) + "\n\n" + study.missing_paragraph())

# %% [markdown]
# (landscape-dyt)=
# ## V1: Dynamic Tanh in place of every norm
#
# > Dynamic Tanh, DyT(x) = γ ⊙ tanh(αx) + β, can replace every norm layer of a Transformer and match its
# > quality without tuning (Zhu et al., CVPR 2025).
#
# **What the record shows.** The verdict's first sentences say where DyT by its authors' recipe fails at this size and
# how DyT in the blocks with an RMSNorm final norm compares with RMSNorm; the table after them sets each arm's final
# loss beside the byte frequencies' entropy ({glue:text}`entropy` nats per byte, the loss of a model that knows only
# how often each byte occurs). An arm is *trained* when it ends at least {glue:text}`trained_minimum` nats per byte
# below it (registered for every trained claim on 7 December 2026, after the committed build 2fea7bb had shown V1's DyT
# arm, V7's Derf and DyT arms and V6's shortest budgets short of it). V1 claims DyT replaces the norms *without tuning*, so an arm that fails to train
# under the authors' recipe is its answer, not a failed test: its verdict stands and says so. A DyT layer is read as
# *saturated* when at least {glue:text}`saturated_share` of its inputs sit where float32's tanh′(αx) is exactly 0, in
# every seed at the end of training (the rule is stated in full below).

# %% tags=["remove-cell"]
SATURATED_SHARE = design.value("V1", "saturated_share")
state(
    saturated_share=percent(SATURATED_SHARE),
    earlier_alpha=GPTConfig.dyt_alpha,
    entropy=f"{study.entropy:.4f}",
    trained_minimum=f"{design.value('V1', 'trained_minimum'):g}",
)
pairs = dyt.dyt_pairs(study)
alphas = dyt.alpha_sensitivity(study)
probes = dyt.dyt_probes(P, corpus)
v1 = dyt.dyt_claim(study, pairs, alphas, probes, saturated_share=SATURATED_SHARE)
v1 = study.judge("V1", v1)  # not testable where a run it rests on failed every attempt, naming it
v1 = method.record(v1, results, "V1", "landscape-dyt")  # the did-it-train rule, and every look disclosed

# %% tags=["remove-input"]
Markdown(dyt.dyt_paragraph(v1))

# %% tags=["remove-input"]
table(
    method.arms_table({"V1": v1}),
    caption="V1's arms at the reference learning rate, mean over seeds, in nats per byte: the validation loss at "
    "step 0 and at the end, the byte frequencies' entropy, how far the final loss ends below it, and whether that is "
    "the registered minimum or more.",
)

# %% [markdown]
# **Test.** The primary DyT model follows the authors' own LLaMA code (`jiachenzhu/DyT`, `other_tasks/LLaMA`),
# read file by file:
#
# - **no β**: their DyT layer holds only α and γ (`fms_fsdp/models/llama.py`, `LayerNormParameterized`);
# - **α₀ by position and width**: one value for the norm in front of attention and one for the MLP norms and the
#   final norm (`--attn_alpha_init_value`, `--ffn_alpha_init_value`, `--dec_alpha_init_value` in their README's
#   commands: `0.8` and `0.2` at width 4096, down to `0.2` and `0.05` at 8192). They give none below width 4096, so the
#   models here take their narrowest model's 0.8 and 0.2, and a sweep moves both together at the same 4 : 1 ratio.
#   **Rule for the sweep (registered before its extension ran):** while the best α₀ at a width is the sweep's lowest,
#   the sweep adds the value {glue:text}`alpha_step` times lower, down to {glue:text}`alpha_floor`, so that the best is
#   an optimum with a swept value on each side; one still at the floor is reported as the sweep's edge, not an optimum;
# - **the embeddings times a learnable scalar** initialised to √width (`shared_scale`);
# - **AdamW with weight decay 0.1 on every parameter**, α, γ and that scalar included (`main_training_llama.py`
#   passes `model.parameters()` whole), betas (0.9, 0.95), clipping at 1, as here;
# - **their learning rate, scaled**: 3e-4 for DyT, and the same 3e-4 for their RMSNorm baseline (the README runs
#   the baseline with the same command minus the three α₀ flags). What carries over to a model a hundred
#   thousand times smaller is that ratio, 1, not the absolute rate, which was tuned for 7B parameters: DyT runs at
#   this chapter's RMSNorm learning rate, over the same grid.
#
# It is judged against RMSNorm trained with the same AdamW (their baseline), paired over seeds: the pair differs in the
# norm alone. Beside it, **DyT in the blocks with an RMSNorm final norm**, the same recipe otherwise: a final layer that
# is not scale-invariant rewards the last hidden state for growing until tanh saturates, which would stop the gradient
# to everything below it (the mechanism TaperNorm, arXiv 2602.10408, names for models without a final norm; SeeDNorm,
# arXiv 2510.22777, argues saturation makes DyT's gradients vanish). The study's earlier recipe (β kept, α₀ =
# {glue:text}`earlier_alpha` everywhere, α and the scalar undecayed) and the same without the embedding scale are kept
# at the reference learning rate only: their pair still measures what the scale does. Their learning-rate grid and their
# α₀ sweep are dropped: the authors' recipe now carries both.
#
# Through training, at every evaluation, each DyT run logs each DyT layer's α, the RMS of the last hidden state
# (the final norm's input), the share of each DyT layer's inputs at which float32's tanh′(αx) is exactly 0, and
# the mean gradient reaching the blocks' matrices. **Rule for the diagnosis (fixed before measuring):** a DyT layer is
# *saturated* when at least **{glue:text}`saturated_share`** of its inputs sit there in every seed at the end of
# training; the sentence names the final DyT layer as the failing part when it is saturated, and reads DyT with an
# RMSNorm final norm against the same {glue:text}`loss_margin`-nat-per-byte margin.

# %% tags=["remove-input"] mystnb={"figure": {"caption": "Left: final validation loss at the reference learning rate, one line per seed joining its paired runs; 'authors' recipe' is DyT as in the authors' LLaMA code, 'authors' AdamW' RMSNorm under the same optimiser, 'study's recipe' the earlier DyT with β and one α₀, 'DyT plain' the same without the embedding scale. Middle: the authors' recipe's final loss against the initial α of the norms not in front of attention (the one in front of attention starts four times higher), on two widths; RMSNorm's under the same AdamW (the authors' baseline) as a dashed line per width. Right: final loss over the learning-rate grid (mean over grid seeds; a missing point diverged).", "name": "fig-landscape-dyt"}}
figures.dyt(study.frame, P, study.entropy)
plt.show()

# %% tags=["remove-input"] mystnb={"figure": {"caption": "DyT through training, seed 0 of each DyT variant at the reference learning rate. Left: share of the final DyT layer's inputs at which float32's tanh′(αx) is exactly 0 (the final norm, or the last block's second norm where the final norm is RMSNorm). Second: RMS of the last hidden state, the final norm's input (log scale). Third: α of every DyT layer, the final DyT layer's thick (log scale). Right: mean absolute gradient reaching the blocks' weight matrices on the same batch (symmetric log scale; 0 is exactly 0).", "name": "fig-landscape-dyt-trace"}}
figures.dyt_trace(dyt.traced_runs(study))
plt.show()

# %% tags=["remove-input"]
table(
    dyt.dyt_pairs_table(pairs),
    caption="Paired final-loss differences at the reference learning rate (nats/byte); 'no worse' = interval below "
    "+0.03. 'Same AdamW': RMSNorm trained with the authors' optimiser, decay on every parameter.",
)

# %% tags=["remove-input"]
table(
    alphas,
    caption="The authors' recipe's initial α on two widths (α₀ of the norms not in front of attention; that one "
    "starts at 4×; seed 0, reference learning rate), beside RMSNorm under the same AdamW; 'optimum interior': a swept "
    "α₀ on each side of the best.",
)

# %% tags=["remove-cell"]
V7_MARGIN = design.value("V7", "margin")
state(v7_margin=V7_MARGIN, derf_alpha_init=DEFAULT_ALPHA_INIT, derf_shift_init=DEFAULT_SHIFT_INIT)

# %% [markdown]
# (landscape-derf)=
# ## V7: Dynamic erf beside DyT and RMSNorm
#
# > Dynamic erf, Derf(x) = γ ⊙ erf(αx + s) + β, replaces every norm layer and outperforms LayerNorm, RMSNorm and
# > DyT; its gains stem largely from better generalisation rather than a closer fit to the training data.
# > (Chen, Lu, Zhu, Sun & Liu, "Stronger Normalization-Free Transformers", arXiv 2512.10938)
#
# Derf is DyT with erf in place of tanh and a learnable shift s. Its authors' GPT-2 code makes every norm Derf (with
# γ and β per channel, α and s one scalar each, starting at {glue:text}`derf_alpha_init` and
# {glue:text}`derf_shift_init`) and multiplies the embeddings by a learnable
# √width, as DyT's recipe does. **Design (registered before its runs):** V1's small model, steps and optimiser
# (the DyT authors' AdamW, decay on every parameter), trained with the compiled trainer in three arms paired by seed:
# RMSNorm, DyT by V1's authors' recipe, and Derf. Each run reports its final validation loss and, as the authors
# measure fit, its training loss in evaluation mode after training, over every tenth batch it trained on; the
# generalisation gap is the first minus the second. **Rule:** holds when the paired 95% intervals of Derf − RMSNorm
# and Derf − DyT (validation loss) lie below +{glue:text}`v7_margin` nats per byte and Derf's gap is below
# RMSNorm's (that interval below 0); holds with caveats when only Derf − RMSNorm lies below the margin; does not hold
# when it lies above; otherwise not testable here. Every arm must have trained (V1's rule above): an arm that ends
# less than {glue:text}`trained_minimum` nats per byte below the entropy makes the comparison not testable here.
#
# **What differs from the authors' recipe.** Their GPT-2 runs (`zlab-princeton/Derf`, `language model`: nanoGPT's
# `train.py` with their `train_derf.patch` and `model_derf.patch`, read file by file) train with nanoGPT's AdamW,
# which decays only the weight matrices (α, s, γ, β and the embedding scale undecayed), and their training script
# starts every Derf layer's α at 1.0 (`attn_alpha_init_value`, `ffn_alpha_init_value` and `dec_alpha_init_value`,
# which override the module's own default of {glue:text}`derf_alpha_init`; their README leaves the three values to the reader). Their rate is
# 6e-4 with 2,000 warm-up steps of a 600,000-step cosine, for 124M parameters. The design registered here (before
# its runs, on 5 December 2026) took V1's optimiser, AdamW with decay on **every** parameter, and α₀ = {glue:text}`derf_alpha_init` for every Derf
# layer: so it is not the authors' recipe, and no sentence on this page calls it theirs. Changing it now, after its
# outcome was seen, would need a new registration on fresh seeds; this build keeps the registered design and names
# the difference in the verdict's first sentence.

# %% tags=["remove-cell"]
derf_runs = runs.run_jobs(runs.derf_jobs(P), P)
v7 = derf.derf_claim(derf_runs, V7_MARGIN, corpus.unigram_entropy_nats)
v7 = method.record(v7, results, "V7", "landscape-derf")  # the did-it-train rule, and every look disclosed

# %% tags=["remove-input"] mystnb={"figure": {"caption": "V7's three arms, paired by seed (RMSNorm, DyT by V1's recipe, Derf by its authors' GPT-2 module with V1's AdamW and its default α₀). Left: final validation loss, one line per seed joining its paired runs; the dotted line is the byte frequencies' entropy. Right: each run's training loss in evaluation mode (over every tenth batch it trained on) against its validation loss; the dashed diagonal is a generalisation gap of zero.", "name": "fig-landscape-derf"}}
figures.derf(derf.arm_runs(derf_runs), derf.ARM_NAMES, corpus.unigram_entropy_nats)
plt.show()

# %% tags=["remove-input"]
table(
    derf.derf_table(v7),
    caption="V7 in nats per byte: per arm, the mean over seeds of the final validation loss, the training loss in "
    "evaluation mode and their difference (the gap); below, the paired differences with their 95% intervals.",
)

# %% tags=["remove-input"]
Markdown(derf.derf_paragraph(v7))

# %% tags=["remove-input"]
table(
    method.arms_table({"V7": v7}),
    caption="V7's arms, mean over seeds, in nats per byte: the validation loss at step 0 and at the end, the byte "
    "frequencies' entropy, how far the final loss ends below it, and whether that is the registered minimum or more.",
)

# %% tags=["remove-cell"]
V6_MARGIN = design.value("V6", "margin")
V6_BOUND = design.value("V6", "saturation_bound")
v6_passes = [
    profiles.regime_passes(P["regime_steps"], P["regime"]["train"]["batch_size"], P["regime"]["model"]["context"], size)
    for size in P["regime_sizes"]
]
state(
    v6_margin=V6_MARGIN,
    v6_bound=V6_BOUND,
    v6_steps=P["regime_steps"],
    v6_sizes=", ".join(f"{size:,}" for size in P["regime_sizes"]),
    v6_passes=", ".join(significant(p) for p in v6_passes),
    v6_bytes_trained=f"{P['regime_steps'] * P['regime']['train']['batch_size'] * P['regime']['model']['context']:,}",
    v6_alpha=f"{profiles.VERMA_ALPHA:g}",
    v6_smallest=f"{P['regime_sizes'][0]:,}",
    v6_bytes_per_parameter=significant(
        P["regime_sizes"][-1] / GPT(GPTConfig(**P["regime"]["model"])).num_parameters(), 2
    ),
    v6_warmup=percent(profiles.REGIME_WARMUP_SHARE),
)

# %% [markdown]
# (landscape-regime)=
# ## V6: DyT's regime, and why DyT fails here
#
# > Removing the norm by Dynamic Tanh is a regime-dependent implicit regularizer: DyT improves validation loss at few
# > tokens per parameter and worsens it at many, tracking the share of saturated activations; in Llama models its
# > collapse localises to SwiGLU gating. (Verma, "When Does Removing LayerNorm Help? Activation Bounding as a
# > Regime-Dependent Implicit Regularizer", arXiv 2604.23434)
#
# **What Verma varied.** Verma's "1M" and "118M tokens" are the sizes of the training set, not the length of
# training: the source's repository (`lucky-verma/dyt-composition-study`) cuts WikiText-103's first 1M and 10M tokens
# into subsets beside the full set (`code/prepare_wikitext.py`), and its launchers train every model for the same
# `--max_iters=5000` steps of 64 × 512 tokens (`code/run_3seed.sh`, `run_scaling.sh`): about 164 passes over the 1M
# set, 16 over the 10M set and 1.4 over the full one. So DyT's "regime" is how often a model sees the same data.
#
# **Design (registered on 7 December 2026, before any run of its seeds).** V1's small model, batch and learning rate,
# every run trained the same **{glue:text}`v6_steps` steps** ({glue:text}`v6_bytes_trained` bytes) on a training set
# that is the first **{glue:text}`v6_sizes` bytes** of the corpus's training split: **{glue:text}`v6_passes`
# passes**, Verma's passes over 1M, 10M and 118M tokens. Every run is validated on the same validation text. The arms
# are paired by seed: RMSNorm, and DyT as Verma ran it (every norm DyT, the final one included, without β, α₀ =
# {glue:text}`v6_alpha`, no embedding scale), both under nanoGPT's AdamW (decay on the weight matrices only) with a
# warm-up of {glue:text}`v6_warmup` of the steps and a constant rate after it, as Verma's 2,000 warm-up steps of 5,000
# and a cosine over 600,000 steps that has barely begun by the end. On the largest set both arms train again with a
# GELU MLP in place of SwiGLU (Verma's ablation of the gate, made at 118M). Each DyT run reports the share of all its
# DyT layers' inputs with |αx| > {glue:text}`v6_bound` at the end (Verma's saturated share). **Rule:** the regime
# difference is DyT − RMSNorm on the largest set minus on the smallest, and the gate difference is DyT − RMSNorm with
# GELU minus with SwiGLU on the largest, both paired by seed. V6 holds when the regime difference's 95% interval lies
# above +{glue:text}`v6_margin` nats per byte and the gate difference's below −{glue:text}`v6_margin`; holds with
# caveats when only the regime difference lies above; does not hold when it lies wholly below
# +{glue:text}`v6_margin`; otherwise not testable here. Every arm must have trained (V1's rule): one that ends less
# than {glue:text}`trained_minimum` nats per byte below the entropy makes V6 not testable here.
#
# **What could not be matched.**
#
# - *The data's size in absolute terms.* Matching Verma's passes at a CPU's steps makes the smallest set
#   {glue:text}`v6_smallest` bytes long: a few hundred bytes of Python hold far less of what the
#   validation text needs than 1M tokens of Wikipedia. A model that memorises them ends with a validation loss above
#   the byte frequencies' entropy, which the did-it-train rule reads as an arm that did not train, whichever norm it
#   has. Trial runs before registration (on a seed never reused; the design page's change log gives their losses)
#   showed this for RMSNorm on the smallest set.
# - *The model and its scale.* Verma's GPT-2 models have 64M parameters or more and LayerNorm as the baseline; here
#   the model is V1's LLaMA-style byte-level model (SwiGLU, RoPE, no weight tying) of a quarter of a million
#   parameters, and the baseline is RMSNorm. The ratio of data to parameters is not Verma's: at matched passes and
#   these steps the largest set holds {glue:text}`v6_bytes_per_parameter` bytes per parameter, where Verma's holds 1.84
#   tokens.
# - *The learning rate.* Verma's 3e-4 was chosen for 64M parameters; the runs here take V1's rate for this model,
#   with Verma's schedule's shape.
# - *The validation text.* Verma validates each subset on its own slice of WikiText-103's validation split (1% of the
#   subset's size, at least 10,000 tokens); here every set is validated on the same text, so the sets differ in
#   their training data alone.
#
# The first design of V6 (registered 5 December 2026) varied the number of steps on data that never repeats; its runs
# (build 2fea7bb: "does not hold") are not read here, and the design page's change log keeps it.

# %% tags=["remove-cell"]
regime_runs = runs.run_jobs(runs.regime_jobs(P, V6_BOUND), P)
v6 = regime.regime_claim(regime_runs, V6_MARGIN, V6_BOUND, corpus.unigram_entropy_nats)
v6 = method.record(v6, results, "V6", "landscape-regime")  # the did-it-train rule, and every look disclosed

# %% tags=["remove-input"] mystnb={"figure": {"caption": "V6: RMSNorm and DyT as Verma ran it, paired by seed, in V1's model, every run the same steps, on training sets of three sizes (SwiGLU, circles joined per seed; the smallest is passed over most) and on the largest again with GELU (squares, drawn just right of it). Left: DyT − RMSNorm of the final validation loss; the grey band is the ±margin. Right: the share of DyT's inputs with |αx| > 2 at the end of each DyT run.", "name": "fig-landscape-regime"}}
figures.regime(regime.cells(regime_runs), V6_MARGIN)
plt.show()

# %% tags=["remove-input"]
table(
    regime.regime_table(v6),
    caption="V6 in nats per byte: per training set, the passes the fixed steps make over it, the mean paired "
    "DyT − RMSNorm with its 95% interval and DyT's mean saturated share; below, the two differences the verdict reads.",
)

# %% tags=["remove-input"]
Markdown(regime.regime_paragraph(v6))

# %% tags=["remove-input"]
table(
    method.arms_table({"V6": v6}),
    caption="V6's arms on the sets its verdict reads (the smallest and the largest, and the largest with GELU), mean "
    "over seeds, in nats per byte: the validation loss at step 0 and at the end, the byte "
    "frequencies' entropy, how far the final loss ends below it, and whether that is the registered minimum or more.",
)

# %% [markdown]
# (landscape-placement)=
# ## V2: where the norm goes
#
# > Normalising each sublayer's output as well as its input (Peri-LN; Gemma 2/3's "sandwich"; OLMo 2's norm after
# > the sublayer) keeps the growth of the hidden state's variance in check, where pre-LN lets it grow with depth,
# > and trains more stably (Kim et al., ICML 2025; OLMo 2, 2024).
#
# **Test.** The deep model in four placements, all with RMSNorm: pre-LN `x + f(norm(x))`, post-LN
# `norm(x + f(x))`, Peri-LN `x + norm(f(norm(x)))` and OLMo 2's `x + norm(f(x))`. We record the hidden state's RMS
# after every block through training, the per-layer gradient norms, and the loss over a learning-rate grid.
# **Rule (fixed before measuring):** growth is the hidden RMS after the last block over that after the first,
# at the end of training. The claim needs pre-LN's growth to be real (at least {glue:text}`pre_growth_needed`×) and
# both output-normalising placements to at most halve it (ratio to pre-LN ≤ {glue:text}`max_relative_growth`, the
# worse of the two judged),
# with a usable learning-rate range at least as wide as pre-LN's.

# %% tags=["remove-input"] mystnb={"figure": {"caption": "Left: hidden-state RMS after each block at the end of training (reference learning rate, mean over seeds), log scale. Middle: the same through training, after the last block. Right: per-layer gradient norm (before clipping), averaged over training, seed 0.", "name": "fig-landscape-placement"}}
figures.placement({where: study.pick("deep", where) for where in profiles.PLACEMENTS})
plt.show()

# %% tags=["remove-cell"]
measures = placement.placement_measures(study)

# %% tags=["remove-input"]
table(
    placement.placement_table(measures),
    caption="The four placements at the deep scale: hidden growth at the reference learning rate (mean over seeds), "
    "paired loss difference to pre-LN, and the usable learning-rate range (the narrowest over grid seeds).",
)

# %% tags=["remove-cell"]
V2_RULE = design.values("V2", "pre_growth_needed", "max_relative_growth")
state(**V2_RULE)
v2 = study.judge("V2", placement.placement_claim(study, measures, **V2_RULE))
v2 = method.record(v2, results, "V2", "landscape-placement")  # the did-it-train rule, and every look disclosed

# %% tags=["remove-input"]
Markdown(
    placement.placement_paragraph(v2, pre_growth_needed=V2_RULE["pre_growth_needed"])
    + "\n\n"
    + method.what_would_decide("V2")
)

# %% [markdown]
# (landscape-qk)=
# ## V3: QK-norm and the learning-rate range
#
# > Without normalising queries and keys, attention logits grow and small models already diverge at high learning
# > rates; QK-norm removes this instability and widens the range of usable learning rates (Dehghani et al. 2023;
# > Wortsman et al. 2023).
#
# **Test: Wortsman et al.'s protocol.** The small model with and without QK-norm (RMSNorm over each head's queries and
# keys) over a log-spaced learning-rate grid wide enough to reach divergence: {glue:text}`qk_grid_size` rates in
# half-decade steps from {glue:text}`qk_grid_low` to {glue:text}`qk_grid_high`, beyond 1, as their sweeps go, every
# point trained on {glue:text}`qk_seeds` seeds. Their **LR sensitivity** sums a whole curve into one number: the mean
# over the grid of min(final loss, initial loss) − the best final loss on the grid (a run that blew up counts as no
# better than the untrained model). The key number is its paired reduction with QK-norm (without − with) over seeds.
# Divergence is the study's one run record (`normlab.gpt.run_record`): a non-finite loss or gradient, a non-finite final
# loss, or a final loss above the initial one. **Rule (registered in `data/design.toml` on 3 December 2026, before any run on
# this grid):** the claim needs the model without QK-norm to diverge somewhere on the grid (else even this grid shows no
# instability, and the claim is not testable here); it holds when the reduction's 95% interval over seeds lies above
# **+{glue:text}`sensitivity_margin` nats per byte** (the study's loss margin: a smaller reduction is not a change of
# quality a reader would notice), does not hold when the interval lies entirely below it, and is otherwise not testable
# here, fragile. Fewer seeds than {glue:text}`qk_min_seeds` would mark the verdict fragile. This protocol replaces the
# rule read on the 4-point grid (up to 0.15), where no run diverged with or without QK-norm; the change log on the design
# page gives both.
#
# The protocol's source: the LR-sensitivity definition and the learning-rate sweeps reaching 1 and beyond are
# Wortsman et al. 2023 (arXiv 2309.14322), section 2 and their qk-layernorm figure, as transcribed in issue 34 and in
# secondary notes; they were not checked against the paper itself here. Their runs have no gradient clipping stated in
# that transcription and use a z-loss; these keep the book's clipping at 1 and have no z-loss.

# %% tags=["remove-cell"]
QK_MIN_SEEDS = design.value("V3", "min_seeds")
QK_SENSITIVITY_MARGIN = design.value("V3", "sensitivity_margin")
state(
    qk_min_seeds=QK_MIN_SEEDS,
    qk_seeds=P["qk_seeds"],
    qk_grid_size=len(P["qk_lr_grid"]),
    qk_grid_low=significant(P["qk_lr_grid"][0]),
    qk_grid_high=significant(P["qk_lr_grid"][-1]),
    sensitivity_margin=f"{QK_SENSITIVITY_MARGIN:g}",
)
sensitivity = qk_norm.sensitivity_rows(study)

# %% tags=["remove-input"] mystnb={"figure": {"caption": "V3 on the wide grid. Left: min(final, initial) validation loss against the peak learning rate, without (solid) and with (dashed) QK-norm, thin lines one seed each and thick their mean; a run that diverged counts at its initial loss. LR sensitivity is the mean height of a curve above its own lowest point. Right: largest attention logit through training, seed 0, one colour per learning rate; the curve of a run that diverged ends where it diverged.", "name": "fig-landscape-qk"}}
figures.qk(study.runs, sensitivity, P["qk_lr_grid"], P["qk_seeds"])
plt.show()

# %% tags=["remove-cell"]
logit_rows = qk_norm.final_logits(study)
v3 = study.judge(
    "V3", qk_norm.qk_claim(study, logit_rows, min_seeds=QK_MIN_SEEDS, sensitivity_margin=QK_SENSITIVITY_MARGIN)
)
v3 = method.record(v3, results, "V3", "landscape-qk")

# %% tags=["remove-input"]
table(
    sensitivity.drop(columns=["label"]),
    caption="Per seed, without and with QK-norm: LR sensitivity over the wide grid (nats per byte), the best final "
    "loss and its learning rate, how many of the grid's points diverged, and the lowest that did.",
)

# %% tags=["remove-input"]
table(
    qk_norm.stable_range_table(study),
    caption="Per seed: the learning rates at which the run did not diverge, and the first that diverged above them.",
)

# %% tags=["remove-input"]
table(
    logit_rows,
    caption="Largest attention logit at the end of training (seed 0) per learning rate; none where the run diverged before the end.",
)

# %% tags=["remove-input"]
Markdown(qk_norm.qk_paragraph(v3))

# %% [markdown]
# (landscape-depth)=
# ## V4: the Curse of Depth and LayerNorm Scaling
#
# > In deep pre-LN models the later layers contribute little (their outputs are near identity); scaling each
# > norm's output by 1/√(layer index) makes them useful again (Sun et al., 2025).
#
# **Test.** The deepest model, pre-LN RMSNorm with GPT-2's initialisation, against LayerNorm Scaling as its authors
# apply it: block l's norms multiply their output by 1/√l (`depth_scaling=True`), and GPT-2's scaled initialisation (the
# projections into the trunk drawn with standard deviation 0.02/√(2·depth)) is removed, every weight matrix N(0, 0.02)
# (`init="unscaled"`): Sun et al. found that combining the two diminishes the scaling's effect and recommend removing
# the latter (arXiv 2502.05795, footnote 1 to the abstract; checked against its arXiv HTML). Paired over seeds. Each
# block's contribution is the validation loss increase when that block is replaced by the identity. **Rule (the margin
# read since 3 December 2026, registered before these runs):** the curse is present when the later half of the blocks
# accounts for at most {glue:text}`curse_share` of the total loss increase (an even split is half). The remedy works
# when scaling raises that share by more than the margin of **{glue:text}`share_margin`** (a smaller change would not
# make the later layers "useful again"): its paired 95% interval lies above +{glue:text}`share_margin`, with a caveat
# when the final loss is worse by more than the {glue:text}`loss_margin`-nat-per-byte margin. It does not hold when the
# interval lies entirely below +{glue:text}`share_margin`, and is otherwise not testable here (fragile). Before, the
# interval was read against 0 and LayerNorm Scaling kept the scaled initialisation; the change log on the design page
# gives both.
#
# **Pilot and confirmation.** The first design ran 3 pairs (seeds 0–2). It decided "does not hold" on one CPU and
# "not testable here" on another, whose runs spread ten times wider. Those 3 pairs are now the pilot: shown, never
# pooled. The verdict comes from a confirmation registered before it ran, on fresh seeds, with its pairs computed
# from the wider spread ({glue:text}`v4_design`).

# %% tags=["remove-cell"]
V4_RULE = design.values("V4", "curse_share")
V4_SHARE_MARGIN = design.value("V4", "share_margin")
v4_registered = confirmation.at_profile("V4", profile, P)  # refuses an N its inputs do not give
state(
    curse_share=percent(V4_RULE["curse_share"]),
    share_margin=format_value(V4_SHARE_MARGIN, POINTS, trim=True),
    v4_design=curse_of_depth.design_text(v4_registered, P),
)
v4 = study.judge(
    "V4", curse_of_depth.depth_claim(study, **V4_RULE, share_margin=V4_SHARE_MARGIN, confirmation=v4_registered)
)
v4 = method.record(v4, results, "V4", "landscape-depth")

# %% tags=["remove-input"] mystnb={"figure": {"caption": "Left: loss increase when each block is dropped (mean over the confirmation's seeds). Middle: hidden-state RMS after each block at the end of training. Right: final validation loss, a line per seed, paired. '1/√l' is LayerNorm Scaling without the scaled initialisation.", "name": "fig-landscape-depth"}}
figures.depth({label: study.pick("deepest", label) for label in ("pre", "1/√l")})
plt.show()

# %% tags=["remove-input"]
Markdown(curse_of_depth.depth_paragraph(v4, **V4_RULE) + "\n\n" + method.what_would_decide("V4"))

# %% tags=["remove-input"]
Markdown(confirmation.design_paragraph(v4_registered) if v4_registered else "")

# %% tags=["remove-input"]
curse_of_depth.pilot_table(v4_registered, v4) if v4_registered else Markdown("")

# %% [markdown]
# (landscape-summary)=
# ## The landscape at a glance
#
# {numref}`fig-landscape-summary` puts every variant beside the LLaMA-style baseline at its own scale: the paired
# final-loss difference with its 95% interval (left; the shaded band is the ±{glue:text}`loss_margin`-nat-per-byte margin), the
# training step time relative to the baseline, all timed at the small scale in alternation (middle), and the usable
# learning-rate range on the grid (right). DyT appears twice, both paired with RMSNorm under the authors' AdamW: by the
# authors' recipe, and with an RMSNorm final norm. LayerNorm Scaling was run at one learning rate only, so it has no
# range.

# %% tags=["remove-cell"]
timings = at_a_glance.step_times(P, corpus, device)
summary = at_a_glance.summary_frame(study, timings)

# %% tags=["remove-input"] mystnb={"figure": {"caption": "Every variant against LLaMA-style pre-LN RMSNorm. Left: paired final-loss difference with its 95% interval, at the scale where the variant was tested (shaded: the ±{glue:text}`loss_margin`-nat-per-byte margin). Middle: median step-time ratio at the small scale (bars: interquartile range of the per-repeat ratio). Right: usable learning-rate range on the grid (grey: the baseline's at that scale).", "name": "fig-landscape-summary"}}
figures.summary(summary, at_a_glance.baseline_ranges(study), LOSS_MARGIN)
plt.show()

# %% tags=["remove-input"]
table(summary, caption="The numbers behind the landscape figure.")

# %% [markdown]
# (landscape-trained)=
# ## Did every arm train?
#
# Every verdict of this chapter compares trained models, so each reads its arms' final validation loss against the
# byte frequencies' entropy of the validation text ({glue:text}`entropy` nats per byte) before it stands: an arm that
# ends less than {glue:text}`trained_minimum` nats per byte below it learned little beyond how often each byte occurs,
# and a comparison with it is not a verdict on the norm (V1, a claim about training without tuning, is the
# exception: there the failure is the answer). V1's, V7's and V6's arms are shown in their sections; the rest are
# here, at each claim's reference learning rate.

# %% tags=["remove-input"]
table(
    method.arms_table({"V2": v2, "V3": v3, "V4": v4}),
    caption="V2's, V3's and V4's arms at their reference learning rate, mean over the seeds each verdict pairs, in "
    "nats per byte: the validation loss at step 0 and at the end, the entropy, how far the final loss ends below it, "
    "and whether that is the registered minimum or more.",
)

# %% [markdown]
# (landscape-looks)=
# ## What had been seen before each design was fixed
#
# A design registered after some of its outcome, or a trial run of it, had been seen is weaker evidence than one
# fixed blind. Every such look at this chapter's claims is in the design's change log; the table lists each one,
# and each verdict carries it among its caveats wherever the verdict is shown. The did-it-train minimum is among them:
# it was registered after V1's, V6's and V7's arms had been seen to fall short of it.

# %% tags=["remove-input"]
table(
    method.looks_table(["V1", "V7", "V6", "V2", "V3", "V4"]),
    caption="The looks before each registration or change of this chapter's designs, in the change log's words "
    "(data/design.toml).",
)

# %% [markdown]
# (landscape-verdicts)=
# ## Verdicts

# %% tags=["remove-input"]
verdict_table(results)

# %% tags=["remove-cell"]
results.save()
