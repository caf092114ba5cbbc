"""The opening page's findings and the ledger's units, on hand-made results whose answer is known.

The pages read each record as data: the headline its chapter wrote, and its key number's meaning and unit. The
chapters' headline writers are tested in tests/test_headlines.py.
"""

import json
import re
from types import SimpleNamespace

from normlab.runtime import code_identity as C
from normlab.study import ledger
from normlab.study.claims import parse_claims
from normlab.study.key_numbers import DIMENSIONLESS, FACTOR, POINTS, SHARE
from normlab.study.pages import opening
from normlab.study.pages.ledger_page import first_sentences, key_cell, render_ledger
from normlab.study.results import verdicts

CLAIMS = parse_claims()


def run(notebook, *records, machine="Test CPU"):
    return {
        "notebook": notebook,
        "profile": "cpu",
        "hardware": {"cpu": machine, "cpu_cores": 2, "gpu": None},
        "versions": {"python": "3.11", "torch": "x", "triton": None},
        "git_commit": "abc",
        "started": "t0",
        "finished": "t1",
        "claims": list(records),
    }


def record(
    claim_id,
    verdict,
    key,
    threshold,
    spread=None,
    section="sec",
    summary="A summary.",
    *,
    meaning="what it measures",
    unit=DIMENSIONLESS,
    headline=None,
    caveats=(),
):
    return {
        "id": claim_id,
        "verdict": verdict,
        "summary": summary,
        "evidence": {},
        "section": section,
        "key_number": key,
        "threshold": threshold,
        "spread": spread,
        "meaning": meaning,
        "unit": unit,
        "headline": headline,
        "caveats": list(caveats),
    }


def sentences(*runs):
    return opening.findings_sentences(verdicts(CLAIMS, list(runs)))


def test_the_opening_page_leads_with_real_claims_in_a_readable_number():
    ids = {c.id for c in CLAIMS}
    assert set(opening.HEADLINES) <= ids and len(set(opening.HEADLINES)) == len(opening.HEADLINES)
    assert 6 <= len(opening.HEADLINES) <= 10


def test_a_findings_sentence_is_the_chapter_headline_with_a_link_and_the_verdict_badge():
    (q2,) = sentences(run("speed", record("Q2", "holds", 0.059, 0.1, section="speed-bandwidth", headline="Fused.")))
    assert q2 == "Fused. ({ref}`Q2 <speed-bandwidth>`: ✓ holds)"
    (q2,) = sentences(run("speed", record("Q2", "does not hold", 0.15, 0.1, section=None, headline="Not fused.")))
    assert q2 == "Not fused. (Q2: ✗ does not hold)"


STALE = "gpu-bench.json (NVIDIA H200): measured at 12a0522; since then 13 files of the Triton kernels changed"


def test_a_verdict_with_a_caveat_says_so_on_the_opening_page_the_ledger_and_its_chapter():
    from normlab.study.present import verdict_table

    q2 = record("Q2", "holds", 0.059, 0.1, section="speed-bandwidth", headline="Fused.", caveats=[STALE])
    # the opening page counts the caveats beside the link; the chapter (one click away) states them
    (sentence,) = sentences(run("speed", q2))
    assert sentence == "Fused. ({ref}`Q2 <speed-bandwidth>`: ✓ holds; 1 caveat in the chapter)"
    page = opening.render_intro(CLAIMS, [run("speed", q2)], prose="# Title\n", figure="v.png")
    assert "where the chapter states the caveats counted after it" in page and STALE not in page
    # the ledger's row points to its list under the table, which states each caveat in full
    ledger_page = render_ledger(CLAIMS, [run("speed", q2)])
    row = next(line for line in ledger_page.splitlines() if line.startswith("| Q2 "))
    assert "**{ref}`1 caveat <ledger-caveats>`**" in row and STALE not in row
    listed = ledger_page.split("(ledger-caveats)=", 1)[1]
    assert f"- **Q2** ({{ref}}`speed <speed-bandwidth>`): {STALE}." in listed
    # several caveats: one to a line under the claim's, none run into the next
    two = record("Q2", "holds", 0.059, 0.1, section="speed-bandwidth", headline="Fused.", caveats=[STALE, "host time"])
    listed = render_ledger(CLAIMS, [run("speed", two)]).split("(ledger-caveats)=", 1)[1]
    assert f"- **Q2** ({{ref}}`speed <speed-bandwidth>`):\n  - {STALE}.\n  - host time." in listed
    assert f"**Caveat:** {STALE}." in str(verdict_table(SimpleNamespace(claims=[q2]))._repr_markdown_())
    plain = record("Q2", "holds", 0.059, 0.1, section="speed-bandwidth", headline="Fused.")
    assert "caveat" not in sentences(run("speed", plain))[0]
    assert "caveats counted" not in opening.render_intro(CLAIMS, [run("speed", plain)], prose="#\n", figure="v")
    assert "ledger-caveats" not in render_ledger(CLAIMS, [run("speed", plain)])


