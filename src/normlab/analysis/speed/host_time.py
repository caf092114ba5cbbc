"""Host time in the GPU runs: which part of a timed call is a fixed cost per call, not the kernel moving bytes.

The committed H200 files (data/gpu-bench*.json) time each case with CUDA events around back-to-back eager calls.
When the Python that enqueues a call takes longer than the GPU takes to run it, the GPU waits for the host, and the
events measure the host: those files' Triton forward never goes below about 100 µs, at 1 × 4096 as at 8192 × 4096.

The rule, the same for every run and fixed before reading any verdict:

* per run, implementation (its backend; the copy is "copy") and direction, fit t = a + bytes / b to the stable
  training-batch and small-batch cases (sweep, backward, small-batch; allocating calls), least squares on the relative
  residual (t − a − bytes/b) / t, with a ≥ 0 and b > 0. `a` is the fixed cost per call and `b` the bandwidth the time
  grows with;
* a case's host share is a / t (at most 1): the part of its time that does not grow with the bytes it moves;
* a case is host-bound when that share exceeds `report.HOST_BOUND_SHARE` (0.5): the fixed cost is most of its time.

Where a run recorded the kernels' own time per call (`device_time_s`), the measured share 1 − device / wall is used
instead of the fit. The fit's `a` includes the device's own launch latency (a copy's is 7–12 µs on the H200), so it
is an upper bound on host time; beside a copy's a it shows what the implementation's host path adds.

`annotate` adds to a verdict one caveat per GPU run whose cases it reads, saying which share of their time is that
fixed cost. It never changes the verdict.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from normlab.bench import report
from normlab.bench.provenance import Measured
from normlab.study.findings import Finding

FIT_STUDIES = ("sweep", "backward", "small-batch")
MIN_FIT_POINTS = 3
FIT_COLUMNS = ["path", "direction", "points", "fixed_cost_s", "bandwidth_gbs", "fastest_s"]


def path_of(df: pd.DataFrame) -> pd.Series:
    """The code path a case runs: its backend, or "copy" for the copies."""
    backend = df["backend"] if "backend" in df else pd.Series(None, index=df.index, dtype=object)
    return backend.where(backend.notna() & (df["norm"] != "copy"), "copy").astype(str)


def fit_fixed_cost(seconds, moved_bytes) -> tuple[float, float]:
    """(a in s, b in bytes/s) of t = a + bytes/b, least squares on relative residuals, a >= 0 and 1/b >= 0."""
    t = np.asarray(seconds, dtype=float)
    moved = np.asarray(moved_bytes, dtype=float)
    if len(t) == 0 or (t <= 0).any():
        raise ValueError("need positive times to fit")
    design = np.stack([1 / t, moved / t], axis=1)
    target = np.ones_like(t)

    def residual(coefficients):
        return float(((design @ coefficients - target) ** 2).sum())

    candidates = []
    full, *_ = np.linalg.lstsq(design, target, rcond=None)
    if (full >= 0).all():
        candidates.append(full)
    # on the boundary: a = 0 (pure bandwidth), or 1/b = 0 (a constant)
    only_b = float((design[:, 1] @ target) / (design[:, 1] @ design[:, 1]))
    only_a = float((design[:, 0] @ target) / (design[:, 0] @ design[:, 0]))
    candidates += [np.array([0.0, max(only_b, 0.0)]), np.array([max(only_a, 0.0), 0.0])]
    a, inverse_b = min(candidates, key=residual)
    return float(a), (1 / inverse_b if inverse_b > 0 else math.inf)


def fits(frame: pd.DataFrame) -> pd.DataFrame:
    """Per code path and direction: the fitted fixed cost a (s), bandwidth b (GB/s), points, and the fastest case."""
    ok = report.stable(frame)
    if ok.empty or "bytes" not in ok:
        return pd.DataFrame(columns=FIT_COLUMNS)
    ok = ok[ok["study"].isin(FIT_STUDIES) & (ok["mode"] == "alloc")]
    rows = []
    for (path, direction), group in ok.assign(path=path_of(ok)).groupby(["path", "direction"]):
        if len(group) < MIN_FIT_POINTS:
            continue
        a, b = fit_fixed_cost(group["median_s"], group["bytes"])
        rows.append(
            {
                "path": path,
                "direction": direction,
                "points": len(group),
                "fixed_cost_s": a,
                "bandwidth_gbs": b / 1e9,
                "fastest_s": float(group["median_s"].min()),
            }
        )
    return pd.DataFrame(rows, columns=FIT_COLUMNS)


def has_device_time(frame: pd.DataFrame) -> bool:
    return "device_time_s" in frame and frame["device_time_s"].notna().any()


def shares(frame: pd.DataFrame, fitted: pd.DataFrame | None = None) -> pd.DataFrame:
    """The measured cases with `host_share` (measured where the run has device time, else a / t) and `host_bound`."""
    ok = report.measured(frame)
    if ok.empty:
        return ok.assign(fixed_cost_s=[], host_share=[], host_bound=[], share_from=[])
    if has_device_time(ok):
        measured = report.host_share(ok).clip(lower=0, upper=1)
        return ok.assign(
            fixed_cost_s=float("nan"), host_share=measured, host_bound=measured > report.HOST_BOUND_SHARE,
            share_from="device time",
        )  # fmt: skip
    fitted = fits(frame) if fitted is None else fitted
    keyed = ok.assign(path=path_of(ok))
    merged = keyed.merge(fitted[["path", "direction", "fixed_cost_s"]], on=["path", "direction"], how="left")
    merged.index = ok.index
    share = (merged["fixed_cost_s"] / merged["median_s"]).clip(upper=1.0)
    return ok.assign(
        fixed_cost_s=merged["fixed_cost_s"], host_share=share, host_bound=share > report.HOST_BOUND_SHARE,
        share_from="fit",
    )  # fmt: skip


# ---------------------------------------------------------------- the cases each verdict reads


def _training(frame: pd.DataFrame) -> pd.DataFrame:
    ok = report.stable(frame)
    return ok[ok["study"].isin(["sweep", "backward"]) & (ok["mode"] == "alloc") & (ok["norm"] != "copy")]


def _matching(frame: pd.DataFrame, keys: pd.DataFrame) -> pd.DataFrame:
    """The training-batch cases of both norms at the (implementation, direction, dtype, rows, d) of `keys`."""
    columns = ["implementation", "direction", "dtype", "rows", "d"]
    if keys.empty:
        return frame.iloc[0:0]
    wanted = set(map(tuple, keys[columns].drop_duplicates().itertuples(index=False)))
    train = _training(frame)
    return train[[key in wanted for key in train[columns].itertuples(index=False)]]


def _fused(frame: pd.DataFrame, memory_bound: float | None) -> pd.DataFrame:
    from normlab.analysis.speed.arithmetic import fused_pairs, single_kernel
    from normlab.analysis.speed.ratio import training_ratios

    one_op = single_kernel(frame) if memory_bound is not None else None
    return _matching(frame, fused_pairs(training_ratios(frame), one_op=one_op, memory_bound=memory_bound))


def _best_passes(frame: pd.DataFrame) -> pd.DataFrame:
    from normlab.analysis.speed.passes import best_passes

    ok = report.stable(frame)
    picked = []
    for norm in ("layer", "rms"):
        _, implementation, _ = best_passes(frame, norm)
        picked.append(
            ok[(ok["norm"] == norm) & (ok["implementation"] == implementation) & (ok["study"] == "sweep")
               & (ok["dtype"] == "float32") & (ok["mode"] == "alloc")]
        )  # fmt: skip
    picked.append(ok[(ok["study"] == "chunked") & (ok["norm"] != "copy")])
    return pd.concat(picked)


def _best_bandwidth(frame: pd.DataFrame) -> pd.DataFrame:
    ok = report.stable(frame)
    train = ok[(ok["study"] == "sweep") & (ok["norm"] != "copy") & (ok["mode"] == "alloc")]
    small = ok[(ok["study"] == "small-batch") & (ok["norm"] != "copy")]
    if train.empty:
        return small
    norm, implementation = train.groupby(["norm", "implementation"])["fraction_of_copy"].median().idxmax()
    best = train[(train["norm"] == norm) & (train["implementation"] == implementation)]
    return pd.concat([best, small])


def _study(name: str):
    def select(frame: pd.DataFrame) -> pd.DataFrame:
        ok = report.stable(frame)
        return ok[(ok["study"] == name) & (ok["norm"] != "copy") & (ok["mode"] == "alloc")]

    return select


def _auto(frame: pd.DataFrame) -> pd.DataFrame:
    train = _training(frame)
    return train[train["implementation"] == "auto"]


def cases_read(claim: str, frame: pd.DataFrame, memory_bound: float | None = None) -> pd.DataFrame:
    """The stable cases of one run that the speed chapter's verdict on `claim` reads."""
    if claim in ("A5", "Q2"):
        return _fused(frame, memory_bound)
    if claim in ("A7", "B8"):
        return _best_passes(frame)
    if claim == "B9":
        return _study("chunked")(frame)
    if claim == "A10":
        return _best_bandwidth(frame)
    if claim == "B10":
        return _study("small-batch")(frame)
    if claim == "Q3":
        return _study("partial")(frame)
    if claim in ("A8", "B6"):
        return _auto(frame)
    raise ValueError(f"the speed chapter decides no claim {claim!r} on timed cases")


