"""A committed GPU study (`data/gpu-study*.json`, written by `python -m normlab.study.gpu`) beside this run.

A chapter applies its own verdict function to the GPU study's runs and to its own, and the one rule for several
runs (`normlab.analysis.shared.scale_rule`) makes one verdict of them: the largest scale that meets its registered
pairs answers (the GPU study where its runs for the claim reach the pairs the GPU design registers,
`registered_pairs`; else this build's run), never the narrower interval; both runs are shown, and where their
verdicts differ, in either direction, the verdict carries a "depends on scale" caveat naming both. `gpu_run` and
`this_build` make the two runs the rule weighs.

Each chapter weighs its own claims this way: `normlab.analysis.quality.committed_gpu`,
`normlab.analysis.depth.committed_gpu` and `normlab.analysis.landscape.gpu`.

With no committed study, or one that lacks the chapter's experiment (a run cut short lists it as missing), the
chapter's own finding stands unchanged and the page says so in one sentence.

Several committed studies: the shard files of one design and one code (profile, commit, fingerprint, corpus and
shard count alike) are merged into one sample (`merge_shards`), the runs in the order one unsharded run lists them;
studies from other code or another design are kept apart and shown side by side (`studies_with`), never one
silently replacing another. The shards of one group must all be present and agree on each experiment's design;
shards that repeat a shard or a run are refused, naming the files.

A committed file is refused, with a `LedgerError` naming it and the fix, when it is not valid JSON (truncated),
has another schema or an unknown profile, lacks a key, names a commit this repository does not have, or was
trained on other corpus bytes than this run's. A `tiny` study (the entry point's CPU test size) is refused outside
the tests, which accept it by setting `NORMLAB_ACCEPT_TINY_STUDY=1`.

A study is checked against this tree's code (`normlab.runtime.code_identity`): where the code it trained with has
changed since, or cannot be identified, its `code_caveat` says so, and every verdict it answers or puts a "depends
on scale" caveat on carries that caveat (`gpu_run` passes it to the rule).
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from normlab.analysis.shared.scale_rule import Run
from normlab.runtime.code_identity import FINGERPRINT_KEY, GPU_STUDY_CODE, CodeCheck, check_code
from normlab.study import paths
from normlab.study.findings import Finding
from normlab.study.results import LedgerError, read_json_object

SCHEMA = "normlab.gpu-study/1"
PROFILES = ("gpu", "tiny")  # tiny: the entry point's CPU test size, accepted only where the tests ask for it
ACCEPT_TINY = "NORMLAB_ACCEPT_TINY_STUDY"  # set to 1 by the tests, which feed tiny studies through the chapters
KEYS = ("schema", "profile", "hardware", "versions", "git_commit", "started", "corpus", "experiments", "missing")
SUMMED = ("seconds", "estimated_seconds", "estimated_pflop")  # per-experiment costs, added up over shards
_FIX = "re-run `python -m normlab.study.gpu --profile gpu` on a GPU machine and commit its output, or remove the file"


def study_dir() -> Path:
    """Where committed GPU studies live: data/, or NORMLAB_GPU_STUDY_DIR (the tests point it elsewhere)."""
    return Path(os.environ.get("NORMLAB_GPU_STUDY_DIR", paths.ROOT / "data"))


def commit_known(commit: str, root: Path = paths.ROOT) -> bool:
    """Whether this repository has `commit` (a '-dirty' mark is the tree it was made from, at that commit)."""
    bare = commit.removesuffix("-dirty")
    done = subprocess.run(
        ["git", "cat-file", "-e", f"{bare}^{{commit}}"], cwd=root, capture_output=True, text=True, check=False
    )
    return done.returncode == 0


@dataclass(frozen=True)
class GpuStudy:
    document: dict
    source: str  # the file's name

    @property
    def hardware(self) -> str:
        hw = self.document["hardware"]
        return hw.get("gpu") or f"{hw.get('cpu')} ({hw.get('cpu_cores')} cores)"

    @property
    def label(self) -> str:
        """'NVIDIA H200 (gpu-study.json, profile gpu, commit 12a0522b3c4d)'."""
        commit = str(self.document["git_commit"])
        short = commit[:12] + ("-dirty" if commit.endswith("-dirty") else "")
        return f"{self.hardware} ({self.source}, profile {self.document['profile']}, commit {short})"

    def experiment(self, name: str) -> dict | None:
        return self.document["experiments"].get(name)

    @cached_property
    def code_check(self) -> CodeCheck:
        return check_code(self.document, GPU_STUDY_CODE)

    @property
    def code_caveat(self) -> str | None:
        """'gpu-study.json: measured at 12a0522; since then 3 files of the GPT testbed changed, …', or None when it
        trained with this tree's code."""
        caveat = self.code_check.caveat
        return None if caveat is None else f"{self.source}: {caveat}"

    @property
    def code_identified(self) -> bool:
        return self.code_check.unidentified is None


