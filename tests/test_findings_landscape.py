"""The landscape chapter's findings and figures, on hand-made runs whose verdicts are known.

Each run record has the fields `landscape_run` returns that the analyses read. The chapter's smoke profile gives
the jobs (scales, labels, learning rates, seeds); a loss function of the tag sets each run's outcome.
"""

import math
from types import SimpleNamespace

import matplotlib
import pandas as pd
import pytest

from normlab.analysis import landscape as L
from normlab.analysis.figures import landscape as figures

matplotlib.use("Agg")

CORPUS = SimpleNamespace(unigram_entropy_nats=2.5, sha256="f" * 64)
PROBES = {
    "embedding_rms": 0.02,
    "scaled_embedding_rms": 0.08,
    "block_grad": {"rms": 1e-3, "dyt": 1e-4, "dyt-plain": 1e-6},
    "saturation": {"saturated_share": {"final_norm": 0.5}, "block_gradient": 1e-9},
}


def settings():
    return L.profile_settings("smoke")


def make_runs(*, loss=None, diverged=None, growth=None, drop_one=None, final_drop=0.001, P=None):
    """One record per job of the smoke profile. `loss(tag)` is the final loss (default 2.0, +0.001 per seed, so
    paired differences have a spread), `diverged(tag)` flags a divergence, `growth(tag)` the hidden RMS after the
    last block over that after the first, `drop_one(tag)` the drop-one losses of a deepest run."""
    P = P or settings()
    runs = []
    for job in L.landscape_jobs(P):
        tag, model = job["tag"], job["model"]
        final = loss(tag) if loss else 2.0 + 0.001 * tag["seed"]
        blocks = model.get("depth", P[tag["scale"]]["depth"])
        g = growth(tag) if growth else 2.0
        stream = [(0, layer, 1.0) for layer in range(blocks + 1)]
        stream += [(20, 0, 0.5)] + [
            (20, layer, 1.0 + (g - 1.0) * (layer - 1) / (blocks - 1)) for layer in range(1, blocks + 1)
        ]
        runs.append(
            {
                "tag": tag,
                "model": model,
                "diverged": bool(diverged(tag)) if diverged else False,
                "final_val_loss": final,
                "final_drop": final_drop,
                "median_step_time": 0.01,
                "stream_rms": stream,
                "grad_norms": [[1.0] * blocks, [0.5] * blocks],
                "max_logit": [{"step": 0, "max_logit": 1.0}, {"step": 20, "max_logit": 4.0 * tag["lr"] / 1e-2}]
                if job.get("probe_every")
                else [],
                "drop_one": (drop_one(tag) if drop_one else [0.5, 0.2, 0.2, 0.1]) if job.get("drop_one") else None,
                "corpus_sha256": CORPUS.sha256,
            }
        )
    return runs


def study_of(runs, P=None):
    return L.Landscape(P or settings(), runs, CORPUS, loss_margin=0.03, usable_tolerance=0.25)


# ---- profiles and jobs ---------------------------------------------------------------------------------------


def test_profile_settings_are_checked_copies():
    with pytest.raises(ValueError, match="profile must be one of"):
        L.profile_settings("laptop")
    P = L.profile_settings("cpu")
    P["seeds"] = 1
    assert L.PROFILES["cpu"]["seeds"] == 3


