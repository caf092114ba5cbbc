"""Triton kernels for RMSNorm and LayerNorm, forward and backward: one family, two compile-time switches.

CENTRED (a tl.constexpr) picks the norm: False, RMSNorm; True, LayerNorm (the row's mean subtracted). HAS_BIAS
adds LayerNorm's bias. Everything else, the tile loop, the fused residual add, the eviction hints, the pipelining,
the persistent grid and the per-program parameter-gradient partials, is one code path; where the two norms'
arithmetic differs, a constexpr branch holds each one's, so each compiles (and rounds) as its own kernel did.

Notation: a row s (x, or x + residual when fused) of length N, statistics in the dtype of the STAT pointer (fp32,
or fp64 for fp64 inputs), saved per row for the backward.

* RMSNorm (CENTRED=False): the RMS uses the first K elements (pRMSNorm; K = N normally); ms = mean(s[:K]^2)
  (saved in STAT); inv = 1/sqrt(ms + eps) (EPS_INSIDE) or 1/(sqrt(ms) + eps); gain = offset + weight;
  y = s * inv * gain.
* LayerNorm (CENTRED=True): mean = sum(s)/N (STAT), var = sum((s - mean)^2)/N (biased), rstd = 1/sqrt(var + eps)
  (RSTD), xhat = (s - mean) * rstd, y = xhat * weight + bias. The variance is never formed as E[s^2] - E[s]^2 (on
  mean-dominated rows, 1e4 + N(0, 1), that cancels catastrophically in fp32): on chip the row is centred, then
  squared; chunked, WELFORD=False streams it for the mean, then for the centred squares ("two_pass"), WELFORD=True
  streams it once, merging each chunk's centred statistics with Chan et al.'s pairwise update ("welford").

Every kernel runs on a persistent grid (tuning.py): each program takes a contiguous run of tiles or rows
(tuning.program_span) and loads the weight once.

On-chip kernels hold a tile of ROWS whole rows in registers: one read of x (and residual), one write of y (and s).
Rows are (token, head) pairs (_row_offsets: two row strides, one head of a QKV split read in place; heads 1
otherwise). The loop over a program's tiles is pipelined (STAGES): the next tile's loads are in flight while this
one reduces. Streamed data is marked evict_first, the weight evict_last. RELOAD (a sweep variant,
tuning.KernelConfig.reload) reads the tile again from L2 after the reduction (forward), or the gain per tile
(backward), instead of holding it in registers; the results are the same bits.

Chunked kernels stream each row in CHUNK-sized pieces, so any N works: the statistics pass(es), then the
normalising pass. The first passes mark the row evict_last, so the later ones find it in L2 (the grid is small
enough for that), and the last marks it evict_first. Each walks its rows' (row, pass, chunk) steps in one pipelined
loop, so the next step's chunks, and the next row's first ones, load while this step is worked on.

Backward, with g = dy * gain:
* RMSNorm: c = sum_i g_i s_i over the whole row, dx_j = g_j * inv - [j < K] * s_j * c * inv' / K,
  inv' = inv^3 (inside) or inv^2 / sqrt(ms) (outside); dweight = sum over rows of dy * s * inv.
* LayerNorm: dx = rstd * (g - mean(g) - xhat * mean(g * xhat)); dweight = sum of dy * xhat, dbias = sum of dy.
The parameter gradients are accumulated per program in the statistics dtype into [programs, N] buffers
(Liger's layout) that reduce_kernels.sum_partials reduces.
"""

import triton
import triton.language as tl

from normlab.norms.backends.triton.fused_add import load_summed, reload_summed
from normlab.norms.backends.triton.tuning import pipeline_depth, program_span, step_pipeline_depth


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
def _gain(W, STAT, cols, mask, offset, CENTRED: tl.constexpr):
    """The weight as the norm scales by it, in the statistics dtype (STAT's): LayerNorm's weight, RMSNorm's
    offset + weight (evict_last)."""
    w = tl.load(W + cols, mask=mask, other=0.0, eviction_policy="evict_last").to(STAT.dtype.element_ty)
    if not CENTRED:
        w = offset + w
    return w


