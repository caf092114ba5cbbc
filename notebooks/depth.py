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
# The essay says RMSNorm belongs with pre-LN, `x + f(RMS(x))`, because the trunk then stays an identity path
# (B17); that with post-LN, RMSNorm's scale invariance makes deep-signal decay worse than LayerNorm's (B18); and
# that the LLaMA-style parts (pre-LN + RMSNorm + SwiGLU + RoPE) interlock (B19).
#
# The result we hold the gradient measurements against is Xiong et al. 2020, *On Layer Normalization in the
# Transformer Architecture* (ICML; arXiv:2002.04745), Theorem 1. It is an **upper bound at initialisation**, under
# Xavier initialisation: by mean-field analysis, the Frobenius norm of the gradient of the last FFN matrix is at most
# O(d·√(ln d)) in a post-LN Transformer of width d, whatever the number of layers L, and at most O(d·√(ln d / L))
# in pre-LN. A bound says how large the gradient can be, not how fast it falls. We measure under their Xavier
# initialisation (every weight matrix Glorot-normal, no depth scaling; the embeddings N(0, {glue:text}`init_std`))
# and under GPT-2's, which our GPT trains with: N(0, {glue:text}`init_std`), the projections that write into the
# trunk shrunk by 1/√(2L).
#
# "RMSNorm is always paired with pre-LN" also no longer describes current models: OLMo 2 normalises after the
# sublayer (x + RMSNorm(f(x))), Gemma 2 and 3 normalise both before and after it, and the Transformer of
# Zhang & Sennrich's own experiments was post-norm. The verdicts below come from what we measure.

# %% tags=["parameters", "remove-cell"]
profile = "smoke"
overrides = {}  # settings that replace the profile sizes (from `make book SET`)
results_dir = "build/results"

# %% tags=["remove-cell"]
import warnings
from dataclasses import replace

import matplotlib.pyplot as plt
import seaborn as sns
import torch
from IPython.display import Markdown, display

from normlab.analysis.depth import figures, profiles
from normlab.analysis.shared.runs import training_devices
from normlab.gpt.corpus import load_corpus
from normlab.gpt.model import INIT_STD
from normlab.study import Results, design, paths
from normlab.study.present import claims_box, table, verdict_table
from normlab.study.prose import percent, state
from normlab.study.results import judge

warnings.filterwarnings("ignore", category=UserWarning, module="seaborn")
warnings.filterwarnings("ignore", category=FutureWarning)
P = profiles.settings_for(profile, overrides)
devices = training_devices(profile)
torch.set_num_threads(1)
sns.set_theme(style="whitegrid")
state(init_std=INIT_STD)
results = Results("depth", profile, results_dir, overrides)
corpus = load_corpus()

# %% tags=["remove-input"]
claims_box(["B17", "B18", "B19", "V8"], overrides=overrides)

# %% [markdown]
# (depth-init)=
# ## At initialisation: gradients, residual norm and token similarity
#
# Four models, {pre, post} × {LayerNorm, RMSNorm}, at each depth, on the same batch of real text. Per block we
# record the gradient norm of its weight matrices, the norm of the residual stream after it, and the mean cosine
# similarity between different tokens of a sequence (1 means every token looks the same).
# {numref}`fig-depth-xiong` sets the last block's gradient against depth under both initialisations, with the shape
# of pre-LN's bound, ∝ 1/√L, drawn through pre-LN RMSNorm's shallowest point.
#
# **How the bound is tested, stated before the result.** At one width the bound's constant is unknown, so the bound
# can only be tested for its shape in L. We pin the bound's curve to the measured seed mean at the shallowest depth
# L₀: bound(L) = g(L₀)·√(L₀/L) for pre-LN and g(L₀) for post-LN. The gradients *keep the bound's shape* when, at every
# deeper depth, their seed mean is at most ×{glue:text}`bound_allowed` the pinned curve, that is within the slack
# above it (a slack of {glue:text}`bound_slack_percent` for seed noise and for the lower-order terms the O(·) drops). A
# ratio above 1 and inside the slack sits above the pinned curve: the test does not show the gradients under the bound,
# only that they follow its shape within the slack. One look
# changed this test: it first compared the largest seed, and the cpu profile's initialisation then showed the largest
# seed above the bound at the shallowest depth itself, where the bound passes through the mean; it now compares means,
# with the slack unchanged. The fitted
# exponent k of gradient ∝ L^k is shown as a description of the measured slope only: the bound does not predict it.

