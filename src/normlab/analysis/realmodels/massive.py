"""Massive activations set to their mean or to zero: Sun et al. 2024's test of whether they act as constants.

Sun et al. 2024 (*Massive Activations in Large Language Models*, arXiv 2402.17762) call an activation
massive when its magnitude exceeds about 100 and about 1,000 times the median magnitude of its hidden state;
such activations sit in a few fixed channels, on the starting token and on the first period or newline token
(their Figure 1, LLaMA2-7B). Their test: at the layer where they appear, set them to their mean, taken over other
sequences and kept apart per position (their released hook writes one value on the starting token and another on
the delimiter), and the loss barely moves; set them to zero, and the model breaks. They are then constants the model
relies on, like a bias, not per-token information.

`MassiveRule` says which entries of a hidden state are massive; `PositionRoles` gives each position its role
(the first token, the first delimiter after it, any other position), from the token ids. `MassiveRecorder`
watches one module's output (a decoder layer's: the residual stream after it) and averages the massive entries
per role and channel; `MassiveAblation` rewrites that output, replacing each massive entry by a value for its
role and channel (the recorded means, or zero). The rule is applied to each sequence's own hidden state, so
batching does not change which entries count. `first_massive_depth` picks the depth where the massive
activations first appear from per-depth statistics of the stream.

The chapter's section "Are the massive activations a constant? Sun et al.'s ablation" runs that test on SmolLM2
(`measure_massive_ablation`: means from the stream section's chunks, scored on the loss chunks, from the first
depth where the stream section finds massive activations), and `b5_evidence` writes the stream's part of B5
(judged in the quality chapter) with the ablation's numbers.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import pandas as pd
import torch
from torch import nn

from normlab.analysis.realmodels.load import SmolLM2Run
from normlab.analysis.realmodels.stream import StreamSummary
from normlab.analysis.realmodels.variants import chunk_losses
from normlab.analysis.shared.paired import interval_text, paired_difference
from normlab.study.key_numbers import NATS_PER_TOKEN
from normlab.study.present import significant, table


@dataclass(frozen=True)
class MassiveRule:
    """An entry is massive when |x| >= `floor` and |x| >= `ratio` times the median |x| of its own sequence's
    hidden state (all tokens and channels)."""

    ratio: float = 1000.0
    floor: float = 100.0

    def __post_init__(self):
        if not (self.ratio > 0 and self.floor >= 0):
            raise ValueError(f"ratio must be > 0 and floor >= 0, got {self.ratio!r} and {self.floor!r}")

    def mask(self, hidden: torch.Tensor) -> torch.Tensor:
        """Boolean mask of the massive entries of `hidden` (batch, tokens, width)."""
        if hidden.dim() != 3:
            raise ValueError(f"expected a (batch, tokens, width) hidden state, got shape {tuple(hidden.shape)}")
        magnitude = hidden.detach().abs()
        median = magnitude.flatten(1).median(dim=1).values.view(-1, 1, 1)
        return (magnitude >= self.ratio * median) & (magnitude >= self.floor)


FIRST_TOKEN, FIRST_DELIMITER, OTHER_POSITIONS = "first token", "first delimiter", "other positions"
ROLES = (FIRST_TOKEN, FIRST_DELIMITER, OTHER_POSITIONS)  # the index of each is its role number


def is_delimiter(text: str) -> bool:
    """Sun et al.'s delimiters: a period or a line break, with nothing but whitespace around it."""
    core = text.strip()
    return core == "." or (core == "" and "\n" in text)


@dataclass(frozen=True)
class PositionRoles:
    """Each position's role in its sequence: 0 the first token, 1 the first delimiter token after it, 2 any other.

    Roles rather than absolute positions: the chunks are windows cut from running text, so the first delimiter
    sits at a different index in each, and one mean per index would mix it with ordinary tokens.
    """

    delimiter_ids: frozenset[int] = frozenset()

    @classmethod
    def from_tokenizer(cls, tokenizer) -> PositionRoles:
        texts = tokenizer.batch_decode([[token] for token in range(len(tokenizer))])
        return cls(frozenset(token for token, text in enumerate(texts) if is_delimiter(text)))

    def of(self, ids: torch.Tensor) -> torch.Tensor:
        """The role number of every position of `ids` (batch, tokens), as a long tensor of the same shape."""
        if ids.dim() != 2:
            raise ValueError(f"expected (batch, tokens) token ids, got shape {tuple(ids.shape)}")
        roles = torch.full(ids.shape, ROLES.index(OTHER_POSITIONS), dtype=torch.long, device=ids.device)
        roles[:, 0] = ROLES.index(FIRST_TOKEN)
        if self.delimiter_ids and ids.shape[1] > 1:
            delimiters = torch.tensor(sorted(self.delimiter_ids), device=ids.device)
            later = torch.isin(ids[:, 1:], delimiters)
            rows = later.any(dim=1).nonzero().squeeze(1)
            first = later.int().argmax(dim=1)  # argmax returns the first of equal maxima
            roles[rows, first[rows] + 1] = ROLES.index(FIRST_DELIMITER)
        return roles


