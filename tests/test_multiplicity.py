"""The family rule: Student's t tail, each reading's level by interval inversion, Bonferroni's adjustment over every
registered reading (a rule over the claims' `readings`, not a list), and the verdict it leaves where it is recorded."""

import math
import random

import pytest

from normlab.analysis.shared.paired import paired_difference
from normlab.study import multiplicity as M
from normlab.study.sample_size import t975


@pytest.mark.parametrize("df", [1, 2, 4, 9, 23, 30])
def test_t_survival_at_the_table_quantiles_is_two_and_a_half_percent(df):
    # the table's quantiles are rounded to 3 decimals: the tail there is 0.025 to that rounding
    assert M.t_survival(t975(df), df) == pytest.approx(0.025, abs=2e-4 if df > 1 else 1e-5)


def test_t_survival_is_symmetric_and_tends_to_the_normal():
    assert M.t_survival(0.0, 5) == pytest.approx(0.5, abs=1e-14)
    assert M.t_survival(-1.3, 7) == pytest.approx(1 - M.t_survival(1.3, 7), abs=1e-14)
    assert M.t_survival(1.959964, 1e7) == pytest.approx(0.025, abs=1e-6)
    assert M.t_survival(1.0, 1) == pytest.approx(0.25, abs=1e-12)  # Cauchy: 1/2 - atan(1)/pi
    assert M.t_survival(math.inf, 3) == 0.0


def test_a_level_is_at_most_five_percent_exactly_when_the_95_interval_decides():
    rng = random.Random(7)
    checked = 0
    for _ in range(400):
        pairs = rng.choice([3, 5, 12, 24])
        a = [rng.gauss(0, 1) for _ in range(pairs)]
        b = [x + rng.gauss(rng.uniform(-0.08, 0.08), 0.03) for x in a]
        interval = paired_difference(a, b, 0.02)
        se = interval["sd_of_differences"] / math.sqrt(pairs)
        distance = abs(abs(interval["mean_difference"]) - 0.02) / se
        if abs(distance - t975(pairs - 1)) < 0.01:  # on the table's rounding: either side is right
            continue
        level = M.reading_of("X", "d", interval, "margin").level
        assert (level <= 0.05) == (interval["outcome"] != M.INCONCLUSIVE), (interval, level)
        checked += 1
    assert checked > 350


def test_a_zero_reading_follows_the_interval_around_zero():
    interval = paired_difference([0.0, 0.0, 0.0, 0.0], [0.30, 0.31, 0.29, 0.30], 0.02)
    reading = M.reading_of("B16", "projection_paired", interval, "zero")
    assert reading.outcome == "excludes zero" and reading.level < 1e-4
    interval = paired_difference([0.0, 0.0, 0.0], [0.01, -0.02, 0.005], 0.02)
    reading = M.reading_of("B16", "projection_paired", interval, "zero")
    assert reading.outcome == "includes zero" and reading.level > 0.05


def test_bonferroni_multiplies_by_the_family_s_size_and_stops_at_one():
    assert M.bonferroni(0.01, 4) == pytest.approx(0.04)
    assert M.bonferroni(0.3, 24) == 1.0
    assert M.bonferroni(0.049, 1) == 0.049


@pytest.mark.parametrize(
    "call, refusal",
    [
        (lambda: M.bonferroni(1.5, 3), "a level must lie in"),
        (lambda: M.bonferroni(0.1, 0), "positive whole number of readings"),
        (lambda: M.interval_level(0.1, 0.01, 1, "zero"), "pairs must be an int >= 2"),
        (lambda: M.interval_level(0.1, 0.01, 5, "margin"), "needs a positive finite margin"),
        (lambda: M.interval_level(math.nan, 0.01, 5, "zero"), "must be finite"),
        (lambda: M.interval_level(0.1, 0.01, 5, "sideways"), "reading must be one of"),
        (lambda: M.reading_of("A9", "paired", {"pairs": 3, "mean_difference": 0.1}, "margin"), "records no"),
        (lambda: M.evidence_at({"a": {"b": 1}}, "a/c"), "no 'c' on the way to 'a/c'"),
    ],
)
def test_bad_input_is_refused_naming_the_problem(call, refusal):
    with pytest.raises((ValueError, KeyError), match=refusal):
        call()


