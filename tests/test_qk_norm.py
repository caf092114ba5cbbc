"""QK-norm's shape on backend="triton": RMSNorm over head_dim (64-256) of the (tokens x heads) rows that a QKV
split leaves as a strided view, against the float64 reference.

    qkv = linear(x).view(B, T, 3, H, Dh);  q = qkv[:, :, 0]     # last dim contiguous, the others not

q's rows need two strides (tokens 3*H*Dh apart, heads Dh apart). The RMS on-chip kernels address row r at
(r // heads) * token stride + (r % heads) * head stride (norm_kernels._row_offsets), so launch._row_view passes q
as a (tokens, heads, Dh) view of qkv's storage, forward and backward, without a copy; each row's y, dx and
dweight are the same bits as for q.contiguous(). A split of the whole width (q = qkv[..., :D], QK-norm over all
heads at once, as OLMo-2) is one row stride and is launched on the original storage. A view whose last
dimension is not contiguous is copied, as before.
"""

import pytest
import torch

import normlab
from normlab import rms_norm_reference
from normlab.norms.backends.triton import launch

DEVICE = "cpu" if launch.INTERPRETED or not torch.cuda.is_available() else "cuda"
B, T, H = 2, 3, 4
HEAD_DIMS = (64, 128, 256)


@pytest.fixture
def launched(monkeypatch):
    """The (data pointer, row stride) of X at each on-chip forward launch."""
    seen = []
    original = launch.FORWARD_ONCHIP

    def recording(grid, x, *args, **kwargs):
        seen.append((x.data_ptr(), x.stride(0)))
        return original(grid, x, *args, **kwargs)

    monkeypatch.setattr(launch, "FORWARD_ONCHIP", recording)
    return seen


@pytest.fixture
def launched_backward(monkeypatch):
    """The data pointer of S at each on-chip backward launch."""
    seen = []
    original = launch.BACKWARD_ONCHIP

    def recording(grid, dy, ds, s, *args, **kwargs):
        seen.append(s.data_ptr())
        return original(grid, dy, ds, s, *args, **kwargs)

    monkeypatch.setattr(launch, "BACKWARD_ONCHIP", recording)
    return seen


def _qkv(head_dim, seed=0):
    generator = torch.Generator().manual_seed(seed)
    d = H * head_dim
    x = torch.randn(B, T, d, generator=generator).to(DEVICE)
    w = (torch.randn(3 * d, d, generator=generator) / d**0.5).to(DEVICE)
    return torch.nn.functional.linear(x, w).view(B, T, 3, H, head_dim)


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_qkv_split_matches_the_float64_reference_forward_and_backward(head_dim):
    qkv = _qkv(head_dim).requires_grad_()
    q, k = qkv[:, :, 0], qkv[:, :, 1]
    assert q.stride(-1) == 1 and not q.is_contiguous()
    generator = torch.Generator().manual_seed(1)
    q_weight, k_weight = ((1 + 0.1 * torch.randn(head_dim, generator=generator)).to(DEVICE) for _ in range(2))
    dq, dk = (torch.randn(B, T, H, head_dim, generator=generator).to(DEVICE) for _ in range(2))
    yq = normlab.rms_norm(q, q_weight, 1e-6, backend="triton")
    yk = normlab.rms_norm(k, k_weight, 1e-6, backend="triton")
    (grad,) = torch.autograd.grad((yq, yk), qkv, (dq, dk))

    qkv64 = qkv.detach().double().requires_grad_()
    ref_q = rms_norm_reference(qkv64[:, :, 0], q_weight.double(), 1e-6)
    ref_k = rms_norm_reference(qkv64[:, :, 1], k_weight.double(), 1e-6)
    (ref_grad,) = torch.autograd.grad((ref_q, ref_k), qkv64, (dq.double(), dk.double()))
    for ours, ref in ((yq, ref_q), (yk, ref_k), (grad, ref_grad)):
        assert ours.shape == ref.shape
        torch.testing.assert_close(ours.double(), ref, rtol=1e-5, atol=1e-5)
    assert torch.equal(grad[:, :, 2], torch.zeros_like(grad[:, :, 2]))  # v is untouched


@pytest.mark.parametrize("head_dim", (64, 256))
def test_qkv_split_per_head_is_launched_without_a_copy(head_dim, launched):
    qkv = _qkv(head_dim)
    q = qkv[:, :, 0]
    y = normlab.rms_norm(q, None, 1e-6, backend="triton")
    torch.testing.assert_close(y.double(), rms_norm_reference(q.double(), None, 1e-6), rtol=1e-5, atol=1e-5)
    assert launched == [(q.data_ptr(), 3 * H * head_dim)]  # the token stride; the head stride is head_dim


