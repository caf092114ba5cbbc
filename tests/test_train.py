"""The training loop: schedule, parameter groups, reproducibility, resume, refusals and divergence."""

import math

import pytest
import torch

from normlab.gpt.corpus import build_corpus, load_corpus
from normlab.gpt.model import GPT, GPTConfig
from normlab.gpt.train import TrainConfig, learning_rate, parameter_groups, train

pytestmark = pytest.mark.usefixtures("one_thread")

MODEL = GPTConfig(context=32, width=32, depth=2, heads=4)


def run_config(**overrides) -> TrainConfig:
    base = dict(
        steps=12, batch_size=4, lr=1e-2, warmup_steps=3, eval_every=4, eval_batches=2, stream_every=6, progress=False
    )
    return TrainConfig(**{**base, **overrides})


@pytest.fixture(scope="module")
def corpus():
    return load_corpus()


def test_schedule_warms_up_then_follows_a_cosine_to_the_floor():
    cfg = TrainConfig(steps=100, lr=1.0, warmup_steps=10, min_lr_ratio=0.1)
    assert learning_rate(1, cfg) == pytest.approx(0.1) and learning_rate(10, cfg) == pytest.approx(1.0)
    assert learning_rate(55, cfg) == pytest.approx(0.1 + 0.9 * 0.5)  # halfway through the decay
    assert learning_rate(100, cfg) == pytest.approx(0.1)
    decay = [learning_rate(s, cfg) for s in range(10, 101)]
    assert all(a >= b for a, b in zip(decay, decay[1:]))


@pytest.mark.parametrize("tie", [False, True])
def test_parameter_groups_decay_matrices_only_and_gains_separately(tie):
    model = GPT(GPTConfig(context=32, width=32, depth=2, heads=4, norm="layer", tie_embeddings=tie))
    groups = {g["name"]: g for g in parameter_groups(model, TrainConfig(weight_decay=0.1, gain_weight_decay=0.05))}
    ids = {name: {id(p) for p in g["params"]} for name, g in groups.items()}
    everything = {id(p) for p in model.parameters()}
    assert set.union(*ids.values()) == everything and sum(map(len, ids.values())) == len(everything)
    assert ids["gains"] == {id(m.weight) for _, m in model.norms()}
    assert id(model.token_embedding.weight) in ids["no_decay"]
    assert all(id(m.bias) in ids["no_decay"] for _, m in model.norms())  # LayerNorm's beta
    assert id(model.blocks[0].attn.qkv.weight) in ids["decay"]
    assert (id(model.lm_head.weight) in ids["decay"]) == (not tie)
    assert groups["gains"]["weight_decay"] == 0.05 and groups["no_decay"]["weight_decay"] == 0.0


def test_same_seed_same_curve_and_the_tables_are_complete(corpus):
    a = train(MODEL, run_config(), corpus)
    b = train(MODEL, run_config(), corpus)
    c = train(MODEL, run_config(seed=1), corpus)
    assert a.history["loss"].tolist() == b.history["loss"].tolist()
    assert a.history["loss"].tolist() != c.history["loss"].tolist()
    h = a.history
    assert h["step"].tolist() == list(range(1, 13))
    assert {
        "loss",
        "lr",
        "step_time",
        "grad_norm/total",
        "grad_norm/blocks.0",
        "grad_norm/blocks.1",
        "grad_norm/token_embedding",
        "grad_norm/lm_head",
        "gain_norm/blocks.0.norm1",
        "gain_norm/final_norm",
    } <= set(h.columns)
    assert h.drop(columns="step").notna().all().all()
    assert a.val["step"].tolist() == [0, 4, 8, 12]
    assert sorted(a.stream["step"].unique()) == [0, 6, 12]
    assert sorted(a.stream["layer"].unique()) == [0, 1, 2]
    assert a.corpus_sha256 == corpus.sha256 and not a.diverged
    assert a.val["val_loss"].iloc[-1] < a.val["val_loss"].iloc[0] - 1.0  # it learns: 5.5 -> about 3.7 nats
    # Grad norm of the whole model is the root of the sum of the parts' squares.
    parts = [c for c in h.columns if c.startswith("grad_norm/") and c != "grad_norm/total"]
    assert h[parts].pow(2).sum(axis=1).pow(0.5).sub(h["grad_norm/total"]).abs().max() < 1e-4


