"""Device time per call, host time per call, and each as a fraction of a same-size copy: the GPU alone, timed.

    python -m normlab.bench.device [--out device.jsonl] [--budget-s 200] [--dry-run]

The committed H200 files (data/gpu-bench*.json) time CUDA events around back-to-back eager calls. When the Python
that enqueues a call is slower than the kernels it enqueues, the GPU waits and those events measure the host: their
Triton forward never went below about 100 µs. This bench separates the two:

  device time   CUDA events around one replay of a CUDA graph holding `calls` captured calls, each on its own set of
                inputs, divided by `calls`; the L2 cache is flushed before each replay by writing a buffer larger than
                it (max(256 MiB, 4 × L2)). The median over `reps` replays. Where a call cannot be captured, torch.profiler's
                sum of its kernels' durations instead; `device_time_method` says which.
  host time     wall time of `calls` eager calls, no synchronisation inside, divided by `calls`: the time to enqueue.
  wall time     CUDA events around the same back-to-back eager calls: the old files' method, for comparison.
  copy          `out.copy_(x)` of the same x, timed the same way in the same run; `fraction_of_copy` is the norm's
                bandwidth (bytes it must move / device time) over the copy's.

Implementations: normlab's Triton kernels, torch's native F.rms_norm / F.layer_norm, torch.compile of the reference
(normlab's "compile" backend) and Liger-Kernel where it imports (else every Liger case is skipped with the reason).
RMSNorm and LayerNorm, forward and forward+backward, bfloat16 and float32, 8192 rows × d in {4096, 8192, 16384}
first, then the shapes the old files found host-bound (1 × 4096, 8192 × 256, 8192 × 1024, forward).

Output: JSON lines, one record per case, flushed as it is made (a run cut short keeps what it finished): a provenance
line first, then {"type": "case", ...} records, each with device_time_s, host_time_s and fraction_of_copy (None
where it was skipped), and a "finished" line. Cases stop starting once `budget_s` has passed.

--dry-run runs the whole flow on CPU at tiny shapes (Triton in its interpreter: set TRITON_INTERPRET=1 first). There
is no device, so device time is a CPU stand-in, perf_counter around the same calls, and every record says so in
`device_time_method`; its numbers measure nothing about a GPU.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

import torch

from normlab.bench import traffic
from normlab.bench.records import JsonLines

SCHEMA = "normlab.bench.device/1"
IMPLEMENTATIONS = ("triton", "torch", "compile", "liger")
NORMS = ("rms", "layer")
DIRECTIONS = ("forward", "forward+backward")
DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}
ROWS = 8192
WIDTHS = (4096, 8192, 16384)
# forward only: where the old files' times sat on a fixed cost per call
EXTRA_SHAPES = ((1, 4096), (8192, 256), (8192, 1024))
MIN_FLUSH_BYTES = 256 * 2**20
GRAPH = "cuda graph replay, CUDA events, L2 flushed before each replay"
PROFILER = "torch.profiler: sum of the call's kernel durations (the call could not be captured in a CUDA graph)"
CPU_STAND_IN = "cpu stand-in: perf_counter around the calls (dry run, no device; measures nothing about a GPU)"


@dataclass(frozen=True)
class Settings:
    calls: int = 10  # calls per graph replay (and per host-time block)
    reps: int = 15  # replays timed; the median is kept
    warmup: int = 3  # eager calls before capture (compilation, autotuning, allocator)
    host_reps: int = 5  # blocks of `calls` eager calls for host and wall time
    max_input_bytes: int = 8 * 2**30  # input sets rotated within one replay, at most this many bytes in all
    flush_bytes: int | None = None  # None: max(256 MiB, 4 × the device's L2)


DRY_RUN = Settings(calls=3, reps=3, warmup=1, host_reps=2, max_input_bytes=2**20, flush_bytes=2**20)


@dataclass(frozen=True)
class Case:
    implementation: str
    norm: str
    direction: str
    dtype: str
    rows: int
    d: int


def cases(widths=WIDTHS, extra=EXTRA_SHAPES, rows=ROWS, dtypes=tuple(DTYPES), implementations=IMPLEMENTATIONS):
    """In priority order: the training-batch widths first (each d in both dtypes, directions, norms and
    implementations), then the extra forward shapes; a run cut short has its most wanted cases."""
    out = []
    shapes = [(rows, d, DIRECTIONS) for d in widths] + [(r, d, ("forward",)) for r, d in extra]
    for r, d, directions in shapes:
        for dtype in dtypes:
            for direction in directions:
                for norm in NORMS:
                    out += [Case(i, norm, direction, dtype, r, d) for i in implementations]
    return out


# ---------------------------------------------------------------- the calls


def _forward(case: Case) -> Callable:
    import torch.nn.functional as F

    d = case.d
    if case.implementation == "torch":
        if case.norm == "rms":
            return lambda x, w: F.rms_norm(x, (d,), w, 1e-6)
        return lambda x, w, b: F.layer_norm(x, (d,), w, b, 1e-5)
    if case.implementation == "liger":
        from normlab.bench.peers import peer_call

        return peer_call("liger", case.norm, "forward")
    import normlab

    backend = case.implementation  # "triton", or "compile": torch.compile of normlab's reference
    if case.norm == "rms":
        return lambda x, w: normlab.rms_norm(x, w, 1e-6, backend=backend)
    return lambda x, w, b: normlab.layer_norm(x, w, b, 1e-5, backend=backend)


def make_call(case: Case) -> Callable:
    """The timed call; its arguments are one input set (x, weight[, bias][, dy])."""
    forward = _forward(case)
    if case.direction == "forward":
        return forward
    if case.norm == "rms":
        return lambda x, w, dy: torch.autograd.grad(forward(x, w), (x, w), dy)
    return lambda x, w, b, dy: torch.autograd.grad(forward(x, w, b), (x, w, b), dy)


def input_sets(case: Case, device, count: int, seed: int = 0) -> list[tuple]:
    dtype = DTYPES[case.dtype]
    generator = torch.Generator(device=device).manual_seed(seed)
    grad = case.direction == "forward+backward"

    def normal(*shape, scale=1.0, shift=0.0):
        values = torch.randn(*shape, generator=generator, device=device, dtype=torch.float32)
        return (values * scale + shift).to(dtype).requires_grad_(grad)

    sets = []
    for _ in range(count):
        inputs = [normal(case.rows, case.d), normal(case.d, scale=0.1, shift=1.0)]
        if case.norm == "layer":
            inputs.append(normal(case.d, scale=0.1))
        if grad:
            inputs.append(normal(case.rows, case.d).detach())
        sets.append(tuple(inputs))
    return sets


def set_count(bytes_per_set: int, settings: Settings) -> int:
    """Input sets rotated within one replay: one per call where they fit in `max_input_bytes`, at least 2."""
    return max(2, min(settings.calls, settings.max_input_bytes // max(1, bytes_per_set)))


def unavailable(case: Case, device: torch.device, dry_run: bool) -> str | None:
    """Why a case is not timed here, or None."""
    if case.implementation == "liger":
        from normlab.bench.peers import PEERS
        from normlab.bench.peers import unavailable as peer_unavailable

        return peer_unavailable("liger", device) if "liger" in PEERS else "no liger peer in normlab.bench.peers"
    return None


# ---------------------------------------------------------------- the clocks


def flush_size(device: torch.device, settings: Settings) -> int:
    if settings.flush_bytes is not None:
        return settings.flush_bytes
    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) if device.type == "cuda" else 0
    return max(MIN_FLUSH_BYTES, 4 * int(l2 or 0))


def _median(values) -> float:
    return float(statistics.median(values))


def graph_time(call: Callable, sets: list[tuple], settings: Settings, flush: torch.Tensor) -> float:
    """Device seconds per call: CUDA events around replays of a graph of `calls` captured calls, L2 flushed before each."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # capture wants the first calls made off the default stream
        for i in range(settings.warmup):
            call(*sets[i % len(sets)])
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(settings.calls):
            call(*sets[i % len(sets)])
    graph.replay()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(settings.reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(settings.reps)]
    for start, end in zip(starts, ends):
        flush.zero_()  # evicts L2, and gives the host a head start: the replay's launch is off the clock
        start.record()
        graph.replay()
        end.record()
    torch.cuda.synchronize()
    del graph
    return _median(s.elapsed_time(e) / 1e3 / settings.calls for s, e in zip(starts, ends))


