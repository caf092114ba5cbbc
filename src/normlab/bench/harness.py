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
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

import torch

from normlab.functional import UnsupportedFeature

from . import passes, traffic
from .cases import TRACEABLE_BACKENDS, Case, build_cases, copy_case, prepare, skip_reason
from .profiles import DTYPES, Profile, get_profile
from .timing import Timing, buffer_count, time_call

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
    }


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


def run(profile_name: str = "smoke", *, backends=None, dtypes=None, device: str | None = None, progress: bool = True,
        census: bool = True, seed: int = 0) -> dict:
    """Time every case of a profile; returns the results document (records plus environment)."""
    from normlab.study.environment import git_commit, hardware, versions

    profile, backends = get_profile(profile_name, backends=backends, dtypes=dtypes)
    device = torch.device(device or profile.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"profile {profile.name!r} needs CUDA, and there is no GPU here; use --profile cpu or smoke")
    cases = build_cases(profile, backends)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    clock = time.perf_counter()
    records: list[dict] = []
    copies: dict[tuple, Timing] = {}
    census_done: set[tuple] = set()

    from tqdm.auto import tqdm

    bar = tqdm(cases, desc=f"bench[{profile.name}]", unit="case", disable=not progress)
    for case in bar:
        bar.set_postfix_str(f"{case.study} {case.norm} {case.implementation} {case.dtype} {case.rows}x{case.d}", refresh=False)
        reason = skip_reason(case, profile, device)
        if reason is not None:
            records.append(_record(case, status="skipped", reason=reason))
            continue
        reference = copy_case(case)
        copy_key = (reference.dtype, reference.rows, reference.d, reference.mode)
        try:
            if copy_key not in copies:
                prepared_copy = prepare(reference, device, 2, seed)
                buffers = buffer_count(prepared_copy.bytes_per_set, profile.timing)
                prepared_copy = prepare(reference, device, buffers, seed)
                copies[copy_key] = time_call(prepared_copy.call, prepared_copy.input_sets, profile.timing, device)
                del prepared_copy
                # the copy appears as its own row, compared with itself: its fraction is 1 by construction
                records.append(_record(reference, **_metrics(reference, copies[copy_key], copies[copy_key])))
            prepared = prepare(case, device, 1, seed)
            buffers = buffer_count(prepared.bytes_per_set, profile.timing)
            prepared = prepare(case, device, buffers, seed)
            timing = time_call(prepared.call, prepared.input_sets, profile.timing, device)
            record = _record(case, **_metrics(case, timing, copies[copy_key]))
            census_key = (case.norm, case.implementation, case.direction, case.dtype)
            if census and case.study in ("sweep", "backward", "partial") and census_key not in census_done and case.mode == "alloc":
                census_done.add(census_key)
                record.update(_census(case, prepared, device))
            records.append(record)
            del prepared
        except UnsupportedFeature as error:  # the backend lacks the feature (e.g. partial RMS): by design, not a failure
            records.append(_record(case, status="skipped", reason=str(error).split(";")[0]))
        except Exception as error:  # a backend that fails here is reported, never silently dropped
            records.append(_record(case, status="error", reason=f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"))
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
        "records": _finite(records),
    }


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
