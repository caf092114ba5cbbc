"""The summary figure: verdict counts per chapter, one stacked bar each, in the book's reading order."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from normlab.study.claims import PENDING, Claim
from normlab.study.results import VERDICTS, verdicts


def _chapter_order(runs: list[dict]) -> list[str]:
    from normlab.study.run import book_order

    names = [r["notebook"] for r in runs]
    reading = book_order()
    return [n for n in reading if n in names] + sorted(set(names) - set(reading))


def summary_figure(claims: list[Claim], runs: list[dict], path: Path) -> None:
    """Verdict counts per chapter, one horizontal stacked bar each; written to `path` as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = verdicts(claims, runs)
    owners = _chapter_order(runs)
    rows = owners + ["(pending)"]
    counts = {row: Counter() for row in rows}
    for slot in table.values():
        record = slot["record"]
        counts[record["notebook"] if record else "(pending)"][record["verdict"] if record else PENDING] += 1
    rows = [row for row in rows if sum(counts[row].values())]
    colours = {
        "holds": "#2a9d8f",
        "holds with caveats": "#e9c46a",
        "does not hold": "#e76f51",
        "not testable here": "#8d99ae",
        PENDING: "#d9d9d9",
    }
    figure, axis = plt.subplots(figsize=(7, 0.45 * len(rows) + 1.4))
    left = [0] * len(rows)
    for verdict in (*VERDICTS, PENDING):
        widths = [counts[row][verdict] for row in rows]
        if any(widths):
            axis.barh(rows, widths, left=left, color=colours[verdict], label=verdict, edgecolor="white")
            left = [a + b for a, b in zip(left, widths)]
    axis.invert_yaxis()
    axis.set_xlabel("claims (count)")
    axis.xaxis.get_major_locator().set_params(integer=True)
    axis.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=5, frameon=False, fontsize=8)
    axis.spines[["top", "right"]].set_visible(False)
    figure.tight_layout()
    figure.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(figure)
