"""Triton kernels for RMSNorm, forward and backward.

Notation: a row s (x, or x + residual when fused) of length N; the RMS uses
its first K elements (pRMSNorm; K = N normally); ms = mean(s[:K]^2);
inv = 1/sqrt(ms + eps) ("inside") or 1/(sqrt(ms) + eps) ("outside");
gain = offset + weight; y = s * inv * gain.

Statistics are computed in the dtype of the MS pointer (fp32, or fp64 for
fp64 inputs), whatever the input dtype; ms per row is saved for the backward.

Every kernel runs on a persistent grid (tuning.py): each program takes a
contiguous run of tiles or rows (tuning.program_span) and loads the weight once.

On-chip kernels hold a tile of ROWS whole rows in registers: one read of x
(and residual), one write of y (and s). The loop over a program's tiles is
pipelined (STAGES): the next tile's loads are in flight while this one reduces.
Streamed data is marked evict_first, the weight evict_last.

Chunked kernels take one row at a time and stream it in CHUNK-sized pieces, so
any N works: a pass for ms, a pass for y. The first pass marks the row
evict_last, so the second finds it in L2 (the grid is small enough for that),
and the second marks it evict_first.

Backward: with g = dy * gain and c = sum_i g_i s_i over the whole row,
    dx_j = g_j * inv - [j < K] * s_j * c * inv' / K,
    inv' = inv^3 (inside)  or  inv^2 / sqrt(ms) (outside),
and dweight = sum over rows of dy * s * inv, accumulated per program in the
statistics dtype into a [programs, N] buffer (Liger's layout) that
reduce_kernels.sum_partials reduces.
"""

import triton
import triton.language as tl

from normlab.norms.backends.triton.fused_add import load_summed, reload_summed
from normlab.norms.backends.triton.tuning import pipeline_depth, program_span

# The widest row whose weight (and bias) an on-chip forward holds in registers across its row loop, loaded once
# per program; wider rows load it per tile (from L2). The results are the same bits either way.
WEIGHT_HELD_LIMIT: tl.constexpr = tl.constexpr(8192)


@triton.jit
def _inverse_rms(ms, eps, EPS_INSIDE: tl.constexpr):
    if EPS_INSIDE:
        inv = 1.0 / tl.sqrt(ms + eps)
    else:
        inv = 1.0 / (tl.sqrt(ms) + eps)
    return inv


@triton.jit
def _inverse_rms_slope(ms, inv, EPS_INSIDE: tl.constexpr):
    # -d(inv)/d(ms) * 2; a zero row under "outside" has no derivative: use 0, not inf * 0.
    if EPS_INSIDE:
        slope = inv * inv * inv
    else:
        rms = tl.sqrt(ms)
        slope = tl.where(rms > 0, inv * inv / tl.where(rms > 0, rms, 1.0), 0.0)
    return slope


@triton.jit
def _row_offsets(rows, heads, stride_token, stride_head):
    """Where each row starts, for rows that are (token, head) pairs of a view with two row strides (one head of a
    QKV split: launch._row_view), row = token * heads + head. heads == 1 (every other launch) is specialised to
    a constant by Triton, and this folds to rows * stride_token, as before."""
    token = rows // heads
    head = rows - token * heads
    return token.to(tl.int64) * stride_token + head.to(tl.int64) * stride_head


