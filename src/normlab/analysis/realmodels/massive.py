"""Massive activations set to their mean or to zero: Sun et al. 2024's test of whether they act as constants.

Sun et al. 2024 (*Massive Activations in Large Language Models*, arXiv 2402.17762) call an activation
massive when its magnitude exceeds about 100 and about 1,000 times the median magnitude of its hidden state;
such activations sit in a few fixed channels, mostly on the first token and on delimiters. Their test: at the
layer where they appear, set them to their mean over many sequences, and the loss barely moves; set them to
zero, and the model breaks. They are then constants the model relies on, like a bias, not per-token
information.

`MassiveRule` says which entries of a hidden state are massive. `MassiveRecorder` watches one module's output
(a decoder layer's: the residual stream after it) and averages the massive entries per channel;
`MassiveAblation` rewrites that output, replacing each massive entry by a value for its channel (the
recorded mean, or zero). The rule is applied to each sequence's own hidden state, so batching does not change
which entries count. `first_massive_depth` picks the depth where the massive activations first appear from
per-depth statistics of the stream.

The chapter's section "Are the massive activations a constant? Sun et al.'s ablation" runs that test on SmolLM2
(`measure_massive_ablation`, from the first depth where the stream section finds massive activations), and
`b5_evidence` writes the stream's part of B5 (judged in the quality chapter) with the ablation's numbers.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import pandas as pd
import torch
from torch import nn

from normlab.analysis.realmodels.load import SmolLM2Run
from normlab.analysis.realmodels.stream import StreamSummary
from normlab.analysis.realmodels.variants import chunk_losses
from normlab.analysis.shared.paired import interval_text, paired_difference
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


def _hidden_of(output):
    """A decoder layer returns its hidden state (transformers 5) or a tuple that starts with it (4.x)."""
    return output[0] if isinstance(output, tuple) else output


def _with_hidden(output, hidden):
    return (hidden, *output[1:]) if isinstance(output, tuple) else hidden


class _OutputHook:
    def __init__(self, module: nn.Module, rule: MassiveRule):
        self.module, self.rule, self._handle = module, rule, None

    def __enter__(self):
        self._handle = self.module.register_forward_hook(self._hook)
        return self

    def __exit__(self, *exc):
        self._handle.remove()
        self._handle = None

    def _hook(self, module, args, output):
        raise NotImplementedError


class MassiveRecorder(_OutputHook):
    """Per channel: how many entries of `module`'s output are massive, their sum, and how many sit on the
    first token; over every forward while the context is open."""

    def __init__(self, module: nn.Module, rule: MassiveRule):
        super().__init__(module, rule)
        self.sums: torch.Tensor | None = None
        self.counts: torch.Tensor | None = None
        self.first_token = 0
        self.sequences = 0
        self.largest = 0.0

    def _hook(self, module, args, output):
        hidden = _hidden_of(output).detach()
        mask = self.rule.mask(hidden)
        values = torch.where(mask, hidden, torch.zeros_like(hidden)).double()
        sums, counts = values.sum(dim=(0, 1)), mask.sum(dim=(0, 1))
        self.sums = sums if self.sums is None else self.sums + sums
        self.counts = counts if self.counts is None else self.counts + counts
        self.first_token += int(mask[:, 0].sum())
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
    def channels(self) -> list[int]:
        """The channels holding at least one massive entry, most entries first."""
        self._check()
        order = sorted(range(self.counts.numel()), key=lambda c: (-int(self.counts[c]), c))
        return [c for c in order if self.counts[c] > 0]

    def mean_values(self) -> torch.Tensor:
        """Per channel, the mean of its massive entries over every token and sequence seen (0 where none)."""
        self._check()
        return torch.where(self.counts > 0, self.sums / self.counts.clamp_min(1), torch.zeros_like(self.sums))


class MassiveAblation(_OutputHook):
    """While open, every massive entry of `module`'s output is replaced by `values[channel]` (width,)."""

    def __init__(self, module: nn.Module, rule: MassiveRule, values: torch.Tensor):
        super().__init__(module, rule)
        if values.dim() != 1:
            raise ValueError(f"values must hold one number per channel, got shape {tuple(values.shape)}")
        self.values = values
        self.replaced = 0

    def _hook(self, module, args, output):
        hidden = _hidden_of(output)
        if hidden.shape[-1] != self.values.numel():
            raise ValueError(f"values has {self.values.numel()} channels, the hidden state {hidden.shape[-1]}")
        mask = self.rule.mask(hidden)
        self.replaced += int(mask.sum())
        fill = self.values.to(device=hidden.device, dtype=hidden.dtype).expand_as(hidden)
        return _with_hidden(output, torch.where(mask, fill, hidden))


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