# --- The registered family and its table --------------------------------------------------------------------------

FAMILY_IDS = {"A9", "B7", "B15", "V1", "Q4"}
FAMILY_TOML = """
[multiplicity]
registered = "2026-12-07"
rule = "bonferroni"
alpha = 0.05
family_definition = "every reading declared on a claim"
basis = "family-wise error at α under any dependence"
not_surviving = "a reading that does not survive does not decide"
seen_at_adoption = "the test's own results"

[claims.A9]
readings = [{ evidence = "paired_final_loss", reading = "margin" }]

[claims.B7]
readings = [{ evidence = "paired_curve_loss", reading = "margin" }]

[claims.B15]
readings = [{ evidence = "decay_sweep/pairs/30.0", reading = "margin" }]

[claims.V1]
readings = [
    { evidence = "dyt_minus_rms", reading = "plus_margin" },
    { evidence = "dyt_minus_layer", reading = "plus_margin", bears_on = ["holds", "holds with caveats"] },
]

[claims.Q4]
readings = [{ evidence = "smollm2_ci", reading = "margin" }]
"""


def _family(tmp_path, text=FAMILY_TOML):
    path = tmp_path / "design.toml"
    path.write_text(text)
    return M.parse(path, FAMILY_IDS)


def test_the_committed_family_is_every_reading_its_claims_declare():
    import tomllib

    from normlab.study import design

    family = M.parse()
    assert family.rule == "bonferroni" and family.alpha == 0.05 and family.registered == "2026-12-07"
    declared = [
        (claim, raw["evidence"])
        for claim, entry in tomllib.loads(design.DESIGN.read_text(encoding="utf-8"))["claims"].items()
        for raw in entry.get("readings", ())
    ]
    assert [(e.claim, e.evidence) for e in family.entries] == declared and family.size == len(declared) >= 24
    assert {"A9", "B5", "B7", "B15", "B16", "B17", "B18", "B19", "V1", "V3", "V4", "Q4"} <= set(family.claims)
    assert all(entry.reading in M.READINGS for entry in family.entries)
    assert "2026-12-07" in family.seen_at_adoption and "Holm" in family.basis


@pytest.mark.parametrize(
    "old, new, refusal",
    [
        ("[claims.B7]", "[claims.Z9]", r"claim 'Z9' declares readings but is not in data/claims.md"),
        ('reading = "plus_margin" }', 'reading = "sideways" }', r"V1's reading of 'dyt_minus_rms' is 'sideways'"),
        ('evidence = "paired_curve_loss", ', "", r"B7's reading 1 names no evidence path"),
        ('rule = "bonferroni"', 'rule = "bh"', r"rule must be one of \('bonferroni',\)"),
        ("alpha = 0.05", "alpha = 5", r"alpha must lie strictly between 0 and 1"),
        (
            'bears_on = ["holds", "holds with caveats"]',
            'bears_on = ["maybe"]',
            r"dyt_minus_layer' bears on \['maybe'\]",
        ),
        ('evidence = "dyt_minus_layer"', 'evidence = "dyt_minus_rms"', "twice"),
        ('seen_at_adoption = "the test\'s own results"', "", "seen_at_adoption must be a text"),
        (
            'seen_at_adoption = "the test\'s own results"',
            'seen_at_adoption = "x"\nfamily = [{ claim = "A9", evidence = "extra", reading = "zero" }]',
            r"lists a family .*'extra'.* the family is a rule",
        ),
    ],
)
def test_a_bad_family_entry_is_refused_naming_it(tmp_path, old, new, refusal):
    assert old in FAMILY_TOML
    with pytest.raises(M.FamilyError, match=refusal):
        _family(tmp_path, FAMILY_TOML.replace(old, new, 1))