@triton.jit
def _row_offsets(rows, heads, stride_token, stride_head):
    """Where each row starts, for rows that are (token, head) pairs of a view with two row strides (one head of a
    QKV split: launch._row_view), row = token * heads + head. heads == 1 (every other launch) is specialised to
    a constant by Triton, and this folds to rows * stride_token."""
    token = rows // heads
    head = rows - token * heads
    return token.to(tl.int64) * stride_token + head.to(tl.int64) * stride_head


@triton.jit(do_not_specialize=["n_rows"])
def forward_onchip(
    X,
    R,
    W,
    B,
    Y,
    S,
    STAT,
    RSTD,
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
    HAS_BIAS: tl.constexpr,
    CENTRED: tl.constexpr,
    EPS_INSIDE: tl.constexpr,
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
    STAGES: tl.constexpr,
    RELOAD: tl.constexpr = False,
):
    compute = STAT.dtype.element_ty
    cols = tl.arange(0, BLOCK)
    col_ok = cols < N
    # The weight (and bias), once per program, before the loop: not read again for every row. At 16K that is 16
    # registers a thread of the 32 warps the table gives (tuning._row_warps).
    gain = tl.zeros([BLOCK], dtype=compute)
    bias = tl.zeros([BLOCK], dtype=compute)
    if HAS_WEIGHT:
        gain = _gain(W, STAT, cols, col_ok, offset, CENTRED)
    if HAS_BIAS:
        bias = tl.load(B + cols, mask=col_ok, other=0.0, eviction_policy="evict_last").to(compute)
    first, last = program_span(n_rows, ROWS)
    # Streams the pipeliner buffers: x and the residual.
    for tile in tl.range(
        first,
        last,
        num_stages=pipeline_depth(
            STAGES,
            ROWS * BLOCK, X.dtype.element_ty, True, True,
            ROWS * BLOCK, X.dtype.element_ty, HAS_RESIDUAL, True,
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
        if CENTRED:
            mean = tl.sum(s, axis=1) / N
            normed = tl.where(col_ok[None, :], s - mean[:, None], 0.0)
            scale = 1.0 / tl.sqrt(tl.sum(normed * normed, axis=1) / N + eps)
            if RELOAD:
                s = reload_summed(X + x_at[:, None] + cols[None, :], s_ptrs, mask, HAS_RESIDUAL)
                normed = tl.where(col_ok[None, :], s.to(compute) - mean[:, None], 0.0)
        else:
            head = tl.where((cols < K)[None, :], s, 0.0)
            mean = tl.sum(head * head, axis=1) / K  # the mean square
            scale = _inverse_rms(mean, eps, EPS_INSIDE)
            normed = s
            if RELOAD:
                normed = reload_summed(X + x_at[:, None] + cols[None, :], s_ptrs, mask, HAS_RESIDUAL).to(compute)
        y = normed * scale[:, None]
        if HAS_WEIGHT:
            y = y * gain[None, :]
        if HAS_BIAS:
            y = y + bias[None, :]
        tl.store(
            Y + rows64[:, None] * N + cols[None, :], y.to(Y.dtype.element_ty), mask=mask, eviction_policy="evict_first"
        )
        tl.store(STAT + rows, mean, mask=row_ok)
        if CENTRED:
            tl.store(RSTD + rows, scale, mask=row_ok)


@triton.jit(do_not_specialize=["n_rows"])
def forward_chunked(
    X,
    R,
    W,
    B,
    Y,
    S,
    STAT,
    RSTD,
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
    HAS_BIAS: tl.constexpr,
    CENTRED: tl.constexpr,
    EPS_INSIDE: tl.constexpr,
    CHUNK: tl.constexpr,
    STAGES: tl.constexpr,
    WELFORD: tl.constexpr = False,
):
    # One pipelined loop over the program's (row, pass, chunk) steps, as backward_chunked: the next step's loads,
    # and the next row's first chunks, are in flight while this step is worked on. The passes: the statistics
    # (RMSNorm: the squares of the first stat_end elements; LayerNorm "welford": Chan et al.'s merge of each
    # chunk's centred statistics; "two_pass": the sum, then the centred squares), then the normalising pass. The
    # statistics passes read the row evict_last, so that the normalising pass finds it in L2, which reads it
    # evict_first; each pass has its own masked load so that each keeps its hint. With a residual every pass
    # reads x and the residual and adds them (the same bits: the sum is taken in x's dtype, which is s's), and
    # the first pass writes s: no pass reads back what this program wrote, so nothing waits on a store. Each
    # row's arithmetic is the row loop's, chunk by chunk; a pass takes at least 2 steps (a row of one chunk gets
    # a masked-off second, which adds nothing).
    compute = STAT.dtype.element_ty
    if CENTRED and not WELFORD:
        passes = 3
    else:
        passes = 2
    first, last = program_span(n_rows, 1)
    per_pass = tl.maximum(tl.cdiv(N, CHUNK), 2)
    steps = passes * per_pass
    zero = tl.sum(tl.zeros([CHUNK], dtype=compute), axis=0)  # a scalar in the statistics dtype
    acc = tl.zeros([CHUNK], dtype=compute)  # the squares (RMSNorm), or the sum, then the centred squares
    count, running_mean, m2 = zero, zero, zero  # Welford's running statistics of the row so far
    mean, scale = zero, zero  # the row's statistics, for its normalising pass
    # Streams the pipeliner buffers: x and the residual (a load for the statistics passes, one for the last),
    # and the weight and bias (the last pass).
    for step in tl.range(
        tl.cast(first, tl.int64) * steps,
        tl.cast(last, tl.int64) * steps,
        num_stages=pipeline_depth(
            STAGES,
            2 * CHUNK, X.dtype.element_ty, True, True,
            2 * CHUNK, X.dtype.element_ty, HAS_RESIDUAL, True,
            CHUNK, W.dtype.element_ty, HAS_WEIGHT, True,
            CHUNK, B.dtype.element_ty, HAS_BIAS, True,
        ),
    ):  # fmt: skip
        row64 = step // steps
        k = (step - row64 * steps).to(tl.int32)
        pass_ = k // per_pass
        start = (k - pass_ * per_pass) * CHUNK
        cols = start + tl.arange(0, CHUNK)
        in_row = cols < N
        normalising = pass_ == passes - 1
        last_in_row = in_row & normalising
        if CENTRED:
            kept = in_row & (pass_ < passes - 1)
        else:
            kept = (cols < stat_end) & (pass_ == 0)
        x_ptr = X + row64 * stride_x + cols
        s = tl.where(
            normalising,
            tl.load(x_ptr, mask=last_in_row, other=0.0, eviction_policy="evict_first"),
            tl.load(x_ptr, mask=kept, other=0.0, eviction_policy="evict_last"),
        )
        if HAS_RESIDUAL:
            r_ptr = R + row64 * stride_r + cols
            s = s + tl.where(
                normalising,
                tl.load(r_ptr, mask=last_in_row, other=0.0, eviction_policy="evict_first"),
                tl.load(r_ptr, mask=kept, other=0.0, eviction_policy="evict_last"),
            )
            tl.store(S + row64 * N + cols, s, mask=in_row & (pass_ == 0), eviction_policy="evict_first")
        s = s.to(compute)
        # The normalising pass's arithmetic is done at every step and stored at its steps alone: outside a branch,
        # the weight and bias are consumed where they are loaded, and the pipeliner gives them one buffer, not two.
        if CENTRED:
            y = (s - mean) * scale
        else:
            y = s * scale
        if HAS_WEIGHT:
            y = y * _gain(W, STAT, cols, last_in_row, offset, CENTRED)
        if HAS_BIAS:
            y = y + tl.load(B + cols, mask=last_in_row, other=0.0, eviction_policy="evict_last").to(compute)
        tl.store(Y + row64 * N + cols, y.to(Y.dtype.element_ty), mask=last_in_row, eviction_policy="evict_first")
        if not normalising:
            end_of_pass = k - pass_ * per_pass == per_pass - 1
            if CENTRED and WELFORD:
                if start < N:  # a masked-off step (a row of one chunk) merges nothing
                    n_chunk = tl.minimum(N - start, CHUNK).to(compute)
                    chunk_mean = tl.sum(s, axis=0) / n_chunk
                    centred = tl.where(in_row, s - chunk_mean, 0.0)
                    chunk_m2 = tl.sum(centred * centred, axis=0)
                    merged = count + n_chunk
                    delta = chunk_mean - running_mean
                    running_mean = running_mean + delta * (n_chunk / merged)
                    m2 = m2 + chunk_m2 + delta * delta * (count * n_chunk / merged)
                    count = merged
                if end_of_pass:
                    mean = running_mean
                    scale = 1.0 / tl.sqrt(m2 / N + eps)
                    count, running_mean, m2 = zero, zero, zero
            elif CENTRED:
                if pass_ == 0:
                    acc += s
                    if end_of_pass:
                        mean = tl.sum(acc, axis=0) / N
                        acc = tl.zeros([CHUNK], dtype=compute)
                else:
                    centred = tl.where(in_row, s - mean, 0.0)
                    acc += centred * centred
                    if end_of_pass:
                        scale = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
                        acc = tl.zeros([CHUNK], dtype=compute)
            else:
                head = tl.where(cols < K, s, 0.0)
                acc += head * head
                if end_of_pass:
                    mean = tl.sum(acc, axis=0) / K  # the mean square
                    scale = _inverse_rms(mean, eps, EPS_INSIDE)
                    acc = tl.zeros([CHUNK], dtype=compute)
            if end_of_pass & (pass_ == passes - 2):
                tl.store(STAT + row64, mean)
                if CENTRED:
                    tl.store(RSTD + row64, scale)


@triton.jit
def _row_statistics(STAT, RSTD, rows, row_ok, eps, EPS_INSIDE: tl.constexpr, CENTRED: tl.constexpr):
    """A backward's per-row statistics: (mean, rstd, 0) for LayerNorm; (ms, inv, inv's slope) for RMSNorm."""
    if CENTRED:
        first = tl.load(STAT + rows, mask=row_ok, other=0.0)
        scale = tl.load(RSTD + rows, mask=row_ok, other=0.0)
        slope = scale
    else:
        first = tl.load(STAT + rows, mask=row_ok, other=1.0)
        scale = _inverse_rms(first, eps, EPS_INSIDE)
        slope = _inverse_rms_slope(first, scale, EPS_INSIDE)
    return first, scale, slope


@triton.jit(do_not_specialize=["n_rows"])
def backward_onchip(
    DY,
    DS,
    S,
    W,
    STAT,
    RSTD,
    DX,
    DW_PARTIAL,
    DB_PARTIAL,
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
    HAS_BIAS: tl.constexpr,
    CENTRED: tl.constexpr,
    EPS_INSIDE: tl.constexpr,
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
    STAGES: tl.constexpr,
    RELOAD: tl.constexpr = False,
):
    compute = STAT.dtype.element_ty
    cols = tl.arange(0, BLOCK)
    col_ok = cols < N
    in_head = (cols < K)[None, :]
    if HAS_WEIGHT and not RELOAD:
        gain = _gain(W, STAT, cols, col_ok, offset, CENTRED)
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
        s_at = _row_offsets(rows, heads, stride_s, stride_s_head)[:, None]
        dy_at = _row_offsets(rows, heads, stride_dy, stride_dy_head)[:, None]
        s = tl.load(S + s_at + cols[None, :], mask=mask, other=0.0, eviction_policy="evict_first")
        dy = tl.load(DY + dy_at + cols[None, :], mask=mask, other=0.0, eviction_policy="evict_first")
        s, dy = s.to(compute), dy.to(compute)
        stat, scale, slope = _row_statistics(STAT, RSTD, rows, row_ok, eps, EPS_INSIDE, CENTRED)
        g = dy
        if HAS_WEIGHT:
            if RELOAD:
                gain = _gain(W, STAT, cols, col_ok, offset, CENTRED)
            g = dy * gain[None, :]
        if CENTRED:
            xhat = tl.where(mask, (s - stat[:, None]) * scale[:, None], 0.0)
            mean_g = tl.sum(g, axis=1) / N
            mean_gx = tl.sum(g * xhat, axis=1) / N
            dx = (g - mean_g[:, None] - xhat * mean_gx[:, None]) * scale[:, None]
        else:
            c = tl.sum(g * s, axis=1)
            dx = g * scale[:, None] - tl.where(in_head, s, 0.0) * (c * slope / K)[:, None]
        if HAS_DS:
            ds_at = _row_offsets(rows, heads, stride_ds, stride_ds_head)[:, None]
            ds = tl.load(DS + ds_at + cols[None, :], mask=mask, other=0.0, eviction_policy="evict_first")
            dx += ds.to(compute)
        tl.store(DX + rows64 * N + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask, eviction_policy="evict_first")
        if HAS_WEIGHT:
            if CENTRED:
                dw_acc += tl.sum(dy * xhat, axis=0)
            else:
                dw_acc += tl.sum(dy * s * scale[:, None], axis=0)
        if HAS_BIAS:
            db_acc += tl.sum(dy, axis=0)
    program = tl.program_id(0)
    if HAS_WEIGHT:
        tl.store(DW_PARTIAL + program * N + cols, dw_acc, mask=col_ok)
    if HAS_BIAS:
        tl.store(DB_PARTIAL + program * N + cols, db_acc, mask=col_ok)


@triton.jit
def _zero_partials(dw_row, db_row, N, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, CHUNK: tl.constexpr):
    """A chunked backward's own partial lines (statistics dtype), zeroed (no ATen zeros); re-read for every row, so
    kept in L2."""
    if HAS_WEIGHT or HAS_BIAS:
        for start in range(0, N, CHUNK):
            cols = start + tl.arange(0, CHUNK)
            if HAS_WEIGHT:
                zeros = tl.zeros([CHUNK], dtype=dw_row.dtype.element_ty)
                tl.store(dw_row + cols, zeros, mask=cols < N, eviction_policy="evict_last")
            if HAS_BIAS:
                zeros = tl.zeros([CHUNK], dtype=db_row.dtype.element_ty)
                tl.store(db_row + cols, zeros, mask=cols < N, eviction_policy="evict_last")
        tl.debug_barrier()  # the row loop reads these zeros back


@triton.jit(do_not_specialize=["n_rows"])
def backward_chunked(
    DY,
    DS,
    S,
    W,
    STAT,
    RSTD,
    DX,
    DW_PARTIAL,
    DB_PARTIAL,
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
    HAS_BIAS: tl.constexpr,
    CENTRED: tl.constexpr,
    EPS_INSIDE: tl.constexpr,
    CHUNK: tl.constexpr,
    STAGES: tl.constexpr,
    GROUP: tl.constexpr = 1,
):
    # Each program adds its rows into its own lines of DW_PARTIAL / DB_PARTIAL, read and rewritten per step of the
    # second pass (L2). GROUP rows stream side by side, as [GROUP, CHUNK] tiles (tuning.KernelConfig.group): their
    # parameter-gradient shares are summed on chip, so the partial lines are read and rewritten, and the weight
    # read, once per GROUP rows instead of once per row. One pipelined loop over the program's (group, pass, chunk)
    # steps, not a loop holding two chunk loops: the software pipeliner then keeps the next step's loads in flight
    # across the passes and across groups (the next group's first chunks load while this group's last ones are
    # worked on). Each row's arithmetic, and the order in which the groups are added into the partial lines, is the
    # loop's of one group at a time. A pass takes at least 2 steps (a row of one chunk gets a masked-off second), so
    # a step's partial-line load, issued up to 2 steps ahead, never reads a chunk before the previous group's store
    # to it.
    compute = STAT.dtype.element_ty
    partial_offset = tl.cast(tl.program_id(0), tl.int64) * N  # programs x N can pass 2^31 for very long rows
    dw_row, db_row = DW_PARTIAL + partial_offset, DB_PARTIAL + partial_offset
    _zero_partials(dw_row, db_row, N, HAS_WEIGHT, HAS_BIAS, CHUNK)
    first, last = program_span(n_rows, GROUP)
    per_pass = tl.maximum(tl.cdiv(N, CHUNK), 2)
    steps = 2 * per_pass
    sum_g = tl.zeros([GROUP, CHUNK], dtype=compute)
    acc = tl.zeros([GROUP, CHUNK], dtype=compute)
    mean_g = tl.zeros([GROUP], dtype=compute)
    mean_gx = tl.zeros([GROUP], dtype=compute)
    c_slope = tl.zeros([GROUP], dtype=compute)
    # Streams the pipeliner buffers: s and dy (both passes), the weight, ds and the partial lines (second pass).
    for step in tl.range(
        tl.cast(first, tl.int64) * steps,
        tl.cast(last, tl.int64) * steps,
        num_stages=step_pipeline_depth(
            STAGES,
            2 * GROUP * CHUNK, S.dtype.element_ty, True, True,
            GROUP * CHUNK, S.dtype.element_ty, HAS_DS, True,
            CHUNK, W.dtype.element_ty, HAS_WEIGHT, True,
            CHUNK, STAT.dtype.element_ty, HAS_WEIGHT, True,
            CHUNK, STAT.dtype.element_ty, HAS_BIAS, True,
        ),
    ):  # fmt: skip
        group = step // steps
        k = (step - group * steps).to(tl.int32)
        second = k >= per_pass  # pass 2: dx and the parameter-gradient shares; else pass 1: the row sums
        cols = (k - per_pass * second.to(tl.int32)) * CHUNK + tl.arange(0, CHUNK)
        in_row = cols < N
        rows = group * GROUP + tl.arange(0, GROUP)
        row_ok = rows < n_rows
        stat, scale, slope = _row_statistics(STAT, RSTD, rows, row_ok, eps, EPS_INSIDE, CENTRED)
        # Both passes read s and dy, and the weight (from L2). Each pass has its own masked load so that each keeps
        # its eviction hint: the first keeps the rows in L2 for the second (evict_last), the second lets them go.
        rows64 = rows.to(tl.int64)[:, None]
        s_ptr = S + rows64 * stride_s + cols[None, :]
        dy_ptr = DY + rows64 * stride_dy + cols[None, :]
        mask = row_ok[:, None] & in_row[None, :]
        first_mask = mask & (k < per_pass)
        second_mask = mask & second
        s = tl.where(
            second,
            tl.load(s_ptr, mask=second_mask, other=0.0, eviction_policy="evict_first"),
            tl.load(s_ptr, mask=first_mask, other=0.0, eviction_policy="evict_last"),
        ).to(compute)
        dy = tl.where(
            second,
            tl.load(dy_ptr, mask=second_mask, other=0.0, eviction_policy="evict_first"),
            tl.load(dy_ptr, mask=first_mask, other=0.0, eviction_policy="evict_last"),
        ).to(compute)
        g = dy
        if HAS_WEIGHT:
            g = dy * _gain(W, STAT, cols, in_row, offset, CENTRED)[None, :]
        second_in_row = in_row & second
        if HAS_DS:
            ds_ptr = DS + rows64 * stride_ds + cols[None, :]
            ds = tl.load(ds_ptr, mask=second_mask, other=0.0, eviction_policy="evict_first")
        if HAS_WEIGHT:
            dw = tl.load(dw_row + cols, mask=second_in_row, other=0.0, eviction_policy="evict_last")
        if HAS_BIAS:
            db = tl.load(db_row + cols, mask=second_in_row, other=0.0, eviction_policy="evict_last")
        if second:
            if CENTRED:
                xhat = tl.where(mask, (s - stat[:, None]) * scale[:, None], 0.0)
                dx = (g - mean_g[:, None] - xhat * mean_gx[:, None]) * scale[:, None]
            else:
                dx = g * scale[:, None] - tl.where((cols < K)[None, :], s, 0.0) * c_slope[:, None]
            if HAS_DS:
                dx += ds.to(compute)
            dx_ptr = DX + rows64 * N + cols[None, :]
            tl.store(dx_ptr, dx.to(DX.dtype.element_ty), mask=mask, eviction_policy="evict_first")
            if HAS_WEIGHT:
                if CENTRED:
                    share = dy * xhat
                else:
                    share = dy * s * scale[:, None]
                tl.store(dw_row + cols, dw + tl.sum(share, axis=0), mask=in_row, eviction_policy="evict_last")
            if HAS_BIAS:
                tl.store(db_row + cols, db + tl.sum(dy, axis=0), mask=in_row, eviction_policy="evict_last")
        else:
            if CENTRED:
                sum_g += g
                acc += g * tl.where(mask, (s - stat[:, None]) * scale[:, None], 0.0)
            else:
                acc += g * s
            if k == per_pass - 1:  # the rows' sums, and the accumulators cleared for the next group
                if CENTRED:
                    mean_g = tl.sum(sum_g, axis=1) / N
                    mean_gx = tl.sum(acc, axis=1) / N
                else:
                    c_slope = tl.sum(acc, axis=1) * slope / K
                sum_g = tl.zeros([GROUP, CHUNK], dtype=compute)
                acc = tl.zeros([GROUP, CHUNK], dtype=compute)