@triton.jit(do_not_specialize=["n_rows"])
def rms_forward_onchip(
    X,
    R,
    W,
    Y,
    S,
    MS,
    n_rows,
    N,
    K,
    stride_x,
    stride_r,
    heads,
    stride_x_head,
    stride_r_head,
    eps,
    offset,
    HAS_RESIDUAL: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    EPS_INSIDE: tl.constexpr,
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
    STAGES: tl.constexpr,
    RELOAD: tl.constexpr = False,
):
    # RELOAD (a sweep variant, tuning.KernelConfig.reload): read the tile again from L2 after the reduction
    # instead of holding it in registers through it, as Quack does above 8K; the results are the same bits.
    compute = MS.dtype.element_ty
    cols = tl.arange(0, BLOCK)
    col_ok = cols < N
    gain = tl.zeros([BLOCK], dtype=compute)
    if HAS_WEIGHT and BLOCK <= WEIGHT_HELD_LIMIT:
        # Once per program, before the loop: the weight is not read again for every row.
        gain = offset + tl.load(W + cols, mask=col_ok, other=0.0, eviction_policy="evict_last").to(compute)
    first, last = program_span(n_rows, ROWS)
    # Streams the pipeliner buffers: x, the residual, and the weight (and bias) where it is loaded per tile.
    for tile in tl.range(
        first,
        last,
        num_stages=pipeline_depth(
            STAGES,
            ROWS * BLOCK, X.dtype.element_ty, True, True,
            ROWS * BLOCK, X.dtype.element_ty, HAS_RESIDUAL, True,
            BLOCK, W.dtype.element_ty, HAS_WEIGHT, BLOCK > WEIGHT_HELD_LIMIT,
        ),
    ):  # fmt: skip
        rows = tile * ROWS + tl.arange(0, ROWS)
        row_ok = rows < n_rows
        mask = row_ok[:, None] & col_ok[None, :]
        rows64 = rows.to(tl.int64)
        x_at = _row_offsets(rows, heads, stride_x, stride_x_head)
        s_ptrs = S + rows64[:, None] * N + cols[None, :]
        s = load_summed(
            X + x_at[:, None] + cols[None, :],
            R + _row_offsets(rows, heads, stride_r, stride_r_head)[:, None] + cols[None, :],
            s_ptrs,
            mask,
            HAS_RESIDUAL,
            RELOAD,
        )
        s = s.to(compute)
        head = tl.where((cols < K)[None, :], s, 0.0)
        ms = tl.sum(head * head, axis=1) / K
        inv = _inverse_rms(ms, eps, EPS_INSIDE)
        if RELOAD:
            s = reload_summed(X + x_at[:, None] + cols[None, :], s_ptrs, mask, HAS_RESIDUAL)
            s = s.to(compute)
        y = s * inv[:, None]
        if HAS_WEIGHT:
            if BLOCK > WEIGHT_HELD_LIMIT:
                # Loaded per tile, from L2 (evict_last): held across the loop it costs 32 registers a thread at 16K.
                gain = offset + tl.load(W + cols, mask=col_ok, other=0.0, eviction_policy="evict_last").to(compute)
            y = y * gain[None, :]
        tl.store(
            Y + rows64[:, None] * N + cols[None, :], y.to(Y.dtype.element_ty), mask=mask, eviction_policy="evict_first"
        )
        tl.store(MS + rows, ms, mask=row_ok)


@triton.jit(do_not_specialize=["n_rows"])
def rms_forward_chunked(
    X,
    R,
    W,
    Y,
    S,
    MS,
    n_rows,
    N,
    K,
    stat_end,
    stride_x,
    stride_r,
    eps,
    offset,
    HAS_RESIDUAL: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    EPS_INSIDE: tl.constexpr,
    CHUNK: tl.constexpr,
    STAGES: tl.constexpr,
):
    compute = MS.dtype.element_ty
    first, last = program_span(n_rows, 1)
    for row in range(first, last):
        row64 = tl.cast(row, tl.int64)
        x_row, y_row = X + row64 * stride_x, Y + row64 * N
        r_row, s_row = R + row64 * stride_r, S + row64 * N
        # Pass 1: sum of squares over the first K elements; over all N (stat_end) when s must be written.
        acc = tl.zeros([CHUNK], dtype=compute)
        for start in tl.range(0, stat_end, CHUNK, num_stages=pipeline_depth(STAGES)):
            cols = start + tl.arange(0, CHUNK)
            in_row = cols < N
            s = load_summed(x_row + cols, r_row + cols, s_row + cols, in_row, HAS_RESIDUAL, True)
            s = tl.where(cols < K, s.to(compute), 0.0)
            acc += s * s
        ms = tl.sum(acc, axis=0) / K
        inv = _inverse_rms(ms, eps, EPS_INSIDE)
        tl.store(MS + row, ms)
        if HAS_RESIDUAL:
            tl.debug_barrier()  # pass 2 reads back the s this program just wrote
            x_row = s_row
        # Pass 2: normalise and scale; the row was read (or written) evict_last, so it comes from L2.
        for start in tl.range(0, N, CHUNK, num_stages=pipeline_depth(STAGES)):
            cols = start + tl.arange(0, CHUNK)
            in_row = cols < N
            y = tl.load(x_row + cols, mask=in_row, other=0.0, eviction_policy="evict_first").to(compute) * inv
            if HAS_WEIGHT:
                w = tl.load(W + cols, mask=in_row, other=0.0, eviction_policy="evict_last")
                y = y * (offset + w.to(compute))
            tl.store(y_row + cols, y.to(Y.dtype.element_ty), mask=in_row, eviction_policy="evict_first")


