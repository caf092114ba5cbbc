"""The one profile lookup: a design's sizes for one profile, copied, overridden and checked.

Every chapter's sizes (`normlab.analysis.<chapter>.profiles`) are tables of profile name -> settings dict.
`lookup_profile` is how each of them is read, so that each does the same four things:

- it reads the settings a table names but does not hold (`ReadAtLookup`: the pairs data/design.toml registers, say),
  so that importing a chapter reads nothing;
- it hands out a deep copy, so a notebook that edits its settings never edits the table;
- it applies the overrides given on the command line (`make book SET=quality.width=768,quality.seeds=24`), after
  the copy and before the checks, so an overridden design is checked like a committed one;
- outside the pilot profile (smoke), it refuses fewer pairs than a paired verdict
  needs, naming the setting.

An override names a setting by its key, or a nested one by a dotted path (`small_train.steps`). A key the
design does not have is refused, listing the keys it has: a typo must not run the committed design silently.
"""

from __future__ import annotations

import ast
import copy
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

PILOT_PROFILES = ("smoke",)  # sized to prove the pipeline, never to decide a claim


@dataclass(frozen=True)
class ReadAtLookup:
    """A setting a profile table names but does not hold: `read(profile)` is its value, read when a profile is
    looked up (`lookup_profile`), never when the table's module is imported. `source` says where the value lives
    (`design.pairs("quality:seeds")`), for a reader of the table. An override replaces the value read."""

    source: str
    read: Callable[[str], object]

    def __repr__(self) -> str:
        return f"<{self.source}, read at lookup>"


def _read_at_lookup(value, profile: str):
    """`value` with every `ReadAtLookup` in it, nested dicts included, replaced by its value at `profile`."""
    if isinstance(value, ReadAtLookup):
        return value.read(profile)
    if isinstance(value, Mapping):
        return {key: _read_at_lookup(inner, profile) for key, inner in value.items()}
    return value


def setting_keys(settings: Mapping) -> list[str]:
    """Every key an override may name: the top-level keys and, for nested dicts, their dotted paths."""
    keys = []
    for key, value in settings.items():
        keys.append(key)
        if isinstance(value, Mapping):
            keys += [f"{key}.{inner}" for inner in setting_keys(value)]
    return keys


def check_overrides(table: Mapping[str, Mapping], overrides: Mapping | None, owner: str) -> None:
    """Refuse an override whose key no profile of `table` has, listing the keys it has."""
    known = {key for settings in table.values() for key in setting_keys(settings)}
    unknown = sorted(set(overrides or {}) - known)
    if unknown:
        raise ValueError(
            f"{owner} has no setting {', '.join(map(repr, unknown))} to override; its settings are: "
            f"{', '.join(sorted(known))}"
        )


def _parent(settings: dict, path: str) -> tuple[dict, str]:
    """The dict that holds the setting at dotted `path`, and its key there."""
    *parents, last = path.split(".")
    for parent in parents:
        settings = settings[parent]
    return settings, last


def lookup_profile(
    table: Mapping[str, Mapping],
    profile: str,
    *,
    owner: str,
    overrides: Mapping | None = None,
    minimum_pairs: Mapping[str, int] | None = None,
) -> dict:
    """`table[profile]` as a deep copy, its `ReadAtLookup` settings read, with `overrides` applied, and each setting
    of `minimum_pairs` checked against its least count outside the pilot profiles. `owner` ("the quality chapter")
    names the design in errors.
    """
    if profile not in table:
        raise ValueError(f"unknown profile {profile!r}; valid profiles: {', '.join(table)} ({owner})")
    check_overrides({profile: table[profile]}, overrides, owner)
    settings = copy.deepcopy(_read_at_lookup(dict(table[profile]), profile))
    for path, value in (overrides or {}).items():
        holder, key = _parent(settings, path)
        holder[key] = copy.deepcopy(value)
    if profile not in PILOT_PROFILES:
        for key, least in (minimum_pairs or {}).items():
            holder, last = _parent(settings, key)
            if holder[last] < least:
                raise ValueError(
                    f"{owner}: {key} is {holder[last]} at profile {profile!r}, but a paired verdict needs at least "
                    f"{least} pairs outside the pilot profile ({', '.join(PILOT_PROFILES)}); raise {key}"
                )
    return settings


# A SET= item is CHAPTER.KEY=VALUE; items are comma-separated, and a comma inside a list value ([2,4,8]) is not
# followed by another CHAPTER.KEY=, which is how the split tells them apart.
_ITEM_START = re.compile(r",(?=\s*[A-Za-z_]\w*\.[A-Za-z_][\w.]*\s*=)")
_ITEM = re.compile(r"\s*([A-Za-z_]\w*)\.([A-Za-z_][\w.]*)\s*=(.*)", re.DOTALL)


def _value(text: str):
    """A Python literal (24, 3e-3, [2, 4], True) where the text is one, else the text itself ("pool")."""
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, SyntaxError):
        return text.strip()


def parse_overrides(text: str) -> dict[str, dict]:
    """`"quality.width=768,quality.seeds=24"` -> `{"quality": {"width": 768, "seeds": 24}}`."""
    parsed: dict[str, dict] = {}
    for item in _ITEM_START.split(text.strip()) if text.strip() else []:
        match = _ITEM.fullmatch(item)
        if not match or not match.group(3).strip():
            raise ValueError(
                f"cannot read the override {item.strip()!r}: write CHAPTER.KEY=VALUE, items separated by commas, "
                f"e.g. SET=quality.width=768,quality.seeds=24"
            )
        chapter, key, value = match.groups()
        parsed.setdefault(chapter, {})[key] = _value(value)
    return parsed
