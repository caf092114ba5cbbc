# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Speed: how much faster is RMSNorm, and why?
#
# The articles say RMSNorm is faster: "10% to 50% per the original paper" (A8), "7%–64%" (B6), "a few
# percent" in small-batch inference (B10). They give three reasons: one pass over memory instead of two
# (A7, B8, B9), fewer reads and writes (A10), and cheaper arithmetic (A5).
#
# Those claims are about GPUs, and this chapter's live run is on whatever machine builds the book. So each
# claim is judged by the same rule on every run measured: this run, and the GPU runs (this run if it has a
# GPU, else every GPU profile committed under `data/`, see {ref}`speed-gpu`). **Which run answers is fixed before
# any is read:** a GPU run, where it could measure the claim's cases, else this run. Of several GPU runs, the one
# whose code can be identified answers, then the one whose code this tree still has, then the first by file name;
# never the newest, and never the one with the narrower spread. The answering run's own verdict stands. Where
# another run's own verdict differs, in either direction, the verdict carries a "depends on scale" caveat naming
# both, and a run whose code has changed since it was measured, or cannot be identified, says so on every verdict it
# answers. Every run is shown, and every verdict names the hardware and run behind each number. With no GPU run,
# this run answers alone.

# %% tags=["parameters", "remove-cell"]
profile = "smoke"
overrides = {}  # settings that replace the profile sizes (from `make book SET`)
results_dir = "build/results"

# %% tags=["remove-cell"]
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import seaborn as sns
from IPython.display import Markdown, display

from normlab.analysis.speed import figures, method, on_gpu, page, ratio, runs, settings
from normlab.bench import report, timing
from normlab.study import Results, design
from normlab.study.present import claims_box, table, verdict_line, verdict_table
from normlab.study.prose import percent, state
from normlab.study.results import load_evidence

warnings.filterwarnings("ignore", message=".*TF32.*")  # torch's notice on CPU-only machines, not about these numbers
bench_profile = settings.bench_profile(profile, overrides)
# Thresholds the verdicts use, from the registered design and stated in the prose below before any result
EQUAL_TIME = design.value("A5", "equal_time")  # |1 - t_rms/t_ln| below this: "the same speed" (A5, Q2)
EXTRA_PASS = design.value("A7", "extra_pass")  # LN's best effective passes exceed RMS's by this: "one more" (A7, B8)
WELFORD_EQUAL = design.value("B9", "welford_equal")  # Welford LN within this many passes of RMS: "one pass" (B9)
MEMORY_BOUND = design.value("A10", "memory_bound")  # at least this fraction of copy bandwidth: bandwidth bound (A10)
WORTH_IT = design.value("Q3", "worth_it")  # pRMSNorm "saves time" if it cuts RMSNorm's time by this share (Q3)
settings.check_thresholds(EQUAL_TIME, EXTRA_PASS, WELFORD_EQUAL, MEMORY_BOUND, WORTH_IT)
state(equal_time=percent(EQUAL_TIME), extra_pass=EXTRA_PASS, welford_equal=WELFORD_EQUAL, memory_bound=MEMORY_BOUND)
state(worth_it=percent(WORTH_IT), unstable_sd=percent(timing.UNSTABLE_RELATIVE_SD))
state(agreement_floor=percent(timing.AGREEMENT_FLOOR))
sns.set_theme(style="whitegrid", context="notebook")

# %% tags=["remove-input"]
claims_box(["A5", "A7", "A8", "A10", "B6", "B8", "B9", "B10", "Q2", "Q3"], overrides=overrides)

# %% [markdown]
# **Thresholds, fixed before measuring** (registered in `data/design.toml`, with their basis):
#
# - *the same speed* (A5, Q2): RMSNorm's time within {glue:text}`equal_time` of LayerNorm's, |1 − t_RMS / t_LN|, a
#   fraction of LayerNorm's time;
# - *one more pass* (A7, B8): LayerNorm's best effective passes over memory exceed RMSNorm's by at least
#   {glue:text}`extra_pass` passes;
# - *one pass like RMSNorm* (B9): Welford LayerNorm's effective passes within {glue:text}`welford_equal` passes of
#   RMSNorm's;
# - *bandwidth bound* (A10): an op reaches at least {glue:text}`memory_bound` of a same-size copy's bandwidth (a
#   fraction of copy bandwidth);
# - *saves time* (Q3): pRMSNorm cuts full RMSNorm's time by at least {glue:text}`worth_it`, a fraction of RMSNorm's
#   time.

