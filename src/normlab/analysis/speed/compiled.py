"""Section "Predicted from the compiled code": the target shapes compiled for sm_90 here, without a GPU, and the
committed GPU runs' measured fraction of copy beside the prediction where they timed the same case.

The compiling and the reading of the code are normlab.bench.compiled_schedule's (`make compile-check` and
tests/test_compiled_schedule.py call the same function); this turns its records into the page's table and sentences.
"""

from __future__ import annotations

import pandas as pd

from normlab.bench import compiled_schedule

# the schedule's dtype labels -> the benchmark's
BENCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
NOT_MEASURED = "not measured"


def compile_targets(sizes: dict) -> dict:
    """The schedule (compiled_schedule.schedule's dict) of the profile's `compiled` sizes: widths, dtypes, flag sets
    (plain, fused) and the batch's rows, for both norms, forward and backward."""
    return compiled_schedule.schedule(sizes["widths"], sizes["dtypes"], sizes["rows"], sizes["flags"])


def unavailable_text(result: dict) -> str | None:
    """The one sentence the page shows where nothing could be compiled for sm_90 here; None where it could."""
    reason = result.get("unavailable")
    if reason is None:
        return None
    return f"Nothing was compiled for sm_90 on this machine, so the compiled schedule is not shown: {reason}"


def measured_fractions(gpu_stable: pd.DataFrame, rows: int) -> pd.DataFrame:
    """The GPU runs' stable fraction of copy for the Triton forward at the training batch, the cases the schedule's
    plain forward compiles (the sweep: weight, and LayerNorm's bias, no residual; an allocating call against a
    clone): norm, d, dtype (the schedule's label), run, fraction."""
    columns = ["norm", "d", "dtype", "run", "fraction"]
    if gpu_stable.empty or "implementation" not in gpu_stable:
        return pd.DataFrame(columns=columns)
    cases = gpu_stable[
        (gpu_stable["study"] == "sweep")
        & (gpu_stable["implementation"] == "triton")
        & (gpu_stable["direction"] == "forward")
        & (gpu_stable["mode"] == "alloc")
        & (gpu_stable["rows"] == rows)
    ]
    labels = {bench: label for label, bench in BENCH_DTYPES.items()}
    frame = cases.assign(dtype=cases["dtype"].map(labels), fraction=cases["fraction_of_copy"])
    return frame[columns].dropna().reset_index(drop=True)


def schedule_frame(result: dict, measured: pd.DataFrame, gpu_runs: list[str] | None = None) -> pd.DataFrame:
    """One row per compiled configuration, and a measured column per GPU run (`gpu_runs`, their names; by default
    those in `measured`): "not measured" where the run did not time the case; one column saying so without any."""
    records = result["records"]
    frame = pd.DataFrame(
        {
            "norm": [r["kind"] for r in records],
            "direction": [r["direction"] for r in records],
            "d": [r["d"] for r in records],
            "dtype": [r["dtype"] for r in records],
            "fused": [r["flags"] == "fused" for r in records],
            "registers": [r["registers"] for r in records],
            "spills (B)": [r["spill_stores"] + r["spill_loads"] for r in records],
            "CTAs per SM": [r["ctas_per_sm"] for r in records],
            "loads in flight across rows": [bool(r["overlap"]) for r in records],
            "HBM B/row": [round(r["hbm_bytes_per_row"]) for r in records],
            "L2 B/row": [round(r["l2_bytes_per_row"]) for r in records],
            "predicted fraction of copy": [r["predicted_fraction"] for r in records],
        }
    )
    runs = list(dict.fromkeys(measured["run"])) if gpu_runs is None else list(gpu_runs)
    if not runs:
        frame["measured on a GPU"] = "no GPU run"
    for run in runs:
        of_run = measured[measured["run"] == run]
        values = {(r.norm, r.d, r.dtype): round(float(r.fraction), 2) for r in of_run.itertuples()}
        frame[f"measured ({run})"] = [
            values.get((r.norm, r.d, r.dtype), NOT_MEASURED)
            if r.direction == "forward" and not r.fused
            else NOT_MEASURED
            for r in frame.itertuples()
        ]
    return frame


def caption(result: dict, where: str) -> str:
    return (
        f"Read from code compiled for sm_90 (H100/H200) by Triton {result['triton']} on this machine ({where}), without "
        f"a GPU: a prediction, not a measurement. {result['rows']} rows a call, as the training batch; 'fused' adds the "
        "residual (forward) or the residual stream's gradient (backward). 'loads in flight across rows': "
        "the persistent loop keeps the next row's loads in flight while it works on this one. The measured columns are "
        "the committed GPU runs' fraction of copy for the same norm, direction, d and dtype (the plain Triton forward, "
        "timed around the host's calls); 'not measured': no GPU run timed that case."
    )


def model_text(result: dict) -> str:
    """How the prediction is made, with the model's numbers."""
    model = result["model"]
    return (
        "The predicted fraction of copy is a same-size copy's time (read x, write y) over the row's predicted time, so "
        "a kernel that must move more than x and y stays below 1 at best (2/3 for three tensors, as the plain backward "
        "reads x and dy and writes dx; 1/2 for four, as the fused forward and backward): the larger "
        f"of its HBM bytes at {model['hbm_bytes_per_s'] / 1e12:.1f} TB/s and its L2 bytes at "
        f"{model['l2_bytes_per_s'] / 1e12:.1f} TB/s, slowed where an SM has fewer bytes in flight than "
        f"{model['needed_in_flight_per_sm'] / 1024:.0f} KiB ({model['hbm_bytes_per_s'] / 1e12:.1f} TB/s over "
        f"{model['sms']} SMs for {model['latency_s'] * 1e9:.0f} ns)."
    )


def summary_text(frame: pd.DataFrame) -> str:
    """One sentence: how many configurations keep loads in flight across rows, how many spill, the predicted range."""
    n = len(frame)
    overlapping = int(frame["loads in flight across rows"].sum())
    spilling = int((frame["spills (B)"] > 0).sum())
    predicted = frame["predicted fraction of copy"]
    low, high = predicted.min(), predicted.max()
    not_overlapping = sorted(set(frame.loc[~frame["loads in flight across rows"], "d"]))
    where = f" (the others at d = {', '.join(str(d) for d in not_overlapping)})" if not_overlapping else ""
    return (
        f"Of the {n} configurations compiled for sm_90, {overlapping} keep the next row's loads in flight across "
        f"rows{where}, {spilling} spill registers, and the predicted fraction of copy runs from {low:.2f} to "
        f"{high:.2f}."
    )
