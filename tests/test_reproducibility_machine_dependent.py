"""The reproducibility page sets the key number of a verdict the design marks as depending on the machine (Q5's
share of time) beside the committed builds'."""

from types import SimpleNamespace

from normlab.analysis.realmodels.forward_time import Q5_KEY
from normlab.study.pages.reproducibility import machine_dependent_section, render_reproducibility


def run(commit, prefill, decode, verdict, cpu="Intel Xeon"):
    record = {
        "id": "Q5",
        "verdict": verdict,
        "key_number": prefill,
        **Q5_KEY.fields(),
        "evidence": {"norm_time_share_prefill": prefill, "norm_time_share_decode": decode},
    }
    return {
        "notebook": "realmodels",
        "profile": "cpu",
        "hardware": {"cpu": cpu, "cpu_cores": 2, "gpu": None},
        "versions": {"python": "3.11", "torch": "2.13", "triton": "3.6"},
        "git_commit": commit,
        "started": "s",
        "finished": "f",
        "claims": [record],
    }


def test_this_builds_share_beside_each_committed_build_and_the_uncommitted_one_named():
    committed = SimpleNamespace(
        name="2fea7bb-epyc-avx512",
        machine="AMD EPYC (2 cores)",
        runs=(run("2fea7bb" * 6, 0.016, 0.040, "does not hold"),),
    )
    lines = machine_dependent_section([run("abcdef0" * 6, 0.031, 0.090, "holds with caveats")], [committed])
    text = "\n".join(lines)
    assert "## Q5: a verdict that depends on the machine" in text
    assert "Q5's verdict can change with the machine alone: its key number is a share of the forward time" in text
    assert "| this build | Intel Xeon (2 cores) | `abcdef0` | 3.1% | holds with caveats |" in text
    assert "| `2fea7bb-epyc-avx512` | AMD EPYC (2 cores) | `2fea7bb` | 1.6% | does not hold |" in text
    assert "The key number: norms' share of SmolLM2-135M's prefill time." in text
    # the Xeon number is quoted as the design registers it, as not read from a file
    assert "From a build that was not committed: issue 55 reports" in text and "9.0%" in text


def test_no_q5_record_no_section_and_the_page_renders_without_builds():
    assert machine_dependent_section([], []) == []
    page = render_reproducibility([run("abcdef0" * 6, 0.031, 0.090, "holds with caveats")])
    assert "| this build |" in page