# %% tags=["remove-cell"]
results = Results("speed", profile, results_dir, overrides)
run = runs.measure(bench_profile, Path(results_dir).parent / "bench", runs.gpu_results_dir())
df, live, gpu_runs, gpu = run.df, run.live, run.gpu_runs, run.gpu

# %% [markdown]
# (speed-method)=
# ## How it was measured
#
# A norm does a handful of flops per element, so its speed limit is the memory bus. Every implementation the
# package has is timed side by side in one run against that limit: a same-size copy measured in the same run
# (`clone` for a call that allocates its output, `copy_` for one that writes into a given buffer). Each case is
# warmed up, then timed as the median of many repeats, with inputs rotated so the caches do not help. From the
# bytes a norm *must* move follow its bandwidth and its **effective passes**, 2 × t / t_copy: a fused forward
# is at 2, one read and one write.
#
# **Timing you can believe.** A case whose repeats disagree (sd above {glue:text}`unstable_sd` of the median), or that
# runs faster than half the copy limit, is measured again; if it stays so it is marked *unstable* and left out of every
# summary below. `backend="auto"` runs one of the other backends (on CPU, LayerNorm: `torch`; RMSNorm: `cpp` for
# float32, `torch` or `compile` for bfloat16; on a GPU, `triton`), so each auto case and its target are one code path
# timed twice: they must agree within their spread (or {glue:text}`agreement_floor`), and a pair that does not is
# re-measured and, failing that, marked unstable too. The copy of the forward+backward sizes is timed a second time at
# the end of the run as a further check. Summaries give each implementation's *median* over shapes with its run-to-run
# spread, never a range of ratios whose ends may be artefacts.

# %% tags=["remove-input"]
agreement = report.copy_agreement(df)
Markdown(method.measurement_text(run, agreement))

# %% tags=["remove-input", "hide-output"]
display(
    page.table_or_note(
        agreement,
        "No same-path pairs were timed in this run.",
        caption="Identical code paths timed twice in this run (auto and the backend it runs; a copy "
        "and its repeat). 'ratio' is the first over the second.",
    )
)

# %% [markdown]
# (tab-speed-same-path)=
# The folded table above lists each pair of identical code paths measured in this run. Every measured case follows,
# folded too: its median time and spread, fraction of copy bandwidth and effective passes.

# %% tags=["remove-input", "hide-output"]
table(method.cases_frame(run.timed))

# %% [markdown]
# The cases that could not be timed here, and those left unstable after re-measuring, folded:

# %% tags=["remove-input", "hide-output"]
Markdown(method.skipped_text(df, run.unstable))

# %% [markdown]
# (speed-ratio)=
# ## The LayerNorm/RMSNorm time ratio, implementation by implementation
#
# A ratio above 1 means RMSNorm is faster. The same two formulas give very different ratios depending on
# *how* they are computed ({numref}`fig-speed-ratio`): the gap between the implementations is larger than the
# gap between the norms. The batch is 8192 rows, except where rows × d would exceed the profile's element
# budget (on the cpu profile, d = 16384 runs at 2048 rows).

# %% tags=["remove-input"] mystnb={"figure": {"caption": "t_LayerNorm / t_RMSNorm per implementation across the row length d, forward pass at the training batch (unstable cases left out). Above 1: RMSNorm is faster. What to see: the spread between implementations, against the small gap between the two norms within a fused implementation.", "name": "fig-speed-ratio"}}
ratios = report.ln_rms_ratios(df)
figures.ratio_figure(ratio.forward_sweep(ratios))
plt.show()

# %% tags=["remove-input"]
table(
    report.implementation_summary(ratio.training_ratios(df)),
    caption="Per implementation, over the training-batch shapes (forward and forward+backward, stable cases): the median "
    "LN/RMS time ratio and the median share of LayerNorm's time RMSNorm saves, each with its run-to-run sd.",
)

# %% [markdown]
# (speed-bandwidth-figure)=
# ## Achieved bandwidth against the copy limit
#
# {numref}`fig-speed-bandwidth` shows each implementation's bandwidth (bytes that must move ÷ time) as a
# fraction of an allocating copy of the same size measured in the same run. 1 is the practical limit; half of it
# means the call takes as long as two copies (four passes over memory).

