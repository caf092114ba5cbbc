"""Massive activations found, averaged and replaced, on hand-made models where the answer is known."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from normlab.analysis.realmodels.massive import (
    FIRST_DELIMITER,
    FIRST_TOKEN,
    OTHER_POSITIONS,
    ROLES,
    MassiveAblation,
    MassiveRecorder,
    MassiveRule,
    PositionRoles,
    check_disjoint,
    first_massive_depth,
    is_delimiter,
)


class Writer(nn.Module):
    """Adds `values[b]` to channel 2 of the first token of sequence b: a massive activation of known size."""

    def __init__(self, values, as_tuple=False):
        super().__init__()
        self.values, self.as_tuple = torch.tensor(values), as_tuple

    def forward(self, x):
        out = x.clone()
        out[:, 0, 2] += self.values[: x.shape[0]]
        return (out, "attention weights") if self.as_tuple else out


class Reader(nn.Module):
    """Scales every entry by the first token's channel 2 over 1000: the output depends on the massive value."""

    def forward(self, h):
        h = h[0] if isinstance(h, tuple) else h
        return h * h[:, :1, 2:3] / 1000


class Toy(nn.Module):
    def __init__(self, values, as_tuple=False):
        super().__init__()
        self.writer, self.reader = Writer(values, as_tuple), Reader()

    def forward(self, x):
        return self.reader(self.writer(x))


def inputs(batch=3, tokens=5, width=8):
    return 0.1 * torch.randn(batch, tokens, width, generator=torch.Generator().manual_seed(0)) + 0.5


RULE = MassiveRule(ratio=1000, floor=100)


def test_rule_needs_both_the_ratio_and_the_floor():
    hidden = torch.full((2, 4, 10), 0.5)
    hidden[0, 0, 1] = 600.0  # 1200 x the median and over 100: massive
    hidden[0, 3, 4] = 400.0  # 800 x the median: not massive
    hidden[1] = 0.05
    hidden[1, 0, 1] = 80.0  # 1600 x its own sequence's median, but under the floor
    mask = RULE.mask(hidden)
    assert mask.sum() == 1 and mask[0, 0, 1]
    with pytest.raises(ValueError, match="batch, tokens, width"):
        RULE.mask(hidden[0])
    with pytest.raises(ValueError, match="ratio must be"):
        MassiveRule(ratio=0)


@pytest.mark.parametrize("as_tuple", [False, True])
def test_recorder_finds_the_written_entries_and_their_mean(as_tuple):
    toy = Toy([1000.0, 1200.0, 1400.0], as_tuple)
    with MassiveRecorder(toy.writer, RULE) as recorder:
        toy(inputs()[:2])
        toy(inputs())  # a second forward adds to the same counts
    assert recorder.entries == 5 and recorder.first_token == 5 and recorder.sequences == 5
    assert recorder.channels == [2]
    means = recorder.mean_values()
    assert means.shape == (len(ROLES), 8)
    expected = (inputs()[:2, 0, 2].sum() + inputs()[:, 0, 2].sum() + 2 * 1000 + 2 * 1200 + 1400) / 5
    assert means[ROLES.index(FIRST_TOKEN), 2].item() == pytest.approx(expected.item(), rel=1e-6)
    assert torch.isnan(means).sum() == means.numel() - 1  # no other role or channel held a massive entry
    assert recorder.role_entries == {FIRST_TOKEN: 5, FIRST_DELIMITER: 0, OTHER_POSITIONS: 0}
    assert recorder.largest == pytest.approx(1400 + inputs()[2, 0, 2].item(), rel=1e-6)


def test_a_constant_massive_activation_set_to_its_mean_changes_nothing_and_zero_destroys_the_output():
    toy = Toy([1000.0, 1000.0, 1000.0])
    x = inputs()
    x[:, 0, 2] = 0.5  # every sequence carries exactly the same massive value, 1000.5
    base = toy(x)
    with MassiveRecorder(toy.writer, RULE) as recorder:
        toy(x)
    with MassiveAblation(toy.writer, RULE, recorder.mean_values()) as ablation:
        at_mean = toy(x)
    assert ablation.replaced == 3
    assert torch.equal(at_mean, base)
    with MassiveAblation(toy.writer, RULE, torch.zeros(8)):
        at_zero = toy(x)
    assert at_zero.abs().max() == 0 and base.abs().min() > 0.1


def test_varying_massive_activations_are_set_to_their_common_mean():
    toy = Toy([1000.0, 2000.0, 3000.0], as_tuple=True)
    x = inputs()
    x[:, 0, 2] = 0.0
    with MassiveAblation(toy.writer, RULE, torch.full((8,), 2000.0)):
        out = toy(x)
    expected = x.clone()
    expected[:, 0, 2] = 2000.0
    assert torch.allclose(out, expected * 2.0)  # the reader's scale is 2000/1000 for every sequence