@pytest.mark.parametrize("head_dim", (64, 256))
@pytest.mark.parametrize("with_weight", (False, True))
def test_the_copy_free_split_gives_the_contiguous_bits(head_dim, with_weight, launched, launched_backward):
    """Forward and backward on one head's view of qkv against the same rows made contiguous: every y, dx and
    dweight bit the same, and the backward reads s (the saved q) in place too."""
    qkv = _qkv(head_dim, seed=2).requires_grad_()
    q = qkv[:, :, 1]
    weight = (1 + 0.1 * torch.randn(head_dim, generator=torch.Generator().manual_seed(3))).to(DEVICE)
    weight = weight.requires_grad_() if with_weight else None
    dy = torch.randn(B, T, H, head_dim, generator=torch.Generator().manual_seed(4)).to(DEVICE)
    y = normlab.rms_norm(q, weight, 1e-6, backend="triton")
    grads = torch.autograd.grad(y, (qkv, weight) if with_weight else (qkv,), dy)
    assert [pointer for pointer, _ in launched] == [q.data_ptr()] and launched_backward == [q.data_ptr()]

    q_copy = q.detach().contiguous().requires_grad_()
    weight_copy = None if weight is None else weight.detach().clone().requires_grad_()
    y_copy = normlab.rms_norm(q_copy, weight_copy, 1e-6, backend="triton")
    grads_copy = torch.autograd.grad(y_copy, (q_copy, weight_copy) if with_weight else (q_copy,), dy)
    assert torch.equal(y, y_copy)
    assert torch.equal(grads[0][:, :, 1], grads_copy[0])
    assert torch.equal(grads[0][:, :, 0], torch.zeros_like(grads_copy[0]))
    if with_weight:
        assert torch.equal(grads[1], grads_copy[1])


def test_layer_norm_reads_the_split_in_place_too(launched, launched_backward):
    """One kernel family: LayerNorm's on-chip kernels take the two row strides as well, so a head of qkv is
    normalised in place, forward and backward, with the bits of the same rows made contiguous."""
    head_dim = 64
    qkv = _qkv(head_dim, seed=5).requires_grad_()
    q = qkv[:, :, 0]
    generator = torch.Generator().manual_seed(6)
    weight, bias = ((1 + 0.1 * torch.randn(head_dim, generator=generator)).to(DEVICE) for _ in range(2))
    weight, bias = weight.requires_grad_(), bias.requires_grad_()
    dy = torch.randn(B, T, H, head_dim, generator=generator).to(DEVICE)
    y = normlab.layer_norm(q, weight, bias, 1e-5, backend="triton")
    grads = torch.autograd.grad(y, (qkv, weight, bias), dy)
    assert [pointer for pointer, _ in launched] == [q.data_ptr()] and launched_backward == [q.data_ptr()]

    q_copy = q.detach().contiguous().requires_grad_()
    params = [p.detach().clone().requires_grad_() for p in (weight, bias)]
    y_copy = normlab.layer_norm(q_copy, *params, 1e-5, backend="triton")
    grads_copy = torch.autograd.grad(y_copy, (q_copy, *params), dy)
    assert torch.equal(y, y_copy)
    assert torch.equal(grads[0][:, :, 0], grads_copy[0])
    assert torch.equal(grads[1], grads_copy[1]) and torch.equal(grads[2], grads_copy[2])


def test_a_whole_width_split_is_launched_on_the_original_storage(launched):
    head_dim = 64
    qkv = _qkv(head_dim).view(B, T, 3 * H * head_dim)
    q = qkv[..., : H * head_dim]  # QK-norm over all heads at once: one row stride (3 H Dh)
    y = normlab.rms_norm(q, None, 1e-6, backend="triton")
    torch.testing.assert_close(y.double(), rms_norm_reference(q.double(), None, 1e-6), rtol=1e-5, atol=1e-5)
    assert launched == [(q.data_ptr(), 3 * H * head_dim)]


def test_a_view_whose_last_dimension_is_strided_is_copied(launched):
    x = torch.randn(64, 2 * 8, device=DEVICE)
    strided = x.t()[:8]  # (8, 64) with column stride 16
    assert strided.stride(-1) != 1
    y = normlab.rms_norm(strided, None, 1e-6, backend="triton")
    torch.testing.assert_close(y.double(), rms_norm_reference(strided.double(), None, 1e-6), rtol=1e-5, atol=1e-5)
    assert len(launched) == 1 and launched[0][0] != strided.data_ptr()


BAD = [
    ("eps zero", dict(eps=0.0), ValueError, "eps must be > 0"),
    ("eps negative", dict(eps=-1e-6), ValueError, "eps must be > 0"),
    ("weight of the wrong length", dict(weight=torch.ones(63)), ValueError, r"weight has shape \(63,\)"),
    ("integer weight", dict(weight=torch.ones(64, dtype=torch.int32)), TypeError, "weight has dtype torch.int32"),
    ("empty tensor", dict(x=torch.empty(0)), ValueError, "empty last dimension"),
    ("empty last dimension", dict(x=torch.empty(B, T, H, 0)), ValueError, "empty last dimension"),
]


@pytest.mark.parametrize("case", BAD, ids=lambda c: c[0])
def test_bad_input_raises_one_clear_error(case, launched):
    _, overrides, error, message = case
    q = _qkv(64)[:, :, 0]
    args = dict(x=q, weight=torch.ones(64), eps=1e-6)
    args.update(overrides)
    args = {k: v.to(DEVICE) if isinstance(v, torch.Tensor) else v for k, v in args.items()}
    with pytest.raises(error, match=message):
        normlab.rms_norm(args["x"], args["weight"], args["eps"], backend="triton")
    assert launched == []
