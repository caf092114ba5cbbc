"""Swap the norms of a HuggingFace transformers model for normlab modules, keeping their weights.

    from normlab.norms.huggingface import swap_norms
    swapped = swap_norms(model, backend="compile")          # same maths, normlab kernels
    swap_norms(model, convert="layer_norm")                 # RMSNorm -> LayerNorm, same gain, no bias

Recognised norms: LLaMA-family RMSNorm modules (any class whose name ends in
"RMSNorm" and that holds a `weight` and `variance_epsilon` or `eps`, which
covers LlamaRMSNorm and so SmolLM2, Mistral, Qwen2), torch.nn.RMSNorm and
torch.nn.LayerNorm (BERT's LayerNorm is torch.nn.LayerNorm). Gemma's
RMSNorm computes `(1 + weight)`; it is recognised by its class name and
swapped with normlab's `offset=1`.

transformers itself is not imported here: the helper walks `named_modules`,
so it works on any torch model that contains these modules.
"""

from __future__ import annotations

import torch
from torch import nn

from normlab.norms.functional import BACKENDS, rms_norm
from normlab.norms.modules import LayerNorm, RMSNorm

CONVERSIONS = (None, "layer_norm", "rms_norm")


class RMSNormWithBias(RMSNorm):
    """RMSNorm followed by a bias: what a LayerNorm becomes when its centring is removed but its
    affine parameters are kept (y = x / rms(x) * weight + bias)."""

    def __init__(self, normalized_shape, eps: float = 1e-5, *, backend: str = "auto", device=None, dtype=None):
        super().__init__(normalized_shape, eps, backend=backend, device=device, dtype=dtype)
        self.bias = nn.Parameter(torch.zeros(self.normalized_shape, device=device, dtype=dtype))

    def forward(self, x, residual=None):
        if residual is not None:
            raise ValueError("RMSNormWithBias takes no residual; add it before calling the norm")
        return rms_norm(x, self.weight, self.eps, backend=self.backend) + self.bias


def _rms_eps(module: nn.Module) -> float | None:
    for name in ("variance_epsilon", "eps"):
        value = getattr(module, name, None)
        if isinstance(value, (int, float)):
            return float(value)
    return None


def norm_kind(module: nn.Module) -> str | None:
    """'rms_norm', 'layer_norm' or None (not a norm this helper knows)."""
    if isinstance(module, (RMSNorm, LayerNorm)):
        return None  # already normlab's
    if isinstance(module, nn.LayerNorm):
        return "layer_norm"
    if isinstance(module, nn.RMSNorm):
        return "rms_norm"
    if (
        type(module).__name__.endswith("RMSNorm")
        and isinstance(getattr(module, "weight", None), torch.Tensor)
        and _rms_eps(module) is not None
    ):
        return "rms_norm"
    return None


def find_norms(model: nn.Module) -> dict[str, nn.Module]:
    """Every norm module `swap_norms` would replace, by qualified name, in model order."""
    return {name: m for name, m in model.named_modules() if name and norm_kind(m) is not None}


def _replacement(module: nn.Module, kind: str, backend: str, convert: str | None) -> nn.Module:
    weight = getattr(module, "weight", None)
    bias = getattr(module, "bias", None)
    width = module.weight.shape[-1] if weight is not None else module.normalized_shape[-1]
    factory = {"device": weight.device, "dtype": weight.dtype} if weight is not None else {}
    target = convert or kind
    if kind == "rms_norm":
        eps = _rms_eps(module)
        if eps is None:  # torch.nn.RMSNorm with eps=None uses the dtype's machine epsilon
            eps = torch.finfo(weight.dtype if weight is not None else torch.get_default_dtype()).eps
        offset = 1.0 if type(module).__name__.startswith("Gemma") else 0.0
        if target == "rms_norm":
            new = RMSNorm(width, eps, elementwise_affine=weight is not None, offset=offset, backend=backend, **factory)
            if weight is not None:
                new.weight.data.copy_(weight.detach())
            return new
        # Centring added: LayerNorm with the same gain (offset folded in) and no bias.
        new = LayerNorm(width, eps, elementwise_affine=weight is not None, bias=False, backend=backend, **factory)
        if weight is not None:
            new.weight.data.copy_(weight.detach() + offset)
        return new
    eps = float(module.eps)
    if target == "layer_norm":
        new = LayerNorm(
            width, eps, elementwise_affine=weight is not None, bias=bias is not None, backend=backend, **factory
        )
        if weight is not None:
            new.weight.data.copy_(weight.detach())
        if bias is not None:
            new.bias.data.copy_(bias.detach())
        return new
    # Centring removed: RMSNorm with the same gain and, if the LayerNorm had one, the same bias.
    if bias is not None:
        new = RMSNormWithBias(width, eps, backend=backend, **factory)
        new.bias.data.copy_(bias.detach())
    else:
        new = RMSNorm(width, eps, elementwise_affine=weight is not None, backend=backend, **factory)
    if weight is not None:
        new.weight.data.copy_(weight.detach())
    return new


def _set_submodule(model: nn.Module, name: str, module: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, module)


def swap_norms(
    model: nn.Module, backend: str = "auto", *, convert: str | None = None, only=None
) -> dict[str, nn.Module]:
    """Replace the model's norms in place by normlab modules with the same weights; return the originals.

    backend: any normlab backend ('reference', 'eager', 'torch', 'compile', 'triton', 'auto').
    convert: None keeps each norm's kind; 'layer_norm' turns every RMSNorm into a LayerNorm with the
        same gain and no bias (centring added); 'rms_norm' turns every LayerNorm into an RMSNorm with
        the same gain and bias (centring removed).
    only: optional collection of module names (as in `find_norms`) to swap; the rest stay as they are.

    The returned dict maps each swapped name to its original module, so `restore_norms(model, originals)`
    undoes the swap.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; valid backends: {', '.join(BACKENDS)}")
    if convert not in CONVERSIONS:
        raise ValueError(f"convert must be one of {CONVERSIONS}, got {convert!r}")
    norms = find_norms(model)
    if not norms:
        raise ValueError(
            f"{type(model).__name__} has no norm module swap_norms recognises "
            "(LLaMA-family *RMSNorm, torch.nn.RMSNorm, torch.nn.LayerNorm)"
        )
    if only is not None:
        only = list(only)
        unknown = [name for name in only if name not in norms]
        if unknown:
            raise ValueError(
                f"only= names {unknown[:3]} are not norms of this model; "
                f"valid names look like {list(norms)[:2]} (see find_norms)"
            )
        norms = {name: norms[name] for name in only}
    for name, module in norms.items():
        _set_submodule(model, name, _replacement(module, norm_kind(module), backend, convert))
    return norms


def restore_norms(model: nn.Module, originals: dict[str, nn.Module]) -> None:
    """Put back the modules that `swap_norms` returned."""
    for name, module in originals.items():
        _set_submodule(model, name, module)
