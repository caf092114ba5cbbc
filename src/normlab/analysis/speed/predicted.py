"""Section "Predicted, then measured": the schedule model's error on the old kernels' H200 runs, and HEAD's registered
predictions (data/speed-predictions.toml, written by scripts/register_speed_predictions.py through
normlab.bench.speed_model). Every number here is read from the registration; nothing is fitted or predicted while
the page builds, so the page shows what was registered before any GPU run of HEAD's kernels."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from normlab.bench import speed_model

LABELS = {"fit": "fitted on", "held_out": "held out"}


def registry(root: Path | str = ".") -> dict | None:
    path = Path(root) / speed_model.REGISTRY
    return speed_model.load_registry(path) if path.exists() else None


def old_kernel_cases(registered: dict) -> pd.DataFrame:
    """The old kernels' cases, fitted and held out: run, role, norm, direction, dtype, rows, d, measured, predicted,
    ratio (predicted / measured)."""
    fit = pd.DataFrame(registered.get("fit_case", [])).assign(role=LABELS["fit"])
    held = pd.DataFrame(registered.get("held_out_case", [])).assign(role=LABELS["held_out"])
    return pd.concat([fit, held], ignore_index=True)


def held_out_table(registered: dict) -> pd.DataFrame:
    cases = pd.DataFrame(registered.get("held_out_case", []))
    columns = ["study", "implementation", "norm", "direction", "dtype", "rows", "d", "measured", "predicted", "ratio"]
    return cases[columns].round({"measured": 3, "predicted": 3, "ratio": 3}).rename(
        columns={"measured": "measured fraction of copy", "predicted": "predicted fraction of copy",
                 "ratio": "predicted / measured"}
    )  # fmt: skip


def predictions_table(registered: dict) -> pd.DataFrame:
    """HEAD's registered predictions, labelled as predictions, with their intervals."""
    frame = pd.DataFrame(registered["prediction"])
    frame = frame.assign(
        **{"predicted fraction of copy (a prediction)": frame["predicted"].round(2),
           "interval from the held-out error": [f"{lo:.2f}–{hi:.2f}" for lo, hi in zip(frame["low"], frame["high"], strict=True)]}
    )  # fmt: skip
    columns = ["norm", "direction", "dtype", "rows", "d", "predicted fraction of copy (a prediction)",
               "interval from the held-out error", "kernels"]  # fmt: skip
    return frame[columns]


# Each constant of the schedule model as the page names it, with the unit and scale its numbers are shown in.
CONSTANT_NAMES = {
    "efficiency": ("the kernels' bandwidth, as a fraction of the same run's copy", "", 1.0),
    "l2_tbs": ("L2 bandwidth", "TB/s", 1.0),
    "fixed_forward_s": ("fixed cost of a forward call (host time)", "µs", 1e6),
    "fixed_backward_s": ("fixed cost of a forward+backward call (host time)", "µs", 1e6),
    "latency_s": ("a load's latency", "ns", 1e9),
    "launch_s": ("the device's launch latency", "µs", 1e6),
    "hbm_peak_tbs": ("HBM peak bandwidth", "TB/s", 1.0),
}


def glued(registered: dict) -> dict:
    """The registration's numbers the speed page pastes into its prose, each rounded as a sentence reads it."""
    constants, fitted, held_out = registered["constants"], registered["fitted"], registered["held_out"]
    return {
        "model_efficiency": f"{constants['efficiency']:.2f}",
        "model_efficiency_sd": f"{fitted['efficiency_sd']:.2f}",
        "model_l2_tbs": f"{constants['l2_tbs']:.1f}",
        "model_l2_tbs_sd": f"{fitted['l2_tbs_sd']:.1f}",
        "model_fixed_forward_us": f"{constants['fixed_forward_s'] * 1e6:.0f}",
        "model_fixed_backward_us": f"{constants['fixed_backward_s'] * 1e6:.0f}",
        "model_not_fitted": f"{constants['latency_s'] * 1e9:.0f} ns, {constants['hbm_peak_tbs']:.1f} TB/s and "
        f"{constants['launch_s'] * 1e6:.0f} µs",
        "model_host_bound": registered["left_out"]["fit_host_bound"],
        "model_no_copy": len(registered["left_out"]["fit_no_copy_or_unstable"]),
        "model_held_out_cases": held_out["cases"],
        "model_median_ratio": f"{held_out['median_ratio']:.2f}",
        "model_worst_ratio": f"{held_out['worst_ratio']:.2f}",
        "registered_date": registered["registered"],
        "registered_commit": registered["commit"][:7],
        "registered_fingerprint": registered["kernel_fingerprint"][:12],
    }


def constants_table(registered: dict) -> pd.DataFrame:
    """The model's constants in readable units: fitted (with the bootstrap's sd and 5-95% range) or assumed."""
    constants, fitted = registered["constants"], registered["fitted"]
    rows = []
    for name in speed_model.FITTED + ("latency_s", "launch_s", "hbm_peak_tbs"):
        label, unit, scale = CONSTANT_NAMES[name]

        def shown(value):
            return None if value is None else value * scale

        rows.append(
            {"constant": label, "unit": unit or "fraction", "value": shown(constants[name]),
             "status": "fitted" if name in fitted["names"] else "assumed (not fitted)",
             "bootstrap sd": shown(fitted.get(f"{name}_sd")), "5 %": shown(fitted.get(f"{name}_p05")),
             "95 %": shown(fitted.get(f"{name}_p95"))}
        )  # fmt: skip
    return pd.DataFrame(rows)


def figure(cases: pd.DataFrame):
    """Predicted against measured fraction of copy for the old kernels, fitted run and held-out run."""
    fig, ax = plt.subplots(figsize=(5.5, 5))
    sns.scatterplot(data=cases, x="measured", y="predicted", hue="role", style="direction", ax=ax, s=60)
    top = max(cases["measured"].max(), cases["predicted"].max()) * 1.05
    ax.plot([0, top], [0, top], color="grey", linestyle=":", linewidth=1)
    ax.set(xlim=(0, top), ylim=(0, top), xlabel="measured fraction of copy (H200)",
           ylabel="predicted fraction of copy (model)")  # fmt: skip
    ax.legend(fontsize="small")
    return fig