@dataclass
class MassiveAblationResult:
    rule: MassiveRule
    depth: int  # the stream after this many blocks (the output of block depth - 1) is edited
    found: bool  # a depth passed the rule; else the depth with the largest max/median ratio is edited
    entries: int  # massive entries over all loss chunks
    first_token: int  # how many of them sit on the first token of their chunk
    channels: list[int]  # the channels that hold them, most entries first
    mean_values: dict[int, float]  # per such channel, the mean the "set to their mean" variant writes
    largest: float
    losses: dict[str, list[float]]  # per condition, the loss of each chunk
    length: int  # tokens per chunk
    changes: dict[str, dict]  # per edited condition, paired_difference against the model left alone
    margin: float

    def evidence(self) -> dict:
        return {
            "rule_ratio_to_median": self.rule.ratio,
            "rule_floor": self.rule.floor,
            "edited_depth": self.depth,
            "depth_passed_rule": self.found,
            "massive_entries": self.entries,
            "massive_entries_on_first_token": self.first_token,
            "channels": self.channels,
            "mean_values": {str(c): v for c, v in self.mean_values.items()},
            "largest_massive_abs": self.largest,
            "loss_left_alone": statistics.fmean(self.losses[AS_TRAINED]),
            **{
                f"loss_change_{condition.replace(' ', '_')}": {
                    key: self.changes[condition][key] for key in ("mean_difference", "ci_low", "ci_high", "outcome")
                }
                for condition in (MEAN, ZERO)
            },
            "margin_nats": self.margin,
            "chunks": len(self.losses[AS_TRAINED]),
            "tokens_per_chunk": self.length,
        }


def measure_massive_ablation(
    run: SmolLM2Run, stream: StreamSummary, rule: MassiveRule, batch: int, margin: float, length: int | None = None
) -> MassiveAblationResult:
    """Sun et al.'s test on the loss chunks (their first `length` tokens; all by default): the massive entries of
    the stream at the depth where they first appear (by `rule`, from the stream section's statistics) left alone,
    set to their per-channel mean over the chunks, and set to zero; the losses paired by chunk."""
    trunk = stream.trunk
    depth = first_massive_depth(list(trunk["depth"]), list(trunk["max_abs"]), list(trunk["max_over_median"]), rule)
    found = depth is not None
    if not found:  # no depth passes (a short cut of the model): edit where the stream comes closest
        deep = trunk[trunk["depth"] >= 1]
        depth = int(deep.loc[deep["max_over_median"].idxmax(), "depth"])
    block, chunks = run.model.model.layers[depth - 1], run.loss_chunks[:, :length]
    with MassiveRecorder(block, rule) as recorder:
        losses = {AS_TRAINED: chunk_losses(run.model, chunks, batch)}
    means = recorder.mean_values()
    for condition, values in ((MEAN, means), (ZERO, torch.zeros_like(means))):
        with MassiveAblation(block, rule, values):
            losses[condition] = chunk_losses(run.model, chunks, batch)
    return MassiveAblationResult(
        rule=rule,
        depth=depth,
        found=found,
        entries=recorder.entries,
        first_token=recorder.first_token,
        channels=recorder.channels,
        mean_values={c: float(means[c]) for c in recorder.channels},
        largest=recorder.largest,
        losses=losses,
        length=int(chunks.shape[1]),
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
        caption=f"SmolLM2 loss on {len(result.losses[AS_TRAINED])} held-out chunks of {result.length} tokens "
        f"with the massive activations of the stream after block {result.depth} edited, paired by chunk.",
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


def massive_paragraph(result: MassiveAblationResult) -> str:
    r, mean, zero = result, result.changes[MEAN], result.changes[ZERO]
    if not r.found or r.entries == 0:
        edited = (
            "nothing is replaced and the edited models equal the original"
            if r.entries == 0
            else f"only {r.entries} entries pass it in the loss chunks"
        )
        return (
            f"In this profile's cut of the model no depth holds an activation over {r.rule.floor:g} and "
            f"{r.rule.ratio:g} times the median. At depth {r.depth}, where the stream comes closest, {edited} "
            f"(changes {mean['mean_difference']:+.4f} and {zero['mean_difference']:+.4f} nats): the test needs the "
            "full model, the cpu or gpu profile."
        )
    channels = ", ".join(f"{c} ({r.mean_values[c]:+.0f})" for c in r.channels[:4])
    return (
        f"The massive activations first appear in the stream after block {r.depth}: {r.entries} entries over all "
        f"chunks, {r.first_token / r.entries:.0%} of them on the first token, in channels {channels} (their mean "
        f"values; the largest |x| is {significant(r.largest)}). Set to their mean over the chunks, they change the "
        f"loss by {interval_text(mean, margin=False)} (**{mean['outcome']}** against ±{r.margin}); set to zero, by "
        f"{interval_text(zero, margin=False)} (**{zero['outcome']}**). {massive_reading(mean['outcome'], zero['outcome'])}"
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
