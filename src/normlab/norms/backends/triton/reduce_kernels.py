"""The one reduction a backward launches: sum the per-program weight (and bias) gradient partials, and cast.

The row kernels leave a [programs, N] buffer of partial sums in the statistics dtype (one line per
program). This kernel adds the lines column by column and stores the result in the parameter's dtype,
so the backward needs no ATen `sum` or cast (each one a GPU launch of its own). One kernel reduces both
the weight and the bias partials of LayerNorm.
"""

import triton
import triton.language as tl


@triton.jit(do_not_specialize=["programs"])
def sum_partials(
    DW_PARTIAL,
    DB_PARTIAL,
    DW,
    DB,
    programs,
    N,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    LINES: tl.constexpr,
    BLOCK: tl.constexpr,
):
    compute = DW_PARTIAL.dtype.element_ty
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    col_ok = cols < N
    dw_acc = tl.zeros([LINES, BLOCK], dtype=compute)
    db_acc = tl.zeros([LINES, BLOCK], dtype=compute)
    for start in range(0, programs, LINES):
        lines = start + tl.arange(0, LINES)
        mask = (lines < programs)[:, None] & col_ok[None, :]
        offsets = lines.to(tl.int64)[:, None] * N + cols[None, :]  # programs x N can pass 2^31
        if HAS_WEIGHT:
            dw_acc += tl.load(DW_PARTIAL + offsets, mask=mask, other=0.0)
        if HAS_BIAS:
            db_acc += tl.load(DB_PARTIAL + offsets, mask=mask, other=0.0)
    if HAS_WEIGHT:
        tl.store(DW + cols, tl.sum(dw_acc, axis=0).to(DW.dtype.element_ty), mask=col_ok)
    if HAS_BIAS:
        tl.store(DB + cols, tl.sum(db_acc, axis=0).to(DB.dtype.element_ty), mask=col_ok)
