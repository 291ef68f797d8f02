"""Quantized ONNX ops compiled on the int8 kernels (qnn.conv2d / qnn.dense / qnn.requantize),
bit for bit against ONNX Runtime: QLinearConv (1x1, 3x3, strided, grouped, depthwise, per
channel, int8 and uint8 data, uint8 weights), QLinearMatMul, MatMulInteger (constant and
runtime zero points), ConvInteger, DynamicQuantizeLinear feeding MatMulInteger."""

import numpy as np
import pytest
from onnx import helper

import tessera
from tessera.frontend import from_onnx
from tessera.frontend.testing import make_model, run_int8_reference
from tessera.runtime import GraphModule, cpu
from tessera.transform import PassContext

pytest.importorskip("onnxruntime")
R = np.random.default_rng(11)
N = helper.make_node


def run_tessera(model, feeds, target="llvm"):
    mod, params = from_onnx(model)
    with PassContext(opt_level=3):
        lib = tessera.build(mod, target=target, params=params)
    m = GraphModule(lib["default"](cpu(0)))
    for k, v in feeds.items():
        m.set_input(k, v)
    m.run()
    return [m.get_output(i).numpy() for i in range(m.get_num_outputs())], mod


def ops_of(mod) -> set[str]:
    return {c.op.name for c in mod["main"].body}


def _q(shape, dtype):
    lo, hi = (0, 256) if dtype == "uint8" else (-128, 128)
    return R.integers(lo, hi, shape).astype(dtype)


def qlinear_conv_model(x, w, *, xdt, wdt, per_channel, bias, **attrs):
    oc = w.shape[0]
    w_scale = (R.random(oc if per_channel else ()) * 0.01 + 0.001).astype(np.float32)
    inits = {
        "xs": np.float32(0.02),
        "xz": np.array(3 if xdt == "uint8" else -5, xdt),
        "w": w,
        "ws": w_scale,
        "wz": np.full(oc if per_channel else (), 128 if wdt == "uint8" else 0, wdt),
        "ys": np.float32(0.05),
        "yz": np.array(120 if xdt == "uint8" else 2, xdt),
    }
    inputs = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"]
    if bias:
        inits["B"] = R.integers(-5000, 5000, oc).astype(np.int32)
        inputs.append("B")
    node = N("QLinearConv", inputs, ["y"], **attrs)
    return make_model([node], {"x": x}, ["y"], inits, opset=13)


