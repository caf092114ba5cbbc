"""This machine's pool under run_parallel: a worker that dies is replaced and its jobs are retried like failed
ones, the weights a job keeps come back as a file, bit-identical to a run in place, and the workers serve the next
call too, unless a call was interrupted."""

import pytest
import torch

from cluster_jobs import always_fails, kept_weights, kills_its_worker_once, square, waits_for, worker_pid
from normlab.runtime import parallel
from normlab.runtime.jobs import load_weights
from normlab.runtime.parallel import run_parallel


def test_a_worker_that_dies_is_replaced_and_kept_weights_come_back_as_files_with_the_same_bits(tmp_path):
    marker = tmp_path / "killed"
    # One pool for both checks: on a loaded 2-core machine each start of its workers costs seconds.
    pool = run_parallel(kills_its_worker_once, [dict(marker=str(marker), seed=s) for s in (0, 1)], workers=2)
    assert marker.exists() and not pool.missing  # a worker did die, and every job still finished
    assert pool.where == "in this machine's pool"
    alone = run_parallel(kept_weights, [dict(seed=0)], workers=1)
    assert "state_dict" not in pool[0] and pool[0]["weights_path"] != alone[0]["weights_path"]
    assert repr({k: v for k, v in pool[0].items() if k != "weights_path"}) == repr(
        {k: v for k, v in alone[0].items() if k != "weights_path"}
    )
    from_pool, in_place = load_weights(pool[0]["weights_path"]), load_weights(alone[0]["weights_path"])
    assert from_pool.keys() == in_place.keys()
    assert all(torch.equal(from_pool[name], in_place[name]) for name in in_place)  # the same bits
    other_seed = load_weights(pool[1]["weights_path"])["token_embedding.weight"]
    assert not torch.equal(from_pool["token_embedding.weight"], other_seed)


def test_a_job_that_always_fails_is_missing_while_the_others_finish():
    outputs = run_parallel(
        _fails_on_two, [dict(x=x) for x in (1, 2, 3)], workers=1, retries=1, missing="keep", names=["a", "b", "c"]
    )
    assert outputs[0] == 1 and outputs[2] == 9 and list(outputs.missing) == ["b"]
    assert outputs.missing["b"].errors == ("RuntimeError: job 2 fails every time",) * 2


def test_weights_written_on_another_machine_are_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="NORMLAB_WEIGHTS_DIR to a folder every node of the cluster shares"):
        load_weights(str(tmp_path / "elsewhere.pt"))


def _fails_on_two(x: int) -> int:
    return always_fails(x) if x == 2 else square(x)


def test_the_next_call_reuses_the_workers_and_an_interrupted_call_retires_them(tmp_path, monkeypatch):
    first = set(run_parallel(worker_pid, [dict(x=x) for x in range(4)], workers=2))
    workers = set(
        parallel._pools[parallel._pool_key(2, None)]._pool._processes
    )  # one worker may take every job of a call
    second = set(run_parallel(worker_pid, [dict(x=x) for x in range(4)], workers=2))
    assert first <= workers and second <= workers  # no new processes for the second call

    marker = tmp_path / "go"
    real_wait = parallel.wait

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(parallel, "wait", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_parallel(waits_for, [dict(marker=str(marker), x=x) for x in range(2)], workers=2)
    monkeypatch.setattr(parallel, "wait", real_wait)
    marker.write_text("go\n")  # the interrupted jobs may now end; the next call must not have waited on them
    after = set(run_parallel(worker_pid, [dict(x=x) for x in range(2)], workers=2))
    assert after.isdisjoint(workers)  # a fresh pool


def test_close_pools_stops_the_kept_workers():
    run_parallel(square, [dict(x=1), dict(x=2)], workers=2)
    kept = list(parallel._pools.values())
    assert kept
    parallel.close_pools()
    assert not parallel._pools
    with pytest.raises(RuntimeError, match="shutdown"):
        kept[0].submit(square, 3)


def test_the_runner_s_last_cell_records_the_modules_and_stops_the_pools(tmp_path):
    # the kernel's shutdown interrupts idle workers, each printing a KeyboardInterrupt traceback to the terminal of
    # `make book`; the cell the runner appends to every chapter stops them first
    from normlab.study import run

    run_parallel(square, [dict(x=1), dict(x=2)], workers=2)
    assert parallel._pools
    record = tmp_path / "modules.json"
    exec(run._record_cell(record).source, {})
    assert not parallel._pools
    assert "normlab.runtime.parallel" in record.read_text()
