"""Tables and derived numbers from a benchmark results document.

The LN/RMS comparison is a ratio of two times measured side by side in one
run. `saving` follows the paper's convention: the share of LayerNorm's time
that RMSNorm removes, 1 - t_rms / t_ln (positive: RMSNorm is faster).
"""

from __future__ import annotations

import pandas as pd

from normlab.bench.profiles import DTYPES
from normlab.bench.traffic import copy_bytes as _copy_bytes

# the fields that name a timed case, in the order every table of cases shows them
CASE_KEY = ("study", "norm", "implementation", "direction", "dtype", "rows", "d")


def copy_bytes(rows: int, d: int, dtype: str) -> int:
    return _copy_bytes(rows, d, DTYPES[dtype])


MATCH = ["study", "implementation", "direction", "dtype", "rows", "d", "mode"]


def frame(document: dict) -> pd.DataFrame:
    df = pd.DataFrame(document["records"])
    if "options" in df:
        df = df.drop(columns=["options"])
    return df


def measured(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["status"] == "ok"].copy()


def stable(df: pd.DataFrame) -> pd.DataFrame:
    """Measured cases whose timing can be believed (not marked unstable by the harness)."""
    ok = measured(df)
    if "unstable" in ok:
        ok = ok[~ok["unstable"].fillna(False).astype(bool)]
    return ok


def unstable(df: pd.DataFrame) -> pd.DataFrame:
    """Cases the harness re-measured and still could not believe: excluded from every summary."""
    ok = measured(df)
    if "unstable" not in ok:
        return ok.iloc[0:0]
    return ok[ok["unstable"].fillna(False).astype(bool)]


def ln_rms_ratios(df: pd.DataFrame, *, include_unstable: bool = False) -> pd.DataFrame:
    """One row per implementation and shape timed for both norms: t_ln, t_rms, ratio t_ln/t_rms, saving.

    `saving_sd` is the saving's run-to-run spread from the two cases' repeats. Cases
    the harness marked unstable are left out unless `include_unstable`.
    """
    ok = measured(df) if include_unstable else stable(df)
    values = ["median_s", "fraction_of_copy", "effective_passes", "relative_sd"]
    # a run that measured nothing (every case skipped, say) has no timing columns: an empty table, not a KeyError
    ok = ok.assign(**{column: float("nan") for column in values if column not in ok})
    ln = ok[ok["norm"] == "layer"][MATCH + values]
    rms = ok[ok["norm"] == "rms"][MATCH + values]
    joined = ln.merge(rms, on=MATCH, how="inner", suffixes=("_ln", "_rms"))
    joined = joined.rename(columns={"median_s_ln": "t_ln_s", "median_s_rms": "t_rms_s"})
    joined["ratio_ln_over_rms"] = joined["t_ln_s"] / joined["t_rms_s"]
    joined["saving"] = 1.0 - joined["t_rms_s"] / joined["t_ln_s"]
    ratio_sd = (joined["relative_sd_ln"] ** 2 + joined["relative_sd_rms"] ** 2) ** 0.5
    joined["ratio_sd"] = joined["ratio_ln_over_rms"] * ratio_sd
    joined["saving_sd"] = (joined["t_rms_s"] / joined["t_ln_s"]) * ratio_sd
    return joined


def implementation_summary(ratios: pd.DataFrame, by: tuple[str, ...] = ("implementation",)) -> pd.DataFrame:
    """Per implementation (or per `by` group): the median LN/RMS time ratio and saving over the shapes given, with their spread.

    The spread is the median over shapes of each point's run-to-run sd (from its
    repeats), so one noisy shape cannot widen it; a min-to-max range of ratios is
    never reported.
    """
    by = list(by)
    rows = []
    for key, group in ratios.groupby(by):
        key = key if isinstance(key, tuple) else (key,)
        rows.append(
            {
                **dict(zip(by, key)),
                "points": len(group),
                "median ratio t_LN/t_RMS": float(group["ratio_ln_over_rms"].median()),
                "ratio sd": float(group["ratio_sd"].median()),
                "median saving": float(group["saving"].median()),
                "saving sd": float(group["saving_sd"].median()),
            }
        )
    return pd.DataFrame(
        rows, columns=[*by, "points", "median ratio t_LN/t_RMS", "ratio sd", "median saving", "saving sd"]
    )


def compare_runs(
    ratios: pd.DataFrame, by: tuple[str, ...] = ("implementation", "dtype"), run: str = "run"
) -> pd.DataFrame:
    """Side by side per run: each group's median LN/RMS ratio and its sd (the median of its points' sds), one column pair
    per run in the order the runs first appear. A group one run lacks shows as an empty cell."""
    by = list(by)
    if ratios.empty:
        return pd.DataFrame(columns=by)
    out = None
    for name in ratios[run].drop_duplicates():
        summary = implementation_summary(ratios[ratios[run] == name], by=tuple(by))
        summary = summary[by + ["median ratio t_LN/t_RMS", "ratio sd"]].rename(
            columns={"median ratio t_LN/t_RMS": f"t_LN/t_RMS [{name}]", "ratio sd": f"sd [{name}]"}
        )
        out = summary if out is None else out.merge(summary, on=by, how="outer")
    return out.sort_values(by).reset_index(drop=True)


