"""Section "Mean-dominated inputs and ε (B11)": what ε does to each norm on tokens c·1 + s·z."""

from __future__ import annotations

import pandas as pd
import torch

from normlab.analysis.geometry.articles import repeated
from normlab.norms.reference import layer_norm_reference, rms_norm_reference
from normlab.study.findings import Finding
from normlab.study.key_numbers import SHARE, KeyNumber
from normlab.study.present import significant
from normlab.study.results import decide

B11_KEY = KeyNumber("how much LayerNorm's output shrinks when σ² ≤ ε", SHARE)


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


MEAN_DOMINATED_OFFSETS = (0.0, 1.0, 100.0)
MEAN_DOMINATED_TOKENS = 32  # tokens per (offset, noise) point


def _layer_norm_with_eps(v, eps):
    return layer_norm_reference(v, eps=eps)


def _rms_norm_with_eps(v, eps):
    return rms_norm_reference(v, eps=eps)


def sweep_mean_dominated(d: int, points: int, eps: float, generator: torch.Generator) -> pd.DataFrame:
    """Tokens c·1 + s·z for each offset c and noise s: how much ε changes each norm, and the output's share along 1.

    "statistic / ε" is what ε pads, relative to ε: the variance s² for LayerNorm, the mean square c² + s² for RMSNorm.
    """
    noise_levels = torch.logspace(-6, 1, 2 * points, dtype=torch.float64).tolist()
    rows = []
    for c in MEAN_DOMINATED_OFFSETS:
        for s in noise_levels:
            tokens = mean_dominated_tokens(c, s, MEAN_DOMINATED_TOKENS, d, generator)
            for name, norm, statistic in (
                ("LayerNorm", _layer_norm_with_eps, s * s),
                ("RMSNorm", _rms_norm_with_eps, c * c + s * s),
            ):
                rows.append(
                    {
                        "norm": name,
                        "offset c": c,
                        "noise s": s,
                        "statistic / ε": statistic / eps,
                        "ε effect": eps_effect(norm, tokens, eps),
                        "output share along 1": mean_direction_share(norm(tokens, eps)),
                    }
                )
    return pd.DataFrame(rows)


def b11_eps_on_mean_dominated(
    b11: pd.DataFrame,
    eps: float,
    d: int,
    *,
    rms_negligible: float,
    ln_takes_over: float,
    ln_negligible: float,
    offset_dominated: float,
    repeats: int,
) -> tuple[Finding, str]:
    """B11's finding and the chapter's sentence for it.

    Holds if RMSNorm's ε effect stays below rms_negligible once mean(x²) ≥ 1e5·ε, LayerNorm's exceeds ln_takes_over
    where σ² ≤ ε (the key number: its smallest value there) and stays below ln_negligible where σ² ≥ 1e3·ε, and
    RMSNorm's outputs on mean-dominated inputs (c = 100, s ≤ 1) are more than offset_dominated along 1.
    """
    rms_large = b11[(b11.norm == "RMSNorm") & (b11["statistic / ε"] >= 1e5)]  # mean square ≥ 1: a residual stream
    ln_small_var = b11[(b11.norm == "LayerNorm") & (b11["statistic / ε"] <= 1.0)]  # variance ≤ ε: near-constant input
    ln_large_var = b11[(b11.norm == "LayerNorm") & (b11["statistic / ε"] >= 1e3)]
    rms_effect_large = float(rms_large["ε effect"].max())
    ln_effect_small = float(ln_small_var["ε effect"].min())
    ln_effect_large = float(ln_large_var["ε effect"].max())
    dominated = b11[(b11.norm == "RMSNorm") & (b11["offset c"] == 100.0) & (b11["noise s"] <= 1.0)]
    rms_offset_share = float(dominated["output share along 1"].min())
    rms_signal_share = 1 - rms_offset_share  # what is left for the per-token signal
    # the spread of LayerNorm's small-variance effect: the same (c, s) point drawn again
    near_constant = ln_small_var.sort_values("ε effect").iloc[0]
    _, ln_effect_spread, _ = repeated(
        lambda draw: eps_effect(
            _layer_norm_with_eps,
            mean_dominated_tokens(near_constant["offset c"], near_constant["noise s"], MEAN_DOMINATED_TOKENS, d, draw),
            eps,
        ),
        repeats,
    )
    holds = (
        rms_effect_large < rms_negligible
        and ln_effect_small > ln_takes_over
        and ln_effect_large < ln_negligible
        and rms_offset_share > offset_dominated
    )
    finding = Finding(
        decide(holds),
        f"With ε = {eps:g}, RMSNorm's output moves by ≤ {rms_effect_large:.0e} once mean(x²) ≥ 1, whereas LayerNorm's "
        f"shrinks by ≥ {ln_effect_small:.0%} when σ² ≤ ε. On mean-dominated inputs (c = 100, s ≤ 1) at most "
        f"{rms_signal_share:.1e} of RMSNorm's output energy is per-token signal (the rest is along 1), the case "
        f"LayerNorm handles and RMSNorm gives up.",
        {
            "eps": eps,
            "rms_effect_mean_square_ge_1": rms_effect_large,
            "ln_effect_variance_le_eps_min": ln_effect_small,
            "ln_effect_variance_ge_1e3_eps_max": ln_effect_large,
            "rms_output_share_along_1_mean_dominated": rms_offset_share,
            "rms_signal_share_mean_dominated": rms_signal_share,
        },
        key_number=ln_effect_small,
        threshold=ln_takes_over,
        spread=ln_effect_spread,
        **B11_KEY.fields(),
        reads=("eps", "rms_negligible", "ln_takes_over", "ln_negligible", "offset_dominated"),
    )
    sentence = (
        f"**B11.** With ε = {eps:g}, RMSNorm's output moves by at most {significant(rms_effect_large)} once mean(x²) "
        f"≥ 1; LayerNorm's shrinks by at least {ln_effect_small:.0%} once σ² ≤ ε. On mean-dominated inputs (c = 100, "
        f"s ≤ 1) at most {significant(rms_signal_share)} of RMSNorm's output energy is per-token signal."
    )
    return finding, sentence
