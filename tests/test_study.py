"""The study plumbing: results contract, ledger, papermill runner."""

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch

from normlab.analysis import __main__ as command
from normlab.study import Results, decide, ledger, paths, run
from normlab.study.claims import parse_claims
from normlab.study.findings import Finding
from normlab.study.key_numbers import DIMENSIONLESS
from normlab.study.pages.ledger_page import render_ledger
from normlab.study.present import table
from normlab.study.results import LedgerError, check_consistent, load_results, verdicts

A1_KEY = {"meaning": "max abs difference, the formula vs F.layer_norm (float64)", "unit": DIMENSIONLESS}


def test_claims_file_lists_every_id_once():
    ids = [c.id for c in parse_claims()]
    assert ids[:30] == [f"A{i}" for i in range(1, 12)] + [f"B{i}" for i in range(1, 20)]
    for prefix in "ABQV":  # each series numbered 1, 2, ... without gaps, in file order
        series = [i for i in ids if i[0] == prefix]
        assert series == [f"{prefix}{n}" for n in range(1, len(series) + 1)]
    assert len(set(ids)) == len(ids)


def test_decide_maps_outcomes_to_verdicts():
    assert decide(True) == "holds"
    assert decide(True, caveat=True) == "holds with caveats"
    assert decide(False) == "does not hold"
    assert decide(False, caveat=True) == "does not hold"


def test_results_reject_unknown_verdict_and_duplicates(tmp_path):
    results = Results("demo", "smoke", tmp_path)
    with pytest.raises(ValueError, match="verdict must be one of"):
        results.record("A1", Finding("mostly true", "x", {}, **A1_KEY))
    results.record("A1", Finding("holds", "error 1e-16", {"err": torch.tensor(1e-16)}, **A1_KEY))
    with pytest.raises(ValueError, match="already recorded"):
        results.record("A1", Finding("holds", "again", {}, **A1_KEY))


@pytest.mark.parametrize(
    "stated, refusal",
    [
        ({"unit": DIMENSIONLESS}, r"claim A1: no sentence says what its key number measures.*KeyNumber"),
        ({"meaning": "max abs difference"}, r"claim A1: its key number has no unit \(unit=None\).*DIMENSIONLESS"),
        ({"meaning": "max abs difference", "unit": ""}, r"claim A1: its key number has no unit \(unit=''\)"),
        ({**A1_KEY, "headline": " "}, r"claim A1: its headline must be a sentence or None"),
    ],
)
def test_results_refuse_a_verdict_whose_key_number_has_no_meaning_or_unit(tmp_path, stated, refusal):
    results = Results("demo", "smoke", tmp_path)
    with pytest.raises(ValueError, match=refusal):
        results.record("A1", Finding("holds", "error 1e-16", {}, key_number=1e-16, **stated))
    with pytest.raises(ValueError, match=r"claim A1 in demo: the summary must be a sentence.*Finding"):
        results.record("A1", Finding("holds", "  ", {}, **A1_KEY))
    assert results.claims == []  # nothing refused was recorded
    recorded = results.record("A1", Finding("holds", "error 1e-16", {}, key_number=1e-16, **A1_KEY))
    assert (recorded["meaning"], recorded["unit"], recorded["headline"]) == (A1_KEY["meaning"], "1", None)


def test_results_file_follows_the_contract(tmp_path):
    results = Results("demo", "smoke", tmp_path)
    results.record(
        "B12",
        Finding("does not hold", "off by a factor d", {"errors": torch.tensor([1.0, math.inf]), "n": 3}, **A1_KEY),
    )
    data = json.loads(results.save().read_text())
    for key in ("profile", "hardware", "versions", "git_commit", "started", "finished", "claims"):
        assert key in data
    assert data["hardware"]["cpu_cores"] >= 1
    assert data["versions"]["torch"] == torch.__version__
    assert data["claims"][0]["evidence"] == {"errors": [1.0, "inf"], "n": 3}


