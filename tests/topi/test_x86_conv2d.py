"""x86 blocked-layout kernels: conv2d_nchwc (dense, grouped, depthwise), NCHWc pools and
layout_transform against their numpy references (each the NCHW op between layout transforms),
on odd shapes, on this CPU and on an AVX2 target; the register-tile rules; the FMA loops."""

import re

import numpy as np
import pytest

import tessera
from tessera.graph.op import get_op
from tessera.topi.testing import build_cases, check_ops
from tessera.topi.x86.asm import fma_loops, loop_summary
from tessera.topi.x86.conv2d import GroupWindow, choose_conv_tile
from tessera.topi.x86.cpu import fma_chains, vector_registers
from tessera.topi.x86.layout import Layout, transform_array, transform_shape

RNG = np.random.default_rng(0)
HASWELL = tessera.Target("llvm -mcpu=haswell")


def _conv_case(n, c, hw, o, k, stride=1, pad=0, groups=1, ib=16, ob=16, dilation=1):
    """A conv2d_nchwc case: NCHW data and OIHW weights blocked by ib / ob."""
    h, w = hw
    x = RNG.standard_normal((n, c, h, w), dtype=np.float32)
    wt = RNG.standard_normal((o, c // groups, k, k), dtype=np.float32)
    depthwise = groups > 1 and groups == c == o
    xb = transform_array(x, "NCHW", f"NCHW{ib}c")
    if groups > 1 and not depthwise:  # Note [grouped blocks]
        wb = GroupWindow.of(c, o, groups, ib, ob).pack(wt)
    else:
        wb = transform_array(wt, "OIHW", f"OIHW{1 if depthwise else ib}i{ob}o")
    attrs = dict(
        strides=(stride, stride),
        padding=pad if isinstance(pad, tuple) else (pad,) * 4,
        dilation=(dilation, dilation),
        groups=groups,
    )
    return ("nn.conv2d_nchwc", [xb, wb], attrs)


def _cases(lanes):
    b, h = lanes, lanes // 2
    return [
        _conv_case(1, 3, (23, 23), 2 * b, 7, stride=2, pad=3, ib=1, ob=b),  # a stem, 3 channels
        _conv_case(1, 2 * b, (7, 7), 2 * b, 1, ib=b, ob=b),  # 1x1 (a matmul)
        _conv_case(1, b, (7, 7), 4 * b, 3, pad=1, ib=b, ob=b),  # 3x3 7x7, 4 oc blocks
        _conv_case(2, b, (9, 11), 3 * b, 3, stride=2, pad=1, ib=b, ob=b),  # batch 2, strided
        _conv_case(1, h, (13, 13), 3 * h, 3, pad=(0, 1, 2, 1), ib=h, ob=h),  # asym pads, 13 wide
        _conv_case(1, b, (10, 10), b, 3, pad=2, dilation=2, ib=b, ob=b),  # dilated
        _conv_case(1, 3 * b, (8, 8), 6 * b, 1, groups=3, ib=b, ob=b),  # grouped (ShuffleNet)
        _conv_case(1, 2 * b, (9, 9), 2 * b, 3, pad=1, groups=2 * b, ib=b, ob=b),  # depthwise
        _conv_case(1, b, (11, 11), b, 3, stride=2, pad=1, groups=b, ib=b, ob=b),  # dw, strided
        _conv_case(1, 3 * h, (6, 5), 5 * h, 3, pad=1, ib=h, ob=h),  # channels not a multiple
        _conv_case(2, 3 * h, (9, 7), 2 * b, 3, stride=2, pad=1, ib=h, ob=b),  # padded per block
        _conv_case(1, 2 * b, (7, 6), b, 5, pad=(2, 1, 0, 2), ib=b, ob=b),  # 5x5, asym pads
        _conv_case(1, 4 * h, (7, 7), 2 * b, 3, stride=2, pad=1, groups=2, ib=h, ob=b),  # grouped
        # groups whose channels the blocks do not divide (Note [grouped blocks]): ShuffleNet's
        # 4 groups of 68 in miniature, spans that are clamped at the end, 3x3 with padding
        _conv_case(1, 4 * 18, (5, 7), 4 * 18, 1, groups=4, ib=4, ob=h),
        _conv_case(1, 24, (6, 6), 2 * b, 1, groups=4, ib=8, ob=b),
        _conv_case(1, 3 * 10, (7, 5), 3 * 12, 3, pad=1, groups=3, ib=3, ob=4),
        _conv_case(2, 5 * 4, (6, 6), 5 * 8, 3, stride=2, pad=(1, 0, 1, 1), groups=5, ib=4, ob=10),
        _conv_case(1, 6, (7, 6), 20, 3, pad=1, groups=2, ib=2, ob=4),  # a clamped window, padded
    ]


def test_conv2d_nchwc_matches_reference():
    check_ops(_cases(16), schedule_target="x86", rtol=1e-4, atol=1e-4)


def test_conv2d_nchwc_reads_plain_nchw_data_as_block_1():
    x = RNG.standard_normal((2, 3, 11, 12), dtype=np.float32)
    wt = RNG.standard_normal((16, 3, 3, 3), dtype=np.float32)
    wb = transform_array(wt, "OIHW", "OIHW1i16o")
    attrs = dict(strides=(2, 1), padding=(1, 0, 2, 1), dilation=(1, 1), groups=1)
    check_ops([("nn.conv2d_nchwc", [x, wb], attrs)], schedule_target="x86", rtol=1e-4, atol=1e-4)


def test_conv2d_nchwc_on_avx2():
    if not HASWELL.is_host:
        pytest.skip("this CPU cannot run AVX2 code")
    check_ops(_cases(8), target=HASWELL, schedule_target="x86", rtol=1e-4, atol=1e-4)


def test_pools_nchwc_match_reference():
    x = RNG.standard_normal((2, 3, 9, 10, 8), dtype=np.float32)
    pool = dict(pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1))
    check_ops(
        [
            ("nn.max_pool2d_nchwc", [x], pool),
            ("nn.max_pool2d_nchwc", [x], dict(pool, ceil_mode=1, padding=(0, 0, 0, 0))),
            ("nn.avg_pool2d_nchwc", [x], pool),
            ("nn.avg_pool2d_nchwc", [x], dict(pool, count_include_pad=1)),
            ("nn.avg_pool2d_nchwc", [x], dict(pool_size=(2, 2), strides=(1, 1), padding=(0,) * 4)),
            ("nn.global_avg_pool2d_nchwc", [x], {}),
            ("nn.global_max_pool2d_nchwc", [x], {}),
        ],
        schedule_target="x86",
    )


def _pool_cases(x):
    pad1 = dict(pool_size=(3, 3), strides=(1, 1), padding=(1, 1, 1, 1))
    return [
        ("nn.avg_pool2d_nchwc", [x], dict(pad1, count_include_pad=1)),  # Inception's pools
        ("nn.avg_pool2d_nchwc", [x], pad1),
        ("nn.max_pool2d_nchwc", [x], pad1),
        ("nn.max_pool2d_nchwc", [x], dict(pool_size=(3, 2), strides=(2, 3), padding=(0, 1, 2, 0))),
        ("nn.avg_pool2d_nchwc", [x], dict(pad1, strides=(2, 2), ceil_mode=1, count_include_pad=1)),
        ("nn.max_pool2d_nchwc", [x], dict(pad1, dilation=(2, 2), strides=(2, 1))),
        ("nn.avg_pool2d_nchwc", [x], dict(pool_size=(5, 5), strides=(1, 1), padding=(2,) * 4)),
    ]


@pytest.mark.parametrize("width", [1, 7, 9, 13, 27, 56])
def test_pool_column_groups_cover_the_row_with_several_chains(width):
    """Note [pool rows]: a prime width gets several columns in flight, not one."""
    from tessera.topi.x86.pooling import COLUMN_GROUP, _column_group

    u = _column_group(width)
    assert 1 <= u <= min(width, COLUMN_GROUP)
    assert u >= min(width, COLUMN_GROUP // 2)
    if width % u:  # a shorter last group: only when no divisor keeps enough chains in flight
        assert max(d for d in range(1, COLUMN_GROUP + 1) if width % d == 0) * 2 < COLUMN_GROUP


def test_prime_width_pools_match_reference():
    x = RNG.standard_normal((1, 2, 27, 27, 8), dtype=np.float32)
    cases = [
        ("nn.max_pool2d_nchwc", [x], dict(pool_size=(3, 3), strides=(2, 2), padding=(0,) * 4)),
        ("nn.avg_pool2d_nchwc", [x], dict(pool_size=(3, 3), strides=(1, 1), padding=(1,) * 4)),
        (
            "nn.max_pool2d_nchwc",
            [x[:, :, :13, :13]],
            dict(pool_size=(3, 3), strides=(1, 1), padding=(1,) * 4),
        ),
    ]
    check_ops(cases, schedule_target="x86")


def test_padded_pools_match_reference():
    """Note [pool rows]: padded rows on the stack, windows unrolled or not, ceil_mode, dilation."""
    x = RNG.standard_normal((2, 2, 7, 9, 8), dtype=np.float32)
    check_ops(_pool_cases(x), schedule_target="x86")
    if HASWELL.is_host:
        check_ops(_pool_cases(x[..., :4].copy()), target=HASWELL, schedule_target="x86")


def _lowered_pool(x_shape, kind="avg", target="llvm", **attrs):
    from tessera import te
    from tessera.topi.x86.pooling import pool_nchwc, schedule_pool_nchwc

    x = te.placeholder(x_shape, name="x")
    y = pool_nchwc(x, kind, (3, 3), (1, 1), (1, 1, 1, 1), **attrs)
    return str(tessera.lower(schedule_pool_nchwc([y], tessera.Target(target)), [x, y]))


def test_pool_pads_each_row_on_the_stack():
    from tessera.topi.x86 import pooling

    text = _lowered_pool((1, 2, 9, 9, 8), count_include_pad=1)
    u = pooling._column_group(9)
    cols = -(-9 // u) * u + 2  # the column groups' reach (a shorter last group reads padding)
    assert f"allocate pad: float32[{3 * cols * 8}] scope local" in text  # 3 rows of cols x 8
    assert "scope global" not in text and "if_then_else" not in text.split("allocate pad")[0]
    assert "allocate pad" not in _lowered_pool((1, 2, 9, 9, 8), "max")  # bounds tests instead
    # a row too wide for the target's described stack (64 of 4096 bytes): bounds tests, no copy
    small_stack = "llvm -stack-bytes=4096"
    text = _lowered_pool((1, 2, 9, 9, 8), target=small_stack)
    assert "allocate pad" not in text
    x = RNG.standard_normal((1, 2, 9, 9, 8), dtype=np.float32)
    check_ops(_pool_cases(x)[:3], target=small_stack, schedule_target="x86")


@pytest.mark.parametrize(
    "shape, src, dst",
    [
        ((2, 32, 5, 3), "NCHW", "NCHW16c"),
        ((2, 2, 5, 3, 16), "NCHW16c", "NCHW"),
        ((1, 4, 3, 3, 8), "NCHW8c", "NCHW16c"),
        ((1, 3, 4, 4), "NCHW", "NCHW1c"),
        ((32, 24, 3, 3), "OIHW", "OIHW8i16o"),
    ],
)
def test_layout_transform_matches_numpy(shape, src, dst):
    x = RNG.standard_normal(shape, dtype=np.float32)
    check_ops([("layout_transform", [x], dict(src_layout=src, dst_layout=dst))])
    back = transform_array(transform_array(x, src, dst), dst, src)
    np.testing.assert_array_equal(back, x)


def test_blocked_array_holds_channel_c_at_block_c_div_b():
    x = np.arange(2 * 32 * 2 * 2, dtype=np.float32).reshape(2, 32, 2, 2)
    xb = transform_array(x, "NCHW", "NCHW16c")
    assert xb.shape == (2, 2, 2, 2, 16)
    np.testing.assert_array_equal(xb[1, 1, 0, 1, 5], x[1, 21, 0, 1])


def test_layout_errors_name_the_problem():
    with pytest.raises(ValueError, match="not a multiple"):
        transform_shape((1, 24, 4, 4), "NCHW", "NCHW16c")
    with pytest.raises(ValueError, match="no primal axis"):
        Layout("NHW16c")
    with pytest.raises(ValueError, match="same primal axes"):
        transform_shape((1, 2, 3, 4), "NCHW", "NHWO")


@pytest.mark.parametrize("registers", [16, 32])
@pytest.mark.parametrize(
    "width, oc_blocks", [(56, 4), (7, 32), (14, 16), (13, 3), (112, 4), (1, 8)]
)
def test_conv_tile_rule(registers, width, oc_blocks):
    tile = choose_conv_tile(width, oc_blocks, registers, depthwise=False)
    assert tile.accumulators + tile.oc_vectors + 1 <= registers
    assert oc_blocks % tile.oc_vectors == 0 and 1 <= tile.ow_block <= width
    if width % 7 == 0:  # a divisor of the row is found when one fits: no tail
        assert width % tile.ow_block == 0
    dw = choose_conv_tile(width, oc_blocks, registers, depthwise=True)
    assert dw.oc_vectors == 1 and dw.ow_block <= width


def test_conv_tile_keeps_the_fma_pipes_busy():
    """Note [FMA chains]: a tile of fewer accumulators than latency x pipes loses to a longer
    one even with a row tail; ShuffleNet's 14-wide maps of 34 oc blocks took 2 x 2 before."""
    for width, oc_blocks in [(14, 34), (22, 1), (26, 2), (14, 3), (56, 3)]:
        old = choose_conv_tile(width, oc_blocks, 16, depthwise=False)
        tile = choose_conv_tile(width, oc_blocks, 16, depthwise=False, chains=8)
        assert tile.accumulators >= min(8, old.accumulators + 1), (width, oc_blocks, tile)
    # tiles that already have the chains are kept
    for width, oc_blocks in [(56, 4), (28, 4), (112, 2)]:
        old = choose_conv_tile(width, oc_blocks, 32, depthwise=False)
        assert old.accumulators >= 8
        assert choose_conv_tile(width, oc_blocks, 32, depthwise=False, chains=8) == old


@pytest.mark.parametrize("width, oc_blocks", [(14, 34), (28, 17), (7, 68), (56, 14)])
def test_grouped_conv_tile_shares_no_broadcast(width, oc_blocks):
    """Each output block of a grouped conv reads its own input window (Note [grouped
    blocks]): more oc vectors add loads, not reuse, so a row long enough takes one."""
    tile = choose_conv_tile(width, oc_blocks, 16, False, chains=8, grouped=True)
    assert tile.oc_vectors == 1 and tile.ow_block >= 7


def test_conv_inner_loop_is_register_blocked_fmas():
    """The reduction loop of a 3x3 conv: vectorized FMAs on accumulators held in registers."""
    lanes = tessera.Target("llvm").vector_lanes("float32")
    if lanes < 8:
        pytest.skip("no AVX on this CPU")
    mod, _ = build_cases(
        [_conv_case(1, lanes, (14, 14), 4 * lanes, 3, pad=1, ib=lanes, ob=lanes)],
        schedule_target="x86",
    )
    loops = [loop_summary(body) for body in fma_loops(mod.get_source("asm"))]
    assert loops, "no FMA loop"
    assert max(x["fma"] for x in loops) >= 8
    assert all(x["stack"] == 0 and x["stores"] == 0 for x in loops)


def _lowered_conv(x_shape, w_shape, pad, groups=1, target="llvm"):
    from tessera import te
    from tessera.topi.x86.conv2d import conv2d_nchwc, schedule_conv2d_nchwc

    x = te.placeholder(x_shape, name="x")
    w = te.placeholder(w_shape, name="w")
    y = conv2d_nchwc(x, w, (1, 1), pad, (1, 1), groups)
    return str(tessera.lower(schedule_conv2d_nchwc([y], tessera.Target(target)), [x, w, y]))


def test_padding_is_done_per_tile_on_the_stack():
    """Note [padding per tile]: no padded copy of the whole input (a heap buffer per call)."""
    dense = _lowered_conv((1, 2, 9, 9, 8), (2, 2, 3, 3, 8, 8), (1, 1, 1, 1))
    assert "allocate pad" in dense and "scope global" not in dense
    # a dense conv pads one input channel block at a time, inside its reduction over the blocks
    registers = vector_registers(tessera.Target("llvm"))
    chains = fma_chains(tessera.Target("llvm"))
    cols = choose_conv_tile(9, 2, registers, depthwise=False, chains=chains).ow_block + 2
    assert f"allocate pad: float32[{3 * cols * 8}] scope local" in dense  # 3 rows, 1 block
    assert dense.index("for (rco") < dense.index("allocate pad")


def test_depthwise_reads_its_input_with_guards_peeled_off_the_interior():
    """Note [padding per tile]: no window copy; interior tiles accumulate without a guard."""
    text = _lowered_conv((1, 2, 9, 64, 8), (2, 1, 3, 3, 1, 8), (1, 1, 1, 1), groups=16)
    assert "allocate pad" not in text
    lines = text.splitlines()
    update = re.compile(r"conv2d_nchwc\.local(_\d+)?\[.*\] = .*\+ x\[")
    updates = [k for k, line in enumerate(lines) if update.search(line)]
    guarded = [k for k in updates if "if (likely" in lines[k - 1]]
    # a whole tile's updates (those of the interior tiles and kernel rows) carry no guard
    target = tessera.Target("llvm")
    tile = choose_conv_tile(64, 2, vector_registers(target), True, fma_chains(target))
    assert len(updates) - len(guarded) >= tile.ow_block


def test_depthwise_rows_of_two_tiles_unroll_the_tile_loop():
    """Both tiles of such a row are border tiles: unrolled, their guards become constants."""
    registers = vector_registers(tessera.Target("llvm"))
    chains = fma_chains(tessera.Target("llvm"))
    width = 2 * choose_conv_tile(28, 2, registers, depthwise=True, chains=chains).ow_block
    two = _lowered_conv((1, 2, 6, width, 8), (2, 1, 3, 3, 1, 8), (1, 1, 1, 1), groups=16)
    wide = _lowered_conv((1, 2, 6, 4 * width, 8), (2, 1, 3, 3, 1, 8), (1, 1, 1, 1), groups=16)
    assert "for (ow.outer" not in two and "for (ow.outer" in wide


@pytest.mark.parametrize("target", [tessera.Target("llvm"), HASWELL], ids=["host", "avx2"])
def test_depthwise_conv_padding_matches_reference(target):
    if not target.is_host:
        pytest.skip("this CPU cannot run AVX2 code")
    lanes = target.vector_lanes("float32")
    b = min(lanes, 8)
    dw = dict(groups=2 * b, ib=b, ob=b)
    cases = [
        _conv_case(2, 2 * b, (7, 7), 2 * b, 3, pad=1, **dw),  # batch 2, 7x7
        _conv_case(1, 2 * b, (1, 1), 2 * b, 3, pad=1, **dw),  # every input position a border
        _conv_case(1, 2 * b, (6, 37), 2 * b, 3, pad=(0, 1, 2, 1), **dw),  # asymmetric, 37 wide
        _conv_case(1, 2 * b, (9, 40), 2 * b, 5, stride=2, pad=2, **dw),  # 5x5 stride 2
        _conv_case(1, 2 * b, (8, 33), 2 * b, 3, pad=2, dilation=2, **dw),  # dilated
        _conv_case(1, 2 * b, (4, 5), 2 * b, 3, pad=3, **dw),  # outputs reading only padding
        _conv_case(1, 2 * b, (5, 28), 2 * b, 3, pad=1, **dw),  # two tiles per row (AVX-512)
        _conv_case(1, 2 * b, (6, 14), 2 * b, 3, pad=1, **dw),  # two tiles per row (AVX2)
        _conv_case(1, 2 * b, (10, 30), 2 * b, 3, stride=2, pad=(1, 0, 0, 1), **dw),  # one-sided
    ]
    check_ops(cases, target=target, schedule_target="x86", rtol=1e-4, atol=1e-4)


def test_inputs_of_block_1_pad_the_whole_input():
    """Note [padding per tile]: plain NCHW data (block 1) is padded once, along its rows."""
    text = _lowered_conv((1, 3, 11, 12), (2, 3, 3, 3, 1, 8), (1, 2, 1, 2))
    assert "allocate pad: float32[624] scope global" in text  # 3 * (1 + 11 + 1) * (2 + 12 + 2)
    assert "scope local" in text.split("allocate pad")[1]  # the accumulators stay local
    x = RNG.standard_normal((2, 3, 9, 10), dtype=np.float32)
    cases = [
        ("nn.conv2d_nchwc", [x, RNG.standard_normal((2, 3, k, k, 1, 8), dtype=np.float32)], a)
        for k, a in [
            (7, dict(strides=(2, 2), padding=(3, 3, 3, 3), dilation=(1, 1), groups=1)),
            (3, dict(strides=(1, 2), padding=(0, 1, 2, 0), dilation=(1, 1), groups=1)),
            (3, dict(strides=(1, 1), padding=(2, 2, 2, 2), dilation=(2, 2), groups=1)),
        ]
    ]
    check_ops(cases, schedule_target="x86", rtol=1e-4, atol=1e-4)


def test_padding_too_wide_for_the_stack_pads_the_whole_input():
    # the cap is a share of the target's described stack (-stack-bytes: 128 of 4096 bytes)
    small_stack = "llvm -stack-bytes=4096"
    text = _lowered_conv((1, 2, 9, 9, 8), (2, 2, 3, 3, 8, 8), (1, 1, 1, 1), target=small_stack)
    assert "allocate pad: float32[1936] scope global" in text  # 2 * 11 * 11 * 8
    cases = _cases(8)
    check_ops(
        [cases[2], cases[4], cases[8]],
        target=small_stack, schedule_target="x86", rtol=1e-4, atol=1e-4,
    )  # fmt: skip


@pytest.mark.parametrize(
    "ic, oc, groups, ib, ob", [(272, 272, 4, 16, 16), (24, 112, 4, 8, 16), (96, 192, 3, 16, 16)]
)
def test_group_window_packs_weights_and_counts_work(ic, oc, groups, ib, ob):
    """Note [grouped blocks]: pack/unpack round-trip; blocks that divide the groups waste no
    work, ShuffleNet's 4 groups of 68 on blocks of 16 do 1.34x the grouped multiply-adds."""
    win = GroupWindow.of(ic, oc, groups, ib, ob)
    w = RNG.standard_normal((oc, ic // groups, 1, 3), dtype=np.float32)
    packed = win.pack(w)
    assert packed.shape == (oc // ob, win.blocks, 1, 3, ib, ob)
    np.testing.assert_array_equal(win.unpack(packed), w)
    assert np.count_nonzero(packed) == w.size  # every weight once, zeros elsewhere
    if win.aligned:
        assert win.work() == 1 and win.blocks == ic // groups // ib
    assert win.work() == pytest.approx({272: 1.34, 24: 2.48, 96: 1.0}[ic], abs=0.01)


def test_channel_shuffle_matches_reference_in_both_layouts():
    """ShuffleNet's shuffle as one op: NCHW, and blocked where groups and blocks do not divide
    each other (68 channels a group on blocks of 16, 3 groups on blocks of 8)."""
    x = RNG.standard_normal((1, 272, 5, 3), dtype=np.float32)
    y = RNG.standard_normal((2, 24, 4, 4), dtype=np.float32)
    cases = [
        ("channel_shuffle", [x], {"groups": 4}),
        ("channel_shuffle", [transform_array(x, "NCHW", "NCHW16c")], {"groups": 4}),
        ("channel_shuffle", [transform_array(y, "NCHW", "NCHW8c")], {"groups": 3}),
    ]
    check_ops(cases, schedule_target="x86", rtol=0, atol=0)
    n, c, h, w = x.shape
    want = x.reshape(n, 4, c // 4, h, w).transpose(0, 2, 1, 3, 4).reshape(x.shape)
    (got,) = get_op("channel_shuffle").evaluate([x], {"groups": 4})
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("registers", [16, 32])
def test_conv_tile_takes_more_oc_vectors_where_2_3_4_do_not_divide(registers):
    """Note [oc vectors]: 125 output blocks (1000 classes in blocks of 8), 5 or 35 blocks took
    one vector (a load per FMA); now 5 or 7, within the accumulator budget."""
    for width, oc_blocks in [(13, 125), (13, 5), (7, 35), (28, 7)]:
        tile = choose_conv_tile(width, oc_blocks, registers, False, chains=8)
        assert oc_blocks % tile.oc_vectors == 0
        assert tile.accumulators <= registers * 5 // 8  # the accumulator budget
        if registers == 16 and oc_blocks % 5 == 0:
            assert tile.oc_vectors == 5, (width, oc_blocks, tile)
    # a count that 2, 3 or 4 divides keeps its tile from the candidates 1-4
    for width, oc_blocks in [(13, 64), (7, 64), (14, 6), (56, 8)]:
        assert choose_conv_tile(width, oc_blocks, registers, False, chains=8).oc_vectors <= 4


def test_conv_of_five_oc_blocks_matches_reference_on_avx2():
    """Numerics of the 5-vector tiles (Note [oc vectors]) on AVX2: 1x1 over a 13-wide row
    (a tail), a padded 3x3 of stride 2, batch 2, input channels not a multiple of the block;
    the FMA loop holds its accumulators in registers."""
    if not HASWELL.is_host:
        pytest.skip("this CPU cannot run AVX2 code")
    cases = [
        _conv_case(1, 16, (13, 13), 40, 1, ib=8, ob=8),
        _conv_case(2, 12, (9, 11), 40, 3, stride=2, pad=1, ib=4, ob=8),
        _conv_case(1, 8, (7, 7), 200, 1, ib=8, ob=8),  # 25 blocks
    ]
    check_ops(cases, target=HASWELL, schedule_target="x86", rtol=1e-4, atol=1e-4)
    mod, _ = build_cases(cases[:1], target=HASWELL, schedule_target="x86")
    loops = [loop_summary(body) for body in fma_loops(mod.get_source("asm"))]
    assert loops and max(x["fma"] for x in loops) >= 10
    assert all(x["stack"] == 0 for x in loops)
