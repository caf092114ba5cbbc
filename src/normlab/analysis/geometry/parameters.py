"""Section "Parameters and memory": parameters per module and the bytes autograd keeps, and A6."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import torch
import torch.nn.functional as F

from normlab.norms.modules import LayerNorm, RMSNorm
from normlab.study import design
from normlab.study.findings import Finding
from normlab.study.key_numbers import KeyNumber
from normlab.study.results import decide

A6_KEY = KeyNumber("parameters LayerNorm holds beyond RMSNorm's", "parameters")


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


@dataclass
class ParameterMemory:
    d: int
    tokens: int
    table: pd.DataFrame  # module, parameters, parameter bytes (float32), bytes kept for backward
    counts: dict[str, int]
    saved: dict[str, int]  # per norm, bytes autograd keeps for the backward of one float32 batch
    block_share: dict[str, float]  # the norms' share of a GPT-2-small-shaped block's weights


def measure_parameters(d: int, tokens: int) -> ParameterMemory:
    rows = []
    for name, module in (
        ("torch.nn.LayerNorm", torch.nn.LayerNorm(d)),
        ("torch.nn.RMSNorm", torch.nn.RMSNorm(d)),
        ("normlab.LayerNorm", LayerNorm(d)),
        ("normlab.RMSNorm", RMSNorm(d)),
    ):
        rows.append(
            {
                "module": name,
                "parameters": parameter_count(module),
                "parameter bytes (float32)": parameter_bytes(module),
            }
        )
    batch = torch.randn(tokens, d, requires_grad=True)
    weight, bias = torch.ones(d, requires_grad=True), torch.zeros(d, requires_grad=True)
    saved = {
        "LayerNorm": saved_for_backward_bytes(lambda v: F.layer_norm(v, (d,), weight, bias, 1e-5), batch),
        "RMSNorm": saved_for_backward_bytes(lambda v: F.rms_norm(v, (d,), weight, 1e-6), batch),
    }
    table = pd.DataFrame(rows)
    # For scale: a GPT-2-small-shaped block (d = 768) has ~12·d² weights and two norms.
    block_share = {name: 2 * k * 768 / (12 * 768**2) for name, k in (("LayerNorm", 2), ("RMSNorm", 1))}
    counts = dict(zip(table.module, table.parameters))
    shown = table.assign(
        **{"bytes kept for backward": [saved["LayerNorm"], saved["RMSNorm"], saved["LayerNorm"], saved["RMSNorm"]]}
    )
    return ParameterMemory(d, tokens, shown, counts, saved, block_share)


def a6_parameter_saving(memory: ParameterMemory, negligible_share: float) -> Finding:
    """Holds if LayerNorm holds 2d parameters and RMSNorm d; a caveat if the saving is negligible at model scale
    (the norms under negligible_share of a d = 768 block's weights) or activation memory is not smaller."""
    d, counts, saved, share = memory.d, memory.counts, memory.saved, memory.block_share
    holds = (
        counts["torch.nn.LayerNorm"] == 2 * d
        and counts["torch.nn.RMSNorm"] == d
        and counts["normlab.LayerNorm"] == 2 * d
        and counts["normlab.RMSNorm"] == d
    )
    return Finding(
        decide(holds, caveat=share["LayerNorm"] < negligible_share or saved["RMSNorm"] >= saved["LayerNorm"]),
        f"LayerNorm holds 2d = {2 * d} parameters and RMSNorm d = {d} (torch.nn and normlab alike); the saving is real "
        f"but tiny: norms are {share['LayerNorm']:.2%} vs {share['RMSNorm']:.2%} of a d = 768 block's weights. For "
        f"activations, PyTorch's CPU kernels keep {saved['LayerNorm']} B (LayerNorm) vs {saved['RMSNorm']} B (RMSNorm) "
        f"for the backward of a {memory.tokens}×{d} float32 batch.",
        {"parameters": counts, "saved_for_backward_bytes": saved, "share_of_block_weights_d768": share},
        key_number=counts["torch.nn.LayerNorm"] - counts["torch.nn.RMSNorm"],
        threshold=design.value("A6", "no_extra_parameters"),
        spread=0.0,
        **A6_KEY.fields(),
        reads=("no_extra_parameters", "negligible_share"),
    )