# %% tags=["remove-input"] mystnb={"figure": {"caption": "Fraction of copy bandwidth reached by each implementation, forward pass at the training batch, per norm. What to see: the fused implementations sit near 1 for both norms; the unfused composites sit far below, and RMSNorm's composite below LayerNorm's native op.", "name": "fig-speed-bandwidth"}}
from normlab.analysis.speed import bandwidth

stable_cases = report.stable(df)
figures.bandwidth_figure(bandwidth.forward_norm_cases(stable_cases))
plt.show()

# %% [markdown]
# (speed-backward)=
# ## Forward and backward against the copy
#
# Training runs the backward too. The {ref}`forward+backward table <tab-speed-backward>` sets forward+backward of both
# norms under `backend="auto"` at 8192 × 256 and 8192 × 1024 (float32) against the two timings of a same-size copy made
# in this run: the time in units of each copy, the fraction of copy bandwidth for the bytes the pair must move
# (x, y, dy, dx, the parameters and statistics: at least five tensor passes), and LN/RMS with its sd.

# %% tags=["remove-input"]
display(
    page.table_or_note(
        report.backward_vs_copies(df),
        "Forward+backward under auto was not timed in this profile.",
        caption="Forward+backward, backend auto, float32, against two timings of a same-size clone.",
    )
)

# %% [markdown]
# (tab-speed-backward)=
# The table above is the forward+backward comparison; a row marked unstable is shown but used in no verdict.

# %% [markdown]
# (speed-gpu)=
# ## On a GPU
#
# The articles' numbers come from GPUs. GPU rows come only from a real GPU run: this run if it has a GPU,
# else `python -m normlab.bench --profile gpu` run on a GPU machine and committed under `data/` with its
# hardware, versions, commit and time (provenance in `data/README.md`). Nothing is estimated. The method is
# the one above: every backend timed side by side against a same-size copy in the same run, unstable cases
# re-measured and, failing that, left out of every summary and verdict.


# %% tags=["remove-input"]
display(Markdown(on_gpu.gpu_runs_text(gpu_runs, live)))
gpu_ratios, gpu_stable = on_gpu.gpu_frames(gpu_runs, live)

# %% tags=["remove-input"] mystnb={"figure": {"caption": "GPU: t_LayerNorm / t_RMSNorm per implementation across the row length d, forward pass at the training batch, float32 and bfloat16 (columns), one row per GPU run (unstable cases left out; hardware and commits in the title). Above 1: RMSNorm is faster. What to see: whether the gap survives in the fused kernels (triton, compile, torch's native ops) or only in the composites built from separate ops (eager, reference), and how far two runs of the same profile agree.", "name": "fig-speed-gpu-ratio"}}
gpu_sweep = ratio.forward_sweep(gpu_ratios)
figures.gpu_ratio_figure(gpu_sweep, gpu_runs)
plt.show()

# %% tags=["remove-input"]
if gpu is not None:
    display(
        Markdown(on_gpu.gpu_sweep_text(gpu_sweep)),
        table(
            on_gpu.gpu_run_comparison(gpu_ratios),
            caption="GPU: per implementation, direction and dtype, over d at the training batch (stable cases): the "
            "median LN/RMS time ratio in each run, with its run-to-run sd (from the repeats within that run).",
        ),
    )

# %% [markdown]
# (tab-speed-gpu-summary)=
# A ratio near 1 means the two norms take the same time. At the smallest d a call is too short for the memory
# traffic to dominate, and its fixed cost (Python dispatch, kernel launch) sets the time, which also makes
# those shapes the least repeatable between runs; {numref}`fig-speed-gpu-bandwidth` shows where each
# implementation leaves that regime.

# %% tags=["remove-input"] mystnb={"figure": {"caption": "GPU: fraction of copy (clone) bandwidth reached by each implementation, forward pass at the training batch, per norm (columns) and GPU run (rows); unstable cases left out. 1 is a same-size copy timed in the same run; the dotted line is MEMORY_BOUND ({glue:text}`memory_bound`). What to see: the fused implementations reach the same fraction for both norms once d is large enough to be memory bound; the composites stay far below.", "name": "fig-speed-gpu-bandwidth"}}
figures.gpu_bandwidth_figure(bandwidth.forward_norm_cases(gpu_stable), gpu_runs, MEMORY_BOUND)
plt.show()

