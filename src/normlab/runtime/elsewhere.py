"""Results made elsewhere: the one reader of every result this build did not make, with one provenance check.

What it reads, each in the format its maker writes (`kind`):

- `"results"`: a chapter's results file (the results contract): another machine's build, committed as the unchanged
  build/results/*.json of one `make book` under data/builds/<commit>-<machine>/ (`read_build`), and the pilot a
  registered confirmation or decision names, a file of such a build (`claim_record`);
- `"bench"`: a GPU bench, `python -m normlab.bench --profile gpu` on a GPU machine, committed as data/gpu-bench*.json
  (`bench_files`).

The provenance check is the same for both: `git_commit` (hex digits, with '-dirty' where the tree had uncommitted
changes), `profile` (a name) and `hardware` (an object naming a CPU or a GPU) must be there and parse, and
`code_fingerprint`, where a file has one, must be an object of module path -> SHA-256. A file failing it is refused
with a `ProvenanceError` naming the file and the field. Then the format's own fields: a results file's `notebook` and
`claims` (a list of records with an id), a bench file's `schema` and `records`.

Two gaps are accepted with a stated caveat (`Elsewhere.caveats`), never silently: no committed file carries a
`code_fingerprint` (they predate fingerprints), so its code is identified by `git diff` from its commit over the
paths it measured (`Elsewhere.code`, `normlab.runtime.code_identity.check_code`); and a '-dirty' commit leaves the
code it ran unidentifiable, which every verdict it decides says.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from normlab.runtime.code_identity import FINGERPRINT_KEY, CodeCheck, check_code

BENCH_SCHEMA = "normlab.bench/1"  # normlab.bench.harness.SCHEMA (tests/test_elsewhere.py holds them equal)
KINDS = ("results", "bench")
PROVENANCE = ("git_commit", "profile", "hardware")  # then FINGERPRINT_KEY, where a file has one
COMMIT = re.compile(r"[0-9a-f]{4,40}(-dirty)?")
SHA256 = re.compile(r"[0-9a-f]{64}")
FIX = {
    "results": "a result made elsewhere is the unchanged build/results/*.json of one `make book`, each file carrying "
    "its provenance: copy them again from that build, or remove {folder}",
    "bench": "re-run `make gpu-bench` on a GPU machine and commit its output, or remove the file",
}
NO_FINGERPRINT = (
    f"it carries no {FINGERPRINT_KEY} (written before results recorded one), so its code is identified by git "
    "from its commit"
)
DIRTY = "its commit is marked '-dirty' (made from a tree with uncommitted changes), so the code it ran is unidentified"


class ProvenanceError(ValueError):
    """A result made elsewhere that must not be read: its message names the file, the field and the fix."""

    def __init__(self, path: Path, field: str, problem: str, kind: str = "results"):
        self.path, self.field = Path(path), field
        fix = FIX[kind].format(folder=self.path.parent)
        super().__init__(f"{path}: {problem}; {fix}")


@dataclass(frozen=True)
class Elsewhere:
    """One file made elsewhere, its provenance checked."""

    path: Path
    kind: str
    document: dict

    @property
    def commit(self) -> str:
        return self.document["git_commit"]

    @property
    def profile(self) -> str:
        return self.document["profile"]

    @property
    def hardware(self) -> dict:
        return self.document["hardware"]

    @property
    def machine(self) -> str:
        return machine_of(self.document)

    @property
    def fingerprint(self) -> dict | None:
        return self.document.get(FINGERPRINT_KEY)

    @property
    def caveats(self) -> tuple[str, ...]:
        """What its provenance lacks and the reader accepted, in words."""
        return tuple(
            text
            for text, applies in ((NO_FINGERPRINT, self.fingerprint is None), (DIRTY, self.commit.endswith("-dirty")))
            if applies
        )

    def code(self, measured) -> CodeCheck:
        """Its code against this tree's (`measured`: the package paths it ran, for git where it has no fingerprint)."""
        return check_code(self.document, measured)


def machine_of(document: dict) -> str:
    """'AMD EPYC (2 cores), AVX512': what tells two machines apart, from a document's hardware."""
    hardware = document["hardware"]
    text = f"{hardware.get('cpu', '?')} ({hardware.get('cpu_cores', '?')} cores)"
    if hardware.get("gpu"):
        text += f", {hardware['gpu']}"
    capability = (hardware.get("cpu_instruction_set") or {}).get("torch_cpu_capability")
    return text + (f", {capability}" if capability else "")


