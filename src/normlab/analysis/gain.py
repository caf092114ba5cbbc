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

from normlab.analysis.shared.paired import paired_difference
from normlab.analysis.shared.parity import interval_text
from normlab.analysis.shared.runs import flat_eval_every, train_job
from normlab.gpt.model import GPT, GPTConfig
from normlab.runtime.parallel import run_parallel
from normlab.study import decide
from normlab.study.findings import Finding

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
        "q_norm": "queries and keys (QK-norm)",
        "k_norm": "queries and keys (QK-norm)",
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
        leaf = name.rsplit(".", 1)[-1]
        if name == "final_norm":
            pairs[name] = [model.lm_head]
        elif leaf == "norm1":
            pairs[name] = [model.blocks[int(name.split(".")[1])].attn.qkv]
        elif leaf == "norm2":
            mlp = model.blocks[int(name.split(".")[1])].mlp
            pairs[name] = [mlp.gate, mlp.up] if mlp.kind == "swiglu" else [mlp.up]
        # QK-norm's q_norm and k_norm feed the attention logits, not a linear layer: they have no partner.
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


# ---- where the invariance is exact: W_q and W_k under QK-norm -------------------------------------------
#
# With QK-norm each head's query and key are RMS-normalised right after the projection, so every row block of
# W_q (and of W_k) that makes one head is exactly scale invariant: q(a·W_q) = q(W_q) up to the norm's epsilon.
# van Laarhoven 2017's law then applies as derived: the gradient scales as 1/a and is orthogonal to W_q, so a plain
# SGD step turns W_q by atan(η·S/‖W_q‖²), S = ‖∇W_q‖·‖W_q‖ being the gradient on the unit sphere.

QK_EXACT_EPS = 1e-30  # so small beside E[q²] (~1e-2 at init) that float64 sees no epsilon at all
QK_PROJECTIONS = ("W_q", "W_k")


def qk_norm_model(model_kw: dict, *, seed: int = 0, eps: float = QK_EXACT_EPS) -> GPT:
    """A freshly initialised pre-LN GPT with QK-norm, in float64; `eps` is every norm's epsilon.

    The same `seed` gives the same weights whatever `eps` is, so the exact model and the default-ε one are a pair.
    """
    torch.manual_seed(seed)
    return GPT(GPTConfig(**model_kw, qk_norm=True, norm_eps=eps)).double()


def projection_rows(model, projection: str) -> list[torch.Tensor]:
    """Views of each block's W_q or W_k: the first or second width-row block of the fused qkv weight."""
    if projection not in QK_PROJECTIONS:
        raise ValueError(f"projection must be one of {QK_PROJECTIONS}, got {projection!r}")
    if not getattr(getattr(model, "cfg", None), "qk_norm", False):
        raise ValueError(
            "W_q and W_k are scale invariant only under QK-norm; build the model with GPTConfig(qk_norm=True)"
        )
    width, offset = model.cfg.width, QK_PROJECTIONS.index(projection)
    return [block.attn.qkv.weight[offset * width : (offset + 1) * width] for block in model.blocks]


def flat_projection(model, projection: str = "W_q", grad: bool = False) -> torch.Tensor:
    """Every block's W_q (or W_k), or its gradient, as one detached flat vector."""
    rows = projection_rows(model, projection)
    if grad:
        width, offset = model.cfg.width, QK_PROJECTIONS.index(projection)
        rows = [block.attn.qkv.weight.grad[offset * width : (offset + 1) * width] for block in model.blocks]
    return torch.cat([r.detach().flatten() for r in rows])


@torch.no_grad()
def scale_projections(model, factor: float, projections=QK_PROJECTIONS) -> None:
    """In place: multiply W_q and/or W_k of every block by `factor`."""
    for projection in projections:
        for rows in projection_rows(model, projection):
            rows.mul_(factor)


def _loss64(model, batch) -> torch.Tensor:
    # GPT.forward takes its loss in float32; the exactness checks need the float64 logits' own loss.
    x, y = batch
    logits = model(x)[0]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def _positive_factors(factors) -> list[float]:
    factors = [float(a) for a in factors]
    if not factors or min(factors) <= 0:
        raise ValueError(f"factors must be a non-empty list of positive numbers, got {factors!r}")
    return factors


@torch.no_grad()
def qk_forward_invariance(model, batch, factors) -> pd.DataFrame:
    """Largest |Δ logit| after scaling W_q, W_k or both by each factor, against the unscaled model."""
    import copy

    model.eval()
    base = model(batch[0])[0]
    rows = []
    for a in _positive_factors(factors):
        for scaled in (("W_q",), ("W_k",), QK_PROJECTIONS):
            scaled_model = copy.deepcopy(model)
            scale_projections(scaled_model, a, scaled)
            change = float((scaled_model(batch[0])[0] - base).abs().max())
            rows.append({"factor": a, "scaled": " and ".join(scaled), "max_abs_delta_logit": change})
    return pd.DataFrame(rows)


def qk_gradient_law(model, batch, factors) -> pd.DataFrame:
    """‖∇W_q‖ and ‖∇W_k‖ with both scaled by each factor a; ‖∇‖·a should not depend on a.

    Also the cosine between ∇W_q and W_q, which scale invariance forces to 0 (Euler: ⟨∇L(w), w⟩ = 0).
    """
    import copy

    rows = []
    for a in _positive_factors(factors):
        scaled = copy.deepcopy(model)
        scale_projections(scaled, a)
        scaled.zero_grad()
        _loss64(scaled, batch).backward()
        grad_q, grad_k = flat_projection(scaled, "W_q", grad=True), flat_projection(scaled, "W_k", grad=True)
        w_q = flat_projection(scaled, "W_q")
        rows.append(
            {
                "factor": a,
                "grad_norm_q": float(grad_q.norm()),
                "grad_norm_k": float(grad_k.norm()),
                "grad_norm_q_times_a": float(grad_q.norm()) * a,
                "cosine_grad_q_with_q": float(grad_q @ w_q / (grad_q.norm() * w_q.norm())),
            }
        )
    return pd.DataFrame(rows)


@torch.no_grad()
def _sgd_step(model, lr: float, projection_lr: float) -> None:
    """Plain SGD, with W_q and W_k (rows of the fused qkv weight) at their own learning rate."""
    width = model.cfg.width
    for p in model.parameters():
        if p.grad is not None:
            p.sub_(lr * p.grad)
    if projection_lr != lr:
        for block in model.blocks:
            weight = block.attn.qkv.weight
            weight[: 2 * width].sub_((projection_lr - lr) * weight.grad[: 2 * width])


