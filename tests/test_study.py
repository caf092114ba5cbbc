"""The study plumbing: results contract, ledger, papermill runner."""
import json
import math

import pytest
import torch

from normlab.study import Results, decide, ledger, paths, run


def test_claims_file_lists_every_id_once():
    ids = [c.id for c in ledger.parse_claims()]
    expected = [f"A{i}" for i in range(1, 12)] + [f"B{i}" for i in range(1, 20)] + ["Q1", "Q2", "Q3"]
    assert ids == expected


def test_decide_maps_outcomes_to_verdicts():
    assert decide(True) == "holds"
    assert decide(True, caveat=True) == "holds with caveats"
    assert decide(False) == "does not hold"
    assert decide(False, caveat=True) == "does not hold"


def test_results_reject_unknown_verdict_and_duplicates(tmp_path):
    results = Results("demo", "smoke", tmp_path)
    with pytest.raises(ValueError, match="verdict must be one of"):
        results.record("A1", "mostly true", "x", {})
    results.record("A1", "holds", "error 1e-16", {"err": torch.tensor(1e-16)})
    with pytest.raises(ValueError, match="already recorded"):
        results.record("A1", "holds", "again", {})


def test_results_file_follows_the_contract(tmp_path):
    results = Results("demo", "smoke", tmp_path)
    results.record("B12", "does not hold", "off by a factor d", {"errors": torch.tensor([1.0, math.inf]), "n": 3})
    data = json.loads(results.save().read_text())
    for key in ("profile", "hardware", "versions", "git_commit", "started", "finished", "claims"):
        assert key in data
    assert data["hardware"]["cpu_cores"] >= 1
    assert data["versions"]["torch"] == torch.__version__
    assert data["claims"][0]["evidence"] == {"errors": [1.0, "inf"], "n": 3}


def _run(notebook_id, verdict):
    return {"notebook": notebook_id, "profile": "smoke", "claims": [
        {"id": "A1", "verdict": verdict, "summary": f"from {notebook_id}", "evidence": {}, "section": "sec"}]}


def test_ledger_shows_every_claim_once_with_pending_and_counts():
    claims = ledger.parse_claims()
    page = ledger.render_ledger(claims, [_run("jacobians", "does not hold"), _run("geometry", "holds")])
    rows = [line for line in page.splitlines() if line.startswith("| A") or line.startswith("| B") or line.startswith("| Q")]
    assert len(rows) == len(claims) == 33
    a1 = next(r for r in rows if r.startswith("| A1 |"))
    # geometry comes first in book order, so it is the primary record; jacobians is further evidence.
    assert "✅ holds" in a1 and "from geometry" in a1 and "also" in a1
    assert "| ⏳ pending | 32 |" in page
    assert "| ✅ holds | 1 |" in page


def test_ledger_refuses_unknown_claims_and_verdicts():
    claims = ledger.parse_claims()
    bad_id = {"notebook": "geometry", "profile": "smoke", "claims": [{"id": "Z9", "verdict": "holds", "summary": "s", "evidence": {}}]}
    with pytest.raises(ValueError, match="unknown claim"):
        ledger.render_ledger(claims, [bad_id])
    with pytest.raises(ValueError, match="invalid verdict"):
        ledger.render_ledger(claims, [_run("geometry", "probably")])


def test_runner_rejects_unknown_profile_and_notebook(capsys):
    assert run.main(["--profile", "tpu"]) == 2
    assert "valid profiles: smoke, cpu, gpu, auto" in capsys.readouterr().err
    assert run.main(["no_such_chapter"]) == 2
    assert "valid notebooks:" in capsys.readouterr().err
    with pytest.raises(ValueError, match="valid profiles"):
        run.resolve_profile("fast")


DEMO = '''# %% tags=["parameters"]
profile = "smoke"
results_dir = "build/results"

# %%
import os
from normlab.study import Results, decide
results = Results("demo", profile, results_dir)
results.record("A1", decide(2 > 1), "two exceeds one", {"margin": 1.0})
results.save()

# %%
if os.environ.get("DEMO_FAIL"):
    raise RuntimeError("deliberate failure")
'''


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
    with pytest.raises(run.NotebookFailed, match=r"notebook 'demo' failed in cell \d+ .*RuntimeError: deliberate failure"):
        run.execute("demo", "smoke", force=True, **dirs)
    assert not (tmp_path / "res" / "demo.json").exists()  # a failed run leaves no stale results behind
