"""The real-models chapter's summaries, findings and figures on hand-made inputs where the answer is known."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from normlab.analysis.realmodels import (  # noqa: E402
    centring_added,
    centring_map,
    centring_removed,
    centring_verdict,
    figures,
    forward_time,
    load,
    massive,
    profiles,
    stream,
)
from normlab.analysis.shared.paired import interval_text, paired_difference  # noqa: E402
from normlab.study.findings import Finding  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def stream_row(name, share, first_share, max_position, top, max_over_median=10.0):
    return {
        "norm": name,
        "along_ones_share": share,
        "along_ones_share_first_token": first_share,
        "rms": 1.0,
        "rms_first_token": 2.0,
        "shared_mean_share": 0.5,
        "shared_mean_along_ones": 0.001,
        "max_abs_first_token": 100.0,
        "max_abs_other_tokens": 5.0,
        "max_abs": 100.0,
        "max_channel": top[0],
        "max_position": max_position,
        "median_abs": 0.5,
        "max_over_median": max_over_median,
        "top_channels": top,
        "top_channel_max": [100.0, 50.0, 10.0],
    }


def two_block_stream():
    rows = [
        stream_row("model.layers.0.input_layernorm", 0.01, 0.2, 0, [7, 1, 2], 5.0),
        stream_row("model.layers.0.post_attention_layernorm", 0.02, 0.1, 3, [1, 7, 2], 6.0),
        stream_row("model.layers.1.input_layernorm", 0.03, 0.1, 0, [7, 2, 1], 400.0),
        stream_row("model.layers.1.post_attention_layernorm", 0.005, 0.1, 0, [7, 2, 1], 300.0),
        stream_row("model.norm", 0.004, 0.05, 0, [9, 2, 1], 200.0),
    ]
    return stream.summarise_stream(rows, blocks=2, width=64, tokens=128)


def test_profile_settings_checks_what_the_chapter_needs():
    assert profiles.profile_settings("smoke")["layers"] == 2
    with pytest.raises(ValueError, match="unknown profile .*; valid profiles: smoke, cpu, gpu"):
        profiles.profile_settings("huge")
    with pytest.raises(ValueError, match="batch must be a positive int"):
        profiles.profile_settings("smoke", {"batch": 0})
    with pytest.raises(ValueError, match="at least 2"):
        profiles.profile_settings("smoke", {"repeats": 1})


def test_sites_and_stream_summary_numbers():
    assert [stream.site_of(d, 2) for d in (0, 0.5, 1, 2)] == [
        "attention input",
        "MLP input",
        "attention input",
        "final norm",
    ]
    s = two_block_stream()
    assert list(s.trunk["depth"]) == [0.0, 1.0, 2.0]  # the MLP-input norms are not between blocks
    assert s.max_share == 0.03 and s.max_share_first == 0.2
    assert s.first_carries_max == pytest.approx(4 / 5)
    assert s.deep_max_over_median == 400.0  # depth >= 1 only: the 5.0 and 6.0 of block 0 are left out
    assert s.top_channel == 7


def test_stream_sentences_and_b5_evidence_name_the_numbers():
    s = two_block_stream()
    paragraph = stream.stream_paragraph(s)
    assert "Across all 5 norm inputs" in paragraph and "0.0300" in paragraph and "1/64" in paragraph
    assert "80%" in paragraph and "channel 7" in paragraph
    text, evidence = massive.b5_evidence(s, {"gguf_sha256": "x"})
    assert "2 of its 30" in text and "400x the median" in text
    assert list(evidence["depth"]) == [0.0, 1.0, 2.0] and evidence["tokens"] == 128
    assert evidence["random_direction_share"] == 1 / 64
    assert "<caption>" in str(stream.stream_table(s))


def centring_added_result(layer_shift, margin=0.01):
    base = [2.0, 2.1, 1.9, 2.05]
    layer = [b + layer_shift + 0.001 * i for i, b in enumerate(base)]
    apart = [b + 0.001 * (-1) ** i for i, b in enumerate(base)]
    sweep = pd.DataFrame(
        {
            "norm": ["a", "b", "c", "d"],
            "depth": [0.0, 0.5, 1.0, 2.0],
            "loss_change": [0.001, -0.05, 0.02, 0.0],
            "sd_over_chunks": [0.001, 0.01, 0.002, 0.0],
        }
    )
    sweep["site"] = [stream.site_of(d, 2) for d in sweep["depth"]]
    return centring_added.CentringAdded(
        base,
        layer,
        apart,
        paired_difference(base, layer, margin),
        paired_difference(base, apart, margin),
        sweep,
        sweep_chunks=2,
        sweep_length=16,
        margin=margin,
    )


def minilm_result(cosine_median):
    return {
        "pairs": 5,
        "cosine_to_original": [cosine_median] * 5,
        "cosine_median": cosine_median,
        "cosine_min": cosine_median - 0.01,
        "retrieval": {
            "original": {"recall_at_1": 0.8, "mrr": 0.9, "ranks": [1]},
            "without centring": {"recall_at_1": 0.6, "mrr": 0.7, "ranks": [2]},
        },
        "norm_input_along_ones_share": [0.04, 0.01, 0.0025],
    }


def test_centring_added_text_and_table():
    result = centring_added_result(0.2)
    assert result.added["outcome"] == "different"
    assert list(result.top_norms["norm"]) == ["b", "c", "a"]  # by size, sign ignored
    paragraph = centring_added.centring_added_paragraph(result)
    assert (
        interval_text(result.added, "nats per token", margin=False) in paragraph
        and "**different**" in paragraph
        and "±0.01 nats per token margin" in paragraph
    )
    assert "`b` (-0.0500)" in paragraph and "2 chunks of 16 tokens" in paragraph
    assert "-0.0290 nats per token" in paragraph
    html = str(centring_added.loss_table(result, length=32))
    assert "outcome vs 0.01 margin" in html and "4 held-out chunks of 32 tokens" in html


def test_q4_finding_flips_with_the_minilm_cosine_threshold():
    residual = two_block_stream()
    changed = centring_verdict.q4_finding(centring_added_result(0.2), minilm_result(0.9), 0.99, residual, {})
    unchanged = centring_verdict.q4_finding(centring_added_result(0.2), minilm_result(0.995), 0.99, residual, {})
    assert isinstance(changed, Finding)
    assert changed.verdict == "holds" and unchanged.verdict == "holds with caveats"
    assert changed.key_number == pytest.approx(0.2015) and changed.threshold == 0.01
    assert (
        "0.9000 (threshold 0.99)" in changed.summary
        and "MRR moves 0.900→0.700" in changed.summary
        and "different vs ±0.01" in changed.summary
    )
    assert changed.reads == ("margin", "cosine_threshold")
    smollm2 = centring_added_result(0.2).added
    assert changed.spread == pytest.approx(smollm2["sd_of_differences"] / math.sqrt(smollm2["pairs"]))
    assert (changed.meaning, changed.unit) == (
        "SmolLM2-135M's loss change, every RMSNorm → LayerNorm",
        "nats per token",
    )
    assert changed.headline == (
        "In two small models (SmolLM2-135M 4-bit, 4 chunks; MiniLM 22M, 5 sentence pairs), swapping in LayerNorm "
        "moves SmolLM2's loss by +0.202 nats per token, interval beyond ±0.01 nats per token, and centring changes "
        "MiniLM's embeddings."
    )
    assert unchanged.headline.endswith(
        "moves SmolLM2's loss by +0.202 nats per token, interval beyond ±0.01 nats per token, and MiniLM's embeddings "
        "ignore centring."
    )
    equivalent = centring_verdict.q4_finding(centring_added_result(0.0), minilm_result(0.995), 0.99, residual, {})
    assert equivalent.verdict == "does not hold"
    assert "by +0.00150 nats per token, interval inside ±0.01 nats per token" in equivalent.headline
    assert equivalent.headline.endswith("and MiniLM's embeddings ignore centring.")
    text, evidence = centring_verdict.b16_evidence(centring_added_result(0.2), minilm_result(0.9), residual)
    assert (
        "+0.2015 nats per token (different vs ±0.01)" in text
        and evidence["minilm_max_norm_input_along_ones_share"] == 0.04
    )


def test_minilm_labels_table_and_paragraph():
    assert centring_removed.minilm_norm_labels(5) == ["emb", "L0a", "L0f", "L1a", "L1f"]
    paragraph = centring_removed.centring_removed_paragraph(minilm_result(0.95))
    assert "median cosine of 0.9500" in paragraph and "0.900 to 0.700" in paragraph
    assert "up to 0.200 of its scale" in paragraph and "3 norms in a row" in paragraph  # √0.04 = 0.2
    assert "5 pairs" in str(centring_removed.retrieval_table(minilm_result(0.95)))


def timing_result(norm_share, hooks=True, load_average=(0.0, 0.0)):
    """Baseline 1 s prefill and 0.1 s decode; no norms saves `norm_share` of it; LayerNorm 10% slower."""
    rounds = [1.0, 1.02, 0.98]

    def variant(factor):
        return {"prefill_s": [factor * r for r in rounds], "decode_s": [0.1 * factor * r for r in rounds]}

    samples = {
        forward_time.BASELINE: variant(1.0),
        "normlab torch": variant(1.0),
        forward_time.LAYER_NORM: variant(1.1),
        forward_time.NO_NORMS: variant(1 - norm_share),
    }
    hooked = {"prefill": [norm_share] * 2, "decode": [norm_share, norm_share + 0.01]} if hooks else None
    return forward_time.TimingResult(
        samples,
        list(samples),
        hooked or {"prefill": [], "decode": []},
        prompt_tokens=32,
        rounds=3,
        decode_steps=2,
        threads=2,
        cores=2,
        device="cpu",
        load_average=load_average,
    )


def test_q5_finding_flips_at_the_share_threshold():
    above, below = (
        forward_time.q5_finding(timing_result(0.10), 0.07, {}),
        forward_time.q5_finding(timing_result(0.05), 0.07, {}),
    )
    assert above.verdict == "holds" and below.verdict == "does not hold"
    assert above.key_number == pytest.approx(0.10) and above.threshold == 0.07
    assert "norms take 10.0% of a 32-token prefill" in above.summary
    # a share of time on this machine: the first sentence says so, and whose machine it is
    first = above.summary.split(". ")[0]
    assert first.startswith("A share of time on this build's CPU (2 cores), so it turns on the machine: ")
    assert "changes prefill by +10.0% (sd 0.0%)" in above.summary
    assert above.reads == ("share_threshold",)
    assert above.evidence["share_method"] == "hooks"
    ablation = forward_time.q5_finding(timing_result(0.10, hooks=False), 0.07, {})
    assert ablation.evidence["share_method"] == "ablation" and ablation.key_number == pytest.approx(0.10)


def test_q5_on_a_busy_machine_is_called_fragile_and_a_quiet_one_is_not():
    quiet = forward_time.q5_finding(timing_result(0.10, load_average=(2.1, 2.4)), 0.07, {})
    busy = forward_time.q5_finding(timing_result(0.10, load_average=(2.1, 4.0)), 0.07, {})
    assert "Fragile" not in quiet.summary and quiet.evidence["busy_machine"] is False
    assert "Fragile: other work shared the cores while timing (load 4.0 on 2 cores)" in busy.summary
    assert busy.evidence["load_average_before_after"] == [2.1, 4.0] and busy.verdict == quiet.verdict


def test_time_paragraph_speed_evidence_and_table():
    result = timing_result(0.10)
    q5 = forward_time.q5_finding(result, 0.07, {})
    paragraph = forward_time.time_paragraph(result, q5)
    assert (
        paragraph.startswith("By hooks, the norms take 10.0% of the prefill time") and "the ablation gives" in paragraph
    )
    assert forward_time.GPU_COMMAND in paragraph
    ablation = timing_result(0.10, hooks=False)
    assert "the ablation gives" not in forward_time.time_paragraph(
        ablation, forward_time.q5_finding(ablation, 0.07, {})
    )
    text, evidence = forward_time.speed_evidence(result, q5)
    assert text.startswith("Real-LLM whole-model") and evidence["layernorm_vs_rmsnorm_prefill_pct"] == pytest.approx(10)
    assert evidence["backend_ratio_prefill"][forward_time.NO_NORMS] == pytest.approx(0.9)
    html = str(forward_time.timing_table(result, blocks=2))
    assert forward_time.NO_NORMS in html and "3 interleaved rounds on 2 threads" in html
    change, _ = forward_time.paired_change(result.samples, forward_time.LAYER_NORM, forward_time.BASELINE, "decode")
    assert change == pytest.approx(0.1)
    assert forward_time.change_text((0.1, 0.02)) == "+10.0% (sd 2.0%)"


def test_provenance_note():
    provenance = {
        "gguf_file": "f.gguf",
        "package": "p==1",
        "gguf_sha256": "ab" * 32,
        "layers_loaded": 2,
        "layers_in_model": 30,
        "versions": {"transformers": "5", "gguf": "0.1"},
        "tokens_per_chunk": 32,
    }
    note = load.provenance_note(provenance, "smoke", 6)
    assert "`abababababababab…`" in note and "2 of its 30 layers" in note and "6 held-out chunks of 32 tokens" in note


def test_stream_figures_draw_one_line_per_quantity():
    s = two_block_stream()
    fig = figures.along_ones_figure(s.stream, 64)
    left, right = fig.axes
    assert len(left.lines) == 3 and left.get_yscale() == "log" and left.lines[2].get_ydata()[0] == 1 / 64
    assert [t.get_text() for t in right.get_legend().get_texts()][0] == "‖shared mean‖² / mean ‖x‖²"
    (ax,) = figures.outliers_figure(s.stream).axes
    assert len(ax.lines) == 4 and ax.get_ylabel() == "magnitude"


def test_per_norm_minilm_and_time_figures():
    (ax,) = figures.per_norm_figure(centring_added_result(0.2).sweep, 0.01).axes
    assert sorted(t.get_text() for t in ax.get_legend().get_texts()) == ["MLP input", "attention input", "final norm"]
    assert sorted(line.get_ydata()[0] for line in ax.lines if line.get_linestyle() == ":") == [-0.01, 0.01]
    left, right = figures.minilm_figure([0.04, 0.01], ["emb", "L0a"], [0.9, 0.95, 0.97], 0.99).axes
    assert len(left.patches) == 2 and right.lines[0].get_xdata()[0] == 0.99
    timing = timing_result(0.10)
    prefill, decode = figures.time_figure(timing.timing, timing.variants).axes
    assert len(prefill.patches) == 4 and [t.get_text() for t in prefill.get_yticklabels()][-1] == forward_time.NO_NORMS
    assert decode.get_xlabel() == "decode: time relative to as loaded"


# ---------------------------------------------------------------- the literature's own tests, on a tiny LLaMA


class TinyRun:
    """The two attributes of a SmolLM2Run that the centring map and the massive ablation read."""

    def __init__(self, massive_value=5000.0, held_out_value=None):
        transformers = pytest.importorskip("transformers")
        config = transformers.LlamaConfig(
            vocab_size=40,
            hidden_size=16,
            intermediate_size=24,
            num_hidden_layers=2,
            num_attention_heads=2,
            tie_word_embeddings=True,
            attn_implementation="eager",
        )
        torch.manual_seed(0)
        self.model = transformers.LlamaForCausalLM(config).eval()
        with torch.no_grad():
            self.model.model.embed_tokens.weight.add_(0.05)  # a common offset, so the two norms differ
            self.model.model.embed_tokens.weight[5, 3] = massive_value
            self.model.model.embed_tokens.weight[4, 3] = massive_value if held_out_value is None else held_out_value
        self.loss_chunks = torch.randint(6, 40, (4, 9), generator=torch.Generator().manual_seed(3))
        self.loss_chunks[:, 0] = 5  # every chunk opens with the token that carries the massive activation
        # The chunks the means are taken on: other sequences, opening with token 4 (the same value unless told).
        self.stream_chunks = torch.randint(6, 40, (3, 12), generator=torch.Generator().manual_seed(4))
        self.stream_chunks[:, 0] = 4


def tiny_trunk(max_abs_at_1, over_at_1):
    """A stream summary whose depth 1 (the output of block 0) has the given max |x| and max/median ratio."""
    rows = [
        stream_row("model.layers.0.input_layernorm", 0.01, 0.01, 0, [3, 1, 2], 5.0),
        stream_row("model.layers.0.post_attention_layernorm", 0.01, 0.01, 0, [3, 1, 2], 5.0),
        stream_row("model.layers.1.input_layernorm", 0.01, 0.01, 0, [3, 1, 2], over_at_1),
        stream_row("model.layers.1.post_attention_layernorm", 0.01, 0.01, 0, [3, 1, 2], 5.0),
        stream_row("model.norm", 0.01, 0.01, 0, [3, 1, 2], 6.0),
    ]
    summary = stream.summarise_stream(rows, blocks=2, width=16, tokens=36)
    summary.trunk.loc[summary.trunk["depth"] == 1, "max_abs"] = max_abs_at_1
    return summary


RULE = massive.MassiveRule(ratio=1000, floor=100)


def test_massive_ablation_on_a_tiny_llama_finds_the_planted_activation():
    result = massive.measure_massive_ablation(
        TinyRun(), tiny_trunk(5000.0, 4000.0), RULE, batch=2, margin=0.01, roles=massive.PositionRoles()
    )
    assert result.found and result.depth == 1
    assert result.entries == 4 == result.first_token and result.channels == [3]
    assert result.held_out_chunks == 3 and result.held_out_entries[massive.FIRST_TOKEN] == 3
    assert list(result.mean_values) == [massive.FIRST_TOKEN] and result.unmatched == 0
    # the same value in every chunk, held out or scored
    assert result.mean_values[massive.FIRST_TOKEN][3] == pytest.approx(result.largest, rel=1e-3)
    assert max(abs(d) for d in result.changes[massive.MEAN]["differences"]) < 1e-3
    assert abs(result.changes[massive.ZERO]["mean_difference"]) > 10 * abs(
        result.changes[massive.MEAN]["mean_difference"]
    )
    html = str(massive.massive_table(result))
    assert massive.ZERO in html and "4 scored chunks of 9 tokens" in html and "after block 1" in html
    paragraph = massive.massive_paragraph(result)
    assert "after block 1: in the 4 scored chunks, 4 entries (100% on the first token) in channels 3" in paragraph
    assert "3 held-out chunks (3 entries), by position role: first token: channel 3 +5" in paragraph
    assert (
        interval_text(result.changes[massive.ZERO], "nats per token", margin=False) in paragraph
        and "stay as they are" not in paragraph
    )
    assert "means come from 3 other chunks" in html
    evidence = result.evidence()
    assert evidence["massive_entries"] == 4 and evidence["loss_change_set_to_zero"]["outcome"] in (
        "different",
        "inconclusive",
    )


def test_massive_ablation_writes_the_held_out_means_not_the_scored_chunks_own():
    run = TinyRun(5000.0, held_out_value=3000.0)
    result = massive.measure_massive_ablation(
        run, tiny_trunk(5000.0, 4000.0), RULE, batch=2, margin=0.01, roles=massive.PositionRoles()
    )
    held_out_mean = result.mean_values[massive.FIRST_TOKEN][3]
    assert held_out_mean == pytest.approx(3000.0, rel=0.01) and result.largest == pytest.approx(5000.0, rel=0.01)
    same = massive.measure_massive_ablation(
        TinyRun(), tiny_trunk(5000.0, 4000.0), RULE, batch=2, margin=0.01, roles=massive.PositionRoles()
    )
    # Scored chunks identical, only the held-out value moved: the edit now changes the loss, as a 3000 put where a
    # 5000 was must, while the mean of the same value changes nothing.
    assert run.loss_chunks.equal(TinyRun().loss_chunks)
    assert abs(result.changes[massive.MEAN]["mean_difference"]) > 100 * max(
        abs(d) for d in same.changes[massive.MEAN]["differences"]
    )
    run.stream_chunks = run.loss_chunks[:2]  # means taken on chunks that are then scored: refused
    with pytest.raises(ValueError, match="same sequence"):
        massive.measure_massive_ablation(
            run, tiny_trunk(5000.0, 4000.0), RULE, batch=2, margin=0.01, roles=massive.PositionRoles()
        )


def test_massive_ablation_without_a_passing_depth_says_so():
    result = massive.measure_massive_ablation(
        TinyRun(50.0), tiny_trunk(50.0, 60.0), RULE, batch=4, margin=0.01, roles=massive.PositionRoles()
    )
    assert not result.found and result.depth == 1 and result.entries == 0  # depth 1: the larger ratio of 60 and 6
    assert result.changes[massive.ZERO]["mean_difference"] == 0.0
    paragraph = massive.massive_paragraph(result)
    assert "the edited models equal the original" in paragraph
    assert "the test needs the full model" in paragraph


def test_centring_map_on_a_tiny_llama_is_exact_to_float32_rounding():
    run = TinyRun(1.0)
    result = centring_map.measure_centring_map(run, chunks=3, batch=2, tolerance=1e-4)
    assert result.mapped.chunks == 3 and result.length == 9
    assert result.mapped.max_relative_difference < 1e-5 < result.unmapped.max_relative_difference
    paragraph = centring_map.centring_map_paragraph(result, centring_added_result(0.2))
    assert "3 chunks of 9 tokens" in paragraph and "within the 0.0001" in paragraph and "+0.2015 nats" in paragraph
    evidence = centring_map.centring_map_evidence(result)
    assert evidence["centring_map_max_relative_difference"] == result.mapped.max_relative_difference
    assert evidence["centring_map_holds"] is True
    strict = centring_map.measure_centring_map(run, chunks=1, batch=2, tolerance=1e-12)
    paragraph = centring_map.centring_map_paragraph(strict, centring_added_result(0.2))
    assert "1 chunk of 9 tokens" in paragraph and "the map does not hold" in paragraph and "+0.2015" not in paragraph
    assert centring_map.centring_map_evidence(strict)["centring_map_holds"] is False


def test_massive_reading_follows_the_two_outcomes():
    assert "a constant of the right size" in massive.massive_reading("equivalent", "different")
    assert "not constants" in massive.massive_reading("different", "different")
    assert "does not need them" in massive.massive_reading("equivalent", "equivalent")
    assert "too wide" in massive.massive_reading("inconclusive", "different")


def test_new_evidence_joins_q4_and_b5_without_changing_their_records():
    residual, run = two_block_stream(), TinyRun()
    mapping = centring_map.measure_centring_map(run, chunks=2, batch=2, tolerance=1e-4)
    ablation = massive.measure_massive_ablation(
        run, tiny_trunk(5000.0, 4000.0), RULE, batch=2, margin=0.01, roles=massive.PositionRoles()
    )
    plain = centring_verdict.q4_finding(centring_added_result(0.2), minilm_result(0.9), 0.99, residual, {})
    extended = centring_verdict.q4_finding(
        centring_added_result(0.2), minilm_result(0.9), 0.99, residual, {}, mapping=mapping, massive=ablation
    )
    for key in ("verdict", "summary", "key_number", "threshold", "spread", "reads"):
        assert getattr(plain, key) == getattr(extended, key)
    assert set(extended.evidence) - set(plain.evidence) == {
        "centring_map_max_relative_difference",
        "centring_map_max_abs_difference",
        "centring_map_tolerance",
        "centring_map_holds",
        "centring_map_chunks",
        "centring_map_tokens_per_chunk",
        "centred_vs_trained_max_relative_difference",
        "massive_activation_ablation",
    }
    text, evidence = massive.b5_evidence(residual, {})
    text_with, evidence_with = massive.b5_evidence(residual, {}, ablation)
    assert text == text_with and set(evidence_with) - set(evidence) == {"massive_activation_ablation"}
