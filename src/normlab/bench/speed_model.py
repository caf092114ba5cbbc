"""The schedule model's constants fitted on one measured H200 run and tested on the other; HEAD's predictions.

The reader (compiled_schedule for HEAD's kernels, old_kernels for 12a0522's) gives each kernel its bytes per row from
HBM and from L2 and its loads in flight per SM. The model turns those into a time:

    t = fixed cost per call (by direction) + sum over the call's kernels of
        rows x max(HBM bytes / (efficiency x copy bandwidth), L2 bytes / L2 bandwidth) / min(1, in flight / needed)

and the fraction of copy as (bytes the call must move / t) / (the same-run copy's bandwidth), the quantity the bench
files record. Free constants:

* `efficiency`: the kernels' HBM bandwidth as a share of the same run's copy bandwidth;
* `l2_tbs`: the L2 bandwidth, TB/s (fitted only where cases are bound by it);
* `fixed_forward_s`, `fixed_backward_s`: the fixed cost of a forward call and of a forward+backward call. In the
  committed files these are host time (CUDA events around eager calls): they fit those runs, and do not carry to
  a device-time run (`make gpu-session`'s device bench), where the fixed cost is the kernels' launch latency
  (`ASSUMED['launch_s']`, an assumption).

`fit` minimises the squared log ratio of predicted to measured fraction over a run's cases that are not host-bound
(host_time's rule, computed by the caller). A constant the fit cases do not constrain (moving it by a fifth moves no
case's prediction by 2 % or more, in at least MIN_BINDING cases) is not fitted: it keeps its assumed value, named.
Uncertainty: the spread of each fitted constant over bootstrap resamples of the fit cases.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

ASSUMED = {
    "efficiency": 1.0,  # as fast as the copy
    "l2_tbs": 7.2,  # 1.5 x the H200's 4.8 TB/s HBM (compiled_schedule.L2_BYTES_PER_S)
    "fixed_forward_s": 0.0,
    "fixed_backward_s": 0.0,
    "latency_s": 700e-9,  # a loaded HBM access; sets the bytes an SM needs in flight (compiled_schedule)
    "hbm_peak_tbs": 4.8,  # the H200's HBM peak (compiled_schedule.HBM_BYTES_PER_S)
    "launch_s": 3e-6,  # a kernel's launch latency and tail on the device, per kernel (device-time runs only)
}
FITTED = ("efficiency", "l2_tbs", "fixed_forward_s", "fixed_backward_s")
SCALE = {"efficiency": 1.0, "l2_tbs": 1.0, "fixed_forward_s": 1e-6, "fixed_backward_s": 1e-6}
BOUNDS = {
    "efficiency": (0.2, 1.5),
    "l2_tbs": (2.0, 30.0),
    "fixed_forward_s": (0.0, 2e-3),
    "fixed_backward_s": (0.0, 5e-3),
}
MIN_BINDING = 2
BINDING_SHIFT = 0.02
SMS = 132
BENCH_DTYPES = {"bfloat16": "bf16", "float32": "fp32", "float16": "fp16"}
ELEMENT = {"bf16": 2, "fp16": 2, "fp32": 4}
# the 12a0522 Triton implementations the bench files timed, and the launches each made: (chunked forced, welford)
OLD_IMPLEMENTATIONS = {
    "triton": (False, True),
    "triton full": (False, True),
    "triton p=6.25%": (False, True),
    "triton chunked": (True, True),
    "triton chunked welford": (True, True),
    "triton chunked two-pass": (True, False),
}
# HEAD's kernels: the files whose source decides what a GPU run of normlab's Triton backend times
KERNEL_FILES = (
    "norms/backends/triton/norm_kernels.py",
    "norms/backends/triton/reduce_kernels.py",
    "norms/backends/triton/launch.py",
    "norms/backends/triton/tuning.py",
    "norms/backends/triton/tuning_table.py",
    "norms/backends/triton/_runtime.py",
)


def kernel_fingerprint(package: Path | None = None) -> str:
    """SHA-256 over KERNEL_FILES (path and source), the code a registered prediction was made from."""
    from normlab.runtime.code_identity import package_dir

    package = Path(package or package_dir())
    digest = hashlib.sha256()
    for relative in KERNEL_FILES:
        digest.update(relative.encode() + b"\0" + (package / relative).read_bytes() + b"\0")
    return digest.hexdigest()


@dataclass(frozen=True)
class Constants:
    efficiency: float = ASSUMED["efficiency"]
    l2_tbs: float = ASSUMED["l2_tbs"]
    fixed_forward_s: float = ASSUMED["fixed_forward_s"]
    fixed_backward_s: float = ASSUMED["fixed_backward_s"]
    latency_s: float = ASSUMED["latency_s"]
    hbm_peak_tbs: float = ASSUMED["hbm_peak_tbs"]
    launch_s: float = ASSUMED["launch_s"]
    fitted: tuple = field(default=())

    def needed_in_flight(self) -> float:
        return self.hbm_peak_tbs * 1e12 / SMS * self.latency_s


# ---------------------------------------------------------------- the measured cases and their kernels


def old_cases(frame: pd.DataFrame) -> pd.DataFrame:
    """The 12a0522 Triton cases a bench file measured (status ok), with `copy_s` (the same-run copy's time, NaN
    where the run has none) and `launches`: [(kind, direction, d, rows, dtype label, chunked, welford)]."""
    ok = frame[(frame["status"] == "ok") & (frame["backend"] == "triton")]
    ok = ok[ok["implementation"].isin(OLD_IMPLEMENTATIONS) & ok["dtype"].isin(BENCH_DTYPES)]
    rows = []
    for record in ok.itertuples():
        chunked, welford = OLD_IMPLEMENTATIONS[record.implementation]
        label = BENCH_DTYPES[record.dtype]
        kernels = [(record.norm, "forward", int(record.d), int(record.rows), label, chunked, welford)]
        if record.direction == "forward+backward":
            kernels.append((record.norm, "backward", int(record.d), int(record.rows), label, False, welford))
        copy = getattr(record, "copy_median_s", float("nan"))
        rows.append(
            dict(
                index=record.Index, study=record.study, implementation=record.implementation, norm=record.norm,
                direction=record.direction, dtype=record.dtype, rows=int(record.rows), d=int(record.d),
                median_s=record.median_s, bytes=record.bytes, copy_s=copy if copy is not None else float("nan"),
                measured=record.fraction_of_copy, unstable=bool(getattr(record, "unstable", False) or False),
                launches=kernels,
            )
        )  # fmt: skip
    return pd.DataFrame(rows)


def launch_key(launch) -> tuple:
    return tuple(launch)


def attach_kernels(cases: pd.DataFrame, records: list[dict]) -> pd.DataFrame:
    """Each case's compiled kernels (old_kernels.schedule's records, keyed by their launch), as `kernels`."""
    by_key = {
        (r["kind"], r["direction"], r["d"], r["rows"], r["dtype"], r.get("chunked", False), r.get("welford", True)): r
        for r in records
    }
    kernels = [[by_key.get(launch_key(k)) for k in launches] for launches in cases["launches"]]
    return cases.assign(kernels=kernels)


def needed_launches(cases: pd.DataFrame) -> list[dict]:
    seen = {launch_key(k) for launches in cases["launches"] for k in launches}
    keys = ("kind", "direction", "d", "rows", "dtype", "chunked", "welford")
    return [dict(zip(keys, key, strict=True)) for key in sorted(seen, key=str)]


# ---------------------------------------------------------------- the model


def kernel_time(record: dict, rows: int, copy_bandwidth: float, c: Constants) -> float:
    """One kernel's streaming time for `rows` rows (no fixed cost)."""
    hbm = record["hbm_bytes_per_row"] / (c.efficiency * copy_bandwidth)
    l2 = record["l2_bytes_per_row"] / (c.l2_tbs * 1e12)
    occupancy = min(1.0, record["in_flight_per_sm"] / c.needed_in_flight()) or 1e-3
    return rows * max(hbm, l2) / occupancy


