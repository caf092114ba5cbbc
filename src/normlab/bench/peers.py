"""Norm implementations from other libraries, timed beside normlab's in the GPU bench.

A peer is imported only when it is installed; one that is missing or cannot run on the device becomes a
skipped case whose reason says how to get it, never a crash. Each peer is called with normlab's contract,
so the comparison is like for like: a fresh output, gradients returned rather than written over the inputs,
statistics in fp32 and one rounding to the input's dtype.

    liger  Liger-Kernel's LigerRMSNormFunction and LigerLayerNormFunction (liger_kernel.ops), with
           casting_mode="gemma" (fp32 throughout, one rounding: normlab's "none") and in_place=False
           (its default writes dx over dy, which normlab's kernels do not do).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

import torch

LIGER_INSTALL = (
    "liger-kernel not installed: pip install liger-kernel (it is in normlab's study extra; on a machine "
    "without pip access, carry its wheel: make gpu-carry, then scripts/gpu_session.py puts it on the path)"
)


@dataclass(frozen=True)
class Peer:
    name: str  # the implementation's label in the bench
    module: str  # what must import for the peer to be there
    install_hint: str  # the skipped case's reason when it does not
    make_call: Callable  # (norm, direction) -> the timed call, with the bench's input-set arguments
    needs_cuda: bool = True


def _liger_call(norm: str, direction: str) -> Callable:
    from liger_kernel.ops.layer_norm import LigerLayerNormFunction
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction

    if norm == "rms":
        forward = lambda x, weight: LigerRMSNormFunction.apply(x, weight, 1e-6, 0.0, "gemma", False)  # noqa: E731
    else:
        forward = lambda x, weight, bias: LigerLayerNormFunction.apply(x, weight, bias, 1e-5)  # noqa: E731
    return _with_direction(forward, norm, direction)


def _with_direction(forward: Callable, norm: str, direction: str) -> Callable:
    """The forward alone, or forward+backward returning the gradients (as the bench times normlab's)."""
    if direction == "forward":
        return forward
    if norm == "rms":
        return lambda x, weight, dy: torch.autograd.grad(forward(x, weight), (x, weight), dy)
    return lambda x, weight, bias, dy: torch.autograd.grad(forward(x, weight, bias), (x, weight, bias), dy)


PEERS = {"liger": Peer("liger", "liger_kernel.ops.rms_norm", LIGER_INSTALL, _liger_call)}


def unavailable(name: str, device: torch.device) -> str | None:
    """Why peer `name` cannot be timed on `device`, or None."""
    peer = PEERS[name]
    try:
        importlib.import_module(peer.module)
    except ImportError as error:
        return f"{peer.install_hint} ({error})"
    if peer.needs_cuda and device.type != "cuda":
        return f"{name} runs Triton kernels on CUDA tensors only; needs a GPU"
    return None


def peer_call(name: str, norm: str, direction: str) -> Callable:
    return PEERS[name].make_call(norm, direction)
