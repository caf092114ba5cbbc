"""The "compile" backend: forward and backward each compiled by inductor, behind one autograd.Function.

Why not `torch.compile(composite)` and let AOT-autograd derive the backward:

* dynamo keeps at most `recompile_limit` (8) graphs per code object, and with
  `fullgraph=True` the 9th is a hard `FailOnRecompileLimitHit`. A model makes
  more than 8 call patterns easily: every hidden width (an nn.Parameter's shape
  is static to dynamo), dtype, residual-or-not and grad-or-not is a new graph.
  Here every *signature* (width, dtypes, which inputs are present, eps, offset,
  ε placement, casting mode, whether the weight needs a gradient) gets its own
  copy of the function's code object, so its own cache; within one signature
  only the row count varies, and it is marked dynamic (one graph, plus 1-row
  and few-row specialisations). Empty inputs never reach the compiler.
* AOT-autograd donates the forward's saved buffers to the backward, which
  makes `backward(retain_graph=True)` fail. Here both halves are inference
  graphs, so nothing is donated; a second backward just runs it again.
* The RMSNorm backward written out by hand is one row reduction (sum g·s) and
  one column reduction (dweight). Inductor makes the first a loop over rows
  that keeps each row in cache, but the column sum becomes a second loop nest
  that reads dy and s again; that extra pass is why auto uses the hand-written
  kernel (normlab.norms.backends.cpp) for float32/float64 training on CPU.

With `create_graph=True` (double backward) the backward is computed with
differentiable eager ops instead, so higher derivatives stay correct.

Inside an outer `torch.compile` or `torch.export`, the caller traces the
composite instead (functional._run_compiled), so the outer graph fuses it.
"""

from __future__ import annotations

import threading
import types

import torch

from normlab.norms.validation import statistics_dtype

_LOCK = threading.Lock()
_CACHE: dict[tuple, object] = {}


def _fresh_code(function, tag: str):
    """A copy of `function` with its own code object: dynamo's graph cache (and its recompile limit) is per code object."""
    code = function.__code__.replace(co_name=f"{function.__name__}__{tag}")
    return types.FunctionType(code, function.__globals__, code.co_name, function.__defaults__, function.__closure__)


def compiled_for(function, key: tuple):
    """torch.compile(function) for one signature `key`, built once and cached."""
    full_key = (function.__name__,) + key
    compiled = _CACHE.get(full_key)
    if compiled is None:
        with _LOCK:
            compiled = _CACHE.get(full_key)
            if compiled is None:
                tag = str(len(_CACHE))
                # dynamic=None with the row dimension marked dynamic (_rows_dynamic): the width is part of
                # the key, so inductor specialises the inner loop on it (at 8192x256 fp32 the forward
                # took 0.34 ms static-width against 0.53 ms fully dynamic, the backward 0.75 against 1.07).
                compiled = torch.compile(_fresh_code(function, tag), fullgraph=True)
                _CACHE[full_key] = compiled
    return compiled


def _rows_dynamic(*tensors) -> None:
    """Tell dynamo the row count varies (so one graph serves every batch and sequence length)."""
    for t in tensors:
        if t is not None and t.dim() == 2:
            torch._dynamo.maybe_mark_dynamic(t, 0)


def signatures_compiled() -> int:
    """How many distinct signatures have a compiled function (for tests and diagnostics)."""
    return len(_CACHE)


# ---------------------------------------------------------------- RMSNorm math (2-D, no autograd)

# Rows summed together in the first stage of a parameter gradient's column sum.
COLUMN_BLOCK = 64


def _column_sum(t):
    """t.sum(0), in two stages so inductor's loop stays in cache.

    A plain column sum over many rows becomes, in inductor's C++, one pass per
    16-column strip down every row: strided over the whole tensor, a TLB miss
    per row. Summing blocks of COLUMN_BLOCK consecutive rows first keeps each
    block (64 rows) in L1/L2 while its strips are summed; measured on the 2-core
    VM at 8192x1024 fp32 it halves the time of the weight gradient."""
    rows = t.shape[0]
    if rows < 2 * COLUMN_BLOCK:  # a guard: few rows get their own (one-stage) graph
        return t.sum(0)
    blocks = rows // COLUMN_BLOCK
    whole = blocks * COLUMN_BLOCK
    return t[:whole].reshape(blocks, COLUMN_BLOCK, t.shape[1]).sum(1).sum(0) + t[whole:].sum(0)


def _inverse_rms(ms, eps: float, eps_inside: bool):
    return torch.rsqrt(ms + eps) if eps_inside else 1.0 / (torch.sqrt(ms) + eps)


def rms_forward_math(
    x, weight, residual, eps: float, offset: float, eps_inside: bool, k: int | None, s_dtype: torch.dtype, llama: bool
):
    """Returns (y in x's dtype, s (None without residual), ms in the statistics dtype)."""
    s = x.to(s_dtype) if residual is None else x.to(s_dtype) + residual.to(s_dtype)
    s32 = s.to(statistics_dtype(s_dtype))
    head = s32 if k is None else s32[:, :k]
    ms = (head * head).mean(-1, keepdim=True)
    normalised = s32 * _inverse_rms(ms, eps, eps_inside)
    if weight is None:
        y = normalised.to(x.dtype)
    elif llama:
        # transformers' LlamaRMSNorm: round the normalised row to the input dtype, then apply the gain.
        gain = weight + offset if offset else weight
        y = (gain * normalised.to(x.dtype)).to(x.dtype)
    else:
        y = (normalised * (offset + weight.to(s32.dtype))).to(x.dtype)
    return y, (None if residual is None else s), ms


