"""A chapter's results file lists every machine its parallel jobs ran on, and the reproducibility page shows the
ones that differ from the machine that ran the notebook."""

from cluster_jobs import square
from normlab.runtime.environment import hardware
from normlab.runtime.jobs import job_provenance, note_machines
from normlab.runtime.parallel import run_parallel
from normlab.study import Results
from normlab.study.pages.reproducibility import render_reproducibility

# Another machine's GPU and torch, never this machine's: on an H200 with torch 2.11.0 (in the supported range) a fixed
# "NVIDIA H200" and "2.11.0" would name this very machine, and the page rightly lists no other machine.
GPUS = ("NVIDIA H200", "NVIDIA H100 80GB HBM3")
TORCHES = ("2.11.0", "2.12.0")


def another(this, candidates):
    return next(value for value in candidates if value != this)


def test_the_results_file_lists_each_machine_once_with_its_jobs(tmp_path):
    results = Results("quality", "smoke", tmp_path)
    run_parallel(square, [dict(x=x) for x in range(3)], workers=1)
    run_parallel(square, [dict(x=x) for x in range(2)], workers=1)  # a second map, on the same machine
    elsewhere = {**job_provenance("cuda:1"), "host": "node-b", "hardware": {**hardware(), "gpu": "NVIDIA H200"}}
    note_machines([elsewhere, elsewhere, None])  # as a cluster's map returns them, a missing job among them
    machines = results.to_dict()["machines"]
    here = {key: value for key, value in job_provenance("cpu").items() if key != "device"}
    assert machines == [{**here, "jobs": 5}, {**{k: v for k, v in elsewhere.items() if k != "device"}, "jobs": 2}]
    assert "cpp_kernel_build" in machines[0]["hardware"] and machines[0]["torch"]
    assert Results("gain", "smoke", tmp_path).to_dict()["machines"] == []  # counted from each chapter's start


def test_the_reproducibility_page_shows_only_the_machines_that_differ(tmp_path):
    results = Results("quality", "smoke", tmp_path)
    run_parallel(square, [dict(x=1)], workers=1)
    alone = results.to_dict()
    page = render_reproducibility([alone])
    assert "Jobs run on other machines" not in page
    gpu, torch = another(alone["hardware"]["gpu"], GPUS), another(alone["versions"]["torch"], TORCHES)
    other = {"host": "node-b", "hardware": {**alone["hardware"], "gpu": gpu}, "torch": torch, "jobs": 7}
    page = render_reproducibility([{**alone, "machines": [*alone["machines"], other]}])
    section = page.split("## Jobs run on other machines", 1)[1]
    assert "| quality | node-b |" in section and gpu in section and f"| {torch} | 7 |" in section
    assert section.count("| quality |") == 1  # the notebook's own machine is not listed again
