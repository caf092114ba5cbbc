"""Fit the schedule model on one committed H200 run, test it on the other, and register HEAD's predictions.

    python scripts/register_speed_predictions.py [--bootstrap 200] [--out data/speed-predictions.toml]

1. The reader on the old kernels: the Triton kernels of commit 12a0522 (the ones data/gpu-bench.json and
   data/gpu-bench-2.json timed on an H200) are written out with `git show` into a temporary folder and compiled for
   sm_90 with compiled_schedule's reader (normlab.bench.old_kernels), one configuration per launch those runs made.
2. Fit on one run, test on the other: the model's free constants (normlab.bench.speed_model) are fitted on
   gpu-bench.json's Triton cases that are not host-bound (the speed chapter's rule, analysis.speed.host_time) and
   tested on gpu-bench-2.json's: per case predicted and measured fraction of copy, median and worst ratio. A record
   with no same-run copy is left out and named.
3. HEAD's predictions: compiled_schedule.schedule at the targets (RMSNorm and LayerNorm, bf16 and fp32, 8192 rows of
   d = 4096, 8192, 16384, forward and forward+backward), with the fitted constants and an interval from the held-out
   ratios, written with the date, the commit and the kernels' fingerprint. torch's native kernels are CUDA C++ and
   Liger's are not compiled by this reader: each is registered as not predicted, with the reason.

Needs Triton's CUDA backend (ptxas) and git; no GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)

import pandas as pd  # noqa: E402

from normlab.analysis.speed import host_time  # noqa: E402
from normlab.bench import compiled_schedule, old_kernels, report  # noqa: E402
from normlab.bench import speed_model as sm  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
FIT_RUN, TEST_RUN = "data/gpu-bench.json", "data/gpu-bench-2.json"
TARGETS = dict(widths=[4096, 8192, 16384], dtypes=["bf16", "fp32"], rows=8192)
NOT_PREDICTED = {
    "torch": "torch's native F.rms_norm / F.layer_norm are CUDA C++ kernels: Triton's reader cannot compile them",
    "liger": "Liger-Kernel is not installed here and its kernels' arguments are not mapped by this reader",
}


def cases_of(path: str) -> pd.DataFrame:
    frame = report.frame(json.loads((REPO / path).read_text()))
    cases = sm.old_cases(frame)
    bound = host_time.shares(frame)["host_bound"]
    return cases.assign(host_bound=[bool(bound.get(i, True)) for i in cases["index"]], run=Path(path).name)


def copy_share(path: str) -> float:
    """The run's copy bandwidth against the HBM peak: the median over its copies that are not host-bound."""
    frame = report.frame(json.loads((REPO / path).read_text()))
    shares = host_time.shares(frame)
    copies = shares[(shares["norm"] == "copy") & ~shares["host_bound"] & (shares["mode"] == "alloc")]
    return float((copies["bandwidth_gbs"] * 1e9 / (sm.ASSUMED["hbm_peak_tbs"] * 1e12)).median())