def test_the_opening_page_labels_each_committed_gpu_file_by_its_code(tmp_path):
    document = {"schema": "normlab.bench/1", "profile": "gpu", "records": [], "hardware": {"gpu": "NVIDIA H200"}}
    document.update(started="2026-11-30T11:26:30+00:00", git_commit="12a0522" + "0" * 33)
    (tmp_path / "gpu-bench.json").write_text(json.dumps({**document, "git_commit": "12a0522" + "0" * 33 + "-dirty"}))
    (tmp_path / "gpu-bench-2.json").write_text(json.dumps({**document, "code_fingerprint": C.loaded_source()}))
    dirty, fresh = opening.committed_gpu_runs(tmp_path)[::-1]
    assert "(gpu-bench.json; **measured at 12a0522-dirty: " in dirty and "cannot be identified" in dirty
    assert fresh == "NVIDIA H200, measured 2026-11-30 11:26 UTC (gpu-bench-2.json)"


def test_a_pending_or_missing_claim_or_headline_gives_no_sentence_and_the_page_still_renders():
    # A1 is not a headline claim: its headline, had a chapter written one, is not on the opening page
    assert sentences(run("geometry", record("A1", "holds", 1e-14, 1e-12, headline="Not led with."))) == []
    # B18 recorded only as evidence (no verdict) is pending; B17 without a headline (no key number) has nothing to say
    depth = run("depth", record("B17", "holds", None, None), dict(record("B18", None, None, None), verdict=None))
    assert sentences(depth) == []
    page = opening.render_intro(CLAIMS, [depth], prose="# Title\n<!-- findings -->\nTail.\n", figure="v.png")
    assert opening.NO_HEADLINES in page and page.index("## What we found") < page.index("Of the ")
    assert "Tail." in page


def test_headlines_follow_the_reading_order_whatever_order_the_chapters_ran_in():
    runs = [
        run("landscape", record("V1", "does not hold", 0.18, 0.03, section="l", headline="V one.")),
        run("ecosystem", record("B1", "holds", 0.95, 0.9, 0.0, "e", headline="B one.")),
        run("speed", record("Q2", "holds", 0.05, 0.1, section="s", headline="Q two.")),
    ]
    found = [s.rsplit("{ref}`", 1)[1].split(" ")[0] for s in sentences(*runs)]
    assert found == [c for c in opening.HEADLINES if c in {"V1", "B1", "Q2"}] == ["Q2", "B1", "V1"]


