"""The compiled schedule of the Triton kernels of an older commit (12a0522, the kernels the committed H200 runs timed).

data/gpu-bench.json and data/gpu-bench-2.json timed the kernels of commit 12a0522 (then `normlab.ops`): an on-chip
forward with one tile of rows per program and no persistent loop, a chunked forward with one row per program, and
backward kernels that loop over rows in 2 x SMs programs and add each row's weight gradient into a per-program line
that torch then sums. Those kernels are in git. `sources` writes them (`git show COMMIT:PATH`, never a checkout over
the tree) into a folder as a package of their own; `schedule` compiles the configurations the 12a0522 launcher picked
for each timed case with compiled_schedule's reader (compile_kernel, analyse_ttgir: the same ptxas log and TTGIR) and
accounts each kernel's bytes from the compiled loads and stores:

* an op's count per program is the product of its loops' trips: a chunk loop (an op in it moves CHUNK elements) runs
  ceil(d / CHUNK) times per row, a row loop (the backward's persistent loop) tiles / programs times;
* L2 sees every access; HBM sees each row-streamed tensor once per row (read or written), the weight and bias once in
  all, and the per-program partial lines once when written. A tensor read again in a later pass of the same row (the
  chunked kernels) comes from L2 while the rows in flight (resident programs x rows x d x element) fit in it, else
  from HBM again;
* loads in flight per SM: the resident programs' loads of one iteration, half of it without a pipelined loop (as the
  HEAD reader counts a kernel whose loads wait before its work).

The launcher's rules (tile sizes, warps, programs, limits) are read from the old launch.py's constants and written
here as that launcher wrote them; `LAUNCH_RULES` names them.
"""

from __future__ import annotations

import ast
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

COMMIT = "12a0522"
PACKAGE = "normlab_12a0522_ops"
KERNEL_FILES = ("rms_kernels.py", "layer_kernels.py", "fused_add.py")
LAUNCH_FILE = "launch.py"
OPS_DIR = "src/normlab/ops"
LAUNCH_RULES = (
    "forward: on chip for d <= ONCHIP_LIMIT (a tile of max(1, TILE_ELEMENTS / block) rows, one tile per program, "
    "warps_for(rows x block)), else chunked (one row per program, CHUNK = min(CHUNK, next_pow2(d)), warps_for(CHUNK)); "
    "backward: on chip for d <= BACKWARD_ONCHIP_LIMIT (min(tiles, 2 x SMs) programs, min(16, 2 x warps_for(tile))), "
    "else chunked (min(rows, 2 x SMs) programs, warps_for(CHUNK), partial lines zeroed by torch first); torch sums "
    "the partial lines after the backward (and casts them to the weight's dtype)."
)
SMS = 132


def git_show(commit: str, path: str, repo: Path) -> str:
    return subprocess.run(
        ["git", "show", f"{commit}:{path}"], cwd=repo, capture_output=True, text=True, check=True
    ).stdout


def sources(folder: Path, repo: Path, commit: str = COMMIT) -> dict:
    """Writes the commit's kernel files into folder/PACKAGE (a package with relative imports, as they were) and
    returns the launcher's constants {ONCHIP_LIMIT, BACKWARD_ONCHIP_LIMIT, CHUNK, TILE_ELEMENTS}."""
    package = Path(folder) / PACKAGE
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(f'"""The Triton kernels of commit {commit}, as git show wrote them."""\n')
    for name in KERNEL_FILES:
        (package / name).write_text(git_show(commit, f"{OPS_DIR}/{name}", repo))
    return launch_constants(git_show(commit, f"{OPS_DIR}/{LAUNCH_FILE}", repo))


def launch_constants(launch_source: str) -> dict:
    """The module-level integer constants of a launch.py."""
    constants = {}
    for node in ast.parse(launch_source).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, int):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    constants[target.id] = node.value.value
    missing = {"ONCHIP_LIMIT", "BACKWARD_ONCHIP_LIMIT", "CHUNK", "TILE_ELEMENTS"} - set(constants)
    if missing:
        raise ValueError(f"the old launch.py lacks {sorted(missing)}")
    return constants


