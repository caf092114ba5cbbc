"""Launchers: allocate outputs, pick on-chip or chunked kernels, size the grid.

One launcher per direction, `forward` and `backward`, for both norms: `centred` picks LayerNorm (True) or
RMSNorm (False), as the kernels' CENTRED switch does (norm_kernels: one kernel family). `rms_forward`,
`layer_forward`, `rms_backward` and `layer_backward` are the same launchers with each norm's own arguments.

These are plain functions with no autograd; `normlab.norms.backends.triton.custom_ops` wraps
them as torch.library ops and as the eager autograd.Function. Inputs of any leading shape are
viewed as (rows, N): the kernels take unit column stride and one row stride, so a view whose
leading dimensions collapse to one stride (a slice qkv[..., :d]) is read in place. The on-chip
kernels also take a second row stride (rows as (token, head) pairs, _row_view), so one head of a QKV
split (qkv.view(B, T, 3, H, Dh)[:, :, 0], tokens and heads two strides apart) is read in place there
too, for either norm; rows past the on-chip limits get it copied by reshape. A last
dimension with stride != 1 is copied to be contiguous.

A backward launches its row kernel, then (with a weight or bias) reduce_kernels.sum_partials, which
sums the per-program partials and casts them: no ATen zeros, sums or casts.

`onchip_limit` is the longest row (in elements) kept whole in registers;
longer rows go to the chunked kernels, streamed `chunk` elements at a time.
"""

from __future__ import annotations

import functools

import torch
import triton

from normlab.norms.backends.triton import norm_kernels, reduce_kernels, tuning
from normlab.norms.backends.triton._runtime import (
    check_triton_device,
    kernels_interpreted,
    patch_interpreter_bf16,
    patch_interpreter_for_numpy_2_4,
    warps_for,
)
from normlab.norms.backends.triton.direct_launch import DirectLauncher
from normlab.norms.validation import statistics_dtype

# 16K fp32 values per row is 32 values per thread at 16 warps: the most that
# stays in registers on current NVIDIA parts without spilling.
ONCHIP_LIMIT = 16384
# The backward holds about twice as many live values per element (s, dy, the
# gain, dx, the dweight accumulator): at 16K it spills registers on sm_90
# (ptxas, scripts/compile_kernels_sm90.py), at 8K with 16 warps it does not.
BACKWARD_ONCHIP_LIMIT = 8192
# 4K elements per chunk: 16 KB of fp32 in flight per program, enough to hide
# latency while a row streams through L2.
CHUNK = 4096
# Target elements per on-chip program; short rows are packed several to a tile
# so each program still moves enough bytes.
TILE_ELEMENTS = 4096
LAYER_STATS = ("two_pass", "welford")
# The partials reduction: LINES program lines by REDUCE_BLOCK columns per step, one program per column block.
REDUCE_LINES, REDUCE_BLOCK = 32, 64

INTERPRETED = kernels_interpreted(norm_kernels.forward_onchip)
if INTERPRETED:
    patch_interpreter_for_numpy_2_4()
    patch_interpreter_bf16()

# Each kernel's launcher: compiled kernels are launched without JITFunction.run's binding (direct_launch).
SUM_PARTIALS = DirectLauncher(reduce_kernels.sum_partials)
FORWARD_ONCHIP = DirectLauncher(norm_kernels.forward_onchip)
FORWARD_CHUNKED = DirectLauncher(norm_kernels.forward_chunked)
BACKWARD_ONCHIP = DirectLauncher(norm_kernels.backward_onchip)
BACKWARD_CHUNKED = DirectLauncher(norm_kernels.backward_chunked)


def _empty(shape, dtype, device) -> torch.Tensor:
    # Every output goes through here, so tests can poison (NaN-fill) them.
    return torch.empty(shape, dtype=dtype, device=device)


_ALLOCATE = _empty