def test_a_design_without_the_table_registers_no_family_and_readings_without_it_are_refused(tmp_path):
    assert _family(tmp_path, "[claims]\n") is None
    with pytest.raises(M.FamilyError, match=r"claim\(s\) A9 declare readings but no \[multiplicity\] table"):
        _family(tmp_path, FAMILY_TOML.split("[claims.A9]")[0].replace("[multiplicity]", "[other]") + "[claims.A9]\n"
                'readings = [{ evidence = "x", reading = "zero" }]\n')  # fmt: skip


def _interval(mean, sd, pairs, margin):
    return {
        "pairs": pairs,
        "mean_difference": mean,
        "sd_of_differences": sd,
        "ci_low": mean - t975(pairs - 1) * sd / math.sqrt(pairs),
        "ci_high": mean + t975(pairs - 1) * sd / math.sqrt(pairs),
        "margin": margin,
        "outcome": None,
    }


def _results():
    """A9 equivalent and clear, V1 worse and clear, B15 different only just, B7 not run, Q4 without its spread."""
    a9 = _interval(0.001, 0.01, 24, 0.02)  # far inside ±0.02: level ~1e-9
    b15 = _interval(0.047, 0.02, 5, 0.02)  # beyond +0.02 at 95% alone: level about 0.04
    b15["outcome"] = "different" if b15["ci_low"] > 0.02 else "inconclusive"
    v1 = _interval(0.8, 0.01, 3, 0.03)  # far above +0.03
    v1_layer = _interval(0.5, 0.01, 3, 0.03)
    run = {
        "notebook": "x",
        "claims": [
            {"id": "A9", "verdict": "holds", "evidence": {"paired_final_loss": {**a9, "outcome": "equivalent"}}},
            {"id": "B15", "verdict": "holds with caveats", "evidence": {"decay_sweep": {"pairs": {"30.0": b15}}}},
            {"id": "V1", "verdict": "does not hold", "evidence": {"dyt_minus_rms": v1, "dyt_minus_layer": v1_layer}},
            # Q4 without its spread, under the committed family's key and the test family's
            {
                "id": "Q4",
                "verdict": "holds",
                "evidence": {"smollm2_ci": [0.03, 0.07], "smollm2_interval": [0.03, 0.07]},
            },
            {"id": "B15", "verdict": None, "evidence": {}},  # another chapter's part: not the verdict's record
        ],
    }
    return [run]


def test_the_family_table_reads_every_registered_reading_against_the_whole_family(tmp_path):
    family = _family(tmp_path)
    table = M.family_table(_results(), family)
    rows = {(row.entry.claim, row.entry.evidence): row for row in table.rows}
    assert family.size == 6  # every registered reading, measured here or not
    assert rows[("B7", "paired_curve_loss")].status == M.NOT_MEASURED  # listed, not dropped
    assert rows[("Q4", "smollm2_ci")].status == M.NO_SPREAD
    assert len(table.measured) == 5
    b15 = rows[("B15", "decay_sweep/pairs/30.0")]
    assert b15.decides(0.05) and not b15.survives(0.05)  # decides alone, not with the family
    assert b15.adjusted == pytest.approx(min(1.0, 6 * b15.level))
    for key in (("A9", "paired_final_loss"), ("V1", "dyt_minus_rms"), ("V1", "dyt_minus_layer")):
        assert rows[key].survives(0.05), rows[key]
    sentence = M.summary_sentence(table)
    assert sentence.startswith(
        "Of the family's 6 registered readings of paired intervals, this build measured 5; 4 decide at 95% read "
        "alone, and 3 of those survive"
    )