def test_interrupted_and_resumed_run_matches_an_uninterrupted_one(corpus, tmp_path):
    config = dict(steps=12, lr=3e-3, seed=3)
    model = GPTConfig(context=32, width=32, depth=2, heads=4, dropout=0.1)  # dropout: the RNG state must resume too
    whole = train(model, run_config(**config), corpus)
    path = tmp_path / "run.ckpt"
    first = train(model, run_config(**config, checkpoint_path=str(path), checkpoint_every=2, interrupt_after=7), corpus)
    assert first.interrupted and first.steps_done == 7
    resumed = train(model, run_config(**config, checkpoint_path=str(path), checkpoint_every=2), corpus)
    assert resumed.steps_done == 12 and resumed.history["step"].tolist() == list(range(1, 13))
    assert resumed.history["loss"].tolist() == whole.history["loss"].tolist()
    assert resumed.val["val_loss"].tolist() == whole.val["val_loss"].tolist()
    for name, tensor in whole.model.state_dict().items():
        assert torch.equal(tensor, resumed.model.state_dict()[name]), name


def test_mismatched_or_corrupt_checkpoints_are_refused(corpus, tmp_path):
    path = tmp_path / "run.ckpt"
    train(MODEL, run_config(steps=4, checkpoint_path=str(path)), corpus)
    with pytest.raises(ValueError, match=r"train config lr: checkpoint has 0.01, this run has 0.001"):
        train(MODEL, run_config(steps=4, lr=1e-3, checkpoint_path=str(path)), corpus)
    with pytest.raises(ValueError, match=r"model config norm: checkpoint has 'rms', this run has 'layer'"):
        train(
            GPTConfig(context=32, width=32, depth=2, heads=4, norm="layer"),
            run_config(steps=4, checkpoint_path=str(path)),
            corpus,
        )
    other = build_corpus([("x", b"other text\n" * 100)])
    with pytest.raises(ValueError, match="corpus sha256"):
        train(MODEL, run_config(steps=4, checkpoint_path=str(path)), other)
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="corrupt"):
        train(MODEL, run_config(steps=4, checkpoint_path=str(path)), corpus)
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="corrupt"):
        train(MODEL, run_config(steps=4, checkpoint_path=str(path)), corpus)


def test_impossible_settings_fail_before_training():
    tiny_corpus = build_corpus([("x", b"abcdefgh\n" * 20)], val_fraction=0.1)
    with pytest.raises(ValueError, match="context 32 is longer than the corpus"):
        train(MODEL, run_config(), tiny_corpus)
    for bad, word in [
        (dict(steps=0), "steps"),
        (dict(warmup_steps=50), "warmup_steps"),
        (dict(lr=-1.0), "lr"),
        (dict(min_lr_ratio=2.0), "min_lr_ratio"),
        (dict(grad_clip=math.nan), "grad_clip"),
        (dict(device="tpu"), "device"),
        (dict(eval_batches=0), "eval_batches"),
    ]:
        with pytest.raises(ValueError, match=word):
            run_config(**bad)


def test_diverging_run_is_reported_not_raised(corpus):
    run = train(MODEL, run_config(steps=12, lr=1e30, warmup_steps=0, grad_clip=0.0), corpus)
    assert run.diverged and run.steps_done < 12
    assert not math.isfinite(run.history["loss"].iloc[-1]) or not math.isfinite(run.history["grad_norm/total"].iloc[-1])


def test_loss_parity_against_a_hand_computation():
    from normlab.analysis.shared.parity import loss_parity, t975

    a, b = [2.00, 2.10, 1.90], [2.05, 2.25, 2.15]
    result = loss_parity(a, b)
    mean_a, mean_b = sum(a) / 3, sum(b) / 3
    var_a = sum((v - mean_a) ** 2 for v in a) / 2
    var_b = sum((v - mean_b) ** 2 for v in b) / 2
    assert result["difference"] == pytest.approx(mean_b - mean_a, abs=1e-12)
    assert result["seed_spread"] == pytest.approx(math.sqrt((var_a + var_b) / 2), abs=1e-12)
    se = math.sqrt(var_a / 3 + var_b / 3)  # equal variances here, so Welch's df is 4
    assert result["ci_high"] - result["difference"] == pytest.approx(t975(4) * se, abs=1e-9)
    assert result["parity"] is False  # a 0.15 gap against a 0.1 spread
    assert loss_parity(a, [v + 0.05 for v in a])["parity"] is True
    with pytest.raises(ValueError, match="diverged"):
        loss_parity(a, [2.0, math.nan])
    with pytest.raises(ValueError, match="two seeds"):
        loss_parity([1.0], [1.0, 2.0])