def load(path: str | Path, *, known=commit_known) -> GpuStudy:
    """One committed study, checked; every refusal names the file and the fix."""
    path = Path(path)
    document = read_json_object(path, _FIX)
    if document.get("schema") != SCHEMA:
        raise LedgerError(
            f"{path}: schema {document.get('schema')!r}, but the chapters read {SCHEMA!r}; {_FIX} with this checkout"
        )
    missing = [key for key in KEYS if key not in document]
    if missing:
        raise LedgerError(f"{path}: missing key(s) {', '.join(missing)}; {_FIX}")
    if document["profile"] not in PROFILES:
        raise LedgerError(
            f"{path}: profile {document['profile']!r} is not one the chapters know ({', '.join(PROFILES)}); {_FIX}"
        )
    if document["profile"] == "tiny" and os.environ.get(ACCEPT_TINY) != "1":
        raise LedgerError(
            f"{path}: a `tiny` study, the entry point's CPU test size: its models are too small to answer any claim, "
            f"so the chapters weigh only `gpu` studies; {_FIX}"
        )
    commit = document["git_commit"]
    if not isinstance(commit, str) or not known(commit):
        raise LedgerError(
            f"{path}: records commit {commit!r}, which this repository does not have (`git cat-file -e` finds no "
            f"such commit): it was made from another history; fetch that commit, or {_FIX}"
        )
    return GpuStudy(document=document, source=path.name)


def _differ(studies: list[GpuStudy], what: str, value) -> None:
    seen = {json.dumps(value(s), sort_keys=True): s.source for s in studies}
    if len(seen) > 1:
        raise LedgerError(
            f"shards {', '.join(seen.values())} differ in {what}, so they are not one sample; re-run the shards "
            f"from one checkout and one design, or remove the odd ones"
        )


def merge_shards(shards: list[GpuStudy]) -> GpuStudy:
    """The one study that N shard files make together; refused unless they are shards 0..N-1 of one design."""
    names = ", ".join(s.source for s in shards)
    _differ(shards, "profile", lambda s: s.document["profile"])
    _differ(shards, "code (git_commit)", lambda s: s.document["git_commit"])
    _differ(shards, f"code ({FINGERPRINT_KEY})", lambda s: s.document.get(FINGERPRINT_KEY))
    _differ(shards, "corpus", lambda s: s.document["corpus"].get("sha256"))
    _differ(shards, "shard count", lambda s: s.document["shard"]["count"])
    count = shards[0].document["shard"]["count"]
    by_index: dict[int, str] = {}
    for shard in shards:
        index = shard.document["shard"]["index"]
        if index in by_index:
            raise LedgerError(
                f"shards {by_index[index]} and {shard.source} are both shard {index}/{count}: they overlap in seeds; "
                "remove one of them"
            )
        by_index[index] = shard.source
    absent = sorted(set(range(count)) - set(by_index))
    if absent:
        raise LedgerError(
            f"shards {names} are {len(shards)} of {count}: shard(s) {', '.join(f'{i}/{count}' for i in absent)} "
            f"missing, so their runs would be a smaller sample than the design's; commit the missing shard(s)"
        )
    finished = [set(s.document["experiments"]) for s in shards]
    experiments = {}
    for name in [n for n in shards[0].document["experiments"] if all(n in f for f in finished)]:
        parts = [s.document["experiments"][name] for s in shards]
        _differ(shards, f"the design of {name!r}", lambda s: s.document["experiments"][name]["settings"])
        placed: dict[int, tuple[dict, str]] = {}
        for shard, part in zip(shards, parts):
            for position, run in zip(part["positions"], part["runs"]):
                if position in placed:
                    raise LedgerError(
                        f"shards {placed[position][1]} and {shard.source} both trained {name!r} run {run['tag']}; "
                        "they overlap in seeds, remove one of them"
                    )
                placed[position] = (run, shard.source)
        experiments[name] = {
            "claims": parts[0]["claims"],
            "settings": parts[0]["settings"],
            "runs": [placed[p][0] for p in sorted(placed)],
            "models": len(placed),
            # what each shard spent and was estimated to spend, summed: the whole sample's cost
            **{key: sum(p[key] for p in parts) for key in SUMMED if all(key in p for p in parts)},
        }
    first = shards[0].document
    gpus = list(dict.fromkeys(s.document["hardware"].get("gpu") for s in shards if s.document["hardware"].get("gpu")))
    merged = {
        **first,
        "hardware": {**first["hardware"], "gpu": " + ".join(gpus) if gpus else None},
        "started": min(s.document["started"] for s in shards),
        "finished": None
        if any(not s.document.get("finished") for s in shards)
        else max(s.document["finished"] for s in shards),
        "experiments": experiments,
        "missing": [n for n in dict.fromkeys(m for s in shards for m in s.document["missing"]) if n not in experiments],
        "failed": {k: v for s in shards for k, v in s.document.get("failed", {}).items()},
        "shard": None,
        "shards": [
            {
                "source": s.source,
                **s.document["shard"],
                "hardware": s.document["hardware"],
                "versions": s.document["versions"],
            }
            for s in sorted(shards, key=lambda s: s.document["shard"]["index"])
        ],
    }
    return GpuStudy(document=merged, source=" + ".join(s.source for s in shards))


