"""torch.compile(fullgraph=True) over a small model with backend="triton" norms: one graph, no breaks, and the
row count does not recompile.

On CPU the graph's norm is the registered custom op (normlab::rms_norm_forward, normlab::layer_norm_forward),
which runs the Triton kernels in the interpreter when the graph runs; compile sees only its fake impl. The
counting backend records the compiled graphs (torch._dynamo.testing.CompileCounter) and what they call; a second
test runs the same model through aot_eager (the forward and backward graphs AOTAutograd traces through the
op's registered autograd) and compares with eager.

eps is a float argument of the custom op's schema, and Dynamo specialises an op's float arguments: each eps value
is a graph of its own (one compile per value, none per row count), not one graph for every eps.
"""

import pytest
import torch
import torch._dynamo
from torch._dynamo.testing import CompileCounter
from torch._dynamo.utils import counters

import normlab
from normlab.norms.backends.triton import launch

DEVICE = "cpu" if launch.INTERPRETED or not torch.cuda.is_available() else "cuda"
D = 32
EPS_VALUES = (1e-6, 1e-5, 1e-3)
ROW_COUNTS = (3, 7, 12)


class Block(torch.nn.Module):
    """A pre-norm residual block: RMSNorm with the fused residual add, a linear mix, a LayerNorm."""

    def __init__(self, eps: float):
        super().__init__()
        self.norm = normlab.RMSNorm(D, eps=eps, backend="triton")
        self.mix = torch.nn.Linear(D, D)
        self.out_norm = normlab.LayerNorm(D, eps=eps, backend="triton")

    def forward(self, x, stream):
        h, stream = self.norm(x, residual=stream)
        return self.out_norm(stream + self.mix(h))


class Recording(CompileCounter):
    """CompileCounter that also keeps each graph's call targets."""

    def __init__(self):
        super().__init__()
        self.targets = []

    def __call__(self, gm, example_inputs):
        self.targets.append({str(node.target) for node in gm.graph.nodes if node.op == "call_function"})
        return super().__call__(gm, example_inputs)


def _inputs(rows, seed):
    generator = torch.Generator().manual_seed(seed)
    x, stream = (torch.randn(rows, D, generator=generator).to(DEVICE) for _ in range(2))
    torch._dynamo.mark_dynamic(x, 0)
    torch._dynamo.mark_dynamic(stream, 0)
    return x, stream


def test_no_graph_breaks_and_no_recompiles_across_row_counts():
    torch._dynamo.reset()
    counters.clear()
    backend = Recording()
    torch.manual_seed(0)
    for eps in EPS_VALUES:
        model = Block(eps).to(DEVICE)
        compiled = torch.compile(model, backend=backend, fullgraph=True)
        frames_before = backend.frame_count
        for rows in ROW_COUNTS:
            x, stream = _inputs(rows, rows)
            with torch.no_grad():
                assert torch.equal(compiled(x, stream), model(x, stream)), (eps, rows)
        assert backend.frame_count - frames_before == 1, f"eps={eps}: the row counts recompiled"
    assert backend.frame_count == len(EPS_VALUES)  # one graph per eps value (a float of the op's schema)
    assert not counters["graph_break"], dict(counters["graph_break"])
    for targets in backend.targets:  # the graph calls the custom ops, not their kernels
        assert {"normlab.rms_norm_forward", "normlab.layer_norm_forward"} <= targets, targets


def test_aot_eager_forward_and_backward_match_eager():
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(1)
    model = Block(1e-5).to(DEVICE)
    compiled = torch.compile(model, backend="aot_eager" if DEVICE == "cpu" else "inductor", fullgraph=True)
    for rows in ROW_COUNTS:
        x, stream = _inputs(rows, 10 + rows)
        x.requires_grad_()
        params = (x, *model.parameters())
        y_compiled, y_eager = compiled(x, stream), model(x, stream)
        torch.testing.assert_close(y_compiled, y_eager, rtol=1e-6, atol=1e-6)
        dy = torch.randn_like(y_eager)
        for a, b in zip(torch.autograd.grad(y_compiled, params, dy), torch.autograd.grad(y_eager, params, dy)):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert not counters["graph_break"], dict(counters["graph_break"])


@pytest.mark.parametrize("bad", ("eps zero", "weight too long"))
def test_a_bad_call_still_raises_under_compile(bad):
    torch._dynamo.reset()
    x = torch.randn(4, D, device=DEVICE)
    weight = torch.ones(D + 1 if bad == "weight too long" else D, device=DEVICE)
    eps = 0.0 if bad == "eps zero" else 1e-6
    compiled = torch.compile(lambda x: normlab.rms_norm(x, weight, eps, backend="triton"), fullgraph=True)
    with pytest.raises(Exception, match="eps must be > 0" if bad == "eps zero" else "weight has shape"):
        compiled(x)
