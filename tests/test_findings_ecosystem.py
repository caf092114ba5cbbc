"""The ecosystem chapter's verdicts (normlab.analysis.ecosystem) and figure, on hand-made survey tables."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from normlab.analysis.ecosystem import classify, family_norms, figures, verdicts  # noqa: E402
from normlab.study import paths  # noqa: E402
from normlab.study.findings import rule_text


def _survey(kinds: dict[str, str], release: str = "2023-01") -> pd.DataFrame:
    """A survey table as `dated_survey` returns it: one row per model type with its measured norm."""
    table = pd.DataFrame(
        [{"model_type": m, "family": m.upper(), "first_release": release, "norm": k} for m, k in kinds.items()]
    )
    table["year"] = table["first_release"].str[:4].astype(int)
    return table


NAMED = {m: "RMSNorm" for m in verdicts.A11_NAMED + verdicts.B1_NAMED}


def test_a11_flips_when_a_named_family_is_not_rms_norm():
    holds = verdicts.a11_named_families(_survey(NAMED), _survey(NAMED))
    assert holds.verdict == "holds" and holds.key_number == 0 and holds.threshold == 0.5 and holds.spread == 0
    assert holds.summary.startswith("LLaMA, Mistral and Gemma measure as RMSNorm, RMSNorm, RMSNorm in transformers")
    mistral_ln = {**NAMED, "mistral": "LayerNorm"}
    fails = verdicts.a11_named_families(_survey(mistral_ln), _survey(NAMED))
    assert fails.verdict == "does not hold" and fails.key_number == 1 and fails.spread == 1
    assert "RMSNorm, LayerNorm, RMSNorm" in fails.summary and fails.evidence["kinds"]["mistral"] == "LayerNorm"


def _with_layer_norm_families(count: int) -> pd.DataFrame:
    """The named families (all RMSNorm, 2023) plus `count` LayerNorm families released in 2021."""
    others = _survey({f"ln{i}": "LayerNorm" for i in range(count)}, release="2021-06")
    return pd.concat([_survey(NAMED), others], ignore_index=True)


def test_b1_caveat_follows_the_share_against_almost_all():
    table = _with_layer_norm_families(1)  # the named families, all RMSNorm, and one LayerNorm family
    families = len(NAMED) + 1
    share = len(NAMED) / families
    assert verdicts.b1_almost_all(table, table, almost_all=0.85).verdict == "holds"
    short = verdicts.b1_almost_all(table, table, almost_all=0.95)
    assert short.verdict == "holds with caveats" and short.key_number == pytest.approx(share)
    listed = f"of {families} listed families released after 2019"
    assert f"all use RMSNorm, but {listed} only {share:.0%} do: LN0 use LayerNorm." in short.summary
    # its rule is the registered one, with the design's bar, whatever bar the call was given
    assert short.reads == ("almost_all", "after_year")
    assert rule_text("B1", short.reads).endswith(
        "Thresholds: almost_all = 0.9 fraction of families; after_year = 2019 year."
    )
    enough = verdicts.b1_almost_all(table, table, almost_all=0.85)
    assert f"and {listed} {share:.0%} do: LN0 use LayerNorm." in enough.summary


def test_b1_fails_when_a_named_family_is_not_rms_norm_and_reads_the_spread_from_the_second_probe():
    table = _survey({**NAMED, "qwen3": "LayerNorm"})
    fails = verdicts.b1_almost_all(table, table, almost_all=0.5)
    assert fails.verdict == "does not hold" and "do not all use RMSNorm" in fails.summary
    again = _with_layer_norm_families(1)
    spread = verdicts.b1_almost_all(_survey(NAMED), again, almost_all=0.5).spread
    assert spread == pytest.approx((1 - len(NAMED) / (len(NAMED) + 1)) / 2**0.5)
    everyone = verdicts.b1_almost_all(_survey(NAMED), _survey(NAMED), almost_all=0.9)
    assert everyone.summary.endswith("released after 2019 100% do.")


def test_b1_refuses_a_share_outside_zero_to_one():
    with pytest.raises(ValueError, match="almost_all must be a share"):
        verdicts.b1_almost_all(_survey(NAMED), _survey(NAMED), almost_all=90)


def test_families_by_year_counts_per_year_and_norm():
    counts = family_norms.families_by_year(_with_layer_norm_families(2))
    assert counts.loc[2021, "LayerNorm"] == 2 and counts.loc[2023, "RMSNorm"] == len(NAMED)
    assert counts.loc[2021, "RMSNorm"] == 0


def test_read_and_date_the_survey_of_one_family():
    families = family_norms.read_families(paths.ROOT / "data" / "model_families.csv")
    assert {"model_type", "family", "first_release", "source"} <= set(families.columns)
    table = family_norms.dated_survey(families[families["model_type"] == "llama"], progress=False)
    assert table["norm"].tolist() == ["RMSNorm"] and table["year"].iloc[0] == int(table["first_release"].iloc[0][:4])


def test_transformers_version_is_the_installed_one():
    import transformers

    assert classify.transformers_version() == transformers.__version__


def test_verdict_paragraphs_one_per_record():
    records = [
        {"id": "A11", "verdict": "holds", "summary": "x."},
        {"id": "B1", "verdict": "does not hold", "summary": "y."},
    ]
    assert verdicts.verdict_paragraphs(records) == "**A11** — holds: x.\n\n**B1** — does not hold: y."


def test_years_figure_stacks_one_bar_series_per_norm():
    fig = figures.years(family_norms.families_by_year(_with_layer_norm_families(2)))
    (ax,) = fig.axes
    assert ax.get_xlabel() == "year of first release" and ax.get_ylabel() == "model families (count)"
    assert len(ax.containers) == 2 and [t.get_text() for t in ax.get_xticklabels()] == ["2021", "2023"]
    colours = {c.get_label(): c.patches[0].get_facecolor() for c in ax.containers}
    assert colours["RMSNorm"] == matplotlib.colors.to_rgba("tab:blue")
    plt.close(fig)
