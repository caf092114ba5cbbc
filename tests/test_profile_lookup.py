"""The one profile lookup (normlab.runtime.profiles) and the runner's SET= overrides built on it."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from normlab.analysis import __main__ as command
from normlab.analysis.quality import profiles as quality_profiles
from normlab.runtime.profiles import lookup_profile, parse_overrides
from normlab.study import present, run
from normlab.study.claims import parse_claims
from normlab.study.findings import Finding
from normlab.study.pages.ledger_page import render_ledger
from normlab.study.results import Results
from normlab.study.trained import ArmLosses

TABLE = {
    "smoke": dict(width=16, seeds=2, train=dict(steps=10, lr=1e-2)),
    "cpu": dict(width=64, seeds=6, train=dict(steps=200, lr=5e-3)),
}


def test_lookup_hands_out_a_deep_copy():
    settings = lookup_profile(TABLE, "cpu", owner="the test chapter")
    settings["train"]["steps"] = 1
    assert TABLE["cpu"]["train"]["steps"] == 200


def test_an_unknown_profile_gets_one_message_listing_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown profile 'tpu'; valid profiles: smoke, cpu \(the test chapter\)"):
        lookup_profile(TABLE, "tpu", owner="the test chapter")


def test_too_few_pairs_outside_smoke_is_refused_naming_the_setting():
    with pytest.raises(ValueError, match="the test chapter: seeds is 2 at profile 'cpu'.*raise seeds"):
        lookup_profile(TABLE, "cpu", owner="the test chapter", overrides={"seeds": 2}, minimum_pairs={"seeds": 5})
    assert lookup_profile(TABLE, "smoke", owner="the test chapter", minimum_pairs={"seeds": 5})["seeds"] == 2


def test_overrides_apply_after_the_copy_and_reach_nested_settings():
    settings = lookup_profile(TABLE, "cpu", owner="the test chapter", overrides={"width": 768, "train.steps": 400})
    assert settings["width"] == 768 and settings["train"] == dict(steps=400, lr=5e-3)
    assert TABLE["cpu"]["width"] == 64 and TABLE["cpu"]["train"]["steps"] == 200


def test_an_override_of_a_missing_key_is_refused_listing_the_keys():
    with pytest.raises(ValueError, match="no setting 'pairs' to override; its settings are: seeds, train, train.lr"):
        lookup_profile(TABLE, "cpu", owner="the test chapter", overrides={"pairs": 24})


def test_chapters_check_an_overridden_design_like_a_committed_one():
    assert quality_profiles.settings_for("cpu", {"width": 96, "heads": 4})["width"] == 96
    with pytest.raises(ValueError, match="heads must divide width"):
        quality_profiles.settings_for("cpu", {"width": 90})
    with pytest.raises(ValueError, match="the quality chapter: seeds is 3 at profile 'cpu'"):
        quality_profiles.settings_for("cpu", {"seeds": 3})


def test_parse_overrides_splits_items_by_chapter_and_reads_literals():
    parsed = parse_overrides("quality.width=768, quality.seeds=24,depth.init_depths=[2,4,8],quality.trainer=batched")
    assert parsed == {"quality": {"width": 768, "seeds": 24, "trainer": "batched"}, "depth": {"init_depths": [2, 4, 8]}}
    assert parse_overrides("") == {}
    with pytest.raises(ValueError, match="write CHAPTER.KEY=VALUE"):
        parse_overrides("quality.width")


def test_the_runner_refuses_an_unknown_chapter_or_key_before_any_chapter_runs(capsys, monkeypatch):
    monkeypatch.setattr(run, "execute", lambda *a, **k: pytest.fail("a chapter ran despite a bad --set"))
    assert command.main(["--profile", "smoke", "--set", "qualty.width=768"]) == 2
    assert "unknown chapter(s) qualty; the chapters are: " in capsys.readouterr().err
    assert command.main(["--profile", "smoke", "--set", "quality.pairs=24"]) == 2
    error = capsys.readouterr().err
    assert "the quality chapter has no setting 'pairs'" in error and "seeds, steps" in error
    assert command.main(["--profile", "smoke", "--set", "ecosystem.texts=4"]) == 2
    assert "the ecosystem chapter has no sizes per profile" in capsys.readouterr().err


ANALYSIS = Path(command.__file__).parent


def modules_with_a_profile_table() -> dict[str, list[str]]:
    """Per chapter, its modules that define a module-level `PROFILES` (read from the source, not imported)."""
    found: dict[str, list[str]] = {}
    for path in sorted(ANALYSIS.glob("*/*.py")):
        tree = ast.parse(path.read_text(), str(path))
        targets = [t for n in tree.body if isinstance(n, ast.Assign) for t in n.targets]
        targets += [n.target for n in tree.body if isinstance(n, ast.AnnAssign)]
        assigned = {t.id for t in targets if isinstance(t, ast.Name)}
        if "PROFILES" in assigned:
            found.setdefault(path.parent.name, []).append(f"normlab.analysis.{path.parent.name}.{path.stem}")
    return found


def test_the_entry_point_hands_the_runner_every_chapter_s_own_table():
    tables = modules_with_a_profile_table()
    assert set(command.PROFILE_TABLES) == set(tables), "a chapter with a PROFILES table must be in PROFILE_TABLES"
    for chapter, table in command.PROFILE_TABLES.items():
        assert chapter in run.INPUTS, chapter
        assert len(tables[chapter]) == 1, f"{chapter} has two profile tables: {tables[chapter]}"
        # the chapter's table itself, not a copy: one home for its sizes
        assert table is importlib.import_module(tables[chapter][0]).PROFILES, chapter
        assert set(table) >= {"smoke", "cpu", "gpu"}, chapter


def test_the_runner_passes_each_chapter_its_own_overrides(monkeypatch):
    calls = {}
    monkeypatch.setattr(run, "execute", lambda name, profile, **kw: calls.setdefault(name, kw["overrides"]))
    monkeypatch.setattr(run, "restamp", lambda names: [])
    assert command.main(["--profile", "smoke", "quality", "depth", "--set", "quality.width=96,quality.heads=4"]) == 0
    assert calls == {"quality": {"width": 96, "heads": 4}, "depth": None}


def test_the_old_runner_command_names_the_new_one():
    done = subprocess.run([sys.executable, "-m", "normlab.study.run"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "python -m normlab.analysis" in done.stderr, done.stderr


def test_overrides_change_the_fingerprint():
    plain = run.snapshot("quality", {"profile": "smoke", "results_dir": "build/results"})
    overridden = run.snapshot(
        "quality", {"profile": "smoke", "results_dir": "build/results", "overrides": {"seeds": 4}}
    )
    assert plain.fingerprint() != overridden.fingerprint()


def test_overrides_are_recorded_and_shown_on_the_page_and_the_ledger(tmp_path):
    results = Results("quality", "smoke", tmp_path, {"width": 96})
    results.record(
        "A9",
        Finding(
            "holds",
            "RMSNorm matches LayerNorm within 0.02 nats.",
            {},
            meaning="final loss",
            unit="nats",
            arms=ArmLosses({"rms": 2.0, "layer": 2.0}, {}, 3.1122),  # a trained claim's arms, both trained
        ),
    )
    document = results.to_dict()
    assert document["overrides"] == {"width": 96} and Results("quality", "smoke", tmp_path).to_dict()["overrides"] == {}
    page = str(present.claims_box(["A9"], overrides={"width": 96}))
    assert page.startswith(":::{warning}") and "`width=96`" in page
    assert ":::{warning}" not in str(present.claims_box(["A9"]))
    claims = parse_claims()
    assert "quality: `width=96`" in render_ledger(claims, [document])
    assert "overridden" not in render_ledger(claims, [dict(document, overrides={})])