def test_ablation_and_recorder_check_their_input_and_leave_no_hook_behind():
    toy = Toy([1000.0, 1000.0, 1000.0])
    with pytest.raises(ValueError, match="no forward pass"):
        MassiveRecorder(toy.writer, RULE).mean_values()
    with pytest.raises(ValueError, match="one number per channel"):
        MassiveAblation(toy.writer, RULE, torch.zeros(2, 8))
    with pytest.raises(ValueError, match="4 channels"):
        with MassiveAblation(toy.writer, RULE, torch.zeros(4)):
            toy(inputs())
    assert not toy.writer._forward_hooks


def test_first_massive_depth_is_the_first_block_output_that_passes_the_rule():
    depths = [0.0, 1.0, 2.0, 3.0, 4.0]
    max_abs = [1.0, 900.0, 50.0, 3e4, 3e4]
    over = [10.0, 800.0, 2000.0, 1.4e4, 1.3e4]
    assert first_massive_depth(depths, max_abs, over, RULE) == 3  # depth 1 misses the ratio, 2 the floor
    assert first_massive_depth(depths[:3], max_abs[:3], over[:3], RULE) is None
    assert first_massive_depth([0.0], [1e5], [1e5], RULE) is None  # the embeddings are no block's output
    with pytest.raises(ValueError, match="one entry per depth"):
        first_massive_depth(depths, max_abs[:2], over, RULE)


def test_a_llama_decoder_layer_output_is_rewritten():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=32, hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=2
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.model.embed_tokens.weight[5, 3] = 5000.0
    ids = torch.randint(6, 32, (3, 7), generator=torch.Generator().manual_seed(2))
    ids[:, 0] = 5  # every chunk opens with the token that carries the massive activation
    with torch.no_grad(), MassiveRecorder(model.model.layers[0], RULE) as recorder:
        base = model(ids, use_cache=False).logits
    assert recorder.channels == [3] and recorder.first_token == 3 == recorder.entries
    with torch.no_grad(), MassiveAblation(model.model.layers[0], RULE, recorder.mean_values()):
        at_mean = model(ids, use_cache=False).logits
    with torch.no_grad(), MassiveAblation(model.model.layers[0], RULE, torch.zeros(16)):
        at_zero = model(ids, use_cache=False).logits
    assert (at_mean - base).abs().max() < (at_zero - base).abs().max()


# ------------------------------------------------- per position role, on token ids: Sun et al.'s per-position means

DELIMITER, WIDTH = 1, 8


class RoleWriter(nn.Module):
    """Writes a massive value of known size by position: 1000 + the token id into channel 2 of the first token, and
    3000 + the token id into channel 5 of every delimiter token after it (read from the ids the embedding saw)."""

    def __init__(self, embedding: nn.Embedding):
        super().__init__()
        self.ids = None
        embedding.register_forward_pre_hook(lambda module, args: setattr(self, "ids", args[0]))

    def forward(self, x):
        out = x.clone()
        out[:, 0, 2] += 1000.0 + self.ids[:, 0]
        later = torch.zeros_like(self.ids, dtype=torch.bool)
        later[:, 1:] = self.ids[:, 1:] == DELIMITER
        out[..., 5] += torch.where(later, 3000.0 + self.ids, torch.zeros_like(self.ids)).float()
        return out