def test_a_reading_that_does_not_survive_leaves_its_verdict_undecided(tmp_path):
    family = _family(tmp_path)
    b15 = next(r for r in _results()[0]["claims"] if r["id"] == "B15")
    judged = M.judge("B15", "holds with caveats", "B15's effect.", b15["evidence"], family)
    assert judged.verdict == "not testable here"
    assert judged.summary.startswith(f"{M.UNDECIDED} `decay_sweep/pairs/30.0` decides at 95% alone (level 0.0")
    assert "not over the family's 6 registered readings (adjusted level" in judged.summary
    assert judged.summary.endswith("B15's effect.")
    a9 = next(r for r in _results()[0]["claims"] if r["id"] == "A9")
    assert M.judge("A9", "holds", "A9.", a9["evidence"], family) == M.Judged("holds", "A9.", ())
    q4 = next(r for r in _results()[0]["claims"] if r["id"] == "Q4")
    (caveat,) = M.judge("Q4", "holds", "Q4.", q4["evidence"], family).caveats
    assert caveat.startswith(M.NOT_CHECKED) and M.is_family_caveat(caveat)
    # the pages name the claims the rule left undecided, read off the recorded summaries
    results = _results()
    for record in results[0]["claims"]:
        if record["id"] == "B15" and record["verdict"]:
            record.update(verdict=judged.verdict, summary=judged.summary)
    assert "B15 is not testable here because of it" in M.summary_sentence(M.family_table(results, family))


def test_a_caveat_only_reading_that_does_not_survive_turns_holds_into_holds_with_caveats(tmp_path):
    family = _family(tmp_path)
    v1 = next(r for r in _results()[0]["claims"] if r["id"] == "V1")
    v1["evidence"]["dyt_minus_layer"].update(_interval(0.086, 0.0173205, 3, 0.03))  # level about 0.03 alone
    kept = M.judge("V1", "does not hold", "V1.", v1["evidence"], family)
    assert kept == M.Judged("does not hold", "V1.", ())  # it only chooses between holds and holds with caveats
    weakened = M.judge("V1", "holds", "V1.", v1["evidence"], family)
    assert weakened.verdict == "holds with caveats" and weakened.caveats[0].startswith(M.NOT_SURVIVING)


def test_the_design_page_shows_the_rule_and_the_family_table(tmp_path):
    from normlab.study import design
    from normlab.study.claims import parse_claims
    from normlab.study.pages.design_page import render_design

    claims = [c.id for c in parse_claims()]
    table = M.family_table(_results(), M.parse())
    page = render_design(design.parse(design.DESIGN, set(claims)), claims, table)
    section = page.split("## One rule for the family", 1)[1].split("## Changes after results were seen", 1)[0]
    family = M.parse()
    assert f"**Bonferroni's rule over the family's {family.size} registered readings, α = 0.05 family-wise.**" in (
        section
    )
    assert "- Why this rule: Bonferroni's rule over the m registered readings" in section
    assert "- What had been seen when it was adopted: adopted on 2026-12-07" in section
    assert "| Claim | Verdict | Interval | Read against | Level | Adjusted | Under the rule |" in section
    assert (
        "| B7 | not judged here | `paired_curve_loss` | inside or beyond ±margin | — | — | not measured here |"
        in section
    )
    b15 = next(line for line in section.splitlines() if line.startswith("| B15 "))
    assert b15.endswith("| does not survive |") and "| holds with caveats |" in b15
    assert "| A9 | holds | `paired_final_loss` | inside or beyond ±margin | <0.001 | <0.001 | survives |" in section
    assert "spread not recorded (cannot be checked)" in section
    assert "{'" not in section  # no raw dicts
    assert "(family-rule)=" in page and "## One rule for the family" not in render_design(
        design.parse(design.DESIGN, set(claims)), claims
    )


@pytest.mark.parametrize("level, text", [(None, "—"), (0.0004, "<0.001"), (0.0031, "0.003"), (0.05, "0.050")])
def test_levels_are_written_short(level, text):
    assert M.level_text(level) == text