def rms_backward_math(
    dy,
    ds,
    s,
    weight,
    ms,
    eps: float,
    offset: float,
    eps_inside: bool,
    k: int | None,
    llama: bool,
    x_dtype: torch.dtype,
    need_dweight: bool,
):
    """(ds_total in s's dtype, dweight or None). Written out so inductor fuses it into row loops."""
    compute = statistics_dtype(s.dtype)
    s32 = s.to(compute)
    inv = _inverse_rms(ms, eps, eps_inside)
    if weight is None:
        g = dy.to(compute)
    elif llama:
        gain = weight + offset if offset else weight
        g = (dy * gain).to(x_dtype).to(compute)
    else:
        g = dy.to(compute) * (offset + weight.to(compute))
    dot = (g * s32).sum(-1, keepdim=True)
    if eps_inside:
        slope = inv * inv * inv
    else:
        rms = torch.sqrt(ms)
        slope = torch.where(rms > 0, inv * inv / torch.where(rms > 0, rms, 1.0), 0.0)
    n = s32.shape[-1] if k is None else k
    correction = s32 * (dot * slope / n)
    if k is not None:
        correction = torch.where(torch.arange(s32.shape[-1], device=s.device) < k, correction, 0.0)
    dx = g * inv - correction
    if ds is not None:
        dx = dx + ds.to(compute)
    dweight = None
    if need_dweight and weight is not None:
        if llama:
            dweight = _column_sum(dy.to(compute) * (s32 * inv).to(x_dtype).to(compute)).to(weight.dtype)
        else:
            dweight = _column_sum(dy.to(compute) * (s32 * inv)).to(weight.dtype)
    return dx.to(s.dtype), dweight


# ---------------------------------------------------------------- LayerNorm math


def layer_forward_math(x, weight, bias, residual, eps: float, s_dtype: torch.dtype):
    """Returns (y in x's dtype, s or None, mean, rstd)."""
    s = x.to(s_dtype) if residual is None else x.to(s_dtype) + residual.to(s_dtype)
    s32 = s.to(statistics_dtype(s_dtype))
    mean = s32.mean(-1, keepdim=True)
    centred = s32 - mean
    rstd = torch.rsqrt((centred * centred).mean(-1, keepdim=True) + eps)
    y = centred * rstd
    if weight is not None:
        y = y * weight.to(s32.dtype)
    if bias is not None:
        y = y + bias.to(s32.dtype)
    return y.to(x.dtype), (None if residual is None else s), mean, rstd


def layer_backward_math(dy, ds, s, weight, mean, rstd, need_dweight: bool, need_dbias: bool, bias_dtype):
    compute = statistics_dtype(s.dtype)
    xhat = (s.to(compute) - mean) * rstd
    dy32 = dy.to(compute)
    g = dy32 if weight is None else dy32 * weight.to(compute)
    n = s.shape[-1]
    dx = rstd * (g - g.sum(-1, keepdim=True) / n - xhat * ((g * xhat).sum(-1, keepdim=True) / n))
    if ds is not None:
        dx = dx + ds.to(compute)
    dweight = _column_sum(dy32 * xhat).to(weight.dtype) if need_dweight and weight is not None else None
    dbias = _column_sum(dy32).to(bias_dtype) if need_dbias else None
    return dx.to(s.dtype), dweight, dbias


# ---------------------------------------------------------------- autograd


def _dtype_of(t):
    return None if t is None else t.dtype


def _detached(t):
    return None if t is None else t.detach()


class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, residual, eps, offset, eps_inside, k, s_dtype, llama):
        key = (
            "rms",
            x.shape[-1],
            x.dtype,
            _dtype_of(weight),
            _dtype_of(residual),
            s_dtype,
            eps,
            offset,
            eps_inside,
            k,
            llama,
        )
        _rows_dynamic(x, residual)
        y, s, ms = compiled_for(rms_forward_math, key)(
            x.detach(), _detached(weight), _detached(residual), eps, offset, eps_inside, k, s_dtype, llama
        )
        ctx.config = (eps, offset, eps_inside, k, llama, x.dtype, _dtype_of(residual))
        ctx.save_for_backward(x if s is None else s, weight, ms)
        return y, s

    @staticmethod
    def backward(ctx, dy, ds):
        s, weight, ms = ctx.saved_tensors
        eps, offset, eps_inside, k, llama, x_dtype, r_dtype = ctx.config
        need_dweight = weight is not None and ctx.needs_input_grad[1]
        if dy is None:
            dy = torch.zeros_like(s, dtype=x_dtype)
        if (
            torch.is_grad_enabled()
        ):  # create_graph=True: differentiable eager ops, ms recomputed so it is part of the graph
            s32 = s.to(statistics_dtype(s.dtype))
            head = s32 if k is None else s32[:, :k]
            ms = (head * head).mean(-1, keepdim=True)
            dsum, dweight = rms_backward_math(
                dy, ds, s, weight, ms, eps, offset, eps_inside, k, llama, x_dtype, need_dweight
            )
        else:
            key = (
                "rms_backward",
                s.shape[-1],
                dy.dtype,
                _dtype_of(ds),
                s.dtype,
                _dtype_of(weight),
                eps,
                offset,
                eps_inside,
                k,
                llama,
                x_dtype,
                need_dweight,
            )
            _rows_dynamic(dy, ds, s, ms)
            dsum, dweight = compiled_for(rms_backward_math, key)(
                dy.detach(),
                _detached(ds),
                s.detach(),
                _detached(weight),
                ms,
                eps,
                offset,
                eps_inside,
                k,
                llama,
                x_dtype,
                need_dweight,
            )
        dx = dsum.to(x_dtype)
        dresidual = None if r_dtype is None else dsum.to(r_dtype)
        return dx, dweight, dresidual, None, None, None, None, None, None