def test_the_ledger_gives_each_key_number_its_recorded_unit_and_meaning():
    q2_meaning = "|median share of LayerNorm's time RMSNorm saves|, both fused"
    runs = [
        run("speed", record("Q2", "holds", 0.059, 0.1, 0.02, meaning=q2_meaning, unit=SHARE)),
        run("ecosystem", record("A11", "holds", 0.0, 0.5, 0.0, meaning="named families", unit="families")),
        run("depth", record("B17", "holds", 4.33, 10.0, 0.37, meaning="largest ratio", unit=FACTOR)),
    ]
    rows = {line.split(" | ")[0][2:]: line for line in render_ledger(CLAIMS, runs).splitlines() if line[:2] == "| "}
    assert "| 5.9% vs 10%: *\\|median share of LayerNorm's time RMSNorm saves\\|, both fused* | 2.0% |" in rows["Q2"]
    assert "| 0 families vs 0.5 families: *named families* |" in rows["A11"]
    assert "| ×4.33 vs ×10: *largest ratio* | 0.370 |" in rows["B17"]  # a ratio's spread is a plain number
    # a change of a share (V4), recorded as a difference of fractions, is written in percentage points
    share_change = record("V4", "holds", 0.031, 0.0, 0.004, meaning="change in the later half's share", unit=POINTS)
    assert key_cell(share_change) == "3.1 percentage points vs 0 percentage points: *change in the later half's share*"
    tiny = record("A1", "holds", 2.71e-14, 1e-12, 8.8e-15, meaning="max abs difference")
    assert (
        key_cell(tiny) == "2.71e-14 vs 1e-12: *max abs difference*"
    )  # a pure number, and a round threshold stays round
    assert key_cell(record("A1", "not testable here", None, None)) == "—"


def test_a_per_byte_and_a_per_token_loss_each_keep_their_own_unit_on_the_opening_page_and_the_ledger():
    from normlab.analysis.quality.loss_parity import A9_KEY, a9_headline
    from normlab.analysis.realmodels.centring_verdict import Q4_KEY, q4_headline
    from normlab.study.findings import Finding

    a9 = Finding("holds", "A9.", {}, 0.015, 0.02, 0.004, **A9_KEY.fields())
    q4 = Finding("holds", "Q4.", {}, 0.2, 0.01, 0.01, **Q4_KEY.fields())
    runs = [
        run("quality", record("A9", "holds", 0.015, 0.02, 0.004, unit=a9.unit, headline=a9_headline(a9))),
        run("realmodels", record("Q4", "holds", 0.2, 0.01, 0.01, unit=q4.unit, headline=q4_headline(q4))),
    ]
    by_claim = {s.rsplit("{ref}`", 1)[1].split(" ")[0]: s for s in sentences(*runs)}
    assert "0.0150 nats per byte" in by_claim["A9"] and "±0.02 nats per byte" in by_claim["A9"]
    assert "+0.200 nats per token" in by_claim["Q4"] and "±0.01 nats per token" in by_claim["Q4"]
    page = opening.render_intro(CLAIMS, runs, prose="# Title\n", figure="v.png")
    assert re.findall(r"\bnats\b(?! per (?:byte|token))", page) == []  # no loss on the page says "nats" alone
    rows = {line.split(" | ")[0][2:]: line for line in render_ledger(CLAIMS, runs).splitlines() if line[:2] == "| "}
    assert "| 0.0150 nats per byte vs 0.02 nats per byte:" in rows["A9"]
    assert "| 0.200 nats per token vs 0.01 nats per token:" in rows["Q4"]


def test_summaries_are_cut_at_the_first_sentence():
    long = (
        "Pre-LN's gradients differ by ×4.33 at depth 32 (threshold ×10), as Xiong et al. 2020 predict. "
        "'Undamped' is read against a bound at initialisation, e.g. the last layer's 1/√L. "
        "A third sentence the ledger leaves to the chapter. And a fourth."
    )
    cut = first_sentences(long)
    assert cut == long.split(" A third")[0] + " …"
    assert first_sentences("One sentence with 0.5 nats and et al. inside.") == (
        "One sentence with 0.5 nats and et al. inside."
    )
    assert first_sentences("First. Second.") == "First. Second."
    page = render_ledger(CLAIMS, [run("depth", record("B17", "holds", 4.33, 10.0, 0.37, summary=long))])
    row = next(line for line in page.splitlines() if line.startswith("| B17 |"))
    assert "as Xiong et al. 2020 predict. … |" in row and "'Undamped' is read" not in row


