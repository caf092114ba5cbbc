"""Which run answers: one verdict from the same rule applied to this run and to the GPU runs.

The articles' speed claims are about GPUs. Each claim function takes this run's cases and, optionally, GPU runs
(`gpu`, `provenance.Measured`s: this run if it ran on a GPU, else every committed one). It judges the claim on
each run by the same rule, and `weigh` makes one verdict of them by the one rule for several runs
(`normlab.analysis.shared.scale_rule`): a GPU run answers where it could measure the claim's cases (its own verdict
is not "not testable here", which in this chapter means no case of the claim was timed there), else this run; of
several GPU runs, the one whose code can be identified, then the one whose code this tree still has, then the
first by file name (`gpu_evidence`'s order), never the newest and never the narrower spread. The answering run's
verdict stands; where another run's own verdict differs, in either direction, it carries a "depends on scale"
caveat naming both (at one scale, "differs between runs at one scale"). Every run is kept in the evidence
(`by_run`) and the summary names the hardware behind every number. A committed run whose code this tree has since
changed, or cannot identify (its `caveat`), carries that caveat to every page that shows a verdict it answers or
puts a caveat on. Two bench files are never pooled, even from one code: a case's time is the median of one
run's repeats, and the harness defines no median across files, so each is its own run, shown beside the others.
`deciding_machine` says the same in the opening page's sentences, and `other_machines` on the chapter.
"""

from __future__ import annotations

import re

from normlab.analysis.shared import scale_rule
from normlab.bench.provenance import Measured
from normlab.runtime.environment import machine_name, this_build
from normlab.study import design
from normlab.study.findings import Finding
from normlab.study.key_numbers import KeyNumber


def as_measured(source) -> Measured:
    """A bare frame (this run, hardware unnamed) or a `Measured` run, as a `Measured`."""
    if isinstance(source, Measured):
        return source
    return Measured(frame=source, hardware="this run", label="this run", on_gpu=False, source="this run")


def gpu_evidence(live: Measured, committed: list[Measured]) -> list[Measured]:
    """The GPU runs the verdicts weigh, in the order the rule ranks them at one scale: this run if it ran on a GPU,
    else every committed GPU run, those whose code can be identified first, then those whose code this tree still
    has, then by file name. None is dropped: each is shown, and the first that could measure a claim answers it."""
    if live.on_gpu:
        return [live]
    gpus = [m for m in committed if m.on_gpu]
    return sorted(gpus, key=lambda m: (not m.code_identified, m.caveat is not None, m.source))


def where(m: Measured) -> str:
    """'the NVIDIA H200 (gpu-bench.json, commit 2253ce8a1b2c)' or "this run's Xeon (2 cores)"."""
    if m.hardware == "this run":
        return "this run"
    if m.source == "this run":
        return f"this run's {m.hardware}"
    return f"the {m.hardware} ({m.source}, commit {m.commit})"


def sources(df, gpu) -> list[Measured]:
    """This run, then the GPU runs to weigh (`gpu`: one `Measured`, or a list of them in `gpu_evidence`'s order, or
    None)."""
    live = as_measured(df)
    gpus = [] if gpu is None else [gpu] if isinstance(gpu, Measured) else list(gpu)
    return [live] + [m for m in gpus if m is not live and m.frame is not live.frame]


def _key(m: Measured, parts) -> str:
    """The hardware's name, with the run's source where two runs share one kind of hardware."""
    twins = sum(other.hardware == m.hardware for other, _ in parts)
    return m.hardware if twins == 1 else f"{m.hardware} [{m.source}]"


def short(m: Measured) -> str:
    """'the NVIDIA H200 (gpu-bench.json)' or "this build's CPU": `where` without the commit, which the sentence after
    the summary's first names (`weigh`), and without this build's model name, which its page names."""
    if m.hardware == "this run":
        return where(m)
    if m.source == "this run":
        # the summary's first sentence has a word limit; a CPU's model name runs to seven words
        return this_build("cuda" if m.on_gpu else "cpu")
    return f"the {m.hardware} ({m.source})"


def _run(m: Measured, finding: Finding, parts) -> scale_rule.Run:
    return scale_rule.Run(
        where(m),
        finding,
        scale=1 if m.on_gpu else 0,
        measured=finding.verdict != scale_rule.UNTESTED,
        caveat=None if m.caveat is None else f"{m.source} ({m.hardware}): {m.caveat}",
        identified=m.code_identified,
        key=_key(m, parts),
        short=short(m),
        build=design.THIS_BUILD if m.source == "this run" else design.GPU_BENCH,
    )


def weigh(parts: list[tuple[Measured, Finding]]) -> Finding:
    """One verdict from the same rule applied on each run, this run first (the module docstring: the rule)."""
    if len(parts) == 1 and parts[0][0].hardware == "this run":
        return parts[0][1]
    # the answering run's first sentence leads (the ledger shows it); which run answers, and why, follows it
    return scale_rule.answer([_run(m, f, parts) for m, f in parts], lead_first=True)


def code_caveats(finding: Finding, weighed: list[Measured]) -> tuple[str, ...]:
    """The finding's own caveats, then 'gpu-bench.json (NVIDIA H200): measured at 12a0522; …' for each run in
    `weighed` (those that shaped the verdict) whose code this tree no longer has as it was measured."""
    stale = [f"{m.source} ({m.hardware}): {m.caveat}" for m in weighed if m.caveat]
    return tuple(dict.fromkeys([*finding.caveats, *stale]))


def deciding_machine(finding: Finding) -> str:
    """The run that answered a weighed verdict, as an opening-page sentence names it: 'the GPU run in gpu-bench.json'
    for a committed run, else "this build's CPU" (or GPU). The machines' model names, whose length varies from one
    machine to the next, and the commit are the chapter's (`other_machines`, `weigh`'s summary)."""
    decided = finding.evidence.get("decided_on")
    answered = str(((finding.evidence.get("by_run") or {}).get(decided) or {}).get("where") or "this run")
    committed = re.search(r"\(([^,()]+)(?:, commit [^)]*)?\)$", answered)
    if answered.startswith("this run") or committed is None:
        return this_build()
    return f"the GPU run in {committed.group(1)}"


def _machine(where: str | None) -> str:
    """A run's `where` as a sentence names it: "this build's Xeon (2 cores)" or 'the NVIDIA H200 (gpu-bench.json, …)'."""
    where = str(where or "this run")
    if where == "this run":
        return f"this build's {machine_name()}"
    return where.replace("this run's ", "this build's ", 1)


def other_machines(finding: Finding) -> str:
    """'0.10% on this build's Xeon (2 cores); 0.2% on the NVIDIA H200 (gpu-bench-2.json, …)': the key number of every
    run weighed beside the answering one, each named by the machine it was measured on; '' when no other run has one."""
    per_run = finding.evidence.get("by_run") or {}
    decided = finding.evidence.get("decided_on")
    key = KeyNumber.of(finding)
    return "; ".join(
        f"{key.format(part['key_number'])} on {_machine(part.get('where'))}"
        for name, part in per_run.items()
        if name != decided and part.get("key_number") is not None
    )