def _run(notebook_id, verdict, claim="A1", **extra):
    run = {
        "notebook": notebook_id,
        "profile": "smoke",
        "hardware": {"cpu": "test cpu", "cpu_cores": 2, "gpu": None},
        "versions": {"python": "3.11", "torch": "x", "triton": None},
        "git_commit": "abc",
        "started": "t0",
        "finished": "t1",
        "claims": [
            {"id": claim, "verdict": verdict, "summary": f"from {notebook_id}", "evidence": {}, "section": "sec"}
        ],
    }
    if verdict is not None:  # a verdict states its key number's meaning and unit; evidence alone does not
        run["claims"][0].update(A1_KEY)
    run["claims"][0].update(extra)
    return run


def _write_runs(folder, runs):
    folder.mkdir(parents=True, exist_ok=True)
    for r in runs:
        (folder / f"{r['notebook']}.json").write_text(json.dumps(r))


def test_ledger_shows_every_claim_once_with_pending_counts_and_parts():
    claims = parse_claims()
    page = render_ledger(claims, [_run("jacobians", None), _run("geometry", "holds")])
    main_table = page.split("## Parts measured")[0]
    rows = [line for line in main_table.splitlines() if line[:3] in ("| A", "| B", "| Q", "| V")]
    assert len(rows) == len(claims)
    a1 = next(r for r in rows if r.startswith("| A1 |"))
    # The owner's verdict is the row's verdict; the evidence-only record is a part, never a verdict.
    assert "✓ holds" in a1 and "from geometry" in a1 and "parts: {ref}`jacobians <sec>`" in a1
    assert "| A1 | {ref}`jacobians <sec>` | from jacobians |" in page
    assert f"| … pending | {len(claims) - 1} |" in page and "| ✓ holds | 1 |" in page


def test_ledger_refuses_two_verdicts_for_one_claim_naming_both_chapters():
    claims = parse_claims()
    with pytest.raises(
        LedgerError,
        match=r"A1 has two verdicts: 'geometry' says 'holds' and 'jacobians' "
        r"says 'does not hold'.*record_evidence",
    ):
        render_ledger(claims, [_run("jacobians", "does not hold"), _run("geometry", "holds")])


def test_ledger_refuses_unknown_claims_and_verdicts_naming_the_file(tmp_path):
    claims = parse_claims()
    _write_runs(tmp_path, [_run("geometry", "holds", claim="Z9")])
    with pytest.raises(LedgerError, match=r"geometry.json.*unknown claim 'Z9'.*FORCE=geometry"):
        verdicts(claims, load_results(tmp_path))
    _write_runs(tmp_path, [_run("geometry", "probably")])
    with pytest.raises(LedgerError, match=r"geometry.json.*invalid verdict 'probably'.*FORCE=geometry"):
        verdicts(claims, load_results(tmp_path))


