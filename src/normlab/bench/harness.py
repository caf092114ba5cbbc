"""Run a profile's cases, compare each with a same-size copy timed in the same run, and report.

Every record carries the time (median, quartiles, extremes), the bytes the
norm must move, the bandwidth that implies, and that bandwidth as a fraction
of the copy's (clone for an allocating call, copy_ for a call into a
pre-allocated output). A skipped case carries its reason instead.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, replace
from datetime import datetime, timezone
from pathlib import Path

import torch

from normlab.bench import passes, traffic
from normlab.bench.cases import TRACEABLE_BACKENDS, Case, build_cases, copy_case, prepare, skip_reason
from normlab.bench.profiles import DTYPES, get_profile
from normlab.bench.records import JsonLines
from normlab.bench.timing import (
    DEVICE_TIME_NOTE_CPU,
    Timing,
    agree,
    buffer_count,
    device_time_s,
    repeats_disagree,
    time_call,
    timing_relative_sd,
)
from normlab.norms.functional import UnsupportedFeature

SCHEMA = "normlab.bench/1"


def _record(case: Case, **fields) -> dict:
    record = asdict(case)
    record["options"] = dict(case.options)
    record.update(fields)
    return record


def _metrics(case: Case, timing: Timing, copy_timing: Timing) -> dict:
    dtype = DTYPES[case.dtype]
    if case.norm == "copy":
        moved = traffic.copy_bytes(case.rows, case.d, dtype)
    else:
        moved = traffic.must_move(case.norm, case.direction, case.rows, case.d, dtype).total
    copy_moved = traffic.copy_bytes(case.rows, case.d, dtype)
    achieved = traffic.bandwidth(moved, timing.median_s)
    copy_bandwidth = traffic.bandwidth(copy_moved, copy_timing.median_s)
    return {
        "status": "ok",
        "reason": None,
        **timing.as_dict(),
        "bytes": moved,
        "bandwidth_gbs": achieved,
        "copy_median_s": copy_timing.median_s,
        "copy_bandwidth_gbs": copy_bandwidth,
        "fraction_of_copy": achieved / copy_bandwidth,
        "effective_passes": traffic.effective_passes(timing.median_s, copy_timing.median_s),
        "minimum_passes": traffic.minimum_passes(case.direction),
        "relative_sd": timing_relative_sd(timing),
        "copy_relative_sd": timing_relative_sd(copy_timing),
    }


SLOWEST_PLAUSIBLE_PASSES = 100
FIXED_COST_S = 2e-3
MIN_PLAUSIBLE_GBS = 0.5  # no copy is slower than this on any machine this study targets
MODEST_GBS = 5.0  # a modest DRAM copy bandwidth (this VM's clone reaches ~9 GB/s when quiet)


def implausible(case: Case, timing: Timing, copy_timing: Timing) -> str | None:
    """Why a timing cannot be believed on its face, or None.

    Repeats that disagree (a stall during some of them), or a time shorter than
    half the copy-limited minimum for the bytes the call must move (only possible
    from caches, so not for training-size cases), or one far slower than any
    implementation's pass count allows.
    """
    if repeats_disagree(timing):
        return f"repeats disagree (sd {timing_relative_sd(timing):.0%} of the median)"
    # No memory here is slower than MIN_PLAUSIBLE_GBS: a copy that takes longer than that, plus a fixed cost, waited
    # on something else (a descheduled thread of its own op, on a machine shared with other jobs).
    slowest_copy = traffic.copy_bytes(case.rows, case.d, DTYPES[case.dtype]) / (MIN_PLAUSIBLE_GBS * 1e9)
    if case.norm == "copy":
        if timing.median_s > slowest_copy + FIXED_COST_S:
            return f"implausibly slow for a copy ({timing.median_s * 1e3:.3g} ms for {case.rows}x{case.d})"
        return None
    passes_made = traffic.effective_passes(timing.median_s, copy_timing.median_s)
    if case.study != "small-batch" and passes_made < 0.5 * traffic.minimum_passes(case.direction):
        return f"faster than half the copy limit ({passes_made:.2f} effective passes)"
    # The slowest composite (bf16, emulated on CPU) makes a few dozen passes; beyond that, plus a fixed cost for
    # Python dispatch, a "steady" time is a scheduler artefact (threads of one op waiting out another process's
    # time slice on a busy machine), not the code's cost.
    # a stalled copy must not excuse a stalled norm: hold the norm to a copy at a modest DRAM bandwidth at worst
    copy_limit = min(
        copy_timing.median_s, traffic.copy_bytes(case.rows, case.d, DTYPES[case.dtype]) / (MODEST_GBS * 1e9)
    )
    slowest = SLOWEST_PLAUSIBLE_PASSES * copy_limit * traffic.minimum_passes(case.direction) / 2 + FIXED_COST_S
    if timing.median_s > slowest:
        return f"implausibly slow against the copy ({passes_made:.0f} effective passes)"
    return None


def _timed(case: Case, device: torch.device, settings, seed: int) -> Timing:
    prepared = prepare(case, device, 1, seed)
    buffers = buffer_count(prepared.bytes_per_set, settings)
    prepared = prepare(case, device, buffers, seed)
    return time_call(prepared.call, prepared.input_sets, settings, device)


def _device_time(case: Case, device: torch.device, seed: int) -> dict:
    """The case's GPU kernel time per call beside its wall time (CUDA only; None on CPU, with the document's note)."""
    if device.type != "cuda":
        return {"device_time_s": None}
    prepared = prepare(case, device, 2, seed)  # two input sets: a handful of profiled calls, not a bandwidth figure
    return {"device_time_s": device_time_s(prepared.call, prepared.input_sets, device)}


def measure_believably(
    case: Case, device: torch.device, settings, seed: int, copy_timing: Timing | None, timer=None
) -> tuple[Timing, dict]:
    """Time a case; a timing that cannot be believed is measured once more, and marked unstable if it stays so.

    Returns the timing kept (the steadier of the two) and the flags to record.
    `timer(case) -> Timing` replaces the real measurement in tests.
    """
    timer = timer or (lambda c: _timed(c, device, settings, seed))
    first = timer(case)
    reason = implausible(case, first, copy_timing or first)
    if reason is None:
        return first, {"remeasured": False, "unstable": False, "unstable_reason": None}
    second = timer(case)
    again = implausible(case, second, copy_timing or second)
    kept = second if timing_relative_sd(second) <= timing_relative_sd(first) else first
    if again is None:
        return second, {"remeasured": True, "unstable": False, "unstable_reason": None, "first_reason": reason}
    return kept, {"remeasured": True, "unstable": True, "unstable_reason": again, "first_reason": reason}


def _census(case: Case, prepared, device: torch.device) -> dict:
    """Passes over memory of this implementation, by op trace and by profiler, on its first input set."""
    dtype = DTYPES[case.dtype]
    full = case.rows * case.d
    unit = full * torch.empty((), dtype=dtype).element_size()
    inputs = prepared.input_sets[0]
    run = lambda: prepared.call(*inputs)  # noqa: E731
    census = {"traced_passes": None, "traced_ops": None, "profiler_ops": None, "ops_agree": None}
    profiled = passes.profiler_ops(run, full, device.type)
    census["profiler_ops"] = profiled.names
    if case.backend in TRACEABLE_BACKENDS:
        traced = passes.trace_traffic(run, full, unit)
        census["traced_passes"] = traced.passes
        census["traced_ops"] = traced.op_names
        census["traced_reductions"] = passes.count_reductions(traced.op_names)
        if device.type == "cpu":
            census["ops_agree"] = len(traced.op_names) == profiled.count
    return census


def run(
    profile_name: str = "smoke",
    *,
    backends=None,
    dtypes=None,
    device: str | None = None,
    progress: bool = True,
    census: bool = True,
    seed: int = 0,
    records_path: str | Path | None = None,
) -> dict:
    """Time every case of a profile; returns the results document (records plus environment).

    With `records_path`, each case's record is also written there the moment it is measured (JSON lines,
    flushed; normlab.bench.records): a run killed mid-way keeps every case it finished."""
    from normlab.runtime.code_identity import FINGERPRINT_KEY, loaded_source
    from normlab.runtime.environment import git_commit, hardware, versions

    profile, backends = get_profile(profile_name, backends=backends, dtypes=dtypes)
    device = torch.device(device or profile.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"profile {profile.name!r} needs CUDA, and there is no GPU here; use --profile cpu or smoke")
    cases = build_cases(profile, backends)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    clock = time.perf_counter()
    stream = None if records_path is None else JsonLines(records_path)
    if stream is not None:
        stream.write({"type": "provenance", "schema": SCHEMA, "profile": profile.name, "device": str(device),
                      "hardware": hardware(), "versions": versions(), "git_commit": git_commit(),
                      "started": started, "cases": len(cases)})  # fmt: skip
    records = _Kept(stream)
    copies: dict[tuple, Timing] = {}
    census_done: set[tuple] = set()

    from normlab.runtime.progress import terminal_progress

    bar = terminal_progress(cases, desc=f"bench[{profile.name}]", unit="case", disable=not progress)
    for case in bar:
        if hasattr(bar, "set_postfix_str"):
            bar.set_postfix_str(
                f"{case.study} {case.norm} {case.implementation} {case.dtype} {case.rows}x{case.d}", refresh=False
            )
        reason = skip_reason(case, profile, device)
        if reason is not None:
            records.append(_record(case, status="skipped", reason=reason))
            continue
        reference = copy_case(case)
        copy_key = (reference.dtype, reference.rows, reference.d, reference.mode)
        try:
            if copy_key not in copies:
                copies[copy_key], flags = measure_believably(reference, device, profile.timing, seed, None)
                # the copy appears as its own row, compared with itself: its fraction is 1 by construction
                records.append(_record(reference, **_metrics(reference, copies[copy_key], copies[copy_key]), **flags))
            timing, flags = measure_believably(case, device, profile.timing, seed, copies[copy_key])
            record = _record(case, **_metrics(case, timing, copies[copy_key]), **flags)
            record.update(_device_time(case, device, seed))
            census_key = (case.norm, case.implementation, case.direction, case.dtype)
            if (
                census
                and case.study in ("sweep", "backward", "partial")
                and census_key not in census_done
                and case.mode == "alloc"
            ):
                census_done.add(census_key)
                prepared = prepare(case, device, 1, seed)
                record.update(_census(case, prepared, device))
                del prepared
            records.append(record)
        except (
            UnsupportedFeature
        ) as error:  # the backend lacks the feature (e.g. partial RMS): by design, not a failure
            records.append(_record(case, status="skipped", reason=str(error).split(";")[0]))
        except Exception as error:  # a backend that fails here is reported, never silently dropped
            records.append(
                _record(case, status="error", reason=f"{type(error).__name__}: {str(error).splitlines()[0][:300]}")
            )
    # The backward study's copy, timed a second time at the end of the run: two same-size copies, one code
    # path, seconds apart; they must agree within their spread (a harness check, shown in the chapter).
    for key in sorted({k for k in copies if k[3] == "alloc"}):
        if not any(r["study"] == "backward" and (r["dtype"], r["rows"], r["d"]) == key[:3] for r in records):
            continue
        again = replace(
            copy_case(Case("backward", "copy", "", None, "forward", key[0], key[1], key[2], key[3])),
            implementation="copy (clone) again",
        )
        timing, flags = measure_believably(again, device, profile.timing, seed, None)
        records.append(_record(again, **_metrics(again, timing, copies[key]), **flags))
    check_same_paths(records, device, lambda case: measure_believably(case, device, profile.timing, seed, None))
    if stream is not None:
        stream.write({"type": "finished", "wall_s": time.perf_counter() - clock})
        stream.close()
    return {
        "schema": SCHEMA,
        "profile": profile.name,
        "device": str(device),
        "hardware": hardware(),
        "versions": versions(),
        "git_commit": git_commit(),
        "started": started,
        "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "wall_s": time.perf_counter() - clock,
        "timing_settings": asdict(profile.timing),
        # the code these times describe, so a later tree can tell whether they still describe it
        FINGERPRINT_KEY: loaded_source(),
        "device_time_note": None if device.type == "cuda" else DEVICE_TIME_NOTE_CPU,
        "records": _finite(list(records)),
    }


def dispatched_backend(
    norm: str, direction: str, dtype: str, rows: int, d: int, device: torch.device, options: dict | None = None
) -> str | None:
    """Which backend `backend="auto"` runs for this case (None: cannot tell)."""
    from normlab.norms import functional
    from normlab.norms.backends import cpp as cpu

    # an expanded scalar has the case's shape, dtype and device without allocating it
    x = torch.empty((1, 1), dtype=DTYPES[dtype], device=device).expand(rows, d)
    try:
        if norm == "layer":
            return functional._auto_layer_backend(x)
        requested = {"weight"} | ({"partial"} if options and options.get("partial", 1.0) < 1.0 else set())
        return functional._auto_rms_backend(x, requested, cpu.supports(x, None, None, x.dtype) is None)
    except (AttributeError, TypeError):  # dispatch rules renamed: the check is skipped, not guessed
        return None


def same_path_pairs(records: list[dict], device: torch.device) -> list[tuple[int, int]]:
    """Index pairs of measured records that run one code path: auto and the backend it dispatches to,
    and the backward study's copy and its second timing."""

    def key(r):
        return (r["study"], r["norm"], r["direction"], r["dtype"], r["rows"], r["d"], r["mode"])

    index = {(key(r), r["implementation"]): i for i, r in enumerate(records) if r.get("status") == "ok"}
    pairs = []
    for (k, implementation), i in index.items():
        r = records[i]
        if implementation == "auto":
            target = dispatched_backend(
                r["norm"], r["direction"], r["dtype"], r["rows"], r["d"], device, r.get("options")
            )
            if target is not None and (k, target) in index:
                pairs.append((i, index[(k, target)]))
        elif implementation == "copy (clone) again":
            # the first copy of this size was timed in whichever study met the size first
            first = [j for (other, name), j in index.items() if name == "copy (clone)" and other[3:] == k[3:]]
            if first:
                pairs.append((i, first[0]))
    return pairs


