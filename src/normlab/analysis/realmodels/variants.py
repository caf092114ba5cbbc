"""Norm variants installed in SmolLM2 in turn, and the next-token loss each gives per chunk.

`variant_modules` builds the normlab modules `swap_norms` would install (another backend, or a LayerNorm in place
of each RMSNorm) without leaving them installed; `installed` puts a set of them in for a `with` block, and
`FirstTokenApart` keeps the first token of each chunk on the original norm. `chunk_losses` gives the per-chunk
losses that the sections pair (`normlab.analysis.shared.paired` pairs them and writes the change).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from normlab.norms.huggingface import find_norms, restore_norms, swap_norms


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
