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

Grid, pipelining and eviction hints as in rms_kernels: persistent programs over
contiguous tiles or rows (tuning.py), the on-chip tile loop pipelined (STAGES),
streamed data evict_first; a chunked kernel's first pass marks the row evict_last
so the later passes find it in L2.

Backward, with g = dy * weight: dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),
dweight = sum over rows of dy * xhat, dbias = sum over rows of dy, the last two
accumulated per program in the statistics dtype into [programs, N] buffers that
reduce_kernels.sum_partials reduces.
"""

import triton
import triton.language as tl

from normlab.norms.backends.triton.fused_add import load_summed, reload_summed
from normlab.norms.backends.triton.rms_kernels import WEIGHT_HELD_LIMIT
from normlab.norms.backends.triton.tuning import pipeline_depth, program_span


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
    STAGES: tl.constexpr,
    RELOAD: tl.constexpr = False,
):
    # RELOAD (a sweep variant): read the tile again from L2 after the statistics instead of holding it in
    # registers through them; the results are the same bits.
    compute = MEAN.dtype.element_ty
    cols = tl.arange(0, BLOCK)
    col_ok = cols < N
    w = tl.zeros([BLOCK], dtype=compute)
    b = tl.zeros([BLOCK], dtype=compute)
    if BLOCK <= WEIGHT_HELD_LIMIT:  # once per program, before the loop: not read again for every row
        if HAS_WEIGHT:
            w = tl.load(W + cols, mask=col_ok, other=0.0, eviction_policy="evict_last").to(compute)
        if HAS_BIAS:
            b = tl.load(B + cols, mask=col_ok, other=0.0, eviction_policy="evict_last").to(compute)
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
            BLOCK, B.dtype.element_ty, HAS_BIAS, BLOCK > WEIGHT_HELD_LIMIT,
        ),
    ):  # fmt: skip
        rows = tile * ROWS + tl.arange(0, ROWS)
        row_ok = rows < n_rows
        mask = row_ok[:, None] & col_ok[None, :]
        rows64 = rows.to(tl.int64)
        s_ptrs = S + rows64[:, None] * N + cols[None, :]
        s = load_summed(
            X + rows64[:, None] * stride_x + cols[None, :],
            R + rows64[:, None] * stride_r + cols[None, :],
            s_ptrs,
            mask,
            HAS_RESIDUAL,
            RELOAD,
        )
        s = s.to(compute)
        mean = tl.sum(s, axis=1) / N
        centred = tl.where(col_ok[None, :], s - mean[:, None], 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(centred * centred, axis=1) / N + eps)
        if RELOAD:
            s = reload_summed(X + rows64[:, None] * stride_x + cols[None, :], s_ptrs, mask, HAS_RESIDUAL)
            centred = tl.where(col_ok[None, :], s.to(compute) - mean[:, None], 0.0)
        y = centred * rstd[:, None]
        # Above WEIGHT_HELD_LIMIT weight and bias are loaded per tile, from L2 (evict_last): held across the loop
        # they spill at 16K.
        if HAS_WEIGHT:
            if BLOCK > WEIGHT_HELD_LIMIT:
                w = tl.load(W + cols, mask=col_ok, other=0.0, eviction_policy="evict_last").to(compute)
            y = y * w[None, :]
        if HAS_BIAS:
            if BLOCK > WEIGHT_HELD_LIMIT:
                b = tl.load(B + cols, mask=col_ok, other=0.0, eviction_policy="evict_last").to(compute)
            y = y + b[None, :]
        tl.store(
            Y + rows64[:, None] * N + cols[None, :], y.to(Y.dtype.element_ty), mask=mask, eviction_policy="evict_first"
        )
        tl.store(MEAN + rows, mean, mask=row_ok)
        tl.store(RSTD + rows, rstd, mask=row_ok)


@triton.jit(do_not_specialize=["n_rows"])
def layer_forward_chunked(
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
    WELFORD: tl.constexpr,
    CHUNK: tl.constexpr,
    STAGES: tl.constexpr,
):
    compute = MEAN.dtype.element_ty
    zero = tl.sum(tl.zeros([CHUNK], dtype=compute), axis=0)  # a scalar in the statistics dtype
    first, last = program_span(n_rows, 1)
    for row in range(first, last):
        row64 = tl.cast(row, tl.int64)
        x_row, y_row = X + row64 * stride_x, Y + row64 * N
        r_row, s_row = R + row64 * stride_r, S + row64 * N
        if WELFORD:
            count, mean, m2 = zero, zero, zero
            for start in tl.range(0, N, CHUNK, num_stages=pipeline_depth(STAGES)):
                cols = start + tl.arange(0, CHUNK)
                in_row = cols < N
                s = load_summed(x_row + cols, r_row + cols, s_row + cols, in_row, HAS_RESIDUAL, True)
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
            for start in tl.range(0, N, CHUNK, num_stages=pipeline_depth(STAGES)):
                cols = start + tl.arange(0, CHUNK)
                in_row = cols < N
                s = load_summed(x_row + cols, r_row + cols, s_row + cols, in_row, HAS_RESIDUAL, True)
                total += s.to(compute)
            mean = tl.sum(total, axis=0) / N
            if HAS_RESIDUAL:
                tl.debug_barrier()
            s_again = s_row if HAS_RESIDUAL else x_row
            squares = tl.zeros([CHUNK], dtype=compute)
            for start in tl.range(0, N, CHUNK, num_stages=pipeline_depth(STAGES)):
                cols = start + tl.arange(0, CHUNK)
                in_row = cols < N
                s = tl.load(s_again + cols, mask=in_row, other=0.0, eviction_policy="evict_last").to(compute)
                centred = tl.where(in_row, s - mean, 0.0)
                squares += centred * centred
            variance = tl.sum(squares, axis=0) / N
        rstd = 1.0 / tl.sqrt(variance + eps)
        tl.store(MEAN + row, mean)
        tl.store(RSTD + row, rstd)
        if HAS_RESIDUAL:
            tl.debug_barrier()  # the normalising pass reads back the s this program wrote
            x_row = s_row
        for start in tl.range(0, N, CHUNK, num_stages=pipeline_depth(STAGES)):
            cols = start + tl.arange(0, CHUNK)
            in_row = cols < N
            s = tl.load(x_row + cols, mask=in_row, other=0.0, eviction_policy="evict_first").to(compute)
            y = (s - mean) * rstd
            if HAS_WEIGHT:
                y = y * tl.load(W + cols, mask=in_row, other=0.0, eviction_policy="evict_last").to(compute)
            if HAS_BIAS:
                y = y + tl.load(B + cols, mask=in_row, other=0.0, eviction_policy="evict_last").to(compute)
            tl.store(y_row + cols, y.to(Y.dtype.element_ty), mask=in_row, eviction_policy="evict_first")


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
    STAGES: tl.constexpr,
    RELOAD: tl.constexpr = False,
):
    # RELOAD (a sweep variant): load the weight per tile instead of holding it across the loop (as in
    # rms_backward_onchip); the results are the same bits.
    compute = MEAN.dtype.element_ty
    cols = tl.arange(0, BLOCK)
    col_ok = cols < N
    if HAS_WEIGHT and not RELOAD:
        w = tl.load(W + cols, mask=col_ok, other=0.0, eviction_policy="evict_last").to(compute)
    dw_acc = tl.zeros([BLOCK], dtype=compute)
    db_acc = tl.zeros([BLOCK], dtype=compute)
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
        s = tl.load(S + rows64 * stride_s + cols[None, :], mask=mask, other=0.0, eviction_policy="evict_first")
        dy = tl.load(DY + rows64 * stride_dy + cols[None, :], mask=mask, other=0.0, eviction_policy="evict_first")
        s, dy = s.to(compute), dy.to(compute)
        mean = tl.load(MEAN + rows, mask=row_ok, other=0.0)
        rstd = tl.load(RSTD + rows, mask=row_ok, other=0.0)
        xhat = tl.where(mask, (s - mean[:, None]) * rstd[:, None], 0.0)
        g = dy
        if HAS_WEIGHT:
            if RELOAD:
                w = tl.load(W + cols, mask=col_ok, other=0.0, eviction_policy="evict_last").to(compute)
            g = dy * w[None, :]
        mean_g = tl.sum(g, axis=1) / N
        mean_gx = tl.sum(g * xhat, axis=1) / N
        dx = (g - mean_g[:, None] - xhat * mean_gx[:, None]) * rstd[:, None]
        if HAS_DS:
            ds = tl.load(DS + rows64 * stride_ds + cols[None, :], mask=mask, other=0.0, eviction_policy="evict_first")
            dx += ds.to(compute)
        tl.store(DX + rows64 * N + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask, eviction_policy="evict_first")
        if HAS_WEIGHT:
            dw_acc += tl.sum(dy * xhat, axis=0)
        if HAS_BIAS:
            db_acc += tl.sum(dy, axis=0)
    program = tl.program_id(0)
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
    STAGES: tl.constexpr,
):
    # Each program adds its rows into its own line of DW_PARTIAL / DB_PARTIAL, which it zeroes first (no ATen
    # zeros); the lines are re-read for every row, so they are kept in L2 (evict_last).
    compute = MEAN.dtype.element_ty
    partial_offset = tl.cast(tl.program_id(0), tl.int64) * N  # programs x N can pass 2^31 for very long rows
    dw_row, db_row = DW_PARTIAL + partial_offset, DB_PARTIAL + partial_offset
    if HAS_WEIGHT or HAS_BIAS:
        for start in range(0, N, CHUNK):
            cols = start + tl.arange(0, CHUNK)
            zeros = tl.zeros([CHUNK], dtype=compute)
            if HAS_WEIGHT:
                tl.store(dw_row + cols, zeros, mask=cols < N, eviction_policy="evict_last")
            if HAS_BIAS:
                tl.store(db_row + cols, zeros, mask=cols < N, eviction_policy="evict_last")
        tl.debug_barrier()  # the row loop reads these zeros back
    first, last = program_span(n_rows, 1)
    for row in range(first, last):
        row64 = tl.cast(row, tl.int64)
        s_row, dy_row = S + row64 * stride_s, DY + row64 * stride_dy
        mean = tl.load(MEAN + row)
        rstd = tl.load(RSTD + row)
        # Pass 1: mean(g) and mean(g * xhat); the row stays in L2 for pass 2.
        sum_g = tl.zeros([CHUNK], dtype=compute)
        sum_gx = tl.zeros([CHUNK], dtype=compute)
        for start in tl.range(0, N, CHUNK, num_stages=pipeline_depth(STAGES)):
            cols = start + tl.arange(0, CHUNK)
            in_row = cols < N
            g = tl.load(dy_row + cols, mask=in_row, other=0.0, eviction_policy="evict_last").to(compute)
            if HAS_WEIGHT:
                g = g * tl.load(W + cols, mask=in_row, other=0.0, eviction_policy="evict_last").to(compute)
            s = tl.load(s_row + cols, mask=in_row, other=0.0, eviction_policy="evict_last").to(compute)
            xhat = tl.where(in_row, (s - mean) * rstd, 0.0)
            sum_g += g
            sum_gx += g * xhat
        mean_g = tl.sum(sum_g, axis=0) / N
        mean_gx = tl.sum(sum_gx, axis=0) / N
        # Pass 2: dx, and this row's share of dweight and dbias.
        for start in tl.range(0, N, CHUNK, num_stages=pipeline_depth(STAGES)):
            cols = start + tl.arange(0, CHUNK)
            in_row = cols < N
            dy = tl.load(dy_row + cols, mask=in_row, other=0.0, eviction_policy="evict_first").to(compute)
            g = dy
            if HAS_WEIGHT:
                g = dy * tl.load(W + cols, mask=in_row, other=0.0, eviction_policy="evict_last").to(compute)
            s = tl.load(s_row + cols, mask=in_row, other=0.0, eviction_policy="evict_first").to(compute)
            xhat = tl.where(in_row, (s - mean) * rstd, 0.0)
            dx = (g - mean_g - xhat * mean_gx) * rstd
            if HAS_DS:
                ds = tl.load(DS + row64 * stride_ds + cols, mask=in_row, other=0.0, eviction_policy="evict_first")
                dx += ds.to(compute)
            tl.store(DX + row64 * N + cols, dx.to(DX.dtype.element_ty), mask=in_row, eviction_policy="evict_first")
            if HAS_WEIGHT:
                dw = tl.load(dw_row + cols, mask=in_row, other=0.0, eviction_policy="evict_last")
                tl.store(dw_row + cols, dw + dy * xhat, mask=in_row, eviction_policy="evict_last")
            if HAS_BIAS:
                db = tl.load(db_row + cols, mask=in_row, other=0.0, eviction_policy="evict_last")
                tl.store(db_row + cols, db + dy, mask=in_row, eviction_policy="evict_last")


@triton.jit(do_not_specialize=["n_rows"])
def layer_backward_chunked_grouped(
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
    GROUP: tl.constexpr,
    CHUNK: tl.constexpr,
    STAGES: tl.constexpr,
):
    # A sweep variant of layer_backward_chunked (tuning.KernelConfig.group): GROUP rows as [GROUP, CHUNK]
    # tiles, their dweight and dbias shares summed on chip before the partial lines are read and rewritten.
    compute = MEAN.dtype.element_ty
    partial_offset = tl.cast(tl.program_id(0), tl.int64) * N
    dw_row, db_row = DW_PARTIAL + partial_offset, DB_PARTIAL + partial_offset
    if HAS_WEIGHT or HAS_BIAS:
        for start in range(0, N, CHUNK):
            cols = start + tl.arange(0, CHUNK)
            zeros = tl.zeros([CHUNK], dtype=compute)
            if HAS_WEIGHT:
                tl.store(dw_row + cols, zeros, mask=cols < N, eviction_policy="evict_last")
            if HAS_BIAS:
                tl.store(db_row + cols, zeros, mask=cols < N, eviction_policy="evict_last")
        tl.debug_barrier()  # the row loop reads these zeros back
    first, last = program_span(n_rows, GROUP)
    for group in range(first, last):
        rows = group * GROUP + tl.arange(0, GROUP)
        row_ok = rows < n_rows
        rows64 = rows.to(tl.int64)[:, None]
        mean = tl.load(MEAN + rows, mask=row_ok, other=0.0)
        rstd = tl.load(RSTD + rows, mask=row_ok, other=0.0)
        sum_g = tl.zeros([GROUP, CHUNK], dtype=compute)
        sum_gx = tl.zeros([GROUP, CHUNK], dtype=compute)
        for start in tl.range(0, N, CHUNK, num_stages=pipeline_depth(STAGES)):
            cols = start + tl.arange(0, CHUNK)
            in_row = cols < N
            mask = row_ok[:, None] & in_row[None, :]
            g = tl.load(DY + rows64 * stride_dy + cols[None, :], mask=mask, other=0.0, eviction_policy="evict_last")
            g = g.to(compute)
            if HAS_WEIGHT:
                g = g * tl.load(W + cols, mask=in_row, other=0.0, eviction_policy="evict_last").to(compute)[None, :]
            s = tl.load(S + rows64 * stride_s + cols[None, :], mask=mask, other=0.0, eviction_policy="evict_last")
            xhat = tl.where(mask, (s.to(compute) - mean[:, None]) * rstd[:, None], 0.0)
            sum_g += g
            sum_gx += g * xhat
        mean_g = tl.sum(sum_g, axis=1) / N
        mean_gx = tl.sum(sum_gx, axis=1) / N
        for start in tl.range(0, N, CHUNK, num_stages=pipeline_depth(STAGES)):
            cols = start + tl.arange(0, CHUNK)
            in_row = cols < N
            mask = row_ok[:, None] & in_row[None, :]
            dy = tl.load(DY + rows64 * stride_dy + cols[None, :], mask=mask, other=0.0, eviction_policy="evict_first")
            dy = dy.to(compute)
            g = dy
            if HAS_WEIGHT:
                g = dy * tl.load(W + cols, mask=in_row, other=0.0, eviction_policy="evict_last").to(compute)[None, :]
            s = tl.load(S + rows64 * stride_s + cols[None, :], mask=mask, other=0.0, eviction_policy="evict_first")
            xhat = tl.where(mask, (s.to(compute) - mean[:, None]) * rstd[:, None], 0.0)
            dx = (g - mean_g[:, None] - xhat * mean_gx[:, None]) * rstd[:, None]
            if HAS_DS:
                ds = tl.load(
                    DS + rows64 * stride_ds + cols[None, :], mask=mask, other=0.0, eviction_policy="evict_first"
                )
                dx += ds.to(compute)
            tl.store(
                DX + rows64 * N + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask, eviction_policy="evict_first"
            )
            if HAS_WEIGHT:
                dw = tl.load(dw_row + cols, mask=in_row, other=0.0, eviction_policy="evict_last")
                tl.store(dw_row + cols, dw + tl.sum(dy * xhat, axis=0), mask=in_row, eviction_policy="evict_last")
            if HAS_BIAS:
                db = tl.load(db_row + cols, mask=in_row, other=0.0, eviction_policy="evict_last")
                tl.store(db_row + cols, db + tl.sum(dy, axis=0), mask=in_row, eviction_policy="evict_last")
