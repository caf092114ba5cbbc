"""The Triton norms as torch.library custom ops, with fake impls and autograd.

`torch.library.custom_op` (not `triton_op`) because it compiles with
fullgraph=True on CPU in Triton's interpreter too: torch.compile treats the op
as opaque, asks the fake impl for output shapes, and routes gradients through
the registered backward op, so no graph break and no tracing into the kernel.

Ops (all outputs freshly allocated; an empty tensor stands for "absent"):
    normlab::rms_norm_forward   -> (y, s, mean_square)
    normlab::rms_norm_backward  -> (dx, dweight)
    normlab::layer_norm_forward -> (y, s, mean, rstd)
    normlab::layer_norm_backward-> (dx, dweight, dbias)

One call path, `rms_norm_forward_call` / `layer_norm_forward_call`: in eager mode a torch.autograd.Function
(_RmsNorm, _LayerNorm) that calls the launcher, whose backward is the registered one's logic; under torch.compile
or torch.export (torch.compiler.is_compiling()), or when a tensor is not a plain torch.Tensor / Parameter
(FakeTensor, FunctionalTensor, other subclasses: make_fx, FakeTensorMode), the custom op. Both call the same
launchers with the same arguments, so results are bit-identical, and double backward fails the same way
(through the backward op, which has no autograd formula). Only public torch API decides the route. What it
cannot see: a TorchDispatchMode over plain tensors (make_fx's "real" mode, FlopCounterMode) sees the launcher's
allocations, not the op (make_fx's "real" mode fails in the interpreter; its "fake" and "symbolic" modes pass
FakeTensors, which take the op); functorch transforms (vmap, grad, jvp) are refused by Function.apply with torch's
message. (Through the op, as before issue 43, grad was refused with the same message, vmap ran, and jvp gave a
zero tangent: the op has no jvp rule.)
"""

from __future__ import annotations

import torch
from torch import Tensor

from normlab.norms.backends.triton import launch
from normlab.norms.validation import statistics_dtype


def _stats_like(x: Tensor) -> Tensor:
    return x.new_empty(x.shape[:-1], dtype=statistics_dtype(x.dtype))


def _maybe_like(present: bool, t: Tensor) -> Tensor:
    return t.new_empty(t.shape) if present else t.new_empty(0)


def _eps_tensor(eps) -> Tensor:
    """eps as the ops take it: a 0-d float64 tensor (exact for a Python float), read back with .item() by the op's
    implementation when it launches; the fake impls ignore it. A float in the schema would be specialised by
    Dynamo (one graph per eps value); a tensor is a graph input, so a new eps reuses the graph."""
    return eps if isinstance(eps, Tensor) else torch.scalar_tensor(eps, dtype=torch.float64)


# ---------------------------------------------------------------- RMSNorm


@torch.library.custom_op("normlab::rms_norm_forward", mutates_args=())
def rms_norm_forward(
    x: Tensor,
    weight: Tensor | None,
    residual: Tensor | None,
    eps: Tensor,
    offset: float,
    eps_inside: bool,
    k: int,
    onchip_limit: int,
    chunk: int,
) -> tuple[Tensor, Tensor, Tensor]:
    return launch.forward(
        x, weight, None, residual, eps.item(), False, offset, eps_inside, k, "welford", onchip_limit, chunk
    )[:3]


@rms_norm_forward.register_fake
def _(x, weight, residual, eps, offset, eps_inside, k, onchip_limit, chunk):
    return x.new_empty(x.shape), _maybe_like(residual is not None, x), _stats_like(x)


@torch.library.custom_op("normlab::rms_norm_backward", mutates_args=())
def rms_norm_backward(
    dy: Tensor,
    ds: Tensor | None,
    s: Tensor,
    weight: Tensor | None,
    mean_square: Tensor,
    eps: Tensor,
    offset: float,
    eps_inside: bool,
    k: int,
    onchip_limit: int,
    chunk: int,
) -> tuple[Tensor, Tensor]:
    return launch.rms_backward(dy, ds, s, weight, mean_square, eps.item(), offset, eps_inside, k, onchip_limit, chunk)


@rms_norm_backward.register_fake
def _(dy, ds, s, weight, mean_square, eps, offset, eps_inside, k, onchip_limit, chunk):
    return s.new_empty(s.shape), (weight.new_empty(weight.shape) if weight is not None else s.new_empty(0))


def _rms_setup_context(ctx, inputs, output):
    x, weight, residual, eps, offset, eps_inside, k, onchip_limit, chunk = inputs
    _, s, mean_square = output
    ctx.has_residual = residual is not None
    ctx.config = (eps, offset, eps_inside, k, onchip_limit, chunk)
    ctx.save_for_backward(s if ctx.has_residual else x, weight, mean_square)


