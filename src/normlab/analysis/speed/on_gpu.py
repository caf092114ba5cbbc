"""Section "On a GPU": the GPU runs the verdicts weigh, their ratios, and the tables of its subsections
(forward and backward, small batches, device time, chunked kernels)."""

from __future__ import annotations

import pandas as pd

from normlab.analysis.speed.page import markdown
from normlab.analysis.speed.ratio import training_subset
from normlab.analysis.speed.runs import run_name, unstable_cases
from normlab.analysis.speed.small_batch import SMALL_BATCH_COLUMNS, latencies
from normlab.bench import report
from normlab.bench.provenance import Measured
from normlab.study.present import table


def gpu_runs_text(gpu_runs: list, live: Measured) -> str:
    """Each GPU run the verdicts weigh: its hardware, backends, cases and how many stayed unstable."""
    if not gpu_runs:
        return (
            "**No GPU run is committed** (no `data/gpu-bench*.json`), so every verdict below rests on this "
            "run alone, and the GPU figures are empty."
        )
    lines = []
    for m in gpu_runs:
        timed_there = report.measured(m.frame)
        backends = ", ".join(sorted(timed_there["backend"].dropna().unique()))
        role = (
            "answers each claim whose cases it measured"
            if m is gpu_runs[0]
            else "shown beside it; answers only a claim the runs above could not measure"
        )
        lines.append(
            f"- **{run_name(m, live)}** ({role}): measured on {m.label}. Backends timed: {backends}. "
            f"{len(timed_there)} cases timed, **{m.unstable_count} left unstable** after re-measuring and "
            "excluded from every summary and verdict (listed, folded, at the end of this section)."
            + (f" **Stale code:** {m.caveat}; every verdict it answers or qualifies says so." if m.caveat else "")
        )
    return (
        "GPU runs weighed by the verdicts, in the order the rule ranks them (code that can be identified first, "
        "then code this tree still has, then by file name; never the newest):\n\n" + "\n".join(lines)
    )


def gpu_frames(gpu_runs: list, live: Measured) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every GPU run's LN/RMS ratios and its stable cases, each row labelled with its run."""
    if not gpu_runs:
        return pd.DataFrame(columns=["study", "mode", "run"]), pd.DataFrame(columns=["study", "norm", "mode", "run"])
    ratios = pd.concat(
        [report.ln_rms_ratios(m.frame).assign(run=run_name(m, live)) for m in gpu_runs], ignore_index=True
    )
    stable = pd.concat([report.stable(m.frame).assign(run=run_name(m, live)) for m in gpu_runs], ignore_index=True)
    return ratios, stable


def gpu_sweep_text(gpu_sweep: pd.DataFrame) -> str:
    """Per GPU run, the median forward LN/RMS ratio over d of each implementation and dtype."""
    return "Forward at the training batch, the median t_LN/t_RMS over d, per GPU run: " + " ".join(
        f"**{run}**: {report.describe_medians(report.implementation_summary(group, by=('implementation', 'dtype')))}."
        for run, group in gpu_sweep.groupby("run", sort=False)
    )


def gpu_run_comparison(gpu_ratios: pd.DataFrame) -> pd.DataFrame:
    """Per implementation, direction and dtype at the training batch: each GPU run's median ratio and its sd."""
    return report.compare_runs(training_subset(gpu_ratios), by=("implementation", "direction", "dtype"))


def gpu_backward_display(gpu_ratios: pd.DataFrame, gpu: Measured | None):
    """The forward+backward LN/RMS grid per run, implementation, dtype and d, or the sentence saying there is none."""
    grid = (
        report.ratio_grid(gpu_ratios, "backward", rows=("implementation", "dtype", "run"))
        if gpu is not None
        else pd.DataFrame()
    )
    if grid.empty:
        return markdown("No stable GPU forward+backward pair to show.")
    return table(
        grid,
        caption=f"GPU ({gpu.hardware}): forward+backward t_LN / t_RMS per implementation, "
        "dtype, run and d, at the training batch (stable cases; — : unstable).",
    )


def gpu_small_batch_display(gpu_ratios: pd.DataFrame, gpu: Measured | None):
    """The GPU's small-batch latencies per implementation and run, or the sentence saying there are none."""
    small = gpu_ratios[gpu_ratios["study"] == "small-batch"]
    if small.empty:
        return markdown("No stable GPU small-batch pair to show.")
    columns = [*SMALL_BATCH_COLUMNS[:4], "run", *SMALL_BATCH_COLUMNS[4:], "saving", "saving_sd"]
    return table(
        latencies(small)
        .sort_values(["implementation", "dtype", "rows", "run"])[columns]
        .astype({"rows": str, "d": str}),  # shapes, not quantities: no significant-figure rounding
        caption=f"GPU ({gpu.hardware}): small-batch latency per implementation and run (stable cases).",
    )


def gpu_device_time_display(gpu_runs: list, live: Measured) -> list:
    """Per GPU run, wall time beside the kernels' own time (torch.profiler), and whether the host is what the
    call waits on; a sentence names the runs that carry no device time."""
    if not gpu_runs:
        return [markdown("No GPU run is committed.")]
    frames, without = [], []
    for m in gpu_runs:
        cases = report.host_bound(m.frame)
        if cases.empty:
            without.append(f"**{run_name(m, live)}**")
        else:
            frames.append(cases.assign(run=run_name(m, live)))
    shown = []
    if without:
        shown.append(
            markdown(
                f"{', '.join(without)} recorded wall time only (they predate the bench's device timing), so their "
                "host-bound and device-bound cases cannot be told apart; `make gpu-session` records both."
            )
        )
    if frames:
        cases = pd.concat(frames, ignore_index=True)
        cases = cases.assign(**{"wall (µs)": cases["median_s"] * 1e6, "device (µs)": cases["device_time_s"] * 1e6})
        columns = ["run", "study", "norm", "implementation", "direction", "dtype", "rows", "d", "wall (µs)"]
        shown.append(
            table(
                cases[[*columns, "device (µs)", "host_share", "host_bound"]].astype({"rows": str, "d": str}),
                caption="GPU: wall time and the sum of the case's GPU kernel durations per call (torch.profiler), "
                f"per run; host-bound: more than {report.HOST_BOUND_SHARE:.0%} of the wall time is spent outside "
                "kernels.",
            )
        )
    return shown


def gpu_chunked_display(gpu_stable: pd.DataFrame, gpu_runs: list, live: Measured) -> list:
    """The GPU's chunked and partial-RMSNorm cases (if any), then the GPU cases left unstable."""
    if not gpu_runs:
        return [markdown("No GPU run is committed.")]
    shown = []
    chunked = gpu_stable[gpu_stable["study"].isin(["chunked", "partial"])]
    if not chunked.empty:
        columns = ["run", "study", "implementation", "rows", "d", "time (ms)", "fraction_of_copy", "effective_passes"]
        shown.append(
            table(
                chunked.assign(**{"time (ms)": chunked["median_s"] * 1e3})[columns].astype({"rows": str, "d": str}),
                caption=f"GPU ({gpu_runs[0].hardware}): chunked kernels (rows too long for one program) and full vs "
                "partial RMSNorm, forward, float32, per run (stable cases).",
            )
        )
    unstable = [f"- **unstable** ({run_name(m, live)}): {line}" for m in gpu_runs for line in unstable_cases(m.frame)]
    shown.append(markdown("\n".join(unstable or ["Every GPU case was stable."])))
    return shown