class RoleToy(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(10, WIDTH)
        with torch.no_grad():
            self.embedding.weight.copy_(0.1 * torch.randn(10, WIDTH, generator=torch.Generator().manual_seed(1)) + 0.5)
        self.writer = RoleWriter(self.embedding)

    def forward(self, ids):
        return self.writer(self.embedding(ids))


ROLE_OF = {role: i for i, role in enumerate(ROLES)}
ROLES_HERE = PositionRoles(frozenset({DELIMITER}))


def test_is_delimiter_takes_a_period_or_a_line_break_with_whitespace_only():
    assert all(is_delimiter(text) for text in (".", " .", "\n", "\n    ", "\r\n", "\n\n"))
    assert not any(is_delimiter(text) for text in ("._", " ", "", "a\n", ".\n.", ")"))


def test_position_roles_mark_the_first_token_and_the_first_later_delimiter():
    ids = torch.tensor([[1, 4, 1, 1], [3, 4, 4, 4], [3, 4, 4, 1]])
    roles = ROLES_HERE.of(ids)
    first, delimiter, other = (ROLE_OF[r] for r in ROLES)
    # A delimiter at position 0 is the first token; the next one is the first delimiter, later ones are other.
    assert roles.tolist() == [
        [first, other, delimiter, other],
        [first, other, other, other],
        [first, other, other, delimiter],
    ]
    assert PositionRoles().of(ids)[:, 1:].eq(other).all()  # without delimiters only the first token stands apart
    with pytest.raises(ValueError, match="batch, tokens"):
        ROLES_HERE.of(ids[0])


def test_position_roles_from_a_tokenizer_keep_its_period_and_newline_tokens():
    class Tokenizer:
        vocabulary = ["a", ".", "\n  ", "._", " ."]

        def __len__(self):
            return len(self.vocabulary)

        def batch_decode(self, rows):
            return ["".join(self.vocabulary[i] for i in row) for row in rows]

    assert PositionRoles.from_tokenizer(Tokenizer()).delimiter_ids == frozenset({1, 2, 4})


def test_the_recorder_keeps_one_mean_per_position_role_and_channel():
    toy = RoleToy()
    ids = torch.tensor([[3, 4, 1, 4, 1], [5, 1, 4, 4, 4], [3, 4, 4, 4, 4]])
    with MassiveRecorder(toy.writer, RULE, ROLES_HERE, ids_from=toy.embedding) as recorder:
        hidden = toy(ids)
    means = recorder.mean_values()
    first, delimiter, other = (ROLE_OF[r] for r in ROLES)
    assert means[first, 2].item() == pytest.approx(hidden[:, 0, 2].mean().item(), rel=1e-6)  # 1003, 1005, 1003
    assert means[delimiter, 5].item() == pytest.approx(hidden[[0, 1], [2, 1], 5].mean().item(), rel=1e-6)
    assert means[other, 5].item() == pytest.approx(hidden[0, 4, 5].item(), rel=1e-6)  # the second delimiter
    assert recorder.role_entries == {FIRST_TOKEN: 3, FIRST_DELIMITER: 2, OTHER_POSITIONS: 1}
    assert torch.isnan(means[first, 5]) and torch.isnan(means[delimiter, 2])  # nothing pooled across roles
    assert set(recorder.role_means()) == set(ROLES) and list(recorder.role_means()[FIRST_TOKEN]) == [2]


def test_the_ablation_writes_each_roles_own_mean_and_leaves_entries_without_one_unchanged():
    toy = RoleToy()
    ids = torch.tensor([[3, 4, 1, 4, 1], [5, 1, 4, 4, 4]])
    base = toy(ids)
    values = torch.full((len(ROLES), WIDTH), float("nan"))
    values[ROLE_OF[FIRST_TOKEN], 2], values[ROLE_OF[FIRST_DELIMITER], 5] = 1111.0, 2222.0
    with MassiveAblation(toy.writer, RULE, values, ROLES_HERE, ids_from=toy.embedding) as ablation:
        out = toy(ids)
    assert out[:, 0, 2].tolist() == [1111.0, 1111.0]
    assert out[0, 2, 5].item() == 2222.0 == out[1, 1, 5].item()
    assert out[0, 4, 5] == base[0, 4, 5]  # the second delimiter's role ("other") has no value: unchanged
    assert ablation.replaced == 4 and ablation.unmatched == 1
    untouched = torch.ones_like(base, dtype=torch.bool)
    untouched[:, 0, 2] = False
    untouched[[0, 1, 0], [2, 1, 4], 5] = False
    assert torch.equal(out[untouched], base[untouched])


def test_roles_with_delimiters_need_the_token_ids_of_the_same_forward():
    toy = RoleToy()
    with pytest.raises(ValueError, match="need the token ids"):
        MassiveRecorder(toy.writer, RULE, ROLES_HERE)
    with pytest.raises(ValueError, match="per role and channel"):
        MassiveAblation(toy.writer, RULE, torch.zeros(2, WIDTH))
    other = nn.Embedding(10, WIDTH)
    other(torch.zeros(1, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="pass the embedding of the model"):
        with MassiveRecorder(toy.writer, RULE, ROLES_HERE, ids_from=other):
            toy(torch.tensor([[3, 4, 1, 4, 1]]))
    assert not toy.writer._forward_hooks and not other._forward_pre_hooks


def test_held_out_chunks_must_be_other_sequences_than_the_scored():
    held_out, scored = torch.tensor([[1, 2, 3], [4, 5, 6]]), torch.tensor([[7, 8, 9], [4, 5, 7]])
    check_disjoint(held_out, scored)  # a shared prefix is not the same sequence
    with pytest.raises(ValueError, match=r"held-out chunk and scored chunk \(1, 0\) are the same sequence"):
        check_disjoint(held_out, torch.tensor([[4, 5, 6], [7, 8, 9]]))
    with pytest.raises(ValueError, match="stream_chunks >= 1"):
        check_disjoint(held_out[:0], scored)