# %% tags=["remove-cell"]
from normlab.analysis.depth import initialisation

# measured ÷ bound allowed up to 1 + this, at the deeper depths
BOUND_SLACK = design.value("B17", "bound_slack")
state(bound_allowed=1 + BOUND_SLACK, bound_slack_percent=percent(BOUND_SLACK))
init = initialisation.initialisation_study(P, corpus)
deepest = init.deepest

# %% tags=["remove-input"] mystnb={"figure": {"caption": "Gradient of the last block's MLP output matrix at initialisation against depth, both axes logarithmic. Left: Xiong et al.'s Xavier initialisation, with the dashed shape of pre-LN's bound (∝ 1/√L) through pre-LN RMSNorm's shallowest point; their bound for post-LN does not move with L. Right: GPT-2's depth-scaled initialisation.", "name": "fig-depth-xiong"}}
figures.xiong_gradients(init.frame)
plt.show()

# %% tags=["remove-input"]
caption = "Under Xavier initialisation: the last block's W_down gradient against the curve of Xiong et al.'s bound pinned to the measurement at the shallowest depth"
table(initialisation.bound_table(init), caption=caption)

# %% tags=["remove-input"]
caption = "Fitted exponent k of last-block gradient ∝ L^k, a description of the measured slope (the bound's own shape is L^−0.5 for pre-LN, L^0 for post-LN)"
table(initialisation.exponent_table(init), caption=caption)

# %% [markdown]
# Under GPT-2's initialisation (right), pre-LN's last-block gradient sits *above* post-LN's in level: in pre-LN the
# final norm divides by the trunk's norm,
# and with embeddings initialised at std {glue:text}`init_std` (GPT-2's choice; the projections that write into the
# trunk start at {glue:text}`init_std`/√(2·depth), so the trunk does not grow with depth) that trunk is small, so the
# final norm amplifies the gradient it passes back; in post-LN every block's output is already at unit RMS.
# {numref}`fig-depth-profile` shows the per-block picture at the deepest depth.

# %% tags=["remove-input"] mystnb={"figure": {"caption": "At the deepest depth: per-block gradient norm (left), residual-stream norm (middle) and mean cosine between tokens (right), for both initialisations. Pre-LN's gradients should stay level from block to block if its trunk is an identity path.", "name": "fig-depth-profile"}}
figures.depth_profile(init.frame, deepest)
plt.show()

# %% [markdown]
# (depth-training)=
# ## Training at depth
#
# All four combinations are trained at a depth of 12 blocks (cpu profile; 24 on the gpu profile, 2 in the smoke test)
# with several seeds, as pairs (same seed: the same initial value in every shared parameter, the same batches), at a
# base learning rate with warm-up. Separately, one seed of each is trained **without** warm-up at higher learning rates,
# where Xiong et al. expect post-LN to fail. A run *trained* if it did not diverge and its final validation loss ends
# at least {glue:text}`trained_minimum` nats per byte below the byte frequencies' entropy of the validation text
# ({glue:text}`entropy` nats per byte), the study's registered rule for every trained claim; until 2026-12-07 this
# chapter counted any loss below the entropy, and the change was made after its runs had been seen.
# {numref}`fig-depth-training` shows both sets of runs.
#
# **Did each arm train?** A comparison with a model that learned nothing beyond byte frequencies is no verdict on the
# norm: an arm short of the minimum makes every verdict that reads it (B17's and B18's paired runs, B19's swaps, V8's
# arms) *not testable here*, and the verdict table at the end shows them so. The exception is B17's runs without
# warm-up: whether each placement trains at all without warm-up is what they measure, so one that fails is counted
# in its placement's rate, and the design registers that failure as B17's answer (`untrained_answers`, added on
# 2026-12-07 after the runs had been seen). The minimum itself was registered on 2026-12-07 (issue 55), after this
# chapter's arms had been seen in every committed build.
#
# **Margin, stated before measuring: {glue:text}`margin` nats per byte** for every paired loss comparison in this
# chapter, the quality chapter's. Its basis: the smallest difference between norm variants the literature reports as
# real (Narang et al. 2021, T5-base: RMSNorm 1.821 vs LayerNorm 1.838, 0.017 nats per *token*; from a transcription, not
# checked against the paper) is about 0.004 nats per byte at about 4 bytes a token, so the margin is a practical
# equivalence band about five times that, not a bound that excludes it (`data/design.toml`). "No difference" needs the
# whole 95% interval of the paired difference inside ±{glue:text}`margin`; wider is *not testable here*.