@triton.jit(do_not_specialize=["n_rows"])
def rms_backward_onchip(
    DY,
    DS,
    S,
    W,
    MS,
    DX,
    DW_PARTIAL,
    n_rows,
    N,
    K,
    stride_dy,
    stride_ds,
    stride_s,
    heads,
    stride_dy_head,
    stride_ds_head,
    stride_s_head,
    eps,
    offset,
    HAS_DS: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    EPS_INSIDE: tl.constexpr,
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
    STAGES: tl.constexpr,
    RELOAD: tl.constexpr = False,
):
    # RELOAD (a sweep variant): load the gain per tile, from L1/L2, instead of holding it across the loop,
    # which frees the registers that keep a 16K row on chip; the results are the same bits.
    compute = MS.dtype.element_ty
    cols = tl.arange(0, BLOCK)
    col_ok = cols < N
    in_head = (cols < K)[None, :]
    if HAS_WEIGHT and not RELOAD:
        gain = offset + tl.load(W + cols, mask=col_ok, other=0.0, eviction_policy="evict_last").to(compute)
    dw_acc = tl.zeros([BLOCK], dtype=compute)
    first, last = program_span(n_rows, ROWS)
    # Streams the pipeliner buffers: s, dy, ds, and the weight where it is loaded per tile (RELOAD).
    for tile in tl.range(
        first,
        last,
        num_stages=pipeline_depth(
            STAGES,
            2 * ROWS * BLOCK, S.dtype.element_ty, True, True,
            ROWS * BLOCK, S.dtype.element_ty, HAS_DS, True,
            BLOCK, W.dtype.element_ty, HAS_WEIGHT, RELOAD,
        ),
    ):  # fmt: skip
        rows = tile * ROWS + tl.arange(0, ROWS)
        row_ok = rows < n_rows
        mask = row_ok[:, None] & col_ok[None, :]
        rows64 = rows.to(tl.int64)[:, None]
        s_at = _row_offsets(rows, heads, stride_s, stride_s_head)[:, None]
        dy_at = _row_offsets(rows, heads, stride_dy, stride_dy_head)[:, None]
        s = tl.load(S + s_at + cols[None, :], mask=mask, other=0.0, eviction_policy="evict_first")
        dy = tl.load(DY + dy_at + cols[None, :], mask=mask, other=0.0, eviction_policy="evict_first")
        s, dy = s.to(compute), dy.to(compute)
        ms = tl.load(MS + rows, mask=row_ok, other=1.0)
        inv = _inverse_rms(ms, eps, EPS_INSIDE)
        slope = _inverse_rms_slope(ms, inv, EPS_INSIDE)
        g = dy
        if HAS_WEIGHT:
            if RELOAD:
                gain = offset + tl.load(W + cols, mask=col_ok, other=0.0, eviction_policy="evict_last").to(compute)
            g = dy * gain[None, :]
        c = tl.sum(g * s, axis=1)
        dx = g * inv[:, None] - tl.where(in_head, s, 0.0) * (c * slope / K)[:, None]
        if HAS_DS:
            ds_at = _row_offsets(rows, heads, stride_ds, stride_ds_head)[:, None]
            ds = tl.load(DS + ds_at + cols[None, :], mask=mask, other=0.0, eviction_policy="evict_first")
            dx += ds.to(compute)
        tl.store(DX + rows64 * N + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask, eviction_policy="evict_first")
        if HAS_WEIGHT:
            dw_acc += tl.sum(dy * s * inv[:, None], axis=0)
    if HAS_WEIGHT:
        tl.store(DW_PARTIAL + tl.program_id(0) * N + cols, dw_acc, mask=col_ok)


