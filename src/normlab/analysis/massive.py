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
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


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