CLAIMS = ("A5", "A7", "A8", "A10", "B6", "B8", "B9", "B10", "Q2", "Q3")


SHOWN_PATHS = 3  # fixed costs named per caveat: the paths with the most host-bound cases among those read


def _fixed_costs_text(cases: pd.DataFrame) -> str:
    """'triton forward 91 µs, torch forward 18 µs': the fixed costs of the paths with the most host-bound cases."""
    known = cases[cases["fixed_cost_s"].notna()].assign(path=path_of(cases))
    per = known.groupby(["path", "direction"]).agg(a=("fixed_cost_s", "first"), bound=("host_bound", "sum"))
    per = per.sort_values(["bound", "a"], ascending=False).head(SHOWN_PATHS)
    return ", ".join(f"{path} {direction} {row.a * 1e6:.0f} µs" for (path, direction), row in per.iterrows())


def host_part(claim: str, m: Measured, memory_bound: float | None = None) -> dict | None:
    """What share of the time of the cases `claim` reads on run `m` is host time; None when it reads none there."""
    read = cases_read(claim, m.frame, memory_bound)
    if read.empty:
        return None
    shared = shares(m.frame).loc[read.index]
    shared = shared[shared["host_share"].notna()]
    if shared.empty:
        return None
    return {
        "run": m.source,
        "hardware": m.hardware,
        "cases": len(shared),
        "host_bound": int(shared["host_bound"].sum()),
        "median_host_share": float(shared["host_share"].median()),
        "share_from": str(shared["share_from"].iloc[0]),
        "fixed_costs": _fixed_costs_text(shared) if shared["fixed_cost_s"].notna().any() else "",
    }