CONVS = [  # (c, h, w, oc, k, attrs)
    (8, 9, 9, 16, 3, {"pads": [1, 1, 1, 1]}),
    (16, 7, 7, 24, 1, {}),
    (6, 10, 10, 8, 3, {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    (12, 8, 8, 12, 3, {"group": 12, "pads": [1, 1, 1, 1]}),  # depthwise
    (16, 6, 6, 32, 3, {"group": 2, "pads": [0, 1, 1, 0], "dilations": [1, 2]}),
]


DTYPES = [("uint8", "int8", True), ("int8", "int8", False), ("uint8", "uint8", False)]
# every shape with uint8 data and per-channel int8 weights; the other dtypes on two shapes
# by default, on all under -m slow
CONV_RUNS = [
    pytest.param(
        case, *dt, marks=[] if dt == DTYPES[0] or case in CONVS[1:3] else [pytest.mark.slow]
    )
    for case in CONVS
    for dt in DTYPES
]


@pytest.mark.parametrize("case,xdt,wdt,per_channel", CONV_RUNS)
def test_qlinear_conv_bit_exact(case, xdt, wdt, per_channel):
    c, h, w, oc, k, attrs = case
    g = attrs.get("group", 1)
    x = _q((1, c, h, w), xdt)
    wt = _q((oc, c // g, k, k), wdt)
    model = qlinear_conv_model(
        x, wt, xdt=xdt, wdt=wdt, per_channel=per_channel, bias=per_channel, **attrs
    )
    (got,), mod = run_tessera(model, {"x": x})
    (want,) = run_int8_reference(model, {"x": x})
    np.testing.assert_array_equal(got, want)


def test_qlinear_conv_runs_on_qnn_conv2d():
    x, wt = _q((1, 8, 5, 5), "uint8"), _q((8, 8, 3, 3), "int8")
    model = qlinear_conv_model(x, wt, xdt="uint8", wdt="int8", per_channel=True, bias=True)
    mod, _ = from_onnx(model)
    names = {c.op.name for c in mod["main"].body}
    assert "qnn.conv2d" in names and "qnn.requantize" in names and "nn.conv2d" not in names


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_qlinear_matmul_bit_exact(target):
    a, b = _q((3, 37), "uint8"), _q((37, 20), "int8")
    inits = {
        "as": np.float32(0.03),
        "az": np.uint8(100),
        "b": b,
        "bs": (R.random(20) * 0.02).astype(np.float32),
        "bz": np.zeros(20, np.int8),
        "ys": np.float32(0.1),
        "yz": np.uint8(128),
    }
    node = N("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])
    model = make_model([node], {"a": a}, ["y"], inits, opset=13)
    (got,), _ = run_tessera(model, {"a": a}, target)
    np.testing.assert_array_equal(got, run_int8_reference(model, {"a": a})[0])


@pytest.mark.parametrize(
    "adt,bdt,az,bz,bshape",
    [("uint8", "int8", 7, None, (2, 9, 5)), ("uint8", "uint8", 3, 200, (1, 9, 17)),
     ("int8", "int8", -4, 5, (2, 9, 5)), ("uint8", "uint8", "runtime", "runtime", (2, 9, 5))],
)  # fmt: skip
def test_matmul_integer_runtime_operands(adt, bdt, az, bz, bshape):
    """Both operands at run time (attention): qnn.batch_matmul with the zero points compensated,
    constant or computed at run time (DynamicQuantizeLinear)."""
    a, b = _q((2, 4, 9), adt), _q(bshape, bdt)
    feeds, inits, nodes = {"a": a, "b": b}, {}, []
    ins = ["a", "b", "az", "bz"]
    if az == "runtime":
        af, bf = (R.standard_normal(v.shape).astype(np.float32) for v in (a, b))
        feeds = {"af": af, "bf": bf}
        nodes = [N("DynamicQuantizeLinear", ["af"], ["a", "as", "az"]),
                 N("DynamicQuantizeLinear", ["bf"], ["b", "bs", "bz"])]  # fmt: skip
    else:
        inits = {"az": np.array(az, adt)}
        if bz is None:
            ins = ins[:3]
        else:
            inits["bz"] = np.array(bz, bdt)
    model = make_model([*nodes, N("MatMulInteger", ins, ["y"])], feeds, ["y"], inits, opset=13)
    (got,), mod = run_tessera(model, feeds)
    assert "qnn.batch_matmul" in ops_of(from_onnx(model)[0])
    np.testing.assert_array_equal(got, run_int8_reference(model, feeds)[0])


def test_matmul_integer_batches_share_one_weight():
    """A batched a times one 2-D b given at run time (qnn.batch_matmul): the batches of a are
    rows of one product (batch 1), b read once; bit-exact with ORT."""
    a, b = _q((3, 2, 9), "uint8"), _q((9, 17), "uint8")
    inits = {"az": np.array(7, "uint8"), "bz": np.array(100, "uint8")}
    model = make_model([N("MatMulInteger", ["a", "b", "az", "bz"], ["y"])], {"a": a, "b": b},
                       ["y"], inits, opset=13)  # fmt: skip
    mod = from_onnx(model)[0]
    calls = [c for c in mod["main"].body if c.op.name == "qnn.batch_matmul"]
    assert [tuple(c.inputs[0].type.shape) for c in calls] == [(1, 6, 9)]
    (got,), _ = run_tessera(model, {"a": a, "b": b})
    np.testing.assert_array_equal(got, run_int8_reference(model, {"a": a, "b": b})[0])


@pytest.mark.parametrize("adt, runtime_zp", [("uint8", False), ("int8", False), ("uint8", True)])
def test_matmul_integer_wide_constant_weight_on_qnn_dense(adt, runtime_zp):
    """A constant uint8 b whose zero point puts w - zb outside int8 (a dynamically quantized
    model's character projection: zero point 119, weights up to 255) runs on qnn.dense as the
    int8 weight w - 128 plus a shift per column times each row's sum (Note [wide conv
    weights]); a batched a stays rows of the one product. Bit-exact with the ONNX definition,
    with a constant zero point and with DynamicQuantizeLinear's."""
    b = _q((40, 17), "uint8")
    b[0, :] = 255  # 255 - 119 = 136: not an int8
    inits = {"b": b, "bz": np.array(119, "uint8")}
    if runtime_zp:
        x = R.standard_normal((3, 2, 40)).astype(np.float32)
        nodes = [N("DynamicQuantizeLinear", ["x"], ["a", "as", "az"])]
        feeds = {"x": x}
    else:
        nodes, feeds = [], {"a": _q((3, 2, 40), adt)}
        inits["az"] = np.array(-5 if adt == "int8" else 7, adt)
    nodes.append(N("MatMulInteger", ["a", "b", "az", "bz"], ["y"]))
    model = make_model(nodes, feeds, ["y"], inits, opset=13)
    mod = from_onnx(model)[0]
    ops = [c.op.name for c in mod["main"].body]
    assert "qnn.dense" in ops and "qnn.batch_matmul" not in ops
    (got,), _ = run_tessera(model, feeds)
    np.testing.assert_array_equal(got, run_int8_reference(model, feeds)[0])


@pytest.mark.parametrize("past", [0, 2])
def test_matmul_integer_bounded_weight_pairs(past):
    """A constant weight whose pairs keep |w0| + |w1| <= 128 runs on qnn.dense(bounded=True)
    (vpmaddubsw without VNNI, Note [bounded pairs]); with `past` pairs beyond the bound, as a
    bounded main product plus a residual product over the K indices that hold the rest (a
    gather of those columns of a). Bit-exact with the ONNX definition either way, the data at
    its extremes included."""
    k, n = 40, 24
    first = R.integers(-64, 65, (k // 2, n))
    w = np.zeros((k, n), np.int64)
    w[0::2], w[1::2] = first, 128 - np.abs(first)  # every pair exactly at the bound
    w[1::2] *= np.where(R.random((k // 2, n)) < 0.5, -1, 1)
    w[10, 3], w[11, 3] = 100, 100  # past the bound at k = 11
    w[30, 5], w[31, 5] = -128, -1  # 129 at k = 31
    if not past:
        w[11, 3], w[31, 5] = 28, 0
    x = R.standard_normal((3, 2, k)).astype(np.float32)
    x[0, 0, 0] = -5.0  # the quantized data meets 0, and 255 where the pairs are largest
    x[0, 0, [10, 11, 30, 31]] = 5.0  # (a pair past the bound would saturate vpmaddubsw here)
    nodes = [N("DynamicQuantizeLinear", ["x"], ["a", "as", "az"]),
             N("MatMulInteger", ["a", "w", "az"], ["y"])]  # fmt: skip
    model = make_model(nodes, {"x": x}, ["y"], {"w": w.astype(np.int8)}, opset=13)
    mod = from_onnx(model)[0]
    dense = [c for c in mod["main"].body if c.op.name == "qnn.dense"]
    assert dense[0].attrs["bounded"] and len(dense) == (2 if past else 1)
    assert ("gather" in ops_of(mod)) == bool(past)
    (got,), _ = run_tessera(model, {"x": x})
    np.testing.assert_array_equal(got, run_int8_reference(model, {"x": x})[0])


def test_dynamic_quantize_matmul_integer():
    """DynamicQuantizeLinear -> MatMulInteger with a runtime zero point (ORT's dynamic path)."""
    x = R.standard_normal((4, 33)).astype(np.float32)
    w = _q((33, 17), "int8")
    nodes = [
        N("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
        N("MatMulInteger", ["xq", "w", "xz"], ["y"]),
    ]
    model = make_model(nodes, {"x": x}, ["y", "xs", "xz"], {"w": w}, opset=13)
    got, mod = run_tessera(model, {"x": x})
    want = run_int8_reference(model, {"x": x})
    for g, e in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, e)


def test_conv_integer_bit_exact():
    x, wt = _q((1, 4, 6, 6), "uint8"), _q((8, 4, 3, 3), "int8")
    node = N("ConvInteger", ["x", "w", "xz"], ["y"], pads=[1, 1, 1, 1])
    model = make_model([node], {"x": x}, ["y"], {"w": wt, "xz": np.uint8(9)}, opset=13)
    (got,), mod = run_tessera(model, {"x": x})
    np.testing.assert_array_equal(got, run_int8_reference(model, {"x": x})[0])


@pytest.mark.parametrize(
    "xdt, wdt, wz, group, pads, strides",
    [
        ("uint8", "uint8", [91], 1, [1, 1, 1, 1], [2, 2]),  # ORT's dynamic quantization: wide
        ("uint8", "uint8", [200], 2, [0, 1, 2, 1], [1, 1]),  # grouped, uneven pads
        ("uint8", "uint8", [0], 1, [1, 1, 1, 1], [1, 1]),  # no zero point: w up to 255
        ("int8", "int8", [-100], 1, [1, 1, 1, 1], [1, 2]),  # int8 weights minus -100: wide
        ("uint8", "uint8", [128], 4, [1, 1, 1, 1], [1, 1]),  # fits int8: one conv
    ],
)
def test_dynamic_quantize_conv_integer_wide_weights(xdt, wdt, wz, group, pads, strides):
    """DynamicQuantizeLinear (zero point at run time) -> ConvInteger whose weight minus its zero
    point leaves int8 (Note [wide conv weights]): on qnn.conv2d, bit-exact with ORT."""
    cin, cout = 8, 8
    x = (R.standard_normal((1, cin, 7, 9)) * 3 + 1).astype(np.float32)
    w = _q((cout, cin // group, 3, 3), wdt)
    zw = np.array(wz, wdt)  # ORT's ConvInteger takes one weight zero point only
    nodes = [N("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"])]
    xq = "xq"
    if xdt == "int8":  # shift the uint8 data into int8 (its zero point with it)
        nodes += [
            N("Cast", ["xq"], ["x16"], to=6),
            N("Sub", ["x16", "c128"], ["x16s"]),
            N("Cast", ["x16s"], ["xq8"], to=3),
            N("Cast", ["xz"], ["z16"], to=6),
            N("Sub", ["z16", "c128"], ["z16s"]),
            N("Cast", ["z16s"], ["xz8"], to=3),
        ]
        xq, xz = "xq8", "xz8"
    else:
        xz = "xz"
    nodes.append(N("ConvInteger", [xq, "w", xz, "wz"], ["y"], pads=pads, strides=strides,
                   group=group))  # fmt: skip
    inits = {"w": w, "wz": zw, "c128": np.int32(128)}
    model = make_model(nodes, {"x": x}, ["y"], inits, opset=13)
    (got,), mod = run_tessera(model, {"x": x})
    np.testing.assert_array_equal(got, run_int8_reference(model, {"x": x})[0])
    assert "qnn.conv2d" in ops_of(mod) and "nn.conv2d" not in ops_of(mod)
