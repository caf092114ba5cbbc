"""Section "Scale-invariant weights: the classical results on an exact toy": B15's part (3) on the toy chain.

Effective-learning-rate exponents, Li & Arora's schedule equivalence and the equilibrium formulas, each judged
against the tolerance the chapter states.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from normlab.analysis.gain.toy_chain import (
    check_scale_invariance,
    effective_lr_exponents,
    effective_lr_scan,
    equilibrium_check,
    equilibrium_run,
    make_toy_chain,
    random_walk_equilibrium_run,
    sgd_direction_equivalence,
    weight_decay_as_schedule,
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
