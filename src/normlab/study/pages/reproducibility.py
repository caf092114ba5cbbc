"""The reproducibility page: what each chapter ran on, at which commit, and how this build compares with builds
committed from other machines (`normlab.study.builds`)."""

from __future__ import annotations

from normlab.runtime.environment import machine_name
from normlab.study.pages.markdown import cell, warning_box
from normlab.study.results import checked_commit


def instruction_set(run: dict) -> str:
    """'AVX2; C++ kernel g++ 12.2.0, -march=native = znver3': what decides whether two machines ran the same code."""
    hw = run["hardware"]
    isa, build = hw.get("cpu_instruction_set"), hw.get("cpp_kernel_build")
    if not isa:
        return "not recorded"
    text = isa["torch_cpu_capability"]
    if build and build.get("compiler"):
        version = (build.get("compiler_version") or "").split()[-1:]
        text += f"; C++ kernel {build['compiler']} {' '.join(version)}, -march=native = {build.get('native_arch')}"
    return text


def other_machines_of(run: dict) -> list[dict]:
    """The machines a chapter's jobs ran on (its results' `machines`) whose hardware, C++ kernel build or torch
    differ from those of the machine that ran its notebook; none for a file from before machines were listed."""
    own = (run["hardware"], run["versions"].get("torch"))
    return [m for m in run.get("machines") or [] if (m.get("hardware"), m.get("torch")) != own]


def machines_section(runs: list[dict]) -> list[str]:
    """The table of the machines that ran some of a chapter's jobs and differ from its own; none when none do."""
    rows = [(run["notebook"], machine) for run in runs for machine in other_machines_of(run)]
    if not rows:
        return []
    lines = [
        "## Jobs run on other machines",
        "",
        "Some chapters sent their trainings to a cluster (`NORMLAB_SCHEDULER`), and some of those jobs ran on "
        "machines that differ from the one that ran the chapter's notebook, listed above. A result can differ in its "
        "last bits between such machines: other kernels, or the C++ kernel built for another CPU.",
        "",
        "| notebook | host | hardware | instruction set | torch | jobs |",
        "|---|---|---|---|---|---|",
    ]
    for notebook, machine in rows:
        hardware = machine.get("hardware") or {}
        lines.append(
            f"| {notebook} | {cell(str(machine.get('host')))} | {cell(machine_name(hardware))} "
            f"| {cell(instruction_set({'hardware': hardware}))} | {machine.get('torch')} | {machine.get('jobs')} |"
        )
    return [*lines, ""]


def render_reproducibility(runs: list[dict], *, warning: str | None = None, other_machines: list[str] = ()) -> str:
    """other_machines: the section comparing this build with the committed builds (builds.CrossMachine.render)."""
    lines = [
        "# Reproducibility",
        "",
        *warning_box(warning),
        "Every chapter was executed by papermill for this build. This is what each run was made on. "
        "*Commit* is the commit the chapter ran at; *checked at* is the commit at which the runner last found its "
        "inputs (notebook, parameters, package code, data files, upstream results) unchanged and reused it.",
        "",
        "| notebook | profile | hardware | instruction set | python | torch | triton | commit | checked at | started "
        "| finished |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        v = run["versions"]
        lines.append(
            f"| {run['notebook']} | {run['profile']} | {cell(machine_name(run['hardware']))} | {cell(instruction_set(run))} "
            f"| {v.get('python')} | {v.get('torch')} "
            f"| {v.get('triton')} | `{(run['git_commit'] or 'unknown')[:12]}` | `{str(checked_commit(run))[:12]}` "
            f"| {run['started']} | {run['finished']} |"
        )
    lines += [
        "",
        "To rebuild everything: `make book` (profile `auto`: `gpu` when CUDA is present, else `cpu`), "
        "or `make book PROFILE=smoke` for a quick preview; `make book FORCE=<chapter>` re-runs one chapter. "
        "The corpus and every seed are fixed in the notebooks.",
        "",
        *machines_section(runs),
        *other_machines,
    ]
    return "\n".join(lines).rstrip() + "\n"
