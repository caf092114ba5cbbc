"""What the chapter measures inside a model: the largest attention logit, the gradient reaching the blocks, and
where a DyT model sits on tanh's curve (`dyt_trace_point`, recorded between training segments by `runs`).
"""

from __future__ import annotations

import torch

from normlab.gpt.model import GPT, GPTConfig
from normlab.norms.dyt import DyT

PROBE_SEED = 20_000  # probe batches: a generator of their own, apart from training and train's own evaluation


def probe_batches(corpus, cfg: GPTConfig, batch_size: int, count: int, device: str) -> list:
    generator = torch.Generator().manual_seed(PROBE_SEED)
    return [corpus.batch("val", batch_size, cfg.context, generator, device) for _ in range(count)]


@torch.no_grad()
def max_attention_logit(model: GPT, x: torch.Tensor) -> float:
    """Largest causal pre-softmax attention logit over all blocks and heads for input ids x."""
    was_training = model.training
    model.eval()
    with model.capture_max_attention_logit() as per_block:
        model(x)
    model.train(was_training)
    return float(max(per_block))


def block_gradient_scale(model: GPT, x: torch.Tensor, y: torch.Tensor) -> float:
    """Mean |gradient| over the blocks' weight matrices for one batch, the model left as it was.

    AdamW divides each gradient by its running RMS plus eps (1e-8 in torch): a gradient near eps is damped rather
    than normalised, so this number, at initialisation, says whether the blocks can start learning at all."""
    matrices = [p for name, p in model.named_parameters() if name.startswith("blocks.") and p.dim() >= 2]
    if not matrices:
        raise ValueError("the model has no block weight matrices to measure")
    grads = torch.autograd.grad(model(x, y)[1], matrices)
    total = sum(float(g.detach().abs().double().sum()) for g in grads)
    return total / sum(p.numel() for p in matrices)


def saturated_share(alpha: torch.Tensor, x: torch.Tensor) -> float:
    """Share of the inputs x of a DyT layer with scalar alpha at which float32's tanh'(αx) = 1 − tanh²(αx) is
    exactly 0: there the layer passes no gradient at all to its input."""
    z = alpha.detach().float() * x.detach().float()
    return float((1 - torch.tanh(z) ** 2 == 0).float().mean())


def dyt_saturation(model: GPT, x: torch.Tensor, y: torch.Tensor) -> dict:
    """Where a DyT model sits on tanh's curve: per DyT layer, the share of its inputs at which float32's
    tanh'(αx) = 1 − tanh²(αx) is exactly 0, and the mean |gradient| then reaching the blocks' matrices.

    A DyT layer whose every input is saturated passes no gradient at all to what lies below it; when that
    layer is the final one, only the final layer's own parameters and the output head can still learn.
    """
    shares: dict[str, float] = {}
    hooks = []
    for name, module in model.named_modules():
        if isinstance(module, DyT):

            def record(mod, inputs, output, name=name):
                shares[name] = saturated_share(mod.alpha, inputs[0])

            hooks.append(module.register_forward_hook(record))
    if not hooks:
        raise ValueError("dyt_saturation needs a model with DyT layers (norm='dyt')")
    try:
        gradient = block_gradient_scale(model, x, y)
    finally:
        for hook in hooks:
            hook.remove()
    return {"saturated_share": shares, "block_gradient": gradient}


def dyt_trace_point(model: GPT, x: torch.Tensor, y: torch.Tensor) -> dict:
    """One point of a DyT run's trace: each DyT layer's α, the RMS of the last hidden state (the final norm's
    input), each DyT layer's `saturated_share`, and the mean |gradient| reaching the blocks' matrices
    (`block_gradient_scale`), all on the batch (x, y)."""
    if model.final_norm is None:
        raise ValueError("dyt_trace_point reads the final norm's input: use a placement with a final norm (pre-LN)")
    seen = {}
    handle = model.final_norm.register_forward_pre_hook(
        lambda module, args: seen.__setitem__("rms", float(args[0].detach().double().pow(2).mean().sqrt()))
    )
    try:
        saturation = dyt_saturation(model, x, y)
    finally:
        handle.remove()
    return {
        "alpha": {name: float(m.alpha.detach()) for name, m in model.named_modules() if isinstance(m, DyT)},
        "final_hidden_rms": seen["rms"],
        **saturation,
    }


@torch.no_grad()
def bounded_share(model: GPT, x: torch.Tensor, bound: float) -> float:
    """Verma's saturated share (arXiv 2604.23434): the fraction of all DyT layers' inputs, pooled, with |αx| > `bound`
    in one forward pass on `x` (V6). Unlike `saturated_share` (a zero slope in float32, V1's reading of a dead layer),
    this counts the inputs in tanh's flat tails."""
    if bound <= 0:
        raise ValueError(f"bounded_share: the bound on |αx| must be > 0, got {bound}")
    counts = [0, 0]
    hooks = []
    for module in model.modules():
        if isinstance(module, DyT):

            def record(mod, inputs, output):
                counts[0] += int((inputs[0] * mod.alpha).abs().gt(bound).sum())
                counts[1] += inputs[0].numel()

            hooks.append(module.register_forward_hook(record))
    if not hooks:
        raise ValueError("bounded_share needs a model with DyT layers (norm='dyt')")
    was_training = model.training
    model.eval()
    try:
        model(x)
    finally:
        model.train(was_training)
        for hook in hooks:
            hook.remove()
    return counts[0] / counts[1]