def _only_s_reached_the_loss(ds, n_inputs: int, residual_position: int):
    """y's gradient is zero: x and the residual get ds as it is, the parameters none, and nothing is launched."""
    grads = [None] * n_inputs
    grads[0] = grads[residual_position] = ds
    return tuple(grads)


def _rms_backward(ctx, dy, ds, _dmean_square, backward=None):
    """The registered backward; the eager route passes the bare launcher as `backward` (same arguments)."""
    if dy is None:
        return _only_s_reached_the_loss(ds, 9, 2)
    s, weight, mean_square = ctx.saved_tensors
    eps, *config = ctx.config
    if backward is None:
        backward, eps = torch.ops.normlab.rms_norm_backward, _eps_tensor(eps)
    dx, dweight = backward(dy, ds if ctx.has_residual else None, s, weight, mean_square, eps, *config)
    return (dx, dweight if weight is not None else None, dx if ctx.has_residual else None) + (None,) * 6


rms_norm_forward.register_autograd(_rms_backward, setup_context=_rms_setup_context)


# ---------------------------------------------------------------- LayerNorm


@torch.library.custom_op("normlab::layer_norm_forward", mutates_args=())
def layer_norm_forward(
    x: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
    residual: Tensor | None,
    eps: Tensor,
    stats: str,
    onchip_limit: int,
    chunk: int,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    return launch.forward(x, weight, bias, residual, eps.item(), True, 0.0, True, None, stats, onchip_limit, chunk)


@layer_norm_forward.register_fake
def _(x, weight, bias, residual, eps, stats, onchip_limit, chunk):
    return x.new_empty(x.shape), _maybe_like(residual is not None, x), _stats_like(x), _stats_like(x)


@torch.library.custom_op("normlab::layer_norm_backward", mutates_args=())
def layer_norm_backward(
    dy: Tensor,
    ds: Tensor | None,
    s: Tensor,
    weight: Tensor | None,
    mean: Tensor,
    rstd: Tensor,
    has_bias: bool,
    onchip_limit: int,
    chunk: int,
) -> tuple[Tensor, Tensor, Tensor]:
    return launch.layer_backward(dy, ds, s, weight, mean, rstd, has_bias, onchip_limit, chunk)


@layer_norm_backward.register_fake
def _(dy, ds, s, weight, mean, rstd, has_bias, onchip_limit, chunk):
    n_features = s.shape[-1]
    param_dtype = weight.dtype if weight is not None else s.dtype
    param = s.new_empty(n_features, dtype=param_dtype)
    return (
        s.new_empty(s.shape),
        (param if weight is not None else s.new_empty(0)),
        (param.new_empty(n_features) if has_bias else s.new_empty(0)),
    )


def _layer_setup_context(ctx, inputs, output):
    x, weight, bias, residual, eps, stats, onchip_limit, chunk = inputs
    _, s, mean, rstd = output
    ctx.has_residual = residual is not None
    ctx.bias_dtype = None if bias is None else bias.dtype
    ctx.config = (onchip_limit, chunk)
    ctx.save_for_backward(s if ctx.has_residual else x, weight, mean, rstd)


def _layer_backward(ctx, dy, ds, _dmean, _drstd, backward=None):
    """The registered backward; the eager route passes the bare launcher as `backward` (same arguments)."""
    if dy is None:
        return _only_s_reached_the_loss(ds, 8, 3)
    s, weight, mean, rstd = ctx.saved_tensors
    has_bias = ctx.bias_dtype is not None
    dx, dweight, dbias = (backward or torch.ops.normlab.layer_norm_backward)(
        dy, ds if ctx.has_residual else None, s, weight, mean, rstd, has_bias, *ctx.config
    )
    return (
        dx,
        dweight if weight is not None else None,
        launch._as(dbias, ctx.bias_dtype) if has_bias else None,
        dx if ctx.has_residual else None,
    ) + (None,) * 4


layer_norm_forward.register_autograd(_layer_backward, setup_context=_layer_setup_context)


# ---------------------------------------------------------------- the one call path

# Plain eager tensors; None stands for an absent optional tensor. Anything else (FakeTensor, FunctionalTensor,
# another subclass) is being traced, and goes to the op.
# The test, in each *_call below, written out (no helper: this runs on every call): under torch.compile /
# torch.export, or with a tensor that is not a plain eager one, the op is called.
_PLAIN_TENSORS = frozenset((Tensor, torch.nn.Parameter, type(None)))


class _RmsNorm(torch.autograd.Function):
    """normlab::rms_norm_forward and its registered autograd, called without the dispatcher (eager only).

    Returns the op's (y, s, mean_square); s without a residual and mean_square are not differentiable, and no
    gradient is materialised for them or for an output the loss does not use (set_materialize_grads off), so a
    backward launches the row kernel and the partials reduction and nothing else. forward(ctx, ...) and no
    setup_context: with one, every apply() binds its arguments through inspect.signature (~130 Python calls);
    the scalars come as one tuple, first, and the residual is passed only when there is one, since apply walks its
    arguments in Python (one generator step each).
    The price: functorch transforms (vmap, grad, jvp) are refused by Function.apply with torch's own message."""

    @staticmethod
    def forward(ctx, config, x, weight, residual=None):
        ctx.set_materialize_grads(False)
        eps, offset, eps_inside, k, onchip_limit, chunk = config
        y, s, mean_square, _ = launch.forward(
            x, weight, None, residual, eps, False, offset, eps_inside, k, "welford", onchip_limit, chunk
        )
        _rms_setup_context(ctx, (x, weight, residual, *config), (y, s, mean_square))
        ctx.mark_non_differentiable(mean_square, *(() if ctx.has_residual else (s,)))
        return y, s, mean_square

    @staticmethod
    def backward(ctx, dy, ds, _dmean_square):
        # create_graph=True: through the op, so double backward fails as the op's does
        grads = _rms_backward(ctx, dy, ds, None, None if torch.is_grad_enabled() else launch.rms_backward)
        return (None,) + grads[: 3 if ctx.has_residual else 2]


class _LayerNorm(torch.autograd.Function):
    """normlab::layer_norm_forward and its registered autograd, without the dispatcher (eager only), as _RmsNorm."""

    @staticmethod
    def forward(ctx, config, x, weight, bias, residual=None):
        ctx.set_materialize_grads(False)
        eps, stats, onchip_limit, chunk = config
        y, s, mean, rstd = launch.forward(
            x, weight, bias, residual, eps, True, 0.0, True, None, stats, onchip_limit, chunk
        )
        _layer_setup_context(ctx, (x, weight, bias, residual, *config), (y, s, mean, rstd))
        ctx.mark_non_differentiable(mean, rstd, *(() if ctx.has_residual else (s,)))
        return y, s, mean, rstd

    @staticmethod
    def backward(ctx, dy, ds, _dmean, _drstd):
        grads = _layer_backward(ctx, dy, ds, None, None, None if torch.is_grad_enabled() else launch.layer_backward)
        return (None,) + grads[: 4 if ctx.has_residual else 3]


def rms_norm_forward_call(
    x, weight, residual, eps: float, offset: float, eps_inside: bool, k: int, onchip_limit: int, chunk: int
):
    """normlab::rms_norm_forward's (y, s, mean_square): the op when traced, else _RmsNorm (the same launcher).

    When autograd records the call, the statistics stay on the Function's ctx: mean_square is None then, and so is
    s without a residual."""
    if (
        torch.compiler.is_compiling()
        or type(x) not in _PLAIN_TENSORS
        or type(weight) not in _PLAIN_TENSORS
        or type(residual) not in _PLAIN_TENSORS
    ):
        eps = _eps_tensor(eps)
        return torch.ops.normlab.rms_norm_forward(x, weight, residual, eps, offset, eps_inside, k, onchip_limit, chunk)
    # the scalars in one argument, the residual only when present: Function.apply walks its arguments in Python
    config = (eps, offset, eps_inside, k, onchip_limit, chunk)
    if residual is None:
        y, s, mean_square = _RmsNorm.apply(config, x, weight)
    else:
        y, s, mean_square = _RmsNorm.apply(config, x, weight, residual)
    return (y, s if residual is not None else None, None) if y.requires_grad else (y, s, mean_square)


def layer_norm_forward_call(x, weight, bias, residual, eps: float, stats: str, onchip_limit: int, chunk: int):
    """normlab::layer_norm_forward's (y, s, mean, rstd), as rms_norm_forward_call (None for what autograd keeps)."""
    if (
        torch.compiler.is_compiling()
        or type(x) not in _PLAIN_TENSORS
        or type(weight) not in _PLAIN_TENSORS
        or type(bias) not in _PLAIN_TENSORS
        or type(residual) not in _PLAIN_TENSORS
    ):
        eps = _eps_tensor(eps)
        return torch.ops.normlab.layer_norm_forward(x, weight, bias, residual, eps, stats, onchip_limit, chunk)
    if residual is None:
        y, s, mean, rstd = _LayerNorm.apply((eps, stats, onchip_limit, chunk), x, weight, bias)
    else:
        y, s, mean, rstd = _LayerNorm.apply((eps, stats, onchip_limit, chunk), x, weight, bias, residual)
    return (y, s if residual is not None else None, None, None) if y.requires_grad else (y, s, mean, rstd)
