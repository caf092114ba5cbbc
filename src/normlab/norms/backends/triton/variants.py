"""The kernel variants the sweep times side by side (scripts/gpu_sweep.py), and one call of each.

The tuning table (tuning.py) picks one launch per kernel, width and element size. The sweep measures
it against the choices the published peers make instead, each a real kernel variant selected by a
tuning.KernelConfig passed to the launchers:

* ``table``: the table's own launch (the persistent grid);
* ``one-tile-{4,8}w``: a grid of one program per tile, 4 or 8 warps, two rows per tile at 4096 (Liger's and
  Quack's forward);
* ``reload``: at 16K, the forward reads the tile again after its reduction instead of holding it (Quack);
* ``onchip-weight-per-tile``: the backward kept on chip up to 16K by loading the weight per tile, two
  programs per SM at d <= 4096 in bf16 (the table runs one, and streams 16K in chunks);
* ``grouped-{2,4}``: the chunked backward sums the weight gradient of 2 or 4 rows on chip before it
  touches its partial line (the table reads and rewrites it once per row);
* ``stages-{1,2}``: the table's launch with the other pipeline depth.

A variant is a launch (config, path, chunk), never different arithmetic: each one must match the float64
reference (the sweep's dry run checks every variant in the interpreter, tests/test_gpu_sweep.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from normlab.norms.backends.triton import launch, tuning

KINDS = ("rms", "layer")
DIRECTIONS = ("forward", "backward")
EPS = {"rms": 1e-6, "layer": 1e-5}


@dataclass(frozen=True)
class Variant:
    """One launch of a kernel: `config` None is the tuning table's; `onchip_limit` picks the path."""

    name: str
    config: tuning.KernelConfig | None
    onchip_limit: int
    chunk: int


def elements(path: str, d: int, chunk: int) -> int:
    """The elements the tuning table keys a launch by: the on-chip tile (ROWS x BLOCK), or the chunk."""
    block = 1 << max(0, (d - 1).bit_length())
    if path == "chunked":
        return min(chunk, block)
    return block * max(1, launch.TILE_ELEMENTS // block)


def _table_config(kind: str, direction: str, path: str, d: int, element_size: int, chunk: int):
    if path == "chunked":
        picker = tuning.chunked_forward if direction == "forward" else tuning.chunked_backward
    else:
        picker = tuning.onchip_forward if direction == "forward" else tuning.onchip_backward
    return picker(kind, elements(path, d, chunk), element_size)


def table_config(kind: str, direction: str, variant: Variant, d: int, element_size: int) -> tuning.KernelConfig:
    """The launch `variant` runs: its own config, or the table's on its path."""
    if variant.config is not None:
        return variant.config
    path = "onchip" if d <= variant.onchip_limit and table_path(direction, d) == "onchip" else "chunked"
    return _table_config(kind, direction, path, d, element_size, variant.chunk)


def table_path(direction: str, d: int) -> str:
    limit = launch.ONCHIP_LIMIT if direction == "forward" else launch.BACKWARD_ONCHIP_LIMIT
    return "onchip" if d <= limit else "chunked"


def variants_for(
    kind: str, direction: str, width: int, element_size: int, *, d: int | None = None, chunk: int = launch.CHUNK
) -> list[Variant]:
    """The variants at `width` (4096, 8192, 16384: which peers' choices apply), run on rows of `d` elements.

    `d` defaults to `width`; the dry run passes a tiny d (and chunk) that stands for the width, so that the
    same variants run in the interpreter in seconds."""
    d = width if d is None else d
    path = table_path(direction, width)
    onchip, chunked = launch.ONCHIP_LIMIT, 0
    table = _table_config(kind, direction, path, d, element_size, chunk)
    limit = onchip if path == "onchip" else chunked
    found = [Variant("table", None, limit, chunk)]
    other_stages = 1 if table.stages == 2 else 2
    found.append(Variant(f"stages-{other_stages}", replace(table, stages=other_stages), limit, chunk))
    if direction == "forward":
        for warps in (4, 8):
            config = tuning.KernelConfig(warps, 1, 1, one_tile_per_program=True, rows=2 if width <= 4096 else 1)
            found.append(Variant(f"one-tile-{warps}w", config, onchip, chunk))
        if width >= 16384:
            found.append(Variant("reload", replace(table, reload=True), onchip, chunk))
        return found
    if width <= 16384:
        programs = 2 if width <= 4096 and element_size <= 2 else 1
        config = tuning.KernelConfig(16, 1 if width >= 16384 else table.stages, programs, reload=True)
        found.append(Variant("onchip-weight-per-tile", config, onchip, chunk))
    if path == "chunked":
        for group in (2, 4):
            found.append(Variant(f"grouped-{group}", replace(table, group=group), chunked, chunk))
    return found


@dataclass
class Inputs:
    """A forward's inputs, and the saved statistics and upstream gradient a backward reads."""

    x: torch.Tensor
    weight: torch.Tensor
    bias: torch.Tensor | None
    dy: torch.Tensor
    saved: tuple


def make_inputs(kind: str, rows: int, d: int, dtype: torch.dtype, device, generator=None) -> Inputs:
    def randn(*shape):
        return torch.randn(*shape, generator=generator, dtype=torch.float32, device="cpu").to(dtype).to(device)

    x, dy, weight = randn(rows, d), randn(rows, d), randn(d)
    bias = randn(d) if kind == "layer" else None
    if kind == "rms":
        _, _, ms = launch.rms_forward(x, weight, None, EPS[kind], 0.0, True, d)
        saved = (ms,)
    else:
        _, _, mean, rstd = launch.layer_forward(x, weight, bias, None, EPS[kind])
        saved = (mean, rstd)
    return Inputs(x, weight, bias, dy, saved)


def call(kind: str, direction: str, variant: Variant, inputs: Inputs):
    """One launch of `variant`: (y,) forward, (dx, dweight[, dbias]) backward."""
    x, w, d = inputs.x, inputs.weight, inputs.x.shape[-1]
    limits = dict(onchip_limit=variant.onchip_limit, chunk=variant.chunk, config=variant.config)
    if kind == "rms" and direction == "forward":
        return launch.rms_forward(x, w, None, EPS[kind], 0.0, True, d, **limits)[:1]
    if kind == "rms":
        return launch.rms_backward(inputs.dy, None, x, w, inputs.saved[0], EPS[kind], 0.0, True, d, **limits)
    if direction == "forward":
        return launch.layer_forward(x, w, inputs.bias, None, EPS[kind], **limits)[:1]
    mean, rstd = inputs.saved
    return launch.layer_backward(inputs.dy, None, x, w, mean, rstd, True, **limits)


def reference(kind: str, direction: str, inputs: Inputs) -> tuple[torch.Tensor, ...]:
    """The float64 results `call` must match: y, or (dx, dweight[, dbias]) of sum(y * dy)."""
    from normlab import layer_norm_reference, rms_norm_reference

    x = inputs.x.double().requires_grad_()
    params = [inputs.weight.double().requires_grad_()]
    if kind == "rms":
        y = rms_norm_reference(x, params[0], eps=EPS[kind])
    else:
        params.append(inputs.bias.double().requires_grad_())
        y = layer_norm_reference(x, params[0], params[1], eps=EPS[kind])
    if direction == "forward":
        return (y.detach(),)
    return tuple(torch.autograd.grad(y, [x, *params], inputs.dy.double()))
