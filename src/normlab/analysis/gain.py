"""The gain chapter's measurements: scale invariance, effective learning rate, weight decay.

Two kinds of experiment live here.

*Toy, exact:* a float64 chain  x -> W1 -> RMS-normalise -> (* g) -> W2 -> RMS-normalise -> V -> logits,
with no epsilon, so that the loss is exactly unchanged when W1, g or W2 is rescaled. Every one of
those three groups is scale invariant; the chain lets us measure, with a real torch optimizer, how
a group's effective learning rate depends on its own norm and on the gain's norm, and how weight
decay on a scale-invariant group behaves.

*Small GPT:* multiply the trained gains at one norm location by a factor and measure the loss; read
gain norms; train with weight decay on the gains only (the GPT helpers take any model exposing
`norms()`, so they are tested on a tiny stand-in).

Literature the notebook holds these against (formulas re-derived in the docstrings below):

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

import contextlib
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

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


def angle(a: torch.Tensor, b: torch.Tensor) -> float:
    """Angle in radians between two tensors seen as flat vectors (stable for tiny angles)."""
    a, b = a.flatten().double(), b.flatten().double()
    ua, ub = a / a.norm(), b / b.norm()
    return float(2 * torch.atan2((ua - ub).norm(), (ua + ub).norm()))


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


def fit_power_law(x, y) -> float:
    """Exponent k of y ~ x^k by least squares in log-log space."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = (x > 0) & (y > 0) & np.isfinite(x) & np.isfinite(y)
    if keep.sum() < 2:
        return float("nan")
    return float(np.polyfit(np.log(x[keep]), np.log(y[keep]), 1)[0])


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


def norm_locations(model) -> dict[str, list]:
    """Group a model's norm modules by what they feed.

    pre-LN: norm1 -> 'attention input', norm2 -> 'MLP input', plus 'final'. post-LN: the norms sit on the
    trunk, so norm1 -> 'trunk after attention' (it feeds the MLP) and norm2 -> 'trunk after MLP' (it feeds
    the next block, and the head after the last block). Other norms keep their own names.
    """
    post = getattr(getattr(model, "cfg", None), "placement", "pre") == "post"
    labels = {
        "norm1": "trunk after attention" if post else "attention input",
        "norm2": "trunk after MLP" if post else "MLP input",
    }
    locations: dict[str, list] = {}
    for name, module in model.norms():
        leaf = name.rsplit(".", 1)[-1]
        key = labels.get(leaf, "final" if "final" in name else name)
        locations.setdefault(key, []).append(module)
    return locations


@contextlib.contextmanager
def scaled_gains(modules, factor: float):
    """Temporarily multiply the gain (`weight`) of each module by `factor`; LayerNorm's bias is left alone."""
    saved = [m.weight.detach().clone() for m in modules]
    try:
        with torch.no_grad():
            for m in modules:
                m.weight.mul_(factor)
        yield
    finally:
        with torch.no_grad():
            for m, w in zip(modules, saved):
                m.weight.copy_(w)


@torch.no_grad()
def gain_sensitivity(model, batches, factors, locations: dict | None = None) -> pd.DataFrame:
    """Loss on fixed batches with the gains at one location multiplied by each factor, all other gains untouched.

    `batches` is a list of (inputs, targets). Returns rows of location, factor, loss and the change from the
    unscaled loss (nats/token).
    """
    factors = [float(a) for a in factors]
    if not factors or min(factors) <= 0:
        raise ValueError(f"factors must be a non-empty list of positive numbers, got {factors!r}")
    locations = norm_locations(model) if locations is None else locations
    was_training = model.training
    model.eval()

    def mean_loss() -> float:
        return float(np.mean([float(model(x, targets=y)[1]) for x, y in batches]))

    base = mean_loss()
    rows = []
    for where, modules in locations.items():
        for a in factors:
            with scaled_gains(modules, a):
                loss = mean_loss()
            rows.append({"location": where, "factor": a, "loss": loss, "delta_loss": loss - base})
    model.train(was_training)
    return pd.DataFrame(rows)


def gain_rms(model) -> dict[str, float]:
    """RMS of each norm's gain (||g|| / sqrt(d)), keyed by the norm's name."""
    return {name: float(m.weight.detach().pow(2).mean().sqrt()) for name, m in model.norms() if m.weight is not None}


# ---- the symmetry that pre-LN does have (Kunin et al. 2021) ------------------------------------------


