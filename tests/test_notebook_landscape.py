"""The landscape chapter runs end to end on the smoke profile (the session's smoke run of every chapter, so it reads
the ecosystem and real-model results as in the book); each verdict follows from its recorded numbers."""

import pytest

from normlab.study import design
from normlab.study.results import VERDICTS
from smoke_book import chapter


def test_landscape_notebook_smoke(smoke_book):
    landscape = chapter(smoke_book, "landscape")
    results = landscape.results
    claims = {c["id"]: c for c in results["claims"]}
    # the chapter's claims, as the design assigns them
    assert set(claims) == {c for c, entry in design.load().claims.items() if entry.chapter == "landscape"}
    assert {"V1", "V2", "V3", "V4", "V7"} <= set(claims)
    for c in claims.values():
        assert c["verdict"] in VERDICTS and c["section"].startswith("landscape-") and c["rule"]
        assert c["threshold"] is not None
    v1 = claims["V1"]
    paired = v1["evidence"]["dyt_minus_rms"]
    assert paired["pairs"] == 2 and v1["threshold"] == paired["margin"] == 0.03
    # Non-inferiority read off the interval: "does not hold" exactly when the interval sits at or above the margin,
    # unless a baseline arm did not train (the did-it-train rule) or the family's rule leaves it not testable here
    if v1["verdict"] != "not testable here":
        assert (v1["verdict"] == "does not hold") == (paired["ci_low"] >= 0.03)
        assert v1["verdict"].startswith("holds") == (paired["ci_high"] < 0.03)
    # Every claim carries its arms beside the byte frequencies' entropy, and an arm short of the registered minimum
    # leaves any claim but V1 (whose DyT failing to train is its answer) not testable here.
    for c in claims.values():
        trained = c["evidence"]["arms_trained"]
        assert trained["arms"] and trained["unigram_entropy_nats"] > 0 and trained["minimum_below_entropy"] == 0.25
        if c["id"] != "V1" and not all(arm["trained"] for arm in trained["arms"].values()):
            assert c["verdict"] == "not testable here" and c["summary"].startswith("Not a verdict on the norm")
    # V6 as Verma ran it: the same steps on each training set, the record holding the sizes and the passes over each
    v6 = claims["V6"]["evidence"]
    assert v6["steps"] == 20 and v6["sizes"] == [40, 160, 1000] and v6["bytes_trained"] == 20 * 4 * 16
    assert v6["passes"] == pytest.approx({str(n): 20 * 4 * 16 / n for n in (40, 160, 1000)})
    assert v1["key_number"] == paired["mean_difference"] and v1["spread"] == paired["sd_of_differences"]
    # Both DyT variants are measured, paired: the recipe's embedding scale lifts the first input by sqrt(width).
    ev = v1["evidence"]
    assert ev["dyt_minus_dyt_plain"] is None or ev["dyt_minus_dyt_plain"]["pairs"] == 2
    assert ev["scaled_embedding_rms_at_init"] == pytest.approx(
        ev["embedding_rms_at_init"] * ev["model"]["width"] ** 0.5
    )
    v2 = claims["V2"]["evidence"]
    assert set(v2["growth"]) == {"pre", "post", "peri", "post-sublayer"} and all(
        len(g) == 2 for g in v2["growth"].values()
    )
    v3 = claims["V3"]
    # V3 under Wortsman et al.'s protocol: the key number is the paired reduction of LR sensitivity over the wide grid
    reduction, sensitivity = v3["evidence"]["sensitivity_reduction"], v3["evidence"]["lr_sensitivity"]
    assert v3["key_number"] == reduction["mean_difference"] and reduction["pairs"] == len(sensitivity["rms"]) == 2
    assert v3["threshold"] == 0.03 and v3["spread"] == reduction["standard_error"]
    assert v3["evidence"]["qk_lr_grid"] == [1e-2, 1e-1, 1.0]
    # The largest attention logit is tracked through training for every LR of the wide grid.
    assert all(row["largest logit, QK-norm"] is not None for row in v3["evidence"]["final_max_logit"])
    assert claims["V4"]["threshold"] == 0.05 and claims["V4"]["evidence"]["scaled_variant"]["init"] == "unscaled"
    v4 = claims["V4"]["evidence"]
    assert all(0 <= s <= 1 for s in v4["later_half_share_plain"] + v4["later_half_share_scaled"])
    # The executed page: the figures are labelled and nothing leaks a warning or a machine path.
    page = landscape.notebook
    names = [
        c["metadata"].get("mystnb", {}).get("figure", {}).get("name") for c in page["cells"] if c["cell_type"] == "code"
    ]
    assert {
        "fig-landscape-dyt",
        "fig-landscape-placement",
        "fig-landscape-qk",
        "fig-landscape-depth",
        "fig-landscape-summary",
    } <= set(names)
    for cell in page["cells"]:
        for output in cell.get("outputs", []):
            text = output.get("text", "") if output["output_type"] == "stream" else ""
            assert "Warning" not in "".join(text) and str(smoke_book) not in "".join(text)