# %% tags=["remove-cell"]
from normlab.analysis.depth import training_at_depth
from normlab.analysis.shared.arms import arms_table

MARGIN = design.value("B18", "margin")
TRAINED_MINIMUM = design.value("B17", "trained_minimum")  # nats per byte below the entropy; same_as V1
state(margin=MARGIN, trained_minimum=TRAINED_MINIMUM, entropy=round(corpus.unigram_entropy_nats, 4))
training = training_at_depth.training_study(P, corpus, devices)
arms = training_at_depth.depth_arms(training, P, corpus.unigram_entropy_nats)

# %% tags=["remove-input"] mystnb={"figure": {"caption": "Final validation loss at the training depth (12 blocks on the cpu profile), one dot per seed, lines joining a seed's pair. Left: the paired runs with warm-up; right: one seed without warm-up at each learning rate (above the dotted unigram entropy means it learned nothing).", "name": "fig-depth-training"}}
figures.training_at_depth(training.paired, training.no_warmup, corpus.unigram_entropy_nats, P["deep"])
plt.show()

# %% tags=["remove-input"]
table(training_at_depth.no_warmup_table(training), caption=f"Without warm-up at depth {P['deep']}: which runs trained")

# %% tags=["remove-input"]
caption = f"The paired runs with warm-up at depth {P['deep']}: each arm's validation loss beside the byte frequencies' entropy"
table(arms_table(arms["paired"], TRAINED_MINIMUM), caption=caption)

# %% tags=["remove-input"]
# the runs that failed every attempt, named; nothing at all (not an empty cell's repr) when none did
_ = display(Markdown(training.left.paragraph())) if training.left.paragraph() else None

# %% [markdown]
# ## The rules for B17, B18 and B19
#
# **B17** (pre-LN keeps the trunk an identity path, so gradients flow back undamped). Xiong et al. 2020's
# statement, the one "undamped" leans on, is a bound at initialisation, and even there the bound on the last layer's
# gradient in pre-LN shrinks as 1/√L: undamped describes the identity path of the trunk, not the size of every
# layer's gradient. Four measurements:
# (i) at the deepest initialised depth the pre-LN per-block gradient norms may differ by at most ×{glue:text}`spread_limit` from
# block to block, **one verdict per initialisation**: the recorded one under GPT-2's depth-scaled initialisation, the
# design's registered one, with which every model of this study trains (key number, threshold {glue:text}`spread_limit`),
# and Xavier's, Xiong et al.'s, judged beside it by the same rule (the two are never pooled: a pooled maximum would be
# Xavier's whenever Xavier's is the larger, as it once was, unlogged; see the design's change log); (ii) without warm-up,
# pre-LN must train at least as often as post-LN at the training depth (these runs are GPT-2-initialised: both
# verdicts read them); (iii) the paired final loss of pre-LN against post-LN (RMSNorm) after training; (iv) under
# Xavier initialisation, the initialisation Theorem 1 is stated for, whether the last layer's gradients stay within the
# slack above the bound's pinned curve, tested as stated above (at most ×{glue:text}`bound_allowed` the curve, for
# pre-LN and post-LN alike). (i) and (ii): holds; caveat when post-LN trains just as well or pre-LN's paired loss is no
# better, and, for Xavier's verdict, when the gradients leave the slack above the pinned curve (or there is a single
# depth to test it on). The fitted exponents are reported beside it, as a description.

# %% tags=["remove-cell"]
from normlab.analysis.depth import identity_path

B17_RULE = design.values("B17", "spread_limit", "bound_slack")  # as stated above
state(spread_limit=B17_RULE["spread_limit"])
depths = dict(deepest=deepest, deep=P["deep"])
b17_numbers = identity_path.b17_measures(init, training, P, MARGIN)
b17 = identity_path.b17_finding(b17_numbers, **depths, margin=MARGIN, **B17_RULE, corpus_sha256=corpus.sha256)
b17 = training.left.judge(b17)  # a run that failed every attempt: named, and its pair left out
# the study's rules (did each arm train, the family's), before the page states the verdict
b17 = judge("B17", replace(b17, headline=identity_path.b17_headline(b17), arms=arms["B17"]))

