"""Benchmark harness: the norms against the memory limit, measured as a same-size copy.

    python -m normlab.bench --profile cpu

`harness.run(profile)` times every case of a profile and returns a results
document; `report` turns it into tables and LN/RMS ratios; `traffic` is the
bytes-moved model; `passes` counts the passes implementations really make.
"""

from normlab.bench.harness import load, run, save
from normlab.bench.profiles import DTYPES, PROFILES

__all__ = ["DTYPES", "PROFILES", "load", "run", "save"]
