"""Drop-in nn.Modules with torch.nn.RMSNorm / torch.nn.LayerNorm's attributes and state_dict keys.

Both expose `normalized_shape` (a 1-tuple), `eps` (None: the input dtype's
machine epsilon, as torch.nn.RMSNorm) and `elementwise_affine`, and load a
torch.nn state dict (and theirs loads into torch.nn). `forward(x, residual=None)`
returns y, or (y, x + residual) with a residual; see normlab.norms.functional for dtypes.
"""

from __future__ import annotations

import torch
from torch import nn

from normlab.norms.functional import _check_backend, layer_norm, rms_norm
from normlab.norms.validation import check_casting_mode, check_eps


def _features(normalized_shape) -> int:
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if len(shape) != 1 or not isinstance(shape[0], int) or shape[0] <= 0:
        raise ValueError(
            f"normalized_shape must be one positive int (norms act over the last dimension), got {normalized_shape!r}"
        )
    return shape[0]


def _check_module_eps(eps) -> None:
    if eps is not None:
        check_eps(eps)


class RMSNorm(nn.Module):
    """RMSNorm over the last dimension; gain = offset + weight.

    offset=1.0 with casting_mode="gemma" is transformers' GemmaRMSNorm (the weight starts at 0);
    casting_mode="llama" is LlamaRMSNorm's rounding order. An offset needs a weight: it is
    refused here, at construction, without elementwise_affine.
    """

    def __init__(
        self,
        normalized_shape,
        eps: float | None = 1e-6,
        elementwise_affine: bool = True,
        *,
        offset: float = 0.0,
        eps_placement: str = "inside",
        partial: float = 1.0,
        casting_mode: str | None = None,
        residual_in_fp32: bool = False,
        backend: str = "auto",
        device=None,
        dtype=None,
    ):
        super().__init__()
        _check_backend(backend)
        _check_module_eps(eps)
        check_casting_mode(casting_mode)
        if offset and not elementwise_affine:
            raise ValueError(
                f"offset={offset} needs a weight (the gain is offset + weight), but elementwise_affine=False; "
                "use elementwise_affine=True, or offset=0.0 for a norm without gain"
            )
        self.normalized_shape = (_features(normalized_shape),)
        self.eps, self.offset, self.eps_placement, self.partial = eps, offset, eps_placement, partial
        self.casting_mode, self.residual_in_fp32, self.backend = casting_mode, residual_in_fp32, backend
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = nn.Parameter(torch.empty(self.normalized_shape, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.weight is not None:
            # With an offset (Gemma), the gain is offset + weight, so weight starts at 0 for a unit gain.
            with torch.no_grad():
                self.weight.fill_(0.0 if self.offset else 1.0)

    def forward(self, x, residual=None):
        return rms_norm(
            x,
            self.weight,
            self.eps,
            residual=residual,
            offset=self.offset,
            eps_placement=self.eps_placement,
            partial=self.partial,
            residual_in_fp32=self.residual_in_fp32,
            casting_mode=self.casting_mode,
            backend=self.backend,
        )

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, offset={self.offset}, "
            f"eps_placement={self.eps_placement!r}, partial={self.partial}, casting_mode={self.casting_mode!r}, "
            f"backend={self.backend!r}"
        )


class LayerNorm(nn.Module):
    def __init__(
        self,
        normalized_shape,
        eps: float | None = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        *,
        residual_in_fp32: bool = False,
        backend: str = "auto",
        device=None,
        dtype=None,
    ):
        super().__init__()
        _check_backend(backend)
        _check_module_eps(eps)
        self.normalized_shape = (_features(normalized_shape),)
        self.eps, self.residual_in_fp32, self.backend = eps, residual_in_fp32, backend
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = nn.Parameter(torch.empty(self.normalized_shape, device=device, dtype=dtype))
            if bias:
                self.bias = nn.Parameter(torch.empty(self.normalized_shape, device=device, dtype=dtype))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            if self.weight is not None:
                self.weight.fill_(1.0)
            if self.bias is not None:
                self.bias.zero_()

    def forward(self, x, residual=None):
        return layer_norm(
            x,
            self.weight,
            self.bias,
            self.eps,
            residual=residual,
            residual_in_fp32=self.residual_in_fp32,
            backend=self.backend,
        )

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, backend={self.backend!r}"
