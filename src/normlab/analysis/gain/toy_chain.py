"""The exact float64 toy chain: scale-invariant weights, their effective learning rate and weight decay on them.

The chain is  x -> W1 -> RMS-normalise -> (* g) -> W2 -> RMS-normalise -> V -> logits,  with no epsilon, so that the
loss is exactly unchanged when W1, g or W2 is rescaled. Every one of those three groups is scale invariant; the chain
lets us measure, with a real torch optimizer, how a group's effective learning rate depends on its own norm and on
the gain's norm, and how weight decay on a scale-invariant group behaves.

Literature the chapter holds these against (formulas re-derived in the docstrings below):

- van Laarhoven 2017, "L2 Regularization versus Batch and Weight Normalization": the gradient of a
  scale-invariant w is orthogonal to w and scales as 1/||w||, so SGD's effective step on the
  direction is eta/||w||^2.
- Li & Arora 2020 (ICLR), "An Exponential Learning Rate Schedule for Deep Learning": SGD with weight
  decay lambda on scale-invariant weights follows the same directions as SGD without decay under
  the learning rate eta_t = eta * (1 - eta*lambda)^-(2t+1).
- Wan et al. 2021 (NeurIPS), "Spherical Motion Dynamics": SGD with momentum alpha reaches an
  equilibrium with angular update sqrt(2*eta*lambda/(1+alpha)).
- Kosson, Messmer & Jaggi 2024 (ICML), "Rotational Equilibrium": equilibrium norm
  (eta*E||g~||^2 / (2*lambda*(1-alpha)))^(1/4) and angular update sqrt(2*eta*lambda/(1+alpha)) for
  SGDM; norm sqrt(eta*C/(2*lambda)) and angular update sqrt(2*eta*lambda*(1-beta1)/(1+beta1)) for
  AdamW, C the number of elements (random-walk model: gradients dominated by noise).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd
import torch
import torch.nn.functional as F

from normlab.analysis.gain.measures import angle, fit_power_law

GROUPS = ("W1", "g", "W2")
OPTIMIZERS = ("sgd", "sgdm", "adamw")


def _rms_normalise(h: torch.Tensor) -> torch.Tensor:
    # No epsilon: the toy's scale invariance must be exact, not approximate.
    return h / h.pow(2).mean(-1, keepdim=True).sqrt()


@dataclass
class ToyChain:
    """Data and parameters of the scale-invariant chain (all float64)."""

    inputs: torch.Tensor  # (n, d_in)
    labels: torch.Tensor  # (n,)
    readout: torch.Tensor  # (classes, d_hidden), fixed
    params: dict  # W1 (d_hidden, d_in), g (d_hidden,), W2 (d_hidden, d_hidden)

    def loss(self, params: dict | None = None, rows: torch.Tensor | None = None) -> torch.Tensor:
        p = self.params if params is None else params
        x = self.inputs if rows is None else self.inputs[rows]
        y = self.labels if rows is None else self.labels[rows]
        hidden = _rms_normalise(x @ p["W1"].T) * p["g"]
        logits = _rms_normalise(hidden @ p["W2"].T) @ self.readout.T
        return F.cross_entropy(logits, y)

    def clone_params(self, requires_grad: bool = True) -> dict:
        return {k: v.detach().clone().requires_grad_(requires_grad) for k, v in self.params.items()}


def make_toy_chain(
    d_in: int = 24,
    d_hidden: int = 16,
    classes: int = 6,
    samples: int = 512,
    *,
    random_labels: bool = False,
    seed: int = 0,
) -> ToyChain:
    """A teacher task (labels from a random teacher chain) or pure-noise labels (`random_labels`).

    Noise labels keep the minibatch gradient dominated by noise, which is the random-walk regime
    the equilibrium formulas assume.
    """
    for name, value in (("d_in", d_in), ("d_hidden", d_hidden), ("classes", classes), ("samples", samples)):
        if not isinstance(value, int) or value < 2:
            raise ValueError(f"{name} must be an int >= 2, got {value!r}")
    gen = torch.Generator().manual_seed(seed)
    inputs = torch.randn(samples, d_in, generator=gen, dtype=torch.float64)
    readout = torch.randn(classes, d_hidden, generator=gen, dtype=torch.float64)
    params = {
        "W1": torch.randn(d_hidden, d_in, generator=gen, dtype=torch.float64) / math.sqrt(d_in),
        "g": 1.0 + 0.1 * torch.randn(d_hidden, generator=gen, dtype=torch.float64),
        "W2": torch.randn(d_hidden, d_hidden, generator=gen, dtype=torch.float64) / math.sqrt(d_hidden),
    }
    if random_labels:
        labels = torch.randint(0, classes, (samples,), generator=gen)
    else:
        teacher = ToyChain(
            inputs,
            torch.zeros(samples, dtype=torch.long),
            readout,
            {
                "W1": torch.randn(d_hidden, d_in, generator=gen, dtype=torch.float64),
                "g": torch.rand(d_hidden, generator=gen, dtype=torch.float64) + 0.5,
                "W2": torch.randn(d_hidden, d_hidden, generator=gen, dtype=torch.float64),
            },
        )
        with torch.no_grad():
            hidden = _rms_normalise(inputs @ teacher.params["W1"].T) * teacher.params["g"]
            labels = (_rms_normalise(hidden @ teacher.params["W2"].T) @ readout.T).argmax(-1)
    return ToyChain(inputs, labels, readout, params)


def _optimizer(
    kind: str, params: list, lr: float, weight_decay: float = 0.0, momentum: float = 0.9, betas=(0.9, 0.999)
):
    if kind == "sgd":
        return torch.optim.SGD(params, lr=lr, weight_decay=weight_decay)
    if kind == "sgdm":
        return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    if kind == "adamw":
        # A tiny eps keeps Adam's update exactly invariant to the gradient's scale.
        return torch.optim.AdamW(params, lr=lr, betas=betas, eps=1e-30, weight_decay=weight_decay)
    raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {kind!r}")


def _batches(samples: int, batch_size: int, steps: int, seed: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, samples, (batch_size,), generator=gen) for _ in range(steps)]


def check_scale_invariance(chain: ToyChain, factors=(0.25, 4.0)) -> float:
    """Largest |loss change| when W1, g or W2 alone is multiplied by each factor (exact zero in exact arithmetic)."""
    base = float(chain.loss())
    worst = 0.0
    for group in GROUPS:
        for factor in factors:
            p = chain.clone_params(requires_grad=False)
            p[group] = p[group] * factor
            worst = max(worst, abs(float(chain.loss(p)) - base))
    return worst


def effective_lr_scan(
    chain: ToyChain,
    scaled: str,
    norms,
    *,
    optimizer: str = "sgd",
    lr: float = 0.05,
    steps: int = 5,
    batch_size: int = 64,
    seed: int = 0,
) -> pd.DataFrame:
    """Rescale one group to each norm in `norms`, train every group for `steps` steps, and measure each group's step.

    Per group and step: the angular update (radians) and the effective learning rate, defined as the angular
    update divided by the norm of the loss gradient on the unit sphere, ||grad_w L|| * ||w|| (which does not
    depend on ||w|| for a scale-invariant group). For SGD that ratio is eta/||w||^2 to first order.
    Returns one row per (target norm, group, step).
    """
    if scaled not in GROUPS:
        raise ValueError(f"scaled must be one of {GROUPS}, got {scaled!r}")
    norms = [float(n) for n in norms]
    if not norms or min(norms) <= 0:
        raise ValueError(f"norms must be a non-empty list of positive numbers, got {norms!r}")
    batches = _batches(chain.inputs.shape[0], batch_size, steps, seed)
    rows = []
    for target in norms:
        p = chain.clone_params()
        with torch.no_grad():
            p[scaled].mul_(target / p[scaled].norm())
        opt = _optimizer(optimizer, list(p.values()), lr)
        for step, batch in enumerate(batches):
            opt.zero_grad()
            chain.loss(p, batch).backward()
            before = {k: v.detach().clone() for k, v in p.items()}
            sphere_grad = {k: float(p[k].grad.norm() * before[k].norm()) for k in GROUPS}
            opt.step()
            for k in GROUPS:
                turn = angle(before[k], p[k].detach())
                rows.append(
                    {
                        "optimizer": optimizer,
                        "scaled": scaled,
                        "target_norm": target,
                        "group": k,
                        "step": step,
                        "norm": float(before[k].norm()),
                        "angular_update": turn,
                        "effective_lr": turn / sphere_grad[k] if sphere_grad[k] > 0 else float("nan"),
                    }
                )
    return pd.DataFrame(rows)


def effective_lr_exponents(scan: pd.DataFrame) -> dict:
    """Exponent of each group's mean effective learning rate against the scaled group's starting norm."""
    mean = scan.groupby(["target_norm", "group"])["effective_lr"].mean().unstack()
    return {group: fit_power_law(mean.index, mean[group]) for group in mean.columns}


def sgd_direction_equivalence(
    chain: ToyChain, scale: float, lr: float, steps: int = 50, batch_size: int = 64, seed: int = 0
) -> float:
    """Largest angle between plain-SGD trajectories from (scale*W1, lr) and (W1, lr/scale^2), W1 alone trained.

    For a scale-invariant w, grad L(c w) = grad L(w)/c, so c*w - lr*grad/c = c*(w - (lr/c^2)*grad): the
    two runs are the same trajectory up to the factor c, step for step.
    """
    if scale <= 0 or lr <= 0:
        raise ValueError(f"scale and lr must be positive, got scale={scale!r}, lr={lr!r}")
    batches = _batches(chain.inputs.shape[0], batch_size, steps, seed)
    runs = []
    for start, rate in ((scale, lr), (1.0, lr / scale**2)):
        p = chain.clone_params()
        with torch.no_grad():
            p["W1"].mul_(start)
        opt = torch.optim.SGD([p["W1"]], lr=rate)
        path = []
        for batch in batches:
            opt.zero_grad()
            chain.loss(p, batch).backward()
            opt.step()
            path.append(p["W1"].detach().clone())
        runs.append(path)
    return max(angle(a, b) for a, b in zip(*runs))


def weight_decay_as_schedule(
    chain: ToyChain, lr: float, weight_decay: float, steps: int = 200, batch_size: int = 64, seed: int = 0
) -> pd.DataFrame:
    """SGD + weight decay on W1 versus SGD without decay under Li & Arora's growing schedule.

    With rho = 1 - lr*wd, v_t = w_t / rho^t obeys v_{t+1} = v_t - lr*rho^-(2t+1) grad L(v_t): plain SGD with
    lr_t = lr * rho^-(2t+1). Returns, per step, the angle between the two runs' W1, both norms and the loss.
    """
    if lr <= 0 or weight_decay <= 0 or lr * weight_decay >= 1:
        raise ValueError(
            f"need lr > 0, weight_decay > 0 and lr*weight_decay < 1, got lr={lr!r}, weight_decay={weight_decay!r}"
        )
    batches = _batches(chain.inputs.shape[0], batch_size, steps, seed)
    rho = 1.0 - lr * weight_decay
    decayed, scheduled = chain.clone_params(), chain.clone_params()
    opt_decayed = torch.optim.SGD([decayed["W1"]], lr=lr, weight_decay=weight_decay)
    opt_scheduled = torch.optim.SGD([scheduled["W1"]], lr=lr)
    rows = []
    for t, batch in enumerate(batches):
        for group in opt_scheduled.param_groups:
            group["lr"] = lr * rho ** (-(2 * t + 1))
        for p, opt in ((decayed, opt_decayed), (scheduled, opt_scheduled)):
            opt.zero_grad()
            chain.loss(p, batch).backward()
            opt.step()
        rows.append(
            {
                "step": t + 1,
                "angle": angle(decayed["W1"].detach(), scheduled["W1"].detach()),
                "norm_with_decay": float(decayed["W1"].detach().norm()),
                "norm_scheduled": float(scheduled["W1"].detach().norm()),
                "scheduled_lr": lr * rho ** (-(2 * t + 1)),
                "loss": float(chain.loss(decayed).detach()),
            }
        )
    return pd.DataFrame(rows)


def equilibrium_run(
    chain: ToyChain,
    optimizer: str,
    lr: float,
    weight_decay: float,
    steps: int,
    batch_size: int = 32,
    momentum: float = 0.9,
    betas=(0.9, 0.999),
    seed: int = 0,
    fresh_labels: bool = True,
) -> pd.DataFrame:
    """Train W1 alone with weight decay; per step record ||W1||, the angular update and ||grad||^2 * ||W1||^2.

    With `fresh_labels` every minibatch gets new uniformly random labels, so the gradient is zero-mean
    noise: exactly the random-walk regime the equilibrium formulas are derived in.
    """
    if steps < 10:
        raise ValueError(f"steps must be >= 10 to reach anything like equilibrium, got {steps!r}")
    batches = _batches(chain.inputs.shape[0], batch_size, steps, seed)
    p = chain.clone_params()
    opt = _optimizer(optimizer, [p["W1"]], lr, weight_decay, momentum, betas)
    label_gen = torch.Generator().manual_seed(seed + 1)
    classes = chain.readout.shape[0]
    rows = []
    for t, batch in enumerate(batches):
        opt.zero_grad()
        if fresh_labels:
            noise = ToyChain(
                chain.inputs[batch],
                torch.randint(0, classes, (len(batch),), generator=label_gen),
                chain.readout,
                chain.params,
            )
            noise.loss(p).backward()
        else:
            chain.loss(p, batch).backward()
        before = p["W1"].detach().clone()
        opt.step()
        rows.append(
            {
                "step": t + 1,
                "norm": float(before.norm()),
                "angular_update": angle(before, p["W1"].detach()),
                "sphere_grad_sq": float((p["W1"].grad.norm() * before.norm()) ** 2),
            }
        )
    return pd.DataFrame(rows)


def random_walk_equilibrium_run(
    optimizer: str,
    elements: int,
    lr: float,
    weight_decay: float,
    steps: int,
    momentum: float = 0.9,
    betas=(0.9, 0.999),
    seed: int = 0,
) -> pd.DataFrame:
    """The equilibrium formulas' own setting: a scale-invariant w whose gradient is pure isotropic noise.

    Each step's gradient is fresh Gaussian noise projected orthogonal to w and divided by ||w|| (the two
    properties scale invariance forces on any gradient). Same columns as `equilibrium_run`.
    """
    if steps < 10 or elements < 2:
        raise ValueError(f"need steps >= 10 and elements >= 2, got steps={steps!r}, elements={elements!r}")
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(elements, generator=gen, dtype=torch.float64).requires_grad_(True)
    opt = _optimizer(optimizer, [w], lr, weight_decay, momentum, betas)
    rows = []
    for t in range(steps):
        before = w.detach().clone()
        direction = before / before.norm()
        noise = torch.randn(elements, generator=gen, dtype=torch.float64)
        w.grad = (noise - (noise @ direction) * direction) / before.norm()
        opt.step()
        rows.append(
            {
                "step": t + 1,
                "norm": float(before.norm()),
                "angular_update": angle(before, w.detach()),
                "sphere_grad_sq": float((w.grad.norm() * before.norm()) ** 2),
            }
        )
    return pd.DataFrame(rows)


def equilibrium_prediction(
    optimizer: str,
    lr: float,
    weight_decay: float,
    *,
    elements: int | None = None,
    sphere_grad_sq: float | None = None,
    momentum: float = 0.9,
    beta1: float = 0.9,
) -> dict:
    """Predicted equilibrium norm and angular update per step (Wan et al. 2021; Kosson et al. 2024, Table 1).

    `sphere_grad_sq` is E||grad L(w)||^2 * ||w||^2 (scale-free); `elements` the number of entries of w.
    """
    eta, lam = lr, weight_decay
    if optimizer in ("sgd", "sgdm"):
        alpha = momentum if optimizer == "sgdm" else 0.0
        if sphere_grad_sq is None:
            raise ValueError("SGD predictions need sphere_grad_sq (E||g||^2 ||w||^2)")
        return {
            "norm": (eta * sphere_grad_sq / (2 * lam * (1 - alpha))) ** 0.25,
            "angular_update": math.sqrt(2 * eta * lam / (1 + alpha)),
        }
    if optimizer == "adamw":
        if elements is None:
            raise ValueError("AdamW predictions need elements (the number of entries of w)")
        return {
            "norm": math.sqrt(eta * elements / (2 * lam)),
            "angular_update": math.sqrt(2 * eta * lam * (1 - beta1) / (1 + beta1)),
        }
    raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")


def equilibrium_check(
    run: pd.DataFrame, optimizer: str, lr: float, weight_decay: float, elements: int, window: float = 0.25, **kwargs
) -> dict:
    """Measured equilibrium (mean over the last `window` of the run) against the prediction, as ratios."""
    tail = run.iloc[int(len(run) * (1 - window)) :]
    predicted = equilibrium_prediction(
        optimizer, lr, weight_decay, elements=elements, sphere_grad_sq=float(tail["sphere_grad_sq"].mean()), **kwargs
    )
    measured_norm = float(tail["norm"].mean())
    measured_turn = float(tail["angular_update"].mean())
    return {
        "optimizer": optimizer,
        "lr": lr,
        "weight_decay": weight_decay,
        "norm": measured_norm,
        "predicted_norm": predicted["norm"],
        "norm_ratio": measured_norm / predicted["norm"],
        "angular_update": measured_turn,
        "predicted_angular_update": predicted["angular_update"],
        "angular_ratio": measured_turn / predicted["angular_update"],
    }


# ---- the small GPT ----------------------------------------------------------------------------