def describe_medians(summary: pd.DataFrame) -> str:
    """'auto 1.01 (float32), 1.04 (bfloat16); eager 1.77 (float32), ...' from an `implementation_summary` by implementation and dtype."""
    parts = []
    for name, group in summary.groupby("implementation", sort=True):
        values = ", ".join(
            f"{row['median ratio t_LN/t_RMS']:.2f} ({row['dtype']})"
            for _, row in group.sort_values("dtype", ascending=False).iterrows()
        )
        parts.append(f"{name} {values}")
    return "; ".join(parts)


def ratio_grid(
    ratios: pd.DataFrame, study: str, rows: tuple[str, ...] = ("implementation", "dtype"), columns: str = "d"
) -> pd.DataFrame:
    """LN/RMS ratios of one study as a grid (implementation and dtype down, d across), for a compact table.

    A shape missing for one norm, or left out as unstable, shows as an empty cell.
    """
    pick = ratios[ratios["study"] == study]
    if pick.empty:
        return pd.DataFrame()
    grid = pick.pivot_table(index=list(rows), columns=columns, values="ratio_ln_over_rms", aggfunc="median")
    grid.columns = [f"{columns} = {c}" for c in grid.columns]
    return grid.reset_index()


def skipped(df: pd.DataFrame) -> pd.DataFrame:
    """One line per distinct reason a case was not timed: the implementations and studies it covers, and how many cases."""
    out = df[df["status"] != "ok"]
    if out.empty:
        return pd.DataFrame(columns=["status", "reason", "implementations", "studies", "cases"])
    join = lambda values: ", ".join(sorted(set(values)))  # noqa: E731
    return (
        out.groupby(["status", "reason"])
        .agg(implementations=("implementation", join), studies=("study", join), cases=("study", "size"))
        .reset_index()
    )


def auto_goal(df: pd.DataFrame, *, rows: int = 8192, d: int = 4096, dtype: str = "float32") -> pd.DataFrame | None:
    """backend="auto" against an allocating copy at the issue's reference shape, for both norms; None if not timed."""
    ok = measured(df)
    pick = ok[
        (ok["study"] == "sweep")
        & (ok["implementation"] == "auto")
        & (ok["rows"] == rows)
        & (ok["d"] == d)
        & (ok["dtype"] == dtype)
        & (ok["mode"] == "alloc")
        & (ok["direction"] == "forward")
    ]
    if set(pick["norm"]) != {"layer", "rms"}:
        return None
    return pick[["norm", "median_s", "bandwidth_gbs", "copy_bandwidth_gbs", "fraction_of_copy"]].set_index("norm")


def table(df: pd.DataFrame) -> str:
    """The measured cases as a plain-text table, grouped by study."""
    ok = measured(df)
    if ok.empty:
        return "(no cases measured)"
    shown = ok.assign(
        time_ms=ok["median_s"] * 1e3,
        iqr_ms=(ok["q75_s"] - ok["q25_s"]) * 1e3,
        GBps=ok["bandwidth_gbs"],
        of_copy=ok["fraction_of_copy"],
        passes=ok["effective_passes"],
    )
    columns = [*CASE_KEY, "mode", "time_ms", "iqr_ms", "GBps", "of_copy", "passes"]
    if "device_time_s" in ok and ok["device_time_s"].notna().any():
        shown = shown.assign(device_ms=ok["device_time_s"] * 1e3, host_share=host_share(ok))
        columns += ["device_ms", "host_share"]
    return shown[columns].to_string(index=False, float_format=lambda v: f"{v:.4g}")


# A case whose wall time exceeds its GPU kernel time by more than this share is waiting on the host.
HOST_BOUND_SHARE = 0.5


def host_share(df: pd.DataFrame) -> pd.Series:
    """The share of each case's wall time not spent in GPU kernels: 1 - device / wall (NaN without device time)."""
    if "device_time_s" not in df:
        return pd.Series(float("nan"), index=df.index)
    return 1 - df["device_time_s"].astype(float) / df["median_s"]


def host_bound(df: pd.DataFrame) -> pd.DataFrame:
    """Measured cases with a device time, and whether each is host-bound (host_share > HOST_BOUND_SHARE)."""
    ok = measured(df)
    if "device_time_s" not in ok:
        return ok.iloc[0:0].assign(host_share=[], host_bound=[])
    ok = ok[ok["device_time_s"].notna()]
    share = host_share(ok)
    return ok.assign(host_share=share, host_bound=share > HOST_BOUND_SHARE)