def partial_sums_time(record: dict, copy_bandwidth: float, c: Constants) -> float:
    """torch's sum of a backward's per-program partial lines (and the zeroing a chunked backward needs first)."""
    lines = record["programs"] * record["d"] * 4 * (2 if record["kind"] == "layer" else 1)
    passes = 2 if record["kernel"].endswith("chunked") else 1
    return passes * lines / (c.efficiency * copy_bandwidth)


def case_time(case, c: Constants) -> float:
    """Predicted time of one measured case (host-timed run: the fitted fixed cost per call)."""
    copy_bandwidth = 2 * case["rows"] * case["d"] * ELEMENT[BENCH_DTYPES[case["dtype"]]] / case["copy_s"]
    total = c.fixed_backward_s if case["direction"] == "forward+backward" else c.fixed_forward_s
    for record in case["kernels"]:
        total += kernel_time(record, case["rows"], copy_bandwidth, c)
        if record["direction"] == "backward":
            total += partial_sums_time(record, copy_bandwidth, c)
    return total


def predicted_fraction(case, c: Constants) -> float:
    copy_bandwidth = 2 * case["rows"] * case["d"] * ELEMENT[BENCH_DTYPES[case["dtype"]]] / case["copy_s"]
    return (case["bytes"] / case_time(case, c)) / copy_bandwidth


