import math

import numpy as np
import pandas as pd
import pytest
import torch

from normlab.analysis.depth import initialisation, profiles


@pytest.mark.parametrize("bad", [[], [0, 2], [-1], [2.5], 4, "8"])
def test_validate_depths_rejects_bad_lists(bad):
    with pytest.raises(ValueError, match="depths"):
        profiles.validate_depths(bad)


def test_validate_depths_sorts_and_dedups():
    assert profiles.validate_depths([8, 2, 2]) == [2, 8]


def test_mean_pairwise_cosine_matches_brute_force():
    x = torch.randn(3, 5, 7, dtype=torch.float64)
    expected = np.mean(
        [
            float(torch.nn.functional.cosine_similarity(x[b, i], x[b, j], dim=0))
            for b in range(3)
            for i in range(5)
            for j in range(5)
            if i != j
        ]
    )
    assert initialisation.mean_pairwise_cosine(x) == pytest.approx(expected, rel=1e-12)
    same = torch.ones(1, 4, 3)
    assert initialisation.mean_pairwise_cosine(same) == pytest.approx(1.0)


def test_init_profile_shapes_and_gradients_match_autograd():
    tokens = torch.randint(0, 256, (2, 9), generator=torch.Generator().manual_seed(0))
    configs = {"pre-rms": {"norm": "rms", "placement": "pre"}, "post-layer": {"norm": "layer", "placement": "post"}}
    frame = initialisation.init_profile([1, 3], configs, tokens, width=16, heads=2, seeds=(0,))
    assert len(frame) == 2 * (2 + 4)
    blocks = frame[frame["layer"] > 0]
    assert np.isfinite(blocks[["grad_norm", "grad_mlp_down", "residual_norm", "token_cosine"]].to_numpy()).all()
    parts = np.sqrt(blocks["grad_attn"] ** 2 + blocks["grad_mlp"] ** 2)
    assert np.allclose(parts, blocks["grad_norm"])
    post = frame[(frame["config"] == "post-layer") & (frame["layer"] > 0)]
    assert np.allclose(post["residual_norm"], math.sqrt(16), rtol=1e-3)  # unit-gain LayerNorm output has norm sqrt(d)


def test_depth_exponents_recover_a_known_power_law():
    rows = [{"config": "c", "depth": L, "layer": L, "grad_mlp_down": 3.0 * L**-0.5} for L in (2, 4, 8, 16)]
    rows += [{"config": "c", "depth": L, "layer": 1, "grad_mlp_down": 1.0} for L in (2, 4, 8, 16)]
    out = initialisation.depth_exponents(pd.DataFrame(rows))
    assert out.iloc[0]["exponent"] == pytest.approx(-0.5, abs=1e-9)


def test_init_profile_rejects_empty_configs():
    with pytest.raises(ValueError, match="configs"):
        initialisation.init_profile([2], {}, torch.zeros(1, 4, dtype=torch.long))
