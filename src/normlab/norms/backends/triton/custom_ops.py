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

Eager calls skip the dispatcher. A custom op call costs tens of µs of Python
(schema checks, redispatch through the autograd and backend keys, alias
checks), more than the kernel itself below ~10^7 elements on a GPU.
`rms_norm_forward_call` / `layer_norm_forward_call` therefore run the same
launcher through a plain torch.autograd.Function (or directly, when no
gradient is needed) and use the custom op only where something traces: under
torch.compile or torch.export, a dispatch mode (FakeTensorMode, make_fx),
functorch transforms, or tensor subclasses. Both routes call the same
launchers with the same arguments, so results are bit-identical; the
backward is the registered one's logic, and double backward fails the same
way (through the backward op, which has no autograd formula).
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


# ---------------------------------------------------------------- RMSNorm


@torch.library.custom_op("normlab::rms_norm_forward", mutates_args=())
def rms_norm_forward(
    x: Tensor,
    weight: Tensor | None,
    residual: Tensor | None,
    eps: float,
    offset: float,
    eps_inside: bool,
    k: int,
    onchip_limit: int,
    chunk: int,
) -> tuple[Tensor, Tensor, Tensor]:
    return launch.rms_forward(x, weight, residual, eps, offset, eps_inside, k, onchip_limit, chunk)


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
    eps: float,
    offset: float,
    eps_inside: bool,
    k: int,
    onchip_limit: int,
    chunk: int,
) -> tuple[Tensor, Tensor]:
    return launch.rms_backward(dy, ds, s, weight, mean_square, eps, offset, eps_inside, k, onchip_limit, chunk)


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
    dx, dweight = (backward or torch.ops.normlab.rms_norm_backward)(
        dy, ds if ctx.has_residual else None, s, weight, mean_square, *ctx.config
    )
    return (dx, dweight if weight is not None else None, dx if ctx.has_residual else None) + (None,) * 6


rms_norm_forward.register_autograd(_rms_backward, setup_context=_rms_setup_context)


# ---------------------------------------------------------------- LayerNorm


@torch.library.custom_op("normlab::layer_norm_forward", mutates_args=())
def layer_norm_forward(
    x: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
    residual: Tensor | None,
    eps: float,
    stats: str,
    onchip_limit: int,
    chunk: int,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    return launch.layer_forward(x, weight, bias, residual, eps, stats, onchip_limit, chunk)


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


# ---------------------------------------------------------------- eager route

# None is a plain argument too: absent optional tensors need no tracing.
_PLAIN_TENSORS = frozenset((Tensor, torch.nn.Parameter, type(None)))


def _traced(*tensors) -> bool:
    """True when the custom op must be called: something above eager PyTorch wants to see it."""
    if (
        torch.compiler.is_compiling()
        or torch._C._len_torch_dispatch_stack()
        or torch._C._are_functorch_transforms_active()
    ):
        return True
    # Loops, not any(generator): this runs on every call, and a generator costs a µs of its own.
    for t in tensors:
        if type(t) not in _PLAIN_TENSORS:
            return True
    return False


def _needs_grad(*tensors) -> bool:
    if not torch.is_grad_enabled():
        return False
    for t in tensors:
        if t is not None and t.requires_grad:
            return True
    return False


# The eager Functions return only y, or (y, s) with a residual: the statistics stay on ctx and no
# gradient is materialised for them, nor for an s or y the loss does not use (set_materialize_grads
# off), so a backward launches the row kernel and the partials reduction and nothing else.


class _RmsNorm(torch.autograd.Function):
    """normlab::rms_norm_forward with its registered autograd, without the dispatcher (eager only)."""

    # forward(ctx, ...) rather than a separate setup_context: with one, every apply() binds its
    # arguments through inspect.signature, which costs more than the rest of the call.
    @staticmethod
    def forward(ctx, *inputs):
        ctx.set_materialize_grads(False)
        y, s, mean_square = launch.rms_forward(*inputs)
        _rms_setup_context(ctx, inputs, (y, s, mean_square))
        return (y, s) if ctx.has_residual else y

    @staticmethod
    def backward(ctx, dy, ds=None):
        # create_graph=True: through the op, so double backward fails as the op's does
        backward = None if torch.is_grad_enabled() else launch.rms_backward
        return _rms_backward(ctx, dy, ds, None, backward)


class _LayerNorm(torch.autograd.Function):
    """normlab::layer_norm_forward with its registered autograd, without the dispatcher (eager only)."""

    @staticmethod
    def forward(ctx, *inputs):
        ctx.set_materialize_grads(False)
        y, s, mean, rstd = launch.layer_forward(*inputs)
        _layer_setup_context(ctx, inputs, (y, s, mean, rstd))
        return (y, s) if ctx.has_residual else y

    @staticmethod
    def backward(ctx, dy, ds=None):
        backward = None if torch.is_grad_enabled() else launch.layer_backward
        return _layer_backward(ctx, dy, ds, None, None, backward)


# torch.autograd.Function.apply is a Python wrapper around the C++ apply: it inspects the class for a
# setup_context, checks for functorch transforms and rebuilds the argument tuple to unwrap functorch tensors
# left over from a finished transform (several µs a call). The eager route runs only with no transform active
# (_traced), so it calls the C++ apply itself and unwraps just its tensor arguments.
_C_APPLY = torch._C._FunctionBase.__dict__["apply"]
_unwrap_if_dead = torch._C._functorch.unwrap_if_dead
_RMS_APPLY = _C_APPLY.__get__(None, _RmsNorm)
_LAYER_APPLY = _C_APPLY.__get__(None, _LayerNorm)


def _unwrapped(t):
    return None if t is None else _unwrap_if_dead(t)


def rms_norm_forward_call(
    x, weight, residual, eps: float, offset: float, eps_inside: bool, k: int, onchip_limit: int, chunk: int
):
    """normlab::rms_norm_forward's (y, s, mean_square): through the op when traced, else the same launcher directly.

    With autograd the statistics stay on the Function's ctx: mean_square is None then, and so is s without a residual."""
    args = (x, weight, residual, eps, offset, eps_inside, k, onchip_limit, chunk)
    if _traced(x, weight, residual):
        return torch.ops.normlab.rms_norm_forward(*args)
    if _needs_grad(x, weight, residual):
        out = _RMS_APPLY(_unwrap_if_dead(x), _unwrapped(weight), _unwrapped(residual), *args[3:])
        return (*out, None) if residual is not None else (out, None, None)
    return launch.rms_forward(*args)


def layer_norm_forward_call(x, weight, bias, residual, eps: float, stats: str, onchip_limit: int, chunk: int):
    """normlab::layer_norm_forward's (y, s, mean, rstd), as rms_norm_forward_call (None for what autograd keeps)."""
    args = (x, weight, bias, residual, eps, stats, onchip_limit, chunk)
    if _traced(x, weight, bias, residual):
        return torch.ops.normlab.layer_norm_forward(*args)
    if _needs_grad(x, weight, bias, residual):
        out = _LAYER_APPLY(_unwrap_if_dead(x), _unwrapped(weight), _unwrapped(bias), _unwrapped(residual), *args[4:])
        return (*out, None, None) if residual is not None else (out, None, None, None)
    return launch.layer_forward(*args)