def profiler_time(call: Callable, sets: list[tuple], settings: Settings) -> float:
    from normlab.bench.timing import device_time_s

    return device_time_s(call, sets, torch.device("cuda"), calls=settings.calls)


def cpu_stand_in(call: Callable, sets: list[tuple], settings: Settings, flush: torch.Tensor) -> float:
    """The dry run's device time: perf_counter around `calls` calls after a flush. Measures nothing about a GPU."""
    for i in range(settings.warmup):
        call(*sets[i % len(sets)])
    samples = []
    for _ in range(settings.reps):
        flush.zero_()
        started = time.perf_counter()
        for i in range(settings.calls):
            call(*sets[i % len(sets)])
        samples.append((time.perf_counter() - started) / settings.calls)
    return _median(samples)


def host_and_wall(call: Callable, sets: list[tuple], settings: Settings, cuda: bool) -> tuple[float, float | None]:
    """(host s per call: enqueueing `calls` calls, no synchronisation inside; wall s per call: CUDA events around the
    same block, the old files' method; None on CPU)."""
    hosts, walls = [], []
    for _ in range(settings.host_reps):
        if cuda:
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        started = time.perf_counter()
        for i in range(settings.calls):
            call(*sets[i % len(sets)])
        hosts.append((time.perf_counter() - started) / settings.calls)
        if cuda:
            end.record()
            end.synchronize()
            walls.append(start.elapsed_time(end) / 1e3 / settings.calls)
    return _median(hosts), (_median(walls) if walls else None)


