"""The training text: the Python standard library's own source, read as bytes.

It ships with every Python, so it needs no download and no extra dependency.
It is real text: English docstrings and comments interleaved with code.
The selection is a fixed list of single-file modules that exist from Python
3.10 on, read in that order. Their contents still change between Python
releases, so every corpus carries the SHA-256 of its exact training bytes and
the Python version it came from; runs record both.

Tokens are bytes (vocabulary 256). The split is per file: the head of each
module (the first ~90%, cut at a line end) goes to training and its tail to
validation, so both splits see every module's style and never share a byte.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import sysconfig
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import torch

from normlab.runtime.jobs import CORPUS_SHA256_VARIABLE, note_study_corpus

# Single-file modules present from Python 3.10 through 3.13 (none of them became a
# package or a shim in that range), so the selection is stable even where the text is not.
STDLIB_MODULES = (
    "argparse",
    "ast",
    "base64",
    "bdb",
    "bisect",
    "calendar",
    "cmd",
    "code",
    "codecs",
    "colorsys",
    "configparser",
    "contextlib",
    "copy",
    "csv",
    "dataclasses",
    "difflib",
    "dis",
    "doctest",
    "enum",
    "filecmp",
    "fileinput",
    "fnmatch",
    "fractions",
    "ftplib",
    "functools",
    "getopt",
    "gettext",
    "glob",
    "graphlib",
    "gzip",
    "hashlib",
    "heapq",
    "hmac",
    "imaplib",
    "inspect",
    "ipaddress",
    "keyword",
    "linecache",
    "locale",
    "mailbox",
    "mimetypes",
    "netrc",
    "numbers",
    "operator",
    "optparse",
    "pdb",
    "pickle",
    "platform",
    "plistlib",
    "pprint",
    "pstats",
    "pydoc",
    "queue",
    "random",
    "reprlib",
    "sched",
    "secrets",
    "selectors",
    "shelve",
    "shlex",
    "shutil",
    "smtplib",
    "socket",
    "ssl",
    "stat",
    "statistics",
    "string",
    "subprocess",
    "symtable",
    "tarfile",
    "tempfile",
    "textwrap",
    "threading",
    "timeit",
    "tokenize",
    "trace",
    "traceback",
    "typing",
    "uuid",
    "wave",
    "weakref",
    "webbrowser",
)


@dataclass(frozen=True)
class Corpus:
    """Byte tokens of the training and validation text, with their provenance."""

    train: torch.Tensor  # uint8, 1-D
    val: torch.Tensor  # uint8, 1-D
    sha256: str  # of the exact training bytes
    val_sha256: str
    sources: tuple[str, ...]  # module names, in reading order
    python_version: str
    vocab_size: int = 256
    byte_counts: torch.Tensor = field(repr=False, default=None)

    @property
    def unigram_entropy_nats(self) -> float:
        """Entropy of the training bytes' frequency table, in nats (the unit of the loss):
        the loss of the best model that ignores context."""
        p = self.byte_counts.double() / self.byte_counts.sum()
        p = p[p > 0]
        return float(-(p * p.log()).sum())

    @property
    def unigram_entropy_bits(self) -> float:
        return self.unigram_entropy_nats / math.log(2)

    def describe(self) -> dict:
        return {
            "train_bytes": int(self.train.numel()),
            "val_bytes": int(self.val.numel()),
            "sha256": self.sha256,
            "val_sha256": self.val_sha256,
            "modules": len(self.sources),
            "python_version": self.python_version,
            "unigram_entropy_nats": self.unigram_entropy_nats,
            "unigram_entropy_bits": self.unigram_entropy_bits,
        }

    def check_context(self, context: int) -> None:
        shortest = min(self.train.numel(), self.val.numel())
        if context + 1 > shortest:
            raise ValueError(
                f"context {context} is longer than the corpus allows: a window needs context+1 bytes and the "
                f"smaller split has {shortest}; lower the context or use a larger corpus"
            )

    def batch(self, split: str, batch_size: int, context: int, generator: torch.Generator, device="cpu"):
        """Random windows of `context` bytes and their next-byte targets, drawn with `generator`."""
        data = {"train": self.train, "val": self.val}.get(split)
        if data is None:
            raise ValueError(f"split must be 'train' or 'val', got {split!r}")
        self.check_context(context)
        starts = torch.randint(0, data.numel() - context, (batch_size,), generator=generator)
        offsets = starts[:, None] + torch.arange(context + 1)
        windows = data[offsets].long()
        x, y = windows[:, :-1], windows[:, 1:]
        return x.to(device), y.to(device)


def module_source(name: str) -> Path:
    # The file in the stdlib folder, not importlib's origin: some of these modules are frozen into the interpreter.
    path = Path(sysconfig.get_paths()["stdlib"]) / f"{name}.py"
    if not path.is_file():
        raise FileNotFoundError(f"standard-library module {name!r} has no single source file here (looked for {path})")
    return path


def split_text(text: bytes, val_fraction: float) -> tuple[bytes, bytes]:
    """Cut `text` at the first line end after (1 - val_fraction) of it: head for training, tail for validation."""
    cut = int(len(text) * (1.0 - val_fraction))
    newline = text.find(b"\n", cut)
    cut = len(text) if newline < 0 else newline + 1
    return text[:cut], text[cut:]


def build_corpus(texts: list[tuple[str, bytes]], val_fraction: float = 0.1) -> Corpus:
    """Split each named text into a training head and a validation tail and join them."""
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction!r}")
    if not texts:
        raise ValueError("no texts to build a corpus from")
    heads, tails = zip(*(split_text(text, val_fraction) for _, text in texts))
    train_bytes, val_bytes = b"".join(heads), b"".join(tails)
    if not train_bytes or not val_bytes:
        raise ValueError("the texts are too short to give both a training and a validation split")
    train = torch.frombuffer(bytearray(train_bytes), dtype=torch.uint8)
    val = torch.frombuffer(bytearray(val_bytes), dtype=torch.uint8)
    return Corpus(
        train=train,
        val=val,
        sha256=hashlib.sha256(train_bytes).hexdigest(),
        val_sha256=hashlib.sha256(val_bytes).hexdigest(),
        sources=tuple(name for name, _ in texts),
        python_version=platform.python_version(),
        byte_counts=torch.bincount(train.long(), minlength=256),
    )


class CorpusMismatch(ValueError):
    """A job was sent to train on one corpus and this machine builds another."""


def load_corpus(modules: tuple[str, ...] = STDLIB_MODULES, val_fraction: float = 0.1) -> Corpus:
    """The standard-library corpus. Modules missing from this Python are an error, not skipped,
    so a corpus never silently shrinks.

    The study corpus (the default modules and split) is what `run_parallel` carries to its jobs: its SHA-256 is
    noted for the jobs this process sends, and inside a job (`CORPUS_SHA256_VARIABLE` set by
    `normlab.runtime.jobs.run_job`) other training bytes are refused, naming both hashes."""
    corpus = _stdlib_corpus(tuple(modules), val_fraction)
    if tuple(modules) != STDLIB_MODULES or val_fraction != 0.1:
        return corpus
    expected = os.environ.get(CORPUS_SHA256_VARIABLE)
    if expected and corpus.sha256 != expected:
        raise CorpusMismatch(
            f"this job was sent to train on the corpus with SHA-256 {expected}, but this machine "
            f"({platform.node()}, Python {corpus.python_version}) builds {corpus.sha256}; run its workers on the "
            "driver's Python version, or carry the driver's corpus there (save_corpus / load_saved_corpus)"
        )
    note_study_corpus(corpus.sha256)
    return corpus


@lru_cache(maxsize=4)
def _stdlib_corpus(modules: tuple[str, ...], val_fraction: float) -> Corpus:
    if len(set(modules)) != len(modules):
        raise ValueError("modules lists a module more than once")
    return build_corpus([(name, module_source(name).read_bytes()) for name in modules], val_fraction)


load_corpus.cache_clear = _stdlib_corpus.cache_clear


# ---- a corpus carried to another machine ----------------------------------------------------------------------
#
# The standard library's text differs between Python versions, so a machine with another Python builds another
# corpus. `save_corpus` writes this machine's exact bytes to a folder; `load_saved_corpus` reads them back there
# and refuses bytes whose SHA-256 is not the one recorded beside them.

CARRY_BYTES, CARRY_MANIFEST = "corpus.bin", "corpus.json"


def save_corpus(corpus: Corpus, folder: str | Path, **extra) -> Path:
    """Write the training then the validation bytes to `folder`/corpus.bin and their provenance (SHA-256s, sizes,
    modules, Python version, and `extra`) to `folder`/corpus.json; returns the manifest's path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    train, val = corpus.train.numpy().tobytes(), corpus.val.numpy().tobytes()
    (folder / CARRY_BYTES).write_bytes(train + val)
    manifest = {
        "sha256": corpus.sha256,
        "val_sha256": corpus.val_sha256,
        "train_bytes": len(train),
        "val_bytes": len(val),
        "sources": list(corpus.sources),
        "python_version": corpus.python_version,
        **extra,
    }
    path = folder / CARRY_MANIFEST
    path.write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return path


