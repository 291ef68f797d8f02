"""Winograd F(m x m, 3 x 3) convolution (topi/x86/winograd.py): the Cook-Toom matrices, the
weight transform, the kernel against the direct conv (numpy) on odd shapes, this CPU and an
AVX2 target, and the rule that picks it."""

import numpy as np
import pytest

import tessera
from tessera.graph.op import get_op
from tessera.graph.ops import nn_ref
from tessera.topi.testing import build_cases
from tessera.topi.x86.layout import transform_array
from tessera.topi.x86.winograd import (
    TILES,
    choose_winograd,
    transform_weight_np,
    winograd_matrices,
    winograd_reference,
)

RNG = np.random.default_rng(0)
HASWELL = tessera.Target("llvm -mcpu=haswell")


@pytest.mark.parametrize("m", TILES)
def test_matrices_compute_a_correlation(m):
    at, g, bt = winograd_matrices(m)
    assert at.shape == (m, m + 2) and g.shape == (m + 2, 3) and bt.shape == (m + 2, m + 2)
    for _ in range(3):
        d, w = RNG.standard_normal(m + 2), RNG.standard_normal(3)
        np.testing.assert_allclose(at @ ((g @ w) * (bt @ d)), np.correlate(d, w, "valid"))


def test_f4_matrices_are_lavins():
    at, g, bt = winograd_matrices(4)
    assert bt[0].tolist() == [4, 0, -5, 0, 1, 0]
    assert at[3].tolist() == [0, 1, -1, 8, -8, 1]
    np.testing.assert_allclose(g[3], [1 / 24, 1 / 12, 1 / 6])


def test_unsupported_tile_is_a_clear_error():
    with pytest.raises(ValueError, match="points"):
        winograd_matrices(9)
    with pytest.raises(ValueError, match="3x3"):
        transform_weight_np(np.zeros((4, 4, 5, 5), np.float32), 4, 16)


def _case(n, c, hw, k, pad, m, ib, ob, nr, rows=1):
    x = RNG.standard_normal((n, c, *hw), dtype=np.float32)
    w = RNG.standard_normal((k, c, 3, 3), dtype=np.float32)
    attrs = dict(padding=pad, tile=m, channels=k, out_block=ob, rows=rows)
    xb = transform_array(x, "NCHW", f"NCHW{ib}c")
    return x, w, ("nn.conv2d_winograd_nchwc", [xb, transform_weight_np(w, m, nr)], attrs)


def _cases(lanes):
    b, h = lanes, lanes // 2
    return [
        _case(1, b, (7, 7), 2 * b, (1, 1, 1, 1), 4, b, b, 2 * b),  # 7 = 4 + 3: a partial tile
        # batch 2, asymmetric pads; 2 x 5 x 3 = 30 tiles as 36 product rows (rows=6)
        _case(2, 2 * b, (9, 6), 4 * b, (1, 0, 2, 1), 2, b, b, 4 * b, rows=6),
        _case(1, 3 * h, (12, 12), 3 * h, (1, 1, 1, 1), 4, h, h, 4 * b, rows=4),  # K < nr
        _case(1, b, (5, 13), b, (0, 0, 0, 0), 2, b, b, b),  # no padding, 3x11 output
    ]


def _check(cases, target):
    mod, _ = build_cases([c for *_, c in cases], target=target, schedule_target="x86")
    for k, (x, w, (name, inputs, attrs)) in enumerate(cases):
        want = nn_ref.conv(x, w, (1, 1), attrs["padding"], (1, 1), 1)
        ob = attrs["out_block"]
        out = np.empty(transform_array(want, "NCHW", f"NCHW{ob}c").shape, np.float32)
        mod[f"case{k}"](*inputs, out)
        got = transform_array(out, f"NCHW{ob}c", "NCHW")
        scale = np.abs(want).max()
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * scale, err_msg=f"case {k}")
        # the op's numpy reference (float64 winograd) agrees too
        ref = get_op(name).evaluate(inputs, attrs)[0]
        np.testing.assert_allclose(out, ref, rtol=0, atol=1e-5 * scale)


def test_winograd_matches_direct_conv():
    _check(_cases(tessera.Target("llvm").vector_lanes("float32")), "llvm")


def test_winograd_on_avx2():
    _check(_cases(8)[:2], HASWELL)


def test_reference_is_the_direct_conv():
    x, w, (_, inputs, attrs) = _case(1, 4, (6, 6), 4, (1, 1, 1, 1), 4, 4, 4, 4)
    got = winograd_reference(x, inputs[1], attrs["padding"], 4, 4)
    want = nn_ref.conv(x, w, (1, 1), (1,) * 4, (1, 1), 1)
    # the weights were transformed in float64 and rounded to float32 (G holds 1/6, 1/24)
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-6 * np.abs(want).max())


