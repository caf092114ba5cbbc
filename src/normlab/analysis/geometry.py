"""Geometry of the two norms: invariances, the dimension of the output set, and what ε does.

The formulas below are the articles' formulas transcribed literally, so that the
chapter can check each one against PyTorch's own implementations:

    A1 / B2 (LayerNorm):  y = (x - mean) / sqrt(var + eps) * gamma + beta
    A2 (RMSNorm):         y = x / (sqrt(mean(x^2)) + eps) * gamma          eps outside the root
    B2 (RMSNorm):         y = x / sqrt(mean(x^2) + eps) * gamma            eps inside the root
"""

from __future__ import annotations

import math

import torch


def layer_norm_as_written(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, eps: float) -> torch.Tensor:
    mean = x.mean(-1, keepdim=True)
    variance = (x - mean).pow(2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(variance + eps) * gamma + beta


def rms_norm_eps_outside(x: torch.Tensor, gamma: torch.Tensor, eps: float) -> torch.Tensor:
    """A2's formula (also the form in the RMSNorm authors' own code)."""
    return x / (torch.sqrt(x.pow(2).mean(-1, keepdim=True)) + eps) * gamma


def rms_norm_eps_inside(x: torch.Tensor, gamma: torch.Tensor, eps: float) -> torch.Tensor:
    """B2's formula."""
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * gamma


def max_abs_difference(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max())


def random_tokens(tokens: int, d: int, generator: torch.Generator, dtype=torch.float64) -> torch.Tensor:
    """Standard-normal tokens with a random per-token offset and scale, so no invariance holds by accident."""
    base = torch.randn(tokens, d, generator=generator, dtype=torch.float64)
    offset = torch.randn(tokens, 1, generator=generator, dtype=torch.float64)
    scale = torch.exp(torch.randn(tokens, 1, generator=generator, dtype=torch.float64))
    return (scale * base + offset).to(dtype)


# ---------------------------------------------------------------- invariance


def shift_change(norm, x: torch.Tensor, shifts) -> torch.Tensor:
    """max |norm(x + c·1) - norm(x)| over tokens, per shift c; x + c is rounded in x's dtype, as a model would."""
    reference = norm(x).double()
    return torch.tensor([float((norm(x + c).double() - reference).abs().max()) for c in shifts], dtype=torch.float64)


def scale_change(norm, x: torch.Tensor, scales) -> torch.Tensor:
    """max |norm(a·x) - norm(x)| over tokens, per scale a > 0."""
    reference = norm(x).double()
    return torch.tensor([float((norm(a * x).double() - reference).abs().max()) for a in scales], dtype=torch.float64)


def largest_passing(values, errors, tolerance: float) -> float:
    """The largest value such that it and every smaller value keep the error below tolerance (0 if none)."""
    passing = 0.0
    for value, error in sorted(zip(map(float, values), map(float, errors))):
        if not error < tolerance:
            break
        passing = value
    return passing


# ---------------------------------------------------------------- output set


def singular_values(outputs: torch.Tensor) -> torch.Tensor:
    """Singular values of a (tokens, d) batch of outputs, divided by the largest."""
    values = torch.linalg.svdvals(outputs.double())
    return values / values[0]


def numerical_rank(outputs: torch.Tensor, rtol: float = 1e-10) -> int:
    return int((singular_values(outputs) > rtol).sum())


# ---------------------------------------------------------------- eps placement (A2 vs B2, Q1)


def tokens_with_rms(rms_values, d: int, generator: torch.Generator) -> torch.Tensor:
    """One token per requested RMS, shape (len(rms_values), d), in float64, each with exactly that RMS."""
    base = torch.randn(len(rms_values), d, generator=generator, dtype=torch.float64)
    base = base / base.pow(2).mean(-1, keepdim=True).sqrt()
    return base * torch.as_tensor(rms_values, dtype=torch.float64)[:, None]


def placement_output_gap(x: torch.Tensor, eps: float) -> torch.Tensor:
    """Per token: max |inside - outside| / max |inside| in float64: how much ε's placement changes the output."""
    inside = rms_norm_eps_inside(x, torch.ones(x.shape[-1], dtype=x.dtype), eps)
    outside = rms_norm_eps_outside(x, torch.ones(x.shape[-1], dtype=x.dtype), eps)
    return (inside - outside).abs().amax(-1) / inside.abs().amax(-1)


def placement_gradient_gap(x: torch.Tensor, eps: float, upstream: torch.Tensor) -> torch.Tensor:
    """Per token: relative max difference of ∂ℓ/∂x between the two placements, ℓ = Σ upstream ⊙ y, in float64."""
    gradients = []
    for norm in (rms_norm_eps_inside, rms_norm_eps_outside):
        leaf = x.detach().clone().requires_grad_(True)
        (grad,) = torch.autograd.grad(norm(leaf, torch.ones(x.shape[-1], dtype=x.dtype), eps), leaf, upstream)
        gradients.append(grad)
    inside, outside = gradients
    return (inside - outside).abs().amax(-1) / inside.abs().amax(-1)


def placement_rounded_disagreement(x: torch.Tensor, eps: float, dtype: torch.dtype) -> torch.Tensor:
    """Per token: the share of output elements that differ once each placement's exact result is rounded to dtype."""
    ones = torch.ones(x.shape[-1], dtype=x.dtype)
    inside = rms_norm_eps_inside(x, ones, eps).to(dtype)
    outside = rms_norm_eps_outside(x, ones, eps).to(dtype)
    return (inside != outside).double().mean(-1)


def crossover_rms(rms_values, gaps, threshold: float) -> float:
    """The largest RMS at which the placement gap still exceeds threshold, log-log interpolated to the next point.

    The gap is not monotone (its two leading terms, ε/r and ε/(2r²), cancel near r = 1/2), so the scan starts
    from the large-RMS end. Returns 0 if the gap never exceeds threshold and inf if it does at the largest RMS.
    """
    points = sorted(zip(map(float, rms_values), map(float, gaps)))
    if points[-1][1] > threshold:
        return math.inf
    for (r0, g0), (r1, g1) in reversed(list(zip(points, points[1:]))):
        if g0 > threshold:
            if g1 <= 0:
                return r1
            t = (math.log(g0) - math.log(threshold)) / (math.log(g0) - math.log(g1))
            return math.exp(math.log(r0) + t * (math.log(r1) - math.log(r0)))
    return 0.0


def predicted_crossover_rms(eps: float, resolution: float) -> float:
    """Leading-order estimate of crossover_rms: the gap is ≈ ε/r for r ≫ 1/2 and ≈ ε/(2r²) for r ≪ 1/2."""
    return max(eps / resolution, math.sqrt(eps / (2 * resolution)))


# ---------------------------------------------------------------- eps on mean-dominated inputs (B11)


def mean_dominated_tokens(offset: float, noise: float, tokens: int, d: int, generator: torch.Generator) -> torch.Tensor:
    """x = offset·1 + noise·z with z standard normal, in float64."""
    return offset + noise * torch.randn(tokens, d, generator=generator, dtype=torch.float64)


def eps_effect(norm, x: torch.Tensor, eps: float) -> float:
    """max |norm_ε(x) - norm_0(x)| / max |norm_0(x)|: how much ε changes the output (float64, ε=0 via 1e-300)."""
    with_eps, without = norm(x, eps), norm(x, 1e-300)
    return float((with_eps - without).abs().max() / without.abs().max())


def mean_direction_share(y: torch.Tensor) -> float:
    """Average over tokens of mean(y)² / mean(y²): the share of the output's energy along 1."""
    return float((y.mean(-1).pow(2) / y.pow(2).mean(-1)).mean())


# ---------------------------------------------------------------- parameters (A6)


def parameter_count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def parameter_bytes(module: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in module.parameters())


def saved_for_backward_bytes(function, x: torch.Tensor) -> int:
    """Bytes of distinct tensors autograd keeps for the backward pass of function(x)."""
    storages: dict[int, int] = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        function(x)
    return sum(storages.values())


def repeated(measure, repeats: int, seed: int = 0) -> tuple[float, float, list[float]]:
    """Run `measure(generator)` on `repeats` independent random draws: (mean, sample sd, values).

    The sd is the run-to-run spread a verdict records: how much the key number
    moves when the random inputs are drawn again.
    """
    if not (isinstance(repeats, int) and repeats >= 2):
        raise ValueError(f"repeats must be an int >= 2 (a spread needs two draws), got {repeats!r}")
    values = [float(measure(torch.Generator().manual_seed(seed + 1000 * i))) for i in range(repeats)]
    mean = sum(values) / repeats
    sd = (sum((v - mean) ** 2 for v in values) / (repeats - 1)) ** 0.5
    return mean, sd, values
