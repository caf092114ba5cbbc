"""How SmolLM2's forward is timed: prefill and decoding with each norm variant in interleaved rounds
(`time_variants`, on `normlab.runtime.interleaved.time_interleaved`), the wall time inside the norms from forward hooks
(`NormTimer`, `hooked_norm_share`), and the rounds summarised, paired by round."""

from __future__ import annotations

import time

import torch
from torch import nn

from normlab.analysis.realmodels.variants import installed
from normlab.norms.huggingface import find_norms
from normlab.runtime.interleaved import median_and_sd, time_interleaved


def _cache_keyword(model: nn.Module) -> str:
    """transformers 5.x calls the KV cache argument `cache` (`past_key_values` is deprecated); 4.x knows only
    `past_key_values`."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


@torch.no_grad()
def time_variants(
    model: nn.Module,
    prompt: torch.Tensor,
    variants: dict[str, dict[str, nn.Module]],
    *,
    repeats: int,
    decode_steps: int,
    warmup: int = 1,
    progress=None,
) -> dict[str, dict]:
    """Prefill and per-token decoding time of `model` with each norm variant installed in turn.

    Rounds are interleaved (`time_interleaved`: each round times every variant once, in an order rotated from
    round to round) so that a slow spell of a shared machine hits every variant alike. Prefill: one forward of
    `prompt` (1, T) building a fresh KV cache. Decoding: `decode_steps` single-token steps after that prompt, their
    mean per step; the cache is cropped back after each step so every step sees the same context length.
    `variants` maps a label to the modules to install ({} = the model as loaded); they are installed, untimed,
    around each variant's warm-up (`warmup` prefills and decodings: compiles, allocator state, first-call costs) and
    each of its rounds.
    """
    from transformers import DynamicCache

    next_token = prompt[:, -1:]
    keyword = _cache_keyword(model)

    def prefill_then_decode():
        cache = DynamicCache()
        model(prompt, use_cache=True, **{keyword: cache})
        yield "prefill_s"
        for _ in range(decode_steps):
            model(next_token, use_cache=True, **{keyword: cache})
            cache.crop(-1)  # negative: drop the token just added (both transformers 4.x and 5.x)
        yield "decode_s"

    timed = time_interleaved(
        {name: prefill_then_decode for name in variants},
        rounds=repeats,
        warmup=warmup,
        device=prompt.device,
        around=lambda name: installed(model, variants[name]),
        progress=progress,
    )
    return {
        name: {
            "prefill_s": timed.per_round(name, "prefill_s"),
            "decode_s": [s / decode_steps for s in timed.per_round(name, "decode_s")],
        }
        for name in variants
    }


class NormTimer:
    """Wall time spent inside the norm modules, from forward pre- and post-hooks.

    On a CPU every op runs to completion in the calling thread, so the time
    between a norm's pre-hook and post-hook is that norm's time (plus two
    Python calls, a few microseconds). On a GPU the kernels run asynchronously
    and this would need a synchronisation in each hook, which distorts what it
    measures; use the no-norm ablation or a profiler trace there instead.
    """

    def __init__(self, model: nn.Module):
        self.norms = find_norms(model)
        self.total = 0.0
        self._start = 0.0
        self._handles = []

    def __enter__(self):
        for module in self.norms.values():
            self._handles.append(module.register_forward_pre_hook(self._pre))
            self._handles.append(module.register_forward_hook(self._post))
        return self

    def __exit__(self, *exc):
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _pre(self, module, args):
        self._start = time.perf_counter()

    def _post(self, module, args, output):
        self.total += time.perf_counter() - self._start


@torch.no_grad()
def hooked_norm_share(model: nn.Module, prompt: torch.Tensor, *, repeats: int, decode_steps: int) -> dict:
    """Share of prefill and of decoding wall time spent inside the norms, from `NormTimer`, per repeat."""
    from transformers import DynamicCache

    shares = {"prefill": [], "decode": []}
    next_token = prompt[:, -1:]
    keyword = _cache_keyword(model)
    for r in range(repeats + 1):  # the first round warms up
        with NormTimer(model) as timer:
            cache = DynamicCache()
            start = time.perf_counter()
            model(prompt, use_cache=True, **{keyword: cache})
            prefill_total, prefill_norms = time.perf_counter() - start, timer.total
            timer.total = 0.0
            start = time.perf_counter()
            for _ in range(decode_steps):
                model(next_token, use_cache=True, **{keyword: cache})
                cache.crop(-1)
            decode_total, decode_norms = time.perf_counter() - start, timer.total
        if r:
            shares["prefill"].append(prefill_norms / prefill_total)
            shares["decode"].append(decode_norms / decode_total)
    return shares


def summarise_times(samples: dict[str, dict], baseline: str, no_norms: str | None = None) -> list[dict]:
    """Per variant and phase: median time, its spread (sd over rounds), and the median over rounds of the
    paired ratio to `baseline` (same round). With `no_norms`, also the norms' share of the baseline's time
    (baseline minus the no-norm variant, paired by round)."""
    rows = []
    for phase in ("prefill_s", "decode_s"):
        base = samples[baseline][phase]
        for name in samples:
            values = samples[name][phase]
            median, sd = median_and_sd(values)
            ratio, ratio_sd = median_and_sd([v / b for v, b in zip(values, base)])
            rows.append(
                {
                    "variant": name,
                    "phase": phase[:-2],
                    "median_ms": 1e3 * median,
                    "sd_ms": 1e3 * sd,
                    "ratio_to_baseline": ratio,
                    "ratio_sd": ratio_sd,
                }
            )
    return rows


def ablation_share(samples: dict[str, dict], baseline: str, no_norms: str, phase: str) -> list[float]:
    """Per round: 1 − t(no norms)/t(baseline), the share of the baseline's time its norms cost."""
    return [1 - n / b for n, b in zip(samples[no_norms][phase], samples[baseline][phase])]
