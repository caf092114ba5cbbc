"""This machine's pool under run_parallel: a worker that dies is replaced, and its jobs are retried like failed
ones; every job's result says where it ran."""

from cluster_jobs import always_fails, kills_its_worker_once, square
from normlab.runtime.parallel import run_parallel


def test_a_job_that_kills_its_worker_once_is_retried_in_a_fresh_pool_and_the_others_finish(tmp_path):
    marker = tmp_path / "killed"
    jobs = [dict(marker=str(marker), x=x) for x in range(1, 5)]
    outputs = run_parallel(kills_its_worker_once, jobs, workers=2, missing="keep")
    assert marker.exists()  # one worker did die
    assert list(outputs) == [1, 4, 9, 16] and not outputs.missing
    assert outputs.where == "in this machine's pool"


def test_a_job_that_always_fails_in_the_pool_is_missing_while_the_others_finish():
    outputs = run_parallel(
        _fails_on_two, [dict(x=x) for x in (1, 2, 3)], workers=2, retries=1, missing="keep", names=["a", "b", "c"]
    )
    assert outputs[0] == 1 and outputs[2] == 9 and list(outputs.missing) == ["b"]


def _fails_on_two(x: int) -> int:
    return always_fails(x) if x == 2 else square(x)
