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
# A norm does a handful of flops per element, so its speed limit is the memory bus. This chapter times
# every implementation the package has, side by side in one run, against that limit: a same-size copy
# measured in the same run (`clone` for a call that allocates its output). For each case it reports the
# bytes a norm *must* move (x read once, y written once, the parameters; for the backward also dy, dx,
# the saved statistics and the parameter gradients), the bandwidth that implies, and the **effective
# passes**: the time expressed in copies, 2 × t / t_copy. A fused forward is at 2 — one read, one write.
#
# Everything here is computed by `normlab.bench` (`python -m normlab.bench --profile cpu` prints the same
# tables); the literature facts are in `data/paper_speed.md`.

# %% tags=["parameters"]
profile = "smoke"
results_dir = "build/results"

# %%
import os
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from normlab import bench
from normlab.bench import claims, provenance, report
from normlab.study import Results
from normlab.study import paths

SETTINGS = {
    "smoke": {"bench_profile": "smoke"},
    "cpu": {"bench_profile": "cpu"},
    "gpu": {"bench_profile": "gpu"},
}
if profile not in SETTINGS:
    raise ValueError(f"unknown profile {profile!r}; valid profiles: {', '.join(SETTINGS)}")
settings = SETTINGS[profile]

# Thresholds the verdicts use (stated here, applied in normlab.bench.claims)
EQUAL_TIME = 0.10  # |1 - t_rms/t_ln| below this: "the same speed" (A5, Q2)
EXTRA_PASS = 0.5  # LN needs "one more pass" if its best effective passes exceed RMS's by at least this (A7, B8)
WELFORD_EQUAL = 0.5  # Welford LN "one pass like RMS" if their effective passes differ by less than this (B9)
MEMORY_BOUND = 0.5  # an op is bandwidth bound if it reaches at least this fraction of copy bandwidth (A10)
WORTH_IT = 0.05  # pRMSNorm "saves time" if it cuts full RMSNorm's time by at least this (Q3)
for name, value in {"EQUAL_TIME": EQUAL_TIME, "EXTRA_PASS": EXTRA_PASS, "WELFORD_EQUAL": WELFORD_EQUAL,
                    "MEMORY_BOUND": MEMORY_BOUND, "WORTH_IT": WORTH_IT}.items():
    if not 0 < value < 1:
        raise ValueError(f"{name} must lie in (0, 1), got {value}")
# Committed GPU results live in data/; NORMLAB_GPU_BENCH_DIR points elsewhere (the tests use it).
gpu_results_dir = Path(os.environ.get("NORMLAB_GPU_BENCH_DIR", paths.ROOT / "data"))
sns.set_theme(style="whitegrid", context="notebook")

# %%
results = Results("speed", profile, results_dir)
document = bench.run(settings["bench_profile"])
bench_file = bench.save(document, Path(results_dir).parent / "bench" / f"speed-{settings['bench_profile']}.json")
df = report.frame(document)
hw = document["hardware"]
where = f"{hw['gpu'] or hw['cpu']} ({hw['cpu_cores']} CPU cores), torch {document['versions']['torch']}"
print(f"measured on {where}, {document['started']}, {document['wall_s']:.0f} s; raw results: {bench_file}")

# %% [markdown]
# ## What was timed, and what was not
#
# The measured cases (times are medians over repeats; `iqr_ms` is the spread between the quartiles):

# %%
print(report.table(df))

# %% [markdown]
# Cases that could not be timed on this machine, and why (a backend unavailable on the device is
# reported, never dropped or counted as zero):

# %%
report.skipped(df)

# %% [markdown]
# (speed-ratio)=
# ## The LayerNorm/RMSNorm time ratio, implementation by implementation
#
# A ratio above 1 means RMSNorm is faster. The same two formulas give very different ratios depending on
# *how* they are computed. The batch is 8192 rows, except where rows × d would exceed the profile's element
# budget (on the cpu profile, d = 16384 runs at 2048 rows so the whole study fits in about 5 minutes); the
# `rows` column of the first table says which.

