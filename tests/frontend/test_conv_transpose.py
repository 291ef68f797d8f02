"""Transposed convolutions in their sub-pixel form (tessera/frontend/conv_transpose.py): the
form against the direct definition on every attribute, what the converters emit, and compiled
models against ONNX Runtime."""
# ruff: noqa: E501

import itertools

import numpy as np
import pytest
from onnx import helper

import tessera
from tessera.frontend import from_onnx
from tessera.frontend.conv_transpose import conv_transpose, subpixel_weight
from tessera.frontend.testing import make_model, run_ort
from tessera.graph import run_function
from tessera.graph.builder import GraphBuilder
from tessera.graph.ops import nn_ref

R = np.random.default_rng(5)


def _subpixel(x, w, **attrs):
    b = GraphBuilder()
    xv = b.param("x", x.shape, "float32")
    y = conv_transpose(b, xv, b.const(w, "w"), **attrs)
    func = b.finish([y])
    return run_function(func, [x])[0], [c.op.name for c in func.body]


# (kernel, stride, dilation, pad begin, pad end, output padding) on one axis: strides that do
# and do not divide the kernel, dilations sharing a factor with the stride, pads of whole
# strides (taken off the input padding), output padding past the last tap
AXES = [
    axis
    for axis in itertools.product(
        (1, 2, 3, 4, 5), (1, 2, 3), (1, 2, 3), (0, 1, 4), (0, 2), (0, 1, 2)
    )
    if axis[5] < max(axis[1], axis[2])
]


@pytest.mark.parametrize("groups", [1, 2])
def test_subpixel_form_equals_the_definition_1d(groups):
    x = R.standard_normal((2, 4, 5)).astype(np.float32)
    checked = 0
    for k, s, d, pb, pe, op in AXES:
        w = R.standard_normal((4, 3, k)).astype(np.float32)
        attrs = dict(
            strides=(s,), padding=(pb, pe), dilation=(d,), groups=groups, output_padding=(op,)
        )
        expected = nn_ref.conv_transpose(x, w, **attrs)
        if expected.shape[2] <= 0:
            continue
        got, ops = _subpixel(x, w, **attrs)
        assert "nn.conv1d_transpose" not in ops and "nn.conv1d" in ops
        np.testing.assert_allclose(
            got, expected, rtol=1e-5, atol=1e-5, err_msg=str((k, s, d, pb, pe, op))
        )
        checked += 1
    assert checked > 300


@pytest.mark.parametrize(
    "xs,ws,strides,dilation,padding,output_padding,groups",
    [((1, 6, 3, 4), (6, 2, 3, 2), (2, 3), (1, 2), (1, 0, 2, 3), (1, 0), 3),
     ((2, 4, 4, 4), (4, 5, 2, 2), (2, 2), (1, 1), (0, 0, 0, 0), (0, 0), 1),
     ((1, 4, 3, 3, 3), (4, 1, 2, 3, 2), (2, 1, 3), (1, 1, 2), (0, 1, 2, 1, 0, 1), (1, 0, 1), 4)],
)  # fmt: skip
def test_subpixel_form_equals_the_definition_nd(
    xs, ws, strides, dilation, padding, output_padding, groups
):
    x, w = R.standard_normal(xs).astype(np.float32), R.standard_normal(ws).astype(np.float32)
    attrs = dict(
        strides=strides,
        padding=padding,
        dilation=dilation,
        groups=groups,
        output_padding=output_padding,
    )
    got, _ = _subpixel(x, w, **attrs)
    np.testing.assert_allclose(got, nn_ref.conv_transpose(x, w, **attrs), rtol=1e-5, atol=1e-5)


def test_kernel_equal_to_stride_is_one_tap():
    """The upsampling heads' k = s: a 1x1 convolution with s*s times the channels."""
    w = R.standard_normal((24, 8, 2, 2)).astype(np.float32)
    v = subpixel_weight(w, (2, 2), (1, 1), 1)
    assert v.shape == (8 * 4, 24, 1, 1)
    # output channel o*4 + 2*ph + pw holds tap (ph, pw) of w[:, o]
    np.testing.assert_array_equal(v[3 * 4 + 2 * 1 + 0, :, 0, 0], w[:, 3, 1, 0])


def _model(attrs, xs, ws, weight_input=False):
    x, w = R.standard_normal(xs).astype(np.float32), R.standard_normal(ws).astype(np.float32)
    bias = R.standard_normal(ws[1] * attrs.get("group", 1)).astype(np.float32)
    inputs, inits = {"x": x}, {"b": bias}
    (inputs if weight_input else inits)["w"] = w
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], **attrs)
    return make_model([node], inputs, ["y"], inits), inputs


def _compiled(model, feeds):
    mod, params = from_onnx(model)
    lib = tessera.build(mod, target="llvm", params=params)
    m = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))
    for name, value in feeds.items():
        m.set_input(name, value)
    m.run()
    return m.get_output(0).numpy(), [c.op.name for c in mod["main"].body]


@pytest.mark.parametrize(
    "attrs,xs,ws",
    [({"strides": [2, 2]}, (1, 24, 12, 16), (24, 4, 2, 2)),
     ({"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}, (1, 8, 7, 6), (8, 5, 3, 3)),
     ({"strides": [3, 2], "pads": [4, 0, 3, 2], "dilations": [2, 3], "group": 2}, (1, 4, 5, 6), (4, 3, 3, 2)),
     ({"strides": [2], "pads": [1, 1]}, (1, 16, 20), (16, 8, 4)),
     ({"strides": [1, 1], "pads": [1, 1, 1, 1]}, (1, 3, 9, 9), (3, 4, 3, 3))],
)  # fmt: skip
def test_compiled_matches_ort(attrs, xs, ws):
    model, feeds = _model(attrs, xs, ws)
    got, ops = _compiled(model, feeds)
    assert not any(op.endswith("_transpose") for op in ops)
    np.testing.assert_allclose(got, run_ort(model, feeds)[0], rtol=1e-4, atol=1e-4)


def test_weight_given_at_run_time_keeps_the_direct_kernel():
    attrs = {"strides": [2, 2], "pads": [1, 0, 0, 1], "output_padding": [1, 0]}
    model, feeds = _model(attrs, (1, 4, 5, 5), (4, 3, 3, 3), weight_input=True)
    got, ops = _compiled(model, feeds)
    assert "nn.conv2d_transpose" in ops
    np.testing.assert_allclose(got, run_ort(model, feeds)[0], rtol=1e-4, atol=1e-4)


def test_output_shape_past_the_last_window_is_zero_padded():
    # ONNX's reference: an output_shape larger than the windows reach ends in zeros
    # (ONNX's conformance case test_convtranspose_output_shape: (10, 8) from 9 x 7)
    attrs = {"strides": [3, 2], "output_shape": [10, 8]}
    model, feeds = _model(attrs, (1, 1, 3, 3), (1, 2, 3, 3))
    got, _ = _compiled(model, feeds)
    assert got.shape == (1, 2, 10, 8)
    np.testing.assert_allclose(got, run_ort(model, feeds)[0], rtol=1e-4, atol=1e-4)
