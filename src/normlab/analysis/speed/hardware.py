"""Which hardware decides: one verdict from the same rule applied to this run and to the GPU runs.

The articles' speed claims are about GPUs. Each claim function takes this
run's cases and, optionally, a GPU run (`gpu`, a `provenance.Measured`: this
run if it ran on a GPU, else a committed one). It judges the claim on each
hardware by the same rule, and `weigh` makes one verdict of them: the GPU's
decides where it could test the claim; a "holds" there becomes "holds with
caveats" if another hardware's own verdict is "does not hold". The summary
names the hardware behind every number. With no GPU run, the CPU decides alone. Where a committed run that decides
the verdict, or turns its "holds" into "holds with caveats", measured code this tree has since changed (its
`caveat`), the verdict carries that caveat to every page that shows it.
`deciding_machine` and `other_machines` say the same in the opening page's sentences.
"""

from __future__ import annotations

import re
from dataclasses import replace

from normlab.bench.provenance import Measured
from normlab.runtime.environment import machine_name
from normlab.study.findings import Finding
from normlab.study.key_numbers import KeyNumber


def as_measured(source) -> Measured:
    """A bare frame (this run, hardware unnamed) or a `Measured` run, as a `Measured`."""
    if isinstance(source, Measured):
        return source
    return Measured(frame=source, hardware="this run", label="this run", on_gpu=False, source="this run")


def gpu_evidence(live: Measured, committed: list[Measured]) -> list[Measured]:
    """The GPU runs the verdicts weigh, the deciding one first: this run if it ran on a GPU, else every committed GPU
    run, the most recently measured first (a later run may time more backends; the others check it)."""
    if live.on_gpu:
        return [live]
    return sorted((m for m in committed if m.on_gpu), key=lambda m: m.started, reverse=True)


def where(m: Measured) -> str:
    """'the NVIDIA H200 (gpu-bench.json, commit 2253ce8a1b2c)' or "this run's Xeon (2 cores)"."""
    if m.hardware == "this run":
        return "this run"
    if m.source == "this run":
        return f"this run's {m.hardware}"
    return f"the {m.hardware} ({m.source}, commit {m.commit})"


def sources(df, gpu) -> list[Measured]:
    """This run, then the GPU runs to weigh (`gpu`: one `Measured`, a list of them, deciding one first, or None)."""
    live = as_measured(df)
    gpus = [] if gpu is None else [gpu] if isinstance(gpu, Measured) else list(gpu)
    return [live] + [m for m in gpus if m is not live and m.frame is not live.frame]


def _key(m: Measured, parts) -> str:
    """The hardware's name, with the run's source where two runs share one kind of hardware."""
    twins = sum(other.hardware == m.hardware for other, _ in parts)
    return m.hardware if twins == 1 else f"{m.hardware} [{m.source}]"


def weigh(parts: list[tuple[Measured, Finding]]) -> Finding:
    """One verdict from the same rule applied on each hardware.

    The first GPU run's verdict decides where it could test the claim (the articles' speed claims are about GPUs);
    otherwise the first run that could. A "holds" becomes "holds with caveats" where another run's own verdict
    (this run's, or another GPU run's) is "does not hold". Key number, threshold and spread are the deciding run's.
    """
    if len(parts) == 1:
        m, f = parts[0]
        if m.hardware == "this run":
            return f
        return replace(
            f,
            summary=f"On {where(m)}: {f.summary}",
            evidence=dict(f.evidence, decided_on=_key(m, parts)),
            caveats=code_caveats(f, [m]),
        )
    testable = [(m, f) for m, f in parts if f.verdict != "not testable here"] or parts
    deciding, decided = next(((m, f) for m, f in testable if m.on_gpu), testable[0])
    others = [(m, f) for m, f in parts if m is not deciding]
    against = [m for m, f in others if f.verdict == "does not hold"]
    verdict = "holds with caveats" if decided.verdict == "holds" and against else decided.verdict
    text = [f"On {where(deciding)}, which decides: {decided.summary}"]
    # the other runs in one clause each (their full sentences stay in the evidence and on the chapter's GPU section)
    text += [
        f"On {where(m)} alone the verdict would be '{f.verdict}'"
        + (
            "."
            if f.key_number is None
            else f" (key number {f.key_number:.3g} vs {f.threshold:.3g}"
            + ("" if f.spread is None else f", spread {f.spread:.2g}")
            + ")."
        )
        for m, f in others
    ]
    if verdict != decided.verdict:
        text.append(f"The result on {' and '.join(where(m) for m in against)} adds the caveat.")
    evidence = dict(
        decided.evidence,
        decided_on=_key(deciding, parts),
        by_hardware={
            _key(m, parts): {
                "source": m.source,
                "verdict": f.verdict,
                "key_number": f.key_number,
                "threshold": f.threshold,
                "spread": f.spread,
                "summary": f.summary,
                "evidence": f.evidence,
            }
            for m, f in parts
        },
    )
    rule = (
        (decided.rule or "") + " Hardware: the newest GPU run decides where it could test the claim; its 'holds' "
        "becomes 'holds with caveats' where another run's own verdict (CPU or GPU) is 'does not hold'."
    ).strip()
    return Finding(
        verdict,
        " ".join(text),
        evidence,
        key_number=decided.key_number,
        threshold=decided.threshold,
        spread=decided.spread,
        rule=rule,
        caveats=code_caveats(decided, [deciding, *(against if verdict != decided.verdict else [])]),
        **KeyNumber.of(decided).fields(),
    )


def code_caveats(finding: Finding, weighed: list[Measured]) -> tuple[str, ...]:
    """The finding's own caveats, then 'gpu-bench.json (NVIDIA H200): measured at 12a0522; …' for each run in
    `weighed` (those that shaped the verdict) whose code this tree no longer has as it was measured."""
    stale = [f"{m.source} ({m.hardware}): {m.caveat}" for m in weighed if m.caveat]
    return tuple(dict.fromkeys([*finding.caveats, *stale]))


def deciding_machine(finding: Finding) -> str:
    """The machine whose run decided a weighed verdict, for a sentence: 'the NVIDIA H200 (gpu-bench.json)' for a
    committed run, else this build's machine."""
    decided = finding.evidence.get("decided_on")
    if not decided:
        return f"this build's {machine_name()}"
    source = ((finding.evidence.get("by_hardware") or {}).get(decided) or {}).get("source")
    return _machine(str(decided), source)


def _machine(key: str, source: str | None) -> str:
    """A `by_hardware` key as a sentence names it: "this build's Xeon (2 cores)" or 'the NVIDIA H200 (gpu-bench.json)'."""
    name = re.sub(r"\s*\[.*\]$", "", key)
    if source in (None, "this run"):
        return f"this build's {machine_name() if name == 'this run' else name}"
    return f"the {name} ({source})"


def other_machines(finding: Finding) -> str:
    """'0.10% on this build's Xeon (2 cores); 0.2% on the NVIDIA H200 (gpu-bench-2.json)': the key number of every run
    weighed beside the deciding one, each named by the machine it was measured on; '' when no other run has one."""
    per_hardware = finding.evidence.get("by_hardware") or {}
    decided = finding.evidence.get("decided_on")
    key = KeyNumber.of(finding)
    return "; ".join(
        f"{key.format(part['key_number'])} on {_machine(name, part.get('source'))}"
        for name, part in per_hardware.items()
        if name != decided and part.get("key_number") is not None
    )