def check_same_paths(records: list[dict], device: torch.device, remeasure) -> None:
    """Identical code paths measured in one run must agree within their spread.

    A pair that disagrees is measured again (both members); a pair that still
    disagrees is marked unstable on both sides, so no summary averages it in.
    `remeasure(case) -> (Timing, flags)`.
    """
    for i, j in same_path_pairs(records, device):
        a, b = records[i], records[j]
        a["same_path_as"] = b["implementation"]
        if agree(a["median_s"], a["relative_sd"], b["median_s"], b["relative_sd"]):
            # a wide spread can cover any gap: agreement counts only between two believable timings
            a["same_path_agrees"] = not (a.get("unstable") or b.get("unstable"))
            continue
        for r in (a, b):
            case = Case(
                **{
                    f: r[f]
                    for f in ("study", "norm", "implementation", "backend", "direction", "dtype", "rows", "d", "mode")
                },
                options=tuple(sorted((r.get("options") or {}).items())),
            )
            timing, _ = remeasure(case)
            scale = timing.median_s / r["median_s"]
            r.update(timing.as_dict(), relative_sd=timing_relative_sd(timing), remeasured=True)
            if repeats_disagree(timing):  # the new timing must be believable on its own too
                r["unstable"], r["unstable_reason"] = (
                    True,
                    f"repeats disagree when re-measured (sd {timing_relative_sd(timing):.0%})",
                )
            if r["implementation"] != "copy (clone)":  # the reference copy stays its own yardstick (fraction 1)
                for field in ("bandwidth_gbs", "fraction_of_copy"):
                    r[field] = r[field] / scale
                r["effective_passes"] = r["effective_passes"] * scale
            else:
                r["bandwidth_gbs"], r["copy_median_s"] = r["bandwidth_gbs"] / scale, timing.median_s
                r["copy_bandwidth_gbs"] = r["bandwidth_gbs"]
        agreed = agree(a["median_s"], a["relative_sd"], b["median_s"], b["relative_sd"])
        a["same_path_agrees"] = agreed and not (a.get("unstable") or b.get("unstable"))
        if not agreed:
            why = (
                f"disagrees with the same code path ({a['implementation']} vs {b['implementation']}) after re-measuring"
            )
            for r in (a, b):
                r["unstable"], r["unstable_reason"] = True, why


class _Kept(list):
    """The run's records, each also written to the JSON-lines stream (when there is one) as it is appended."""

    def __init__(self, stream: JsonLines | None):
        super().__init__()
        self.stream = stream

    def append(self, record: dict) -> None:
        super().append(record)
        if self.stream is not None:
            self.stream.write(record)


def _finite(records: list[dict]) -> list[dict]:
    for record in records:
        for key, value in record.items():
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"non-finite {key}={value} in {record['implementation']} {record['study']}")
    return records


def save(document: dict, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=1, allow_nan=False))
    return path


def load(path: str | Path) -> dict:
    document = json.loads(Path(path).read_text())
    if document.get("schema") != SCHEMA or "records" not in document:
        raise ValueError(f"{path} is not a normlab.bench results file (schema {SCHEMA!r})")
    return document
