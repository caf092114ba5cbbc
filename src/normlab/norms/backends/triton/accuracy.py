"""The accuracy rule the Triton kernels are held to, for checks outside the test suite (the GPU session).

Against a float64 reference, as tests/test_triton_kernels.py judges them: in fp32 a relative error of at
most 1e-5 (or twice PyTorch's own, where PyTorch's exceeds half that: a weight gradient summed over
thousands of rows); in fp16 and bf16 no worse than twice PyTorch's own error against the same reference,
plus one unit of rounding.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

FP32_BOUND = 1e-5


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """Largest absolute difference over the largest magnitude of the reference."""
    actual, expected = actual.double(), expected.double()
    if expected.numel() == 0:
        return 0.0
    return ((actual - expected).abs().max() / expected.abs().max().clamp_min(1e-30)).item()


def bound(dtype: torch.dtype, pytorch_error: float) -> float:
    if dtype == torch.float32:
        return max(FP32_BOUND, 2 * pytorch_error)
    if dtype == torch.float64:
        return 1e-10
    return 2 * pytorch_error + torch.finfo(dtype).eps


def pytorch_outputs(kind: str, x, weight, bias, residual, dy, ds, eps: float) -> dict[str, torch.Tensor]:
    """PyTorch's own y (and s) and gradients in x's dtype: the other side of the rule.

    Parameters in another dtype than x (fp32 weights, bf16 x) are cast to x's, as F.rms_norm requires."""
    leaves = {"x": x, "residual": residual, "weight": weight, "bias": bias}
    leaves = {name: t.detach().clone().requires_grad_() for name, t in leaves.items() if t is not None}
    s = leaves["x"] + leaves["residual"] if "residual" in leaves else leaves["x"]
    w = leaves["weight"].to(x.dtype) if "weight" in leaves else None
    if kind == "rms":
        y = F.rms_norm(s, (s.shape[-1],), w, eps)
    else:
        b = leaves["bias"].to(x.dtype) if "bias" in leaves else None
        y = F.layer_norm(s, (s.shape[-1],), w, b, eps)
    outputs, upstream = [y], [dy]
    if "residual" in leaves:
        outputs.append(s)
        upstream.append(ds)
    grads = torch.autograd.grad(outputs, list(leaves.values()), upstream)
    found = {"y": y.detach()} | ({"s": s.detach()} if "residual" in leaves else {})
    return found | {f"d{name}": g for name, g in zip(leaves, grads)}
