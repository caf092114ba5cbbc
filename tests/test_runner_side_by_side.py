"""The runner's schedule: the chapters that time nothing run two at a time in runner processes, each after the
chapters it reads, every other chapter alone; after a failure nothing more starts and the running ones finish."""

import subprocess
import sys

from normlab.study import run

CHAPTERS = ["ecosystem", "geometry", "jacobians", "depth", "gain", "realmodels", "quality"]


class FakeRunners:
    """Runner processes that sleep (and exit with `codes[name]`); for each chapter, which others were alive when it
    started, and where it ran."""

    def __init__(self, seconds: dict[str, float], codes: dict[str, int] | None = None):
        self.seconds, self.codes = seconds, codes or {}
        self.processes: dict[str, subprocess.Popen] = {}
        self.alive_at_start: dict[str, list[str]] = {}
        self.where: dict[str, str] = {}

    def _alive(self) -> list[str]:
        return sorted(name for name, process in self.processes.items() if process.poll() is None)

    def start_runner(self, name: str) -> subprocess.Popen:
        self.alive_at_start[name], self.where[name] = self._alive(), "runner"
        code = f"import sys, time; time.sleep({self.seconds.get(name, 0.3)}); sys.exit({self.codes.get(name, 0)})"
        self.processes[name] = subprocess.Popen([sys.executable, "-c", code])
        return self.processes[name]

    def run_here(self, name: str) -> int:
        self.alive_at_start[name], self.where[name] = self._alive(), "here"
        return self.codes.get(name, 0)


def test_untimed_chapters_run_two_at_a_time_after_their_inputs_and_the_others_alone():
    runners = FakeRunners({"ecosystem": 1.0, "geometry": 0.3, "jacobians": 0.3, "depth": 1.5, "gain": 0.3})
    assert run.run_chapters(CHAPTERS, runners.run_here, runners.start_runner, poll_seconds=0.05) == 0
    assert [runners.where[name] for name in CHAPTERS] == ["runner"] * 5 + ["here"] * 2
    assert runners.alive_at_start["geometry"] == ["ecosystem"]  # side by side
    assert "geometry" not in runners.alive_at_start["jacobians"]  # it reads geometry's results
    assert all(len(runners.alive_at_start[name]) < run.SIDE_BY_SIDE for name in run.UNTIMED)
    assert runners.alive_at_start["realmodels"] == [] and runners.alive_at_start["quality"] == []


def test_after_a_failure_nothing_starts_and_the_running_chapter_finishes():
    runners = FakeRunners({"geometry": 0.2, "jacobians": 1.0, "depth": 0.2}, codes={"depth": 1})
    assert run.run_chapters(CHAPTERS, runners.run_here, runners.start_runner, poll_seconds=0.05) == 1
    assert set(runners.where) == {"ecosystem", "geometry", "jacobians", "depth"}
    assert all(process.poll() is not None for process in runners.processes.values())  # none left running


def test_without_runners_or_with_one_untimed_chapter_everything_runs_here_in_order():
    order = []
    assert run.run_chapters(CHAPTERS, lambda name: order.append(name) or 0, None) == 0
    assert order == CHAPTERS
    runners = FakeRunners({})
    assert run.run_chapters(["depth", "quality"], runners.run_here, runners.start_runner) == 0
    assert runners.where == {"depth": "here", "quality": "here"}
