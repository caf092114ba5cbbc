"""Closed-form Jacobians and gradients of RMSNorm and LayerNorm, and autograd to check them.

Notation (one token, x of shape (d,)):

    s   = sqrt(mean(x^2) + eps)          RMSNorm's denominator, eps inside
    y   = x / s                          the normalised input (x-hat when eps = 0)
    P   = I - 1 1^T / d                  the projector onto the complement of 1

Exact forms, derived by hand and checked against autograd in the tests:

    RMSNorm, eps inside:   dy/dx = (1/s) (I - y y^T / d)
    RMSNorm, eps outside:  dy/dx = (1/(r+eps)) (I - x x^T / (d r (r+eps))),  r = sqrt(mean(x^2))
    LayerNorm (no affine): dy/dx = J_rms(P x) P = (1/s) (P - y y^T / d),     s = sqrt(var(x) + eps)

The essay's B12/B13 print (I - x̂ x̂^T) where the exact form has (I - x̂ x̂^T / d):
with x̂ = x / r one has ||x̂||^2 = d, so only the latter is a projector. Both the
printed and the exact forms are provided so that the chapter can measure the gap.

All functions work on float64 vectors; they are analysis helpers, not kernels."""

from __future__ import annotations

import torch

from normlab.norms.reference import layer_norm_reference, rms_norm_reference

# Adding 1e-300 to any mean square above ~1e-284 leaves it unchanged in float64,
# so the specification evaluated with this eps *is* the eps-free norm.
EPS_FREE = 1e-300


def _check_vector(x: torch.Tensor) -> None:
    if not isinstance(x, torch.Tensor) or x.dim() != 1 or x.numel() < 2:
        raise ValueError(
            f"x must be a 1-d tensor with at least 2 features (one token), got {getattr(x, 'shape', type(x))}"
        )
    if x.dtype != torch.float64:
        raise TypeError(f"x has dtype {x.dtype}; Jacobian checks run in float64, pass x.double()")


def _eps_or_free(eps: float) -> float:
    if eps < 0:
        raise ValueError(f"eps must be >= 0 (0 means the eps-free norm), got {eps}")
    return eps if eps > 0 else EPS_FREE


def rms_normalise(x: torch.Tensor, eps: float = 0.0, eps_placement: str = "inside") -> torch.Tensor:
    """RMSNorm without gain, evaluated by the reference implementation (eps = 0: exactly eps-free)."""
    return rms_norm_reference(x, eps=_eps_or_free(eps), eps_placement=eps_placement)


def layer_normalise(x: torch.Tensor, eps: float = 0.0) -> torch.Tensor:
    """LayerNorm without gain or bias, evaluated by the reference implementation."""
    return layer_norm_reference(x, eps=_eps_or_free(eps))


def autograd_jacobian(function, x: torch.Tensor) -> torch.Tensor:
    """d function(x) / dx as a (d, d) matrix, row i = gradient of output i."""
    _check_vector(x)
    return torch.autograd.functional.jacobian(function, x, vectorize=True)


def rms(x: torch.Tensor) -> torch.Tensor:
    return x.pow(2).mean().sqrt()


def centring_projector(d: int, dtype=torch.float64) -> torch.Tensor:
    return torch.eye(d, dtype=dtype) - torch.full((d, d), 1.0 / d, dtype=dtype)


def rms_jacobian_as_printed(x: torch.Tensor) -> torch.Tensor:
    """B12 exactly as the essay prints it: (1/r)(I - x̂ x̂^T), x̂ = x / r."""
    _check_vector(x)
    r = rms(x)
    x_hat = x / r
    return (torch.eye(x.numel(), dtype=x.dtype) - torch.outer(x_hat, x_hat)) / r


def rms_jacobian(x: torch.Tensor, eps: float = 0.0, eps_placement: str = "inside") -> torch.Tensor:
    """The exact Jacobian of x / sqrt(mean(x^2) + eps) (or x / (rms + eps) for "outside")."""
    _check_vector(x)
    d = x.numel()
    identity = torch.eye(d, dtype=x.dtype)
    if eps_placement == "inside":
        s = (x.pow(2).mean() + eps).sqrt()
        y = x / s
        return (identity - torch.outer(y, y) / d) / s
    if eps_placement == "outside":
        r = rms(x)
        return (identity - torch.outer(x, x) / (d * r * (r + eps))) / (r + eps)
    raise ValueError(f"eps_placement must be 'inside' or 'outside', got {eps_placement!r}")


def layer_norm_jacobian(x: torch.Tensor, eps: float = 0.0) -> torch.Tensor:
    """The exact Jacobian of (x - mean) / sqrt(var + eps): RMSNorm's Jacobian at the centred input, times P."""
    _check_vector(x)
    projector = centring_projector(x.numel(), x.dtype)
    return rms_jacobian(projector @ x, eps) @ projector