def test_ledger_names_a_corrupt_or_incomplete_file_and_leaves_pages_unchanged(tmp_path, capsys, monkeypatch):
    results, pages = tmp_path / "results", tmp_path / "pages"
    _write_runs(results, [_run("geometry", "holds")])
    ledger.build(results, pages, executed_dir=tmp_path / "ex")
    before = {p.name: p.read_bytes() for p in pages.iterdir()}
    assert set(before) == {"ledger.md", "contested.md", "design.md", "intro.md", "reproducibility.md", "verdicts.png"}

    good = (results / "geometry.json").read_text()
    (results / "geometry.json").write_text(good[: len(good) // 2])  # truncated mid-write
    with pytest.raises(LedgerError, match=r"geometry.json: not valid JSON .*truncated.*make notebooks FORCE=geometry"):
        ledger.build(results, pages, executed_dir=tmp_path / "ex")
    broken = json.loads(good)
    del broken["claims"][0]["summary"]
    (results / "geometry.json").write_text(json.dumps(broken))
    with pytest.raises(LedgerError, match=r"geometry.json: claim A1 lacks key\(s\) summary.*FORCE=geometry"):
        ledger.build(results, pages, executed_dir=tmp_path / "ex")
    broken = json.loads(good)
    del broken["claims"][0]["unit"]  # a results file from before verdicts stated their key number's unit
    (results / "geometry.json").write_text(json.dumps(broken))
    with pytest.raises(LedgerError, match=r"geometry.json: claim A1's verdict does not say .* unit.*FORCE=geometry"):
        ledger.build(results, pages, executed_dir=tmp_path / "ex")
    broken = json.loads(good)
    del broken["profile"]
    (results / "geometry.json").write_text(json.dumps(broken))
    monkeypatch.setattr(paths, "RESULTS", results)
    monkeypatch.setattr(paths, "PAGES", pages)
    monkeypatch.setattr(paths, "EXECUTED", tmp_path / "ex")
    assert ledger.main([]) == 2
    err = capsys.readouterr().err
    assert "geometry.json: missing key(s) profile" in err and "left unchanged" in err
    assert {p.name: p.read_bytes() for p in pages.iterdir()} == before


def test_ledger_refuses_mixed_profiles_and_commits_unless_allowed(tmp_path):
    claims = parse_claims()
    smoke, cpu = _run("geometry", "holds"), _run("jacobians", "holds", claim="B12")
    cpu["profile"] = "cpu"
    with pytest.raises(LedgerError, match=r"2 profiles \(cpu, smoke\).*MIXED=1"):
        check_consistent([smoke, cpu])
    other = _run("jacobians", "holds", claim="B12")
    other["git_commit"] = "def"
    with pytest.raises(LedgerError, match=r"2 commits"):
        check_consistent([smoke, other])
    # A chapter the runner re-checked at the current commit (cache hit) counts at that commit.
    other["_checked_commit"] = "abc"
    assert check_consistent([smoke, other]) is None
    warning = check_consistent([smoke, cpu], allow_mixed=True)
    page = render_ledger(claims, [smoke, cpu], warning=warning)
    assert page.index(":::{warning}") < page.index("| ID |") and "mix 2 profiles" in page

    results = tmp_path / "results"
    _write_runs(results, [smoke, cpu])
    with pytest.raises(LedgerError):
        ledger.build(results, tmp_path / "pages", executed_dir=tmp_path / "ex")
    assert not (tmp_path / "pages" / "ledger.md").exists()
    assert ledger.build(results, tmp_path / "pages", executed_dir=tmp_path / "ex", allow_mixed=True)["mixed"]
    assert ":::{warning}" in (tmp_path / "pages" / "intro.md").read_text()


@pytest.mark.parametrize(
    "key, threshold, spread, expected",
    [
        (1.30, 1.00, 0.10, False),  # 3 spreads above the threshold: solid
        (1.15, 1.00, 0.10, True),  # 1.5 spreads: a repeat could cross it
        (0.80, 1.00, 0.10, True),  # exactly 2 spreads below counts as fragile (the band is closed)
        (0.79, 1.00, 0.10, False),
        (1.00, 1.00, 0.00, True),  # on the threshold, with no spread
        (1.30, None, 0.10, None),  # no threshold: unknown, not "no"
        (1.30, 1.00, None, None),
    ],
)
def test_fragility_rule_on_hand_made_records(key, threshold, spread, expected):
    from normlab.study.present import is_fragile as from_present
    from normlab.study.results import is_fragile

    record = {"key_number": key, "threshold": threshold, "spread": spread}
    assert is_fragile(record) is expected and from_present(record) is expected
    row = next(
        r
        for r in render_ledger(parse_claims(), [_run("geometry", "holds", **record)]).splitlines()
        if r.startswith("| A1 |")
    )
    assert f"| {'—' if expected is None else ('**yes**' if expected else 'no')} |" in row


def test_ledger_counts_fragile_verdicts_at_the_top():
    page = render_ledger(
        parse_claims(),
        [
            _run("geometry", "holds", key_number=1.1, threshold=1.0, spread=0.1),
            _run("jacobians", "does not hold", claim="B12", key_number=3.0, threshold=1.0, spread=0.1),
        ],
    )
    assert "**1 of 2 verdicts are fragile** (A1)" in page
    assert page.index("verdicts are fragile") < page.index("| ID |")
    # each key number with its threshold, in the claim's unit, and what it measures (A1: an absolute difference)
    assert "| 1.10 vs 1: *max abs difference, the formula vs F.layer_norm (float64)* |" in page


def test_runner_rejects_unknown_profile_and_notebook(capsys):
    assert command.main(["--profile", "tpu"]) == 2
    assert "valid profiles: smoke, cpu, gpu, auto" in capsys.readouterr().err
    assert command.main(["no_such_chapter"]) == 2
    assert "valid notebooks:" in capsys.readouterr().err
    with pytest.raises(ValueError, match="valid profiles"):
        run.resolve_profile("fast")


DEMO = """# %% tags=["parameters"]
profile = "smoke"
results_dir = "build/results"

# %%
import os
from normlab.study import Finding, Results, decide
results = Results("demo", profile, results_dir)
results.record("A1", Finding(decide(2 > 1), "two exceeds one", {"margin": 1.0}, meaning="a demo", unit="1"))
results.save()

# %%
if os.environ.get("DEMO_FAIL"):
    raise RuntimeError("deliberate failure")
"""


def test_runner_executes_caches_and_names_the_failing_cell(tmp_path, monkeypatch):
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    (notebooks / "demo.py").write_text(DEMO)
    monkeypatch.setattr(paths, "NOTEBOOKS", notebooks)
    dirs = dict(executed_dir=tmp_path / "ex", results_dir=tmp_path / "res")

    data = run.execute("demo", "smoke", **dirs)
    assert data["claims"][0]["verdict"] == "holds" and data["profile"] == "smoke"
    executed = (tmp_path / "ex" / "demo.ipynb").stat().st_mtime_ns
    run.execute("demo", "smoke", **dirs)  # unchanged: served from the cache
    assert (tmp_path / "ex" / "demo.ipynb").stat().st_mtime_ns == executed

    monkeypatch.setenv("DEMO_FAIL", "1")
    with pytest.raises(
        run.NotebookFailed, match=r"notebook 'demo' failed in cell \d+ .*RuntimeError: deliberate failure"
    ):
        run.execute("demo", "smoke", force=True, **dirs)
    assert not (tmp_path / "res" / "demo.json").exists()  # a failed run leaves no stale results behind


def test_intro_names_the_committed_gpu_runs_the_speed_chapter_weighs(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    bench = {"schema": "normlab.bench/1", "profile": "gpu", "records": [], "hardware": {"gpu": "Test GPU 9000"}}
    bench.update(started="2026-01-02T03:04:05+00:00", git_commit="12a0522" + "0" * 33 + "-dirty")
    (data / "gpu-bench.json").write_text(json.dumps(bench))
    results, pages = tmp_path / "results", tmp_path / "pages"
    _write_runs(results, [_run("speed", "holds", claim="A5")])
    ledger.build(results, pages, executed_dir=tmp_path / "ex", data_dir=data)
    intro = (pages / "intro.md").read_text()
    # a '-dirty' commit and no fingerprint: the code it ran cannot be identified, and the page says so
    assert "Test GPU 9000, measured 2026-01-02 03:04 UTC (gpu-bench.json; **measured at 12a0522-dirty: " in intro
    assert "the code it ran cannot be identified" in intro

    _write_runs(results, [_run("geometry", "holds")])  # no speed chapter in this build: nothing weighed the GPU runs
    (results / "speed.json").unlink()
    ledger.build(results, pages, executed_dir=tmp_path / "ex", data_dir=data)
    assert "Test GPU 9000" not in (pages / "intro.md").read_text()

    (data / "gpu-bench-broken.json").write_text("{")
    _write_runs(results, [_run("speed", "holds", claim="A5")])
    with pytest.raises(LedgerError, match=r"gpu-bench-broken.json: not a JSON bench file"):
        ledger.build(results, pages, executed_dir=tmp_path / "ex", data_dir=data)
    # a file without its commit is refused at build, naming the file and the field (it was shown as "unknown")
    (data / "gpu-bench-broken.json").write_text(json.dumps({k: v for k, v in bench.items() if k != "git_commit"}))
    with pytest.raises(LedgerError, match=r"gpu-bench-broken.json: lacks git_commit"):
        ledger.build(results, pages, executed_dir=tmp_path / "ex", data_dir=data)


def test_a_table_shows_flags_as_yes_or_no_and_keeps_counts_and_numbers():
    """Python's True/False (and numpy's, as a DataFrame holds them) must not reach a reader's page."""
    frame = pd.DataFrame(
        {"optimum interior": [True, False], "flag from numpy": np.array([False, True]), "runs": [3, 16]}
    )
    frame["loss"] = [2.4512, None]
    cells = str(table(frame))
    body = cells.split("<tbody>", 1)[1]
    assert "True" not in body and "False" not in body
    assert body.count(">yes<") == 2 and body.count(">no<") == 2
    assert ">16<" in body and ">2.45<" in body