def _empty_like(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A contiguous output of t's shape: torch.empty_like costs a third of torch.empty(shape, ...) on the host
    (it skips the factory's argument parsing). Through `_empty` when a test has replaced it."""
    if _empty is _ALLOCATE:
        return torch.empty_like(t, dtype=dtype, memory_format=torch.contiguous_format)
    return _empty(t.shape, dtype, t.device)


# statistics_dtype per dtype, looked up rather than promoted on every call
_STATISTICS_DTYPES = {
    dtype: statistics_dtype(dtype) for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64)
}


def _rows(t: torch.Tensor, n_features: int) -> torch.Tensor:
    t2 = t if t.dim() == 2 else t.reshape(-1, n_features)  # a 2-D tensor needs no view
    if n_features > 1 and t2.stride(1) != 1:
        t2 = t2.contiguous()
    return t2


def _stride_groups(t: torch.Tensor) -> list[tuple[int, int]]:
    """The leading dimensions of t merged where they step evenly: [(size, stride)], outermost first."""
    groups: list[tuple[int, int]] = []
    for size, stride in zip(t.shape[:-1], t.stride()[:-1]):
        if size == 1:
            continue
        if groups and groups[-1][1] == stride * size:
            groups[-1] = (groups[-1][0] * size, stride)
        else:
            groups.append((size, stride))
    return groups


def _row_view(t: torch.Tensor, n_features: int) -> tuple[torch.Tensor, int, int, int]:
    """t as the on-chip kernels address it, row r at (r // heads) * token stride + (r % heads) * head stride
    (norm_kernels._row_offsets): (the tensor launched, heads, token stride, head stride).

    A view whose leading dimensions collapse to one stride is launched as _rows gives it, heads 1. One that needs
    two (one head of a QKV split, qkv.view(B, T, 3, H, Dh)[:, :, 0]: tokens 3 H Dh apart, heads Dh apart) is
    launched as a (tokens, heads, N) view of the same storage, not copied. Anything else is copied, as _rows
    does. Row r is the r-th of t's leading indices in row-major order, as for a contiguous t."""
    if t.dim() == 2 and (t.stride(1) == 1 or n_features <= 1):  # as _rows returns it, without the call
        return t, 1, t.stride(0), 0
    if t.dim() > 2 and n_features > 1 and t.stride(-1) == 1 and t.numel() and not t.is_contiguous():
        groups = _stride_groups(t)
        if len(groups) == 2:
            (tokens, token_stride), (heads, head_stride) = groups
            view = t.as_strided((tokens, heads, n_features), (token_stride, head_stride, 1))
            return view, heads, token_stride, head_stride
    t2 = _rows(t, n_features)
    return t2, 1, t2.stride(0), 0


def _row_strides(t: torch.Tensor, n_features: int, heads: int) -> tuple[torch.Tensor, int, int]:
    """(the tensor launched, token stride, head stride) of t (a residual, dy, ds) in the row numbering of a launch
    whose rows are split into `heads` (_row_view of x or s): one row stride s is (s * heads, s); the same split
    is read in place; another one is copied."""
    view, own_heads, token_stride, head_stride = _row_view(t, n_features)
    if own_heads == heads:
        return view, token_stride, head_stride
    if own_heads == 1:
        return view, token_stride * heads, token_stride
    t2 = t.contiguous().view(-1, n_features)
    return t2, n_features * heads, n_features


def _cdiv(a: int, b: int) -> int:
    # triton.cdiv is a constexpr function: a few µs per host call, for one integer division.
    return -(-a // b)


# The launch configuration is a pure function of a few integers, and triton's helpers
# (next_power_of_2, cdiv) cost microseconds per host call: computed once per shape.
# Batch invariance: the tile (ROWS x BLOCK, and with it num_warps and the layout of every row reduction) depends on
# the width alone, never on the row count, so a row is summed in one order whatever the call (tests/
# test_batch_invariance.py). A call of fewer rows than a tile leaves the tile's other rows masked.
@functools.lru_cache(maxsize=4096)
def _tile(n_rows: int, n_features: int) -> tuple[int, int]:
    block = triton.next_power_of_2(n_features)
    return max(1, TILE_ELEMENTS // block), block


@functools.lru_cache(maxsize=1024)
def _chunk(n_features: int, chunk: int) -> int:
    if chunk < 1 or chunk & (chunk - 1):
        raise ValueError(f"chunk must be a positive power of two, got {chunk}")
    return min(chunk, triton.next_power_of_2(n_features))


@functools.lru_cache(maxsize=4096)
def _grid(work_items: int, device: torch.device, one_tile_per_program: bool, programs_per_sm: int) -> tuple[int]:
    """The launch grid, (programs,): one per tile or row (a sweep variant), or the persistent grid
    (tuning.launch_programs). Cached: a pure function of these, asked on every call (a device's SM count is fixed)."""
    if one_tile_per_program:
        return (work_items,)
    return (tuning.launch_programs(work_items, device, programs_per_sm),)


def _tile_rows(rows: int, n_rows: int, config: tuning.KernelConfig) -> int:
    """The tile height: the default's, or the config's (a sweep variant); never the row count's (see _tile)."""
    return rows if config.rows is None else config.rows


def _forward_onchip_limit(onchip_limit: int, element_size: int, has_residual: bool, config) -> int:
    # The on-chip forward keeps the next row in flight in two shared-memory buffers of each stream it loads (x,
    # and the residual): the widest row it takes is the widest whose buffers fit tuning.PIPELINE_SHARED_BUDGET
    # (fp32 with a residual: 8192; two buffers of a 16K row of x and of the residual would take 256 KiB). Wider
    # rows go chunked, whose loop keeps the next chunks in flight. A config given by the caller (the sweep) is
    # taken as given.
    if config is not None:
        return onchip_limit
    row_bytes = 2 * element_size * (2 if has_residual else 1)  # a row element's bytes in the two stages
    return min(onchip_limit, 1 << ((tuning.PIPELINE_SHARED_BUDGET // row_bytes).bit_length() - 1))


def _backward_onchip_limit(kind: str, onchip_limit: int, element_size: int, config) -> int:
    # The table's backward spills above BACKWARD_ONCHIP_LIMIT (unless a sweep measured a variant that does not);
    # a config given by the caller (the sweep) is taken as given, and onchip_limit alone picks its path.
    if config is not None:
        return onchip_limit
    return min(onchip_limit, tuning.backward_onchip_limit(kind, element_size, BACKWARD_ONCHIP_LIMIT))


def _prepare(x, residual, onchip_limit, chunk):
    check_triton_device(x, INTERPRETED)
    if residual is not None and residual.dtype != x.dtype:
        raise TypeError(f"residual has dtype {residual.dtype} but x has {x.dtype}; cast one to match")
    if onchip_limit < 0:
        raise ValueError(f"onchip_limit must be >= 0 (0 forces the chunked kernels), got {onchip_limit}")
    n_features = x.shape[-1]
    return n_features, _rows(x, n_features), None if residual is None else _rows(residual, n_features)


def _prepare_backward(dy, ds, s):
    """Row views of s, dy and ds (None when absent), and dx allocated in s's layout."""
    check_triton_device(s, INTERPRETED)
    n_features = s.shape[-1]
    ds2 = None if ds is None else _rows(ds, n_features)
    return n_features, _rows(s, n_features), _rows(dy, n_features), ds2, _empty_like(s, s.dtype)


def _prepare_backward_split(dy, ds, s, onchip: bool):
    """_prepare_backward for the backward: on chip, s as _row_view gives it, dy and ds as _row_strides in its
    rows, and (heads, the token and head strides of dy, ds, s); chunked, as _prepare_backward, with heads 1."""
    if not onchip:
        n_features, s2, dy2, ds2, dx = _prepare_backward(dy, ds, s)
        ds_stride = s2.stride(0) if ds2 is None else ds2.stride(0)
        return n_features, s2, dy2, ds2, dx, (1, dy2.stride(0), 0, ds_stride, 0, s2.stride(0), 0)
    check_triton_device(s, INTERPRETED)
    n_features = s.shape[-1]
    s2, heads, s_token, s_head = _row_view(s, n_features)
    dy2, dy_token, dy_head = _row_strides(dy, n_features, heads)
    ds2, ds_token, ds_head = (None, s_token, s_head) if ds is None else _row_strides(ds, n_features, heads)
    split = (heads, dy_token, dy_head, ds_token, ds_head, s_token, s_head)
    return n_features, s2, dy2, ds2, _empty_like(s, s.dtype), split


def _partials(programs: int, present: bool, stats: torch.dtype, placeholder: torch.Tensor) -> torch.Tensor:
    # An absent parameter's partials are never touched by the kernels: any tensor of the right dtype stands in.
    return _empty((programs, placeholder.shape[-1]), stats, placeholder.device) if present else placeholder


def _sum_partials(dw_partial, db_partial, dweight_dtype, dbias_dtype, n_features: int, like: torch.Tensor):
    """(dweight, dbias): the partial lines summed and cast by one kernel; an empty tensor for an absent parameter."""
    dw = _empty((n_features,), dweight_dtype, like.device) if dweight_dtype is not None else like.new_empty(0)
    db = _empty((n_features,), dbias_dtype, like.device) if dbias_dtype is not None else like.new_empty(0)
    if dweight_dtype is None and dbias_dtype is None:
        return dw, db
    # Absent ones get a present one's tensors as placeholders (untouched under their HAS_ flag).
    dw_partial, db_partial = (dw_partial, db_partial) if dweight_dtype is not None else (db_partial, db_partial)
    db_partial = db_partial if dbias_dtype is not None else dw_partial
    dw_out, db_out = (dw if dweight_dtype is not None else db), (db if dbias_dtype is not None else dw)
    block = _reduce_block(n_features)
    SUM_PARTIALS(
        (_cdiv(n_features, block),),
        dw_partial,
        db_partial,
        dw_out,
        db_out,
        dw_partial.shape[0],
        n_features,
        HAS_WEIGHT=dweight_dtype is not None,
        HAS_BIAS=dbias_dtype is not None,
        LINES=REDUCE_LINES,
        BLOCK=block,
        num_warps=warps_for(REDUCE_LINES * block),
    )
    return dw, db


@functools.lru_cache(maxsize=1024)
def _reduce_block(n_features: int) -> int:
    return min(REDUCE_BLOCK, triton.next_power_of_2(n_features))


def _as(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    # .to() to the same dtype returns t itself, but only after a trip through the dispatcher.
    return t if t.dtype == dtype else t.to(dtype)


# ---------------------------------------------------------------- one launcher per direction


def forward(
    x,
    weight,
    bias,
    residual,
    eps: float,
    centred: bool,
    offset: float = 0.0,
    eps_inside: bool = True,
    k: int | None = None,
    stats: str = "welford",
    onchip_limit: int = ONCHIP_LIMIT,
    chunk: int = CHUNK,
    config: tuning.KernelConfig | None = None,
):
    """RMSNorm (centred False) or LayerNorm (centred True): (y, s, stat, rstd). s = x + residual (an empty tensor
    without residual); stat is RMSNorm's mean square or LayerNorm's mean per row, rstd LayerNorm's 1/std (stat
    itself for RMSNorm). RMSNorm only: offset, eps_inside, k (the features its RMS takes, None: all); LayerNorm
    only: bias, stats (the chunked kernel's statistics, "two_pass" or "welford").

    `config` replaces the tuning table's launch (the sweep's variants); onchip_limit still picks the path."""
    if centred and stats not in LAYER_STATS:
        raise ValueError(f"stats must be one of {LAYER_STATS}, got {stats!r}")
    n_features = x.shape[-1]
    onchip_limit = _forward_onchip_limit(onchip_limit, x.element_size(), residual is not None, config)
    if n_features > onchip_limit or onchip_limit < 0:  # chunked: one row stride
        n_features, x2, r2 = _prepare(x, residual, onchip_limit, chunk)
        split = (1, x2.stride(0), 0, 0, 0)
    else:  # on chip: x (and the residual) as _row_view / _row_strides give them, (heads, x's strides, r's)
        check_triton_device(x, INTERPRETED)
        if residual is not None and residual.dtype != x.dtype:
            raise TypeError(f"residual has dtype {residual.dtype} but x has {x.dtype}; cast one to match")
        x2, heads, x_token, x_head = _row_view(x, n_features)
        r2, r_token, r_head = None, 0, 0
        if residual is not None:
            r2, r_token, r_head = _row_strides(residual, n_features, heads)
        split = (heads, x_token, x_head, r_token, r_head)
    n_rows = x2.shape[0] * (x2.shape[1] if x2.dim() == 3 else 1)
    y = _empty_like(x, x.dtype)
    s = _empty_like(x, x.dtype) if residual is not None else x.new_empty(0)
    stats_shape, stats_dtype = x.shape[:-1], _STATISTICS_DTYPES.get(x.dtype) or statistics_dtype(x.dtype)
    stat = _empty(stats_shape, stats_dtype, x.device)
    rstd = _empty(stats_shape, stats_dtype, x.device) if centred else stat
    if n_rows == 0:
        return y, s, stat, rstd
    k = n_features if k is None else k
    w = x2 if weight is None else weight.contiguous()
    b = x2 if bias is None else bias.contiguous()
    r, s_out = (x2, x2) if r2 is None else (r2, s)
    kind = "layer" if centred else "rms"
    flags = dict(
        HAS_RESIDUAL=r2 is not None,
        HAS_WEIGHT=weight is not None,
        HAS_BIAS=bias is not None,
        CENTRED=centred,
        EPS_INSIDE=eps_inside,
    )
    if n_features <= onchip_limit:
        rows, block = _tile(n_rows, n_features)
        config = config or tuning.onchip_forward(kind, rows * block, x.element_size(), rows)
        if config.rows is not None:  # _tile_rows
            rows = config.rows
        FORWARD_ONCHIP(
            _grid(-(-n_rows // rows), x.device, config.one_tile_per_program, config.programs_per_sm),
            x2,
            r,
            w,
            b,
            y,
            s_out,
            stat,
            rstd,
            n_rows,
            n_features,
            k,
            split[1],
            split[3] if r2 is not None else split[1],
            split[0],
            split[2],
            split[4] if r2 is not None else split[2],
            eps,
            offset,
            **flags,
            ROWS=rows,
            BLOCK=block,
            STAGES=config.stages,
            RELOAD=config.reload,
            num_warps=config.warps,
        )
    else:
        chunk = _chunk(n_features, chunk)
        config = config or tuning.chunked_forward(kind, chunk, x.element_size())
        FORWARD_CHUNKED(
            _grid(n_rows, x.device, config.one_tile_per_program, config.programs_per_sm),
            x2,
            r,
            w,
            b,
            y,
            s_out,
            stat,
            rstd,
            n_rows,
            n_features,
            k,
            n_features if r2 is not None else k,
            x2.stride(0),
            r.stride(0),
            eps,
            offset,
            **flags,
            CHUNK=chunk,
            STAGES=config.stages,
            WELFORD=centred and stats == "welford",
            num_warps=config.warps,
            maxnreg=config.registers,
        )
    return y, s, stat, rstd


def backward(
    dy,
    ds,
    s,
    weight,
    stat,
    rstd,
    has_bias: bool,
    centred: bool,
    eps: float = 0.0,
    offset: float = 0.0,
    eps_inside: bool = True,
    k: int | None = None,
    onchip_limit: int = ONCHIP_LIMIT,
    chunk: int = CHUNK,
    config: tuning.KernelConfig | None = None,
):
    """(dx, dweight, dbias) of forward's norm from its saved (stat, rstd); dx also includes ds (the gradient
    reaching s = x + residual directly); empty tensors stand for absent parameters. eps, offset, eps_inside and k
    are RMSNorm's (LayerNorm's backward needs only mean and rstd). `config` as in forward."""
    kind = "layer" if centred else "rms"
    onchip = s.shape[-1] <= _backward_onchip_limit(kind, onchip_limit, s.element_size(), config)
    n_features, s2, dy2, ds2, dx, split = _prepare_backward_split(dy, ds, s, onchip)
    n_rows = s2.shape[0] * (s2.shape[1] if s2.dim() == 3 else 1)
    stats = _STATISTICS_DTYPES.get(s.dtype) or statistics_dtype(s.dtype)
    param_dtype = weight.dtype if weight is not None else s.dtype
    if n_rows == 0:
        zeros = lambda present: (
            torch.zeros(n_features, dtype=param_dtype, device=s.device) if present else s.new_empty(0)
        )
        return dx, zeros(weight is not None), zeros(has_bias)
    k = n_features if k is None else k
    w = s2 if weight is None else weight.contiguous()
    ds_arg = s2 if ds2 is None else ds2
    flags = dict(
        HAS_DS=ds2 is not None, HAS_WEIGHT=weight is not None, HAS_BIAS=has_bias, CENTRED=centred, EPS_INSIDE=eps_inside
    )
    stat2 = stat.reshape(-1)
    rstd2 = rstd.reshape(-1) if centred else stat2
    if onchip:
        rows, block = _tile(n_rows, n_features)
        config = config or tuning.onchip_backward(kind, rows * block, s.element_size())
        if config.rows is not None:  # _tile_rows
            rows = config.rows
        grid = _grid(-(-n_rows // rows), s.device, config.one_tile_per_program, config.programs_per_sm)
        programs = grid[0]
        dw_partial = _partials(programs, weight is not None, stats, s2)
        db_partial = _partials(programs, has_bias, stats, s2)
        BACKWARD_ONCHIP(
            grid,
            dy2,
            ds_arg,
            s2,
            w,
            stat2,
            rstd2,
            dx,
            dw_partial,
            db_partial,
            n_rows,
            n_features,
            k,
            split[1],
            split[3],
            split[5],
            split[0],
            split[2],
            split[4],
            split[6],
            eps,
            offset,
            **flags,
            ROWS=rows,
            BLOCK=block,
            STAGES=config.stages,
            RELOAD=config.reload,
            num_warps=config.warps,
        )
    else:
        chunk = _chunk(n_features, chunk)
        config = config or tuning.chunked_backward(kind, chunk, s.element_size(), n_features)
        grid = _grid(-(-n_rows // config.group), s.device, config.one_tile_per_program, config.programs_per_sm)
        programs = grid[0]
        dw_partial = _partials(programs, weight is not None, stats, s2)
        db_partial = _partials(programs, has_bias, stats, s2)
        chunk = max(1, chunk // config.group)  # GROUP rows of chunk / GROUP: a tile of the same size
        BACKWARD_CHUNKED(
            grid,
            dy2,
            ds_arg,
            s2,
            w,
            stat2,
            rstd2,
            dx,
            dw_partial,
            db_partial,
            n_rows,
            n_features,
            k,
            dy2.stride(0),
            ds_arg.stride(0),
            s2.stride(0),
            eps,
            offset,
            **flags,
            GROUP=config.group,
            CHUNK=chunk,
            STAGES=config.stages,
            num_warps=config.warps,
            maxnreg=config.registers,
        )
    return (dx,) + _sum_partials(
        dw_partial,
        db_partial,
        None if weight is None else weight.dtype,
        param_dtype if has_bias else None,
        n_features,
        s,
    )


# ---------------------------------------------------------------- the two norms' argument orders

# For the callers that name one norm (custom_ops' backward, variants, the scripts): forward and backward with the
# other norm's arguments filled in, and the statistics each norm saves.


def rms_forward(x, weight, residual, eps, offset, eps_inside, k, onchip_limit=ONCHIP_LIMIT, chunk=CHUNK, config=None):
    """RMSNorm's (y, s, ms): forward with centred False."""
    return forward(
        x, weight, None, residual, eps, False, offset, eps_inside, k, "welford", onchip_limit, chunk, config
    )[:3]


def rms_backward(
    dy, ds, s, weight, ms, eps, offset, eps_inside, k, onchip_limit=ONCHIP_LIMIT, chunk=CHUNK, config=None
):
    """RMSNorm's (dx, dweight): backward with centred False."""
    return backward(dy, ds, s, weight, ms, ms, False, False, eps, offset, eps_inside, k, onchip_limit, chunk, config)[
        :2
    ]


def layer_forward(x, weight, bias, residual, eps, stats="welford", onchip_limit=ONCHIP_LIMIT, chunk=CHUNK, config=None):
    """LayerNorm's (y, s, mean, rstd): forward with centred True."""
    return forward(x, weight, bias, residual, eps, True, 0.0, True, None, stats, onchip_limit, chunk, config)


def layer_backward(dy, ds, s, weight, mean, rstd, has_bias, onchip_limit=ONCHIP_LIMIT, chunk=CHUNK, config=None):
    """LayerNorm's (dx, dweight, dbias): backward with centred True."""
    return backward(dy, ds, s, weight, mean, rstd, has_bias, True, 0.0, 0.0, True, None, onchip_limit, chunk, config)