# %% tags=["remove-input"]
Markdown(identity_path.b17_paragraph(b17, b17_numbers, **depths))

# %% [markdown]
# **B18** (with post-LN, RMSNorm's deep-signal decay is worse than LayerNorm's). The training half is the paired final
# loss post-RMSNorm − post-LayerNorm at the training depth; the initialisation half compares the first/last-block
# gradient ratio (worse: smaller by more than {glue:text}`ratio_drop`) and the last layer's token cosine
# (worse: higher by more than {glue:text}`cosine_rise`) at the deepest depth. Holds if RMSNorm is worse beyond the margin in training and
# on one initialisation measure; does not hold if the paired interval lies inside the margin; not testable if
# the interval is wider than the margin. No published study compares post-RMSNorm with post-LayerNorm at depth, so
# this verdict rests on this book's measurement alone. What would decide it (the pairs, at this chapter's depth,
# width and steps, sized from the pilot's spread by a power calculation) is registered in the design before any run
# of it, and stated after the verdict. The pairs read here are that pilot, and their outcome (*not testable here* at
# build `fbce4a0`) was seen before the decision was registered; the verdict carries this among its caveats.


# %% tags=["remove-cell"]
from normlab.analysis.depth import post_ln_decay

B18_RULE = design.values("B18", "ratio_drop", "cosine_rise")  # "worse" at initialisation, as stated above
state(ratio_drop=percent(B18_RULE["ratio_drop"]), cosine_rise=B18_RULE["cosine_rise"])
b18_numbers = post_ln_decay.b18_measures(init, training, MARGIN)
b18_decision = post_ln_decay.b18_decision(design.load().claim("B18").decision, MARGIN, paths.ROOT)
scale = dict(scale=post_ln_decay.run_scale(P, b18_numbers), decision=post_ln_decay.decision_scale(b18_decision))
b18 = training.left.judge(post_ln_decay.b18_finding(b18_numbers, **depths, margin=MARGIN, **B18_RULE, **scale))
b18 = judge("B18", replace(b18, headline=post_ln_decay.b18_headline(b18), arms=arms["B18"]))

# %% tags=["remove-input"]
Markdown(
    post_ln_decay.b18_paragraph(b18, b18_numbers, **depths) + "\n\n" + post_ln_decay.decision_paragraph(b18_decision)
)

# %% [markdown]
# (depth-b19)=
# **B19** (the parts interlock; replacing one means re-validating the rest). The LLaMA style against one swap at a time
# and one double swap (norm and placement together), at depth 4 (cpu profile), as pairs over seeds. If the parts
# interlock, the double swap's effect is not the sum of the single ones: the interaction Δ(double) − Δ(norm) −
# Δ(placement), computed per seed, is judged against the ±{glue:text}`margin`-nat-per-byte margin by its 95% t-interval.
# The first 14 seeds grew after a look, so they are now a *pilot*, shown from its committed build under the confidence
# sequence its looks require; the seeds trained here are the registered *confirmation*, sized from the pilot's spread
# alone before any of them ran, and only they decide (see the verdict below). The pilot's outcome (*does not hold* at
# build `fbce4a0`) was seen before the confirmation was registered; the verdict carries this among its caveats.
# Interaction beyond the margin: holds with
# caveats (one pair of parts tested); inside: does not hold (the effects add up); wider: not testable here.
# Each single swap's paired effect ({numref}`fig-depth-ablation`), and whether it diverges at the stress learning rate,
# is shown.

# %% tags=["remove-cell"]
from normlab.analysis.depth import interlock
from normlab.analysis.shared import confirmation, missing_runs

# the gpu profile trains the GPU design, whose seeds were fixed before any run: no pilot, no confirmation
registered = confirmation.at_profile("B19", profile, P)  # refuses an N its inputs do not give
ablation = interlock.ablation_study(training, MARGIN)
b19 = interlock.b19_finding(
    ablation,
    depth=P["ablation_depth"],
    steps=P["ablation_steps"],
    seeds=training.ablation_left.pairs,
    margin=MARGIN,
    registered=registered,
)
b19 = training.ablation_left.judge(b19, confirmation=registered, diverged=interlock.diverged_names(ablation))
b19 = judge("B19", replace(b19, arms=arms["B19"]))