def qk_sgd_run(model, batches, lr: float, *, factor: float = 1.0, projection_lr: float | None = None):
    """Plain SGD on every parameter from `model` with W_q and W_k scaled by `factor`, one step per batch.

    Per step: ‖W_q‖ before the step, W_q's angular update (rad), the sphere gradient S = ‖∇W_q‖·‖W_q‖, the
    effective learning rate (angular update / S, which theory puts at η/‖W_q‖² for W_q's own rate η) and the loss.
    """
    import copy

    if lr <= 0 or (projection_lr is not None and projection_lr <= 0):
        raise ValueError(f"learning rates must be positive, got lr={lr!r}, projection_lr={projection_lr!r}")
    rate = lr if projection_lr is None else projection_lr
    run = copy.deepcopy(model)
    scale_projections(run, factor)
    run.train()
    rows = []
    for step, batch in enumerate(batches):
        run.zero_grad()
        loss = _loss64(run, batch)
        loss.backward()
        before = flat_projection(run, "W_q")
        sphere_grad = float(flat_projection(run, "W_q", grad=True).norm() * before.norm())
        _sgd_step(run, lr, rate)
        turn = angle(before, flat_projection(run, "W_q"))
        rows.append(
            {
                "factor": factor,
                "step": step,
                "norm_q": float(before.norm()),
                "angular_update": turn,
                "sphere_grad": sphere_grad,
                "effective_lr": turn / sphere_grad if sphere_grad > 0 else math.nan,
                "predicted_effective_lr": rate / float(before.norm()) ** 2,
                "loss": float(loss.detach()),
            }
        )
    return pd.DataFrame(rows)


