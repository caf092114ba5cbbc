"""Results written as they are made: one JSON record per line, flushed, so a run cut short keeps what it finished.

A GPU machine is lent for minutes and a step that overruns its limit is killed: a results file written only
at the end of a step would then be lost whole. `JsonLines` appends each record the moment it exists;
`read_json_lines` reads back every complete line (a line cut off mid-write by the kill is dropped).
"""

from __future__ import annotations

import json
import math
from pathlib import Path


def _finite_or_none(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no NaN; a non-finite number is recorded as missing
    if isinstance(value, dict):
        return {k: _finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_none(v) for v in value]
    return value


class JsonLines:
    """Append records to `path` (a new file), one line each, flushed after every record."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "w", encoding="utf-8")

    def write(self, record: dict) -> None:
        self._file.write(json.dumps(_finite_or_none(record), allow_nan=False) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> JsonLines:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_json_lines(path: str | Path) -> list[dict]:
    records = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # the last line, cut off by a kill mid-write
    return records