# %% tags=["remove-input"] mystnb={"figure": {"caption": "Ablation of the LLaMA style: paired final-loss change of each swap against the LLaMA-style run of the same seed (dots: seeds; bar: mean and 95% interval). The green band is the ±{glue:text}`margin`-nat-per-byte margin.", "name": "fig-depth-ablation"}}
figures.ablation_effects(ablation.swaps, MARGIN)
plt.show()

# %% tags=["remove-input"]
table(
    interlock.swap_table(ablation),
    caption=f"Single and double swaps at depth {P['ablation_depth']}, {P['ablation_seeds']} paired seeds",
)

# %% tags=["remove-input"]
Markdown(training.ablation_left.paragraph() + interlock.b19_paragraph(b19, ablation, registered))

# %% tags=["remove-input"]
caption = "The pilot beside the registered confirmation: only the confirmation decides"
table(confirmation.side_by_side(registered, {"B19": ablation.interaction}), caption=caption) if registered else None

# %% [markdown]
# (depth-final-norm)=
# ## The final norm's role
#
# **V8** (Kanavalau, Amo Alonso & Lall 2026, TaperNorm, arXiv 2602.10408 v2): in pre-LN models the norms inside the
# blocks can be tapered into fixed, sample-independent maps with small increases of the validation loss, while the
# final norm has a role of its own: it anchors the scale of the representation the logits are read from. Without it,
# cross-entropy can fall by inflating the logits ("logit chasing"). The source's own loss numbers could not be read
# from the stored copy of its page, so none is quoted here.
#
# Three models of this chapter's ablation size (pre-LN, RMSNorm, SwiGLU, RoPE) are trained as pairs over seeds, with
# the compiled trainer: **all norms**; **block norms removed**, every norm inside the blocks replaced by the identity
# with the final norm kept; and **final norm removed**, the blocks keeping theirs. The source tapers the block norms
# during training into learned, sample-independent maps by a gated schedule (held at the norm during a warm-up,
# calibrated by moving averages, then cosine-decayed to a fixed map). That schedule was not run here: this design
# removes the block norms from step 0, another intervention than the source's, so the verdict is on removal from
# step 0 only, and its first sentence says so. On one fixed validation batch, every run records the RMS of the
# head's input (the last hidden state) and of the logits over training.
#
# **The tests, registered before the runs.** *Small increase*: the paired 95% interval of the final validation loss,
# block norms removed − all norms, must end below +{glue:text}`v8_margin` nats per byte (the study's loss margin).
# *Logit growth*: the logits' RMS at the end, final norm removed ÷ all norms, paired by seed on the log scale, must
# have its 95% interval above ×{glue:text}`v8_logit_ratio`. Both shown: holds with caveats (removal stands in for
# tapering; one small size); either contradicted by its interval: does not hold; otherwise not testable here.
#
# **Pilot and confirmation.** The first design ran 4 pairs (seeds 0–3). Its loss interval straddled the margin in
# every build, so those pairs are now the pilot: shown, never pooled. The verdict comes from a confirmation registered
# before it ran, on fresh seeds, with its pairs computed from the wider of two recorded spreads ({glue:text}`v8_design`).
#
# **What was seen, and what the sizing made likely.** A pilot's outcome was seen before each registration: three
# seeds (900–902, loss difference {glue:text}`v8_registration_pilot` nats per byte, logits' RMS ratio about 1.7)
# before the design, and the first design's 4 pairs (seeds 0–3, {glue:text}`v8_pilot_mean`) in every cpu build before
# the confirmation. The confirmation was sized for a true loss difference of 0, though both pilots' means lay above
# the +{glue:text}`v8_margin` margin. Had the true difference been either pilot's mean, its loss interval would have
# ended below the margin with a chance of only {glue:text}`v8_chance_registration` and {glue:text}`v8_chance_pilot`:
# an undecided result was the likely outcome. The verdict carries both points among its caveats. Any reading of the
# loss interval against zero below was never registered: it describes and decides nothing.

