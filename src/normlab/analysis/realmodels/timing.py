"""How SmolLM2's forward is timed: prefill and decoding with each norm variant in interleaved rounds
(`time_variants`), the wall time inside the norms from forward hooks (`NormTimer`, `hooked_norm_share`), and the
rounds summarised, paired by round."""

from __future__ import annotations

import statistics
import time

import torch
from torch import nn

from normlab.analysis.realmodels.variants import installed
from normlab.norms.huggingface import find_norms


def _cache_keyword(model: nn.Module) -> str:
    """transformers 5.x calls the KV cache argument `cache` (`past_key_values` is deprecated); 4.x knows only
    `past_key_values`."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


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

    Rounds are interleaved (each round times every variant once, in an order
    rotated from round to round) so that a slow spell of a shared machine hits
    every variant alike. Prefill: one forward of `prompt` (1, T) building a
    fresh KV cache. Decoding: `decode_steps` single-token steps after that
    prompt, their mean per step; the cache is cropped back after each step so
    every step sees the same context length.
    `variants` maps a label to the modules to install ({} = the model as loaded).
    """
    from transformers import DynamicCache

    device = prompt.device
    names = list(variants)
    samples = {name: {"prefill_s": [], "decode_s": []} for name in names}
    next_token = prompt[:, -1:]
    keyword = _cache_keyword(model)

    def prefill():
        cache = DynamicCache()
        model(prompt, use_cache=True, **{keyword: cache})
        return cache

    def decode(cache):
        for _ in range(decode_steps):
            model(next_token, use_cache=True, **{keyword: cache})
            cache.crop(-1)  # negative: drop the token just added (both transformers 4.x and 5.x)

    for name in names:  # warm-up: compiles, allocator state, first-call costs
        with installed(model, variants[name]):
            for _ in range(warmup):
                decode(prefill())
    rounds = range(repeats) if progress is None else progress(range(repeats))
    for r in rounds:
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            with installed(model, variants[name]):
                _sync(device)
                start = time.perf_counter()
                cache = prefill()
                _sync(device)
                middle = time.perf_counter()
                decode(cache)
                _sync(device)
                end = time.perf_counter()
            samples[name]["prefill_s"].append(middle - start)
            samples[name]["decode_s"].append((end - middle) / decode_steps)
    return samples


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
            ratios = [v / b for v, b in zip(values, base)]
            rows.append(
                {
                    "variant": name,
                    "phase": phase[:-2],
                    "median_ms": 1e3 * statistics.median(values),
                    "sd_ms": 1e3 * statistics.stdev(values) if len(values) > 1 else 0.0,
                    "ratio_to_baseline": statistics.median(ratios),
                    "ratio_sd": statistics.stdev(ratios) if len(ratios) > 1 else 0.0,
                }
            )
    return rows


def ablation_share(samples: dict[str, dict], baseline: str, no_norms: str, phase: str) -> list[float]:
    """Per round: 1 − t(no norms)/t(baseline), the share of the baseline's time its norms cost."""
    return [1 - n / b for n, b in zip(samples[no_norms][phase], samples[baseline][phase])]