def device_time_note(document: dict) -> str | None:
    """Why a results document has no device times (None when it has them)."""
    return document.get("device_time_note")


def census(df: pd.DataFrame) -> pd.DataFrame:
    """The pass census: traced passes, op lists and profiler agreement, where recorded."""
    if "profiler_ops" not in df:
        return pd.DataFrame()
    rows = df[df["profiler_ops"].notna()].copy()
    rows["profiler_count"] = rows["profiler_ops"].map(len)
    rows["traced_count"] = rows["traced_ops"].map(lambda ops: len(ops) if isinstance(ops, list) else None)
    columns = [
        *CASE_KEY,
        "traced_passes",
        "traced_count",
        "profiler_count",
        "ops_agree",
        "effective_passes",
        "traced_ops",
        "profiler_ops",
    ]
    if "traced_reductions" in rows:
        columns.insert(8, "traced_reductions")
    return rows[columns].reset_index(drop=True)


def backward_vs_copies(df: pd.DataFrame, implementation: str = "auto", dtype: str = "float32") -> pd.DataFrame:
    """Forward+backward of both norms against the two timings of a same-size copy made in the same run.

    One row per norm and width: the median time with its sd, the time in units of
    each copy, the achieved fraction of copy bandwidth (bytes the norm must move),
    and LN/RMS as a ratio with its sd. Unstable cases stay in the table, flagged.
    """
    ok = measured(df)
    back = ok[(ok["study"] == "backward") & (ok["implementation"] == implementation) & (ok["dtype"] == dtype)]
    copies = ok[(ok["norm"] == "copy") & (ok["dtype"] == dtype) & (ok["mode"] == "alloc")]
    rows = []
    for record in back.sort_values(["d", "norm"]).itertuples():
        same = copies[(copies["rows"] == record.rows) & (copies["d"] == record.d)]
        first = same[same["implementation"] == "copy (clone)"]["median_s"]
        again = same[same["implementation"] == "copy (clone) again"]["median_s"]
        sd = getattr(record, "relative_sd", float("nan"))
        rows.append(
            {
                "rows × d": f"{record.rows}×{record.d}",
                "norm": "LayerNorm" if record.norm == "layer" else "RMSNorm",
                "time (ms)": record.median_s * 1e3,
                "sd (ms)": record.median_s * sd * 1e3,
                "÷ copy": record.median_s / first.iloc[0] if len(first) else None,
                "÷ copy again": record.median_s / again.iloc[0] if len(again) else None,
                # bytes the pair must move per second, against the first copy's bytes per second as shown here
                # (the harness's own fraction uses the copy as first timed, before any re-measure)
                "fraction of copy bandwidth": (record.bytes / record.median_s)
                / (copy_bytes(record.rows, record.d, dtype) / first.iloc[0])
                if len(first)
                else None,
                "unstable": bool(getattr(record, "unstable", False) or False),
            }
        )
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    ratios = ln_rms_ratios(df, include_unstable=True)
    ratios = ratios[
        (ratios["study"] == "backward") & (ratios["implementation"] == implementation) & (ratios["dtype"] == dtype)
    ]
    lookup = {f"{r.rows}×{r.d}": (r.ratio_ln_over_rms, r.ratio_sd) for r in ratios.itertuples()}
    table["t_LN / t_RMS"] = table["rows × d"].map(lambda key: lookup.get(key, (None, None))[0])
    table["ratio sd"] = table["rows × d"].map(lambda key: lookup.get(key, (None, None))[1])
    return table


def copy_agreement(df: pd.DataFrame) -> pd.DataFrame:
    """Each pair of identical code paths timed in this run (auto and its dispatch target, a copy and its repeat)."""
    ok = measured(df)
    if "same_path_as" not in ok:
        return pd.DataFrame()
    pairs = ok[ok["same_path_as"].notna()]
    rows = []
    for r in pairs.itertuples():
        partner = ok[
            (ok["implementation"] == r.same_path_as)
            & (ok["rows"] == r.rows)
            & (ok["d"] == r.d)
            & (ok["dtype"] == r.dtype)
            & (ok["mode"] == r.mode)
            & (ok["direction"] == r.direction)
            & ((ok["norm"] == r.norm) | (r.norm == "copy"))
        ]
        if r.norm != "copy":
            partner = partner[partner["study"] == r.study]
        if partner.empty:
            continue
        p = partner.iloc[0]
        rows.append(
            {
                "case": f"{r.study} {r.norm} {r.dtype} {r.rows}×{r.d} {r.mode}",
                "implementation": r.implementation,
                "same path": r.same_path_as,
                "time (ms)": r.median_s * 1e3,
                "same path (ms)": p["median_s"] * 1e3,
                "ratio": r.median_s / p["median_s"],
                "agree within spread": bool(r.same_path_agrees),
                "re-measured": bool(r.remeasured) or bool(p["remeasured"]),
                "unstable": bool(r.unstable),
            }
        )
    return pd.DataFrame(rows)