def next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def warps_for(elements: int) -> int:
    return max(1, min(16, next_pow2(max(1, elements // (32 * 16)))))


def launches(kind: str, direction: str, d: int, rows: int, dtype: str, constants: dict, *, chunked=False, welford=True):
    """The kernels the 12a0522 launcher started for one call: a list of dicts (kernel, constexprs, warps, programs,
    tiles, rows per tile). direction: 'forward' or 'backward'. `chunked`: the chunked kernel forced (onchip_limit=0)."""
    flags = dict(HAS_WEIGHT=True, EPS_INSIDE=True) if kind == "rms" else dict(HAS_WEIGHT=True, HAS_BIAS=True)
    prefix = "rms" if kind == "rms" else "layer"
    if direction == "forward":
        flags = dict(flags, HAS_RESIDUAL=False)
        if not chunked and d <= constants["ONCHIP_LIMIT"]:
            block = next_pow2(d)
            tile = min(max(1, constants["TILE_ELEMENTS"] // block), next_pow2(max(rows, 1)))
            tiles = -(-rows // tile)
            return dict(kernel=f"{prefix}_forward_onchip", constexprs=dict(flags, ROWS=tile, BLOCK=block),
                        warps=warps_for(tile * block), programs=tiles, tiles=tiles, tile_rows=tile, chunk=None)  # fmt: skip
        chunk = min(constants["CHUNK"], next_pow2(d))
        if kind == "layer":
            flags = dict(flags, WELFORD=welford)
        return dict(kernel=f"{prefix}_forward_chunked", constexprs=dict(flags, CHUNK=chunk), warps=warps_for(chunk),
                    programs=rows, tiles=rows, tile_rows=1, chunk=chunk)  # fmt: skip
    flags = dict(flags, HAS_DS=False)
    if not chunked and d <= min(constants["ONCHIP_LIMIT"], constants["BACKWARD_ONCHIP_LIMIT"]):
        block = next_pow2(d)
        tile = min(max(1, constants["TILE_ELEMENTS"] // block), next_pow2(max(rows, 1)))
        tiles = -(-rows // tile)
        return dict(kernel=f"{prefix}_backward_onchip", constexprs=dict(flags, ROWS=tile, BLOCK=block),
                    warps=min(16, 2 * warps_for(tile * block)), programs=min(tiles, 2 * SMS), tiles=tiles,
                    tile_rows=tile, chunk=None)  # fmt: skip
    chunk = min(constants["CHUNK"], next_pow2(d))
    return dict(kernel=f"{prefix}_backward_chunked", constexprs=dict(flags, CHUNK=chunk), warps=warps_for(chunk),
                programs=min(rows, 2 * SMS), tiles=rows, tile_rows=1, chunk=chunk)  # fmt: skip


# ---------------------------------------------------------------- reading the compiled code

ROW_STREAMED = ("X", "R", "Y", "S", "DY", "DS", "DX", "MS", "MEAN", "RSTD")
PARTIALS = ("DW_PARTIAL", "DB_PARTIAL")
PARAMETERS = ("W", "B")


def _loop_trips(analysis: dict, launch: dict, d: int) -> dict:
    """{loop start line: trips per program}: a chunk loop ceil(d / CHUNK) (per row it walks), a row loop
    tiles / programs."""
    trips = {}
    chunk = launch["chunk"]
    for start, _end, _indent, _depth in analysis["loops"]:
        innermost = [op for op in analysis["ops"] if op["loops"] and max(op["loops"]) == start]
        is_chunk = chunk is not None and any(op["elements"] == chunk for op in innermost)
        trips[start] = math.ceil(d / chunk) if is_chunk else launch["tiles"] / launch["programs"]
    return trips


def traffic(analysis: dict, launch: dict, d: int, rows: int, element: int, l2_bytes: float, ctas_per_sm: int) -> dict:
    """HBM and L2 bytes per row, loads in flight per SM, and whether the rows in flight fit in L2 (see the module)."""
    trips = _loop_trips(analysis, launch, d)
    programs = launch["programs"]
    per_tensor_l2: dict[tuple[str, str], float] = {}
    l2, iteration_loads = 0.0, {}
    for op in analysis["ops"]:
        count = 1.0
        for start in op["loops"]:
            count *= trips[start]
        moved = op["bytes"] * count * programs / rows
        l2 += moved
        for tensor in op["tensors"]:
            key = (tensor, op["op"])
            per_tensor_l2[key] = per_tensor_l2.get(key, 0.0) + moved
        if op["op"] == "load":
            where = max(op["loops"]) if op["loops"] else None
            iteration_loads[where] = iteration_loads.get(where, 0.0) + op["bytes"]
    resident = max(1, min(ctas_per_sm, math.ceil(programs / SMS)))
    width = d * element
    # the row's tensors a later pass reads again (more than one row's width loaded per row)
    reread = [t for (t, kind), moved in per_tensor_l2.items() if kind == "load" and t in ROW_STREAMED and moved > width]
    working_set = SMS * resident * launch["tile_rows"] * d * element * max(1, len(reread))
    fits = launch["chunk"] is None or working_set <= l2_bytes
    hbm = 0.0
    for tensor in {t for t, _ in per_tensor_l2}:
        stored = per_tensor_l2.get((tensor, "store"), 0.0)
        loaded = per_tensor_l2.get((tensor, "load"), 0.0)
        if tensor in ROW_STREAMED:
            once = min(loaded, width if tensor not in ("MS", "MEAN", "RSTD") else 4)
            hbm += stored if stored else (loaded if not fits else once)
        elif tensor in PARAMETERS:
            hbm += d * element / rows
        elif tensor in PARTIALS:
            hbm += programs * d * 4 / rows  # written back once (kept in L2 between the rows of a program)
    pipelined = bool(analysis["buffers"]) and any(analysis["overlap"].values())
    in_flight = resident * max(iteration_loads.values(), default=0.0) * (max(analysis["buffers"]) if pipelined else 0.5)
    return dict(hbm_bytes_per_row=hbm, l2_bytes_per_row=l2, in_flight_per_sm=in_flight, rows_fit_in_l2=fits,
                l2_working_set_bytes=working_set, resident_per_sm=resident)  # fmt: skip


def compile_launch(module, launch: dict, dtype: str, d: int, rows: int) -> dict:
    """Compiles one launch for sm_90 (in a process whose kernels were never interpreted) and reads it."""
    from normlab.bench import compiled_schedule as cs

    io_dtype, stat_dtype, param_dtype, element = cs.DTYPES[dtype]
    kernel = getattr(module[launch["kernel"].split("_")[0]], launch["kernel"])
    usage, ttgir = cs.compile_kernel(kernel, io_dtype, stat_dtype, launch["constexprs"], launch["warps"], param_dtype,
                                     ttgir=True)  # fmt: skip
    analysis = cs.analyse_ttgir(ttgir)
    l2_bytes = _l2_bytes()
    moved = traffic(analysis, launch, d, rows, element, l2_bytes, usage["ctas_per_sm"])
    return dict(launch, **usage, **moved, async_waits=[n for _, n in analysis["waits"]])


def _l2_bytes() -> float:
    from normlab.norms.backends.triton import tuning

    return tuning.SM90_L2_BYTES


def _compile_cases(folder: str, cases: list[dict]) -> list[dict]:
    sys.path.insert(0, folder)
    import importlib

    module = {
        "rms": importlib.import_module(f"{PACKAGE}.rms_kernels"),
        "layer": importlib.import_module(f"{PACKAGE}.layer_kernels"),
    }
    out = []
    for case in cases:
        try:
            out.append(dict(case, **compile_launch(module, case["launch"], case["dtype"], case["d"], case["rows"])))
        except Exception as error:  # noqa: BLE001 - every failing configuration is reported, not just the first
            out.append(dict(case, error=f"{type(error).__name__}: {error}"[:400]))
    return out


_WORKER = """
import json, sys
from normlab.bench import old_kernels
json.dump(old_kernels._compile_cases(sys.argv[1], json.load(open(sys.argv[2]))), open(sys.argv[3], "w"))
"""


def schedule(cases: list[dict], repo: Path, commit: str = COMMIT) -> dict:
    """Compiles, in a fresh process without TRITON_INTERPRET, the launches of `cases` (dicts with kind, direction
    ('forward' or 'backward'), d, rows, dtype (compiled_schedule's label), chunked, welford) as the commit's launcher
    picked them. Returns {commit, constants, records} or {unavailable: one sentence} where sm_90 cannot be compiled."""
    from normlab.bench import compiled_schedule as cs

    reason = cs.unavailable()
    if reason is not None:
        return dict(commit=commit, records=[], unavailable=reason)
    with tempfile.TemporaryDirectory() as folder:
        constants = sources(Path(folder), repo, commit)
        cases = [
            dict(case, launch=launches(case["kind"], case["direction"], case["d"], case["rows"], case["dtype"],
                                       constants, chunked=case.get("chunked", False),
                                       welford=case.get("welford", True)))
            for case in cases
        ]  # fmt: skip
        arguments, out = Path(folder) / "cases.json", Path(folder) / "records.json"
        arguments.write_text(json.dumps(cases))
        env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
        run = subprocess.run([sys.executable, "-c", _WORKER, folder, str(arguments), str(out)], env=env,
                             capture_output=True, text=True, timeout=1800)  # fmt: skip
        if run.returncode != 0 or not out.exists():
            raise RuntimeError(f"compiling the {commit} kernels failed (exit {run.returncode}):\n{run.stderr[-3000:]}")
        records = json.loads(out.read_text())
    return dict(commit=commit, constants=constants, launch_rules=LAUNCH_RULES, records=records)