def following_linears(model) -> dict[str, list]:
    """For a pre-LN GPT: each norm's name -> the linear layers that read its output directly.

    norm1 feeds the attention's qkv projection, norm2 the MLP's input projections, the final norm the head.
    These are the pairs (gain, next linear) for which scaling the gain by a and the linear's input columns by
    1/a leaves the function unchanged (Kunin et al. 2021, "Neural Mechanics", ICLR: a rescale symmetry).
    """
    if getattr(getattr(model, "cfg", None), "placement", "pre") != "pre":
        raise ValueError("following_linears needs a pre-LN model: in post-LN the norm's output also feeds the trunk")
    if getattr(model.cfg, "tie_embeddings", False):
        raise ValueError(
            "with tied embeddings the head is also the embedding table, so the final norm has no free next layer"
        )
    pairs = {}
    for name, _ in model.norms():
        if name == "final_norm":
            pairs[name] = [model.lm_head]
            continue
        block = model.blocks[int(name.split(".")[1])]
        if name.endswith("norm1"):
            pairs[name] = [block.attn.qkv]
        else:
            pairs[name] = [block.mlp.gate, block.mlp.up] if block.mlp.kind == "swiglu" else [block.mlp.up]
    return pairs


@torch.no_grad()
def apply_rescale(model, factor: float, names=None) -> None:
    """In place: gain (and LayerNorm's bias) of each named norm times `factor`, its next linears' weights / `factor`."""
    pairs = following_linears(model)
    modules = dict(model.norms())
    for name in pairs if names is None else names:
        norm = modules[name]
        norm.weight.mul_(factor)
        if getattr(norm, "bias", None) is not None:
            norm.bias.mul_(factor)
        for linear in pairs[name]:
            linear.weight.div_(factor)


@torch.no_grad()
def rescale_symmetry(model, batches, factors) -> pd.DataFrame:
    """Loss with every (gain, next linear) pair rescaled by (a, 1/a), against the untouched model, and with the
    gains alone scaled by a (which pre-LN is *not* invariant to). One row per factor."""
    import copy

    was_training = model.training
    model.eval()

    def mean_loss(m) -> float:
        return float(np.mean([float(m(x, targets=y)[1]) for x, y in batches]))

    base = mean_loss(model)
    rows = []
    for a in [float(f) for f in factors]:
        paired, alone = copy.deepcopy(model), copy.deepcopy(model)
        apply_rescale(paired, a)
        for _, norm in alone.norms():
            norm.weight.mul_(a)
        rows.append(
            {
                "factor": a,
                "delta_loss_rescaled_pair": mean_loss(paired) - base,
                "delta_loss_gain_alone": mean_loss(alone) - base,
                "loss": base,
            }
        )
    model.train(was_training)
    return pd.DataFrame(rows)


def effective_update(model, batch, factors, *, optimizer: str = "adam", lr: float = 1e-3) -> pd.DataFrame:
    """How one optimizer step changes the function-level weight E = W·diag(g) of each next linear, after the
    (g·a, W/a) rescale that leaves the function itself unchanged.

    One step from the same batch for each factor a (fresh optimizer, no weight decay). The change of E splits into
    the part that comes through W's update (ΔW·diag(g)) and through g's (W·diag(Δg)); each is reported relative to
    ‖E‖ and summed over the model's (gain, linear) pairs. Gradients scale as a (for W) and 1/a (for g), so under SGD
    the two parts go as a² and a⁻²; Adam's step ignores gradient scale, so they go as a and a⁻¹.
    """
    import copy

    if optimizer not in ("sgd", "adam"):
        raise ValueError(f"optimizer must be 'sgd' or 'adam', got {optimizer!r}")
    x, y = batch
    rows = []
    for a in [float(f) for f in factors]:
        m = copy.deepcopy(model)
        apply_rescale(m, a)
        m.train()
        params = [p for p in m.parameters()]
        opt = torch.optim.SGD(params, lr=lr) if optimizer == "sgd" else torch.optim.Adam(params, lr=lr)
        pairs = following_linears(m)
        norms = dict(m.norms())
        before = {
            name: (norms[name].weight.detach().clone(), [l.weight.detach().clone() for l in pairs[name]])
            for name in pairs
        }
        opt.zero_grad()
        m(x, targets=y)[1].backward()
        opt.step()
        via_w = via_g = total = 0.0
        for name, (g0, weights0) in before.items():
            g1 = norms[name].weight.detach()
            for linear, w0 in zip(pairs[name], weights0):
                w1 = linear.weight.detach()
                e0 = (w0 * g0).double()
                via_w += float(((w1 - w0) * g0).double().norm() / e0.norm())
                via_g += float((w0 * (g1 - g0)).double().norm() / e0.norm())
                total += float(((w1 * g1).double() - e0).norm() / e0.norm())
        rows.append({"optimizer": optimizer, "factor": a, "via_W": via_w, "via_g": via_g, "total": total})
    return pd.DataFrame(rows)