# %% [markdown]
# (speed-gpu-backward)=
# ### Forward and backward on the GPU
#
# Training pays for the backward too. The grid gives LN/RMS for forward+backward per run, implementation,
# dtype and d; an empty cell is a shape where one of the two norms stayed unstable and is left out.

# %% tags=["remove-input"]
display(on_gpu.gpu_backward_display(gpu_ratios, gpu))

# %% [markdown]
# (speed-gpu-small)=
# ### Small batches on the GPU
#
# With 1–16 rows a call moves a few kilobytes, so its fixed cost decides its latency.

# %% tags=["remove-input"]
display(on_gpu.gpu_small_batch_display(gpu_ratios, gpu))

# %% [markdown]
# (speed-gpu-device-time)=
# Wall time mixes the host's work (Python, dispatch, the launch) with the GPU's. Where a run recorded the kernels'
# own time per call, the cases follow with both, folded; a case is host-bound when the GPU is idle for most of
# its wall time, and then a faster kernel would not make the call faster.

# %% tags=["remove-input", "hide-output"]
display(*on_gpu.gpu_device_time_display(gpu_runs, live))

# %% [markdown]
# (speed-gpu-host-time)=
# ### Host time in the committed GPU runs
#
# A call's time is a fixed cost per call plus the bytes it moves over a bandwidth. Where the fixed cost is most of the
# time, the call waits on the host (Python, dispatch, the launch), and a faster kernel would not make it faster. Each
# verdict below that reads such cases says what share of their time is that fixed cost.

# %% tags=["remove-input"]
from normlab.analysis.speed import host_time

display(
    Markdown(host_time.fits_text(gpu_runs, live) or "No GPU run without device time is weighed here."),
    page.table_or_note(
        host_time.fits_frame(gpu_runs, live),
        "No GPU run to fit.",
        caption="GPU: per run, code path and direction, the fit t = a + bytes / b over the stable training-batch and "
        "small-batch cases: a is the fixed cost per call, b the bandwidth the time grows with.",
    ),
)

# %% [markdown]
# The GPU's long-row (chunked) kernels and partial RMSNorm, which the pass and pRMSNorm verdicts use, and the
# GPU cases left unstable, folded:

# %% tags=["remove-input", "hide-output"]
display(*on_gpu.gpu_chunked_display(gpu_stable, gpu_runs, live))

# %% [markdown]
# (speed-compiled)=
# ### Predicted from the compiled code
#
# A GPU's timing says how fast a kernel ran, not why. Triton compiles for an H100/H200 (sm_90) without one, and the
# compiled code says what each kernel will do there: the registers it holds, whether it spills, how many programs fit
# on an SM, whether its persistent loop keeps the next row's loads in flight while it works on this one, and the bytes
# each row moves from HBM and from L2. This section compiles the Triton kernels at the target shapes as the launcher
# picks them (`normlab.bench.compiled_schedule`, the same check as `make compile-check`) and turns that into a
# prediction of each kernel's fraction of copy. It is a prediction, not a measurement. Beside it stands the committed
# GPU runs' measured fraction where they timed the same case; those runs time the host's calls as well as the
# kernel, which holds their Triton forward above about 100 µs ({ref}`speed-gpu-host-time`), so a measured fraction
# below the prediction may be the host's share rather than the kernel's.

# %% tags=["remove-input"]
from normlab.analysis.speed import compiled

compiled_result = compiled.compile_targets(settings.compiled_shapes(profile, overrides))
if compiled.unavailable_text(compiled_result):
    display(Markdown(compiled.unavailable_text(compiled_result)))
else:
    measured_here = compiled.measured_fractions(gpu_stable, compiled_result["rows"])
    compiled_frame = compiled.schedule_frame(compiled_result, measured_here, [runs.run_name(m, live) for m in gpu_runs])
    display(
        Markdown(compiled.summary_text(compiled_frame) + " " + compiled.model_text(compiled_result)),
        table(compiled_frame, caption=compiled.caption(compiled_result, live.hardware)),
    )

