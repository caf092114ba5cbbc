"""normlab.runtime.elsewhere: the one reader of results made elsewhere (committed builds, the pilots, the GPU benches)
and its one provenance check: a field missing or unparsable is refused naming the file and the field; a file without
a code fingerprint (every committed one) is accepted with its caveat stated."""

from __future__ import annotations

import json
import re

import pytest

from normlab.bench import harness, provenance
from normlab.runtime import elsewhere
from normlab.runtime.code_identity import BENCH_CODE, FINGERPRINT_KEY, loaded_source
from normlab.runtime.elsewhere import ProvenanceError, read
from normlab.study import builds, paths

DATA = paths.ROOT / "data"
EPYC = DATA / "builds" / "fbce4a0-epyc-avx512"


def results(**changes) -> dict:
    document = {
        "notebook": "geometry",
        "profile": "cpu",
        "hardware": {"cpu": "Some CPU", "cpu_cores": 2, "gpu": None},
        "versions": {"python": "3.11"},
        "git_commit": "abc1234",
        "started": "2026-12-01T00:00:00+00:00",
        "claims": [{"id": "A1", "verdict": "holds"}],
    }
    document.update(changes)
    return {k: v for k, v in document.items() if v is not ...}


def bench(**changes) -> dict:
    document = {"schema": harness.SCHEMA, "profile": "gpu", "hardware": {"cpu": "Xeon", "gpu": "NVIDIA H200"}}
    document.update(git_commit="12a0522", started="2026-11-30T11:00:00+00:00", records=[])
    document.update(changes)
    return {k: v for k, v in document.items() if v is not ...}


def write(path, document):
    path.write_text(json.dumps(document))
    return path


@pytest.mark.parametrize(
    "change, field, message",
    [
        (dict(git_commit=...), "git_commit", "lacks git_commit"),
        (dict(git_commit=""), "git_commit", "lacks git_commit"),
        (dict(git_commit="HEAD~1"), "git_commit", "git_commit 'HEAD~1' does not parse as a commit"),
        (dict(git_commit=1234567), "git_commit", "git_commit 1234567 does not parse as a commit"),
        (dict(profile=...), "profile", "lacks profile"),
        (dict(profile=["cpu"]), "profile", "profile ['cpu'] is not a profile's name"),
        (dict(hardware=...), "hardware", "lacks hardware"),
        (dict(hardware={"cpu_cores": 2}), "hardware", "its hardware names no CPU or GPU"),
        (dict(hardware="AMD EPYC"), "hardware", "its hardware names no CPU or GPU"),
        (
            {FINGERPRINT_KEY: {"gpt/model.py": "not-a-hash"}},
            FINGERPRINT_KEY,
            f"its {FINGERPRINT_KEY} is not a list of modules with",
        ),
        ({FINGERPRINT_KEY: ["gpt/model.py"]}, FINGERPRINT_KEY, f"its {FINGERPRINT_KEY} is not a list of modules with"),
        ({FINGERPRINT_KEY: {}}, FINGERPRINT_KEY, f"its {FINGERPRINT_KEY} is not a list of modules with"),
    ],
)
@pytest.mark.parametrize("kind", ["results", "bench"])
def test_provenance_missing_or_unparsable_is_refused_naming_the_file_and_the_field(
    tmp_path, kind, change, field, message
):
    document = (results if kind == "results" else bench)(**change)
    path = write(tmp_path / "made-elsewhere.json", document)
    with pytest.raises(ProvenanceError, match=r"made-elsewhere\.json: " + re.escape(message)) as refused:
        read(path, kind)
    assert refused.value.field == field and refused.value.path == path
    fix = "copy them again from that build" if kind == "results" else "re-run `make gpu-bench` on a GPU machine"
    assert fix in str(refused.value)


def test_a_file_that_is_not_json_or_not_of_its_format_is_refused_naming_it(tmp_path):
    with pytest.raises(ProvenanceError, match=r"cut\.json: not a JSON results file"):
        (tmp_path / "cut.json").write_text("{cut")
        read(tmp_path / "cut.json")
    with pytest.raises(ProvenanceError, match=r"list\.json: expected a JSON object, found list"):
        read(write(tmp_path / "list.json", [1]))
    with pytest.raises(ProvenanceError, match=r"claims\.json: 'claims' must be a list of records with an id") as bad:
        read(write(tmp_path / "claims.json", results(claims=[{"verdict": "holds"}])))
    assert bad.value.field == "claims"
    with pytest.raises(ProvenanceError, match=r"nb\.json: lacks notebook"):
        read(write(tmp_path / "nb.json", results(notebook=...)))
    with pytest.raises(ProvenanceError, match=r"b\.json: not a normlab.bench results file") as bad:
        read(write(tmp_path / "b.json", bench(schema="normlab.gpu-study/1")), "bench")
    assert bad.value.field == "schema"
    with pytest.raises(ValueError, match="kind must be one of"):
        read(tmp_path / "b.json", "gpu-study")