def _code_and_design(study: GpuStudy) -> str:
    """What shards must share to be one sample: profile, code (commit and fingerprint), corpus and shard count."""
    d = study.document
    key = [d["profile"], d["git_commit"], d.get(FINGERPRINT_KEY), (d["corpus"] or {}).get("sha256")]
    return json.dumps([*key, d["shard"]["count"]], sort_keys=True)


def _merged(studies: list[GpuStudy]) -> list[GpuStudy]:
    """Whole studies as they are, and the shard files of one design and one code merged into one sample; shards of
    other code or another design form their own sample, shown beside the others."""
    whole = [s for s in studies if not s.document.get("shard")]
    shards = [s for s in studies if s.document.get("shard")]
    groups: dict[str, list[GpuStudy]] = {}
    for shard in shards:
        groups.setdefault(_code_and_design(shard), []).append(shard)
    return whole + [merge_shards(group) for group in groups.values()]


def committed(data_dir: str | Path | None = None, *, corpus_sha256: str | None = None, known=commit_known) -> list:
    """Every committed study (shards of one design and code merged), in file-name order, never newest first: which
    answers a claim is the rule's (`scale_rule`), not the date's; with `corpus_sha256`, refuse one trained on other
    bytes."""
    folder = study_dir() if data_dir is None else Path(data_dir)
    studies = _merged([load(p, known=known) for p in sorted(folder.glob("gpu-study*.json"))])
    if corpus_sha256 is not None:
        for study in studies:
            theirs = (study.document["corpus"] or {}).get("sha256")
            if theirs != corpus_sha256:
                raise LedgerError(
                    f"{folder / study.source}: trained on corpus SHA-256 {str(theirs)[:16]}…, but this run's corpus is "
                    f"{corpus_sha256[:16]}…: the two are not the same text, so their verdicts cannot be weighed "
                    f"together; write the carry on this machine (`make gpu-carry`) and {_FIX}"
                )
    return sorted(studies, key=lambda s: s.source)


def studies_with(studies: list[GpuStudy], experiment: str) -> list[GpuStudy]:
    """Every study that finished `experiment`, in the order given: each is weighed, none replaces another."""
    return [s for s in studies if s.experiment(experiment) is not None]


# ---- the runs the rule weighs ----------------------------------------------------------------------------

# The GPU study's experiment behind each claim a chapter weighs (normlab.gpt.experiments' names).
WEIGHED = {
    "A9": "quality",
    "B7": "quality",
    "B17": "placement_depth",
    "B18": "placement_depth",
    "B19": "ablation",
    "V2": "placements",
    "V3": "width",
    "V4": "depth_scaling",
}


def registered_pairs() -> dict[str, int]:
    """Claim -> the pairs (seeds) the registered design (`data/design.toml`, `gpu_study_pairs`) requires of a GPU
    study for it to answer the claim; the design's own check holds them equal to the GPU study's sizes
    (`normlab.gpt.experiments.PROFILES["gpu"]`)."""
    from normlab.study import design

    registered = design.load()
    return {claim: int(registered.claim(claim).gpu_study_pairs) for claim in WEIGHED}


def complete_seeds(runs: list[dict]) -> int:
    """How many seeds every model of a design was trained at (a pair, or a set of variants, is only whole where
    each of its models has that seed): the pairs a study has for a claim."""
    by_label: dict[str, set] = {}
    for run in runs:
        tag = run["tag"]
        by_label.setdefault(str(tag.get("label", tag.get("norm"))), set()).add(tag["seed"])
    return len(set.intersection(*by_label.values())) if by_label else 0


def gpu_run(study: GpuStudy, finding: Finding, *, pairs: int, registered: int | None) -> Run:
    """The GPU study's run on a claim, labelled with the study, carrying its code caveat, its pairs and the pairs
    the design registers for it to answer."""
    return Run(
        study.label,
        finding,
        scale=1,
        pairs=pairs,
        registered_pairs=registered,
        caveat=study.code_caveat,
        identified=study.code_identified,
    )


def this_build(where: str, finding: Finding) -> Run:
    """This build's run on a claim: the smaller scale, which answers where no GPU study meets its pairs."""
    return Run(where, finding, scale=0)


def none_committed(experiment: str, studies: list[GpuStudy]) -> str:
    """The one sentence a chapter shows when no committed study has its experiment."""
    if not studies:
        return (
            "No GPU study is committed under `data/` (`python -m normlab.study.gpu`), so the verdicts above are this "
            "run's alone."
        )
    names = ", ".join(s.source for s in studies)
    return (
        f"The committed GPU study ({names}) did not finish the `{experiment}` experiment (listed as missing), so "
        "the verdicts above are this run's alone."
    )


# ---- the chapters' claims, each judged by the chapter's own functions -------------------------------------


def this_run(profile: str) -> str:
    from normlab.runtime.environment import cpu_model, git_commit

    commit = (git_commit() or "unknown")[:12]
    return f"this run ({cpu_model()}, {os.cpu_count()} cores, profile {profile}, commit {commit})"