def _load(path: Path, kind: str) -> dict:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ProvenanceError(path, "", f"not a JSON {kind} file ({error})", kind) from None
    if not isinstance(document, dict):
        raise ProvenanceError(path, "", f"expected a JSON object, found {type(document).__name__}", kind)
    return document


def check_provenance(path: Path, document: dict, kind: str) -> None:
    """The one provenance check: refuse, naming the file and the field, what is missing or does not parse."""
    missing = [key for key in PROVENANCE if document.get(key) in (None, "", {})]
    if missing:
        raise ProvenanceError(path, missing[0], f"lacks {', '.join(missing)}", kind)
    commit = document["git_commit"]
    if not isinstance(commit, str) or not COMMIT.fullmatch(commit):
        raise ProvenanceError(
            path, "git_commit", f"git_commit {commit!r} does not parse as a commit (hex digits, maybe '-dirty')", kind
        )
    if not isinstance(document["profile"], str):
        raise ProvenanceError(path, "profile", f"profile {document['profile']!r} is not a profile's name", kind)
    hardware = document["hardware"]
    if not isinstance(hardware, dict) or not (hardware.get("cpu") or hardware.get("gpu")):
        raise ProvenanceError(path, "hardware", "its hardware names no CPU or GPU", kind)
    fingerprint = document.get(FINGERPRINT_KEY)
    if fingerprint is not None and not (
        isinstance(fingerprint, dict)
        and fingerprint
        and all(isinstance(k, str) and isinstance(v, str) and SHA256.fullmatch(v) for k, v in fingerprint.items())
    ):
        raise ProvenanceError(
            path, FINGERPRINT_KEY, f"its {FINGERPRINT_KEY} is not a list of modules with their SHA-256", kind
        )


def _check_format(path: Path, document: dict, kind: str) -> None:
    if kind == "results":
        if not document.get("notebook"):
            raise ProvenanceError(path, "notebook", "lacks notebook", kind)
        claims = document.get("claims")
        if claims is None:
            raise ProvenanceError(path, "claims", "lacks claims", kind)
        if not isinstance(claims, list) or not all(isinstance(c, dict) and "id" in c for c in claims):
            raise ProvenanceError(path, "claims", "'claims' must be a list of records with an id", kind)
    elif document.get("schema") != BENCH_SCHEMA or not isinstance(document.get("records"), list):
        raise ProvenanceError(path, "schema", f"not a normlab.bench results file (schema {BENCH_SCHEMA!r})", kind)


def read(path: str | Path, kind: str = "results") -> Elsewhere:
    """One file made elsewhere, its provenance and its format checked; a `ProvenanceError` names what fails."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    path = Path(path)
    document = _load(path, kind)
    check_provenance(path, document, kind)
    _check_format(path, document, kind)
    return Elsewhere(path, kind, document)


def read_build(folder: str | Path) -> list[Elsewhere]:
    """A committed build: every results file in `folder`, each read, all of one profile, one commit, one machine."""
    folder = Path(folder)
    files = sorted(folder.glob("*.json"))
    if not files:
        raise ProvenanceError(folder / "*.json", "", "holds no results files")
    runs = [read(path) for path in files]
    first = runs[0]
    for run in runs[1:]:
        for field in ("profile", "git_commit"):
            if run.document[field] != first.document[field]:
                raise ProvenanceError(
                    run.path,
                    field,
                    f"{field} {run.document[field]!r}, but {first.path.name} has {first.document[field]!r}",
                )
        if run.machine != first.machine:
            raise ProvenanceError(run.path, "hardware", f"made on {run.machine}, {first.path.name} on {first.machine}")
    return runs


@lru_cache(maxsize=16)
def _records(path: str) -> dict[str, dict]:
    return {record["id"]: record for record in read(path).document["claims"]}


def claim_record(path: str | Path, claim_id: str) -> dict | None:
    """`claim_id`'s record in a committed results file (a pilot's build), the file read and checked once."""
    return _records(str(Path(path))).get(claim_id)


def bench_files(data_dir: str | Path, pattern: str = "gpu-bench*.json") -> list[Elsewhere]:
    """Every committed GPU bench under `data_dir`, in file-name order, each read and checked."""
    return [read(path, "bench") for path in sorted(Path(data_dir).glob(pattern))]
