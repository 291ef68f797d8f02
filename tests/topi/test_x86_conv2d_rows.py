"""Row accumulators of the x86 direct conv (Note [row accumulators] in topi/x86/conv2d.py):
the rule, the numerics of the schedule on strided, padded, dilated, tail and batch shapes
against numpy, and the FMA loop it compiles to."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera import te
from tessera.graph.op import get_op
from tessera.ir.module import IRModule
from tessera.topi.rules import use_rules
from tessera.topi.testing import build_cases, check_ops
from tessera.topi.x86.asm import fma_loops, loop_summary
from tessera.topi.x86.conv2d import (
    ConvTile,
    choose_conv_tile,
    conv2d_nchwc,
    row_accumulators_rule,
    schedule_conv2d_nchwc,
)
from tessera.topi.x86.cpu import fma_chains, target_cache_sizes, vector_registers

from .test_x86_conv2d import HASWELL, _conv_case

# the rule with no target judges by the default caches (the host's only for a host target)
L1 = target_cache_sizes(None)[1]


def _needs_avx2():
    if not HASWELL.is_host:
        pytest.skip("this CPU cannot run AVX2 code")


def test_rule_takes_strided_3x3_convs_whose_tile_weights_exceed_l1():
    """ResNet-50's 3x3 convs of stride 2 in tiles of 2 blocks of 8 (73 KiB and more of
    weights per tile): rows; a 1x1 kernel (8 steps per block), a row of one tile, and weights
    within L1: tiles."""
    for ic in (128, 256, 512):
        assert row_accumulators_rule(2 * 8 * ic * 9 * 4, 9 * 8, 28, 4)
    assert not row_accumulators_rule(2 * 8 * 1024 * 4, 8, 14, 2)  # 1x1: reload too costly
    assert not row_accumulators_rule(2 * 8 * 512 * 9 * 4, 72, 7, 7)  # one tile per row
    # a whole last tile: 4 + 4 for 7 wastes 1/7 of the row (ResNet-50's 7-wide one), 32 for
    # 31 1/31
    assert not row_accumulators_rule(2 * 8 * 512 * 9 * 4, 72, 7, 4)
    assert row_accumulators_rule(2 * 8 * 512 * 9 * 4, 72, 31, 4)
    with use_rules({"conv.row_max_waste": 0.25}):
        assert row_accumulators_rule(2 * 8 * 512 * 9 * 4, 72, 7, 4)
    assert not row_accumulators_rule(L1, 72, 28, 4)  # fits L1
    assert row_accumulators_rule(L1 + 4, 72, 28, 4)
    with use_rules({"conv.row_min_steps": 128}):  # the rule knob
        assert not row_accumulators_rule(2 * 8 * 512 * 9 * 4, 72, 28, 4)


def _row_cases():
    # weights per tile past any L1 (>= 2 blocks of 8 outputs x >= 100 input channels x 9
    # taps), >= 2 tiles per row
    return [
        _conv_case(1, 128, (61, 61), 16, 3, stride=2, pad=1, ib=8, ob=8),  # 31 wide: a tail
        _conv_case(2, 100, (15, 17), 24, 3, stride=2, pad=(0, 1, 2, 1), ib=4, ob=8),
        _conv_case(1, 128, (16, 16), 16, 3, pad=2, dilation=2, ib=8, ob=8),  # dilated, s1
        _conv_case(1, 96, (19, 19), 16, 5, stride=2, pad=2, ib=8, ob=8),  # 5x5, 10 wide
        _conv_case(1, 128, (21, 21), 16, 3, stride=2, ib=8, ob=8),  # no padding, 10 wide
    ]


def test_row_accumulators_match_reference_on_avx2():
    """The rule's row schedule (every case takes it) against numpy: tails computed whole,
    strides, asymmetric pads, dilation, batch 2, input channels the block does not divide."""
    _needs_avx2()
    cases = _row_cases()
    for _, (x, w), attrs in cases:
        assert "row" in _lowered(x.shape, w.shape, attrs, None)  # the rule took rows
    check_ops(cases, target=HASWELL, schedule_target="x86", rtol=1e-4, atol=1e-4)


def _stage(x_shape, w_shape, attrs):
    x = te.placeholder(x_shape, name="x")
    w = te.placeholder(w_shape, name="w")
    a = attrs
    y = conv2d_nchwc(x, w, a["strides"], a["padding"], a["dilation"], a["groups"])
    return x, w, y


def _lowered(x_shape, w_shape, attrs, config):
    """ "row" when the accumulators' buffer holds a whole row of the tile's blocks (the config's
    tile, else the rule's), else "tile"."""
    x, w, y = _stage(x_shape, w_shape, attrs)
    s = schedule_conv2d_nchwc([y], HASWELL, config)
    text = str(tessera.lower(s, [x, w, y]))
    _, ocb, _, width, ob = (int(d.value) for d in y.shape)
    if config is None:
        regs, chains = vector_registers(HASWELL), fma_chains(HASWELL)
        tile = choose_conv_tile(width, ocb, regs, False, chains)
    else:
        tile = ConvTile(config["ow_block"], config["oc_vectors"])
    line = next(ln for ln in text.splitlines() if "allocate conv2d_nchwc.local" in ln)
    size = int(line.split("[")[1].split("]")[0])
    row = -(-width // tile.ow_block) * tile.ow_block
    assert size in (tile.accumulators * ob, tile.oc_vectors * row * ob), (size, tile)
    return "row" if size == tile.oc_vectors * row * ob else "tile"


@pytest.mark.parametrize("tile", [(4, 2), (3, 1), (5, 2)])
def test_row_accumulators_forced_by_the_knob_match_reference(tile):
    """Knob row_accumulators on shapes the rule leaves alone (weights within L1, small
    channel counts), with tiles that do and do not divide the row, against numpy."""
    _needs_avx2()
    ow_block, ocv = tile
    config = {"ow_block": ow_block, "oc_vectors": ocv, "row_accumulators": True}
    for case in (
        _conv_case(2, 12, (9, 11), 16, 3, stride=2, pad=1, ib=4, ob=8),  # 6 wide
        _conv_case(1, 16, (7, 13), 16, 3, pad=(1, 0, 1, 2), ib=8, ob=8),  # 13 wide
        _conv_case(1, 8, (6, 9), 16, 1, ib=8, ob=8),  # 1x1
    ):
        _, (xb, wb), attrs = case
        assert _lowered(xb.shape, wb.shape, attrs, config) == "row"
        assert _lowered(xb.shape, wb.shape, attrs, {**config, "row_accumulators": False}) == (
            "tile"
        )
        x, w, y = _stage(xb.shape, wb.shape, attrs)
        s = schedule_conv2d_nchwc([y], HASWELL, config)
        mod = tessera.build(IRModule({"f": te.lower(s, [x, w, y], name="f")}), target=HASWELL)
        (expected,) = get_op("nn.conv2d_nchwc").evaluate([xb, wb], attrs)
        out = np.empty(expected.shape, expected.dtype)
        mod["f"](xb, wb, out)
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


def test_row_fma_loop_keeps_its_accumulators_in_registers():
    """The FMA loop of a row schedule with a tail (31 wide): its tiles' accumulators in
    registers, no stack traffic (the last tile is computed whole, not guarded)."""
    _needs_avx2()
    case = _row_cases()[0]
    tile = choose_conv_tile(31, 2, vector_registers(HASWELL), False, fma_chains(HASWELL))
    assert 31 % tile.ow_block
    mod, _ = build_cases([case], target=HASWELL, schedule_target="x86")
    loops = [loop_summary(body) for body in fma_loops(mod.get_source("asm"))]
    assert loops and max(x["fma"] for x in loops) >= 8
    assert all(x["stack"] == 0 and x["stores"] == 0 for x in loops)
