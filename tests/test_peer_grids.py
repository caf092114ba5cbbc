"""normlab across its peers' test grids, with its peers' criterion.

* transformers' own LlamaRMSNorm and GemmaRMSNorm (Liger-Kernel's "llama" and "gemma" casting
  modes) and a plain RMSNorm ("none"), forward and backward, fp32 / bf16 / fp16.
* flash-attention's layer-norm grid (tests/ops/triton/test_layer_norm.py): hidden sizes 192-4096,
  input / residual / weight dtype combinations, residual_in_fp32, prenorm (the sum returned and
  differentiated too), RMS and LN, through the Triton kernels (Triton's interpreter on CPU, so the
  row count is cut from their 2048 to 4).

The rule, theirs: normlab's error against a float64 reference is at most twice PyTorch's own
error (the same computation in the same dtypes with PyTorch ops) plus a small atol.
"""

import pytest
import torch
import torch.nn.functional as F

import normlab
from normlab.norms.backends.triton import launch, triton_layer_norm, triton_rms_norm

transformers_llama = pytest.importorskip("transformers.models.llama.modeling_llama")
transformers_gemma = pytest.importorskip("transformers.models.gemma.modeling_gemma")

DEVICE = "cpu" if launch.INTERPRETED or not torch.cuda.is_available() else "cuda"
ATOL = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 1e-2}


def max_error(actual, expected):
    return (actual.double() - expected.double()).abs().max().item()


def check(ours, pytorch, reference, dtype, what):
    ours_error, pytorch_error = max_error(ours, reference), max_error(pytorch, reference)
    assert ours_error <= 2 * pytorch_error + ATOL[dtype], (
        f"{what}: {ours_error:.3g} > 2 x {pytorch_error:.3g} + {ATOL[dtype]}"
    )


# ---------------------------------------------------------------- transformers' LLaMA and Gemma norms

MODES = {  # casting_mode: (transformers module, normlab keyword arguments)
    "llama": (transformers_llama.LlamaRMSNorm, dict(casting_mode="llama")),
    "gemma": (transformers_gemma.GemmaRMSNorm, dict(casting_mode="gemma", offset=1.0)),
}


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16, torch.float16))
@pytest.mark.parametrize("mode", ("llama", "gemma"))
def test_transformers_norms_forward_and_backward(mode, dtype):
    module_class, options = MODES[mode]
    backends = (
        ("reference", "eager", "compile", "auto")
        + (("triton",) if mode == "gemma" else ())
        + (("cpp",) if dtype == torch.float32 else ())
    )
    torch.manual_seed(0)
    d = 123  # Liger's odd hidden size
    theirs = module_class(d, eps=1e-6).to(dtype)
    with torch.no_grad():
        theirs.weight.copy_((torch.randn(d) * 0.3 + (0.0 if mode == "gemma" else 1.0)).to(dtype))
    wide = module_class(d, eps=1e-6).double()
    wide.load_state_dict(theirs.state_dict())
    x = (torch.randn(5, 7, d) * 2).to(dtype)
    dy = torch.randn(5, 7, d).to(dtype)

    def run(module, inputs):
        device = module.weight.device
        inputs = inputs.detach().to(device).requires_grad_()
        y = module(inputs)
        dx, dw = torch.autograd.grad(y, (inputs, module.weight), dy.to(device, y.dtype))
        return y.cpu(), dx.cpu(), dw.cpu()

    reference = run(wide, x.double())
    pytorch = run(theirs, x)
    for backend in backends:
        ours_module = normlab.RMSNorm(d, eps=1e-6, backend=backend, dtype=dtype, **options)
        ours_module.load_state_dict(theirs.state_dict())  # the state dicts are interchangeable
        ours = run(ours_module.to(DEVICE if backend == "triton" else "cpu"), x)
        for name, a, b, c in zip(("y", "dx", "dweight"), ours, pytorch, reference):
            assert a.dtype == b.dtype == dtype
            check(a, b, c, dtype, f"{mode} {backend} {name}")
        if backend in ("reference", "eager"):
            # The cast order is reproduced, not only the accuracy: the forward matches to the last bit or so.
            assert max_error(ours[0], pytorch[0]) <= torch.finfo(dtype).eps * pytorch[0].abs().max().item()


def test_llama_and_gemma_orders_differ_in_bf16_and_each_matches_its_model():
    torch.manual_seed(1)
    d = 512
    x, weight = torch.randn(64, d).to(torch.bfloat16), (1 + 0.3 * torch.randn(d)).to(torch.bfloat16)
    llama = transformers_llama.LlamaRMSNorm(d).to(torch.bfloat16)
    with torch.no_grad():
        llama.weight.copy_(weight)
    ours_llama = normlab.rms_norm(x, weight, casting_mode="llama", backend="eager")
    ours_none = normlab.rms_norm(x, weight, casting_mode="none", backend="eager")
    assert torch.equal(ours_llama, llama(x))
    assert not torch.equal(ours_none, llama(x))  # the single rounding really is another order


