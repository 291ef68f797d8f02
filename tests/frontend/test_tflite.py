"""The TFLite frontend against the TFLite interpreter (ai-edge-litert, reference kernels) on
small models written here with the flatbuffer builder: float ops within 1e-4, int8/uint8 models
(per-tensor and per-channel) bit-exact through conv/FC/ADD/average pool/requantize and within
one quantization step through the float-path activations; the layouts chosen; unsupported ops
listed at once; malformed files. The models shipped in the mediapipe wheel run under -m slow."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tflite")
pytest.importorskip("ai_edge_litert")

import tessera  # noqa: E402
from tessera.frontend.tflite import UnsupportedOpError, from_tflite  # noqa: E402
from tessera.frontend.tflite_testing import ModelBuilder, check_model, run_interpreter  # noqa: E402
from tessera.graph import run_function  # noqa: E402
from tessera.runtime import GraphModule  # noqa: E402

RNG = np.random.default_rng(0)


def normal(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def conv_model(act=1, padding=0, stride=2):
    m = ModelBuilder()
    x = m.tensor((1, 9, 9, 3), name="input:0")
    w = m.tensor((4, 3, 3, 3), data=normal(4, 3, 3, 3), name="conv/w")
    b = m.tensor((4,), data=normal(4), name="conv/b")
    size = 5 if padding == 0 else 4
    y = m.tensor((1, size, size, 4), name="conv_out")
    m.op("CONV_2D", [x, w, b], [y], "Conv2DOptions", Padding=padding, StrideW=stride,
         StrideH=stride, FusedActivationFunction=act)  # fmt: skip
    dw = m.tensor((1, 3, 3, 8), data=normal(1, 3, 3, 8))
    db = m.tensor((8,), data=normal(8))
    y2 = m.tensor((1, size, size, 8))
    m.op("DEPTHWISE_CONV_2D", [y, dw, db], [y2], "DepthwiseConv2DOptions", Padding=0, StrideW=1,
         StrideH=1, DepthMultiplier=2, FusedActivationFunction=3)  # fmt: skip
    y3 = m.tensor((1, size, size, 8))
    m.op("ADD", [y2, y2], [y3], "AddOptions", FusedActivationFunction=0)
    y4 = m.tensor((1, -(-size // 2), -(-size // 2), 8), name="pooled")
    m.op("MAX_POOL_2D", [y3], [y4], "Pool2DOptions", Padding=0, StrideW=2, StrideH=2,
         FilterWidth=2, FilterHeight=2)  # fmt: skip
    return m.finish([x], [y4, y])


@pytest.mark.parametrize("act, padding", [(0, 0), (1, 1), (2, 0), (3, 1)])
def test_convolutions_pools_and_fused_activations(act, padding):
    check_model(conv_model(act, padding), [normal(1, 9, 9, 3)])


def test_fused_tanh_is_refused_with_the_operator_named():
    with pytest.raises(ValueError, match="operator 0 \\(CONV_2D\\): a fused TANH"):
        from_tflite(conv_model(act=4))


def test_names_layouts_and_no_transposes_inside_a_conv_chain():
    mod, params = from_tflite(conv_model())
    func = mod["main"]
    assert [p.name for p in func.params][:1] == ["input_0"]
    assert any(n.startswith("conv_w") for n in params) and func.outputs[0].name == "pooled"
    ops = [c.op.name for c in func.body]
    # one transpose in, one out per output: conv -> depthwise -> add -> pool stay NCHW
    assert ops.count("transpose") == 3
    assert func.body[1].span == ("0:CONV_2D",)


def _single(op, in_shapes, out_shape, options=None, consts=None, n_out=1, **fields):
    """A model of one op: inputs (shape or a constant array), outputs of out_shape."""
    m = ModelBuilder()
    ins, feeds = [], []
    for k, s in enumerate(in_shapes):
        if isinstance(s, np.ndarray):
            ins.append(m.tensor(s.shape, str(s.dtype), data=s))
        else:
            ins.append(m.tensor(s, name=f"in{k}"))
            feeds.append(ins[-1])
    outs = [m.tensor(out_shape, name=f"out{k}") for k in range(n_out)]
    m.op(op, ins, outs, options, **fields)
    return m.finish(feeds, outs)


# (ELU and CEIL are missing from the interpreter's reference kernels)
UNARY = ["RELU", "RELU6", "RELU_N1_TO_1", "LOGISTIC", "TANH", "HARD_SWISH", "EXP", "ABS", "NEG",
         "SQUARE", "FLOOR"]  # fmt: skip


@pytest.mark.parametrize("op", UNARY)
def test_unary(op):
    check_model(_single(op, [(1, 4, 5, 3)], (1, 4, 5, 3)), [normal(1, 4, 5, 3, scale=3)])


@pytest.mark.parametrize("op", ["SQRT", "RSQRT", "LOG"])
def test_unary_positive(op):
    x = np.abs(normal(2, 7)) + 0.1
    check_model(_single(op, [(2, 7)], (2, 7)), [x])


def test_leaky_relu_and_prelu_after_a_conv():
    check_model(_single("LEAKY_RELU", [(1, 3, 3, 2)], (1, 3, 3, 2), "LeakyReluOptions",
                        Alpha=0.3), [normal(1, 3, 3, 2)])  # fmt: skip
    m = ModelBuilder()
    x = m.tensor((1, 6, 6, 2), name="x")
    w, b = m.tensor((3, 1, 1, 2), data=normal(3, 1, 1, 2)), m.tensor((3,), data=np.zeros(3))
    y = m.tensor((1, 6, 6, 3))
    m.op("CONV_2D", [x, w, b], [y], "Conv2DOptions", Padding=1, StrideW=1, StrideH=1)
    alpha = m.tensor((1, 1, 3), data=np.array([[[0.1, 0.2, -0.5]]], np.float32))
    z = m.tensor((1, 6, 6, 3), name="z")
    m.op("PRELU", [y, alpha], [z])
    check_model(m.finish([x], [z]), [normal(1, 6, 6, 2)])


BINARY = [("ADD", "AddOptions"), ("SUB", "SubOptions"), ("MUL", "MulOptions"),
          ("DIV", "DivOptions"), ("MAXIMUM", None), ("MINIMUM", None),
          ("SQUARED_DIFFERENCE", None)]  # fmt: skip


@pytest.mark.parametrize("op, options", BINARY)
def test_binary_broadcasting_a_channel_constant(op, options):
    c = np.array([0.5, -2.0, 3.0], np.float32)
    fields = {"FusedActivationFunction": 1} if options else {}
    model = _single(op, [(1, 2, 4, 3), c], (1, 2, 4, 3), options, **fields)
    check_model(model, [normal(1, 2, 4, 3)])
    model = _single(op, [(2, 1, 3), (1, 4, 3)], (2, 4, 3), options, **fields)
    check_model(model, [normal(2, 1, 3), normal(1, 4, 3) + 4])


def test_concat_pad_mean_and_softmax_in_either_layout():
    m = ModelBuilder()
    x = m.tensor((1, 4, 4, 2), name="x")
    w, b = m.tensor((2, 1, 1, 2), data=normal(2, 1, 1, 2)), m.tensor((2,), data=normal(2))
    y = m.tensor((1, 4, 4, 2))
    m.op("CONV_2D", [x, w, b], [y], "Conv2DOptions", Padding=1, StrideW=1, StrideH=1)
    cat = m.tensor((1, 4, 4, 4))
    m.op("CONCATENATION", [y, x], [cat], "ConcatenationOptions", Axis=-1)
    pads = m.tensor((4, 2), "int32", data=[[0, 0], [1, 2], [0, 1], [0, 3]])
    padded = m.tensor((1, 7, 5, 7))
    m.op("PAD", [cat, pads], [padded])
    axes = m.tensor((2,), "int32", data=[1, 2])
    mean = m.tensor((1, 1, 1, 7), name="mean")
    m.op("MEAN", [padded, axes], [mean], "ReducerOptions", KeepDims=True)
    soft = m.tensor((1, 7, 5, 7), name="soft")
    m.op("SOFTMAX", [padded], [soft], "SoftmaxOptions", Beta=0.5)
    total = m.tensor((1, 7), name="total")
    m.op("SUM", [padded, axes], [total], "ReducerOptions", KeepDims=False)
    mirror = m.tensor((1, 6, 6, 2), name="mirror")
    pads2 = m.tensor((4, 2), "int32", data=[[0, 0], [1, 1], [2, 0], [0, 0]])
    m.op("MIRROR_PAD", [x, pads2], [mirror], "MirrorPadOptions", Mode=0)
    check_model(m.finish([x], [mean, soft, total, mirror]), [normal(1, 4, 4, 2)])


def test_shape_ops():
    m = ModelBuilder()
    x = m.tensor((2, 3, 4, 5), name="x")
    perm = m.tensor((4,), "int32", data=[0, 2, 3, 1])
    t = m.tensor((2, 4, 5, 3))
    m.op("TRANSPOSE", [x, perm], [t])
    begin, end = (
        m.tensor((4,), "int32", data=[1, 0, -4, 0]),
        m.tensor((4,), "int32", data=[2, 4, 5, 2]),
    )
    strides = m.tensor((4,), "int32", data=[1, 2, 2, 1])
    s = m.tensor((2, 2, 2, 2))
    m.op("STRIDED_SLICE", [t, begin, end, strides], [s], "StridedSliceOptions", BeginMask=1,
         ShrinkAxisMask=0, EndMask=0)  # fmt: skip
    s2 = m.tensor((4, 5))
    b2, e2 = m.tensor((4,), "int32", data=[1, 0, 0, 2]), m.tensor((4,), "int32", data=[2, 4, 5, 3])
    one = m.tensor((4,), "int32", data=[1, 1, 1, 1])
    m.op("STRIDED_SLICE", [t, b2, e2, one], [s2], "StridedSliceOptions", ShrinkAxisMask=9)
    shape = m.tensor((2,), "int32", data=[4, 4])
    r = m.tensor((4, 4), name="r")
    m.op("RESHAPE", [s, shape], [r], "ReshapeOptions", NewShape=[4, 4])
    sl_b, sl_s = m.tensor((2,), "int32", data=[1, 1]), m.tensor((2,), "int32", data=[-1, 2])
    sl = m.tensor((3, 2), name="sl")
    m.op("SLICE", [r, sl_b, sl_s], [sl])
    check_model(m.finish([x], [sl, s2, t]), [normal(2, 3, 4, 5)])


@pytest.mark.parametrize("align, half", [(False, False), (True, False), (False, True)])
@pytest.mark.parametrize("op", ["RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR"])
def test_resize(op, align, half):
    size = np.array([7, 5], np.int32)
    options = "ResizeBilinearOptions" if op == "RESIZE_BILINEAR" else "ResizeNearestNeighborOptions"
    model = _single(op, [(1, 3, 4, 2), size], (1, 7, 5, 2), options, AlignCorners=align,
                    HalfPixelCenters=half)  # fmt: skip
    check_model(model, [normal(1, 3, 4, 2)])


def test_depth_space_avg_pool_fully_connected_and_batch_matmul():
    m = ModelBuilder()
    x = m.tensor((1, 4, 6, 8), name="x")
    d2s = m.tensor((1, 8, 12, 2))
    m.op("DEPTH_TO_SPACE", [x], [d2s], "DepthToSpaceOptions", BlockSize=2)
    s2d = m.tensor((1, 2, 3, 32))
    m.op("SPACE_TO_DEPTH", [x], [s2d], "SpaceToDepthOptions", BlockSize=2)
    avg = m.tensor((1, 3, 4, 2))
    m.op("AVERAGE_POOL_2D", [d2s], [avg], "Pool2DOptions", Padding=0, StrideW=3, StrideH=3,
         FilterWidth=3, FilterHeight=3)  # fmt: skip
    w, b = m.tensor((5, 32), data=normal(5, 32)), m.tensor((5,), data=normal(5))
    fc = m.tensor((1, 2, 3, 5), name="fc")
    m.op("FULLY_CONNECTED", [s2d, w, b], [fc], "FullyConnectedOptions", KeepNumDims=True,
         FusedActivationFunction=1)  # fmt: skip
    other = m.tensor((6, 3), data=normal(6, 3))
    mm = m.tensor((1, 4, 8, 3), name="mm")
    m.op("BATCH_MATMUL", [x, other], [mm], "BatchMatMulOptions", AdjX=True, AdjY=False)
    check_model(m.finish([x], [avg, fc, d2s, mm]), [normal(1, 4, 6, 8)])


def test_transpose_conv():
    m = ModelBuilder()
    x = m.tensor((1, 3, 3, 2), name="x")
    shape = m.tensor((4,), "int32", data=[1, 6, 6, 4])
    w = m.tensor((4, 3, 3, 2), data=normal(4, 3, 3, 2))
    b = m.tensor((4,), data=normal(4))
    y = m.tensor((1, 6, 6, 4), name="y")
    m.op("TRANSPOSE_CONV", [shape, w, x, b], [y], "TransposeConvOptions", Padding=0, StrideW=2,
         StrideH=2)  # fmt: skip
    check_model(m.finish([x], [y]), [normal(1, 3, 3, 2)])


def transpose_conv_bias_reference(x, w, b, padding, stride_w, stride_h):
    """MediaPipe's Convolution2DTransposeBias, as its reference kernel computes it (NHWC data,
    OHWI weights): every input pixel scatters its products into the output."""
    n, h, wd, _ = x.shape
    o, kh, kw, _ = w.shape
    trim_h = max(0, kh - (h - 1) % stride_h - 1) if padding == 1 else 0
    trim_w = max(0, kw - (wd - 1) % stride_w - 1) if padding == 1 else 0
    oh, ow = stride_h * (h - 1) + kh - trim_h, stride_w * (wd - 1) + kw - trim_w
    out = np.broadcast_to(b, (n, oh, ow, o)).astype(np.float64)
    for iy in range(h):
        for ix in range(wd):
            for fy in range(kh):
                for fx in range(kw):
                    y, xx = iy * stride_h - trim_h // 2 + fy, ix * stride_w - trim_w // 2 + fx
                    if 0 <= y < oh and 0 <= xx < ow:
                        out[:, y, xx, :] += x[:, iy, ix, :] @ w[:, fy, fx, :].T
    return out.astype(np.float32)


@pytest.mark.parametrize(
    "size, kernel, stride, padding",
    [((4, 5), (2, 2), (2, 2), 1), ((3, 4), (4, 4), (2, 2), 1), ((5, 3), (3, 2), (2, 3), 1),
     ((3, 3), (3, 3), (2, 1), 2), ((2, 5), (4, 3), (3, 2), 2)],
)  # fmt: skip
def test_mediapipe_transpose_conv_bias(size, kernel, stride, padding):
    import struct

    x_data, w, b = normal(1, *size, 3), normal(5, *kernel, 3), normal(5)
    expected = transpose_conv_bias_reference(x_data, w, b, padding, stride[1], stride[0])
    m = ModelBuilder()
    x = m.tensor((1, *size, 3), name="x")
    wt, bt = m.tensor(w.shape, data=w), m.tensor((5,), data=b)
    y = m.tensor(expected.shape, name="y")
    m.op("CUSTOM", [x, wt, bt], [y], custom="Convolution2DTransposeBias",
         custom_options=struct.pack("<iii", padding, stride[1], stride[0]))  # fmt: skip
    mod, params = from_tflite(m.finish([x], [y]))
    (got,) = run_function(mod["main"], [x_data], params)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    lib = tessera.build(mod, target="llvm", params=params)
    gm = GraphModule(lib["default"](tessera.cpu(0)))
    gm.set_input("x", x_data)
    gm.run()
    np.testing.assert_allclose(gm.get_output(0).numpy(), expected, rtol=1e-4, atol=1e-5)


def test_mediapipe_transpose_conv_bias_with_bad_options_is_refused():
    m = ModelBuilder()
    x = m.tensor((1, 3, 3, 2), name="x")
    wt, bt = m.tensor((2, 2, 2, 2), data=normal(2, 2, 2, 2)), m.tensor((2,), data=normal(2))
    y = m.tensor((1, 6, 6, 2), name="y")
    m.op("CUSTOM", [x, wt, bt], [y], custom="Convolution2DTransposeBias",
         custom_options=b"\x01\x00\x00\x00")  # fmt: skip
    with pytest.raises(ValueError, match="12 bytes of options"):
        from_tflite(m.finish([x], [y]))


# -- quantized models ---------------------------------------------------------------------------


def int8_model():
    m = ModelBuilder()
    xf = m.tensor((1, 8, 8, 3), name="x")
    x = m.tensor((1, 8, 8, 3), "int8", scale=0.02, zero_point=-3)
    m.op("QUANTIZE", [xf], [x])
    ws = RNG.uniform(0.005, 0.02, 4).astype(np.float32)
    w = m.tensor((4, 3, 3, 3), "int8", data=RNG.integers(-127, 128, (4, 3, 3, 3)), scale=ws,
                 zero_point=np.zeros(4), axis=0)  # fmt: skip
    b = m.tensor((4,), "int32", data=RNG.integers(-500, 500, 4), scale=ws * 0.02,
                 zero_point=np.zeros(4))  # fmt: skip
    y = m.tensor((1, 4, 4, 4), "int8", scale=0.05, zero_point=2)
    m.op("CONV_2D", [x, w, b], [y], "Conv2DOptions", Padding=0, StrideW=2, StrideH=2,
         FusedActivationFunction=1)  # fmt: skip
    dws = RNG.uniform(0.01, 0.03, 4).astype(np.float32)
    dw = m.tensor((1, 3, 3, 4), "int8", data=RNG.integers(-127, 128, (1, 3, 3, 4)), scale=dws,
                  zero_point=np.zeros(4), axis=3)  # fmt: skip
    dy = m.tensor((1, 4, 4, 4), "int8", scale=0.04, zero_point=-5)
    db = m.tensor((4,), "int32", data=RNG.integers(-50, 50, 4), scale=dws * 0.05)
    m.op("DEPTHWISE_CONV_2D", [y, dw, db], [dy], "DepthwiseConv2DOptions", Padding=0, StrideW=1,
         StrideH=1, DepthMultiplier=1)  # fmt: skip
    y2 = m.tensor((1, 4, 4, 4), "int8", scale=0.04, zero_point=-5)
    m.op("ADD", [y, dy], [y2], "AddOptions", FusedActivationFunction=0)
    # the interpreter's int8 concatenation needs one scale for inputs and output
    cat = m.tensor((1, 4, 4, 8), "int8", scale=0.04, zero_point=-5)
    m.op("CONCATENATION", [y2, dy], [cat], "ConcatenationOptions", Axis=3)
    y3 = m.tensor((1, 2, 2, 8), "int8", scale=0.04, zero_point=-5)
    m.op("AVERAGE_POOL_2D", [cat], [y3], "Pool2DOptions", Padding=1, StrideW=2, StrideH=2,
         FilterWidth=2, FilterHeight=2)  # fmt: skip
    y4 = m.tensor((1, 32), "int8", scale=0.04, zero_point=-5)
    m.op("RESHAPE", [y3, m.tensor((2,), "int32", data=[1, 32])], [y4])
    fw = m.tensor((5, 32), "int8", data=RNG.integers(-127, 128, (5, 32)), scale=0.01)
    fb = m.tensor((5,), "int32", data=RNG.integers(-100, 100, 5), scale=0.0004)
    y5 = m.tensor((1, 5), "int8", scale=0.1, zero_point=5, name="logits")
    m.op("FULLY_CONNECTED", [y4, fw, fb], [y5], "FullyConnectedOptions")
    probs = m.tensor((1, 5), name="probs")
    m.op("DEQUANTIZE", [y5], [probs])
    return m.finish([xf], [probs, y5, cat])


@pytest.mark.parametrize("seed", range(3))
def test_int8_per_channel_model_is_bit_exact(seed):
    x = np.random.default_rng(seed).uniform(-1, 1, (1, 8, 8, 3)).astype(np.float32)
    check_model(int8_model(), [x], steps=0, atol=1e-6)


def test_int8_activations_within_one_step():
    # an int8 input, so that each op sees the interpreter's exact input: a one-step difference
    # before a steep activation would grow by its slope
    m = ModelBuilder()
    x = m.tensor((2, 64), "int8", scale=0.08, zero_point=3, name="x")
    outs = []
    for op, options, fields in [("SOFTMAX", "SoftmaxOptions", {"Beta": 1.0}),
                                ("LOGISTIC", None, {}), ("TANH", None, {})]:  # fmt: skip
        zero = 0 if op == "TANH" else -128
        y = m.tensor((2, 64), "int8", scale=1 / 128 if op == "TANH" else 1 / 256, zero_point=zero)
        m.op(op, [x], [y], options, **fields)
        outs.append(y)
    relu = m.tensor((2, 64), "int8", scale=0.05, zero_point=-128, name="relu6")
    m.op("RELU6", [x], [relu])
    mean = m.tensor((2, 1), "int8", scale=0.01, zero_point=0, name="mean")
    m.op("MEAN", [x, m.tensor((1,), "int32", data=[1])], [mean], "ReducerOptions", KeepDims=True)
    values = np.arange(-128, 128, dtype=np.int8).reshape(2, 128)[:, ::2].copy()
    check_model(m.finish([x], [*outs, relu, mean]), [values], steps=1)


def test_uint8_per_tensor_conv_with_int8_io():
    m = ModelBuilder()
    x = m.tensor((1, 5, 5, 2), "uint8", scale=0.1, zero_point=128, name="x")
    w = m.tensor((3, 3, 3, 2), "uint8", data=RNG.integers(0, 256, (3, 3, 3, 2)), scale=0.02,
                 zero_point=120)  # fmt: skip
    b = m.tensor((3,), "int32", data=RNG.integers(-300, 300, 3), scale=0.002)
    y = m.tensor((1, 5, 5, 3), "uint8", scale=0.25, zero_point=100, name="y")
    m.op("CONV_2D", [x, w, b], [y], "Conv2DOptions", Padding=0, StrideW=1, StrideH=1,
         FusedActivationFunction=3)  # fmt: skip
    q = m.tensor((1, 5, 5, 3), "int8", scale=0.2, zero_point=-20, name="requantized")
    m.op("QUANTIZE", [y], [q])
    mx = m.tensor((1, 3, 3, 3), "int8", scale=0.2, zero_point=-20, name="max")
    m.op("MAX_POOL_2D", [q], [mx], "Pool2DOptions", Padding=0, StrideW=2, StrideH=2,
         FilterWidth=3, FilterHeight=3)  # fmt: skip
    x_value = RNG.integers(0, 256, (1, 5, 5, 2)).astype(np.uint8)
    mod, _, _ = check_model(m.finish([x], [y, q, mx]), [x_value], steps=0)
    assert mod["main"].params[0].type.dtype.numpy_name == "uint8"


# -- compiled, errors ---------------------------------------------------------------------------


def test_compiled_model_matches_the_interpreter():
    x = normal(1, 8, 8, 3)
    buffer = int8_model()
    expected = run_interpreter(buffer, [x])
    mod, params = from_tflite(buffer)
    lib = tessera.build(mod, target="llvm", params=params)
    m = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))
    m.set_input("x", x)
    m.run()
    for i, e in enumerate(expected):
        got = m.get_output(i).numpy()
        if e.dtype == np.int8:
            assert np.abs(got.astype(int) - e).max() <= 1
        else:
            np.testing.assert_allclose(got, e, atol=0.1 + 1e-6)  # one step of the logits


def test_unsupported_ops_are_reported_all_at_once():
    m = ModelBuilder()
    x = m.tensor((1, 4), name="x")
    y, z, u = m.tensor((1, 4)), m.tensor((1, 4)), m.tensor((1, 4))
    m.op("CUSTOM", [x], [y], custom="Landmarks2TransformMatrix")
    m.op("RELU", [y], [z])
    m.op("HASHTABLE_LOOKUP", [z], [u])
    with pytest.raises(UnsupportedOpError) as e:
        from_tflite(m.finish([x], [u]))
    assert [(i, name) for i, name, _ in e.value.ops] == [
        (0, "CUSTOM:Landmarks2TransformMatrix"), (2, "HASHTABLE_LOOKUP")]  # fmt: skip
    assert "2 operator(s) of 2 unsupported type(s)" in str(e.value)


def test_malformed_files_are_clear_errors(tmp_path):
    good = conv_model()
    with pytest.raises(ValueError, match="expected b'TFL3'"):
        from_tflite(b"\0" * 64)
    with pytest.raises(ValueError, match="malformed TFLite flatbuffer|expected b'TFL3'"):
        from_tflite(good[:40])
    with pytest.raises(ValueError, match="cannot read TFLite model"):
        from_tflite(tmp_path / "missing.tflite")
    with pytest.raises(TypeError, match="expects the model's bytes or a path"):
        from_tflite(42)
    path = tmp_path / "model.tflite"
    path.write_bytes(good)
    mod, _ = from_tflite(path)  # a path works as well as bytes
    assert mod["main"].params[0].type.shape == (1, 9, 9, 3)


def _csr(dense, block=1):
    """The stored values and levels of `dense` [R, C] as TFLite's sparse format: rows dense,
    column blocks of `block` CSR (a block is stored when any of its values is non-zero)."""
    rows, cols = dense.shape
    blocks = dense.reshape(rows, cols // block, block)
    segments, indices, values = [0], [], []
    for r in range(rows):
        for k in range(cols // block):
            if blocks[r, k].any():
                indices.append(k)
                values.extend(blocks[r, k])
        segments.append(len(indices))
    levels = [("dense", rows), ("csr", segments, indices)]
    if block == 1:
        return np.array(values, np.float32), ([0, 1], [], levels)
    return np.array(values, np.float32), ([0, 1, 2], [1], [*levels, ("dense", block)])


@pytest.mark.parametrize("block", [1, 4])
def test_densify_of_sparse_weights(block):
    dense = normal(4, 8) * (RNG.uniform(0, 1, (4, 8)) < 0.4)
    dense[2] = 0  # an empty row
    values, sparsity = _csr(dense, block)
    m = ModelBuilder()
    x = m.tensor((4, 8), name="x")
    w = m.tensor((4, 8), data=values, sparsity=sparsity)
    wd = m.tensor((4, 8), name="dense")
    m.op("DENSIFY", [w], [wd])
    y = m.tensor((4, 8), name="y")
    m.op("ADD", [x, wd], [y], "AddOptions")
    mod, params, (got,) = check_model(m.finish([x], [y]), [np.zeros((4, 8), np.float32)])
    np.testing.assert_array_equal(got, dense)