def qk_sgd_study(model, batches, factors, lr: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """For each a: SGD from (W_q·a, W_k·a, η) and, paired on the same batches, from (W_q, W_k, η/a² on them).

    For a scale-invariant w, a·w − η·∇L(w)/a = a·(w − (η/a²)·∇L(w)): the two runs are one trajectory, so their
    losses agree step for step. Returns the scaled runs' steps (with the paired run's loss as `paired_loss`) and,
    per factor, the largest loss gap.
    """
    runs, gaps = [], []
    for a in _positive_factors(factors):
        scaled = qk_sgd_run(model, batches, lr, factor=a)
        paired = qk_sgd_run(model, batches, lr, projection_lr=lr / a**2)
        runs.append(scaled.assign(paired_loss=paired["loss"].to_numpy()))
        gap = (scaled["loss"] - paired["loss"]).abs()
        gaps.append(
            {
                "factor": a,
                "max_abs_delta_loss": float(gap.max()),
                "loss_start": float(scaled["loss"].iloc[0]),
                "loss_end": float(scaled["loss"].iloc[-1]),
                "paired_loss_end": float(paired["loss"].iloc[-1]),
            }
        )
    return pd.concat(runs, ignore_index=True), pd.DataFrame(gaps)


@torch.no_grad()
def gain_pair_contrast(model, batch, factors) -> pd.DataFrame:
    """Per norm location and factor: largest |Δ logit| with the gains alone × a, and with (g·a, next linear/a).

    In a pre-LN model only the pair is a symmetry. `model` must be pre-LN (see `following_linears`).
    """
    import copy

    model.eval()
    base = model(batch[0])[0]
    pairs = following_linears(model)
    modules = dict(model.norms())
    locations: dict[str, list[str]] = {}
    for name in pairs:
        leaf = name.rsplit(".", 1)[-1]
        locations.setdefault({"norm1": "attention input", "norm2": "MLP input"}.get(leaf, "final"), []).append(name)
    rows = []
    for where, names in locations.items():
        for a in _positive_factors(factors):
            with scaled_gains([modules[n] for n in names], a):
                alone = float((model(batch[0])[0] - base).abs().max())
            rescaled = copy.deepcopy(model)
            apply_rescale(rescaled, a, names)
            pair = float((rescaled(batch[0])[0] - base).abs().max())
            rows.append({"location": where, "factor": a, "gain_alone": alone, "gain_and_next_linear": pair})
    return pd.DataFrame(rows)


# ---- the chapter, section by section ----------------------------------------------------------------
#
# The functions below are the gain chapter's steps, in the order the chapter runs them. Each takes the
# thresholds the chapter states in its prose as arguments, and the B15 verdict is built from their results.

PROFILES = {
    "smoke": dict(
        scan_norms=[0.5, 1, 2, 4],
        scan_steps=2,
        schedule_steps=20,
        equilibrium_steps=150,
        width=32,
        depth=1,
        context=16,
        batch=4,
        trained_steps=10,
        sweep_steps=20,
        lr=3e-3,
        gain_decays=[0.0, 30.0],
        seeds=2,
        factors=[0.25, 0.5, 1, 2, 4],
        qk=dict(width=32, depth=1, context=16, batch=4, steps=3, lr=0.01),
    ),
    "cpu": dict(
        scan_norms=[0.5, 1, 2, 4, 8],
        scan_steps=4,
        schedule_steps=200,
        equilibrium_steps=1500,
        width=48,
        depth=2,
        context=32,
        batch=8,
        trained_steps=200,
        sweep_steps=300,
        lr=3e-3,
        gain_decays=[0.0, 1.0, 10.0, 30.0],
        seeds=5,
        factors=[0.25, 0.5, 0.71, 1, 1.41, 2, 4],
        qk=dict(width=48, depth=2, context=32, batch=8, steps=20, lr=0.01),
    ),
    "gpu": dict(
        scan_norms=[0.25, 0.5, 1, 2, 4, 8],
        scan_steps=8,
        schedule_steps=500,
        equilibrium_steps=4000,
        width=256,
        depth=6,
        context=128,
        batch=32,
        trained_steps=1500,
        sweep_steps=1000,
        lr=1e-3,
        gain_decays=[0.0, 1.0, 10.0, 30.0],
        seeds=8,
        factors=[0.25, 0.5, 0.71, 1, 1.41, 2, 4],
        # The law is exact at any size, and float64 runs on the CPU: the GPU profile keeps this study small.
        qk=dict(width=64, depth=2, context=64, batch=8, steps=40, lr=0.01),
    ),
}


def profile_settings(profile: str) -> dict:
    """The chapter's sizes for one profile, checked: the paired sweep needs 5 pairs and an undecayed baseline."""
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {list(PROFILES)}, got {profile!r}")
    settings = PROFILES[profile]
    if settings["seeds"] < 5 and profile != "smoke":
        raise ValueError("the paired decay sweep needs at least 5 pairs outside the smoke profile")
    decays = settings["gain_decays"]
    if not decays or min(decays) < 0 or 0.0 not in decays:
        raise ValueError(f"gain_decays must be non-negative and include 0.0 (the baseline), got {decays!r}")
    return settings


def model_settings(settings: dict) -> dict:
    """The small GPT's shape (pre-LN unless a placement is added)."""
    return dict(context=settings["context"], width=settings["width"], depth=settings["depth"], heads=4)


def training_jobs(settings: dict) -> tuple[list[dict], list[tuple[float, int]]]:
    """The chapter's trainings: a pre-LN and a post-LN model kept for the forward scan, then the decay sweep.

    The sweep's runs are keyed (gain weight decay, seed); runs of one seed differ only in the gains' decay.
    """
    sweep_steps = settings["sweep_steps"]
    model_kw = model_settings(settings)
    train_kw = dict(
        steps=settings["trained_steps"],
        batch_size=settings["batch"],
        lr=settings["lr"],
        warmup_steps=settings["trained_steps"] // 10,
        eval_every=0,
        eval_batches=2,
        stream_every=0,
        seed=0,
    )
    decay_kw = dict(
        steps=sweep_steps,
        batch_size=settings["batch"],
        lr=settings["lr"],
        warmup_steps=sweep_steps // 10,
        eval_every=flat_eval_every(sweep_steps),
        eval_batches=4,
        stream_every=0,
    )
    jobs = [dict(model={**model_kw, "placement": p}, train=train_kw, keep_weights=True) for p in ("pre", "post")]
    decay_keys = [(wd, seed) for seed in range(settings["seeds"]) for wd in settings["gain_decays"]]
    jobs += [
        dict(
            model=model_kw, train={**decay_kw, "seed": seed, "gain_weight_decay": wd}, history_columns=("gain_norm/*",)
        )
        for wd, seed in decay_keys
    ]
    return jobs, decay_keys


def train_models(settings: dict, devices=None) -> tuple[dict, dict]:
    """Run every training in parallel workers: the trained pre-LN and post-LN GPTs, and the sweep's outputs."""
    jobs, decay_keys = training_jobs(settings)
    outputs = run_parallel(train_job, jobs, devices=devices, desc="gain runs")
    model_kw = model_settings(settings)
    gpt = {}
    for placement, out in zip(("pre", "post"), outputs[:2]):
        gpt[placement] = GPT(GPTConfig(**model_kw, placement=placement))
        gpt[placement].load_state_dict(out["state_dict"])
    return gpt, dict(zip(decay_keys, outputs[2:]))


def validation_batches(corpus, settings: dict, count: int = 4, seed: int = 777) -> list:
    """Fixed validation batches, the same for every scaled model."""
    generator = torch.Generator().manual_seed(seed)
    return [corpus.batch("val", settings["batch"], settings["context"], generator) for _ in range(count)]


@dataclass
class ForwardCheck:
    sensitivity: pd.DataFrame  # loss change per model, location and gain multiplier
    by_location: pd.Series  # largest relative loss change at the near multipliers, per (model, location)
    holds: bool  # every location below the threshold
    threshold: float
    symmetry: pd.DataFrame  # the pre-LN model under the (gain·a, next linear/a) rescale
    symmetry_max: float  # its largest |Δ loss|


def forward_check(gpt: dict, batches, factors, *, threshold: float, near=(0.5, 2.0)) -> ForwardCheck:
    """Part (1) of B15: does scaling one location's gains by a factor in `near` move the loss by < `threshold`?

    The loss change is relative to the model's unscaled loss; the rescale symmetry of the pre-LN model is
    measured alongside (it should move the loss only by float32 rounding).
    """
    sensitivity = pd.concat(
        [gain_sensitivity(gpt[p], batches, factors).assign(model=f"{p}-LN RMSNorm") for p in gpt], ignore_index=True
    )
    base_losses = {
        m: float(sensitivity[(sensitivity["model"] == m) & (sensitivity["factor"] == 1)]["loss"].mean())
        for m in sensitivity["model"].unique()
    }
    close = sensitivity[sensitivity["factor"].isin(list(near))].copy()
    close["relative"] = close["delta_loss"].abs() / close["model"].map(base_losses)
    by_location = close.groupby(["model", "location"])["relative"].max()
    holds = bool((by_location < threshold).all())
    symmetry = rescale_symmetry(gpt["pre"], batches, factors)
    symmetry_max = float(symmetry["delta_loss_rescaled_pair"].abs().max())
    return ForwardCheck(sensitivity, by_location, holds, threshold, symmetry, symmetry_max)


def forward_text(check: ForwardCheck) -> str:
    """The forward section's conclusion, with the worst location and the symmetry's largest change."""
    worst = check.by_location.idxmax()
    return (
        f"Scaling one location's gains by 0.5 or 2 changes the loss by up to {check.by_location.max():.1%} (at "
        f"{worst[1]}, {worst[0]}); the forward pass is {'barely' if check.holds else 'clearly'} affected. With the "
        f"next linear layer scaled by 1/a as well, the loss changes by at most {check.symmetry_max:.1e} nats (float32 "
        f"rounding): that is the symmetry pre-LN has."
    )


def symmetry_frame(symmetry: pd.DataFrame) -> pd.DataFrame:
    """The symmetry table as the chapter shows it: the gain alone against the rescaled (gain, next linear) pair."""
    return symmetry[["factor", "delta_loss_gain_alone", "delta_loss_rescaled_pair"]].rename(
        columns={
            "factor": "a",
            "delta_loss_gain_alone": "Δ loss, every gain × a",
            "delta_loss_rescaled_pair": "Δ loss, gain × a and next linear × 1/a",
        }
    )


def update_batch(corpus, settings: dict, seed: int = 5):
    """The one training batch every optimizer step of the effective-update study uses."""
    return corpus.batch("train", settings["batch"], settings["context"], torch.Generator().manual_seed(seed))


def effective_update_study(
    model_kw: dict, batch, factors, *, seeds: int = 3, optimizers=(("sgd", 0.1), ("adam", 1e-3))
) -> pd.DataFrame:
    """One optimizer step's change of E = W·diag(g) under each rescale a, on freshly initialised pre-LN GPTs.

    Model `seed` is initialised from torch's global generator seeded with `seed`; each optimizer steps it
    from the same batch.
    """
    rows = []
    for seed in range(seeds):
        torch.manual_seed(seed)
        fresh = GPT(GPTConfig(**model_kw))
        for optimizer, lr in optimizers:
            rows.append(effective_update(fresh, batch, factors, optimizer=optimizer, lr=lr).assign(seed=seed))
    return pd.concat(rows, ignore_index=True)


UPDATE_VIA_W, UPDATE_VIA_G = "exponent via W (a ≥ 1)", "exponent via g"


def update_exponents(updates: pd.DataFrame) -> pd.DataFrame:
    """Per optimizer and seed: the power of a that the W-part (fitted for a ≥ 1) and the g-part follow."""
    return pd.DataFrame(
        [
            {
                "optimizer": opt,
                "seed": seed,
                UPDATE_VIA_W: fit_power_law(part[part.factor >= 1].factor, part[part.factor >= 1].via_W),
                UPDATE_VIA_G: fit_power_law(part.factor, part.via_g),
            }
            for (opt, seed), part in updates.groupby(["optimizer", "seed"])
        ]
    )


@dataclass
class UpdateScaling:
    adam_exponent: float  # mean over seeds of Adam's W-part exponent
    adam_exponent_sd: float
    sgd_exponent: float  # mean over seeds of SGD's W-part exponent
    linear_under_adam: bool


def update_scaling(exponents: pd.DataFrame, *, tolerance: float) -> UpdateScaling:
    """Part (2) of B15: Adam's W-part exponent within `tolerance` of 1 means "linearly scales" holds."""
    adam_w = exponents[exponents.optimizer == "adam"][UPDATE_VIA_W]
    sgd_w = float(exponents[exponents.optimizer == "sgd"][UPDATE_VIA_W].mean())
    adam_exponent, adam_exponent_sd = float(adam_w.mean()), float(adam_w.std())
    return UpdateScaling(adam_exponent, adam_exponent_sd, sgd_w, abs(adam_exponent - 1) <= tolerance)


def exponent_summary(exponents: pd.DataFrame) -> pd.DataFrame:
    """Mean and sd over seeds of both fitted exponents, one row per optimizer."""
    return (
        exponents.groupby("optimizer")[[UPDATE_VIA_W, UPDATE_VIA_G]]
        .agg(["mean", "std"])
        .pipe(lambda d: d.set_axis([f"{a}, {b}" for a, b in d.columns], axis=1))
        .reset_index()
    )


@dataclass
class ToyChecks:
    invariance: float  # largest |Δ loss| when a group is rescaled (exact invariance: float64 rounding)
    exponents: dict  # effective-LR exponent per (optimizer, scaled group): sgd_g, sgd_w, adam_g, adam_w
    theory_holds: bool  # each exponent within the tolerance of -2 (SGD) or -1 (Adam)
    equivalence_angle: float  # SGD from (3·W1, η) against (W1, η/9): largest angle
    schedule: pd.DataFrame  # Li & Arora: decayed against scheduled run
    schedule_angle: float
    equilibrium: pd.DataFrame  # measured / predicted equilibrium, per optimizer and setting
    trajectories: list  # the equilibrium runs, step by step
    holds: bool  # part (3): Li & Arora to the angle tolerance and the formulas within the tolerance


def _within(ratio: float, tolerance: float) -> bool:
    return abs(ratio - 1) <= tolerance


def toy_checks(
    settings: dict, *, exponent_tolerance: float, formula_tolerance: float, angle_tolerance: float = 1e-9
) -> ToyChecks:
    """Part (3) of B15 on the exact float64 toy chain: effective-LR exponents, Li & Arora, the equilibria.

    Decay acts as a learning-rate schedule when Li & Arora's runs agree within `angle_tolerance` rad and the
    SGD/SGDM equilibria (both settings) and AdamW's random-walk equilibrium are within `formula_tolerance`.
    """
    chain = make_toy_chain(seed=0)
    invariance = check_scale_invariance(chain, factors=(0.25, 4.0))
    scans = []
    for optimizer, lr in (("sgd", 0.002), ("adamw", 0.001)):
        for scaled in ("W1", "g"):
            scans.append(
                effective_lr_scan(
                    chain, scaled, settings["scan_norms"], optimizer=optimizer, lr=lr, steps=settings["scan_steps"]
                )
            )
    scan = pd.concat(scans, ignore_index=True)
    fitted = {(opt, sc): effective_lr_exponents(part) for (opt, sc), part in scan.groupby(["optimizer", "scaled"])}
    exponents = {
        "sgd_g": fitted[("sgd", "g")]["g"],
        "adam_g": fitted[("adamw", "g")]["g"],
        "sgd_w": fitted[("sgd", "W1")]["W1"],
        "adam_w": fitted[("adamw", "W1")]["W1"],
    }
    expected = {"sgd_g": -2, "sgd_w": -2, "adam_g": -1, "adam_w": -1}
    theory_holds = all(abs(exponents[k] - t) <= exponent_tolerance for k, t in expected.items())
    equivalence_angle = sgd_direction_equivalence(chain, scale=3.0, lr=0.05, steps=settings["schedule_steps"] // 4 + 5)
    schedule = weight_decay_as_schedule(chain, lr=0.1, weight_decay=0.05, steps=settings["schedule_steps"])
    schedule_angle = float(schedule["angle"].max())
    noise_chain = make_toy_chain(seed=1, random_labels=True)
    elements = noise_chain.params["W1"].numel()
    steps, betas = settings["equilibrium_steps"], (0.9, 0.99)
    checks, trajectories = [], []
    for optimizer, lr, wd in [("sgd", 0.1, 0.1), ("sgdm", 0.05, 0.1), ("adamw", 0.01, 0.5)]:
        run = equilibrium_run(noise_chain, optimizer, lr, wd, steps, betas=betas)
        checks.append({**equilibrium_check(run, optimizer, lr, wd, elements), "setting": "toy chain"})
        trajectories.append(run.assign(optimizer=optimizer, setting="toy chain"))
        walk = random_walk_equilibrium_run(optimizer, elements, lr, wd, steps, betas=betas)
        checks.append({**equilibrium_check(walk, optimizer, lr, wd, elements), "setting": "random walk"})
        trajectories.append(walk.assign(optimizer=optimizer, setting="random walk"))
    equilibrium = pd.DataFrame(checks)
    sgd = equilibrium[equilibrium["optimizer"].isin(["sgd", "sgdm"])]

    def within(ratio):
        return _within(ratio, formula_tolerance)

    sgd_ok = bool(sgd["norm_ratio"].map(within).all() and sgd["angular_ratio"].map(within).all())
    walk = equilibrium_row(equilibrium, "adamw", "random walk")
    holds = schedule_angle < angle_tolerance and sgd_ok and within(walk["norm_ratio"]) and within(walk["angular_ratio"])
    return ToyChecks(
        invariance,
        exponents,
        theory_holds,
        equivalence_angle,
        schedule,
        schedule_angle,
        equilibrium,
        trajectories,
        holds,
    )


def equilibrium_row(equilibrium: pd.DataFrame, optimizer: str, setting: str) -> pd.Series:
    return equilibrium[(equilibrium["optimizer"] == optimizer) & (equilibrium["setting"] == setting)].iloc[0]


def smoothed_trajectories(trajectories: list, steps: int, windows: int = 50) -> pd.DataFrame:
    """The equilibrium runs averaged over about `windows` windows of steps each, for plotting."""
    traj = pd.concat(trajectories, ignore_index=True)
    traj["window"] = traj["step"] // max(1, steps // windows)
    return (
        traj.groupby(["optimizer", "setting", "window"])
        .agg(step=("step", "mean"), norm=("norm", "mean"), angular_update=("angular_update", "mean"))
        .reset_index()
    )


def toy_frame(toy: ToyChecks) -> pd.DataFrame:
    """Every toy-chain check as measured against expected."""
    e = toy.exponents
    return pd.DataFrame(
        [
            {"check": "exponent of effective LR, SGD, scaled g", "measured": e["sgd_g"], "expected": -2.0},
            {"check": "exponent of effective LR, SGD, scaled W1", "measured": e["sgd_w"], "expected": -2.0},
            {"check": "exponent of effective LR, Adam, scaled g", "measured": e["adam_g"], "expected": -1.0},
            {"check": "exponent of effective LR, Adam, scaled W1", "measured": e["adam_w"], "expected": -1.0},
            {
                "check": "Li & Arora: largest angle between the runs (rad)",
                "measured": toy.schedule_angle,
                "expected": 0.0,
            },
            {
                "check": "SGD from (3·W1, η) vs (W1, η/9): largest angle (rad)",
                "measured": toy.equivalence_angle,
                "expected": 0.0,
            },
            *[
                {
                    "check": f"equilibrium norm / formula, {r.optimizer}, {r.setting}",
                    "measured": r.norm_ratio,
                    "expected": 1.0,
                }
                for r in toy.equilibrium.itertuples()
            ],
            *[
                {
                    "check": f"angular update / formula, {r.optimizer}, {r.setting}",
                    "measured": r.angular_ratio,
                    "expected": 1.0,
                }
                for r in toy.equilibrium.itertuples()
            ],
        ]
    )


@dataclass
class QKLaw:
    """B15's framing, measured where the invariance is exact (W_q, W_k under QK-norm) and where it is not (g)."""

    invariance: pd.DataFrame  # max |Δ logit| per factor and scaled projection (float64, ε negligible)
    invariance_max: float
    default_eps: float
    default_eps_change: float  # the same check with the chapter's usual ε, which breaks exactness
    gradient: pd.DataFrame  # ‖∇W_q‖, ‖∇W_k‖ and cos(∇W_q, W_q) per factor
    gradient_slope_q: float  # of log ‖∇W_q‖ on log a (theory −1)
    gradient_slope_k: float
    orthogonality_max: float  # largest |cos(∇W_q, W_q)| (theory 0)
    runs: pd.DataFrame  # the scaled SGD runs, step by step
    gaps: pd.DataFrame  # per factor: the loss gap between (a, η) and (1, η/a²)
    angular_slope: float  # first step's angular update on ‖W_q‖ (theory −2): every run starts at one direction
    effective_lr_slope: float  # angular update per unit sphere gradient on ‖W_q‖, every step (theory −2)
    run_mean_slope: float  # the angular update averaged over each run (the runs part ways, so not a test)
    effective_lr_ratio_max: float  # largest |measured / (η/‖W_q‖²) − 1| over every step
    trajectory_gap: float  # largest |Δ loss| between the paired runs
    contrast: pd.DataFrame  # per location and factor: the gain alone against the (g·a, W/a) pair
    gain_alone_min: float  # the location the gain alone moves least: its largest |Δ logit| over a ≠ 1
    pair_max: float  # largest |Δ logit| under the pair
    lr: float
    slope_tolerance: float
    invariance_tolerance: float
    holds: bool  # invariance, both gradient slopes, both angular slopes and the paired runs within tolerance
    contrast_holds: bool  # the gain alone moves the logits beyond the tolerance; the pair does not


def qk_law_holds(
    invariance_max: float,
    gradient_slopes,
    angular_slopes,
    trajectory_gap: float,
    *,
    slope_tolerance: float,
    invariance_tolerance: float,
) -> bool:
    """The law holds when the forward and the paired runs agree within `invariance_tolerance`, the gradient slopes
    are within `slope_tolerance` of −1 and the angular-update slopes within it of −2 (NaN fails)."""
    return bool(
        invariance_max <= invariance_tolerance
        and trajectory_gap <= invariance_tolerance
        and all(abs(k + 1) <= slope_tolerance for k in gradient_slopes)
        and all(abs(k + 2) <= slope_tolerance for k in angular_slopes)
    )


def summarise_qk_law(
    invariance: pd.DataFrame,
    default_eps_change: float,
    gradient: pd.DataFrame,
    runs: pd.DataFrame,
    gaps: pd.DataFrame,
    contrast: pd.DataFrame,
    *,
    lr: float,
    slope_tolerance: float,
    invariance_tolerance: float,
    default_eps: float = GPTConfig.norm_eps,
) -> QKLaw:
    """Fit the slopes and judge the law and the contrast from the measured tables."""
    first = runs[runs["step"] == 0]
    mean = runs.groupby("factor")[["norm_q", "angular_update"]].mean()
    moved = contrast[contrast["factor"] != 1.0]
    slopes = dict(
        gradient_slope_q=fit_power_law(gradient["factor"], gradient["grad_norm_q"]),
        gradient_slope_k=fit_power_law(gradient["factor"], gradient["grad_norm_k"]),
        angular_slope=fit_power_law(first["norm_q"], first["angular_update"]),
        effective_lr_slope=fit_power_law(runs["norm_q"], runs["effective_lr"]),
    )
    invariance_max = float(invariance["max_abs_delta_logit"].max())
    trajectory_gap = float(gaps["max_abs_delta_loss"].max())
    gain_alone_min = float(moved.groupby("location")["gain_alone"].max().min()) if len(moved) else math.nan
    pair_max = float(contrast["gain_and_next_linear"].max())
    holds = qk_law_holds(
        invariance_max,
        (slopes["gradient_slope_q"], slopes["gradient_slope_k"]),
        (slopes["angular_slope"], slopes["effective_lr_slope"]),
        trajectory_gap,
        slope_tolerance=slope_tolerance,
        invariance_tolerance=invariance_tolerance,
    )
    return QKLaw(
        invariance=invariance,
        invariance_max=invariance_max,
        default_eps=default_eps,
        default_eps_change=default_eps_change,
        gradient=gradient,
        orthogonality_max=float(gradient["cosine_grad_q_with_q"].abs().max()),
        runs=runs,
        gaps=gaps,
        run_mean_slope=fit_power_law(mean["norm_q"], mean["angular_update"]),
        effective_lr_ratio_max=float((runs["effective_lr"] / runs["predicted_effective_lr"] - 1).abs().max()),
        trajectory_gap=trajectory_gap,
        contrast=contrast,
        gain_alone_min=gain_alone_min,
        pair_max=pair_max,
        lr=lr,
        slope_tolerance=slope_tolerance,
        invariance_tolerance=invariance_tolerance,
        holds=holds,
        contrast_holds=bool(gain_alone_min > invariance_tolerance and pair_max <= invariance_tolerance),
        **slopes,
    )


def qk_law(settings: dict, corpus, *, slope_tolerance: float, invariance_tolerance: float, seed: int = 0) -> QKLaw:
    """The chapter's QK-norm section: a fresh float64 pre-LN GPT with QK-norm, W_q and W_k scaled by each factor.

    Forward invariance, the gradient law and the paired SGD runs are measured on it; the gain contrast on the
    same model, at the block norms and the final norm.
    """
    shape = settings["qk"]
    model_kw = dict(context=shape["context"], width=shape["width"], depth=shape["depth"], heads=4)
    generator = torch.Generator().manual_seed(seed + 11)
    batches = [corpus.batch("train", shape["batch"], shape["context"], generator) for _ in range(shape["steps"])]
    factors = settings["factors"]
    model = qk_norm_model(model_kw, seed=seed)
    usual = qk_norm_model(model_kw, seed=seed, eps=GPTConfig.norm_eps)
    runs, gaps = qk_sgd_study(model, batches, factors, shape["lr"])
    return summarise_qk_law(
        qk_forward_invariance(model, batches[0], factors),
        float(qk_forward_invariance(usual, batches[0], factors)["max_abs_delta_logit"].max()),
        qk_gradient_law(model, batches[0], factors),
        runs,
        gaps,
        gain_pair_contrast(model, batches[0], factors),
        lr=shape["lr"],
        slope_tolerance=slope_tolerance,
        invariance_tolerance=invariance_tolerance,
    )


def qk_frame(law: QKLaw) -> pd.DataFrame:
    """Each measured number of the QK-norm section beside what theory says and the tolerance it is held to."""
    slope, exact = f"±{law.slope_tolerance:g}", f"≤ {law.invariance_tolerance:.0e}"
    rows = [
        ("max |Δ logit|, W_q and/or W_k × a (float64)", law.invariance_max, "0", exact),
        (f"max |Δ logit|, the same with ε = {law.default_eps:g}", law.default_eps_change, "0", "(not held to)"),
        ("slope of log ‖∇W_q‖ on log a", law.gradient_slope_q, "−1", slope),
        ("slope of log ‖∇W_k‖ on log a", law.gradient_slope_k, "−1", slope),
        ("max |cos(∇W_q, W_q)|", law.orthogonality_max, "0", "(not held to)"),
        ("slope of log angular update on log ‖W_q‖, first step", law.angular_slope, "−2", slope),
        ("slope of log (angular update / S) on log ‖W_q‖, every step", law.effective_lr_slope, "−2", slope),
        ("max |(angular update / S) ÷ (η/‖W_q‖²) − 1|", law.effective_lr_ratio_max, "0", "(not held to)"),
        ("slope of the run-averaged angular update (runs part ways)", law.run_mean_slope, "−2", "(not held to)"),
        ("max |Δ loss|, SGD from (a·W, η) vs (W, η/a²)", law.trajectory_gap, "0", exact),
        ("max |Δ logit|, pair (g·a, W/a)", law.pair_max, "0", exact),
        (
            "max |Δ logit|, gains alone × a, least-moved location",
            law.gain_alone_min,
            "> 0",
            f"> {law.invariance_tolerance:.0e}",
        ),
    ]
    return pd.DataFrame(rows, columns=["check", "measured", "theory", "tolerance"])


def _rounding_text(value: float, template: str, zero: str) -> str:
    """A float64 rounding-sized number in prose: `zero` when it is exactly 0, else `template` with one figure."""
    return zero if value == 0 else template.format(value)


def qk_text(law: QKLaw) -> str:
    """The QK-norm section's conclusion, from its numbers."""
    worst = law.contrast[law.contrast["factor"] != 1.0].groupby("location")["gain_alone"].max()
    forward = _rounding_text(law.invariance_max, "by at most {:.0e}", "not at all")
    cosine = _rounding_text(law.orthogonality_max, "≤ {:.0e}", "= 0")
    paired = _rounding_text(law.trajectory_gap, "to within {:.0e} nats", "exactly")
    pair = _rounding_text(law.pair_max, "by at most {:.0e}", "not at all")
    return (
        f"The law {'holds' if law.holds else 'does not hold'} within its tolerances. Scaling W_q and W_k by a moves "
        f"the float64 logits {forward} (with the usual ε = {law.default_eps:g}, by {law.default_eps_change:.0e}: ε "
        f"is what keeps it from being exact in practice). The gradient follows a^{law.gradient_slope_q:.3f} (W_q) "
        f"and a^{law.gradient_slope_k:.3f} (W_k), orthogonal to W_q (|cos| {cosine}); the first SGD step turns W_q "
        f"by ‖W_q‖^{law.angular_slope:.3f}, and per unit sphere gradient every step's turn is η/‖W_q‖² to within "
        f"{law.effective_lr_ratio_max:.2%}. Averaged over the whole run the slope is {law.run_mean_slope:.2f}: the "
        f"runs leave their shared start at different rates, so they no longer see the same gradient. Trained with "
        f"η/a² on W_q and W_k instead, the unscaled model follows the scaled one's losses {paired}. In the same "
        f"model, scaling a pre-LN gain alone moves the logits by up to {worst.min():.2f}–{worst.max():.2f} depending "
        f"on the location, while the pair (g·a, W/a) moves them {pair}."
    )


def qk_evidence(law: QKLaw) -> dict:
    """The QK-norm section's numbers for B15's evidence."""
    return {
        "max_abs_delta_logit_scaling_Wq_Wk_float64": law.invariance_max,
        f"max_abs_delta_logit_with_eps_{law.default_eps:g}": law.default_eps_change,
        "gradient_slope_Wq": law.gradient_slope_q,
        "gradient_slope_Wk": law.gradient_slope_k,
        "max_abs_cos_grad_Wq_with_Wq": law.orthogonality_max,
        "angular_update_slope_first_step": law.angular_slope,
        "effective_lr_slope_every_step": law.effective_lr_slope,
        "effective_lr_over_eta_per_norm_sq_max_rel_error": law.effective_lr_ratio_max,
        "angular_update_slope_run_mean": law.run_mean_slope,
        "paired_sgd_max_abs_delta_loss": law.trajectory_gap,
        "gain_alone_min_over_locations_max_abs_delta_logit": law.gain_alone_min,
        "gain_and_next_linear_max_abs_delta_logit": law.pair_max,
        "lr": law.lr,
        "slope_tolerance": law.slope_tolerance,
        "invariance_tolerance": law.invariance_tolerance,
        "law_holds": law.holds,
        "pair_not_gain_invariant": law.contrast_holds,
        "reference": "van Laarhoven 2017 (η/‖w‖² for SGD); Kunin et al. 2021 (the (g·a, W/a) symmetry)",
    }


def qk_sentence(law: QKLaw) -> str:
    """One sentence for B15's summary: where the claim's invariance is exact and where it is not."""
    forward = _rounding_text(law.invariance_max, "≤ {:.0e}", "exactly 0")
    pair = _rounding_text(law.pair_max, "≤ {:.0e}", "exactly 0")
    return (
        f"The invariance is exact for W_q and W_k under QK-norm (logits move {forward}; SGD's angular update goes as "
        f"‖W_q‖^{law.angular_slope:.2f}, the law η/‖w‖² {'holds' if law.holds else 'fails'}), not for a pre-LN gain "
        f"alone (logits move ≥ {law.gain_alone_min:.2f}) but for the pair (g·a, W/a) ({pair})."
    )


@dataclass
class DecaySweep:
    pairs: dict  # gain decay -> paired_difference against no decay (finite sweeps only)
    timescales: dict  # gain decay -> ηλT
    gain_paths: pd.DataFrame  # mean RMS of the gains per step, decay and seed
    final_gain: pd.Series  # final gain RMS per decay, mean over seeds
    strongest: float | None  # the strongest decay with a finite sweep
    sensitive: bool  # its interval lies wholly beyond the margin
    insensitive: bool  # its interval lies wholly inside the margin
    loss_drop: float  # mean loss fall over the last 10% of steps
    margin: float

    def final_gain_at(self, decay) -> float:
        return float(self.final_gain.get(decay, math.nan))

    @property
    def key_pair(self) -> dict | None:
        return self.pairs.get(self.strongest) if self.strongest is not None else None


def decay_sweep(decay_runs: dict, settings: dict, *, margin: float) -> DecaySweep:
    """Part (4) of B15: the paired final-loss change from decaying the gains, against `margin` (nats).

    A decay whose runs diverged (a non-finite loss) is left out; `strongest` is then the strongest decay left.
    """
    decays = [wd for wd in settings["gain_decays"] if wd > 0]
    seeds = range(settings["seeds"])
    final = {wd: [decay_runs[(wd, s)]["final_val_loss"] for s in seeds] for wd in settings["gain_decays"]}
    pairs = {
        wd: paired_difference(final[0.0], final[wd], margin)
        for wd in decays
        if all(math.isfinite(v) for v in final[0.0] + final[wd])
    }
    timescales = {wd: settings["lr"] * wd * settings["sweep_steps"] for wd in decays}
    gain_paths = pd.concat(
        [
            pd.DataFrame(
                {
                    "step": np.arange(1, len(next(iter(out["history"].values()), [])) + 1),
                    "gain_rms": np.mean([v for v in out["history"].values()], axis=0) / math.sqrt(settings["width"]),
                    "gain_decay": wd,
                    "seed": seed,
                }
            )
            for (wd, seed), out in decay_runs.items()
            if out["history"]
        ],
        ignore_index=True,
    )
    final_gain = gain_paths.groupby(["gain_decay", "seed"]).last()["gain_rms"].groupby("gain_decay").mean()
    strongest = max(pairs) if pairs else None
    sensitive = strongest is not None and pairs[strongest]["outcome"] == "different"
    insensitive = strongest is not None and pairs[strongest]["outcome"] == "equivalent"
    loss_drop = float(np.nanmean([out["final_drop"] for out in decay_runs.values()]))
    return DecaySweep(pairs, timescales, gain_paths, final_gain, strongest, sensitive, insensitive, loss_drop, margin)


def decay_frame(sweep: DecaySweep) -> pd.DataFrame:
    """One row per decay: ηλT, the paired loss change with its interval and outcome, and the final gain RMS."""
    return pd.DataFrame(
        [
            {
                "λ_g": wd,
                "ηλT": sweep.timescales[wd],
                "Δ loss (nats)": p["mean_difference"],
                "95% CI low": p["ci_low"],
                "95% CI high": p["ci_high"],
                "outcome": p["outcome"],
                "pairs needed": p["pairs_needed"],
                "final gain RMS": sweep.final_gain_at(wd),
            }
            for wd, p in sweep.pairs.items()
        ]
    )


def b15_parts(forward: ForwardCheck, scaling: UpdateScaling, toy: ToyChecks, sweep: DecaySweep) -> dict:
    """The four parts of B15, each already judged against its own threshold."""
    return {
        "forward_invariance": forward.holds,
        "linear_under_adam": bool(scaling.linear_under_adam),
        "wd_as_schedule_scale_invariant": bool(toy.holds),
        "sensitive_to_gain_decay": bool(sweep.sensitive),
    }


def b15_verdict(parts: dict) -> str:
    """All four parts: holds; two or three: holds with caveats; fewer: does not hold."""
    passed = sum(parts.values())
    return decide(passed >= 2, caveat=passed < 4)


def _sweep_text(sweep: DecaySweep) -> str:
    if sweep.strongest is None:
        return "the decay sweep diverged"
    return (
        f"λ_g = {sweep.strongest:g} (ηλT = {sweep.timescales[sweep.strongest]:.0f}) changes the final loss by "
        f"{interval_text(sweep.pairs[sweep.strongest])}"
    )


def b15_text(
    forward: ForwardCheck, scaling: UpdateScaling, toy: ToyChecks, sweep: DecaySweep, qk: QKLaw, tolerance: float
):
    """The verdict paragraph the chapter shows: each part's number, where the invariance is exact, the verdict."""
    parts = b15_parts(forward, scaling, toy, sweep)
    return (
        f"{sum(parts.values())}/4 parts hold. (1) Gains ×0.5 or ×2 change the loss by up to "
        f"{forward.by_location.max():.1%}; the (gain·a, linear/a) symmetry leaves it within {forward.symmetry_max:.0e}. "
        f"(2) Under the symmetry, Adam's one-step change of the next layer goes as a^{scaling.adam_exponent:.2f} (sd "
        f"{scaling.adam_exponent_sd:.2f}), SGD's as a^{scaling.sgd_exponent:.2f}. (3) Decay ≡ growing learning rate to "
        f"{toy.schedule_angle:.0e} rad on scale-invariant weights; equilibrium formulas "
        f"{'within' if toy.holds else 'not within'} ±{tolerance:.0%}. (4) {_sweep_text(sweep)}; loss still fell "
        f"{sweep.loss_drop:.4f} nats over the last 10% of steps. With that decay the gains end at RMS "
        f"{sweep.final_gain_at(sweep.strongest):.3f} against {sweep.final_gain_at(0.0):.3f} undecayed: in pre-LN, "
        f"decay that has time to act shrinks what the next layer sees, a change of the function and not only of a "
        f"learning rate. {qk_sentence(qk)}\n\n**B15 verdict: {b15_verdict(parts)}.**"
    )


def b15_finding(
    forward: ForwardCheck,
    scaling: UpdateScaling,
    toy: ToyChecks,
    sweep: DecaySweep,
    qk: QKLaw,
    *,
    tolerance: float,
    corpus_sha256: str,
) -> Finding:
    """B15 from its four parts; the key number is the strongest decay's paired loss change, against the margin.

    The QK-norm law does not vote: it says where the claim's premise (exact scale invariance) holds, and the
    summary's second sentence reports it.
    """
    parts = b15_parts(forward, scaling, toy, sweep)
    key_pair = sweep.key_pair
    adam_toy = equilibrium_row(toy.equilibrium, "adamw", "toy chain")
    e = toy.exponents
    summary = (
        f"{sum(parts.values())}/4 parts hold: gains ×0.5/×2 move the pre-LN loss by up to "
        f"{forward.by_location.max():.1%}, Adam's update of the next layer scales as a^{scaling.adam_exponent:.2f} "
        f"under the (g·a, W/a) symmetry, and {_sweep_text(sweep)}. {qk_sentence(qk)}"
    )
    evidence = {
        "parts": parts,
        "forward": {
            "toy_max_abs_delta_loss": toy.invariance,
            "symmetry_max_abs_delta_loss": forward.symmetry_max,
            "relative_loss_change_at_a_0.5_or_2": {
                f"{m} / {loc}": float(v) for (m, loc), v in forward.by_location.items()
            },
        },
        "effective_update": {
            "adam_exponent_via_W": scaling.adam_exponent,
            "adam_exponent_sd": scaling.adam_exponent_sd,
            "sgd_exponent_via_W": scaling.sgd_exponent,
            "reference": "Kunin et al. 2021 rescale symmetry (g*a, W/a); SGD a^2, Adam a^1 derived",
        },
        "effective_lr": {
            "sgd_exponent_gain": e["sgd_g"],
            "sgd_exponent_W1": e["sgd_w"],
            "adam_exponent_gain": e["adam_g"],
            "adam_exponent_W1": e["adam_w"],
            "theory_minus2_minus1_holds": bool(toy.theory_holds),
            "sgd_direction_equivalence_rad": toy.equivalence_angle,
        },
        "wd_schedule": {
            "li_arora_max_angle_rad": toy.schedule_angle,
            "equilibrium": toy.equilibrium.drop(columns=["lr", "weight_decay"]).to_dict("records"),
            "tolerance": tolerance,
            "adamw_toy_norm_ratio": float(adam_toy["norm_ratio"]),
            "adamw_toy_angular_ratio": float(adam_toy["angular_ratio"]),
        },
        "decay_sweep": {
            "pairs": {str(wd): p for wd, p in sweep.pairs.items()},
            "eta_lambda_T": {str(k): v for k, v in sweep.timescales.items()},
            "final_gain_rms": {str(k): float(v) for k, v in sweep.final_gain.items()},
            "margin_nats": sweep.margin,
            "loss_drop_last_10pct": sweep.loss_drop,
            "sensitive": sweep.sensitive,
            "insensitive": sweep.insensitive,
        },
        "qk_norm_law": qk_evidence(qk),
        "corpus_sha256": corpus_sha256,
    }
    return Finding(
        b15_verdict(parts),
        summary,
        evidence,
        key_number=key_pair["mean_difference"] if key_pair else None,
        threshold=sweep.margin,
        spread=key_pair["sd_of_differences"] / math.sqrt(key_pair["pairs"]) if key_pair else None,
        rule="Four parts (forward invariance, Adam's linear scaling under the rescale symmetry, decay as a schedule on "
        f"scale-invariant weights, paired sensitivity to gain decay at ηλT ≫ 1 beyond ±{sweep.margin:g} nats): all "
        "hold → holds; two or three → with caveats.",
    )