# %%
ratios = report.ln_rms_ratios(df)
sweep = ratios[(ratios["study"] == "sweep") & (ratios["mode"] == "alloc")]
grid = sns.relplot(data=sweep, x="d", y="ratio_ln_over_rms", hue="implementation", style="dtype", kind="line",
                   markers=True, height=4, aspect=1.6)
grid.set(xscale="log", xlabel="row length d (features)", ylabel="t_LayerNorm / t_RMSNorm (ratio)")
grid.refline(y=1.0, color="grey")
grid.figure.suptitle(f"Forward, training-like batch ({where})", y=1.03)
plt.show()

# %% [markdown]
# ## Achieved bandwidth against the copy limit
#
# Each implementation's bandwidth (bytes that must move ÷ time) as a fraction of an allocating copy of
# the same size measured in the same run. 1 is the practical limit; 0.5 means the call takes as long as
# two copies (4 passes over memory).

# %%
measured = report.measured(df)
bandwidth = measured[(measured["study"] == "sweep") & (measured["norm"] != "copy") & (measured["mode"] == "alloc")]
grid = sns.relplot(data=bandwidth, x="d", y="fraction_of_copy", hue="implementation", col="norm", style="dtype",
                   kind="line", markers=True, height=3.8, aspect=1.2)
grid.set(xscale="log", xlabel="row length d (features)", ylabel="fraction of copy (clone) bandwidth")
for ax in grid.axes.flat:
    ax.axhline(1.0, color="grey", lw=1)
plt.show()

# %%
goal = report.auto_goal(df)
if goal is None:
    print('backend="auto" at d=4096 x 8192 rows fp32 is timed in the cpu and gpu profiles, not in this one')
else:
    print(goal.assign(median_ms=goal["median_s"] * 1e3).drop(columns="median_s").to_string(float_format=lambda v: f"{v:.3f}"))

# %% [markdown]
# (speed-passes)=
# ## Passes over memory: counted, not assumed
#
# For the implementations built from separate ATen ops, `normlab.bench.passes` traces every op and adds
# up the full-size tensors it reads and writes (`traced_passes`), and checks the count of separate ops
# against `torch.profiler`'s op list (`ops_agree`). Fused ops (native `F.layer_norm`, a compiled graph, a
# Triton kernel) are one op to both views; their passes are bounded by their time instead
# (`effective_passes`).

# %%
census = report.census(df)
census

# %% [markdown]
# Rows too long to hold on chip need the chunked kernels, where LayerNorm's two-pass and Welford
# statistics really differ; those are timed on a GPU. Committed GPU results (see {ref}`speed-gpu`) feed
# these verdicts when this run has no chunked cases of its own.

# %%
committed = provenance.load_committed(gpu_results_dir)
gpu_frames = pd.concat([frame for _, frame in committed], ignore_index=True) if committed else None
a7, b8 = claims.a7_b8(df, EXTRA_PASS, chunked_df=gpu_frames)
b9 = claims.b9(df, WELFORD_EQUAL, chunked_df=gpu_frames)
results.record("A7", a7.verdict, a7.summary, a7.evidence, section="speed-passes")
results.record("B8", b8.verdict, b8.summary, b8.evidence, section="speed-passes")
results.record("B9", b9.verdict, b9.summary, b9.evidence, section="speed-passes")

# %% [markdown]
# (speed-compute)=
# ## Cheaper arithmetic (A5)
#
# RMSNorm does less arithmetic: no mean, no centring, one reduction instead of two — the traced composites
# show it. Whether that buys time depends on whether arithmetic is what the time is spent on.

# %%
a5 = claims.a5(df, EQUAL_TIME)
results.record("A5", a5.verdict, a5.summary, a5.evidence, section="speed-compute")

# %% [markdown]
# (speed-bandwidth)=
# ## Memory bound, and what fusion leaves of the difference (A10, Q2)

# %%
a10 = claims.a10(df, MEMORY_BOUND)
q2 = claims.q2(df, EQUAL_TIME)
results.record("A10", a10.verdict, a10.summary, a10.evidence, section="speed-bandwidth")
results.record("Q2", q2.verdict, q2.summary, q2.evidence, section="speed-bandwidth")

