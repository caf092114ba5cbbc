"""The sweep's kernel variants (variants.py) in Triton's interpreter: a launch that only moves loads (reload
after the reduction, the weight per tile, one tile per program) gives the table's bits exactly; the grouped
chunked backward, which sums in another order, matches float64 by the accuracy rule."""

import pytest
import torch

from normlab.norms.backends.triton import accuracy, launch, tuning
from normlab.norms.backends.triton import variants as V

DEVICE = "cpu" if launch.INTERPRETED or not torch.cuda.is_available() else "cuda"
SAME_BITS = {
    "forward": [tuning.KernelConfig(4, 2, 1, reload=True), tuning.KernelConfig(4, 1, 1, one_tile_per_program=True)],
    "backward": [tuning.KernelConfig(8, 2, 1, reload=True), tuning.KernelConfig(8, 1, 1, one_tile_per_program=True)],
}


@pytest.mark.parametrize("kind", V.KINDS)
@pytest.mark.parametrize("direction", V.DIRECTIONS)
def test_moving_loads_keeps_the_tables_bits(kind, direction):
    inputs = V.make_inputs(kind, 11, 200, torch.float32, DEVICE, torch.Generator().manual_seed(4))
    table = V.call(kind, direction, V.Variant("table", None, launch.ONCHIP_LIMIT, launch.CHUNK), inputs)
    for config in SAME_BITS[direction]:
        got = V.call(kind, direction, V.Variant("variant", config, launch.ONCHIP_LIMIT, launch.CHUNK), inputs)
        # dx (and y) row by row: the same operations, so the same bits; dweight sums in another order
        assert torch.equal(got[0], table[0]), config
        for other, want in zip(got[1:], table[1:]):
            assert accuracy.relative_error(other, want) < 1e-6


@pytest.mark.parametrize("kind", V.KINDS)
@pytest.mark.parametrize("group", (2, 4))
def test_the_grouped_chunked_backward_matches_float64(kind, group):
    # 10 rows in groups of `group` on 4 fake SMs: several groups per program, the last one partial
    inputs = V.make_inputs(kind, 10, 150, torch.float32, DEVICE, torch.Generator().manual_seed(group))
    config = tuning.KernelConfig(4, 2, 1, group=group)
    got = V.call(kind, "backward", V.Variant(f"grouped-{group}", config, 0, 64), inputs)
    for ours, want in zip(got, V.reference(kind, "backward", inputs)):
        assert torch.isfinite(ours).all() and accuracy.relative_error(ours, want) < 1e-5


def test_the_sweep_offers_what_the_peers_choose_at_each_width():
    names = lambda *a: {v.name for v in V.variants_for(*a)}  # noqa: E731
    assert {"table", "one-tile-4w", "one-tile-8w", "stages-1"} <= names("rms", "forward", 4096, 2)
    assert "reload" in names("layer", "forward", 16384, 4) and "reload" not in names("layer", "forward", 8192, 4)
    wide = names("rms", "backward", 16384, 2)
    assert {"onchip-weight-per-tile", "grouped-2", "grouped-4"} <= wide
    bf16_4096 = {v.name: v for v in V.variants_for("rms", "backward", 4096, 2)}["onchip-weight-per-tile"]
    assert bf16_4096.config.programs_per_sm == 2 and bf16_4096.config.reload
