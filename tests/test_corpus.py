"""The standard-library corpus: deterministic, disjoint, checksummed, and batches that are next-byte pairs."""

import hashlib
import math

import pytest
import torch

from normlab.gpt.corpus import STDLIB_MODULES, build_corpus, load_corpus, module_source, split_text


def test_split_cuts_at_a_line_end_and_loses_nothing():
    text = b"".join(b"line %d\n" % i for i in range(100))
    head, tail = split_text(text, 0.1)
    assert head + tail == text
    assert head.endswith(b"\n") and 0.85 < len(head) / len(text) < 0.95


def test_corpus_is_per_file_heads_and_tails_with_checksums():
    texts = [("a", b"alpha\n" * 50), ("b", b"beta\n" * 40)]
    corpus = build_corpus(texts, val_fraction=0.2)
    heads_tails = [split_text(t, 0.2) for _, t in texts]
    train_bytes = b"".join(h for h, _ in heads_tails)
    val_bytes = b"".join(t for _, t in heads_tails)
    assert bytes(corpus.train.tolist()) == train_bytes and bytes(corpus.val.tolist()) == val_bytes
    assert corpus.sha256 == hashlib.sha256(train_bytes).hexdigest()
    assert corpus.val_sha256 == hashlib.sha256(val_bytes).hexdigest()
    assert corpus.sources == ("a", "b")


def test_unigram_entropy_against_a_float64_count():
    corpus = build_corpus([("x", b"aaab\n" * 30)], val_fraction=0.1)
    data = corpus.train.tolist()
    probabilities = [data.count(v) / len(data) for v in set(data)]
    expected = -sum(p * math.log(p) for p in probabilities)
    assert abs(corpus.unigram_entropy_nats - expected) < 1e-12
    assert abs(corpus.unigram_entropy_bits - expected / math.log(2)) < 1e-12


def test_standard_library_corpus_is_deterministic_and_real_text():
    corpus = load_corpus()
    load_corpus.cache_clear()
    again = load_corpus()
    assert corpus is not again and corpus.sha256 == again.sha256 and torch.equal(corpus.val, again.val)
    assert corpus.sources == STDLIB_MODULES
    assert corpus.train.numel() > 1_000_000 and corpus.val.numel() > 100_000
    # Every module's first line opens the training text in order; its last line closes a validation tail.
    first = module_source(STDLIB_MODULES[0]).read_bytes()
    assert bytes(corpus.train[:200].tolist()) == first[:200]
    # English prose and code both: byte entropy well above a toy text's, below uniform.
    assert 3.5 < corpus.unigram_entropy_bits < 6.0


def test_batches_are_next_byte_pairs_and_reproducible():
    corpus = build_corpus([("x", bytes(range(256)) * 8)], val_fraction=0.25)
    x, y = corpus.batch("train", 4, 16, torch.Generator().manual_seed(3))
    assert x.shape == y.shape == (4, 16) and x.dtype == torch.long
    assert torch.equal(x[:, 1:], y[:, :-1])
    x2, _ = corpus.batch("train", 4, 16, torch.Generator().manual_seed(3))
    assert torch.equal(x, x2)


def test_bad_requests_are_refused():
    corpus = build_corpus([("x", b"short text\n" * 10)], val_fraction=0.5)
    with pytest.raises(ValueError, match="context 200 is longer than the corpus"):
        corpus.batch("train", 1, 200, torch.Generator())
    with pytest.raises(ValueError, match="split"):
        corpus.batch("test", 1, 4, torch.Generator())
    with pytest.raises(ValueError, match="val_fraction"):
        build_corpus([("x", b"abc\n")], val_fraction=1.0)
    with pytest.raises(FileNotFoundError, match="no_such_module"):
        load_corpus(("no_such_module",))