def rms_input_gradient_as_printed(x: torch.Tensor, gain: torch.Tensor, upstream: torch.Tensor) -> torch.Tensor:
    """B13's dℓ/dx as printed: (1/r)(I - x̂ x̂^T)(g ⊙ δ)."""
    return rms_jacobian_as_printed(x) @ (gain * upstream)


def rms_input_gradient(x: torch.Tensor, gain: torch.Tensor, upstream: torch.Tensor, eps: float = 0.0) -> torch.Tensor:
    """The exact dℓ/dx for ŷ = (x / s) ⊙ g and δ = dℓ/dŷ (the Jacobian is symmetric, so no transpose)."""
    return rms_jacobian(x, eps) @ (gain * upstream)


def gain_gradient(x: torch.Tensor, upstream: torch.Tensor, eps: float = 0.0) -> torch.Tensor:
    """dℓ/dg = Σ_tokens δ ⊙ x̂ for a batch x, upstream of shape (tokens, d)."""
    if x.shape != upstream.shape or x.dim() != 2:
        raise ValueError(
            f"x and upstream must both have shape (tokens, d), got {tuple(x.shape)} and {tuple(upstream.shape)}"
        )
    x_hat = x / (x.pow(2).mean(-1, keepdim=True) + eps).sqrt()
    return (upstream * x_hat).sum(0)


def autograd_rms_gradients(x: torch.Tensor, gain: torch.Tensor, upstream: torch.Tensor, eps: float = 0.0):
    """(dℓ/dx, dℓ/dg) by autograd for ℓ = Σ δ ⊙ RMSNorm(x; g), δ held fixed."""
    x = x.detach().clone().requires_grad_(True)
    gain = gain.detach().clone().requires_grad_(True)
    output = rms_norm_reference(x, gain, eps=_eps_or_free(eps))
    return torch.autograd.grad(output, (x, gain), upstream)


def relative_max_error(estimate: torch.Tensor, truth: torch.Tensor) -> float:
    """max |estimate - truth| / max |truth|: scale-free, so 1e-12 means "to machine precision" at any r."""
    scale = truth.abs().max().clamp_min(torch.finfo(truth.dtype).tiny)
    return float((estimate - truth).abs().max() / scale)


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.dot(a, b) / (a.norm() * b.norm()))


def projector_spectrum(matrix: torch.Tensor) -> torch.Tensor:
    """Eigenvalues (ascending) of a symmetric matrix: a projector has only 0s and 1s."""
    return torch.linalg.eigvalsh((matrix + matrix.T) / 2)


def regression_gain(x: torch.Tensor, target: torch.Tensor, eps: float = 0.0) -> torch.Tensor:
    """Per-channel least-squares slope through the origin of target on x̂: Σ x̂ t / Σ x̂².

    It is the minimiser of ½ Σ ||x̂ ⊙ g - t||², i.e. the g where Σ_tokens δ ⊙ x̂ = 0.
    """
    x_hat = x / (x.pow(2).mean(-1, keepdim=True) + eps).sqrt()
    return (x_hat * target).sum(0) / x_hat.pow(2).sum(0)


def fit_gain(x: torch.Tensor, target: torch.Tensor, steps: int, lr: float, eps: float = 0.0) -> torch.Tensor:
    """Gradient descent on g alone for ℓ = ½ mean_tokens ||RMSNorm(x; g) - t||², from g = 1.

    Returns the trajectory, shape (steps + 1, d), so a chapter can show g converging.
    """
    if steps < 1 or not lr > 0:
        raise ValueError(f"steps must be >= 1 and lr > 0, got steps={steps}, lr={lr}")
    gain = torch.ones(x.shape[-1], dtype=x.dtype, requires_grad=True)
    trajectory = [gain.detach().clone()]
    for _ in range(steps):
        loss = 0.5 * (rms_norm_reference(x, gain, eps=_eps_or_free(eps)) - target).pow(2).sum(-1).mean()
        (grad,) = torch.autograd.grad(loss, gain)
        with torch.no_grad():
            gain -= lr * grad
        trajectory.append(gain.detach().clone())
    return torch.stack(trajectory)


