"""torch.compile(fullgraph=True) over a small model with backend="triton" norms: one graph, no breaks, and neither
the row count nor eps recompiles.

On CPU the graph's norm is the registered custom op (normlab::rms_norm_forward, normlab::layer_norm_forward),
which runs the Triton kernels in the interpreter when the graph runs; compile sees only its fake impl. The
counting backend records the compiled graphs (torch._dynamo.testing.CompileCounter) and what they call; a second
test runs the same model through aot_eager (the forward and backward graphs AOTAutograd traces through the
op's registered autograd) and compares with eager.

eps reaches the ops as a 0-d tensor (custom_ops._eps_tensor; the op's implementation reads it back with .item()
when it launches, the fake impl ignores it), and validation guards only on eps's type, so a new eps value reuses
the graph. Before this, eps was a float of the op's schema, which Dynamo specialises: one graph per eps value
(3 frames for the 3 values below, with dynamic=True too).

Why dynamic=True: Dynamo's default policy ("automatic dynamic", dynamic=None) compiles every input, a float
included, as a constant the first time, and makes it dynamic only once a second value has been seen. A compiled
function (or module) therefore compiles twice for three eps values with dynamic=None: once for the first value,
once more, for good, at the second (test_eps_with_the_default_policy). dynamic=True asks for the dynamic treatment
at the first compile; nothing else in the graph changes (rows are dynamic anyway, mark_dynamic). This holds for eps
as an argument of the compiled function and for eps as a module attribute (a new Block(eps) per value): under
dynamic=True Dynamo treats a float attribute as it treats a float argument. Neither counts on a private config.
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


def _norms(x, stream, weight, eps):
    h, stream = normlab.rms_norm(x, weight, eps, residual=stream, backend="triton")
    return normlab.layer_norm(stream + h, weight, None, eps, backend="triton")


def _count_frames(dynamic, module: bool) -> int:
    """Frames compiled over EPS_VALUES x ROW_COUNTS, each result bit-equal to eager: through one compiled function
    that takes eps as an argument, or (module) through a new Block(eps) per value, eps one of its attributes."""
    torch._dynamo.reset()
    counters.clear()
    backend = Recording()
    torch.manual_seed(0)
    weight = torch.rand(D, device=DEVICE) + 0.5
    compile_ = lambda fn: torch.compile(fn, backend=backend, fullgraph=True, dynamic=dynamic)  # noqa: E731
    compiled_norms = compile_(_norms)
    for eps in EPS_VALUES:
        if module:
            model = Block(eps).to(DEVICE)
            eager, compiled = model, compile_(model)
        else:
            eager = lambda x, stream, eps=eps: _norms(x, stream, weight, eps)  # noqa: E731
            compiled = lambda x, stream, eps=eps: compiled_norms(x, stream, weight, eps)  # noqa: E731
        for rows in ROW_COUNTS:
            x, stream = _inputs(rows, rows)
            with torch.no_grad():
                assert torch.equal(compiled(x, stream), eager(x, stream)), (eps, rows)
    assert not counters["graph_break"], dict(counters["graph_break"])
    for targets in backend.targets:  # the graph calls the custom ops, not their kernels
        assert {"normlab.rms_norm_forward", "normlab.layer_norm_forward"} <= targets, targets
    return backend.frame_count


@pytest.mark.parametrize("module", (False, True), ids=("eps argument", "eps module attribute"))
def test_one_graph_for_every_eps_and_row_count(module):
    """3 eps values x 3 row counts: one frame, no recompile, no graph break, results bit-equal to eager."""
    assert _count_frames(True, module) == 1


def test_eps_with_the_default_policy():
    """dynamic=None: the first eps is compiled as a constant, the second makes eps dynamic, the third reuses that."""
    assert _count_frames(None, module=False) == 2


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
