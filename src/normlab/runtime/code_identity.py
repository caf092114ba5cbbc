"""Which code a results file measured, and whether this tree still has it.

A file written by a run records `code_fingerprint`: each normlab module the run had imported (its path in the
package) with the SHA-256 of its source, as the chapter cache digests them. Read back later, against another tree,
`check_code` lists the measured modules that changed since. A file that carries no fingerprint (written before
files had one) is compared through git instead: `git diff --name-only COMMIT` over the paths it measured. A file
made from a tree with uncommitted changes (its commit ends in `-dirty`) and no fingerprint, a commit this history
lacks, or a checkout without git (a tarball): the code it ran cannot be identified, and `caveat` says so.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

FINGERPRINT_KEY = "code_fingerprint"
# The package paths each kind of committed file exercised, compared through git for a file without a fingerprint.
BENCH_CODE = ("norms", "bench")  # the speed bench: the norms (dispatch and backends) and the harness timing them
# What the sentences call a changed module, by the first prefix of its path in the package that matches.
AREAS = (
    ("norms/backends/triton/", "the Triton kernels"),
    ("norms/backends/", "the other norm backends"),
    ("norms/", "the norm library"),
    ("bench/", "the benchmark harness"),
    ("gpt/", "the GPT testbed"),
    ("analysis/", "the chapters' analysis"),
    ("study/", "the study's runner"),
    ("runtime/", "the runtime helpers"),
)


def package_dir() -> Path:
    return Path(__file__).resolve().parents[1]


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def loaded_source(package: Path | None = None) -> dict[str, str]:
    """Path in the package -> SHA-256, for every normlab module imported now: the code this run is running."""
    package = Path(package or package_dir())
    fingerprint = {}
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if not file or not (name == "normlab" or name.startswith("normlab.")):
            continue
        try:
            relative = Path(file).resolve().relative_to(package).as_posix()
        except ValueError:
            continue  # a normlab imported from elsewhere than this package
        digest = _digest(package / relative)
        if digest is not None:
            fingerprint[relative] = digest
    return dict(sorted(fingerprint.items()))


def changed_files(fingerprint: dict[str, str], package: Path | None = None) -> list[str]:
    """The fingerprinted modules whose source in this tree differs from what was run, or that are gone."""
    package = Path(package or package_dir())
    return sorted(relative for relative, digest in fingerprint.items() if _digest(package / relative) != digest)


def git_changed_files(
    commit: str, measured: Sequence[str] = (), package: Path | None = None, *, until: str | None = None
) -> list[str] | None:
    """The files under `measured` (paths below `package`; all of them when empty) that differ between `commit` and
    `until` (another commit; None: this working tree), relative to `package`; None when that cannot be told: no
    git, not a checkout, or a commit this history lacks."""
    package = Path(package or package_dir())
    try:
        done = subprocess.run(
            ["git", "diff", "--name-only", "--relative", commit, *([until] if until else []), "--", *measured],
            cwd=package,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):  # no git on this machine, or one that hangs
        return None
    if done.returncode != 0:
        return None
    return sorted(line for line in done.stdout.splitlines() if line.strip())


def area(relative: str) -> str:
    return next((name for prefix, name in AREAS if relative.startswith(prefix)), f"`{relative}`")


@dataclass(frozen=True)
class CodeCheck:
    """A results file's code against this tree: the measured modules that changed since, or why none can be named."""

    commit: str  # the short commit the file names, with its '-dirty' mark
    changed: tuple[str, ...] = ()
    unidentified: str | None = None  # why the code it ran cannot be identified

    @property
    def caveat(self) -> str | None:
        """'measured at 12a0522; since then 13 files of the Triton kernels changed, not yet re-measured', or None
        when the file measured this tree's code."""
        if self.unidentified:
            return f"measured at {self.commit}: {self.unidentified}; not yet re-measured on this tree"
        if not self.changed:
            return None
        order = [name for _, name in AREAS]
        areas = sorted(
            {area(relative) for relative in self.changed},
            key=lambda a: (a not in order, order.index(a) if a in order else 0, a),
        )
        named = areas[0] if len(areas) == 1 else ", ".join(areas[:-1]) + " and " + areas[-1]
        count = len(self.changed)
        return f"measured at {self.commit}; since then {count} file{'s' if count != 1 else ''} of {named} changed, not yet re-measured"


def short_commit(commit) -> str:
    if not commit:
        return "an unknown commit"
    commit = str(commit)
    return commit[:7] + ("-dirty" if commit.endswith("-dirty") else "")


def check_code(document: dict, measured: Sequence[str], package: Path | None = None) -> CodeCheck:
    """`document`'s code against this tree. Its fingerprint decides where it has one; otherwise git, over the paths
    in the package it `measured` (`("norms/backends/triton", "bench")` for the speed bench)."""
    commit = str(document.get("git_commit") or "")
    short = short_commit(commit or None)
    fingerprint = document.get(FINGERPRINT_KEY)
    if fingerprint is not None:
        if not isinstance(fingerprint, dict) or not fingerprint:
            return CodeCheck(
                short,
                unidentified=f"its {FINGERPRINT_KEY} lists no modules with hashes, so the code it ran cannot be identified",
            )
        return CodeCheck(short, changed=tuple(changed_files(fingerprint, package)))
    if not commit:
        return CodeCheck(
            short, unidentified="recording neither a commit nor a fingerprint, the code it ran cannot be identified"
        )
    if commit.endswith("-dirty"):
        return CodeCheck(
            short,
            unidentified="made from a tree with uncommitted changes and carrying no fingerprint, the code it ran "
            "cannot be identified",
        )
    changed = git_changed_files(commit, measured, package)
    if changed is None:
        return CodeCheck(
            short,
            unidentified="carrying no fingerprint, and with no git history here holding that commit, the code it "
            "ran cannot be identified",
        )
    return CodeCheck(short, changed=tuple(changed))