def device_time(call, sets, settings, flush, device) -> tuple[float, str, str | None]:
    """(seconds per call, method, why the graph was not used or None)."""
    if device.type != "cuda":
        return cpu_stand_in(call, sets, settings, flush), CPU_STAND_IN, None
    try:
        return graph_time(call, sets, settings, flush), GRAPH, None
    except Exception as error:  # a call that syncs or allocates on the host cannot be captured: the profiler's sum
        torch.cuda.synchronize()
        why = f"{type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}"
        return profiler_time(call, sets, settings), PROFILER, why


# ---------------------------------------------------------------- one case, and the run


def must_move(case: Case) -> int:
    return traffic.must_move(case.norm, case.direction, case.rows, case.d, DTYPES[case.dtype]).total


def copy_bytes(case: Case) -> int:
    return traffic.copy_bytes(case.rows, case.d, DTYPES[case.dtype])


def time_copy(case: Case, device, settings: Settings, flush: torch.Tensor) -> dict:
    """The same-size copy (out.copy_(x)), timed as the norms are."""
    dtype = DTYPES[case.dtype]
    size = case.rows * case.d * torch.empty((), dtype=dtype).element_size()
    count = set_count(2 * size, settings)
    sets = [(torch.randn(case.rows, case.d, device=device).to(dtype), torch.empty(case.rows, case.d, device=device, dtype=dtype)) for _ in range(count)]  # fmt: skip
    call = lambda x, out: out.copy_(x)  # noqa: E731
    seconds, method, why = device_time(call, sets, settings, flush, device)
    host, wall = host_and_wall(call, sets, settings, device.type == "cuda")
    return {"copy_device_time_s": seconds, "copy_host_time_s": host, "copy_wall_time_s": wall,
            "copy_method": method, "copy_bytes": copy_bytes(case)}  # fmt: skip


EMPTY = {"device_time_s": None, "host_time_s": None, "wall_time_s": None, "fraction_of_copy": None}


def measure(case: Case, device, settings: Settings, flush: torch.Tensor, copy: dict) -> dict:
    call = make_call(case)
    probe = input_sets(case, device, 1)
    per_set = sum(t.numel() * t.element_size() for t in probe[0])
    sets = probe + input_sets(case, device, set_count(per_set, settings) - 1, seed=1)
    seconds, method, why = device_time(call, sets, settings, flush, device)
    host, wall = host_and_wall(call, sets, settings, device.type == "cuda")
    moved = must_move(case)
    bandwidth = moved / seconds
    copy_bandwidth = copy["copy_bytes"] / copy["copy_device_time_s"]
    return {
        "status": "ok",
        "reason": None,
        "device_time_s": seconds,
        "device_time_method": method,
        "graph_refused": why,
        "host_time_s": host,
        "wall_time_s": wall,
        "host_bound": None if wall is None else host > seconds,  # the host takes longer to enqueue than the GPU to run
        "bytes": moved,
        "bandwidth_gbs": bandwidth / 1e9,
        "fraction_of_copy": bandwidth / copy_bandwidth,
        "input_sets": len(sets),
        **copy,
    }


def line(record: dict) -> str:
    """One printed line per case: device time and its fraction of the copy, host time on its own, wall time."""
    name = f"{record['implementation']:8s} {record['norm']:5s} {record['direction']:16s} {record['dtype']:8s} "
    name += f"{record['rows']}x{record['d']}"
    if record["status"] != "ok":
        return f"{name:56s} {record['status']}: {record['reason']}"
    us = lambda s: "—" if s is None else f"{s * 1e6:8.1f} µs"  # noqa: E731
    clock = "cpu stand-in" if record["device_time_method"] == CPU_STAND_IN else "device"
    return (
        f"{name:56s} {clock} {us(record['device_time_s'])} = {record['fraction_of_copy']:5.2f} of copy"
        f" | host {us(record['host_time_s'])} | wall {us(record['wall_time_s'])}"
    )


