"""The bench writes each case's record as it is measured, so a run killed mid-way keeps what it finished."""

import pytest

from normlab.bench import harness
from normlab.bench.records import JsonLines, read_json_lines
from normlab.bench.timing import Timing


def _fake_timing(case, *args, **kwargs):
    timing = Timing(
        median_s=1e-3, q25_s=0.9e-3, q75_s=1.1e-3, min_s=0.8e-3, max_s=1.2e-3, repeats=5, number=1, buffers=2
    )
    return timing, {"remeasured": False, "unstable": False, "unstable_reason": None}


def test_the_streamed_records_are_the_documents_records(tmp_path, monkeypatch):
    monkeypatch.setattr(harness, "measure_believably", _fake_timing)
    stream = tmp_path / "bench.jsonl"
    document = harness.run("smoke", backends=["torch"], dtypes=["float32"], progress=False, census=False,
                           records_path=stream)  # fmt: skip
    lines = read_json_lines(stream)
    assert lines[0]["type"] == "provenance" and lines[0]["cases"] > 0 and lines[-1]["type"] == "finished"
    streamed = [(r["study"], r["implementation"], r["rows"], r["d"]) for r in lines[1:-1]]
    assert streamed == [(r["study"], r["implementation"], r["rows"], r["d"]) for r in document["records"]]


def test_a_run_killed_mid_way_keeps_the_cases_it_finished(tmp_path, monkeypatch):
    calls = []

    def dies_on_the_fifth(case, *args, **kwargs):
        calls.append(case)
        if len(calls) == 5:
            raise KeyboardInterrupt  # what a step's time limit does to the process, as near as a test gets
        return _fake_timing(case)

    monkeypatch.setattr(harness, "measure_believably", dies_on_the_fifth)
    stream = tmp_path / "bench.jsonl"
    with pytest.raises(KeyboardInterrupt):
        harness.run("smoke", backends=["torch"], dtypes=["float32"], progress=False, census=False, records_path=stream)
    kept = [r for r in read_json_lines(stream) if r.get("status") == "ok"]
    assert len(kept) == 4 and all(r["median_s"] == 1e-3 for r in kept)


def test_a_line_cut_off_by_a_kill_is_dropped_on_reading(tmp_path):
    path = tmp_path / "r.jsonl"
    with JsonLines(path) as records:
        records.write({"a": 1, "b": float("nan")})
    path.write_text(path.read_text() + '{"a": 2, "b"')
    assert read_json_lines(path) == [{"a": 1, "b": None}]