def predict_frame(cases: pd.DataFrame, c: Constants) -> pd.DataFrame:
    predicted = [predicted_fraction(case, c) for _, case in cases.iterrows()]
    out = cases.assign(predicted=predicted)
    return out.assign(ratio=out["predicted"] / out["measured"])


def usable(cases: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(cases with a same-run copy, every kernel compiled and a stable time; the cases left out, with `why`)."""
    why = []
    for _, case in cases.iterrows():
        if not (case["copy_s"] > 0):
            why.append("no same-run copy")
        elif any(k is None or "error" in k for k in case["kernels"]):
            why.append("a kernel did not compile")
        elif case["unstable"]:
            why.append("unstable")
        else:
            why.append(None)
    why = pd.Series(why, index=cases.index, dtype=object)
    return cases[why.isna()], cases[why.notna()].assign(why=why[why.notna()])


def _loss(cases: pd.DataFrame, c: Constants) -> float:
    ratios = np.array([predicted_fraction(case, c) for _, case in cases.iterrows()]) / cases["measured"].to_numpy()
    return float((np.log(ratios) ** 2).sum())


def binding(cases: pd.DataFrame, c: Constants) -> dict[str, int]:
    """Per free constant: how many cases' predictions move by BINDING_SHIFT or more when it moves by a fifth."""
    base = np.array([predicted_fraction(case, c) for _, case in cases.iterrows()])
    counts = {}
    for name in FITTED:
        value = getattr(c, name)
        moved = replace(c, **{name: value * 1.2 if value else 20 * SCALE[name]})
        shifted = np.array([predicted_fraction(case, moved) for _, case in cases.iterrows()])
        counts[name] = int((np.abs(shifted / base - 1) >= BINDING_SHIFT).sum())
    return counts


def _nelder_mead(function, start, steps, iterations=400):
    """A small Nelder-Mead minimiser (numpy only; the project has no scipy)."""
    n = len(start)
    simplex = [np.array(start, dtype=float)]
    for i in range(n):
        point = np.array(start, dtype=float)
        point[i] += steps[i]
        simplex.append(point)
    values = [function(p) for p in simplex]
    for _ in range(iterations):
        order = np.argsort(values)
        simplex, values = [simplex[i] for i in order], [values[i] for i in order]
        centroid = np.mean(simplex[:-1], axis=0)
        reflected = centroid + (centroid - simplex[-1])
        fr = function(reflected)
        if fr < values[0]:
            expanded = centroid + 2 * (centroid - simplex[-1])
            fe = function(expanded)
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        else:
            contracted = centroid + 0.5 * (simplex[-1] - centroid)
            fc = function(contracted)
            if fc < values[-1]:
                simplex[-1], values[-1] = contracted, fc
            else:
                simplex = [simplex[0] + 0.5 * (p - simplex[0]) for p in simplex]
                values = [function(p) for p in simplex]
        if max(values) - min(values) < 1e-10:
            break
    best = int(np.argmin(values))
    return simplex[best], values[best]


def fit_constants(cases: pd.DataFrame, names, start: Constants = Constants()) -> Constants:
    """Least squares on log(predicted / measured) over `cases`, for the constants `names` (within BOUNDS)."""
    names = list(names)
    if not names:
        return replace(start, fitted=())

    def constants_of(point):
        values = {}
        for name, v in zip(names, point, strict=True):
            low, high = BOUNDS[name]
            values[name] = min(max(v * SCALE[name], low), high)
        return replace(start, **values)

    def loss(point):
        penalty = sum(
            (min(max(v * SCALE[n], BOUNDS[n][0]), BOUNDS[n][1]) - v * SCALE[n]) ** 2 / SCALE[n] ** 2
            for n, v in zip(names, point, strict=True)
        )
        return _loss(cases, constants_of(point)) + penalty

    point = [getattr(start, n) / SCALE[n] for n in names]
    steps = [max(abs(p) * 0.2, 5.0 if SCALE[n] < 1 else 0.1) for n, p in zip(names, point, strict=True)]
    best, _ = _nelder_mead(loss, point, steps)
    best, _ = _nelder_mead(loss, best, [s / 4 for s in steps])
    return replace(constants_of(best), fitted=tuple(names))


def fit(cases: pd.DataFrame, start: Constants = Constants(), bootstrap: int = 200, seed: int = 0) -> dict:
    """Fits the constants the cases constrain (see the module); returns {constants, fitted, not_fitted (name ->
    binding count), spread (name -> (sd, 5 %, 95 %) over bootstrap resamples), binding}."""
    first = fit_constants(cases, FITTED, start)
    counts = binding(cases, first)
    names = [n for n in FITTED if counts[n] >= MIN_BINDING]
    constants = fit_constants(cases, names, start)
    rng = np.random.default_rng(seed)
    draws = {n: [] for n in names}
    for _ in range(bootstrap):
        sample = cases.iloc[rng.integers(0, len(cases), len(cases))]
        again = fit_constants(sample, names, constants)
        for n in names:
            draws[n].append(getattr(again, n))
    spread = {n: (float(np.std(v)), float(np.quantile(v, 0.05)), float(np.quantile(v, 0.95))) for n, v in draws.items()}
    not_fitted = {n: counts[n] for n in FITTED if n not in names}
    return dict(constants=constants, fitted=names, not_fitted=not_fitted, spread=spread, binding=counts)


def held_out_summary(predicted: pd.DataFrame) -> dict:
    """Median and worst ratio of predicted to measured (worst: the farthest from 1 in log), and the range."""
    ratio = predicted["ratio"].to_numpy()
    worst = ratio[int(np.argmax(np.abs(np.log(ratio))))]
    return dict(cases=len(ratio), median_ratio=float(np.median(ratio)), worst_ratio=float(worst),
                min_ratio=float(ratio.min()), max_ratio=float(ratio.max()))  # fmt: skip


# ---------------------------------------------------------------- HEAD's predictions (device time)


def head_fraction(
    kernels: list[dict], kind: str, direction: str, rows: int, d: int, dtype: str, c: Constants, copy_share: float
) -> float:
    """HEAD's predicted fraction of a same-size copy in a device-time run (device.py: CUDA-graph replay, L2 flushed,
    `out.copy_(x)` as the copy): no host cost; a launch latency (`c.launch_s`) per kernel, the copy's included, and
    the partial-sum kernel after a backward. The copy runs at `copy_share` of the HBM peak (the fit run's measured
    share). `kernels`: compiled_schedule's records for the call's forward (and backward)."""
    from normlab.bench import traffic
    from normlab.bench.profiles import DTYPES

    torch_dtype = DTYPES[{"bf16": "bfloat16", "fp32": "float32", "fp16": "float16"}[dtype]]
    copy_bytes = traffic.copy_bytes(rows, d, torch_dtype)
    copy_bandwidth = copy_share * c.hbm_peak_tbs * 1e12
    copy_time = copy_bytes / copy_bandwidth + c.launch_s
    total = 0.0
    for record in kernels:
        if not record.get("rows_fit_in_l2", True):
            raise ValueError(f"{record['kernel']} at d={d}: its rows pass the L2; the model here has no re-read term")
        total += kernel_time(record, rows, copy_bandwidth, c) + c.launch_s
        if record["direction"] == "backward":
            lines = record["programs"] * d * 4 * (2 if kind == "layer" else 1)
            total += lines / (c.efficiency * copy_bandwidth) + c.launch_s
    must = traffic.must_move(kind, direction, rows, d, torch_dtype).total
    return (must / total) / (copy_bytes / copy_time)


def to_dict(c: Constants) -> dict:
    return {k: v for k, v in asdict(c).items() if k != "fitted"}


def interval(prediction: float, summary: dict) -> tuple[float, float]:
    """The measured value the held-out error allows: prediction / max ratio .. prediction / min ratio."""
    return prediction / summary["max_ratio"], prediction / summary["min_ratio"]


def is_finite(x) -> bool:
    return isinstance(x, int | float) and math.isfinite(x)


# ---------------------------------------------------------------- the registry (data/speed-predictions.toml)

REGISTRY = "data/speed-predictions.toml"


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(float(f"{value:.6g}"))
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def registry_text(header: dict, tables: dict[str, dict], arrays: dict[str, list[dict]], comment: str = "") -> str:
    """TOML of a flat header, named tables of scalars, and arrays of tables (the registry's only shapes)."""
    lines = [f"# {line}" if line else "#" for line in comment.splitlines()]
    lines += [f"{key} = {_toml_value(value)}" for key, value in header.items()]
    for name, table in tables.items():
        lines += ["", f"[{name}]"] + [f"{key} = {_toml_value(value)}" for key, value in table.items()]
    for name, rows in arrays.items():
        for row in rows:
            lines += ["", f"[[{name}]]"] + [f"{k} = {_toml_value(v)}" for k, v in row.items() if v is not None]
    return "\n".join(lines) + "\n"


def load_registry(path: Path | str) -> dict:
    import tomllib

    return tomllib.loads(Path(path).read_text())


def score(registry: dict, device_lines: list[dict], fingerprint: str | None) -> dict:
    """Each measured case of a device-time run (normlab.bench.device's JSON lines) beside its registered prediction.

    `fingerprint`: the kernel fingerprint of the code the run timed (its provenance line's, else the caller's tree).
    Where it differs from the registration's, every prediction is reported as a mismatch and none is scored."""
    provenance = next((line for line in device_lines if line.get("type") == "provenance"), {})
    registered = registry.get("kernel_fingerprint")
    timed = provenance.get("kernel_fingerprint") or fingerprint
    predictions = {
        (p["implementation"], p["norm"], p["direction"], p["dtype"], p["rows"], p["d"]): p
        for p in registry.get("prediction", [])
    }
    if provenance.get("dry_run"):
        status = "not scored: a dry run measures nothing about a GPU"
    elif timed != registered:
        status = "mismatch: the kernels' code differs from the registered predictions' (not scored)"
    else:
        status = "scored"
    rows = []
    for line in device_lines:
        if line.get("type") != "case" or line.get("status") != "ok":
            continue
        key = (line["implementation"], line["norm"], line["direction"], line["dtype"], line["rows"], line["d"])
        p = predictions.get(key)
        if p is None:
            continue
        measured = line["fraction_of_copy"]
        row = dict(zip(("implementation", "norm", "direction", "dtype", "rows", "d"), key, strict=True))
        row |= dict(measured=measured, predicted=p["predicted"], low=p["low"], high=p["high"])
        if status == "scored":
            row |= dict(ratio=p["predicted"] / measured, inside=p["low"] <= measured <= p["high"])
        rows.append(row)
    scored = [r for r in rows if "ratio" in r]
    summary = dict(status=status, registered_fingerprint=registered, timed_fingerprint=timed, cases=len(rows))
    if scored:
        ratios = np.array([r["ratio"] for r in scored])
        summary |= dict(scored=len(scored), inside=sum(r["inside"] for r in scored),
                        median_ratio=float(np.median(ratios)),
                        worst_ratio=float(ratios[int(np.argmax(np.abs(np.log(ratios))))]))  # fmt: skip
    return dict(summary=summary, cases=rows)


def score_text(scored: dict) -> list[str]:
    """One line per case, then the summary line (what gpu_session prints)."""
    lines = []
    for r in scored["cases"]:
        name = f"{r['implementation']} {r['norm']} {r['direction']} {r['dtype']} {r['rows']}x{r['d']}"
        verdict = "" if "ratio" not in r else f" ratio {r['ratio']:.2f} {'inside' if r['inside'] else 'OUTSIDE'}"
        lines.append(f"{name:50s} measured {r['measured']:.2f} predicted {r['predicted']:.2f} "
                     f"[{r['low']:.2f}, {r['high']:.2f}]{verdict}")  # fmt: skip
    s = scored["summary"]
    tail = f"predictions: {s['status']}; {s['cases']} cases with a registered prediction"
    if "scored" in s:
        tail += f", {s['inside']} of {s['scored']} inside; median ratio {s['median_ratio']:.2f}, worst {s['worst_ratio']:.2f}"
    return lines + [tail]


def score_file(device_jsonl: Path, registry_path: Path) -> dict:
    import json

    lines = [json.loads(line) for line in Path(device_jsonl).read_text().splitlines() if line.strip()]
    return score(load_registry(registry_path), lines, kernel_fingerprint())
