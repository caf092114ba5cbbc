"""The behavioural norm classifier and the transformers survey."""

import pytest
import torch
from torch import nn

from normlab import RMSNorm
from normlab.analysis.ecosystem import classify


class BiasFreeLayerNorm(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x):
        centred = x - x.mean(-1, keepdim=True)
        return self.weight * centred / centred.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt()


@pytest.mark.parametrize(
    "module, kind",
    [
        (nn.LayerNorm(16), "LayerNorm"),
        (nn.LayerNorm(16, elementwise_affine=False), "LayerNorm"),
        (BiasFreeLayerNorm(16), "LayerNorm"),
        (nn.RMSNorm(16), "RMSNorm"),
        (RMSNorm(16, offset=1.0), "RMSNorm"),
        (nn.Linear(16, 16), "unclassified"),  # not scale invariant
        (nn.Linear(16, 3), "unclassified"),  # changes the shape
    ],
)
def test_classifier_goes_by_behaviour(module, kind):
    assert classify.classify_norm(module, torch.Generator().manual_seed(0)) == kind


def test_dominant_kind_ignores_unclassified_and_reports_ties():
    use = lambda kind: classify.NormUse("m", "a", "C", kind)  # noqa: E731
    assert classify.dominant_kind([use("RMSNorm"), use("RMSNorm"), use("unclassified")]) == "RMSNorm"
    assert classify.dominant_kind([use("RMSNorm"), use("LayerNorm")]) == "mixed"
    assert classify.dominant_kind([use("unclassified")]) == "unclassified"


def test_known_architectures_from_the_installed_transformers():
    pytest.importorskip("transformers")
    assert classify.dominant_kind(classify.norm_uses("llama")) == "RMSNorm"
    assert classify.dominant_kind(classify.norm_uses("gpt2")) == "LayerNorm"
    # T5 calls its norm "LayerNorm" but it subtracts no mean: the name must not decide.
    t5 = classify.norm_uses("t5")
    assert {u.class_name for u in t5} == {"T5LayerNorm"} and classify.dominant_kind(t5) == "RMSNorm"


def test_unknown_model_type_is_a_clear_error():
    pytest.importorskip("transformers")
    with pytest.raises(ValueError, match="no model type 'lama'"):
        classify.norm_uses("lama")