class _LayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, residual, eps, s_dtype):
        key = ("layer", x.shape[-1], x.dtype, _dtype_of(weight), _dtype_of(bias), _dtype_of(residual), s_dtype, eps)
        _rows_dynamic(x, residual)
        y, s, mean, rstd = compiled_for(layer_forward_math, key)(
            x.detach(), _detached(weight), _detached(bias), _detached(residual), eps, s_dtype
        )
        ctx.config = (x.dtype, _dtype_of(residual), _dtype_of(bias))
        ctx.eps = eps
        ctx.save_for_backward(x if s is None else s, weight, mean, rstd)
        return y, s

    @staticmethod
    def backward(ctx, dy, ds):
        s, weight, mean, rstd = ctx.saved_tensors
        x_dtype, r_dtype, bias_dtype = ctx.config
        need_dweight = weight is not None and ctx.needs_input_grad[1]
        need_dbias = bias_dtype is not None and ctx.needs_input_grad[2]
        if dy is None:
            dy = torch.zeros_like(s, dtype=x_dtype)
        if torch.is_grad_enabled():  # create_graph=True: recompute the statistics inside the graph
            s32 = s.to(statistics_dtype(s.dtype))
            mean = s32.mean(-1, keepdim=True)
            rstd = torch.rsqrt(((s32 - mean) ** 2).mean(-1, keepdim=True) + ctx.eps)
            dsum, dweight, dbias = layer_backward_math(
                dy, ds, s, weight, mean, rstd, need_dweight, need_dbias, bias_dtype
            )
        else:
            key = (
                "layer_backward",
                s.shape[-1],
                dy.dtype,
                _dtype_of(ds),
                s.dtype,
                _dtype_of(weight),
                need_dweight,
                need_dbias,
                bias_dtype,
            )
            _rows_dynamic(dy, ds, s, mean, rstd)
            dsum, dweight, dbias = compiled_for(layer_backward_math, key)(
                dy.detach(),
                _detached(ds),
                s.detach(),
                _detached(weight),
                mean,
                rstd,
                need_dweight,
                need_dbias,
                bias_dtype,
            )
        dx = dsum.to(x_dtype)
        dresidual = None if r_dtype is None else dsum.to(r_dtype)
        return dx, dweight, dbias, dresidual, None, None


def _rows(t, n_features):
    return None if t is None else t.reshape(-1, n_features).contiguous()


def compiled_rms_norm(
    x, weight, residual, eps: float, offset: float, eps_inside: bool, k: int | None, s_dtype: torch.dtype, llama: bool
):
    """(y, s or None) through the compiled forward and backward; inputs of any rank are seen as 2-D."""
    shape, n = x.shape, x.shape[-1]
    if x.numel() == 0:  # nothing to compile for; the composite gives correctly shaped, differentiable empties
        y, s, _ = rms_forward_math(
            x.reshape(0, n), weight, _rows(residual, n), eps, offset, eps_inside, k, s_dtype, llama
        )
        return y.reshape(shape), (None if s is None else s.reshape(shape))
    y, s = _RMSNorm.apply(
        _rows(x, n), weight, _rows(residual, n), float(eps), float(offset), bool(eps_inside), k, s_dtype, bool(llama)
    )
    return y.reshape(shape), (None if s is None else s.reshape(shape))


def compiled_layer_norm(x, weight, bias, residual, eps: float, s_dtype: torch.dtype):
    """(y, s or None) through the compiled forward and backward; inputs of any rank are seen as 2-D."""
    shape, n = x.shape, x.shape[-1]
    if x.numel() == 0:
        y, s, _, _ = layer_forward_math(x.reshape(0, n), weight, bias, _rows(residual, n), eps, s_dtype)
        return y.reshape(shape), (None if s is None else s.reshape(shape))
    y, s = _LayerNorm.apply(_rows(x, n), weight, bias, _rows(residual, n), float(eps), s_dtype)
    return y.reshape(shape), (None if s is None else s.reshape(shape))