@triton.jit(do_not_specialize=["n_rows"])
def rms_backward_chunked(
    DY,
    DS,
    S,
    W,
    MS,
    DX,
    DW_PARTIAL,
    n_rows,
    N,
    K,
    stride_dy,
    stride_ds,
    stride_s,
    eps,
    offset,
    HAS_DS: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    EPS_INSIDE: tl.constexpr,
    CHUNK: tl.constexpr,
    STAGES: tl.constexpr,
):
    # Each program adds its rows into its own line of DW_PARTIAL, which it zeroes first (no ATen zeros);
    # the line is re-read for every row, so it is kept in L2 (evict_last).
    compute = MS.dtype.element_ty
    dw_row = DW_PARTIAL + tl.cast(tl.program_id(0), tl.int64) * N  # programs x N can pass 2^31 for very long rows
    if HAS_WEIGHT:
        for start in range(0, N, CHUNK):
            cols = start + tl.arange(0, CHUNK)
            tl.store(dw_row + cols, tl.zeros([CHUNK], dtype=compute), mask=cols < N, eviction_policy="evict_last")
        tl.debug_barrier()  # the row loop reads these zeros back
    first, last = program_span(n_rows, 1)
    for row in range(first, last):
        row64 = tl.cast(row, tl.int64)
        s_row, dy_row = S + row64 * stride_s, DY + row64 * stride_dy
        ms = tl.load(MS + row)
        inv = _inverse_rms(ms, eps, EPS_INSIDE)
        slope = _inverse_rms_slope(ms, inv, EPS_INSIDE)
        # Pass 1: c = sum(g * s); the row stays in L2 for pass 2.
        acc = tl.zeros([CHUNK], dtype=compute)
        for start in tl.range(0, N, CHUNK, num_stages=pipeline_depth(STAGES)):
            cols = start + tl.arange(0, CHUNK)
            in_row = cols < N
            g = tl.load(dy_row + cols, mask=in_row, other=0.0, eviction_policy="evict_last").to(compute)
            if HAS_WEIGHT:
                w = tl.load(W + cols, mask=in_row, other=0.0, eviction_policy="evict_last")
                g = g * (offset + w.to(compute))
            acc += g * tl.load(s_row + cols, mask=in_row, other=0.0, eviction_policy="evict_last").to(compute)
        c_slope = tl.sum(acc, axis=0) * slope / K
        # Pass 2: dx, and this row's share of dweight.
        for start in tl.range(0, N, CHUNK, num_stages=pipeline_depth(STAGES)):
            cols = start + tl.arange(0, CHUNK)
            in_row = cols < N
            s = tl.load(s_row + cols, mask=in_row, other=0.0, eviction_policy="evict_first").to(compute)
            dy = tl.load(dy_row + cols, mask=in_row, other=0.0, eviction_policy="evict_first").to(compute)
            g = dy
            if HAS_WEIGHT:
                w = tl.load(W + cols, mask=in_row, other=0.0, eviction_policy="evict_last")
                g = dy * (offset + w.to(compute))
            dx = g * inv - tl.where(cols < K, s, 0.0) * c_slope
            if HAS_DS:
                ds = tl.load(DS + row64 * stride_ds + cols, mask=in_row, other=0.0, eviction_policy="evict_first")
                dx += ds.to(compute)
            tl.store(DX + row64 * N + cols, dx.to(DX.dtype.element_ty), mask=in_row, eviction_policy="evict_first")
            if HAS_WEIGHT:
                partial = tl.load(dw_row + cols, mask=in_row, other=0.0, eviction_policy="evict_last")
                tl.store(dw_row + cols, partial + dy * s * inv, mask=in_row, eviction_policy="evict_last")


