"""`python -m normlab.analysis`: run the chapters (`make notebooks`); the runner is `normlab.study.run`.

A thin entry point above the chapters. The runner sits on the floor below them and checks `--set` against each
chapter's sizes per profile before any chapter runs (a typo fails in seconds, not after a long build); it cannot
import the chapters, so this module, which may, hands it their tables.
"""

import sys

from normlab.analysis.depth import profiles as depth
from normlab.analysis.gain import profiles as gain
from normlab.analysis.geometry import settings as geometry
from normlab.analysis.jacobians import profiles as jacobians
from normlab.analysis.landscape import profiles as landscape
from normlab.analysis.quality import profiles as quality
from normlab.analysis.realmodels import profiles as realmodels
from normlab.analysis.speed import settings as speed
from normlab.study import run

# Each chapter's sizes per profile, the table that `--set CHAPTER.KEY=...` must name a key of; the table itself,
# not a copy, so each keeps its one home in its chapter. A chapter not listed (ecosystem) has no sizes to set.
PROFILE_TABLES = {
    "geometry": geometry.PROFILES,
    "jacobians": jacobians.PROFILES,
    "realmodels": realmodels.PROFILES,
    "quality": quality.PROFILES,
    "depth": depth.PROFILES,
    "gain": gain.PROFILES,
    "speed": speed.PROFILES,
    "landscape": landscape.PROFILES,
}


def main(argv: list[str] | None = None) -> int:
    return run.main(argv, profile_tables=PROFILE_TABLES)


if __name__ == "__main__":
    sys.exit(main())
