"""Triton kernels for LayerNorm, forward and backward.

Notation: a row s (x, or x + residual when fused) of length N;
mean = sum(s)/N, var = sum((s - mean)^2)/N (biased), rstd = 1/sqrt(var + eps),
xhat = (s - mean) * rstd, y = xhat * weight + bias. mean and rstd per row, in
the statistics dtype (fp32, or fp64 for fp64 inputs), are saved for the backward.

The variance is never formed as E[s^2] - E[s]^2: on mean-dominated rows
(1e4 + N(0, 1)) that difference cancels catastrophically in fp32. Instead:

* on-chip: the row sits in registers, so centre it, then square (exact two-pass
  at the cost of one read);
* chunked, stats="two_pass": one streaming pass for the mean, a second for the
  centred sum of squares, a third to normalise (three reads of s);
* chunked, stats="welford": one streaming pass that keeps (count, mean, M2)
  and merges each chunk's own centred statistics into them with Chan et al.'s
  pairwise update, then the normalising pass (two reads of s).

Backward, with g = dy * weight: dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),
dweight = sum over rows of dy * xhat, dbias = sum over rows of dy, the last two
accumulated per program in the statistics dtype for the caller to reduce.
"""

import triton
import triton.language as tl

from normlab.norms.backends.triton.fused_add import load_summed