# %% tags=["remove-cell"]
from normlab.analysis.depth import final_norm

V8_RULE = design.values("V8", "margin", "logit_ratio")  # as stated above
v8_registered = confirmation.at_profile("V8", profile, P)  # refuses an N its inputs do not give; None on the gpu
v8_seeds = final_norm.seeds_of(P)
state(
    v8_margin=V8_RULE["margin"],
    v8_logit_ratio=V8_RULE["logit_ratio"],
    v8_design=f"{len(v8_seeds)} pairs, {confirmation.seeds_text(v8_seeds)}"
    + ("" if v8_registered else ": this profile has no confirmation"),
)
# the compiled trainer runs on the CPU, so these runs use the CPU pool on every profile
v8_runs, v8_lost = final_norm.train_arms(P, v8_seeds)
v8_curves = final_norm.scale_curves(v8_runs)
v8_scale = f"depth {P['ablation_depth']}, width {P['width']}, {P['ablation_steps']} steps"
v8_measures = final_norm.v8_measures(final_norm.final_rows(v8_runs), **V8_RULE)
v8 = final_norm.v8_finding(
    v8_measures, **V8_RULE, scale=v8_scale, trainer=P["final_norm_step"], confirmation=v8_registered
)
v8_left = final_norm.pairs_left(v8_runs, v8_lost, P)
v8 = v8_left.judge(v8, confirmation=v8_registered, diverged=missing_runs.diverged_names(v8_runs, "arm"))
v8 = judge("V8", replace(v8, arms=final_norm.v8_arms(v8_runs, corpus.unigram_entropy_nats, v8_scale)))

# %% tags=["remove-cell"]
# what the registered confirmation could decide at the pilots' means (issue 55: sized for a true difference of 0)
v8_sized = confirmation.registered("V8")  # the registered (cpu) confirmation, whatever this profile runs
v8_pilot = v8_sized.pilot_pair("V8")["mean_difference"]
state(
    v8_pilot_mean=f"+{v8_pilot:.3f}",
    v8_registration_pilot=f"+{final_norm.REGISTRATION_PILOT_MEAN:.3f}",
    v8_chance_registration=f"{v8_sized.power('V8', final_norm.REGISTRATION_PILOT_MEAN):.1%}",
    v8_chance_pilot=f"{v8_sized.power('V8', v8_pilot):.1%}",
)

# %% tags=["remove-input"] mystnb={"figure": {"caption": "The pre-logit scale over training, for all norms, the block norms removed (final norm kept) and the final norm removed (block norms kept): validation loss (left), RMS of the head's input, the last hidden state the logits are read from (middle), and RMS of the logits (right), both logarithmic. Lines: the mean over paired seeds; bands: the seeds' range. With a final norm, the head's input is held at the scale of the norm's gain, whatever the trunk's; without one, it is the trunk's own scale.", "name": "fig-depth-final-norm"}}
figures.pre_logit_scale(v8_curves)
plt.show()

# %% tags=["remove-input"]
Markdown(v8_left.paragraph() + final_norm.v8_paragraph(v8))

# %% tags=["remove-input"]
Markdown(confirmation.design_paragraph(v8_registered) if v8_registered else "")

# %% tags=["remove-input"]
caption = "V8's pilot beside its registered confirmation (block norms removed − all norms, final validation loss): only the confirmation decides"
v8_table = confirmation.side_by_side(v8_registered, {"V8": v8.evidence["removed_minus_all"]}) if v8_registered else None
table(v8_table, caption=caption) if v8_registered else Markdown("")

# %% [markdown]
# ## Verdicts
#
# B17, B18, B19 and V8 are answered by this build's runs at its profile: the design registers no other run for them. A build
# of this chapter made on another machine (a GPU's, say) is committed under `data/builds/` with its provenance and
# set beside this one, claim by claim, on the reproducibility page, where a verdict that differs is flagged; it
# never replaces this build's verdict.

# %% tags=["remove-cell"]
_ = b17.record(results, "B17", "depth-init")
_ = b18.record(results, "B18", "depth-training")
_ = b19.record(results, "B19", "depth-b19")
_ = v8.record(results, "V8", "depth-final-norm")

# %% tags=["remove-input"]
verdict_table(results)

# %% tags=["remove-cell"]
results.save()