def run(out: str | Path, *, dry_run: bool = False, budget_s: float = 200.0, settings: Settings | None = None,
        case_list: list[Case] | None = None, echo: Callable[[str], None] = print) -> dict:  # fmt: skip
    """Time every case into `out` (JSON lines, flushed per record); returns counts."""
    from normlab.bench.speed_model import kernel_fingerprint  # the code timed, for the registered predictions
    from normlab.runtime.environment import git_commit, versions

    if not dry_run and not torch.cuda.is_available():
        raise RuntimeError("needs a CUDA GPU (or --dry-run on CPU)")
    device = torch.device("cpu" if dry_run else "cuda")
    settings = settings or (DRY_RUN if dry_run else Settings())
    if case_list is None:
        case_list = dry_run_cases() if dry_run else cases()
    flush_bytes = flush_size(device, settings)
    flush = torch.empty(flush_bytes, dtype=torch.uint8, device=device)
    clock = time.perf_counter()
    counts = {"ok": 0, "skipped": 0, "error": 0, "not started": 0}
    with JsonLines(out) as stream:
        l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", None) if device.type == "cuda" else None
        stream.write({
            "type": "provenance", "schema": SCHEMA, "dry_run": dry_run, "device": str(device),
            "device_name": torch.cuda.get_device_name() if device.type == "cuda" else "cpu (dry run: measures nothing)",
            "l2_cache_bytes": l2, "flush_bytes": flush_bytes, "settings": asdict(settings), "versions": versions(),
            "git_commit": git_commit(), "kernel_fingerprint": kernel_fingerprint(), "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "cases": len(case_list),
            "device_time_methods": {"graph": GRAPH, "profiler": PROFILER, "cpu": CPU_STAND_IN},
        })  # fmt: skip
        copies: dict[tuple, dict] = {}
        for case in case_list:
            record = {"type": "case", **asdict(case), **EMPTY}
            if time.perf_counter() - clock > budget_s:
                counts["not started"] += 1
                continue
            reason = unavailable(case, device, dry_run) or dry_run_skip(case, dry_run)
            try:
                if reason is not None:
                    record.update(status="skipped", reason=reason)
                else:
                    key = (case.dtype, case.rows, case.d)
                    if key not in copies:
                        copies[key] = time_copy(case, device, settings, flush)
                    record.update(measure(case, device, settings, flush, copies[key]))
            except Exception as error:  # one case that fails is recorded, and the run goes on
                record.update(status="error", reason=f"{type(error).__name__}: {str(error).splitlines()[0][:300]}")
            counts[record["status"]] += 1
            stream.write(record)
            echo(line(record))
            if device.type == "cuda":
                torch.cuda.empty_cache()
        stream.write({"type": "finished", "wall_s": time.perf_counter() - clock, **counts})
    return counts


# ---------------------------------------------------------------- the dry run

DRY_WIDTHS = (64,)
DRY_EXTRA = ((1, 64),)
DRY_ROWS = 16
DRY_COMPILE = Case("compile", "rms", "forward", "float32", DRY_ROWS, DRY_WIDTHS[0])
DRY_COMPILE_SKIP = (
    "dry run: torch.compile builds each signature in about 10 s on a 2-core CPU, so only "
    f"{DRY_COMPILE.norm} {DRY_COMPILE.direction} {DRY_COMPILE.dtype} {DRY_COMPILE.rows}x{DRY_COMPILE.d} is compiled"
)


def dry_run_cases() -> list[Case]:
    return cases(widths=DRY_WIDTHS, extra=DRY_EXTRA, rows=DRY_ROWS)


def dry_run_skip(case: Case, dry_run: bool) -> str | None:
    if dry_run and case.implementation == "compile" and case != DRY_COMPILE:
        return DRY_COMPILE_SKIP
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="build/gpu-device/device.jsonl")
    parser.add_argument("--budget-s", type=float, default=200.0, help="start no case after this many seconds")
    parser.add_argument("--dry-run", action="store_true", help="the whole flow on CPU at tiny shapes; measures nothing")
    args = parser.parse_args(argv)
    if args.dry_run:
        from normlab.norms.backends.triton import launch

        if not launch.INTERPRETED:
            print("--dry-run runs Triton in its interpreter: set TRITON_INTERPRET=1 first", file=sys.stderr)
            return 2
    elif not torch.cuda.is_available():
        print("normlab.bench.device: no CUDA device here; use --dry-run to check the flow on CPU", file=sys.stderr)
        return 2
    counts = run(args.out, dry_run=args.dry_run, budget_s=args.budget_s)
    print(f"{counts} -> {args.out}")
    return 0 if counts["error"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
