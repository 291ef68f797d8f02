"""nn.conv{1,2,3}d and nn.conv{1,2,3}d_transpose: compute + generic schedule vs numpy."""

import numpy as np
import pytest

import tessera
from tessera import te
from tessera.graph.op import get_op
from tessera.topi import nn as topi_nn
from tessera.topi.testing import check_ops

RNG = np.random.default_rng(0)


def randn(*shape, dtype="float32"):
    return RNG.standard_normal(shape).astype(dtype)


def conv_case(name, x_shape, w_shape, strides, padding, dilation, groups=1, dtype="float32"):
    attrs = dict(strides=strides, padding=padding, dilation=dilation, groups=groups)
    return (name, [randn(*x_shape, dtype=dtype), randn(*w_shape, dtype=dtype)], attrs)


CONV2D = [
    # plain 3x3, same padding
    conv_case("nn.conv2d", (2, 3, 9, 10), (4, 3, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    # no padding (no pad stage), 1x1 kernel
    conv_case("nn.conv2d", (1, 8, 5, 7), (6, 8, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),
    # strided, asymmetric padding, rectangular kernel
    conv_case("nn.conv2d", (1, 3, 11, 12), (5, 3, 3, 2), (2, 3), (1, 0, 2, 1), (1, 1)),
    # dilation
    conv_case("nn.conv2d", (1, 2, 12, 13), (3, 2, 3, 3), (1, 1), (2, 2, 2, 2), (2, 2)),
    # groups and depthwise (with a channel multiplier)
    conv_case("nn.conv2d", (2, 6, 8, 8), (4, 3, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), groups=2),
    conv_case("nn.conv2d", (1, 4, 9, 9), (8, 1, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1), groups=4),
    # stride larger than the kernel, output width >= vector lanes
    conv_case("nn.conv2d", (1, 2, 7, 70), (2, 2, 1, 3), (3, 2), (0, 1, 0, 1), (1, 1)),
    # float64
    conv_case(
        "nn.conv2d", (1, 3, 6, 6), (2, 3, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), dtype="float64"
    ),
]

CONV_ND = [
    conv_case("nn.conv1d", (2, 3, 20), (4, 3, 5), (2,), (2, 1), (1,)),
    conv_case("nn.conv1d", (1, 4, 17), (4, 2, 3), (1,), (0, 0), (3,), groups=2),
    conv_case(
        "nn.conv3d", (1, 2, 5, 6, 7), (3, 2, 3, 3, 3), (1, 2, 1), (1, 1, 0, 1, 0, 2), (1, 1, 1)
    ),
    conv_case(
        "nn.conv3d", (1, 4, 4, 5, 6), (4, 1, 2, 2, 2), (1, 1, 1), (0,) * 6, (1, 2, 1), groups=4
    ),
]


def transpose_case(name, x_shape, w_shape, strides, padding, dilation, groups=1, out_pad=None):
    attrs = dict(strides=strides, padding=padding, dilation=dilation, groups=groups)
    if out_pad is not None:
        attrs["output_padding"] = out_pad
    return (name, [randn(*x_shape), randn(*w_shape)], attrs)


CONV_TRANSPOSE = [
    transpose_case("nn.conv2d_transpose", (1, 3, 5, 6), (3, 4, 3, 3), (1, 1), (0, 0, 0, 0), (1, 1)),
    transpose_case("nn.conv2d_transpose", (2, 4, 5, 5), (4, 2, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    transpose_case(
        "nn.conv2d_transpose",
        (1, 4, 4, 5),
        (4, 3, 4, 3),
        (2, 3),
        (1, 0, 2, 1),
        (1, 1),
        out_pad=(1, 2),
    ),
    transpose_case(
        "nn.conv2d_transpose", (1, 4, 6, 6), (4, 1, 3, 3), (2, 2), (2, 2, 2, 2), (2, 1), 2
    ),
    transpose_case("nn.conv1d_transpose", (2, 3, 7), (3, 2, 4), (3,), (1, 2), (1,)),
    transpose_case(
        "nn.conv3d_transpose",
        (1, 2, 3, 3, 4),
        (2, 2, 2, 3, 2),
        (2, 1, 2),
        (0, 1, 0, 0, 1, 1),
        (1, 1, 1),
    ),
]


@pytest.mark.parametrize(
    "cases", [CONV2D, CONV_ND, CONV_TRANSPOSE], ids=["conv2d", "conv1d_3d", "conv_transpose"]
)
def test_conv_matches_reference_llvm(cases):
    check_ops(cases, target="llvm")


def test_conv_matches_reference_c():
    check_ops([CONV2D[2], CONV2D[4], CONV_ND[0], CONV_TRANSPOSE[1]], target="c")


def test_conv_tags_and_pad_stage():
    x, w = te.placeholder((1, 3, 8, 8), name="x"), te.placeholder((4, 3, 3, 3), name="w")
    y = topi_nn.conv(x, w, (1, 1), (1, 1, 1, 1), (1, 1))
    assert y.op.tag == "conv2d_nchw"
    assert [t.op.tag for t in y.op.input_tensors if isinstance(t.op, te.ComputeOp)] == ["pad"]
    unpadded = topi_nn.conv(x, w, (1, 1), (0, 0, 0, 0), (1, 1))
    assert all(not isinstance(t.op, te.ComputeOp) for t in unpadded.op.input_tensors)


def conv_bias_relu(x_shape, w_shape):
    c_out = w_shape[0]
    x, w = te.placeholder(x_shape, name="x"), te.placeholder(w_shape, name="w")
    b = te.placeholder((c_out,), name="b")
    conv = get_op("nn.conv2d").rules["compute"](
        x, w, strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1)
    )
    biased = te.compute(conv.shape, lambda n, c, h, v: conv[n, c, h, v] + b[c], tag="broadcast")
    out = te.compute(conv.shape, lambda *i: te.max(biased(*i), 0.0), name="relu", tag="elemwise")
    return x, w, b, out


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_conv_schedule_with_fused_epilogue(target):
    x, w, b, out = conv_bias_relu((2, 3, 10, 20), (5, 3, 3, 3))
    s = get_op("nn.conv2d").rules["schedule:generic"]([out], tessera.Target(target))
    text = str(tessera.lower(s, [x, w, b, out]))
    assert "parallel" in text and "biased" not in text  # the epilogue is inlined
    f = tessera.build(s, [x, w, b, out], target=target, name="conv_bias_relu")
    xs, ws, bs = randn(2, 3, 10, 20), randn(5, 3, 3, 3), randn(5)
    got = np.zeros((2, 5, 10, 20), "float32")
    f(xs, ws, bs, got)
    conv = get_op("nn.conv2d").evaluate(
        [xs, ws], dict(strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1))
    )[0]
    np.testing.assert_allclose(got, np.maximum(conv + bs[:, None, None], 0), rtol=1e-4, atol=1e-5)


def test_conv_bad_attributes_are_value_errors():
    x, w = te.placeholder((1, 4, 8, 8), name="x"), te.placeholder((4, 3, 3, 3), name="w")
    with pytest.raises(ValueError, match="channels"):
        topi_nn.conv(x, w, (1, 1), (0, 0, 0, 0), (1, 1))
    with pytest.raises(ValueError, match="pads"):
        topi_nn.conv(x, te.placeholder((4, 4, 3, 3)), (1, 1), (0, 0), (1, 1))
