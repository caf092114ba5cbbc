"""Two measurements every section of the gain chapter reads: the angle between two weights and a power-law exponent."""

from __future__ import annotations

import numpy as np
import torch


def angle(a: torch.Tensor, b: torch.Tensor) -> float:
    """Angle in radians between two tensors seen as flat vectors (stable for tiny angles)."""
    a, b = a.flatten().double(), b.flatten().double()
    ua, ub = a / a.norm(), b / b.norm()
    return float(2 * torch.atan2((ua - ub).norm(), (ua + ub).norm()))


def fit_power_law(x, y) -> float:
    """Exponent k of y ~ x^k by least squares in log-log space."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = (x > 0) & (y > 0) & np.isfinite(x) & np.isfinite(y)
    if keep.sum() < 2:
        return float("nan")
    return float(np.polyfit(np.log(x[keep]), np.log(y[keep]), 1)[0])
