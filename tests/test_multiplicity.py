"""The family rule's arithmetic: Student's t tail, each reading's level by interval inversion, Holm's adjustment."""

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


def test_holm_adjusts_as_the_textbook_example():
    adjusted = M.holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.005}, 0.05)
    assert adjusted == pytest.approx({"d": 0.02, "a": 0.03, "c": 0.06, "b": 0.06})
    assert M.holm({"only": 0.049}, 0.05) == {"only": 0.049}
    assert M.holm({}, 0.05) == {}


def test_holm_never_rejects_less_than_bonferroni_nor_more_than_unadjusted():
    rng = random.Random(3)
    for _ in range(200):
        levels = {str(i): rng.random() ** 3 for i in range(rng.randint(1, 15))}
        adjusted = M.holm(levels, 0.05)
        for name, level in levels.items():
            assert level <= adjusted[name] <= min(1.0, len(levels) * level) + 1e-15


@pytest.mark.parametrize(
    "call, refusal",
    [
        (lambda: M.holm({"a": 1.5}, 0.05), "levels must lie in"),
        (lambda: M.holm({"a": 0.1}, 0.0), "alpha must lie strictly"),
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
registered = "2026-12-05"
rule = "holm"
alpha = 0.05
family_definition = "the readings below"
basis = "family-wise error at α under any dependence"
not_surviving = "kept, with a caveat"
family = [
    { claim = "A9", evidence = "paired_final_loss", reading = "margin" },
    { claim = "B7", evidence = "paired_curve_loss", reading = "margin" },
    { claim = "B15", evidence = "decay_sweep/pairs/30.0", reading = "margin" },
    { claim = "V1", evidence = "dyt_minus_rms", reading = "plus_margin" },
    { claim = "V1", evidence = "dyt_minus_layer", reading = "plus_margin", bears_on = ["holds", "holds with caveats"] },
    { claim = "Q4", evidence = "smollm2_ci", reading = "margin" },
]
"""


def _family(tmp_path, text=FAMILY_TOML):
    path = tmp_path / "design.toml"
    path.write_text(text)
    return M.parse(path, FAMILY_IDS)


def test_the_committed_family_parses_with_every_reading_registered():
    family = M.parse()
    assert family.rule == "holm" and family.alpha == 0.05 and family.registered == "2026-12-05"
    claims = {entry.claim for entry in family.entries}
    assert {"A9", "B5", "B7", "B15", "B16", "B17", "B18", "B19", "V1", "V3", "V4", "Q4"} <= claims
    assert all(entry.reading in M.READINGS for entry in family.entries)
    assert "Holm" in family.basis and "false-discovery" in family.basis


@pytest.mark.parametrize(
    "old, new, refusal",
    [
        ('claim = "B7"', 'claim = "Z9"', r"family entry 2 names unknown claim 'Z9'"),
        ('reading = "plus_margin" }', 'reading = "sideways" }', r"V1's reading of 'dyt_minus_rms' is 'sideways'"),
        ('evidence = "paired_curve_loss", ', "", r"B7's family entry 2 names no evidence path"),
        ('rule = "holm"', 'rule = "bh"', r"rule must be one of \('holm',\)"),
        ("alpha = 0.05", "alpha = 5", r"alpha must lie strictly between 0 and 1"),
        (
            'bears_on = ["holds", "holds with caveats"]',
            'bears_on = ["maybe"]',
            r"dyt_minus_layer' bears on \['maybe'\]",
        ),
        ('{ claim = "B7", evidence = "paired_curve_loss"', '{ claim = "A9", evidence = "paired_final_loss"', "twice"),
    ],
)
def test_a_bad_family_entry_is_refused_naming_it(tmp_path, old, new, refusal):
    assert old in FAMILY_TOML
    with pytest.raises(M.FamilyError, match=refusal):
        _family(tmp_path, FAMILY_TOML.replace(old, new, 1))


def test_a_design_without_the_table_registers_no_family(tmp_path):
    assert _family(tmp_path, "[claims]\n") is None


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


def test_the_family_table_finds_survivors_and_caveats(tmp_path):
    family = _family(tmp_path)
    table = M.family_table(_results(), family)
    rows = {(row.entry.claim, row.entry.evidence): row for row in table.rows}
    assert rows[("B7", "paired_curve_loss")].status == M.NOT_MEASURED  # listed, not dropped, not counted
    assert rows[("Q4", "smollm2_ci")].status == M.NO_SPREAD  # counted at level 1
    assert len(table.counted) == 5
    b15 = rows[("B15", "decay_sweep/pairs/30.0")]
    assert b15.decides(0.05) and not b15.survives(0.05)  # decides alone, not with the family
    for key in (("A9", "paired_final_loss"), ("V1", "dyt_minus_rms"), ("V1", "dyt_minus_layer")):
        assert rows[key].survives(0.05), rows[key]
    # Holm's adjustment over the five counted readings, Q4's at level 1
    levels = {key: row.level if row.level is not None else 1.0 for key, row in rows.items() if row in table.counted}
    adjusted = M.holm(levels, 0.05)
    assert b15.adjusted == pytest.approx(adjusted[("B15", "decay_sweep/pairs/30.0")])
    assert b15.adjusted == pytest.approx(min(1.0, 2 * b15.level))  # 4th of 5: two left, Q4 at 1 last
    caveats = table.caveats()
    assert set(caveats) == {"B15", "Q4"}
    (b15_caveat,) = caveats["B15"]
    assert b15_caveat.startswith("does not survive Holm's rule over the 5 readings") and M.is_family_caveat(b15_caveat)
    assert f"adjusted level {M.level_text(b15.adjusted)}, above 0.05" in b15_caveat and "verdict is kept" in b15_caveat
    assert "without its pairs or spread" in caveats["Q4"][0]
    sentence = M.summary_sentence(table)
    assert sentence.startswith(
        "Of the 5 readings of paired intervals in this build, 4 decide at 95% read alone; 3 of those survive"
    )
    assert "B15 rests on a reading that does not survive, Q4 on one its chapter records without its spread" in sentence


def test_a_caveat_only_reading_bears_on_holds_alone(tmp_path):
    family = _family(tmp_path)
    results = _results()
    layer = results[0]["claims"][2]["evidence"]["dyt_minus_layer"]
    layer.update(_interval(0.086, 0.0173205, 3, 0.03))  # above +0.03 alone (level about 0.03), not with the family
    table = M.family_table(results, family)
    row = next(r for r in table.rows if r.entry.evidence == "dyt_minus_layer")
    assert row.decides(0.05) and not row.survives(0.05)
    assert "V1" not in table.caveats()  # V1 does not hold: its LayerNorm reading only chooses holds/with caveats
    results[0]["claims"][2]["verdict"] = "holds with caveats"
    assert "V1" in M.family_table(results, family).caveats()


def test_caveats_reach_the_records_as_copies(tmp_path):
    results = _results()
    table = M.family_table(results, _family(tmp_path))
    caveated = M.with_caveats(results, table)
    b15 = next(r for r in caveated[0]["claims"] if r["id"] == "B15" and r["verdict"])
    assert any(M.is_family_caveat(c) for c in b15["caveats"])
    assert "caveats" not in results[0]["claims"][1]  # the runs passed in are left as they are


def test_the_design_page_shows_the_rule_and_the_family_table(tmp_path):
    from normlab.study import design
    from normlab.study.claims import parse_claims
    from normlab.study.pages.design_page import render_design

    claims = [c.id for c in parse_claims()]
    table = M.family_table(_results(), M.parse())
    page = render_design(design.parse(design.DESIGN, set(claims)), claims, table)
    section = page.split("## One rule for the family", 1)[1].split("## Changes after results were seen", 1)[0]
    assert "**Holm's step-down over the family, α = 0.05 family-wise.**" in section
    assert "- Why Holm's rule: Holm's step-down (Holm 1979)" in section
    assert "| Claim | Verdict | Interval | Read against | Level | Adjusted | Under the rule |" in section
    assert (
        "| B7 | not judged here | `paired_curve_loss` | inside or beyond ±margin | — | — | not measured here |"
        in section
    )
    b15 = next(line for line in section.splitlines() if line.startswith("| B15 "))
    assert b15.endswith("| does not survive |") and "| holds with caveats |" in b15
    assert "| A9 | holds | `paired_final_loss` | inside or beyond ±margin | <0.001 | <0.001 | survives |" in section
    assert "spread not recorded (counted at level 1)" in section
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
