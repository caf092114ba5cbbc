"""The torch releases normlab runs on (torch_range.toml beside this file), and the refusal of an older one.

`require_supported_torch()` runs first thing at `import normlab`, before any module touches an API that an older
torch lacks, so a torch below the range is one line naming the range rather than an AttributeError from deep inside
a backend. A torch newer than the newest tested one is let through: nothing known breaks there, and refusing it
would stop a user whom a new torch release has just upgraded.
"""

from __future__ import annotations

import re
from importlib import resources

import tomllib
import torch

RANGE = tomllib.loads(resources.files("normlab.norms").joinpath("torch_range.toml").read_text())


def release(version: str) -> tuple[int, int, int]:
    """(major, minor, patch) of a torch version string, without its local part or pre-release tag (2.6.0+cu124,
    2.16.0a0+git1234 → (2, 16, 0)): a nightly of the next release counts as that release."""
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version)
    if match is None:
        raise ValueError(f"not a torch version: {version!r}")
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


def minor(version: str) -> str:
    """'2.6.0' → '2.6': the range is stated in minor releases, as torch's own support matrix is."""
    return ".".join(map(str, release(version)[:2]))


OLDEST, NEWEST = (minor(v) for v in (min(RANGE["torch"], key=release), max(RANGE["torch"], key=release)))


def tested_range() -> str:
    """How the range is written everywhere a reader sees it: 'torch 2.6 to 2.15 on Python 3.11 and 3.12'."""
    pythons = RANGE["pythons"]
    return f"torch {OLDEST} to {NEWEST} on Python {', '.join(pythons[:-1])} and {pythons[-1]}"


class UnsupportedTorch(ImportError):
    """A torch older than the oldest release normlab is tested on."""


def require_supported_torch(version: str | None = None) -> None:
    """Refuse, in one line, a torch older than the range (the installed one unless `version` is given)."""
    found = torch.__version__ if version is None else version
    if release(found)[:2] < release(OLDEST)[:2]:
        raise UnsupportedTorch(
            f"normlab needs torch {OLDEST} or newer (tested: {tested_range()}); this environment has torch {found}. "
            f"Upgrade it: pip install 'torch>={OLDEST}'"
        ) from None
