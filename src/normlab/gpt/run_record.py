"""The one record of a training run, and the one meaning of "diverged".

Every chapter's trainings (`normlab.analysis.shared.runs.train_job`, the landscape chapter's `landscape_run`) turn
a `TrainResult` into `run_record(result)`, so that a run means the same in each of them:

- **diverged**: training stopped on a non-finite loss or gradient, or the final validation loss is not finite,
  or it ends above the initial one (the run blew up without overflowing: worse than the untrained model). The
  methods page (book/methods.md) states this rule for the reader.
- **final_drop**: the validation loss at 90% of the steps minus at the end (nats), how much it still fell at the
  end: near zero for a run that has flattened, large for one cut short. It needs an evaluation at 90% of the
  run (an evaluation every tenth of the steps); NaN without one, and for a diverged run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def diverged(stopped_on_non_finite: bool, val_losses: Sequence[float]) -> bool:
    """The study's one rule: stopped on a non-finite value, a non-finite final loss, or a final loss above the
    initial one."""
    if stopped_on_non_finite or not val_losses:
        return bool(stopped_on_non_finite)
    final = float(val_losses[-1])
    return not math.isfinite(final) or final > float(val_losses[0])


def final_drop(val: Sequence[tuple[int, float]], steps: int) -> float:
    """Validation loss at 90% of the run minus at its end (nats); NaN when either evaluation is missing."""
    at = dict(val)
    mark = int(round(0.9 * steps))
    return float(at[mark] - at[steps]) if mark in at and steps in at else math.nan


def run_record(result) -> dict:
    """What every reader of a run needs from a `TrainResult`: final and initial validation loss, final_drop,
    diverged, steps done, the validation curve as (step, loss) pairs and the corpus checksum."""
    val = [(int(row["step"]), float(row["val_loss"])) for row in result.val_rows]
    losses = [loss for _, loss in val]
    failed = diverged(bool(result.diverged), losses)
    return {
        "final_val_loss": losses[-1] if losses else math.nan,
        "initial_val_loss": losses[0] if losses else math.nan,
        "final_drop": math.nan if failed else final_drop(val, int(result.train_config["steps"])),
        "diverged": failed,
        "steps_done": int(result.steps_done),
        "val": val,
        "corpus_sha256": result.corpus_sha256,
    }
