"""run_parallel on a Dask cluster beside this machine's pool: the same results, retries, missing jobs by name,
the corpus check, and the refusals (no scheduler, no GPU worker) that come before any job runs."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

distributed = pytest.importorskip("distributed")

from cluster_jobs import always_fails, build_other_corpus, dies_once, records_the_run, square, tiny_training  # noqa: E402
from normlab.gpt import corpus as corpus_module  # noqa: E402
from normlab.runtime import cluster  # noqa: E402
from normlab.runtime.parallel import MissingRun, MissingRuns, run_parallel  # noqa: E402

TESTS = str(Path(__file__).parent)


@pytest.fixture(scope="module")
def client():
    # Two single-threaded worker processes, as the local pool has on this machine.
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as local,
        distributed.Client(local) as connected,
    ):
        connected.run(sys.path.insert, 0, TESTS)  # the workers import cluster_jobs by name
        yield connected


def test_the_local_pool_and_a_dask_cluster_give_byte_identical_trainings(client):
    jobs = [dict(seed=seed) for seed in range(2)]
    pool = run_parallel(tiny_training, jobs, workers=2)
    dask = run_parallel(tiny_training, jobs, executor=client)
    assert repr(list(dask)) == repr(list(pool))  # repr spells every float in full: equal text, equal bits
    assert pool[0]["val"] != pool[1]["val"]  # the seeds differ, so equality is not of two copies of one run
    assert {p["host"] for p in dask.provenance} == {os.uname().nodename}
    assert all("cpp_kernel_build" in p["hardware"] and p["torch"] for p in dask.provenance + pool.provenance)


def test_a_job_whose_worker_dies_once_is_sent_again_and_gives_the_same_result(client, tmp_path):
    marker = tmp_path / "died"
    again = run_parallel(dies_once, [dict(marker=str(marker), x=1)], executor=client)
    assert marker.exists()  # it did die once
    assert repr(again[0]) == repr(tiny_training(1)) and not again.missing


def test_a_job_failing_every_time_is_missing_by_name_while_the_others_finish(client):
    names = ["first", "fails", "third"]
    jobs = [dict(x=1), dict(x=2), dict(x=3)]
    kept = run_parallel(_mixed_job, jobs, executor=client, names=names, missing="keep")
    assert kept[0] == 1 and kept[2] == 9
    assert list(kept.missing) == ["fails"] and isinstance(kept[1], MissingRun)
    assert len(kept[1].errors) == 3 and "job 2 fails every time" in kept[1].errors[-1]  # tried 1 + 2 times
    with pytest.raises(MissingRuns, match=r"1 of 3 jobs failed every attempt(.|\n)*fails: RuntimeError") as raised:
        run_parallel(_mixed_job, jobs, executor=client, names=names)
    assert raised.value.results[0] == 1 and raised.value.results[2] == 9


def _mixed_job(x: int) -> int:
    return always_fails(x) if x == 2 else square(x)


def test_the_local_pool_also_retries_and_reports_the_missing_job():
    kept = run_parallel(always_fails, [dict(x=5)], workers=1, retries=1, missing="keep", names=["only"])
    assert kept.missing["only"].errors == ("RuntimeError: job 5 fails every time",) * 2


def test_a_worker_with_other_corpus_bytes_refuses_naming_both_hashes(client, tmp_path):
    for name in corpus_module.STDLIB_MODULES:
        (tmp_path / f"{name}.py").write_bytes(corpus_module.module_source(name).read_bytes() + b"# another Python\n")
    ours = corpus_module.load_corpus().sha256
    # a worker an earlier test killed may still be restarting: one that joins after client.run keeps its own corpus
    client.wait_for_workers(n_workers=2, timeout=60)
    client.run(build_other_corpus, str(tmp_path))
    try:
        # no corpus named: the job carries the study corpus this process loaded
        kept = run_parallel(tiny_training, [dict(seed=0)], executor=client, missing="keep")
    finally:
        client.run(build_other_corpus, None)
    (error,) = set(kept[0].errors)
    theirs = corpus_module.build_corpus(
        [(n, (tmp_path / f"{n}.py").read_bytes()) for n in corpus_module.STDLIB_MODULES]
    ).sha256
    assert "CorpusMismatch" in error and ours in error and theirs in error and ours != theirs


def test_the_right_corpus_passes_the_check_and_a_named_other_one_is_refused(client):
    ours = corpus_module.load_corpus().sha256
    kept = run_parallel(tiny_training, [dict(seed=0)], executor=client, corpus_sha256="0" * 64, missing="keep")
    assert f"sent to train on the corpus with SHA-256 {'0' * 64}, but this machine" in kept[0].errors[0]
    assert (
        run_parallel(tiny_training, [dict(seed=0)], executor=client, corpus_sha256=ours)[0]["val"]
        == tiny_training(0)["val"]
    )


def test_gpu_jobs_on_a_cluster_without_a_gpu_worker_are_refused_before_any_job_runs(client, tmp_path):
    marker = tmp_path / "ran"
    with pytest.raises(RuntimeError, match="no worker of the cluster at tcp://.* offers one"):
        run_parallel(records_the_run, [dict(marker=str(marker))], executor=client, devices=["cuda:0"])
    assert not marker.exists()


def test_an_unreachable_scheduler_is_an_error_within_seconds_naming_it(monkeypatch):
    monkeypatch.setenv(cluster.SCHEDULER_VARIABLE, "tcp://127.0.0.1:9")
    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT_S", 2)
    started = time.perf_counter()
    with pytest.raises(ConnectionError, match=r"no Dask scheduler answered at tcp://127\.0\.0\.1:9 within 2 s"):
        run_parallel(square, [dict(x=1), dict(x=2)])  # never the local pool's [1, 4]
    assert time.perf_counter() - started < 8


def test_a_scheduler_file_that_does_not_exist_is_named(monkeypatch, tmp_path):
    monkeypatch.setenv(cluster.SCHEDULER_VARIABLE, str(tmp_path / "scheduler.json"))
    with pytest.raises(FileNotFoundError, match="scheduler.json names a scheduler file that does not exist"):
        run_parallel(square, [dict(x=1)])


def test_the_local_pool_imports_nothing_of_dask():
    code = (
        "import sys\n"
        "from normlab.runtime.parallel import run_parallel\n"
        "from cluster_jobs import square\n"
        "assert run_parallel(square, [dict(x=2), dict(x=3)], workers=2) == [4, 9]\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('distributed', 'dask')))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != cluster.SCHEDULER_VARIABLE}
    env["PYTHONPATH"] = os.pathsep.join([TESTS, *sys.path])
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_on_a_cluster_the_gpu_profile_asks_for_its_gpu_workers_not_this_machines(monkeypatch):
    from normlab.analysis.shared.runs import training_devices

    monkeypatch.setenv(cluster.SCHEDULER_VARIABLE, "tcp://scheduler:8786")
    assert training_devices("gpu") == ["cuda:0"] and training_devices("cpu") is None