def test_jobs_pair_every_variant_over_seeds_at_the_reference_lr():
    P = L.profile_settings("cpu")
    jobs = L.landscape_jobs(P)
    assert len(jobs) == 77  # the sizing the cpu profile states
    tags = [j["tag"] for j in jobs]
    for scale, labels in (("small", L.SMALL_VARIANTS), ("deep", L.PLACEMENTS), ("deepest", ("pre", "1/√l"))):
        for label in labels:
            seeds = [
                t["seed"]
                for t, j in zip(tags, jobs)
                if t["scale"] == scale
                and t["label"] == label
                and t["lr"] == P[f"{scale}_train"]["lr"]
                and j["model"]["width"] == P[scale]["width"]
                and j["model"].get("dyt_alpha", 0.5) == 0.5
            ]
            assert seeds == list(range(P["seeds"])), (scale, label)
    assert all(j["train"]["eval_every"] == j["train"]["steps"] // 10 for j in jobs)
    assert sum(bool(j.get("probe_every")) for j in jobs) == 2 * (P["seeds"] + (len(P["lr_grid"]) - 1) * P["grid_seeds"])


def test_run_jobs_starts_the_longest_first_and_returns_the_jobs_order(monkeypatch):
    P = settings()
    jobs = L.landscape_jobs(P)
    started = []

    def fake_parallel(fn, batch, **_):
        started.extend(job["tag"]["scale"] for job in batch)
        return [{"tag": job["tag"], "corpus_sha256": "a"} for job in batch]

    monkeypatch.setattr(L, "run_parallel", fake_parallel)
    runs = L.run_jobs(jobs, P)
    assert [r["tag"] for r in runs] == [j["tag"] for j in jobs]
    assert started == sorted(started, key=lambda scale: -L.SCALE_COST[scale])
    monkeypatch.setattr(
        L, "run_parallel", lambda fn, batch, **_: [{"corpus_sha256": str(i)} for i in range(len(batch))]
    )
    with pytest.raises(RuntimeError, match="different corpora"):
        L.run_jobs(jobs, P)


def test_step_times_times_the_baseline_and_every_variant_at_the_small_scale(monkeypatch):
    P = settings()
    seen = {}
    monkeypatch.setattr(L, "compare_step_times", lambda configs, corpus, **kw: seen.update(configs=configs, **kw))
    L.step_times(P, CORPUS)
    assert list(seen["configs"]) == [L.BASELINE, *L.SUMMARY_VARIANTS]
    assert {c.width for c in seen["configs"].values()} == {P["small"]["width"]}
    assert seen["configs"]["LayerNorm Scaling"].depth_scaling and seen["configs"]["Peri-LN"].placement == "peri"
    assert seen["repeats"] == P["timing_repeats"] and seen["batch_size"] == P["small_train"]["batch_size"]


def test_versus_pairs_by_seed_and_refuses_a_diverged_run():
    study = study_of(make_runs(loss=lambda t: 2.0 + 0.001 * t["seed"] + (0.1 if t["label"] == "layer" else 0)))
    paired = study.versus("small", "rms", "layer")
    assert paired["mean_difference"] == pytest.approx(0.1) and paired["pairs"] == 2
    diverging = study_of(make_runs(diverged=lambda t: t["label"] == "layer" and t["seed"] == 1))
    assert diverging.versus("small", "rms", "layer") is None


# ---- V1 --------------------------------------------------------------------------------------------------


def v1_loss(dyt_offset, *, best_alpha_at_32=0.5):
    def loss(t):
        value = 2.0 + 0.001 * t["seed"]
        if t["label"] == "dyt":
            value += dyt_offset + 0.0005 * t["seed"]
            best = best_alpha_at_32 if t.get("width") == 32 else 0.5
            value += 0.01 * abs(math.log(t.get("dyt_alpha", 0.5) / best))
        return value

    return loss


def v1(runs):
    study = study_of(runs)
    pairs = L.dyt_pairs(study)
    return L.dyt_claim(study, pairs, L.alpha_sensitivity(study), PROBES)


def test_dyt_claim_flips_at_the_loss_margin():
    within = v1(make_runs(loss=v1_loss(0.0)))
    assert within.finding.verdict == "holds"
    assert within.finding.threshold == 0.03
    assert within.finding.key_number == pytest.approx(0.00025)
    assert "no worse against a +0.03 margin" in within.finding.summary
    worse = v1(make_runs(loss=v1_loss(0.1)))
    assert worse.finding.verdict == "does not hold" and "0.100 nats" in worse.finding.summary
    assert worse.paragraph.startswith("**Verdict (V1): does not hold.** " + worse.finding.summary)
    assert "DyT with the embedding scale ends at 2.10 nats per byte and learned context" in worse.paragraph


def test_dyt_claim_caveats_a_best_alpha_that_moves_with_width():
    tuned = v1(make_runs(loss=v1_loss(0.0, best_alpha_at_32=2.0)))
    assert tuned.finding.verdict == "holds with caveats"
    assert "best α₀ 0.50 at width 16, 2.0 at width 32" in tuned.finding.summary


def test_alpha_sensitivity_finds_the_best_alpha_per_width():
    study = study_of(make_runs(loss=v1_loss(0.0, best_alpha_at_32=2.0)))
    table = L.alpha_sensitivity(study)
    assert table["width"].tolist() == [16, 32] and table["best α₀"].tolist() == [0.5, 2.0]
    assert table["α₀ values that diverged"].tolist() == [0, 0]


def test_dyt_pairs_table_names_a_diverged_pair():
    study = study_of(make_runs(diverged=lambda t: t["label"] == "dyt-plain" and t["seed"] == 0))
    rows = L.dyt_pairs_table(L.dyt_pairs(study)).set_index("variant")
    assert rows.loc["DyT plain − RMSNorm", "outcome"] == "a run diverged"
    assert rows.loc["DyT − RMSNorm", "outcome"] == "no worse"


# ---- V2 --------------------------------------------------------------------------------------------------


def v2(pre_growth, normed_growth):
    def growth(t):
        return pre_growth if t["label"] in ("pre", "post") else normed_growth + 0.01 * t["seed"]

    study = study_of(make_runs(growth=growth))
    measures = L.placement_measures(study)
    return L.placement_claim(study, measures, pre_growth_needed=2.0, max_relative_growth=0.5), measures


def test_placement_claim_flips_at_the_relative_growth_threshold():
    held, measures = v2(4.0, 1.0)
    assert measures["relative_mean"]["peri"] == pytest.approx((1.0 + 1.01) / 2 / 4.0)
    # the same usable ranges as pre-LN: not strictly wider, hence the caveat
    assert held.finding.verdict == "holds with caveats" and held.finding.threshold == 0.5
    assert "(threshold 0.5)" in held.finding.summary
    failed, _ = v2(4.0, 3.0)
    assert failed.finding.verdict == "does not hold"
    assert failed.finding.key_number == pytest.approx((3.0 + 3.01) / 2 / 4.0)


def test_placement_claim_needs_pre_ln_growth():
    untestable, _ = v2(1.5, 0.5)
    assert untestable.finding.verdict == "not testable here"
    assert "stays under the 2× the claim presupposes" in untestable.paragraph


def test_placement_table_has_one_row_per_placement():
    _, measures = v2(4.0, 1.0)
    table = L.placement_table(measures)
    assert table["placement"].tolist() == list(L.PLACEMENTS)
    assert table.loc[0, "growth (last/first block)"] == pytest.approx(4.0)
    assert pd.isna(table.loc[0, "final loss − pre-LN"]) and table.loc[1, "final loss − pre-LN"] == 0


# ---- V3 --------------------------------------------------------------------------------------------------


def v3(diverges):
    study = study_of(make_runs(diverged=diverges))
    rows = L.final_logits(study)
    return L.qk_claim(study, rows), rows


def test_qk_claim_needs_a_failure_without_qk_norm_and_a_gain_with_it():
    def rms_fails_high(t):
        return t["label"] == "rms" and t["lr"] == 1e-1 and "width" not in t

    held, rows = v3(rms_fails_high)
    assert held.finding.key_number == pytest.approx(1.0)  # log10(0.1 / 0.01)
    assert held.finding.verdict == "holds with caveats"  # QK-norm never failed on the grid: the gain is a lower bound
    assert "a gain of 1.00 decades over 1 seeds" in held.finding.summary
    assert rows["largest logit, QK-norm"].tolist() == pytest.approx([4.0, 40.0])
    both_fail, _ = v3(lambda t: t["label"] in ("rms", "rms+qk") and t["lr"] == 1e-1)
    assert both_fail.finding.verdict == "does not hold" and both_fail.finding.key_number == 0.0
    neither, _ = v3(None)
    assert neither.finding.verdict == "not testable here"


# ---- V4 --------------------------------------------------------------------------------------------------


def v4(plain, scaled):
    def drop_one(t):
        values = scaled if t["label"] == "1/√l" else plain
        return [v + 0.01 * t["seed"] * (i == 3) for i, v in enumerate(values)]

    return L.depth_claim(study_of(make_runs(drop_one=drop_one)), curse_share=0.35)


def test_depth_claim_reads_the_later_half_share():
    held = v4([0.9, 0.05, 0.03, 0.02], [0.5, 0.2, 0.15, 0.15])
    assert held.finding.verdict == "holds" and held.finding.threshold == 0.0
    assert held.finding.key_number > 0
    assert "(curse threshold 0.35)" in held.finding.summary
    assert "The curse shows at this scale (later half at or below 35%)" in held.paragraph
    lowered = v4([0.5, 0.2, 0.15, 0.15], [0.5, 0.3, 0.1, 0.05])  # a curse (share 0.3), and scaling lowers it
    assert lowered.finding.verdict == "does not hold" and lowered.finding.key_number < 0
    no_curse = v4([0.2, 0.2, 0.3, 0.3], [0.2, 0.2, 0.3, 0.3])
    assert no_curse.finding.verdict == "not testable here"
    assert "The curse does not show at this scale" in no_curse.paragraph


# ---- the overview and the summary ------------------------------------------------------------------------


def test_overview_says_whether_the_loss_flattened_against_the_margin():
    flat = L.overview(study_of(make_runs(final_drop=0.001)))
    assert f"{len(L.landscape_jobs(settings()))} runs on corpus SHA-256 `ffffffffffff…`; 0 diverged" in flat
    assert "the loss has flattened against the 0.03-nat margin" in flat
    falling = L.overview(study_of(make_runs(final_drop=0.05)))
    assert "not quite flattened" in falling


def fake_timings(P, slower="QK-norm"):
    names = [L.BASELINE, *L.SUMMARY_VARIANTS]
    return pd.DataFrame(
        [
            {"model": name, "repeat": r, "step_time": 0.01 * (2 if name == slower else 1) * (1 + 0.1 * r)}
            for r in range(P["timing_repeats"])
            for name in names
        ]
    )


def test_summary_frame_has_the_step_time_ratio_and_ranges():
    P = settings()
    study = study_of(make_runs())
    summary = L.summary_frame(study, fake_timings(P)).set_index("variant")
    assert list(summary.index) == list(L.SUMMARY_VARIANTS)
    assert summary.loc["QK-norm", "step-time ratio"] == pytest.approx(2.0)
    assert summary.loc["LayerNorm", "step-time ratio"] == pytest.approx(1.0)
    assert pd.isna(summary.loc["LayerNorm Scaling", "usable LR from"])
    assert summary.loc["Peri-LN", "usable LR from"] == 1e-2
    baselines = L.baseline_ranges(study)
    assert baselines[-1] is None and baselines[0]["lr_low"] == 1e-2


# ---- figures ---------------------------------------------------------------------------------------------


def test_dyt_figure_draws_three_panels():
    P = settings()
    study = study_of(make_runs())
    fig = figures.dyt(study.frame, P, study.entropy)
    left, middle, right = fig.axes
    assert [t.get_text() for t in left.get_xticklabels()] == list(figures.V1_LABELS.values())
    assert len(left.lines) == P["seeds"] + 1  # one line per seed, and the entropy
    assert len(middle.lines) == 2 * len(P["alpha_widths"]) and middle.get_xscale() == "log"
    assert right.get_title() == "learning-rate grid" and len(right.lines) == len(L.SMALL_VARIANTS) + 1


def test_placement_figure_draws_every_placement():
    study = study_of(make_runs())
    fig = figures.placement({p: study.pick("deep", p) for p in L.PLACEMENTS})
    assert [len(ax.lines) for ax in fig.axes] == [4, 4, 4]
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == list(L.PLACEMENTS)


def test_qk_figure_draws_one_line_per_lr_and_variant():
    P = settings()
    fig = figures.qk(make_runs(), P["lr_grid"])
    (ax,) = fig.axes
    assert len(ax.lines) == 2 * len(P["lr_grid"]) and ax.get_yscale() == "log"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["lr 0.010", "lr 0.10"]


def test_depth_figure_pairs_the_seeds():
    P = settings()
    study = study_of(make_runs())
    fig = figures.depth({label: study.pick("deepest", label) for label in ("pre", "1/√l")}, P["seeds"])
    drop, growth, paired = fig.axes
    assert len(drop.lines) == 2 and drop.get_yscale() == "symlog" and len(growth.lines) == 2
    assert len(paired.lines) == P["seeds"] and [t.get_text() for t in paired.get_xticklabels()] == ["pre-LN", "1/√l"]


def test_summary_figure_shades_the_margin():
    P = settings()
    study = study_of(make_runs())
    summary = L.summary_frame(study, fake_timings(P))
    fig = figures.summary(summary, L.baseline_ranges(study), 0.03)
    loss, time, lr = fig.axes
    assert [t.get_text() for t in loss.get_yticklabels()] == list(L.SUMMARY_VARIANTS)
    band = loss.patches[0].get_extents().transformed(loss.transData.inverted())
    assert band.x0 == pytest.approx(-0.03) and band.x1 == pytest.approx(0.03)
    assert lr.get_xscale() == "log" and time.get_xlabel() == "step time ÷ baseline's"
