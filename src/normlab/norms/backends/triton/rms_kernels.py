"""Triton kernels for RMSNorm, forward and backward.

Notation: a row s (x, or x + residual when fused) of length N; the RMS uses
its first K elements (pRMSNorm; K = N normally); ms = mean(s[:K]^2);
inv = 1/sqrt(ms + eps) ("inside") or 1/(sqrt(ms) + eps) ("outside");
gain = offset + weight; y = s * inv * gain.

Statistics are computed in the dtype of the MS pointer (fp32, or fp64 for
fp64 inputs), whatever the input dtype; ms per row is saved for the backward.

On-chip kernels hold a tile of ROWS whole rows in registers: one read of x
(and residual), one write of y (and s). Chunked kernels take one row per
program and stream it in CHUNK-sized pieces, so any N works: a pass for ms,
a pass for y.

Backward: with g = dy * gain and c = sum_i g_i s_i over the whole row,
    dx_j = g_j * inv - [j < K] * s_j * c * inv' / K,
    inv' = inv^3 (inside)  or  inv^2 / sqrt(ms) (outside),
and dweight = sum over rows of dy * s * inv, accumulated per program in the
statistics dtype into a [programs, N] buffer that reduce_kernels.sum_partials reduces.
"""

import triton
import triton.language as tl

from normlab.norms.backends.triton.fused_add import load_summed


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
    eps,
    offset,
    HAS_RESIDUAL: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    EPS_INSIDE: tl.constexpr,
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    compute = MS.dtype.element_ty
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    row_ok = rows < n_rows
    mask = row_ok[:, None] & (cols < N)[None, :]
    rows64 = rows.to(tl.int64)
    s = load_summed(
        X + rows64[:, None] * stride_x + cols[None, :],
        R + rows64[:, None] * stride_r + cols[None, :],
        S + rows64[:, None] * N + cols[None, :],
        mask,
        HAS_RESIDUAL,
    )
    s = s.to(compute)
    head = tl.where((cols < K)[None, :], s, 0.0)
    ms = tl.sum(head * head, axis=1) / K
    inv = _inverse_rms(ms, eps, EPS_INSIDE)
    y = s * inv[:, None]
    if HAS_WEIGHT:
        gain = offset + tl.load(W + cols, mask=cols < N, other=0.0).to(compute)
        y = y * gain[None, :]
    tl.store(Y + rows64[:, None] * N + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)
    tl.store(MS + rows, ms, mask=row_ok)