# %% [markdown]
# (speed-predicted)=
# ### Predicted, then measured: the model's error, and HEAD's registered predictions
#
# A prediction without its error is not a forecast. The committed H200 runs timed the Triton kernels of commit
# `12a0522`, which are still in git: those kernels were compiled for sm_90 with the same reader, and the model's free
# constants fitted on the first run's cases that are not host-bound, then tested on the second run's. The kernels'
# bandwidth came out at {glue:text}`model_efficiency` of the same run's copy (bootstrap sd {glue:text}`model_efficiency_sd`),
# the L2's at {glue:text}`model_l2_tbs` TB/s (sd {glue:text}`model_l2_tbs_sd`), and the fixed cost of a call at
# {glue:text}`model_fixed_forward_us` µs forward and {glue:text}`model_fixed_backward_us` µs forward+backward: host time,
# since those runs timed the host's calls, so it does not carry to a run that times the device. The loads' latency, the
# HBM peak and the device's launch latency are not fitted (no case constrains them) and stay assumptions:
# {glue:text}`model_not_fitted`. {glue:text}`model_host_bound` of the first run's Triton cases were host-bound and left out
# of the fit; {glue:text}`model_no_copy` had no same-run copy.
#
# On the {glue:text}`model_held_out_cases` held-out cases the prediction was {glue:text}`model_median_ratio` times the
# measured fraction of copy at the median, and {glue:text}`model_worst_ratio` at worst ({numref}`fig-speed-predicted`).

# %% tags=["remove-cell"]
from normlab.analysis.speed import predicted

registered = predicted.registry()
if registered is not None:
    state(**predicted.glued(registered))

# %% tags=["remove-input"] mystnb={"figure": {"caption": "The 12a0522 Triton kernels on the H200: the model's predicted fraction of copy against the measured one, for the cases of the run it was fitted on and of the run it was tested on (held out), cases that were not host-bound. On the dotted line the prediction is exact. What to see: how far the held-out points sit from the line; that spread is the interval given to HEAD's predictions below.", "name": "fig-speed-predicted"}}
if registered is not None:
    predicted.figure(predicted.old_kernel_cases(registered))
    plt.show()

# %% tags=["remove-input", "hide-output"]
if registered is not None:
    display(
        table(predicted.constants_table(registered), caption="The model's constants: fitted on the first H200 run "
              "(bootstrap sd and 5–95 % over resampled cases), or assumed."),
        table(predicted.held_out_table(registered), caption="The held-out run: per case, the model's predicted and the "
              "measured fraction of copy."),
    )  # fmt: skip

# %% [markdown]
# **HEAD's kernels, predicted before any GPU has run them.** Registered on {glue:text}`registered_date` at commit
# {glue:text}`registered_commit` for the kernels whose code fingerprint begins {glue:text}`registered_fingerprint`, these
# are predictions, not measurements: each is the model's fraction of a same-size copy in a run that times the device
# (`make gpu-session`), with the interval the held-out error allows. No verdict on this page reads them. The next GPU
# run reports each measurement beside its prediction, and a run of kernels whose fingerprint differs reports a mismatch
# instead of a score. torch's native kernels are CUDA C++ and Liger's are not compiled here, so neither is predicted.

# %% tags=["remove-input"]
if registered is not None:
    display(table(predicted.predictions_table(registered), caption="Registered predictions for HEAD's Triton kernels "
                  "(8192 rows): predicted fraction of a same-size copy and its interval. Predictions, not measurements."))  # fmt: skip
else:
    display(Markdown("No predictions are registered in this tree (`data/speed-predictions.toml`)."))

# %% [markdown]
# (speed-passes)=
# ## Passes over memory: counted, not assumed (A7, B8, B9)
#
# > A7: "LayerNorm needs two passes over the data in memory; RMSNorm needs one." B8: "one pass over the data
# > less at the kernel level." B9: "Welford merges them into one pass but keeps two accumulators."
#
# For the implementations built from separate ATen ops, `normlab.bench.passes` traces every op and adds up the
# full-size tensors it reads and writes, and checks the count of separate ops against `torch.profiler`
# (the {ref}`census table <tab-speed-census>`). Fused ops (native `F.layer_norm`, a compiled graph, a Triton kernel) are one op
# to both views; their passes are bounded by their time instead. Rows too long to hold on chip need the chunked
# kernels, where LayerNorm's two-pass and Welford statistics really differ; those are timed on a GPU
# ({ref}`speed-gpu`), whose runs decide these verdicts where they exist.
#
# **Thresholds, stated before measuring:** LayerNorm needs one more pass (A7, B8) if its best effective passes
# exceed RMSNorm's by at least {glue:text}`extra_pass`; Welford's LayerNorm makes one pass like RMSNorm (B9) if
# their effective passes differ by less than {glue:text}`welford_equal`.