def test_type_rule_rejects_mismatched_weights():
    x = tessera.graph.TensorType((1, 2, 8, 8, 16), "float32")
    u = tessera.graph.TensorType((6, 6, 1, 16, 16), "float32")  # 16 inputs, data has 32
    with pytest.raises(TypeError, match="input channels"):
        get_op("nn.conv2d_winograd_nchwc").infer_type(
            [x, u], dict(padding=[1] * 4, tile=4, channels=16, out_block=16)
        )


def test_rule_follows_image_size_and_channels():
    # big images, few channels: F(4x4); 7x7 images with many channels: the weights (a*a/9
    # times larger) dominate, F(2x2); 2x2 outputs: direct
    assert choose_winograd(56, 56, 64, 64, rows=6, memory=16) == 4
    assert choose_winograd(14, 14, 256, 256, rows=6, memory=16) == 4
    assert choose_winograd(7, 7, 512, 512, rows=6, memory=16) == 2
    assert choose_winograd(2, 2, 512, 512, rows=6, memory=16) is None


def test_the_rule_weighs_memory_by_the_targets_balance():
    """Note [machine balance]: a weight vector from memory costs memory_cost(target) FMAs
    (16 with AVX-512, 8 with AVX2's half-width vectors); the more a vector costs, the sooner
    Winograd's a*a/9 times larger weights lose to the direct conv on small maps."""
    from tessera.topi.x86.cpu import memory_cost

    assert memory_cost(tessera.Target("llvm -mcpu=skylake-avx512")) == 16
    assert memory_cost(tessera.Target("llvm -mcpu=haswell")) == 8
    small = (7, 7, 512, 512)
    picks = [choose_winograd(*small, rows=6, memory=m) for m in (8, 16, 32)]
    assert picks == [4, 2, None]


def test_the_balance_is_the_targets_described_bandwidth():
    """Note [described machine]: -dram-bytes-per-cycle describes the DRAM bandwidth per core
    (8 unless told); a slower memory makes weight vectors cost more FMAs."""
    from tessera.topi.x86.cpu import memory_cost

    slow = tessera.Target("llvm -mcpu=haswell -dram-bytes-per-cycle=4")
    assert slow.dram_bytes_per_cycle == 4 and tessera.Target(str(slow)) == slow
    assert tessera.Target("llvm -mcpu=haswell").dram_bytes_per_cycle == 8
    assert memory_cost(slow) == 16  # AVX2 with half the bandwidth: AVX-512's balance
    measured = tessera.Target("llvm -mcpu=haswell -dram-bytes-per-cycle=5.5")  # bench/stream.py
    assert tessera.Target(str(measured)).dram_bytes_per_cycle == 5.5
    with pytest.raises(ValueError, match="dram-bytes-per-cycle"):
        tessera.Target("llvm -dram-bytes-per-cycle=0")


def test_the_margin_and_transform_cost_are_rule_knobs():
    """Note [rule knobs]: the rule's margin over the direct conv and its transform cost are
    knobs of the rule; today's values are the defaults, and other values move the choice."""
    from tessera.topi.rules import rule_knobs, use_rules
    from tessera.topi.x86.winograd import MARGIN, TRANSFORM_COST

    assert (MARGIN.default, TRANSFORM_COST.default) == (0.8, 8)
    assert {"winograd.margin", "winograd.transform_cost"} <= set(rule_knobs())
    small = (7, 7, 512, 512)
    assert choose_winograd(*small, rows=6, memory=16) == 2
    with use_rules({"winograd.margin": 0.6}):
        assert choose_winograd(*small, rows=6, memory=16) is None  # must win by more
    few = (28, 28, 8, 8)  # few channels: the transforms are most of Winograd's work
    assert choose_winograd(*few, rows=6, memory=16) == 4
    with use_rules({"winograd.transform_cost": 12}):
        assert choose_winograd(*few, rows=6, memory=16) is None
        assert choose_winograd(56, 56, 64, 64, rows=6, memory=16) == 4
    assert choose_winograd(*small, rows=6, memory=16) == 2  # the scope ended


def test_product_rows_avoid_padding_waste():
    from tessera.topi.x86.winograd import product_rows

    assert product_rows(16, most=14, nv=2) == 8  # 2 x 8 rows, not 2 x 14 (12 wasted)
    assert product_rows(196, most=14, nv=2) == 14  # 14 x 14 exactly
    assert product_rows(4, most=6, nv=4) == 4
    assert product_rows(49, most=6, nv=4) == 6  # 54 rows: fewer rows would cost more loads
