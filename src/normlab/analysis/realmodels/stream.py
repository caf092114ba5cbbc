"""Section "The residual stream of a real RMSNorm LLM, layer by layer": what every norm of SmolLM2 receives.

`StreamStats` gathers, by forward pre-hooks, token by token: the share of a
token's energy along the all-ones direction (what LayerNorm's centring
removes), the per-channel mean vector shared by the tokens, the largest
activations and the tokens that carry them. `measure_stream` runs it on the
stream chunks and `summarise_stream` places each norm by depth and site; the
section's table and paragraph quote that summary. The stream's part of B5 is
written in `massive`, which adds the ablation's numbers to it.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field

import pandas as pd
import torch
from torch import nn

from normlab.analysis.realmodels.load import SmolLM2Run
from normlab.norms.huggingface import find_norms
from normlab.study.present import significant, table


def along_ones_share(x: torch.Tensor) -> torch.Tensor:
    """Per row: the share of the row's energy along the all-ones direction, mean(x)² / mean(x²).

    LayerNorm's centring removes exactly this part; RMSNorm keeps it.
    """
    x = x.double()
    return x.mean(-1) ** 2 / (x * x).mean(-1).clamp_min(1e-300)


@dataclass
class _Accumulator:
    count_rest: int = 0
    count_first: int = 0
    ones_rest: float = 0.0
    ones_first: float = 0.0
    energy_rest: float = 0.0  # sum over tokens of ||x||² / d
    energy_first: float = 0.0
    channel_sum: torch.Tensor | None = None  # over tokens at positions >= 1
    channel_max: torch.Tensor | None = None  # max |x| per channel, all positions
    max_abs_first: float = 0.0
    max_abs_rest: float = 0.0
    max_abs: float = 0.0
    max_channel: int = -1
    max_position: int = -1
    median_abs: list = field(default_factory=list)


class StreamStats:
    """Statistics of what every norm of a model receives, gathered by forward pre-hooks.

    Position 0 of each chunk is kept apart: in trained LLMs it usually carries
    the massive activations (Sun et al. 2024, *Massive Activations in Large
    Language Models*), so averaging it with the rest would hide both.
    """

    def __init__(self, model: nn.Module, names: list[str] | None = None):
        self.norms = find_norms(model) if names is None else {n: model.get_submodule(n) for n in names}
        self.acc = {name: _Accumulator() for name in self.norms}
        self._handles = []

    def __enter__(self):
        for name, module in self.norms.items():
            self._handles.append(module.register_forward_pre_hook(self._hook(name)))
        return self

    def __exit__(self, *exc):
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _hook(self, name):
        def hook(module, args):
            self._add(name, args[0].detach())

        return hook

    def _add(self, name: str, x: torch.Tensor) -> None:
        a = self.acc[name]
        x = x.float().reshape(-1, x.shape[-2], x.shape[-1])  # (batch, tokens, width)
        first, rest = x[:, 0], x[:, 1:].reshape(-1, x.shape[-1])
        a.count_first += first.shape[0]
        a.count_rest += rest.shape[0]
        a.ones_first += float(along_ones_share(first).sum())
        a.ones_rest += float(along_ones_share(rest).sum())
        a.energy_first += float((first.double() ** 2).mean(-1).sum())
        a.energy_rest += float((rest.double() ** 2).mean(-1).sum())
        channel_sum = rest.double().sum(0)
        a.channel_sum = channel_sum if a.channel_sum is None else a.channel_sum + channel_sum
        magnitude = x.abs()
        channel_max = magnitude.amax(dim=(0, 1))
        a.channel_max = channel_max if a.channel_max is None else torch.maximum(a.channel_max, channel_max)
        a.max_abs_first = max(a.max_abs_first, float(magnitude[:, 0].max()))
        a.max_abs_rest = max(a.max_abs_rest, float(magnitude[:, 1:].max()))
        peak = float(magnitude.max())
        if peak > a.max_abs:
            flat = int(magnitude.argmax())
            a.max_abs, a.max_channel, a.max_position = peak, flat % x.shape[-1], (flat // x.shape[-1]) % x.shape[1]
        a.median_abs.append(float(magnitude.median()))

    def table(self) -> list[dict]:
        """One row per norm, in model order."""
        rows = []
        for name, a in self.acc.items():
            if a.count_rest == 0:
                raise ValueError(f"norm {name} saw no tokens beyond the first; run chunks of at least 2 tokens")
            mean_vector = a.channel_sum / a.count_rest
            energy_rest = a.energy_rest / a.count_rest
            top = torch.topk(a.channel_max, k=min(3, a.channel_max.numel()))
            median = statistics.median(a.median_abs)
            rows.append(
                {
                    "norm": name,
                    "along_ones_share": a.ones_rest / a.count_rest,
                    "along_ones_share_first_token": a.ones_first / a.count_first,
                    "rms": math.sqrt(energy_rest),
                    "rms_first_token": math.sqrt(a.energy_first / a.count_first),
                    # ||mean vector||² over the mean token energy: how much of a typical token is the part all share
                    "shared_mean_share": float((mean_vector**2).mean() / energy_rest),
                    # is that shared vector itself a uniform offset (what centring removes)?
                    "shared_mean_along_ones": float(along_ones_share(mean_vector)),
                    "max_abs_first_token": a.max_abs_first,
                    "max_abs_other_tokens": a.max_abs_rest,
                    "max_abs": a.max_abs,
                    "max_channel": a.max_channel,
                    "max_position": a.max_position,
                    "median_abs": median,
                    "max_over_median": a.max_abs / max(median, 1e-30),
                    "top_channels": [int(c) for c in top.indices],
                    "top_channel_max": [float(v) for v in top.values],
                }
            )
        return rows


@torch.no_grad()
def model_stream_statistics(model: nn.Module, chunks: torch.Tensor, batch: int = 4) -> list[dict]:
    """`StreamStats.table()` over all chunks."""
    with StreamStats(model) as stats:
        for start in range(0, chunks.shape[0], batch):
            model(chunks[start : start + batch], use_cache=False)
    return stats.table()


def stream_depth(name: str, blocks: int | None = None) -> float:
    """A norm's depth in blocks: input_layernorm of block i -> i, post_attention_layernorm -> i + 0.5;
    any other norm (the final one) -> `blocks` (inf when not given)."""
    match = re.search(r"layers\.(\d+)\.(\w+)", name)
    if not match:
        return math.inf if blocks is None else float(blocks)
    return int(match.group(1)) + (0.5 if "post_attention" in match.group(2) else 0.0)


def site_of(depth: float, blocks: int) -> str:
    """Which norm a depth belongs to: attention input (whole blocks), MLP input (half blocks), the final norm."""
    return "final norm" if depth == blocks else ("MLP input" if depth % 1 else "attention input")


@dataclass
class StreamSummary:
    stream: pd.DataFrame  # one row per norm input, in model order, with its depth and site
    trunk: pd.DataFrame  # the stream between blocks (depths 0..blocks): attention-input norms and the final norm
    blocks: int
    width: int
    tokens: int
    max_share: float  # largest along-ones share of an ordinary token, over all norm inputs
    max_share_first: float  # the same for the first token of each chunk
    first_carries_max: float  # share of norm inputs whose largest |x| sits on position 0
    deep_max_over_median: float  # past the first block: the largest max |x| / median |x|
    top_channel: int  # the channel most often holding the largest |x| past the first block (-1: none)


def summarise_stream(rows: list[dict], blocks: int, width: int, tokens: int) -> StreamSummary:
    """`StreamStats.table()` rows placed by depth and site, with the numbers the section quotes."""
    stream = pd.DataFrame(rows)
    stream["depth"] = [stream_depth(n, blocks) for n in stream["norm"]]
    stream["site"] = [site_of(d, blocks) for d in stream["depth"]]
    trunk = stream[stream["site"] != "MLP input"]
    deep = stream[stream["depth"] >= 1]
    return StreamSummary(
        stream=stream,
        trunk=trunk,
        blocks=blocks,
        width=width,
        tokens=tokens,
        max_share=float(stream["along_ones_share"].max()),
        max_share_first=float(stream["along_ones_share_first_token"].max()),
        first_carries_max=float((stream["max_position"] == 0).mean()),
        deep_max_over_median=float(deep["max_over_median"].max()) if len(deep) else float("nan"),
        top_channel=int(pd.Series([c[0] for c in deep["top_channels"]]).mode()[0]) if len(deep) else -1,
    )


def measure_stream(run: SmolLM2Run, batch: int) -> StreamSummary:
    rows = model_stream_statistics(run.model, run.stream_chunks, batch=batch)
    return summarise_stream(rows, run.blocks, run.width, int(run.stream_chunks.numel()))


def stream_table(summary: StreamSummary):
    """The stream between blocks at a few depths: the first three, the middle and the last two."""
    trunk = summary.trunk
    picked = sorted({0, 1, 2, len(trunk) // 2, len(trunk) - 2, len(trunk) - 1} & set(range(len(trunk))))
    shown = trunk.iloc[picked]
    return table(
        pd.DataFrame(
            {
                "depth": shown["depth"],
                "along-ones share (others)": shown["along_ones_share"],
                "along-ones share (first)": shown["along_ones_share_first_token"],
                "shared-mean share": shown["shared_mean_share"],
                "max |x|": shown["max_abs"],
                "max / median": shown["max_over_median"],
                "position of max": [str(int(v)) for v in shown["max_position"]],
                "top channels": [", ".join(map(str, c)) for c in shown["top_channels"]],
            }
        ),
        caption="The stream between blocks at a few depths (all depths are in the figures and the results file).",
    )


def stream_paragraph(summary: StreamSummary) -> str:
    s, trunk = summary, summary.trunk
    return (
        f"Across all {len(s.stream)} norm inputs the along-ones share of an ordinary token stays at or below "
        f"{significant(s.max_share)} (a random direction would hold 1/{s.width} = "
        f"{significant(1 / s.width)}), and the first token's at or below {significant(s.max_share_first)}. "
        f"The largest activation sits on position 0 in {s.first_carries_max:.0%} of the norm inputs; past the first "
        f"block the largest |x| reaches {significant(s.deep_max_over_median)} times the median |x|, most often in "
        f"channel {s.top_channel}. The tokens do share a large mean vector "
        f"({significant(float(trunk['shared_mean_share'].iloc[-1]))} "
        f"of the energy at the last norm), but that vector is not a uniform offset: its own along-ones share is "
        f"{significant(float(trunk['shared_mean_along_ones'].iloc[-1]))}. Centring removes only that sliver."
    )