def formula_errors(x: torch.Tensor, gain: torch.Tensor, upstream: torch.Tensor, eps: float) -> dict[str, float]:
    """Relative max error of every closed form against autograd of the reference, for one token.

    Forms marked "printed" are the essay's; the others are this module's exact forms.
    `eps` is the eps used for the eps-aware forms; the printed forms are eps-free.
    """
    _check_vector(x)
    d = x.numel()
    projector = centring_projector(d)
    rms_free = autograd_jacobian(lambda v: rms_normalise(v), x)
    rms_inside = autograd_jacobian(lambda v: rms_normalise(v, eps), x)
    rms_outside = autograd_jacobian(lambda v: rms_normalise(v, eps, "outside"), x)
    ln_auto = autograd_jacobian(lambda v: layer_normalise(v, eps), x)
    rms_at_centred = autograd_jacobian(lambda v: rms_normalise(v, eps), projector @ x)
    grad_x, grad_g = autograd_rms_gradients(x, gain, upstream)
    return {
        "B12 printed: (1/r)(I - x̂x̂ᵀ)": relative_max_error(rms_jacobian_as_printed(x), rms_free),
        "exact: (1/r)(I - x̂x̂ᵀ/d)": relative_max_error(rms_jacobian(x), rms_free),
        "exact, ε inside: (1/s)(I - yyᵀ/d)": relative_max_error(rms_jacobian(x, eps), rms_inside),
        "exact, ε outside": relative_max_error(rms_jacobian(x, eps, "outside"), rms_outside),
        "LN exact: (1/s)(P - yyᵀ/d)": relative_max_error(layer_norm_jacobian(x, eps), ln_auto),
        "LN = J_RMS(Px)·P (autograd both)": relative_max_error(rms_at_centred @ projector, ln_auto),
        "B13 printed: ∂ℓ/∂x": relative_max_error(rms_input_gradient_as_printed(x, gain, upstream), grad_x),
        "exact: ∂ℓ/∂x": relative_max_error(rms_input_gradient(x, gain, upstream), grad_x),
        "B13: ∂ℓ/∂g = δ⊙x̂": relative_max_error(gain_gradient(x[None], upstream[None]), grad_g),
    }


def null_directions(x: torch.Tensor, eps: float = 0.0) -> dict[str, float]:
    """How much each Jacobian keeps of the directions its norm is invariant to (0 = fully removed).

    Each entry is ||J v|| / (||J|| ||v||) with the spectral norm; the gradient's cosine with x is
    reported for a random upstream vector through RMSNorm's (symmetric) Jacobian.
    """
    _check_vector(x)
    ones = torch.ones_like(x)
    rms_auto = autograd_jacobian(lambda v: rms_normalise(v, eps), x)
    ln_auto = autograd_jacobian(lambda v: layer_normalise(v, eps), x)

    def kept(matrix, direction):
        return float((matrix @ direction).norm() / (torch.linalg.matrix_norm(matrix, 2) * direction.norm()))

    return {
        "RMS: J x": kept(rms_auto, x),
        "RMS: J 1": kept(rms_auto, ones),
        "LN: J x": kept(ln_auto, x),
        "LN: J 1": kept(ln_auto, ones),
        "RMS rank": int(torch.linalg.matrix_rank(rms_auto)),
        "LN rank": int(torch.linalg.matrix_rank(ln_auto)),
    }


def gradient_scale_ratios(
    x: torch.Tensor, gain: torch.Tensor, upstream: torch.Tensor, scales, eps: float = 0.0
) -> torch.Tensor:
    """a · ||∂ℓ/∂x at a·x|| / ||∂ℓ/∂x at x (ε-free)|| for each scale a: 1 wherever gradients scale as 1/r."""
    base = autograd_rms_gradients(x, gain, upstream)[0].norm()
    ratios = [float(a) * autograd_rms_gradients(float(a) * x, gain, upstream, eps)[0].norm() / base for a in scales]
    return torch.tensor(ratios, dtype=torch.float64)


def radial_tangential(x: torch.Tensor, perturbation: torch.Tensor, eps: float = 0.0) -> dict[str, float]:
    """Split a change of x into its radial part (along x) and its tangential part, and see what RMSNorm's Jacobian does to each.

    With J the autograd Jacobian of x ↦ x/rms(x) at x:
    - "radial kept": ||J v_r|| / (||J|| ||v_r||), 0 when the radial part is removed;
    - "tangential error": ||J v_t − v_t / r|| / ||v_t / r||, 0 when the tangential part passes scaled by 1/r;
    - "output change along y": |y · J v| / (||y|| ||J v||), 0 when a change of x moves the output only along the
      sphere ||y|| = √d, i.e. changes its direction and never its length.
    """
    _check_vector(x)
    if perturbation.shape != x.shape:
        raise ValueError(f"perturbation must have x's shape {tuple(x.shape)}, got {tuple(perturbation.shape)}")
    unit = x / x.norm()
    radial = (perturbation @ unit) * unit
    tangential = perturbation - radial
    jacobian = autograd_jacobian(lambda v: rms_normalise(v, eps), x)
    y = rms_normalise(x, eps)
    spectral = torch.linalg.matrix_norm(jacobian, 2)
    moved = jacobian @ perturbation
    r = rms(x)
    return {
        "radial kept": float((jacobian @ radial).norm() / (spectral * radial.norm())),
        "tangential error": float((jacobian @ tangential - tangential / r).norm() / (tangential / r).norm()),
        "output change along y": float((y @ moved).abs() / (y.norm() * moved.norm())),
    }
