"""Benchmark the norms against a same-size copy.

    python -m normlab.bench [--profile smoke|cpu|gpu] [--backend B ...] [--dtype D ...] [--output FILE.json]
                            [--device cpu|cuda]

Prints a table of every measured case, the cases skipped and why, the LN/RMS
time ratios, and the fraction of copy bandwidth backend="auto" reaches at
d = 4096, 8192 rows, fp32. Writes the results (with hardware and versions) as JSON.
"""

from __future__ import annotations

import argparse
import sys

from normlab.bench.profiles import DTYPES, PROFILES


def main(argv: list[str] | None = None) -> int:
    from normlab import BACKENDS

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="cpu", help=f"one of {', '.join(PROFILES)} (default: cpu)")
    parser.add_argument(
        "--backend", action="append", help=f"time only these (repeatable); valid: {', '.join(BACKENDS)}"
    )
    parser.add_argument("--dtype", action="append", help=f"time only these (repeatable); valid: {', '.join(DTYPES)}")
    parser.add_argument("--output", default=None, help="results JSON path (default: build/bench/<profile>.json)")
    parser.add_argument(
        "--device",
        default=None,
        help="run the profile's grid on this device instead of its own (the gpu grid on cpu lists every case, "
        "skipping what needs a GPU: scripts/gpu_session.py --dry-run)",
    )
    parser.add_argument(
        "--records", default=None, help="also write each case's record here as it is measured (JSON lines, flushed)"
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    args = parser.parse_args(argv)

    from normlab.bench import harness, report

    try:
        document = harness.run(
            args.profile,
            backends=args.backend,
            dtypes=args.dtype,
            device=args.device,
            progress=not args.no_progress,
            records_path=args.records,
        )
    except (ValueError, RuntimeError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    output = args.output or f"build/bench/{args.profile}.json"
    harness.save(document, output)

    df = report.frame(document)
    print(report.table(df))
    skipped = report.skipped(df)
    if not skipped.empty:
        print("\nnot timed:")
        for row in skipped.itertuples():
            print(f"  [{row.status}] {row.cases} cases ({row.implementations}; {row.studies}): {row.reason}")
    ratios = report.ln_rms_ratios(df)
    sweep = ratios[(ratios["study"] == "sweep") & (ratios["mode"] == "alloc")]
    if not sweep.empty:
        print("\nLN time / RMS time (forward, training batch):")
        print(
            sweep.pivot_table(index=["dtype", "d"], columns="implementation", values="ratio_ln_over_rms").to_string(
                float_format=lambda v: f"{v:.3f}"
            )
        )
    goal = report.auto_goal(df)
    if goal is None:
        print(
            '\nbackend="auto" at d=4096, 8192 rows, fp32: not timed in this run (that shape is in the cpu and gpu profiles)'
        )
    else:
        ln, rms = goal.loc["layer"], goal.loc["rms"]
        print('\nbackend="auto" at d=4096, 8192 rows, fp32, against an allocating copy (clone):')
        for name, row in (("LayerNorm", ln), ("RMSNorm", rms)):
            status = "meets" if row.fraction_of_copy >= 0.8 else "misses"
            print(
                f"  {name:9s} {row.median_s * 1e3:8.2f} ms  {row.bandwidth_gbs:6.2f} GB/s  "
                f"{row.fraction_of_copy:6.1%} of copy ({status} the 80% goal)"
            )
        faster = "no slower than" if rms.median_s <= ln.median_s else "slower than"
        print(f"  RMSNorm auto is {faster} LayerNorm auto (t_rms / t_ln = {rms.median_s / ln.median_s:.3f})")
    print(
        f"\nresults: {output}  ({document['wall_s']:.0f} s on {document['hardware']['cpu']}"
        + (f", {document['hardware']['gpu']}" if document["hardware"].get("gpu") else "")
        + ")"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