# %% [markdown]
# (speed-small-batch)=
# ## Small-batch inference (B10)
#
# With 1–16 rows the data are a few kilobytes, so a call's fixed cost (Python dispatch, kernel launch,
# allocation) can outweigh moving the bytes; the table gives each implementation's latency and the ratio.
# On a shared CPU these sub-millisecond timings are also the noisiest in the chapter (see the IQR column
# of the first table).

# %%
small = ratios[ratios["study"] == "small-batch"]
small[["implementation", "dtype", "rows", "d", "t_ln_s", "t_rms_s", "ratio_ln_over_rms", "saving"]]

# %%
b10 = claims.b10(df)
results.record("B10", b10.verdict, b10.summary, b10.evidence, section="speed-small-batch")

# %% [markdown]
# (speed-partial)=
# ## Partial RMSNorm (Q3)
#
# pRMSNorm estimates the RMS from the first p% of each row (p = 6.25% here). It still has to read and
# write every element to normalise the row, so the memory traffic of a fused kernel barely changes.

# %%
partial = measured[measured["study"] == "partial"]
partial[["implementation", "rows", "d", "median_s", "fraction_of_copy", "effective_passes"]]

# %%
estimate_error = claims.partial_rms_estimate_error(4096, 0.0625)
q3 = claims.q3(df, WORTH_IT, estimate_error)
results.record("Q3", q3.verdict, q3.summary, q3.evidence, section="speed-partial")

# %% [markdown]
# (speed-paper)=
# ## What the original paper reported (A8, B6)
#
# Zhang & Sennrich (2019), *Root Mean Square Layer Normalization*, NeurIPS 32 (arXiv:1910.07467), say in
# their abstract that RMSNorm "reduces the running time by 7%∼64% on different models". Those are
# running times of whole models — RNN translation models (Nematus, TensorFlow and Theano), a Transformer,
# a reading-comprehension model, image–caption retrieval and a CIFAR-10 CNN — across Theano, TensorFlow
# and PyTorch implementations, not timings of the norm operation alone (sources in `data/paper_speed.md`).
# We could verify the range and the list of experiments, but **not** the per-model rows of the paper's
# result tables (their text was not retrievable with the study's search tool), so no per-table number is
# quoted here. The "10%–50%" that article A attributes to the paper appears in none of these sources; the
# paper's own summary figure is 7%–64%.
#
# The op-level savings measured in this run, by implementation:

# %%
training = claims.training_ratios(df)
pd.DataFrame(claims.saving_ranges(training)).T

# %%
a8, b6 = claims.a8_b6(df, paper_checked=True)
results.record("A8", a8.verdict, a8.summary, a8.evidence, section="speed-paper")
results.record("B6", b6.verdict, b6.summary, b6.evidence, section="speed-paper")

# %% [markdown]
# (speed-gpu)=
# ## GPU results
#
# GPU rows come only from a run of `make gpu-bench` on a GPU machine, committed under `data/` with the
# hardware, versions and time of the run. They are shown as measured, beside this chapter's live run;
# nothing is estimated.

# %%
if not committed:
    print(f"GPU rows: not yet measured (no gpu-bench*.json in {gpu_results_dir}).")
for label, gpu_df in committed:
    print(f"measured on {label}")
    gpu_ratios = report.ln_rms_ratios(gpu_df)
    gpu_sweep = gpu_ratios[(gpu_ratios["study"] == "sweep") & (gpu_ratios["mode"] == "alloc")]
    if not gpu_sweep.empty:
        print(gpu_sweep.pivot_table(index=["dtype", "d"], columns="implementation", values="ratio_ln_over_rms")
              .to_string(float_format=lambda v: f"{v:.3f}"))
    chunked = report.measured(gpu_df)
    chunked = chunked[chunked["study"] == "chunked"]
    if not chunked.empty:
        print(chunked[["implementation", "rows", "d", "median_s", "fraction_of_copy", "effective_passes"]].to_string(index=False))

# %%
results.save()