# ---------------------------------------------------------------- flash-attention's layer-norm grid

HIDDEN = (192, 2048, 2560, 3000, 4096)
DTYPE_COMBOS = [  # (input, residual, weight), as in flash-attention's grid
    (torch.float32, torch.float32, torch.float32),
    (torch.float16, torch.float32, torch.float32),
    (torch.bfloat16, torch.float32, torch.float32),
    (torch.float16, torch.float16, torch.float16),
    (torch.bfloat16, torch.bfloat16, torch.bfloat16),
]
RESIDUAL = ("none", "residual", "residual_in_fp32")


def _flash_case(hidden, combo, residual, rms, rows=4):
    input_dtype, residual_dtype, weight_dtype = combo
    torch.manual_seed(hidden)
    x = torch.randn(rows, hidden, device=DEVICE).to(input_dtype).requires_grad_()
    r = torch.randn(rows, hidden, device=DEVICE).to(residual_dtype).requires_grad_() if residual != "none" else None
    weight = (1 + 0.1 * torch.randn(hidden, device=DEVICE)).to(weight_dtype).requires_grad_()
    bias = None if rms else (0.1 * torch.randn(hidden, device=DEVICE)).to(weight_dtype).requires_grad_()
    in_fp32 = residual == "residual_in_fp32"
    dy = torch.randn(rows, hidden, device=DEVICE).to(input_dtype)
    params = [p for p in (weight, bias) if p is not None]
    leaves = [x] + ([r] if r is not None else []) + params
    s_dtype = normlab.norms.validation.sum_dtype(x, r, in_fp32)
    ds = torch.randn(rows, hidden, device=DEVICE).to(s_dtype) if r is not None else None  # prenorm: s is used too

    def grads(y, s):
        outputs, upstream = [y], [dy]
        if s is not None:
            outputs.append(s)
            upstream.append(ds)
        return torch.autograd.grad(outputs, leaves, upstream)

    # PyTorch's own computation in the given dtypes (flash-attention's layer_norm_ref without upcast).
    s_pt = None if r is None else x.to(s_dtype) + r.to(s_dtype)
    base = x if r is None else s_pt
    if rms:
        y_pt = F.rms_norm(base.to(weight_dtype), (hidden,), weight, 1e-6).to(input_dtype)
    else:
        y_pt = F.layer_norm(base.to(weight_dtype), (hidden,), weight, bias, 1e-6).to(input_dtype)
    pytorch = (y_pt,) + grads(y_pt, s_pt)

    # The float64 reference.
    wide = [t.detach().double().requires_grad_() for t in leaves]
    x64, r64 = wide[0], (wide[1] if r is not None else None)
    p64 = wide[1 + (r is not None) :]
    s64 = None if r is None else x64 + r64
    base64 = x64 if r is None else s64
    y64 = F.rms_norm(base64, (hidden,), p64[0], 1e-6) if rms else F.layer_norm(base64, (hidden,), p64[0], p64[1], 1e-6)
    outputs, upstream = [y64], [dy.double()]
    if s64 is not None:
        outputs.append(s64)
        upstream.append(ds.double())
    reference = (y64,) + torch.autograd.grad(outputs, wide, upstream)

    if rms:
        out = triton_rms_norm(x, weight, 1e-6, residual=r, residual_in_fp32=in_fp32)
    else:
        out = triton_layer_norm(x, weight, bias, 1e-6, residual=r, residual_in_fp32=in_fp32)
    y, s = out if r is not None else (out, None)
    assert y.dtype == input_dtype and (s is None or s.dtype == s_dtype)
    ours = (y,) + grads(y, s)
    names = ["y", "dx"] + (["dresidual"] if r is not None else []) + ["dweight"] + ([] if rms else ["dbias"])
    for name, a, b, c in zip(names, ours, pytorch, reference):
        # Gradients are sums over many terms: scale atol by the gradient's own size.
        scale = max(1.0, c.abs().max().item()) if name.startswith(("dweight", "dbias")) else 1.0
        ours_error, pytorch_error = max_error(a, c), max_error(b, c)
        assert ours_error <= 2 * pytorch_error + ATOL[input_dtype] * scale, (
            f"hidden {hidden} {combo} {residual} {'rms' if rms else 'ln'} {name}: {ours_error:.3g} vs PyTorch {pytorch_error:.3g}"
        )


@pytest.mark.parametrize("rms", (True, False), ids=("rms", "ln"))
@pytest.mark.parametrize("residual", RESIDUAL)
@pytest.mark.parametrize("combo", DTYPE_COMBOS, ids=lambda c: "-".join(str(t).split(".")[1] for t in c))
def test_flash_attention_grid(combo, residual, rms):
    if residual == "none" and combo[1] != combo[0]:
        pytest.skip("without a residual the residual dtype plays no part (same case as the matching combination)")
    for hidden in HIDDEN:
        _flash_case(hidden, combo, residual, rms)