def host_caveat(part: dict) -> str:
    """One plain clause: how much of the cases' time is the fixed cost per call, i.e. host time."""
    where = f"{part['run']} ({part['hardware']})"
    if part["share_from"] == "device time":
        how = "the time outside the GPU's kernels"
    else:
        how = f"the fitted fixed cost per call ({part['fixed_costs']})"
    return (
        f"host time: in {where}, {part['host_bound']} of the {part['cases']} cases this verdict reads are host-bound; "
        f"a median {part['median_host_share']:.0%} of a case's time is {how}: host time, not the kernel's"
    )


def annotate(finding: Finding, claim: str, gpu_runs: list, memory_bound: float | None = None) -> Finding:
    """Add each GPU run's host-time caveat to `finding` (in place, and returned), and its numbers to the evidence.
    The verdict is unchanged."""
    parts = [part for m in gpu_runs if m.on_gpu for part in [host_part(claim, m, memory_bound)] if part]
    if not parts:
        return finding
    finding.evidence = dict(finding.evidence, host_time=parts)
    finding.caveats = tuple(dict.fromkeys([*finding.caveats, *(host_caveat(p) for p in parts)]))
    return finding


# ---------------------------------------------------------------- the page


def fits_frame(gpu_runs: list, live: Measured) -> pd.DataFrame:
    """Every GPU run's fits, for the page: run, code path, direction, points, a (µs), b (GB/s), fastest (µs)."""
    from normlab.analysis.speed.runs import run_name

    frames = [fits(m.frame).assign(run=run_name(m, live)) for m in gpu_runs]
    frames = [f for f in frames if not f.empty]
    if not frames:
        return pd.DataFrame(columns=["run", "path", "direction", "points", "a (µs)", "b (GB/s)", "fastest (µs)"])
    joined = pd.concat(frames, ignore_index=True)
    return pd.DataFrame(
        {
            "run": joined["run"],
            "path": joined["path"],
            "direction": joined["direction"],
            "points": joined["points"].astype(str),
            "a (µs)": joined["fixed_cost_s"] * 1e6,
            "b (GB/s)": joined["bandwidth_gbs"],
            "fastest (µs)": joined["fastest_s"] * 1e6,
        }
    )


def fits_text(gpu_runs: list, live: Measured) -> str:
    """What the fits say, per GPU run without device time: Triton's fixed cost against the copy's."""
    lines = []
    for m in gpu_runs:
        if has_device_time(m.frame):
            continue
        fitted = fits(m.frame).set_index(["path", "direction"])["fixed_cost_s"]
        copy = fitted.get(("copy", "forward"))
        triton = [fitted.get(("triton", direction)) for direction in ("forward", "forward+backward")]
        if copy is None or triton[0] is None:
            continue
        bound = shares(m.frame)
        bound = bound[(bound["norm"] != "copy") & bound["host_share"].notna()]
        fastest = fits(m.frame).set_index(["path", "direction"])["fastest_s"]
        backward = f" and {triton[1] * 1e6:.0f} µs forward+backward" if triton[1] is not None else ""
        floors = f"its fastest Triton forward took {fastest[('triton', 'forward')] * 1e6:.0f} µs" + (
            f", forward+backward {fastest[('triton', 'forward+backward')] * 1e6:.0f} µs"
            if triton[1] is not None
            else ""
        )
        lines.append(
            f"- **{m.source}**: Triton's fixed cost is {triton[0] * 1e6:.0f} µs per forward{backward}, "
            f"against {copy * 1e6:.0f} µs for a copy; {floors}. {int(bound['host_bound'].sum())} of the run's "
            f"{len(bound)} timed norm cases are host-bound."
        )
    if not lines:
        return ""
    return (
        "The committed GPU runs timed wall time only, so the host's part is read from the times themselves: per run, "
        "code path and direction, a fit of t = a + bytes / b gives a fixed cost per call a and a bandwidth b. A case "
        f"is host-bound when a is more than {report.HOST_BOUND_SHARE:.0%} of its time. There the time measures the "
        "Python that enqueues the kernels, not the kernels.\n\n" + "\n".join(lines)
    )
