"""Generate the measured tuning table (measured.json, read by tuning.py) from a committed sweep.

    python -m normlab.norms.backends.triton.tuning_table [data/triton-sweep-N.jsonl]   (default: the newest)

A sweep (scripts/gpu_sweep.py) times every kernel variant (variants.py) side by side on one GPU. Per
kernel, direction, element size and width, and per path (on chip, chunked), the fastest variant whose
results agreed with the float64 reference wins, provided it beats the table's own launch by more than
WIN_MARGIN (closer than that is timer noise, and the table keeps its choice). The winners' launches are
written with the sweep's provenance; tests/test_tuning_table.py checks the committed table against the
newest committed sweep.

A table is for one GPU and one Triton version (another compiler allocates registers and pipelines
differently): a sweep measured elsewhere is refused, naming both.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path

from normlab.norms.backends.triton import tuning

TARGET_DEVICE = "NVIDIA H200"
TARGET_TRITON = "3.6"  # major.minor: the lent GPU machine's Triton
WIN_MARGIN = 0.03
DATA = Path(__file__).resolve().parents[5] / "data"


class SweepRefused(ValueError):
    pass


def newest_sweep(data: Path = DATA) -> Path | None:
    """data/triton-sweep-N.jsonl with the largest N, None when no sweep is committed."""
    numbered = [
        (int(m.group(1)), p) for p in data.glob("triton-sweep-*.jsonl") if (m := re.search(r"-(\d+)\.", p.name))
    ]
    return max(numbered)[1] if numbered else None


def read_sweep(path: Path) -> tuple[dict, list[dict]]:
    """(provenance, variant records) of a sweep file; refuses one that is cut short or from another target."""
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not lines or lines[0].get("type") != "provenance":
        raise SweepRefused(f"{path}: not a sweep file (its first line must be the provenance record)")
    provenance = lines[0]
    device, triton_version = provenance.get("device"), str(provenance.get("triton"))
    if provenance.get("dry_run") or device != TARGET_DEVICE or not triton_version.startswith(TARGET_TRITON + "."):
        raise SweepRefused(
            f"{path} was measured on {device!r} with Triton {triton_version}"
            + (" (a dry run)" if provenance.get("dry_run") else "")
            + f"; this table is for {TARGET_DEVICE!r} with Triton {TARGET_TRITON}.x: run scripts/gpu_sweep.py there"
        )
    return provenance, [line for line in lines[1:] if line.get("type") == "variant"]


def winners(records: list[dict]) -> list[dict]:
    """Per (kind, direction, element size, width, path): the table's launch, or a variant faster by WIN_MARGIN."""
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        if r.get("agrees") and r.get("median_ms"):
            groups.setdefault((r["kind"], r["direction"], r["element_size"], r["width"]), []).append(r)
    entries = []
    for (kind, direction, element_size, width), group in sorted(groups.items()):
        table = next((r for r in group if r["variant"] == "table"), None)
        if table is None:
            continue  # nothing to beat: the table's own launch was not measured
        for path in sorted({r["path"] for r in group}):
            on_path = [r for r in group if r["path"] == path]
            best = min(on_path, key=lambda r: r["median_ms"])
            if table["path"] == path and best["median_ms"] > (1 - WIN_MARGIN) * table["median_ms"]:
                best = table
            if best["path"] != table["path"] and best["median_ms"] > (1 - WIN_MARGIN) * table["median_ms"]:
                continue  # another path that does not beat the table's: the launcher keeps the table's path
            entries.append(
                {
                    "kind": kind,
                    "direction": direction,
                    "path": path,
                    "element_size": element_size,
                    "elements": best["elements"],
                    "width": width,
                    "variant": best["variant"],
                    "config": best["config"],
                    "median_ms": best["median_ms"],
                    "table_median_ms": table["median_ms"],
                }
            )
    return entries


def generate(path: Path) -> dict:
    provenance, records = read_sweep(path)
    return {
        "source": (
            f"{path.name} ({provenance['device']}, Triton {provenance['triton']}, torch {provenance.get('torch')}, "
            f"commit {str(provenance.get('git_commit'))[:12]}, {provenance.get('started')})"
        ),
        "sweep_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "rule": f"fastest variant that agrees with the float64 reference, if more than {WIN_MARGIN:.0%} faster",
        "entries": winners(records),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m normlab.norms.backends.triton.tuning_table")
    parser.add_argument("sweep", nargs="?", type=Path, help="a sweep file (default: the newest data/triton-sweep-N)")
    args = parser.parse_args(argv)
    sweep = args.sweep or newest_sweep()
    if sweep is None:
        print(f"no sweep committed under {DATA}: the table stays {tuning.REGISTER_COUNTS!r}", file=sys.stderr)
        return 2
    try:
        table = generate(sweep)
    except SweepRefused as error:
        print(f"tuning_table: {error}", file=sys.stderr)
        return 2
    tuning.MEASURED_TABLE.write_text(json.dumps(table, indent=1) + "\n")
    print(f"wrote {tuning.MEASURED_TABLE}: {len(table['entries'])} entries from {table['source']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
