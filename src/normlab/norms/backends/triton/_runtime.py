"""Where the Triton kernels can run, and the clear error when they cannot."""

from __future__ import annotations

import functools

import numpy as np
import torch
import triton

INTERPRET_HINT = (
    "Triton kernels run on CUDA tensors, or on CPU tensors only in Triton's interpreter: "
    "set the environment variable TRITON_INTERPRET=1 before triton or normlab.norms.backends.triton is first imported "
    "(e.g. `TRITON_INTERPRET=1 python ...`, or os.environ['TRITON_INTERPRET'] = '1' at the top of the script), "
    "or move the tensor to a CUDA device, or pick another backend"
)


def kernels_interpreted(kernel) -> bool:
    """True when `kernel` (a @triton.jit function) was defined under TRITON_INTERPRET=1."""
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(kernel, InterpretedFunction)


def check_triton_device(x: torch.Tensor, interpreted: bool) -> None:
    # is_cuda and is_cpu are flags on the tensor; x.device builds a torch.device object on every call
    if x.is_cuda or (interpreted and x.is_cpu):
        return
    where = "a CPU tensor without the interpreter" if x.device.type == "cpu" else f"a tensor on {x.device}"
    raise RuntimeError(f"backend='triton' was called on {where}. {INTERPRET_HINT}.")


@functools.cache  # asked on every backward call; a device's SM count does not change
def multiprocessor_count(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4  # interpreter: programs run one after another, few is fastest


@functools.cache  # triton.next_power_of_2 costs µs per host call; few distinct sizes occur
def warps_for(elements_per_program: int) -> int:
    """About 16 fp32 values per thread: enough in flight for bandwidth, few enough to stay in registers."""
    return max(1, min(16, triton.next_power_of_2(max(1, elements_per_program // (32 * 16)))))


def patch_interpreter_for_numpy_2_4() -> None:
    """Let Triton's interpreter (3.2 to 3.6) run loops with runtime bounds under NumPy >= 2.4.

    The interpreter holds scalars as 1-element arrays and converts them with
    int(array), which NumPy 2.4 turned into a TypeError, so `for i in range(0, N, C)`
    fails (triton-lang/triton issue #9171, fixed upstream by PR #9172 after 3.6).
    This applies the same one-line fix, only when it is needed.
    """
    import numpy as np
    from triton.runtime import interpreter

    try:
        int(np.ones(1, dtype=np.int32))
        return  # this NumPy still converts 1-element arrays
    except TypeError:
        pass
    original = getattr(interpreter, "_patch_lang_tensor", None)
    if original is None or getattr(original, "normlab_shim", False):
        return

    def index(self):
        return int(np.asarray(self.handle.data).reshape(-1)[0])

    def patched(tensor, *scope):
        # Triton 3.6 passes a scope that undoes its patches after the launch; Triton 3.2 (torch 2.6's) sets the
        # attributes on the class itself and passes none.
        original(tensor, *scope)
        if scope:
            scope[0].set_attr(tensor, "__index__", index)
        else:
            tensor.__index__ = index

    patched.normlab_shim = True
    interpreter._patch_lang_tensor = patched


def _bf16_to_f32(bits):
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32)


def _f32_to_bf16(values):
    """Round float32 to bfloat16 bits, to nearest, ties to even, as a GPU's cvt.rn.bf16.f32 does."""
    values = np.asarray(values, dtype=np.float32)
    bits = values.view(np.uint32)
    rounded = ((bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    return np.where(np.isnan(values), np.uint16(0x7FC0), rounded).astype(np.uint16)


def patch_interpreter_bf16() -> None:
    """Make Triton 3.6's interpreter compute bfloat16 as a GPU does: in fp32, rounded to nearest.

    The interpreter holds bf16 values as their raw 16-bit patterns (uint16 arrays), then applies
    NumPy arithmetic to those integers (so x + residual in bf16 is garbage, often NaN), and it
    converts fp32 to bf16 by truncation (up to 1 ulp off, where a GPU rounds to nearest: 1/2 ulp).
    This widens bf16 operands to fp32 for float arithmetic, comparisons, unary math and fma, and
    rounds every result and every conversion to bf16 to nearest even. Only the interpreter's
    builder is patched; compiled kernels on a GPU never see it.
    """
    import triton.language as tl
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    if getattr(builder, "normlab_bf16", False):
        return
    float_ops = {
        np.add,
        np.subtract,
        np.multiply,
        np.divide,
        np.fmod,
        np.minimum,
        np.maximum,
        np.less,
        np.greater,
        np.less_equal,
        np.greater_equal,
        np.equal,
        np.not_equal,
    }
    original_binary, original_unary, original_fma = builder.binary_op, builder.unary_op, builder.create_fma
    original_cast, original_fp_to_fp = builder.cast_impl, builder.create_fp_to_fp

    def is_bf16(handle) -> bool:
        return handle.dtype.scalar == tl.bfloat16

    def binary_op(self, lhs, rhs, op):
        if op not in float_ops or not (is_bf16(lhs) and is_bf16(rhs)):
            return original_binary(self, lhs, rhs, op)
        output = op(_bf16_to_f32(lhs.data), _bf16_to_f32(rhs.data))
        if output.dtype == np.bool_:
            return interpreter.TensorHandle(output, lhs.dtype.scalar)
        return interpreter.TensorHandle(_f32_to_bf16(output), tl.bfloat16)

    def unary_op(self, arg, op):
        if not is_bf16(arg):
            return original_unary(self, arg, op)
        return interpreter.TensorHandle(_f32_to_bf16(op(_bf16_to_f32(arg.data))), tl.bfloat16)

    def create_fma(self, x, y, z):
        if not is_bf16(z):
            return original_fma(self, x, y, z)
        result = _bf16_to_f32(x.data) * _bf16_to_f32(y.data) + _bf16_to_f32(z.data)
        return interpreter.TensorHandle(_f32_to_bf16(result), tl.bfloat16)

    def cast_impl(self, src, dst_type):
        source, target = src.dtype.scalar, dst_type.scalar
        if source == target or (source != tl.bfloat16 and target != tl.bfloat16):
            return original_cast(self, src, dst_type)
        values = _bf16_to_f32(src.data) if source == tl.bfloat16 else src.data.astype(np.float32)
        if target == tl.bfloat16:
            return interpreter.TensorHandle(_f32_to_bf16(values), tl.bfloat16)
        return interpreter.TensorHandle(values.astype(interpreter._get_np_dtype(dst_type)), target)

    def create_fp_to_fp(self, src, dst_type, rounding_mode):
        if src.dtype.scalar != tl.bfloat16 and dst_type.scalar != tl.bfloat16:
            return original_fp_to_fp(self, src, dst_type, rounding_mode)
        return cast_impl(self, src, dst_type)

    builder.binary_op, builder.unary_op, builder.create_fma = binary_op, unary_op, create_fma
    builder.cast_impl, builder.create_fp_to_fp = cast_impl, create_fp_to_fp
    for name in (
        "create_si_to_fp",
        "create_ui_to_fp",
        "create_fp_to_si",
        "create_fp_to_ui",
        "create_fp_ext",
        "create_fp_trunc",
    ):
        setattr(builder, name, lambda self, src, dst_type, _cast=cast_impl: _cast(self, src, dst_type))
    builder.normlab_bf16 = True