def test_each_measured_reading_says_what_its_design_resolves(tmp_path):
    from normlab.study import design, sample_size
    from normlab.study.claims import parse_claims
    from normlab.study.pages.design_page import render_design

    table = M.family_table(_results(), _family(tmp_path))
    rows = {(row.entry.claim, row.entry.evidence): row for row in table.rows}
    a9 = M.resolution(rows[("A9", "paired_final_loss")])
    assert a9.half_width == pytest.approx(t975(23) * 0.01 / math.sqrt(24))
    assert a9.finest_margin == pytest.approx(sample_size.smallest_margin(24, 0.01, 0.9))
    assert a9.pairs_for_margin == sample_size.confirmation_pairs(0.01, 0.02, 0.9)
    # the finest margin at 24 pairs lies below ±0.02, which the registered pairs then resolve
    assert a9.finest_margin < 0.02 and a9.pairs_for_margin <= 24
    v1 = M.resolution(rows[("V1", "dyt_minus_rms")])
    # +margin alone: the pairs and the finest margin of a one-sided reading (the interval wholly below +margin)
    v1_reading = rows[("V1", "dyt_minus_rms")].reading
    assert v1.pairs_for_margin == sample_size.confirmation_pairs(v1_reading.sd, 0.03, 0.9, one_sided=True)
    assert v1.finest_margin == pytest.approx(
        sample_size.smallest_margin(v1_reading.pairs, v1_reading.sd, 0.9, one_sided=True)
    )
    # one-sided needs fewer pairs than the two-sided equivalence at the same spread and margin
    assert v1.pairs_for_margin <= sample_size.confirmation_pairs(v1_reading.sd, 0.03, 0.9)
    assert M.resolution(rows[("Q4", "smollm2_ci")]) is None and M.resolution(rows[("B7", "paired_curve_loss")]) is None
    claims = [c.id for c in parse_claims()]
    page = render_design(design.parse(design.DESIGN, set(claims)), claims, M.family_table(_results(), M.parse()))
    section = page.split("### What each design can resolve", 1)[1]
    line = next(line for line in section.splitlines() if line.startswith("| A9 "))
    assert line == (
        f"| A9 | `paired_final_loss` | nats per byte | 24 | 0.01 | {a9.half_width:.3g} | 0.02 | "
        f"{a9.finest_margin:.3g} | {a9.pairs_for_margin} |"
    )
    # a reading against +margin alone shows its one-sided pairs too, not a dash
    v1_line = next(line for line in section.splitlines() if line.startswith("| V1 | `dyt_minus_rms`"))
    assert v1_line.endswith(f"| {v1.finest_margin:.3g} | {v1.pairs_for_margin} |"), v1_line


def test_the_pages_name_as_caveated_only_verdicts_the_lost_reading_bears_on(tmp_path):
    family = _family(tmp_path)
    results = _results()
    v1 = next(r for r in results[0]["claims"] if r["id"] == "V1")
    v1["evidence"]["dyt_minus_layer"].update(_interval(0.086, 0.0173205, 3, 0.03))  # decides alone, not over six
    for verdict, named in (("not testable here", False), ("does not hold", False), ("holds with caveats", True)):
        v1["verdict"] = verdict  # not testable for another reason, or a verdict the reading does not bear on
        sentence = M.summary_sentence(M.family_table(results, family))
        listed = sentence.rsplit(". ", 1)[-1]
        assert (listed.startswith(("V1", "B15 and V1")) and "caveat" in listed) is named, (verdict, sentence)


def test_a_verdict_the_family_leaves_undecided_leads_no_opening_sentence():
    """Through the study's one judge (results.judge), on the registered family: B15's deciding reading at level about
    0.04 alone decides nothing over the family, so its verdict is not testable here, its summary says that the rest
    reads the interval alone, and it keeps no opening-page sentence."""
    from normlab.study.findings import Finding
    from normlab.study.results import judge
    from normlab.study.trained import ArmLosses

    half = 2.776 * 0.02 / 5**0.5
    interval = dict(pairs=5, mean_difference=0.047, sd_of_differences=0.02, margin=0.02, outcome="different",
                    ci_low=0.047 - half, ci_high=0.047 + half)  # fmt: skip
    arms = ArmLosses({"none": 2.3, "decayed": 2.35}, {"none": 5.5, "decayed": 5.5}, 3.1122, "a small GPT")
    finding = Finding(
        "holds with caveats", "Decay moves the loss.", {"decay_sweep": {"pairs": {"30.0": interval}}},
        headline="Decay moves the loss.", arms=arms,
    )  # fmt: skip
    judged = judge("B15", finding)
    assert judged.verdict == "not testable here" and judged.headline is None
    assert judged.summary.startswith(M.UNDECIDED)
    assert "The rest of this summary reads it at 95% alone. Decay moves the loss." in judged.summary