# %% tags=["remove-input"]
from normlab.analysis.speed import passes

display(
    page.table_or_note(
        passes.census_frame(df),
        "No pass census was recorded in this run.",
        caption="Traced full-size passes and op counts (trace vs profiler), and the effective passes timed.",
    )
)

# %% [markdown]
# (tab-speed-census)=
# The census above counts the passes of each unfused composite.

# %% tags=["remove-cell"]
a7, b8 = passes.a7_b8(live, EXTRA_PASS, gpu=gpu_runs)
b9 = passes.b9(live, WELFORD_EQUAL, gpu=gpu_runs)
for claim, finding in (("A7", a7), ("B8", b8), ("B9", b9)):
    host_time.annotate(finding, claim, gpu_runs)
_ = a7.record(results, "A7", "speed-passes")
_ = b8.record(results, "B8", "speed-passes")
_ = b9.record(results, "B9", "speed-passes")

# %% tags=["remove-input"]
Markdown(verdict_line("A7, B8", a7) + "\n\n" + verdict_line("B9", b9))

# %% [markdown]
# (speed-compute)=
# ## Cheaper arithmetic (A5)
#
# > A5: LayerNorm "costs more to compute (mean, then a variance around the mean); RMSNorm less".
#
# The traced composites show the extra work: no mean, no centring, one reduction instead of two. Whether it
# buys time depends on whether arithmetic is what the time is spent on, so the timing part looks only where
# both norms are fused, where the memory traffic is equal: each within 1.5× of the minimum passes, or each
# one kernel per call (by the profiler census of the same run) reaching at least {glue:text}`memory_bound`
# (`MEMORY_BOUND`) of copy bandwidth, so that the time is the traffic and not the launch. **Threshold, stated
# before measuring:** the two take the same time (A5, and Q2 below) when |1 − t_RMS/t_LN| is below
# {glue:text}`equal_time`.

# %% tags=["remove-cell"]
from normlab.analysis.speed import arithmetic

a5 = arithmetic.a5(live, EQUAL_TIME, memory_bound=MEMORY_BOUND, gpu=gpu_runs)
host_time.annotate(a5, "A5", gpu_runs, MEMORY_BOUND)
_ = a5.record(results, "A5", "speed-compute")

# %% tags=["remove-input"]
Markdown(verdict_line("A5", a5))

# %% [markdown]
# (speed-bandwidth)=
# ## Memory bound, and what fusion leaves of the difference (A10, Q2)
#
# > A10: inference "is memory-bandwidth bound; RMSNorm's missing β and fewer intermediate reads and writes suit
# > the hardware". Q2: with both norms fused, how large is RMSNorm's advantage?
#
# "Fused" is as for A5. On a GPU the fused pairs are {numref}`fig-speed-gpu-ratio`'s one-kernel curves (triton, compile,
# native torch) at the widths where {numref}`fig-speed-gpu-bandwidth` puts both norms above {glue:text}`memory_bound`.

# %% tags=["remove-cell"]
from normlab.analysis.speed import memory_bound

a10 = memory_bound.a10(live, MEMORY_BOUND, gpu=gpu_runs)
q2 = memory_bound.q2(live, EQUAL_TIME, memory_bound=MEMORY_BOUND, gpu=gpu_runs)
host_time.annotate(a10, "A10", gpu_runs)
host_time.annotate(q2, "Q2", gpu_runs, MEMORY_BOUND)
_ = a10.record(results, "A10", "speed-bandwidth")
_ = q2.record(results, "Q2", "speed-bandwidth")

# %% tags=["remove-input"]
Markdown(verdict_line("A10", a10) + "\n\n" + verdict_line("Q2", q2))

# %% [markdown]
# (speed-small-batch)=
# ## Small-batch inference (B10)
#
# > B10: "In small-batch inference ... that one pass is a few percent of measured throughput."
#
# With 1–16 rows the data are a few kilobytes, so a call's fixed cost (Python dispatch, kernel launch, allocation) can
# outweigh moving the bytes. The {ref}`small-batch table <tab-speed-small>` gives each implementation's latency and the
# saving with its spread (the GPU's are in {ref}`speed-gpu-small`); "a few percent" is read as
# {glue:text}`few_percent_low`–{glue:text}`few_percent_high`, judged on the median over stable points.

# %% tags=["remove-input"]
from normlab.analysis.speed import small_batch