def load_saved_corpus(folder: str | Path) -> tuple[Corpus, dict]:
    """The corpus `save_corpus` wrote, checked byte for byte against its manifest, and the manifest."""
    folder = Path(folder)
    fix = "write it again on the machine that builds the book (`save_corpus(load_corpus(), folder)`)"
    manifest_path, bytes_path = folder / CARRY_MANIFEST, folder / CARRY_BYTES
    if not manifest_path.is_file() or not bytes_path.is_file():
        raise FileNotFoundError(f"no carried corpus in {folder} (needs {CARRY_MANIFEST} and {CARRY_BYTES}); {fix}")
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        split = int(manifest["train_bytes"])
        expected, expected_val = manifest["sha256"], manifest["val_sha256"]
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{manifest_path}: not a corpus manifest ({error}); {fix}") from None
    data = bytes_path.read_bytes()
    train, val = data[:split], data[split:]
    found, found_val = hashlib.sha256(train).hexdigest(), hashlib.sha256(val).hexdigest()
    if found != expected or found_val != expected_val:
        raise ValueError(
            f"{bytes_path}: its training bytes have SHA-256 {found[:16]}… (validation {found_val[:16]}…), but "
            f"{manifest_path} records {expected[:16]}… ({expected_val[:16]}…): the file was changed or cut short "
            f"in transit, and the runs would not train on the chapters' bytes; {fix}"
        )
    train_t = torch.frombuffer(bytearray(train), dtype=torch.uint8)
    corpus = Corpus(
        train=train_t,
        val=torch.frombuffer(bytearray(val), dtype=torch.uint8),
        sha256=found,
        val_sha256=found_val,
        sources=tuple(manifest.get("sources", ())),
        python_version=str(manifest.get("python_version", "")),
        byte_counts=torch.bincount(train_t.long(), minlength=256),
    )
    return corpus, manifest
