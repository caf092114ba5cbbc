"""The reproducibility page: what each chapter ran on, at which commit, and how this build compares with builds
committed from other machines (`normlab.study.builds`)."""

from __future__ import annotations

from normlab.runtime.environment import machine_name
from normlab.study import design
from normlab.study.key_numbers import KeyNumber
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


def _record(runs, claim_id: str) -> tuple[str, dict | None]:
    """The commit of the run that recorded `claim_id`'s verdict, and the record; ("", None) where none did."""
    for run in runs:
        for record in run.get("claims", []):
            if record["id"] == claim_id and record.get("verdict"):
                return (run.get("git_commit") or "")[:7], record
    return "", None


def machine_dependent_section(runs: list[dict], builds=()) -> list[str]:
    """Each verdict the design marks as depending on the machine (`depends_on_machine`): this build's key number and
    verdict beside each committed build's (`normlab.study.builds.CommittedBuild`), and the numbers reported from
    builds that were not committed (the claim's registered source numbers named `*_elsewhere`)."""
    lines, registered = [], design.load()
    for claim_id, entry in registered.claims.items():
        if not entry.depends_on_machine:
            continue
        rows = [("this build", machine_name(runs[0]["hardware"]) if runs else "—", *_record(runs, claim_id))]
        rows += [(f"`{b.name}`", b.machine, *_record(b.runs, claim_id)) for b in builds]
        rows = [row for row in rows if row[3] is not None]
        if not rows:
            continue
        lines += [
            f"## {claim_id}: a verdict that depends on the machine",
            "",
            f"{claim_id}'s verdict can change with the machine alone: {entry.depends_on_machine}. This build's key "
            "number beside those of the builds committed under `data/builds/`:",
            "",
            "| build | machine | commit | key number | verdict |",
            "|---|---|---|---|---|",
        ]
        for build, machine, commit, record in rows:
            key = KeyNumber.of(record)
            number = "—" if record.get("key_number") is None else key.format(record["key_number"])
            commit_cell = f"`{commit}`" if commit else "—"
            lines.append(f"| {build} | {cell(machine)} | {commit_cell} | {cell(number)} | {record['verdict']} |")
        lines.append("")
        meaning = {r[3].get("meaning") for r in rows} - {None}
        if meaning:
            lines += [f"The key number: {', '.join(sorted(meaning))}.", ""]
        for number in (n for name, n in entry.source_numbers.items() if name.endswith("_elsewhere")):
            lines += [f"From a build that was not committed: {number['where']}.", ""]
    return lines


def render_reproducibility(
    runs: list[dict], *, warning: str | None = None, other_machines: list[str] = (), builds=()
) -> str:
    """other_machines: the section comparing this build with the committed builds (builds.CrossMachine.render);
    builds: the committed builds (builds.load_builds), whose machine-dependent key numbers are set beside this
    build's."""
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
        *machine_dependent_section(runs, builds),
        *other_machines,
    ]
    return "\n".join(lines).rstrip() + "\n"
