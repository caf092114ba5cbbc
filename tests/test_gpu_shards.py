"""The GPU study split into shards (`python -m normlab.study.gpu --shard I/N`) and merged by the chapters' loader:
the same sample as one unsharded run, and refusals of shards that overlap, disagree or are incomplete."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from normlab.analysis.shared import gpu_study as G
from normlab.gpt.corpus import load_corpus, save_corpus
from normlab.study.gpu import main, parse_shard, run_study
from normlab.study.results import LedgerError

ANY_COMMIT = dict(known=lambda commit: True)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, dict]:
    """The tiny quality experiment whole, and as shards 0/2 and 1/2, each as the file the study wrote."""
    folder = tmp_path_factory.mktemp("shards")
    save_corpus(load_corpus(), folder / "carry", git_commit="0" * 40)
    made = {}
    for name, shard in (("whole", None), ("gpu-study-shard0", (0, 2)), ("gpu-study-shard1", (1, 2))):
        path = folder / f"{name}.json"
        run_study("tiny", path, carry=folder / "carry", device="cpu", only=["quality"], shard=shard)
        made[name] = json.loads(path.read_text())
    return made


def _write(folder: Path, documents: dict[str, dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, document in documents.items():
        (folder / f"{name}.json").write_text(json.dumps(document))
    return folder


def test_each_shard_trains_its_own_seeds(runs):
    seeds = [{r["tag"]["seed"] for r in runs[f"gpu-study-shard{i}"]["experiments"]["quality"]["runs"]} for i in (0, 1)]
    assert seeds == [{0, 2}, {1}]  # the tiny profile has 3 pairs: seeds 0, 1, 2
    assert runs["gpu-study-shard1"]["shard"] == {"index": 1, "count": 2, "rule": "seed % count == index"}


def test_two_shards_merge_into_the_sample_of_one_unsharded_run(runs, tmp_path):
    folder = _write(tmp_path, {k: v for k, v in runs.items() if k != "whole"})
    (merged,) = G.committed(folder, corpus_sha256=load_corpus().sha256, **ANY_COMMIT)
    whole = runs["whole"]["experiments"]["quality"]
    ours = merged.experiment("quality")
    assert json.dumps(ours["runs"]) == json.dumps(whole["runs"])  # every number and the order, bit for bit
    assert ours["settings"] == whole["settings"] and ours["models"] == whole["models"] == 6
    assert merged.source == "gpu-study-shard0.json + gpu-study-shard1.json"
    assert [s["index"] for s in merged.document["shards"]] == [0, 1]


def test_the_same_shard_twice_is_refused_naming_both_files(runs, tmp_path):
    folder = _write(tmp_path, {"gpu-study-a": runs["gpu-study-shard0"], "gpu-study-b": runs["gpu-study-shard0"]})
    with pytest.raises(LedgerError, match=r"gpu-study-a\.json and gpu-study-b\.json are both shard 0/2"):
        G.committed(folder, **ANY_COMMIT)


def test_shards_that_share_a_run_are_refused_naming_both_files(runs):
    other = copy.deepcopy(runs["gpu-study-shard1"])
    quality = other["experiments"]["quality"]
    quality["positions"][0] = runs["gpu-study-shard0"]["experiments"]["quality"]["positions"][0]
    shards = [G.GpuStudy(runs["gpu-study-shard0"], "s0.json"), G.GpuStudy(other, "s1.json")]
    with pytest.raises(LedgerError, match=r"shards s0\.json and s1\.json both trained 'quality' run"):
        G.merge_shards(shards)


@pytest.mark.parametrize(
    "change, what",
    [
        (lambda d: d.update(git_commit="f" * 40), r"code \(git_commit\)"),
        (lambda d: d["experiments"]["quality"]["settings"].update(steps=20), "the design of 'quality'"),
        (lambda d: d["shard"].update(count=3), "shard count"),
    ],
)
def test_shards_that_differ_in_code_or_design_are_refused_naming_the_files(runs, change, what):
    other = copy.deepcopy(runs["gpu-study-shard1"])
    change(other)
    shards = [G.GpuStudy(runs["gpu-study-shard0"], "s0.json"), G.GpuStudy(other, "s1.json")]
    with pytest.raises(LedgerError, match=rf"shards s0\.json, s1\.json differ in {what}"):
        G.merge_shards(shards)


def test_an_incomplete_set_of_shards_is_refused(runs):
    with pytest.raises(LedgerError, match=r"are 1 of 2: shard\(s\) 1/2 missing"):
        G.merge_shards([G.GpuStudy(runs["gpu-study-shard0"], "s0.json")])


@pytest.mark.parametrize("text", ["2/2", "1", "a/b", "-1/2", "0/0"])
def test_a_bad_shard_is_refused_by_the_command_line(text, capsys):
    with pytest.raises(ValueError, match="--shard must be I/N with 0 <= I < N"):
        parse_shard(text)
    assert main(["--profile", "tiny", f"--shard={text}"]) == 2
    assert "--shard must be I/N" in capsys.readouterr().err
