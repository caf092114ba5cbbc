"""Drop-in nn.Modules whose state_dict keys match torch.nn.RMSNorm / torch.nn.LayerNorm."""
from __future__ import annotations

import torch
from torch import nn

from .functional import _check_backend, layer_norm, rms_norm


def _features(normalized_shape) -> int:
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if len(shape) != 1 or shape[0] <= 0:
        raise ValueError(f"normalized_shape must be one positive int (norms act over the last dimension), got {normalized_shape!r}")
    return shape[0]


class RMSNorm(nn.Module):
    def __init__(self, normalized_shape, eps: float = 1e-6, elementwise_affine: bool = True, *, offset: float = 0.0,
                 eps_placement: str = "inside", partial: float = 1.0, backend: str = "auto", device=None, dtype=None):
        super().__init__()
        _check_backend(backend)
        self.normalized_shape = (_features(normalized_shape),)
        self.eps, self.offset, self.eps_placement, self.partial, self.backend = eps, offset, eps_placement, partial, backend
        if elementwise_affine:
            # With an offset (Gemma), the gain is offset + weight, so weight starts at 0 for a unit gain.
            init = torch.zeros if offset else torch.ones
            self.weight = nn.Parameter(init(self.normalized_shape, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)

    def forward(self, x, residual=None):
        return rms_norm(x, self.weight, self.eps, residual=residual, offset=self.offset,
                        eps_placement=self.eps_placement, partial=self.partial, backend=self.backend)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, offset={self.offset}, eps_placement={self.eps_placement!r}, partial={self.partial}, backend={self.backend!r}"


class LayerNorm(nn.Module):
    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True, *,
                 backend: str = "auto", device=None, dtype=None):
        super().__init__()
        _check_backend(backend)
        self.normalized_shape = (_features(normalized_shape),)
        self.eps, self.backend = eps, backend
        if elementwise_affine:
            self.weight = nn.Parameter(torch.ones(self.normalized_shape, device=device, dtype=dtype))
            self.bias = nn.Parameter(torch.zeros(self.normalized_shape, device=device, dtype=dtype)) if bias else None
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, x, residual=None):
        return layer_norm(x, self.weight, self.bias, self.eps, residual=residual, backend=self.backend)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, backend={self.backend!r}"