low, high = small_batch.few_percent()
state(few_percent_low=percent(low), few_percent_high=percent(high))
table(small_batch.small_batch_frame(ratios), caption="Small-batch latency per implementation (stable cases).")

# %% [markdown]
# (tab-speed-small)=
# The table above holds the small-batch latencies.

# %% tags=["remove-cell"]
b10 = small_batch.b10(live, gpu=gpu_runs)
host_time.annotate(b10, "B10", gpu_runs)
_ = b10.record(results, "B10", "speed-small-batch")

# %% tags=["remove-input"]
Markdown(verdict_line("B10", b10))

# %% [markdown]
# (speed-partial)=
# ## Partial RMSNorm (Q3)
#
# pRMSNorm estimates the RMS from the first p% of each row (p = 6.25%, as in the paper's Table 2 caption). It
# still has to read and write every element to normalise the row, so the memory traffic of a fused kernel
# barely changes. **Threshold, stated before measuring:** pRMSNorm saves time (Q3) if it cuts full RMSNorm's
# time by at least {glue:text}`worth_it`.

# %% tags=["remove-input"]
from normlab.analysis.speed import partial

table(partial.partial_frame(stable_cases), caption="Full and partial RMSNorm, forward, float32 (stable cases).")

# %% tags=["remove-cell"]
estimate_error = partial.partial_rms_estimate_error(4096, 0.0625)
q3 = partial.q3(live, WORTH_IT, estimate_error, gpu=gpu_runs)
host_time.annotate(q3, "Q3", gpu_runs)
_ = q3.record(results, "Q3", "speed-partial")

# %% tags=["remove-input"]
Markdown(verdict_line("Q3", q3))

# %% [markdown]
# (speed-paper)=
# ## What the original paper reported (A8, B6)
#
# > A8: "According to the original paper, RMSNorm is 10% to 50% faster than LayerNorm." B6: Zhang & Sennrich
# > "found equal quality and a speed-up of about 7%–64%".
#
# Zhang & Sennrich (2019) report whole-model running times, across Theano, TensorFlow and PyTorch, not timings of the
# norm alone; their abstract gives "7%∼64%". The {ref}`literature table <tab-speed-paper>` lists the per-table rows as
# two independent transcriptions of the paper give them; they were **not** checked against the PDF here (what was
# checked is listed in `data/paper_speed.md`). A time saving is not a speed-up: saving a share s of the time makes the
# model 1/(1 − s) times as fast, so 40.8% saved is 1.69× and 63.9% is 2.77×. The top of the abstract's range, 63.9%, is
# pRMSNorm; RMSNorm's own rows run from 6.9% (the Transformer) to 40.8%.
#
# At model level in a modern stack, Narang et al. (2021) trained T5-base with RMS Norm against the vanilla
# Transformer: final loss 1.821 against 1.838, and 3.68 against 3.50 steps per second, about 5.1% faster
# (transcribed from the paper's results table in issue 10, not checked here).

# %% tags=["remove-input"]
from normlab.analysis.speed import paper

table(
    paper.literature_frame(),
    caption="Running-time savings reported in the literature (as transcribed; not checked against the papers).",
)

# %% [markdown]
# (tab-speed-paper)=
# The table above lists the literature's rows. The verdicts combine them with this run: for A8, the op-level saving of
# `backend="auto"` at the training batch (and on the GPU run, where there is one), and, where the quality chapter has
# run, its model-level step-time ratio; the realmodels chapter's share of a real model's time spent in its norms bounds
# what any norm speed-up can give a whole model. Both chapters run before this one.

# %% tags=["remove-cell"]
quality_part = load_evidence("quality", "B6", results_dir)
realmodels_part = load_evidence("realmodels", "A8", results_dir) or load_evidence("realmodels", "B6", results_dir)
model_level = paper.model_level_part(quality_part, realmodels_part)
a8, b6 = paper.a8_b6(live, model_level, gpu=gpu_runs)
host_time.annotate(a8, "A8", gpu_runs)
host_time.annotate(b6, "B6", gpu_runs)
_ = a8.record(results, "A8", "speed-paper")
_ = b6.record(results, "B6", "speed-paper")


# %% tags=["remove-input"]
Markdown(paper.model_level_text(model_level, a8, b6))

# %% [markdown]
# ## Verdicts

# %% tags=["remove-input"]
verdict_table(results)

# %% tags=["remove-cell"]
_ = results.save()  # the path is not for the page