@triton.jit(do_not_specialize=["n_rows"])
def layer_forward_onchip(
    X,
    R,
    W,
    B,
    Y,
    S,
    MEAN,
    RSTD,
    n_rows,
    N,
    stride_x,
    stride_r,
    eps,
    HAS_RESIDUAL: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    compute = MEAN.dtype.element_ty
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    row_ok = rows < n_rows
    col_ok = cols < N
    mask = row_ok[:, None] & col_ok[None, :]
    rows64 = rows.to(tl.int64)
    s = load_summed(
        X + rows64[:, None] * stride_x + cols[None, :],
        R + rows64[:, None] * stride_r + cols[None, :],
        S + rows64[:, None] * N + cols[None, :],
        mask,
        HAS_RESIDUAL,
    )
    s = s.to(compute)
    mean = tl.sum(s, axis=1) / N
    centred = tl.where(col_ok[None, :], s - mean[:, None], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(centred * centred, axis=1) / N + eps)
    y = centred * rstd[:, None]
    if HAS_WEIGHT:
        y = y * tl.load(W + cols, mask=col_ok, other=0.0).to(compute)[None, :]
    if HAS_BIAS:
        y = y + tl.load(B + cols, mask=col_ok, other=0.0).to(compute)[None, :]
    tl.store(Y + rows64[:, None] * N + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)
    tl.store(MEAN + rows, mean, mask=row_ok)
    tl.store(RSTD + rows, rstd, mask=row_ok)


@triton.jit
def layer_forward_chunked(
    X,
    R,
    W,
    B,
    Y,
    S,
    MEAN,
    RSTD,
    N,
    stride_x,
    stride_r,
    eps,
    HAS_RESIDUAL: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    WELFORD: tl.constexpr,
    CHUNK: tl.constexpr,
):
    compute = MEAN.dtype.element_ty
    row = tl.program_id(0).to(tl.int64)
    x_row, y_row = X + row * stride_x, Y + row * N
    r_row, s_row = R + row * stride_r, S + row * N
    zero = tl.sum(tl.zeros([CHUNK], dtype=compute), axis=0)  # a scalar in the statistics dtype
    if WELFORD:
        count, mean, m2 = zero, zero, zero
        for start in range(0, N, CHUNK):
            cols = start + tl.arange(0, CHUNK)
            in_row = cols < N
            s = load_summed(x_row + cols, r_row + cols, s_row + cols, in_row, HAS_RESIDUAL)
            s = s.to(compute)
            n_chunk = tl.minimum(N - start, CHUNK).to(compute)
            chunk_mean = tl.sum(s, axis=0) / n_chunk
            centred = tl.where(in_row, s - chunk_mean, 0.0)
            chunk_m2 = tl.sum(centred * centred, axis=0)
            merged = count + n_chunk
            delta = chunk_mean - mean
            mean = mean + delta * (n_chunk / merged)
            m2 = m2 + chunk_m2 + delta * delta * (count * n_chunk / merged)
            count = merged
        variance = m2 / N
    else:
        total = tl.zeros([CHUNK], dtype=compute)
        for start in range(0, N, CHUNK):
            cols = start + tl.arange(0, CHUNK)
            in_row = cols < N
            s = load_summed(x_row + cols, r_row + cols, s_row + cols, in_row, HAS_RESIDUAL)
            total += s.to(compute)
        mean = tl.sum(total, axis=0) / N
        if HAS_RESIDUAL:
            tl.debug_barrier()
            x_row = s_row
        squares = tl.zeros([CHUNK], dtype=compute)
        for start in range(0, N, CHUNK):
            cols = start + tl.arange(0, CHUNK)
            in_row = cols < N
            centred = tl.where(in_row, tl.load(x_row + cols, mask=in_row, other=0.0).to(compute) - mean, 0.0)
            squares += centred * centred
        variance = tl.sum(squares, axis=0) / N
    rstd = 1.0 / tl.sqrt(variance + eps)
    tl.store(MEAN + row, mean)
    tl.store(RSTD + row, rstd)
    if HAS_RESIDUAL:
        tl.debug_barrier()  # the normalising pass reads back the s this program wrote
        x_row = s_row
    for start in range(0, N, CHUNK):
        cols = start + tl.arange(0, CHUNK)
        in_row = cols < N
        y = (tl.load(x_row + cols, mask=in_row, other=0.0).to(compute) - mean) * rstd
        if HAS_WEIGHT:
            y = y * tl.load(W + cols, mask=in_row, other=0.0).to(compute)
        if HAS_BIAS:
            y = y + tl.load(B + cols, mask=in_row, other=0.0).to(compute)
        tl.store(y_row + cols, y.to(Y.dtype.element_ty), mask=in_row)


@triton.jit(do_not_specialize=["n_rows"])
def layer_backward_onchip(
    DY,
    DS,
    S,
    W,
    MEAN,
    RSTD,
    DX,
    DW_PARTIAL,
    DB_PARTIAL,
    n_rows,
    N,
    stride_dy,
    stride_ds,
    stride_s,
    HAS_DS: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    compute = MEAN.dtype.element_ty
    program, programs = tl.program_id(0), tl.num_programs(0)
    cols = tl.arange(0, BLOCK)
    col_ok = cols < N
    if HAS_WEIGHT:
        w = tl.load(W + cols, mask=col_ok, other=0.0).to(compute)
    dw_acc = tl.zeros([BLOCK], dtype=compute)
    db_acc = tl.zeros([BLOCK], dtype=compute)
    for tile in range(program, tl.cdiv(n_rows, ROWS), programs):
        rows = tile * ROWS + tl.arange(0, ROWS)
        row_ok = rows < n_rows
        mask = row_ok[:, None] & col_ok[None, :]
        rows64 = rows.to(tl.int64)[:, None]
        s = tl.load(S + rows64 * stride_s + cols[None, :], mask=mask, other=0.0).to(compute)
        dy = tl.load(DY + rows64 * stride_dy + cols[None, :], mask=mask, other=0.0).to(compute)
        mean = tl.load(MEAN + rows, mask=row_ok, other=0.0)
        rstd = tl.load(RSTD + rows, mask=row_ok, other=0.0)
        xhat = tl.where(mask, (s - mean[:, None]) * rstd[:, None], 0.0)
        g = dy
        if HAS_WEIGHT:
            g = dy * w[None, :]
        mean_g = tl.sum(g, axis=1) / N
        mean_gx = tl.sum(g * xhat, axis=1) / N
        dx = (g - mean_g[:, None] - xhat * mean_gx[:, None]) * rstd[:, None]
        if HAS_DS:
            dx += tl.load(DS + rows64 * stride_ds + cols[None, :], mask=mask, other=0.0).to(compute)
        tl.store(DX + rows64 * N + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)
        if HAS_WEIGHT:
            dw_acc += tl.sum(dy * xhat, axis=0)
        if HAS_BIAS:
            db_acc += tl.sum(dy, axis=0)
    if HAS_WEIGHT:
        tl.store(DW_PARTIAL + program * N + cols, dw_acc, mask=col_ok)
    if HAS_BIAS:
        tl.store(DB_PARTIAL + program * N + cols, db_acc, mask=col_ok)


@triton.jit(do_not_specialize=["n_rows"])
def layer_backward_chunked(
    DY,
    DS,
    S,
    W,
    MEAN,
    RSTD,
    DX,
    DW_PARTIAL,
    DB_PARTIAL,
    n_rows,
    N,
    stride_dy,
    stride_ds,
    stride_s,
    HAS_DS: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    CHUNK: tl.constexpr,
):
    # Each program adds its rows into its own line of DW_PARTIAL / DB_PARTIAL, which it zeroes first (no ATen zeros).
    compute = MEAN.dtype.element_ty
    program, programs = tl.program_id(0), tl.num_programs(0)
    partial_offset = tl.cast(program, tl.int64) * N  # programs x N can pass 2^31 for very long rows
    dw_row, db_row = DW_PARTIAL + partial_offset, DB_PARTIAL + partial_offset
    if HAS_WEIGHT or HAS_BIAS:
        for start in range(0, N, CHUNK):
            cols = start + tl.arange(0, CHUNK)
            if HAS_WEIGHT:
                tl.store(dw_row + cols, tl.zeros([CHUNK], dtype=compute), mask=cols < N)
            if HAS_BIAS:
                tl.store(db_row + cols, tl.zeros([CHUNK], dtype=compute), mask=cols < N)
        tl.debug_barrier()  # the row loop reads these zeros back
    for row in range(program, n_rows, programs):
        row64 = tl.cast(row, tl.int64)
        s_row, dy_row = S + row64 * stride_s, DY + row64 * stride_dy
        mean = tl.load(MEAN + row)
        rstd = tl.load(RSTD + row)
        sum_g = tl.zeros([CHUNK], dtype=compute)
        sum_gx = tl.zeros([CHUNK], dtype=compute)
        for start in range(0, N, CHUNK):
            cols = start + tl.arange(0, CHUNK)
            in_row = cols < N
            g = tl.load(dy_row + cols, mask=in_row, other=0.0).to(compute)
            if HAS_WEIGHT:
                g = g * tl.load(W + cols, mask=in_row, other=0.0).to(compute)
            xhat = tl.where(in_row, (tl.load(s_row + cols, mask=in_row, other=0.0).to(compute) - mean) * rstd, 0.0)
            sum_g += g
            sum_gx += g * xhat
        mean_g = tl.sum(sum_g, axis=0) / N
        mean_gx = tl.sum(sum_gx, axis=0) / N
        for start in range(0, N, CHUNK):
            cols = start + tl.arange(0, CHUNK)
            in_row = cols < N
            dy = tl.load(dy_row + cols, mask=in_row, other=0.0).to(compute)
            g = dy
            if HAS_WEIGHT:
                g = dy * tl.load(W + cols, mask=in_row, other=0.0).to(compute)
            xhat = tl.where(in_row, (tl.load(s_row + cols, mask=in_row, other=0.0).to(compute) - mean) * rstd, 0.0)
            dx = (g - mean_g - xhat * mean_gx) * rstd
            if HAS_DS:
                dx += tl.load(DS + row64 * stride_ds + cols, mask=in_row, other=0.0).to(compute)
            tl.store(DX + row64 * N + cols, dx.to(DX.dtype.element_ty), mask=in_row)
            if HAS_WEIGHT:
                tl.store(dw_row + cols, tl.load(dw_row + cols, mask=in_row, other=0.0) + dy * xhat, mask=in_row)
            if HAS_BIAS:
                tl.store(db_row + cols, tl.load(db_row + cols, mask=in_row, other=0.0) + dy, mask=in_row)