def test_a_file_without_a_fingerprint_is_accepted_with_its_caveat_stated(tmp_path):
    plain = read(write(tmp_path / "plain.json", results()))
    assert plain.fingerprint is None and plain.caveats == (elsewhere.NO_FINGERPRINT,)
    assert "identified by git from its commit" in plain.caveats[0]
    dirty = read(write(tmp_path / "dirty.json", bench(git_commit="12a0522-dirty")), "bench")
    assert dirty.caveats == (elsewhere.NO_FINGERPRINT, elsewhere.DIRTY)
    assert dirty.code(BENCH_CODE).unidentified is not None  # the code check says so too
    fingerprinted = read(write(tmp_path / "fp.json", results(**{FINGERPRINT_KEY: loaded_source()})))
    assert fingerprinted.caveats == () and fingerprinted.code(BENCH_CODE).caveat is None


def test_every_committed_result_made_elsewhere_passes_the_one_check():
    build = elsewhere.read_build(EPYC)
    assert len(build) == 9 and {run.profile for run in build} == {"cpu"}
    assert {run.commit for run in build} == {"fbce4a0ae397b93d9d57984a823f2a8af948b4be"}
    assert all(run.caveats == (elsewhere.NO_FINGERPRINT,) for run in build)  # they predate fingerprints
    benches = elsewhere.bench_files(DATA)
    assert [b.path.name for b in benches] == ["gpu-bench-2.json", "gpu-bench.json"]
    assert benches[0].caveats == (elsewhere.NO_FINGERPRINT, elsewhere.DIRTY) and benches[1].caveats[1:] == ()
    pilot = elsewhere.claim_record(EPYC / "quality.json", "A9")
    assert pilot["evidence"]["paired_final_loss"]["sd_of_differences"] > 0


def test_a_build_mixing_profiles_commits_or_machines_is_refused_naming_the_field(tmp_path):
    write(tmp_path / "depth.json", results(notebook="depth"))
    write(tmp_path / "geometry.json", results(profile="smoke"))
    with pytest.raises(ProvenanceError, match=r"geometry\.json: profile 'smoke', but depth\.json has 'cpu'") as bad:
        elsewhere.read_build(tmp_path)
    assert bad.value.field == "profile"


def test_builds_the_pilots_and_the_benches_are_read_through_the_one_reader(tmp_path, monkeypatch):
    """The readers of results made elsewhere are one: builds, the confirmation's and B18's pilots, the speed chapter's
    bench files and the opening page's list of them all go through `elsewhere.read`."""
    from normlab.analysis.depth import post_ln_decay
    from normlab.analysis.shared import confirmation
    from normlab.study import design
    from normlab.study.pages import opening

    seen = []
    real = elsewhere.read

    def counting(path, kind="results"):
        seen.append((kind, str(path)))
        return real(path, kind)

    monkeypatch.setattr(elsewhere, "read", counting)
    elsewhere._records.cache_clear()
    builds.load_builds(DATA / "builds")
    confirmation.pilot_evidence(design.load().confirmation_of("A9"), "A9")
    post_ln_decay.pilot_spread(design.load().claim("B18").decision, paths.ROOT)
    provenance.committed(DATA)
    opening.committed_gpu_runs(DATA)
    elsewhere._records.cache_clear()
    kinds = [kind for kind, _ in seen]
    assert kinds.count("results") >= 9 + 2 and kinds.count("bench") == 4
    assert any(p.endswith("depth.json") for _, p in seen) and any(p.endswith("gpu-bench.json") for _, p in seen)


def test_a_refused_bench_file_stops_the_ledger_and_the_speed_chapter_naming_it(tmp_path):
    from normlab.study.pages import opening
    from normlab.study.results import LedgerError

    write(tmp_path / "gpu-bench-3.json", bench(git_commit=...))
    with pytest.raises(ProvenanceError, match=r"gpu-bench-3\.json: lacks git_commit"):
        provenance.committed(tmp_path)
    with pytest.raises(LedgerError, match=r"gpu-bench-3\.json: lacks git_commit"):
        opening.committed_gpu_runs(tmp_path)


def test_the_bench_schema_is_the_harness_own():
    assert elsewhere.BENCH_SCHEMA == harness.SCHEMA
