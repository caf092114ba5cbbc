"""Section "How it was measured": where and how the benchmark ran, every timed case, and the cases left
out."""

from __future__ import annotations

import pandas as pd

from normlab.analysis.speed.runs import SpeedRun
from normlab.bench import report


def measurement_text(run: SpeedRun, agreement: pd.DataFrame) -> str:
    """Where and how long the benchmark ran, how many cases were re-measured or left unstable, and the GPU runs."""
    agreeing = int(agreement["agree within spread"].sum()) if not agreement.empty else 0
    timed, gpu = run.timed, run.gpu
    remeasured = int(timed.get("remeasured", pd.Series(dtype=bool)).fillna(False).astype(bool).sum())
    return (
        f"Measured on {run.where}, {run.document['started']}, in {run.document['wall_s']:.0f} s: {len(timed)} cases "
        f"timed, {remeasured} re-measured, **{len(run.unstable)} left unstable** and excluded; {agreeing} of "
        f"{len(agreement)} same-path pairs agree within their spread (the {{ref}}`same-path table "
        "<tab-speed-same-path>`). "
        + (
            f"The verdicts also weigh {len(run.gpu_runs)} GPU run(s), first answered by {gpu.hardware}, "
            f"{'this run' if gpu is run.live else gpu.source} (commit {gpu.commit}; {{ref}}`speed-gpu`)."
            if gpu is not None
            else "No GPU run is committed, so the verdicts rest on this run alone."
        )
    )


CASE_COLUMNS = [*report.CASE_KEY, "mode", "time (ms)", "sd (ms)", "fraction_of_copy", "effective_passes", "unstable"]


def cases_frame(timed: pd.DataFrame) -> pd.DataFrame:
    """Every timed case: its median time and spread in ms, fraction of copy bandwidth and effective passes."""
    cases = timed.assign(
        **{"time (ms)": timed["median_s"] * 1e3, "sd (ms)": timed["median_s"] * timed.get("relative_sd", 0) * 1e3}
    )
    return cases[CASE_COLUMNS]


def skipped_text(df: pd.DataFrame, unstable: list) -> str:
    """One bullet per group of cases that could not be timed here, then one per case left unstable."""
    lines = [
        f"- **{r.status}** ({r.cases} cases: {r.implementations}; {r.studies}): {r.reason}"
        for r in report.skipped(df).itertuples()
    ] + [f"- **unstable**: {line}" for line in unstable]
    return "\n".join(lines or ["Every case was timed and stable."])
