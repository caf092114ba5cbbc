"""The tiny GPT the model tests build: small enough to run in milliseconds, with every part present."""

import torch

from normlab.gpt.model import GPTConfig

TINY = dict(vocab_size=256, context=16, width=32, depth=2, heads=4)


def tiny(**overrides) -> GPTConfig:
    return GPTConfig(**{**TINY, **overrides})


def ids(batch=2, time=16, seed=0):
    return torch.randint(0, 256, (batch, time), generator=torch.Generator().manual_seed(seed))