def test_the_built_opening_page_puts_sentences_then_counts_then_the_figure(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    for r in (
        run("speed", record("Q2", "holds", 0.059, 0.1, headline="Once both norms are fused, they tie.")),
        run("ecosystem", record("B1", "holds", 0.95, 0.9, 0.0, "e", headline="Of the model families, most.")),
    ):
        (results / f"{r['notebook']}.json").write_text(json.dumps(r))
    ledger.build(results, tmp_path / "pages", executed_dir=tmp_path / "ex", data_dir=tmp_path)
    page = (tmp_path / "pages" / "intro.md").read_text()
    total = len(parse_claims())
    found, counts, figure = (page.index(s) for s in ("## What we found", f"Of the {total} claims", "```{figure}"))
    assert found < page.index("- Once both norms are fused") < page.index("- Of the model families") < counts < figure
    assert f"Of the {total} claims, **2** hold and **{total - 2}** are pending. " in page  # each count with its verb
    assert ":::{dropdown}" not in page


def test_the_verdict_counts_read_as_a_sentence():
    assert opening._verb("holds", 1) == "holds" and opening._verb("holds", 11) == "hold"
    assert opening._verb("does not hold", 4) == "do not hold"
    assert opening._verb("not testable here", 1) == "is not testable here"
    assert opening._verb("not testable here", 3) == "are not testable here"
    assert opening._counted(["a"]) == "a" and opening._counted(["a", "b", "c"]) == "a, b and c"


def test_the_opening_page_counts_the_readings_that_survive_the_family_rule():
    from normlab.study import multiplicity

    def interval(mean, sd, pairs, margin):
        half = {3: 4.303, 5: 2.776}[pairs] * sd / pairs**0.5
        return dict(pairs=pairs, mean_difference=mean, sd_of_differences=sd, margin=margin, outcome="different",
                    ci_low=mean - half, ci_high=mean + half)  # fmt: skip

    registered = multiplicity.parse()
    b15 = record("B15", "holds with caveats", 0.047, 0.02, section="gain-wd", headline="Decay matters.")
    b15["evidence"] = {"decay_sweep": {"pairs": {"30.0": interval(0.047, 0.02, 5, 0.02)}}}  # level about 0.04
    # as Results.record leaves it: the reading decides alone, not over the family, so the verdict is undecided
    judged = multiplicity.judge("B15", b15["verdict"], b15["summary"], b15["evidence"], registered)
    b15.update(verdict=judged.verdict, summary=judged.summary)
    v1 = record("V1", "does not hold", 0.8, 0.03, section="landscape-dyt", headline="DyT is worse.")
    v1["evidence"] = {"dyt_minus_rms": interval(0.8, 0.01, 3, 0.03)}
    b7 = record("B7", "not testable here", 0.0, 0.02, section="quality-curves")
    b7["evidence"] = {"paired_curve_loss": {**interval(0.0, 0.05, 5, 0.02), "outcome": "inconclusive"}}
    runs = [run("gain", b15), run("landscape", v1), run("quality", b7)]
    family = multiplicity.family_table(runs, registered)
    page = opening.render_intro(CLAIMS, runs, prose="# Title\n", figure="v.png", family=family)
    assert (
        f"Of the family's {registered.size} registered readings of paired intervals, this build measured 3; 2 decide "
        "at 95% read alone, and 1 of those survives the {ref}`family's rule <family-rule>`. B15 is not testable here "
        "because of it." in page
    )
    (sentence,) = [s for s in opening.findings_sentences(verdicts(CLAIMS, runs)) if "V1" in s]
    assert sentence.endswith("✗ does not hold)")
    assert verdicts(CLAIMS, runs)["B15"]["record"]["summary"].startswith(multiplicity.UNDECIDED)
    assert opening.caveats_pointer(["x", "y"]) == "; 2 caveats in the chapter"
    assert "readings of paired intervals" not in opening.render_intro(CLAIMS, runs, prose="#\n", figure="v")
