"""Tables and derived numbers from a benchmark results document.

The LN/RMS comparison is a ratio of two times measured side by side in one
run. `saving` follows the paper's convention: the share of LayerNorm's time
that RMSNorm removes, 1 - t_rms / t_ln (positive: RMSNorm is faster).
"""
from __future__ import annotations

import pandas as pd

MATCH = ["study", "implementation", "direction", "dtype", "rows", "d", "mode"]


def frame(document: dict) -> pd.DataFrame:
    df = pd.DataFrame(document["records"])
    if "options" in df:
        df = df.drop(columns=["options"])
    return df


def measured(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["status"] == "ok"].copy()


def ln_rms_ratios(df: pd.DataFrame) -> pd.DataFrame:
    """One row per implementation and shape timed for both norms: t_ln, t_rms, ratio t_ln/t_rms, saving."""
    ok = measured(df)
    values = ["median_s", "fraction_of_copy", "effective_passes"]
    ln = ok[ok["norm"] == "layer"][MATCH + values]
    rms = ok[ok["norm"] == "rms"][MATCH + values]
    joined = ln.merge(rms, on=MATCH, how="inner", suffixes=("_ln", "_rms"))
    joined = joined.rename(columns={"median_s_ln": "t_ln_s", "median_s_rms": "t_rms_s"})
    joined["ratio_ln_over_rms"] = joined["t_ln_s"] / joined["t_rms_s"]
    joined["saving"] = 1.0 - joined["t_rms_s"] / joined["t_ln_s"]
    return joined


def skipped(df: pd.DataFrame) -> pd.DataFrame:
    """One line per distinct reason a case was not timed: the implementations and studies it covers, and how many cases."""
    out = df[df["status"] != "ok"]
    if out.empty:
        return pd.DataFrame(columns=["status", "reason", "implementations", "studies", "cases"])
    join = lambda values: ", ".join(sorted(set(values)))  # noqa: E731
    return (out.groupby(["status", "reason"])
            .agg(implementations=("implementation", join), studies=("study", join), cases=("study", "size"))
            .reset_index())


def auto_goal(df: pd.DataFrame, *, rows: int = 8192, d: int = 4096, dtype: str = "float32") -> pd.DataFrame | None:
    """backend="auto" against an allocating copy at the issue's reference shape, for both norms; None if not timed."""
    ok = measured(df)
    pick = ok[(ok["study"] == "sweep") & (ok["implementation"] == "auto") & (ok["rows"] == rows) & (ok["d"] == d)
              & (ok["dtype"] == dtype) & (ok["mode"] == "alloc") & (ok["direction"] == "forward")]
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
    columns = ["study", "norm", "implementation", "direction", "dtype", "rows", "d", "mode", "time_ms", "iqr_ms", "GBps",
               "of_copy", "passes"]
    return shown[columns].to_string(index=False, float_format=lambda v: f"{v:.4g}")


def census(df: pd.DataFrame) -> pd.DataFrame:
    """The pass census: traced passes, op lists and profiler agreement, where recorded."""
    if "profiler_ops" not in df:
        return pd.DataFrame()
    rows = df[df["profiler_ops"].notna()].copy()
    rows["profiler_count"] = rows["profiler_ops"].map(len)
    rows["traced_count"] = rows["traced_ops"].map(lambda ops: len(ops) if isinstance(ops, list) else None)
    columns = ["study", "norm", "implementation", "direction", "dtype", "rows", "d", "traced_passes", "traced_count",
               "profiler_count", "ops_agree", "effective_passes", "traced_ops", "profiler_ops"]
    if "traced_reductions" in rows:
        columns.insert(8, "traced_reductions")
    return rows[columns].reset_index(drop=True)