def git(*args) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", type=int, default=200)
    parser.add_argument("--out", type=Path, default=REPO / sm.REGISTRY)
    args = parser.parse_args()
    fit_cases, test_cases = cases_of(FIT_RUN), cases_of(TEST_RUN)
    compiled = old_kernels.schedule(sm.needed_launches(pd.concat([fit_cases, test_cases])), REPO)
    if "unavailable" in compiled:
        print(f"nothing compiled for sm_90: {compiled['unavailable']}", file=sys.stderr)
        return 1
    fit_cases = sm.attach_kernels(fit_cases, compiled["records"])
    test_cases = sm.attach_kernels(test_cases, compiled["records"])
    fit_usable, fit_left = sm.usable(fit_cases[~fit_cases["host_bound"]])
    test_usable, test_left = sm.usable(test_cases[~test_cases["host_bound"]])
    result = sm.fit(fit_usable, bootstrap=args.bootstrap)
    constants = result["constants"]
    fitted_frame = sm.predict_frame(fit_usable, constants)
    held_out = sm.predict_frame(test_usable, constants)
    summary = sm.held_out_summary(held_out)
    share = copy_share(FIT_RUN)
    head = compiled_schedule.schedule(TARGETS["widths"], TARGETS["dtypes"], TARGETS["rows"], ("plain",))
    if "unavailable" in head:
        print(f"HEAD not compiled for sm_90: {head['unavailable']}", file=sys.stderr)
        return 1
    by = {(r["kind"], r["direction"], r["d"], r["dtype"]): r for r in head["records"]}
    predictions = []
    for kind in ("rms", "layer"):
        for dtype in TARGETS["dtypes"]:
            for d in TARGETS["widths"]:
                for direction in ("forward", "forward+backward"):
                    kernels = [by[(kind, "forward", d, dtype)]]
                    if direction == "forward+backward":
                        kernels.append(by[(kind, "backward", d, dtype)])
                    value = sm.head_fraction(kernels, kind, direction, TARGETS["rows"], d, dtype, constants, share)
                    low, high = sm.interval(value, summary)
                    predictions.append(
                        dict(implementation="triton", norm=kind, direction=direction,
                             dtype={"bf16": "bfloat16", "fp32": "float32"}[dtype], rows=TARGETS["rows"], d=d,
                             predicted=value, low=low, high=high,
                             kernels=" + ".join(f"{k['kernel']} ({k['shape']})" for k in kernels))
                    )  # fmt: skip
    dirty = bool(git("status", "--porcelain", "--", "src/normlab/norms/backends/triton"))
    header = dict(
        registered=datetime.now(timezone.utc).date().isoformat(),
        commit=git("rev-parse", "HEAD") + ("-dirty" if dirty else ""),
        kernel_fingerprint=sm.kernel_fingerprint(),
        kernel_files=list(sm.KERNEL_FILES),
        triton=compiled_schedule._triton_version(),
        device_kind="device time (normlab.bench.device: CUDA-graph replay, L2 flushed), fraction of a same-size copy_",
        old_commit=old_kernels.COMMIT,
        fit_run=FIT_RUN,
        test_run=TEST_RUN,
    )
    spread = {f"{name}_sd": s[0] for name, s in result["spread"].items()}
    spread |= {f"{name}_p05": s[1] for name, s in result["spread"].items()}
    spread |= {f"{name}_p95": s[2] for name, s in result["spread"].items()}
    tables = {
        "constants": {**sm.to_dict(constants), "copy_share_of_peak": share},
        "fitted": dict(names=list(result["fitted"]), bootstrap=args.bootstrap, **spread),
        "not_fitted": {
            "names": list(result["not_fitted"]) + ["latency_s", "hbm_peak_tbs", "launch_s"],
            "why": "a constant no fit case constrains (moving it by a fifth moves fewer than "
            f"{sm.MIN_BINDING} predictions by {sm.BINDING_SHIFT:.0%}) keeps its assumed value; latency_s (no case was "
            "short of loads in flight), hbm_peak_tbs (cancels against the same-run copy) and launch_s (the runs were "
            "timed with the host: their fixed cost is host time, fitted per direction, and does not carry to a "
            "device-time run) are assumptions",
        },
        "held_out": {
            **summary,
            "interval_rule": "predicted / max ratio .. predicted / min ratio of the held-out cases",
        },
        "left_out": {
            "fit_host_bound": int(fit_cases["host_bound"].sum()),
            "test_host_bound": int(test_cases["host_bound"].sum()),
            "fit_no_copy_or_unstable": [
                f"{r.norm} {r.direction} {r.dtype} {r.rows}x{r.d} ({r.why})" for r in fit_left.itertuples()
            ],
            "test_no_copy_or_unstable": [
                f"{r.norm} {r.direction} {r.dtype} {r.rows}x{r.d} ({r.why})" for r in test_left.itertuples()
            ],
        },  # fmt: skip
    }
    columns = [
        "run",
        "study",
        "implementation",
        "norm",
        "direction",
        "dtype",
        "rows",
        "d",
        "measured",
        "predicted",
        "ratio",
    ]
    arrays = {
        "prediction": predictions,
        "not_predicted": [dict(implementation=k, reason=v) for k, v in NOT_PREDICTED.items()],
        "fit_case": fitted_frame[columns].to_dict("records"),
        "held_out_case": held_out[columns].to_dict("records"),
    }
    comment = (
        "HEAD's Triton kernels' speed, predicted from their sm_90 compiled code before any GPU run times them.\n"
        "Written by scripts/register_speed_predictions.py (normlab.bench.speed_model); do not edit by hand.\n"
        "A GPU run whose kernels' fingerprint differs from kernel_fingerprint is reported as a mismatch, not scored."
    )
    args.out.write_text(sm.registry_text(header, tables, arrays, comment))
    print(f"fitted {result['fitted']} on {len(fit_usable)} cases; not fitted {result['not_fitted']}")
    print(
        f"held out ({len(held_out)} cases): median ratio {summary['median_ratio']:.3f}, worst {summary['worst_ratio']:.3f}"
    )
    print(f"{len(predictions)} predictions registered in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
