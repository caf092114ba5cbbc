"""The tuning table: generated from the newest committed sweep (or, with none, the register-count guesses it
says it is), the rule that picks each winner, and the refusal of a sweep measured on another target."""

import json

import pytest

from normlab.norms.backends.triton import tuning, tuning_table


def test_the_committed_table_matches_the_newest_committed_sweep():
    sweep = tuning_table.newest_sweep()
    if sweep is None:
        assert not tuning.MEASURED_TABLE.exists(), "a measured table with no sweep committed to generate it from"
        assert tuning.TABLE_SOURCE == tuning.REGISTER_COUNTS and tuning.MEASURED == {}
        return
    committed = json.loads(tuning.MEASURED_TABLE.read_text())
    assert committed == tuning_table.generate(sweep), f"regenerate: python -m {tuning_table.__name__}"
    assert tuning.TABLE_SOURCE.startswith("measured: " + sweep.name)


PROVENANCE = {"type": "provenance", "device": "NVIDIA H200", "triton": "3.6.0", "torch": "2.11.0", "git_commit": "ab"}


def _record(variant, ms, path="onchip", agrees=True, width=4096, direction="forward", config=None):
    return {
        "type": "variant",
        "kind": "rms",
        "direction": direction,
        "dtype": "bf16",
        "element_size": 2,
        "width": width,
        "variant": variant,
        "path": path,
        "elements": width if path == "onchip" else 4096,
        "config": config or {"warps": 8, "stages": 2, "programs_per_sm": 4},
        "median_ms": ms,
        "agrees": agrees,
    }


def _sweep(tmp_path, records, provenance=PROVENANCE, name="triton-sweep-3.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(json.dumps(r) for r in [provenance, *records]) + "\n")
    return path


def test_a_variant_wins_only_by_the_margin_and_only_when_it_agrees(tmp_path):
    fast = {"warps": 8, "stages": 1, "programs_per_sm": 1, "one_tile_per_program": True, "rows": 2}
    records = [
        _record("table", 1.00),
        _record("one-tile-8w", 0.90, config=fast),  # 10% faster: wins
        _record("one-tile-4w", 0.50, agrees=False),  # faster still, but wrong: never wins
        _record("table", 2.00, width=8192),
        _record("stages-1", 1.99, width=8192),  # within the margin: the table keeps its launch
    ]
    entries = tuning_table.generate(_sweep(tmp_path, records))["entries"]
    by_width = {e["width"]: e for e in entries}
    assert by_width[4096]["variant"] == "one-tile-8w" and by_width[4096]["config"] == fast
    assert by_width[8192]["variant"] == "table"


def test_another_path_enters_the_table_only_when_it_beats_the_tables_path(tmp_path):
    records = [
        _record("table", 1.0, path="chunked", width=16384, direction="backward"),
        _record("grouped-4", 0.8, path="chunked", width=16384, direction="backward"),
        _record("onchip-weight-per-tile", 0.99, path="onchip", width=16384, direction="backward"),
    ]
    entries = tuning_table.generate(_sweep(tmp_path, records))["entries"]
    assert [(e["path"], e["variant"]) for e in entries] == [("chunked", "grouped-4")]


@pytest.mark.parametrize(
    "change, named",
    [({"device": "NVIDIA H100 80GB HBM3"}, "NVIDIA H100 80GB HBM3"), ({"triton": "3.5.1"}, "Triton 3.5.1")],
)
def test_a_sweep_from_another_gpu_or_triton_is_refused_naming_both(tmp_path, change, named):
    path = _sweep(tmp_path, [_record("table", 1.0)], provenance=PROVENANCE | change)
    with pytest.raises(tuning_table.SweepRefused) as refused:
        tuning_table.generate(path)
    message = str(refused.value)
    assert (
        named in message and tuning_table.TARGET_DEVICE in message and f"Triton {tuning_table.TARGET_TRITON}" in message
    )


def test_a_dry_run_sweep_is_refused(tmp_path):
    path = _sweep(tmp_path, [_record("table", 1.0)], provenance=PROVENANCE | {"dry_run": True})
    with pytest.raises(tuning_table.SweepRefused, match="a dry run"):
        tuning_table.generate(path)


def test_the_newest_sweep_is_the_highest_number(tmp_path):
    for n in (2, 10, 9):
        _sweep(tmp_path, [], name=f"triton-sweep-{n}.jsonl")
    assert tuning_table.newest_sweep(tmp_path).name == "triton-sweep-10.jsonl"
    assert tuning_table.newest_sweep(tmp_path / "none") is None


def test_measured_entries_replace_the_guesses_and_widen_the_backward(monkeypatch):
    measured = tuning.KernelConfig(16, 1, 1, reload=True)
    monkeypatch.setattr(tuning, "MEASURED", {("rms", "backward", "onchip", 2, 16384): measured})
    for cached in (tuning.onchip_backward, tuning.backward_onchip_limit):
        cached.cache_clear()
    try:
        assert tuning.onchip_backward("rms", 16384, 2) == measured
        assert (
            tuning.backward_onchip_limit("rms", 2, 8192) == 16384
            and tuning.backward_onchip_limit("rms", 4, 8192) == 8192
        )
    finally:
        monkeypatch.undo()
        for cached in (tuning.onchip_backward, tuning.backward_onchip_limit):
            cached.cache_clear()