@triton.jit
def rms_forward_chunked(
    X,
    R,
    W,
    Y,
    S,
    MS,
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
):
    compute = MS.dtype.element_ty
    row = tl.program_id(0).to(tl.int64)
    x_row, y_row = X + row * stride_x, Y + row * N
    r_row, s_row = R + row * stride_r, S + row * N
    # Pass 1: sum of squares over the first K elements; over all N (stat_end) when s must be written.
    acc = tl.zeros([CHUNK], dtype=compute)
    for start in range(0, stat_end, CHUNK):
        cols = start + tl.arange(0, CHUNK)
        in_row = cols < N
        s = load_summed(x_row + cols, r_row + cols, s_row + cols, in_row, HAS_RESIDUAL)
        s = tl.where(cols < K, s.to(compute), 0.0)
        acc += s * s
    ms = tl.sum(acc, axis=0) / K
    inv = _inverse_rms(ms, eps, EPS_INSIDE)
    tl.store(MS + row, ms)
    if HAS_RESIDUAL:
        tl.debug_barrier()  # pass 2 reads back the s this program just wrote
        x_row = s_row
    # Pass 2: normalise and scale.
    for start in range(0, N, CHUNK):
        cols = start + tl.arange(0, CHUNK)
        in_row = cols < N
        y = tl.load(x_row + cols, mask=in_row, other=0.0).to(compute) * inv
        if HAS_WEIGHT:
            y = y * (offset + tl.load(W + cols, mask=in_row, other=0.0).to(compute))
        tl.store(y_row + cols, y.to(Y.dtype.element_ty), mask=in_row)


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
    eps,
    offset,
    HAS_DS: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    EPS_INSIDE: tl.constexpr,
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    compute = MS.dtype.element_ty
    program, programs = tl.program_id(0), tl.num_programs(0)
    cols = tl.arange(0, BLOCK)
    col_ok = cols < N
    in_head = (cols < K)[None, :]
    if HAS_WEIGHT:
        gain = offset + tl.load(W + cols, mask=col_ok, other=0.0).to(compute)
    dw_acc = tl.zeros([BLOCK], dtype=compute)
    for tile in range(program, tl.cdiv(n_rows, ROWS), programs):
        rows = tile * ROWS + tl.arange(0, ROWS)
        row_ok = rows < n_rows
        mask = row_ok[:, None] & col_ok[None, :]
        rows64 = rows.to(tl.int64)[:, None]
        s = tl.load(S + rows64 * stride_s + cols[None, :], mask=mask, other=0.0).to(compute)
        dy = tl.load(DY + rows64 * stride_dy + cols[None, :], mask=mask, other=0.0).to(compute)
        ms = tl.load(MS + rows, mask=row_ok, other=1.0)
        inv = _inverse_rms(ms, eps, EPS_INSIDE)
        slope = _inverse_rms_slope(ms, inv, EPS_INSIDE)
        g = dy
        if HAS_WEIGHT:
            g = dy * gain[None, :]
        c = tl.sum(g * s, axis=1)
        dx = g * inv[:, None] - tl.where(in_head, s, 0.0) * (c * slope / K)[:, None]
        if HAS_DS:
            dx += tl.load(DS + rows64 * stride_ds + cols[None, :], mask=mask, other=0.0).to(compute)
        tl.store(DX + rows64 * N + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)
        if HAS_WEIGHT:
            dw_acc += tl.sum(dy * s * inv[:, None], axis=0)
    if HAS_WEIGHT:
        tl.store(DW_PARTIAL + program * N + cols, dw_acc, mask=col_ok)


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
):
    # Each program adds its rows into its own line of DW_PARTIAL, which it zeroes first (no ATen zeros).
    compute = MS.dtype.element_ty
    program, programs = tl.program_id(0), tl.num_programs(0)
    dw_row = DW_PARTIAL + tl.cast(program, tl.int64) * N  # programs x N can pass 2^31 for very long rows
    if HAS_WEIGHT:
        for start in range(0, N, CHUNK):
            cols = start + tl.arange(0, CHUNK)
            tl.store(dw_row + cols, tl.zeros([CHUNK], dtype=compute), mask=cols < N)
        tl.debug_barrier()  # the row loop reads these zeros back
    for row in range(program, n_rows, programs):
        row64 = tl.cast(row, tl.int64)
        s_row, dy_row = S + row64 * stride_s, DY + row64 * stride_dy
        ms = tl.load(MS + row)
        inv = _inverse_rms(ms, eps, EPS_INSIDE)
        slope = _inverse_rms_slope(ms, inv, EPS_INSIDE)
        acc = tl.zeros([CHUNK], dtype=compute)
        for start in range(0, N, CHUNK):
            cols = start + tl.arange(0, CHUNK)
            in_row = cols < N
            g = tl.load(dy_row + cols, mask=in_row, other=0.0).to(compute)
            if HAS_WEIGHT:
                g = g * (offset + tl.load(W + cols, mask=in_row, other=0.0).to(compute))
            acc += g * tl.load(s_row + cols, mask=in_row, other=0.0).to(compute)
        c_slope = tl.sum(acc, axis=0) * slope / K
        for start in range(0, N, CHUNK):
            cols = start + tl.arange(0, CHUNK)
            in_row = cols < N
            s = tl.load(s_row + cols, mask=in_row, other=0.0).to(compute)
            dy = tl.load(dy_row + cols, mask=in_row, other=0.0).to(compute)
            g = dy
            if HAS_WEIGHT:
                g = dy * (offset + tl.load(W + cols, mask=in_row, other=0.0).to(compute))
            dx = g * inv - tl.where(cols < K, s, 0.0) * c_slope
            if HAS_DS:
                dx += tl.load(DS + row64 * stride_ds + cols, mask=in_row, other=0.0).to(compute)
            tl.store(DX + row64 * N + cols, dx.to(DX.dtype.element_ty), mask=in_row)
            if HAS_WEIGHT:
                partial = tl.load(dw_row + cols, mask=in_row, other=0.0)
                tl.store(dw_row + cols, partial + dy * s * inv, mask=in_row)