@triton.jit(do_not_specialize=["n_rows"])
def rms_backward_chunked_grouped(
    DY,
    DS,
    S,
    W,
    MS,
    DX,
    DW_PARTIAL,
    n_rows,
    N,
    K,
    stride_dy,
    stride_ds,
    stride_s,
    eps,
    offset,
    HAS_DS: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    EPS_INSIDE: tl.constexpr,
    GROUP: tl.constexpr,
    CHUNK: tl.constexpr,
    STAGES: tl.constexpr,
):
    # A sweep variant of rms_backward_chunked (tuning.KernelConfig.group): GROUP rows stream side by side, as
    # [GROUP, CHUNK] tiles, and their dweight shares are summed on chip before the program's partial line is
    # read and rewritten: once per GROUP rows instead of once per row.
    compute = MS.dtype.element_ty
    dw_row = DW_PARTIAL + tl.cast(tl.program_id(0), tl.int64) * N
    if HAS_WEIGHT:
        for start in range(0, N, CHUNK):
            cols = start + tl.arange(0, CHUNK)
            tl.store(dw_row + cols, tl.zeros([CHUNK], dtype=compute), mask=cols < N, eviction_policy="evict_last")
        tl.debug_barrier()  # the row loop reads these zeros back
    first, last = program_span(n_rows, GROUP)
    for group in range(first, last):
        rows = group * GROUP + tl.arange(0, GROUP)
        row_ok = rows < n_rows
        rows64 = rows.to(tl.int64)[:, None]
        ms = tl.load(MS + rows, mask=row_ok, other=1.0)
        inv = _inverse_rms(ms, eps, EPS_INSIDE)
        slope = _inverse_rms_slope(ms, inv, EPS_INSIDE)
        acc = tl.zeros([GROUP, CHUNK], dtype=compute)
        for start in tl.range(0, N, CHUNK, num_stages=pipeline_depth(STAGES)):
            cols = start + tl.arange(0, CHUNK)
            mask = row_ok[:, None] & (cols < N)[None, :]
            g = tl.load(DY + rows64 * stride_dy + cols[None, :], mask=mask, other=0.0, eviction_policy="evict_last")
            g = g.to(compute)
            if HAS_WEIGHT:
                w = tl.load(W + cols, mask=cols < N, other=0.0, eviction_policy="evict_last")
                g = g * (offset + w.to(compute))[None, :]
            s = tl.load(S + rows64 * stride_s + cols[None, :], mask=mask, other=0.0, eviction_policy="evict_last")
            acc += g * s.to(compute)
        c_slope = tl.sum(acc, axis=1) * slope / K
        for start in tl.range(0, N, CHUNK, num_stages=pipeline_depth(STAGES)):
            cols = start + tl.arange(0, CHUNK)
            in_row = cols < N
            mask = row_ok[:, None] & in_row[None, :]
            s = tl.load(S + rows64 * stride_s + cols[None, :], mask=mask, other=0.0, eviction_policy="evict_first")
            dy = tl.load(DY + rows64 * stride_dy + cols[None, :], mask=mask, other=0.0, eviction_policy="evict_first")
            s, dy = s.to(compute), dy.to(compute)
            g = dy
            if HAS_WEIGHT:
                w = tl.load(W + cols, mask=in_row, other=0.0, eviction_policy="evict_last")
                g = dy * (offset + w.to(compute))[None, :]
            dx = g * inv[:, None] - tl.where((cols < K)[None, :], s, 0.0) * c_slope[:, None]
            if HAS_DS:
                ds = tl.load(
                    DS + rows64 * stride_ds + cols[None, :], mask=mask, other=0.0, eviction_policy="evict_first"
                )
                dx += ds.to(compute)
            tl.store(
                DX + rows64 * N + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask, eviction_policy="evict_first"
            )
            if HAS_WEIGHT:
                partial = tl.load(dw_row + cols, mask=in_row, other=0.0, eviction_policy="evict_last")
                share = tl.sum(dy * s * inv[:, None], axis=0)
                tl.store(dw_row + cols, partial + share, mask=in_row, eviction_policy="evict_last")
