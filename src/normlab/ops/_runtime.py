"""Where the Triton kernels can run, and the clear error when they cannot."""
from __future__ import annotations

import torch
import triton

INTERPRET_HINT = (
    "Triton kernels run on CUDA tensors, or on CPU tensors only in Triton's interpreter: "
    "set the environment variable TRITON_INTERPRET=1 before triton or normlab.ops is first imported "
    "(e.g. `TRITON_INTERPRET=1 python ...`, or os.environ['TRITON_INTERPRET'] = '1' at the top of the script), "
    "or move the tensor to a CUDA device, or pick another backend"
)


def kernels_interpreted(kernel) -> bool:
    """True when `kernel` (a @triton.jit function) was defined under TRITON_INTERPRET=1."""
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(kernel, InterpretedFunction)


def check_triton_device(x: torch.Tensor, interpreted: bool) -> None:
    if x.device.type == "cuda":
        return
    if x.device.type == "cpu" and interpreted:
        return
    where = "a CPU tensor without the interpreter" if x.device.type == "cpu" else f"a tensor on {x.device}"
    raise RuntimeError(f"backend='triton' was called on {where}. {INTERPRET_HINT}.")


def multiprocessor_count(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4  # interpreter: programs run one after another, few is fastest


def warps_for(elements_per_program: int) -> int:
    """About 16 fp32 values per thread: enough in flight for bandwidth, few enough to stay in registers."""
    return max(1, min(16, triton.next_power_of_2(max(1, elements_per_program // (32 * 16)))))


def patch_interpreter_for_numpy_2_4() -> None:
    """Let Triton 3.6's interpreter run loops with runtime bounds under NumPy >= 2.4.

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

    def patched(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(np.asarray(self.handle.data).reshape(-1)[0]))

    patched.normlab_shim = True
    interpreter._patch_lang_tensor = patched
