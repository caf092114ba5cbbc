"""The fused pre-norm add shared by every forward kernel."""

import triton
import triton.language as tl


@triton.jit
def load_summed(x_ptrs, r_ptrs, s_ptrs, mask, HAS_RESIDUAL: tl.constexpr):
    """Load x; with a residual, return s = x + residual and store it.

    The sum is taken in x's dtype, as an unfused `x + residual` would round it, so the s a
    pre-norm block carries on equals the one the unfused computation would produce."""
    s = tl.load(x_ptrs, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        s = s + tl.load(r_ptrs, mask=mask, other=0.0)
        tl.store(s_ptrs, s, mask=mask)
    return s
