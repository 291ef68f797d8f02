"""nn.{max,avg}_pool{1,2,3}d and the global pools: compute + generic schedule vs numpy."""

import numpy as np
import pytest

import tessera
from tessera import te
from tessera.graph.op import get_op
from tessera.topi import nn as topi_nn
from tessera.topi.testing import check_ops

RNG = np.random.default_rng(1)


def data(*shape, dtype="float32"):
    if dtype.startswith("int"):
        return RNG.integers(-50, 50, shape).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype)


def pool_case(kind, x, pool_size, strides, padding, **attrs):
    nd = len(pool_size)
    attrs = dict(pool_size=pool_size, strides=strides, padding=padding, **attrs)
    return (f"nn.{kind}_pool{nd}d", [x], attrs)


def cases_2d(kind):
    x = data(2, 3, 9, 11)
    wide = data(1, 2, 6, 40)
    return [
        pool_case(kind, x, (2, 2), (2, 2), (0, 0, 0, 0)),
        pool_case(kind, x, (3, 3), (1, 1), (1, 1, 1, 1)),
        pool_case(kind, x, (3, 3), (2, 2), (1, 1, 1, 1), ceil_mode=1),
        pool_case(kind, x, (3, 2), (2, 3), (1, 0, 2, 1), ceil_mode=1, count_include_pad=1),
        pool_case(kind, x, (3, 3), (2, 2), (1, 1, 1, 1), count_include_pad=1),
        pool_case(kind, x, (2, 3), (1, 2), (1, 1, 0, 1), dilation=(2, 2)),
        pool_case(kind, x, (3, 3), (3, 3), (0, 0, 0, 0), dilation=(2, 1), ceil_mode=1),
        pool_case(kind, wide, (1, 3), (1, 1), (0, 1, 0, 1)),
        pool_case(kind, data(1, 2, 7, 7, dtype="float64"), (3, 3), (2, 2), (1, 1, 1, 1)),
        pool_case(kind, data(1, 2, 7, 9, dtype="int32"), (3, 3), (2, 2), (1, 1, 1, 1), ceil_mode=1),
    ]


def cases_nd(kind):
    return [
        pool_case(kind, data(2, 3, 20), (3,), (2,), (1, 1), ceil_mode=1),
        pool_case(kind, data(1, 2, 19), (4,), (3,), (2, 0), dilation=(2,), count_include_pad=1),
        pool_case(kind, data(1, 2, 5, 6, 7), (2, 2, 3), (2, 2, 2), (0, 1, 1, 1, 0, 1), ceil_mode=1),
        pool_case(kind, data(1, 1, 4, 5, 6), (3, 3, 3), (1, 2, 1), (1,) * 6, count_include_pad=1),
    ]


def global_cases():
    out = []
    for kind in ("max", "avg"):
        out += [
            (f"nn.global_{kind}_pool1d", [data(2, 3, 17)], {}),
            (f"nn.global_{kind}_pool2d", [data(2, 5, 7, 9)], {}),
            (f"nn.global_{kind}_pool3d", [data(1, 2, 3, 4, 5)], {}),
            (f"nn.global_{kind}_pool2d", [data(1, 3, 4, 4, dtype="int32")], {}),
        ]
    return out


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pool2d_matches_reference(kind):
    check_ops(cases_2d(kind), target="llvm")


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pool1d_3d_matches_reference(kind):
    check_ops(cases_nd(kind), target="llvm")


def test_global_pools_match_reference():
    check_ops(global_cases(), target="llvm")


def test_pools_match_reference_c():
    check_ops([cases_2d("max")[2], cases_2d("avg")[3], cases_nd("avg")[1], global_cases()[5]], "c")


def test_avg_pool_divides_by_the_counted_positions():
    # one 3x3 window on a 2x2 input padded by 1: 4 data cells, 9 with the pads counted
    x = np.ones((1, 1, 2, 2), "float32")
    attrs = dict(pool_size=(3, 3), strides=(1, 1), padding=(1, 1, 0, 0))
    for include, expected in ((0, 1.0), (1, 4 / 9)):
        a = dict(attrs, count_include_pad=include)
        check_ops([("nn.avg_pool2d", [x], a)])
        assert np.allclose(get_op("nn.avg_pool2d").evaluate([x], a)[0][0, 0, 0, 0], expected)


def test_avg_pool_with_fused_epilogue():
    x = te.placeholder((2, 3, 8, 16), name="x")
    pooled = topi_nn.pool(x, "avg", (2, 2), (2, 2), (0, 0, 0, 0))
    out = te.compute(pooled.shape, lambda *i: pooled(*i) * 2.0, name="double", tag="elemwise")
    s = topi_nn.schedule_pool([out], tessera.Target("llvm"))
    f = tessera.build(s, [x, out], target="llvm", name="avg_double")
    xs = data(2, 3, 8, 16)
    got = np.zeros((2, 3, 4, 8), "float32")
    f(xs, got)
    expected = xs.reshape(2, 3, 4, 2, 8, 2).mean(axis=(3, 5)) * 2
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_window_one_stride_past_the_input_gives_an_empty_output(kind):
    # (4 - 5) // 1 + 1 = 0 windows: an empty output, as ONNX's VALID rule and ONNX Runtime give
    # (was a type error); a window that misses by more than a stride stays an error
    check_ops([pool_case(kind, data(1, 2, 4, 4), (5, 5), (1, 1), (0, 0, 0, 0)),
               pool_case(kind, data(1, 2, 4, 9), (5, 2), (2, 2), (0, 0, 0, 0))])  # fmt: skip


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "LpPool"])
def test_onnx_valid_pool_wider_than_its_input_matches_ort(op):
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    from tessera.frontend import from_onnx
    from tessera.frontend.testing import check_node, make_model

    check_node(op, {"x": data(1, 2, 4, 4)}, {"kernel_shape": [5, 5], "auto_pad": "VALID"})
    # ONNX's floor rule: (3 - 4) // 2 + 1 = 0 windows, as ONNX's reference implementation
    # (ONNX Runtime truncates -1 / 2 to 0 and pools one partial window)
    node = helper.make_node(op, ["x"], ["y"], kernel_shape=[4, 2], strides=[2, 2])
    model = make_model([node], {"x": data(1, 2, 3, 3)}, ["y"])
    expected = ReferenceEvaluator(model).run(None, {"x": data(1, 2, 3, 3)})[0]
    assert expected.shape == (1, 2, 0, 1)
    mod, _ = from_onnx(model)
    assert mod["main"].outputs[0].type.shape == expected.shape


def test_pool_window_more_than_a_stride_past_the_input_is_an_error():
    from tessera.frontend import from_onnx
    from tessera.frontend.testing import make_model, onnx

    node = onnx.helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[5, 5], name="pool")
    model = make_model([node], {"x": data(1, 2, 3, 3)}, ["y"], {}, 17)
    with pytest.raises(Exception, match="pool window .* is larger than padded input"):
        from_onnx(model)
