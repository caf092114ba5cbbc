"""Section "Partial RMSNorm (Q3)": full against partial RMSNorm, and Q3."""

from __future__ import annotations

import pandas as pd

from normlab.analysis.speed.hardware import deciding_machine, sources, weigh
from normlab.analysis.speed.ratio import pct
from normlab.analysis.speed.runs import unstable_cases
from normlab.bench import report
from normlab.study import decide
from normlab.study.findings import Finding
from normlab.study.key_numbers import SHARE, KeyNumber

Q3_KEY = KeyNumber("best share of full RMSNorm's time pRMSNorm saves", SHARE)


def _q3(df: pd.DataFrame, worth_it: float, estimate_error: float) -> Finding:
    """Q3: does pRMSNorm (p = 6.25%) save time against full RMSNorm, in each implementation that has it?"""
    ok = report.stable(df)
    part = ok[ok["study"] == "partial"].copy()
    part["backend_name"] = part["implementation"].str.split(" ").str[0]
    part["variant"] = part["implementation"].str.split(" ", n=1).str[1]
    per_width = []  # one row per backend and shape timed both ways: the saving and its sd from the two cases' repeats
    for (backend, _rows, d), group in part.groupby(["backend_name", "rows", "d"]):
        times = group.set_index("variant")["median_s"]
        if "full" in times and len(times) == 2:
            fraction = times.drop("full").iloc[0] / times["full"]
            sd = float(fraction * (group["relative_sd"] ** 2).sum() ** 0.5) if "relative_sd" in group else float("nan")
            per_width.append({"backend": backend, "d": d, "saving": 1 - fraction, "sd": sd})
    per_width = pd.DataFrame(per_width, columns=["backend", "d", "saving", "sd"])
    savings = {b: float(g["saving"].median()) for b, g in per_width.groupby("backend")}
    spreads = {b: float(g["sd"].median()) for b, g in per_width.groupby("backend") if g["sd"].notna().any()}
    if not savings:
        return Finding(
            "not testable here",
            "No implementation with partial RMS was timed stably in this run.",
            {"unstable_cases": unstable_cases(df)},
            **Q3_KEY.fields(),
        )
    reached = sum(s >= worth_it for s in savings.values())
    share = reached / len(savings)
    best = max(savings, key=savings.get)
    text = ", ".join(f"{b} {pct(s)}" for b, s in sorted(savings.items()))
    return Finding(
        decide(share > 0, caveat=share < 1),
        # the first sentence (the ledger's): each implementation's saving against the threshold; the rest after it
        f"Partial RMSNorm saves {text} of full RMSNorm's time (median over d = "
        f"{', '.join(str(int(d)) for d in sorted(set(per_width['d'])))}): {reached} of {len(savings)} implementations "
        f"reach the {worth_it:.0%} worth having. It estimates the RMS from p = 6.25% of each row (Table 8 of the "
        "paper: 63.9% for pRMSNorm vs 40.8% for RMSNorm, whole model); the estimate deviates by "
        f"{estimate_error:.1%} (relative, on Gaussian rows), and the normalise pass still reads every element.",
        {
            "saving_by_backend": savings,
            "saving_sd_by_backend": spreads,
            "worth_it_threshold": worth_it,
            "rms_estimate_relative_error": estimate_error,
            "best_backend": best,
            "widths": sorted(int(d) for d in set(per_width["d"])),
        },
        key_number=savings[best],
        threshold=worth_it,
        spread=spreads.get(best),
        **Q3_KEY.fields(),
        reads=("worth_it",),
    )


def q3(df, worth_it: float, estimate_error: float, *, gpu=None) -> Finding:
    """Q3 on each hardware (see `_q3`), weighed, with the opening page's sentence."""
    finding = weigh([(m, _q3(m.frame, worth_it, estimate_error)) for m in sources(df, gpu)])
    finding.scale = q3_scale(finding)
    finding.headline = q3_headline(finding)
    return finding


def _widths(widths: list[int]) -> str:
    """'4096, 16384', or '4096–16384' for more than two."""
    return f"{min(widths)}–{max(widths)}" if len(widths) > 2 else ", ".join(str(d) for d in widths)


def q3_scale(q3: Finding) -> str:
    """The deciding machine, the implementation the best saving comes from and the widths timed."""
    widths = q3.evidence.get("widths") or []
    best = q3.evidence.get("best_backend")
    return (
        f"on {deciding_machine(q3)}"
        + (f", {best} implementation" if best else "")
        + (f", median over d = {_widths(widths)}" if widths else "")
    )


def q3_headline(q3: Finding) -> str | None:
    """The opening page's sentence on Q3 (at most 35 words); None without a key number or threshold. What partial
    RMSNorm is (p = 6.25% of each row), the commit and the other implementations' savings stay on the chapter."""
    k, t = q3.key_number, q3.threshold
    if k is None or t is None:
        return None
    return (
        f"Partial RMSNorm saves at best {Q3_KEY.format(k)} of full RMSNorm's time {q3_scale(q3)}, "
        f"{'short of' if k < t else 'above'} the {Q3_KEY.limit(t)} worth having"
        + {
            "holds": ", in every implementation.",
            "holds with caveats": ", but not in every implementation.",
            "does not hold": ": it does not save time.",
        }.get(q3.verdict, ".")
    )


def partial_rms_estimate_error(d: int, partial: float, rows: int = 512, seed: int = 0) -> float:
    """Median relative error of pRMSNorm's RMS (first ceil(p*d) features) against the full RMS, on i.i.d. Gaussian rows."""
    import torch

    from normlab.norms.validation import partial_size

    x = torch.randn(rows, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    k = partial_size(d, partial)
    estimate = x[:, :k].pow(2).mean(-1).sqrt()
    full = x.pow(2).mean(-1).sqrt()
    return float((estimate / full - 1).abs().median())


def partial_frame(stable_cases: pd.DataFrame) -> pd.DataFrame:
    """Full against partial RMSNorm: time, fraction of copy bandwidth and effective passes."""
    partial = stable_cases[stable_cases["study"] == "partial"]
    return partial.assign(**{"time (ms)": partial["median_s"] * 1e3})[
        ["implementation", "rows", "d", "time (ms)", "fraction_of_copy", "effective_passes"]
    ]
