"""The fused pre-norm add shared by every forward kernel."""

import triton
import triton.language as tl


@triton.jit
def load_summed(x_ptrs, r_ptrs, s_ptrs, mask, HAS_RESIDUAL: tl.constexpr, REREAD: tl.constexpr):
    """Load x; with a residual, return s = x + residual and store it.

    The sum is taken in x's dtype, as an unfused `x + residual` would round it, so the s a
    pre-norm block carries on equals the one the unfused computation would produce.

    Eviction hints: data read once is marked evict_first, so streaming it does not push out of L2
    what is read again. REREAD says the caller reads the row again (a chunked kernel's later pass):
    then s, or x when there is no residual, is marked evict_last instead."""
    if HAS_RESIDUAL:
        s = tl.load(x_ptrs, mask=mask, other=0.0, eviction_policy="evict_first")
        s = s + tl.load(r_ptrs, mask=mask, other=0.0, eviction_policy="evict_first")
        if REREAD:
            tl.store(s_ptrs, s, mask=mask, eviction_policy="evict_last")
        else:
            tl.store(s_ptrs, s, mask=mask, eviction_policy="evict_first")
    elif REREAD:
        s = tl.load(x_ptrs, mask=mask, other=0.0, eviction_policy="evict_last")
    else:
        s = tl.load(x_ptrs, mask=mask, other=0.0, eviction_policy="evict_first")
    return s


@triton.jit
def reload_summed(x_ptrs, s_ptrs, mask, HAS_RESIDUAL: tl.constexpr):
    """Read back the tile load_summed(..., REREAD=True) returned: s when it was stored, else x; last use, evict_first.

    The barrier orders the read after this program's store of s, and keeps the compiler from reusing the
    first load's registers instead of reading again (the point of reloading)."""
    tl.debug_barrier()
    if HAS_RESIDUAL:
        s = tl.load(s_ptrs, mask=mask, other=0.0, eviction_policy="evict_first")
    else:
        s = tl.load(x_ptrs, mask=mask, other=0.0, eviction_policy="evict_first")
    return s