def _hidden_of(output):
    """A decoder layer returns its hidden state (transformers 5) or a tuple that starts with it (4.x)."""
    return output[0] if isinstance(output, tuple) else output


def _with_hidden(output, hidden):
    return (hidden, *output[1:]) if isinstance(output, tuple) else hidden


class _OutputHook:
    """Watches `module`'s output. With `ids_from` (the model's token embedding) it also reads each forward's token
    ids, so that `roles` can tell the first delimiter apart; without it only the first token has a role of its own."""

    def __init__(
        self,
        module: nn.Module,
        rule: MassiveRule,
        roles: PositionRoles | None = None,
        ids_from: nn.Module | None = None,
    ):
        roles = roles if roles is not None else PositionRoles()
        if roles.delimiter_ids and ids_from is None:
            raise ValueError(
                "roles that tell delimiters apart need the token ids: pass ids_from=model.get_input_embeddings()"
            )
        self.module, self.rule, self.roles, self.ids_from = module, rule, roles, ids_from
        self._handles, self._ids = [], None

    def __enter__(self):
        if self.ids_from is not None:
            self._handles.append(self.ids_from.register_forward_pre_hook(self._read_ids))
        self._handles.append(self.module.register_forward_hook(self._hook))
        return self

    def __exit__(self, *exc):
        for handle in self._handles:
            handle.remove()
        self._handles, self._ids = [], None

    def _read_ids(self, module, args):
        self._ids = args[0]

    def _roles_of(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.ids_from is None:
            return self.roles.of(torch.zeros(hidden.shape[:2], dtype=torch.long, device=hidden.device))
        if self._ids is None or tuple(self._ids.shape) != tuple(hidden.shape[:2]):
            shape = None if self._ids is None else tuple(self._ids.shape)
            raise ValueError(
                f"the token ids read from ids_from have shape {shape}, the hidden state {tuple(hidden.shape)}: "
                "pass the embedding of the model whose layer is watched"
            )
        return self.roles.of(self._ids)

    def _hook(self, module, args, output):
        raise NotImplementedError


class MassiveRecorder(_OutputHook):
    """Per role and channel: how many entries of `module`'s output are massive and their sum; over every forward
    while the context is open."""

    def __init__(
        self,
        module: nn.Module,
        rule: MassiveRule,
        roles: PositionRoles | None = None,
        ids_from: nn.Module | None = None,
    ):
        super().__init__(module, rule, roles, ids_from)
        self.sums: torch.Tensor | None = None  # (roles, width)
        self.counts: torch.Tensor | None = None  # (roles, width)
        self.sequences = 0
        self.largest = 0.0

    def _hook(self, module, args, output):
        hidden = _hidden_of(output).detach()
        mask = self.rule.mask(hidden)
        roles = self._roles_of(hidden)
        values = torch.where(mask, hidden, torch.zeros_like(hidden)).double()
        width = hidden.shape[-1]
        sums = torch.zeros(len(ROLES), width, dtype=torch.float64, device=hidden.device)
        counts = torch.zeros(len(ROLES), width, dtype=torch.long, device=hidden.device)
        index = roles.reshape(-1)
        sums.index_add_(0, index, values.reshape(-1, width))
        counts.index_add_(0, index, mask.reshape(-1, width).long())
        self.sums = sums if self.sums is None else self.sums + sums
        self.counts = counts if self.counts is None else self.counts + counts
        self.sequences += hidden.shape[0]
        if mask.any():
            self.largest = max(self.largest, float(hidden.abs()[mask].max()))

    def _check(self):
        if self.counts is None:
            raise ValueError("the recorder saw no forward pass: run the model inside its `with` block")

    @property
    def entries(self) -> int:
        self._check()
        return int(self.counts.sum())

    @property
    def role_entries(self) -> dict[str, int]:
        """How many massive entries sit at each role."""
        self._check()
        return {role: int(self.counts[i].sum()) for i, role in enumerate(ROLES)}

    @property
    def first_token(self) -> int:
        return self.role_entries[FIRST_TOKEN]

    @property
    def channels(self) -> list[int]:
        """The channels holding at least one massive entry, most entries first."""
        self._check()
        per_channel = self.counts.sum(dim=0)
        order = sorted(range(per_channel.numel()), key=lambda c: (-int(per_channel[c]), c))
        return [c for c in order if per_channel[c] > 0]

    def mean_values(self) -> torch.Tensor:
        """(roles, width): per role and channel, the mean of its massive entries over every sequence seen; NaN where
        that role never held a massive entry in that channel (an ablation leaves such entries unchanged)."""
        self._check()
        nan = torch.full_like(self.sums, math.nan)
        return torch.where(self.counts > 0, self.sums / self.counts.clamp_min(1), nan)

    def role_means(self) -> dict[str, dict[int, float]]:
        """The finite means by role, then channel (most entries first): what the chapter reports."""
        means = self.mean_values()
        return {
            role: {c: float(means[i, c]) for c in self.channels if self.counts[i, c] > 0}
            for i, role in enumerate(ROLES)
            if self.counts[i].sum() > 0
        }


class MassiveAblation(_OutputHook):
    """While open, every massive entry of `module`'s output is replaced by a value for its channel: `values` holds
    one per channel (width,), for every position alike, or one per role and channel (roles, width). A NaN value
    leaves its entries unchanged; `replaced` and `unmatched` count the entries each way."""

    def __init__(
        self,
        module: nn.Module,
        rule: MassiveRule,
        values: torch.Tensor,
        roles: PositionRoles | None = None,
        ids_from: nn.Module | None = None,
    ):
        super().__init__(module, rule, roles, ids_from)
        if values.dim() == 1:
            values = values.unsqueeze(0).expand(len(ROLES), -1)
        if values.dim() != 2 or values.shape[0] != len(ROLES):
            raise ValueError(
                f"values must hold one number per channel (width,) or per role and channel ({len(ROLES)}, width), "
                f"got shape {tuple(values.shape)}"
            )
        self.values = values
        self.replaced = 0
        self.unmatched = 0

    def _hook(self, module, args, output):
        hidden = _hidden_of(output)
        if hidden.shape[-1] != self.values.shape[-1]:
            raise ValueError(f"values has {self.values.shape[-1]} channels, the hidden state {hidden.shape[-1]}")
        mask = self.rule.mask(hidden)
        table = self.values.to(device=hidden.device, dtype=hidden.dtype)
        fill = table[self._roles_of(hidden)]  # (batch, tokens, width): each position's role's row
        known = ~torch.isnan(fill)
        self.replaced += int((mask & known).sum())
        self.unmatched += int((mask & ~known).sum())
        return _with_hidden(output, torch.where(mask & known, fill, hidden))


def check_disjoint(held_out: torch.Tensor, scored: torch.Tensor) -> None:
    """The means must come from other sequences than those scored: no chunk of `held_out` may equal one of
    `scored` (both (chunks, tokens) ids) over the tokens both have."""
    if held_out.shape[0] == 0:
        raise ValueError("no held-out chunks to take the means from: the profile needs stream_chunks >= 1")
    common = min(held_out.shape[1], scored.shape[1])
    shared = (held_out[:, None, :common] == scored[None, :, :common]).all(dim=-1)
    if shared.any():
        pairs = [tuple(p) for p in shared.nonzero().tolist()]
        raise ValueError(
            f"held-out chunk and scored chunk {pairs[0]} are the same sequence ({len(pairs)} such pairs): cut the "
            "mean chunks and the scored chunks from disjoint parts of the text"
        )


def first_massive_depth(
    depths: list[float], max_abs: list[float], max_over_median: list[float], rule: MassiveRule
) -> int | None:
    """The first whole depth d >= 1 (the stream after d blocks) whose largest |x| passes `rule`, or None.

    The inputs are per-depth statistics of the stream between blocks, such as the real-models chapter's
    trunk rows: depth, max |x| and max |x| over the median |x|.
    """
    if not len(depths) == len(max_abs) == len(max_over_median):
        raise ValueError("depths, max_abs and max_over_median must have one entry per depth")
    for depth, largest, over in zip(depths, max_abs, max_over_median):
        if depth >= 1 and float(depth).is_integer() and largest >= rule.floor and over >= rule.ratio:
            return int(depth)
    return None


MEAN, ZERO, AS_TRAINED = "set to their mean", "set to zero", "left alone"
# What each loss change records: its interval and outcome, and the pairs, spread and margin that the multiplicity rule
# (normlab.study.multiplicity.reading_of) needs to compute the interval's level.
INTERVAL_KEYS = (
    "mean_difference",
    "ci_low",
    "ci_high",
    "outcome",
    "pairs",
    "sd_of_differences",
    "standard_error",
    "margin",
)


@dataclass
class MassiveAblationResult:
    rule: MassiveRule
    depth: int  # the stream after this many blocks (the output of block depth - 1) is edited
    found: bool  # a depth passed the rule; else the depth with the largest max/median ratio is edited
    entries: int  # massive entries over all scored chunks
    role_entries: dict[str, int]  # how many of them sit at each position role
    channels: list[int]  # the channels that hold them, most entries first
    held_out_chunks: int  # the chunks the means were taken on, none of them scored
    held_out_entries: dict[str, int]  # massive entries per role in the held-out chunks
    mean_values: dict[str, dict[int, float]]  # per role, then channel: the held-out mean "set to their mean" writes
    unmatched: int  # scored entries whose role and channel held no massive entry in the held-out chunks: unchanged
    largest: float
    losses: dict[str, list[float]]  # per condition, the loss of each scored chunk
    length: int  # tokens per chunk
    changes: dict[str, dict]  # per edited condition, paired_difference against the model left alone
    margin: float

    @property
    def first_token(self) -> int:
        return self.role_entries[FIRST_TOKEN]

    def evidence(self) -> dict:
        return {
            "rule_ratio_to_median": self.rule.ratio,
            "rule_floor": self.rule.floor,
            "edited_depth": self.depth,
            "depth_passed_rule": self.found,
            "massive_entries": self.entries,
            "massive_entries_on_first_token": self.first_token,
            "massive_entries_by_position_role": dict(self.role_entries),
            "channels": self.channels,
            "means_from": "held-out chunks (the stream section's), per position role and channel",
            "held_out_chunks": self.held_out_chunks,
            "held_out_entries_by_position_role": dict(self.held_out_entries),
            "mean_values_by_position_role": {
                role: {str(c): v for c, v in means.items()} for role, means in self.mean_values.items()
            },
            "entries_without_held_out_mean": self.unmatched,
            "largest_massive_abs": self.largest,
            "loss_left_alone": statistics.fmean(self.losses[AS_TRAINED]),
            **{
                f"loss_change_{condition.replace(' ', '_')}": {
                    key: self.changes[condition][key] for key in INTERVAL_KEYS
                }
                for condition in (MEAN, ZERO)
            },
            "margin_nats": self.margin,
            "chunks": len(self.losses[AS_TRAINED]),
            "tokens_per_chunk": self.length,
        }


def edited_depth(stream: StreamSummary, rule: MassiveRule) -> tuple[int, bool]:
    """The depth whose output is edited, and whether it passed `rule`: the first depth where the stream section
    finds massive activations, else (a short cut of the model) the depth where the stream comes closest."""
    trunk = stream.trunk
    depth = first_massive_depth(list(trunk["depth"]), list(trunk["max_abs"]), list(trunk["max_over_median"]), rule)
    if depth is not None:
        return depth, True
    deep = trunk[trunk["depth"] >= 1]
    return int(deep.loc[deep["max_over_median"].idxmax(), "depth"]), False


def measure_massive_ablation(
    run: SmolLM2Run,
    stream: StreamSummary,
    rule: MassiveRule,
    batch: int,
    margin: float,
    length: int | None = None,
    roles: PositionRoles | None = None,
) -> MassiveAblationResult:
    """Sun et al.'s test: the massive entries of the stream at the depth where they first appear (by `rule`, from
    the stream section's statistics) are averaged per position role and channel on the held-out chunks (the
    stream section's), then, on the loss chunks, left alone, set to those means and set to zero; the losses are
    paired by chunk. Both sets of chunks are cut to the scored chunks' first `length` tokens (all by default).
    `roles` defaults to the delimiters of the run's tokenizer."""
    roles = roles if roles is not None else PositionRoles.from_tokenizer(run.tokenizer)
    depth, found = edited_depth(stream, rule)
    scored = run.loss_chunks[:, :length]
    held_out = run.stream_chunks[:, : scored.shape[1]]  # the same length: the rule's median depends on it
    check_disjoint(held_out, scored)
    block, embedding = run.model.model.layers[depth - 1], run.model.get_input_embeddings()
    watch = dict(rule=rule, roles=roles, ids_from=embedding)
    with MassiveRecorder(block, **watch) as held:
        chunk_losses(run.model, held_out, batch)
    with MassiveRecorder(block, **watch) as recorder:
        losses = {AS_TRAINED: chunk_losses(run.model, scored, batch)}
    means = held.mean_values()
    with MassiveAblation(block, values=means, **watch) as at_mean:
        losses[MEAN] = chunk_losses(run.model, scored, batch)
    with MassiveAblation(block, values=torch.zeros(means.shape[-1]), **watch):
        losses[ZERO] = chunk_losses(run.model, scored, batch)
    return MassiveAblationResult(
        rule=rule,
        depth=depth,
        found=found,
        entries=recorder.entries,
        role_entries=recorder.role_entries,
        channels=recorder.channels,
        held_out_chunks=int(held_out.shape[0]),
        held_out_entries=held.role_entries,
        mean_values=held.role_means(),
        unmatched=at_mean.unmatched,
        largest=recorder.largest,
        losses=losses,
        length=int(scored.shape[1]),
        changes={c: paired_difference(losses[AS_TRAINED], losses[c], margin) for c in (MEAN, ZERO)},
        margin=margin,
    )


def massive_table(result: MassiveAblationResult):
    left_alone = statistics.fmean(result.losses[AS_TRAINED])
    rows = [{"massive activations": AS_TRAINED, "mean loss (nats/token)": left_alone}]
    for condition in (MEAN, ZERO):
        change = result.changes[condition]
        rows.append(
            {
                "massive activations": condition,
                "mean loss (nats/token)": statistics.fmean(result.losses[condition]),
                "change": change["mean_difference"],
                "95% CI low": change["ci_low"],
                "95% CI high": change["ci_high"],
                f"outcome vs {result.margin} margin": change["outcome"],
            }
        )
    return table(
        pd.DataFrame(rows),
        digits=3,
        caption=f"SmolLM2 loss on {len(result.losses[AS_TRAINED])} scored chunks of {result.length} tokens "
        f"with the massive activations of the stream after block {result.depth} edited, paired by chunk; the means "
        f"come from {result.held_out_chunks} other chunks, per position role and channel.",
    )


def massive_reading(mean_outcome: str, zero_outcome: str) -> str:
    """What the two outcomes say together about the massive activations being constants."""
    if mean_outcome == "equivalent" and zero_outcome == "different":
        return (
            "The model needs them, but not their per-chunk values: a constant of the right size does their work, "
            "as Sun et al. found in larger models."
        )
    if mean_outcome == "different":
        return "Their per-chunk values carry something their mean does not: here they are not constants."
    if zero_outcome == "equivalent":
        return "The model does not need them at all here, as Owen et al. found for some models."
    return "The intervals are too wide to say whether the model treats them as constants."


def _role_shares(counts: dict[str, int]) -> str:
    total = sum(counts.values())
    return ", ".join(f"{counts[role] / total:.0%} on the {role}" for role in ROLES if counts[role]) or "none"


def _means_text(result: MassiveAblationResult) -> str:
    """`first token: channel 507 +24012, channel 247 +2054; ...`, the roles and channels that have a mean."""
    parts = [
        f"{role}: " + ", ".join(f"channel {c} {v:+.0f}" for c, v in list(means.items())[:4])
        for role, means in result.mean_values.items()
    ]
    return "; ".join(parts) if parts else "none, as no held-out chunk has a massive entry there"


def massive_paragraph(result: MassiveAblationResult) -> str:
    r, mean, zero = result, result.changes[MEAN], result.changes[ZERO]
    if not r.found or r.entries == 0:
        if r.found:
            where = (
                f"The stream section's chunks pass the rule after block {r.depth}, but no entry of the scored chunks "
                "does there, so nothing is replaced and the edited models equal the original"
            )
        else:
            edited = (
                "nothing is replaced and the edited models equal the original"
                if r.entries == 0
                else f"only {r.entries} entries pass it in the loss chunks"
            )
            where = (
                f"In this profile's cut of the model no depth holds an activation over {r.rule.floor:g} and "
                f"{r.rule.ratio:g} times the median. At depth {r.depth}, where the stream comes closest, {edited}"
            )
        return (
            f"{where} (changes {mean['mean_difference']:+.4f} and {zero['mean_difference']:+.4f} nats): the test "
            "needs the full model, the cpu or gpu profile."
        )
    unmatched = (
        f" {r.unmatched} of the scored entries sit at a role and channel with no massive entry in the held-out "
        "chunks, so no mean to set them to: they stay as they are."
        if r.unmatched
        else ""
    )
    return (
        f"The massive activations first appear in the stream after block {r.depth}: in the {len(r.losses[AS_TRAINED])} "
        f"scored chunks, {r.entries} entries ({_role_shares(r.role_entries)}) in channels "
        f"{', '.join(str(c) for c in r.channels[:4])}; the largest |x| is {significant(r.largest)}. Their means on the "
        f"{r.held_out_chunks} held-out chunks ({sum(r.held_out_entries.values())} entries), by position role: "
        f"{_means_text(r)}. Set to those means, they change the loss by {interval_text(mean, NATS_PER_TOKEN, margin=False)} "
        f"(**{mean['outcome']}** against ±{r.margin} nats per token); set to zero, by "
        f"{interval_text(zero, NATS_PER_TOKEN, margin=False)} (**{zero['outcome']}**).{unmatched} "
        f"{massive_reading(mean['outcome'], zero['outcome'])}"
    )


def b5_evidence(
    summary: StreamSummary, provenance: dict, massive: MassiveAblationResult | None = None
) -> tuple[str, dict]:
    """The stream's part of B5 (judged in the quality chapter): its sentence and numbers, no verdict; with
    `massive`, the numbers of Sun et al.'s mean-or-zero ablation join the evidence (the sentence is unchanged)."""
    s = summary
    by_layer = s.trunk.reset_index(drop=True)
    text = (
        f"In SmolLM2-135M ({s.blocks} of its 30 pre-LN RMSNorm blocks, real corpus tokens) the energy share along "
        f"the all-ones direction stays at or below {significant(s.max_share)} at every depth (first token: "
        f"{significant(s.max_share_first)}); the tokens share a mean vector holding "
        f"{significant(float(by_layer['shared_mean_share'].iloc[-1]))} of the energy at the last norm, but only "
        f"{significant(float(by_layer['shared_mean_along_ones'].iloc[-1]))} of that vector is a common offset; "
        f"massive activations ({significant(s.deep_max_over_median)}x the median) sit on the first token."
    )
    evidence = {
        "model": "SmolLM2-135M-Instruct (Q4_1 dequantised to fp32)",
        "blocks": s.blocks,
        "depth": by_layer["depth"],
        "along_ones_share_by_layer": by_layer["along_ones_share"],
        "along_ones_share_first_token_by_layer": by_layer["along_ones_share_first_token"],
        "max_along_ones_share": s.max_share,
        "max_along_ones_share_first_token": s.max_share_first,
        "random_direction_share": 1 / s.width,
        "shared_mean_share_by_layer": by_layer["shared_mean_share"],
        "shared_mean_along_ones_by_layer": by_layer["shared_mean_along_ones"],
        "rms_by_layer": by_layer["rms"],
        "max_abs_by_layer": by_layer["max_abs"],
        "max_abs_first_token_by_layer": by_layer["max_abs_first_token"],
        "max_abs_other_tokens_by_layer": by_layer["max_abs_other_tokens"],
        "max_over_median_by_layer": by_layer["max_over_median"],
        "max_position_by_layer": by_layer["max_position"],
        "share_of_norm_inputs_with_max_on_first_token": s.first_carries_max,
        "most_common_top_channel": s.top_channel,
        "tokens": s.tokens,
        "provenance": provenance,
    }
    if massive is not None:
        evidence["massive_activation_ablation"] = massive.evidence()
    return text, evidence
