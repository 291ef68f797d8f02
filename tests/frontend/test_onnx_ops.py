"""Per-op ONNX converter tests: one node each, tessera's interpreter against ONNX Runtime."""
# ruff: noqa: E501

import numpy as np
import pytest

from tessera.frontend.testing import check_node

R = np.random.default_rng(0)


def f32(*shape):
    return R.standard_normal(shape).astype(np.float32)


def pos(*shape):
    return R.uniform(0.5, 2.0, shape).astype(np.float32)


UNARY = ["Abs", "Ceil", "Cos", "Cosh", "Erf", "Exp", "Floor", "Neg", "Round", "Sigmoid",
         "Sign", "Sin", "Sinh", "Tan", "Tanh", "Atan", "Asinh", "Relu", "Softplus", "Softsign",
         "HardSwish", "Identity"]  # fmt: skip


@pytest.mark.parametrize("op", UNARY)
def test_unary(op):
    check_node(op, {"x": f32(2, 3, 4)})


@pytest.mark.parametrize("op", ["Log", "Sqrt", "Reciprocal", "Acosh"])
def test_unary_positive(op):
    check_node(op, {"x": pos(3, 4) + (1.0 if op == "Acosh" else 0.0)})


@pytest.mark.parametrize("op", ["Asin", "Acos", "Atanh"])
def test_unary_unit_interval(op):
    check_node(op, {"x": R.uniform(-0.9, 0.9, (5,)).astype(np.float32)})


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Equal", "Less", "Greater",
                                "LessOrEqual", "GreaterOrEqual"])  # fmt: skip
@pytest.mark.parametrize("shapes", [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (4,)), ((2, 1, 4), (3, 1))])
def test_binary_broadcast(op, shapes):
    check_node(op, {"a": f32(*shapes[0]), "b": pos(*shapes[1])})


def test_integer_div_truncates_and_mod():
    a = np.array([-7, 7, -8, 5, 0], np.int64)
    b = np.array([2, -2, 3, 5, 3], np.int64)
    check_node("Div", {"a": a, "b": b})
    check_node("Mod", {"a": a, "b": b})
    check_node("Mod", {"a": f32(5), "b": pos(5)}, {"fmod": 1})


def test_pow_and_logic():
    check_node("Pow", {"a": pos(3, 4), "b": f32(4)})
    a, b = R.random((3, 4)) > 0.5, R.random((4,)) > 0.5
    for op in ("And", "Or", "Xor"):
        check_node(op, {"a": a, "b": b})
    check_node("Not", {"a": a})


@pytest.mark.parametrize("op", ["Sum", "Max", "Min", "Mean"])
def test_variadic(op):
    check_node(op, {"a": f32(2, 3), "b": f32(3), "c": f32(1, 3)})


@pytest.mark.parametrize(
    "op,attrs",
    [("LeakyRelu", {"alpha": 0.2}), ("LeakyRelu", {}), ("Elu", {}), ("Elu", {"alpha": 0.5}),
     ("Selu", {}), ("Celu", {"alpha": 2.0}), ("ThresholdedRelu", {"alpha": 0.3}),
     ("HardSigmoid", {}), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}), ("Shrink", {"lambd": 0.3, "bias": 0.1})],
)  # fmt: skip
def test_activations(op, attrs):
    check_node(op, {"x": f32(3, 5)}, attrs)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu(approximate):
    check_node("Gelu", {"x": f32(4, 6)}, {"approximate": approximate}, opset=20)


def test_prelu_where_cast():
    check_node("PRelu", {"x": f32(2, 3, 4, 4), "const_s": f32(3, 1, 1)})
    check_node("Where", {"c": R.random((3, 4)) > 0.5, "a": f32(3, 4), "b": f32(4)})
    check_node("Cast", {"x": f32(3, 4) * 10}, {"to": 7})
    check_node("Cast", {"x": R.integers(-5, 5, (6,))}, {"to": 1})
    check_node("Cast", {"x": f32(6)}, {"to": 9})


@pytest.mark.parametrize("opset", [7, 11, 13])
def test_clip_versions(opset):
    x = f32(3, 4) * 3
    if opset < 11:
        check_node("Clip", {"x": x}, {"min": -1.0, "max": 0.5}, opset=opset)
        check_node("Clip", {"x": x}, {"max": 0.5}, opset=opset)
    else:
        m, M = np.array(-1.0, np.float32), np.array(0.5, np.float32)
        check_node("Clip", {"x": x, "const_min": m, "const_max": M}, opset=opset)
        check_node("Clip", {"x": x, "lo": m}, opset=opset)  # a bound known only at run time


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
def test_softmax_versions(op, opset):
    # opset 11 flattens at axis to 2-D; 13 works along one axis: different results for axis=1.
    check_node(op, {"x": f32(2, 3, 4)}, {"axis": 1}, opset=opset)
    check_node(op, {"x": f32(2, 3, 4)}, {}, opset=opset)


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                                "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare",
                                "ReduceSum"])  # fmt: skip
@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize("axes,keepdims", [((1,), 1), ((0, 2), 0), (None, 1)])
def test_reductions(op, opset, axes, keepdims):
    x = pos(2, 3, 4)
    attrs = {"keepdims": keepdims}
    inputs = {"x": x}
    axes_as_input = opset >= 18 or (op == "ReduceSum" and opset >= 13)
    if axes is not None and axes_as_input:
        inputs["const_axes"] = np.array(axes, np.int64)
    elif axes is not None:
        attrs["axes"] = list(axes)
    check_node(op, inputs, attrs, opset=opset)


def test_reduce_noop_with_empty_axes():
    check_node("ReduceSum", {"x": f32(2, 3)}, {"noop_with_empty_axes": 1}, opset=13)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize(
    "attrs", [{}, {"axis": 1, "keepdims": 0}, {"axis": -1, "select_last_index": 1}]
)
def test_arg_reductions(op, attrs):
    x = R.integers(0, 3, (3, 4, 5)).astype(np.float32)  # ties exercise select_last_index
    check_node(op, {"x": x}, attrs, opset=13)


def test_cumsum_topk_einsum():
    for attrs in ({}, {"exclusive": 1}, {"reverse": 1}, {"exclusive": 1, "reverse": 1}):
        check_node("CumSum", {"x": f32(3, 4), "const_axis": np.array(1, np.int64)}, attrs)
    check_node("TopK", {"x": f32(3, 6), "const_k": np.array([2], np.int64)}, {}, n_outputs=2)
    check_node("TopK", {"x": f32(3, 6), "const_k": np.array([3], np.int64)},
               {"axis": 0 - 2, "largest": 0}, n_outputs=2)  # fmt: skip
    check_node("TopK", {"x": f32(3, 6)}, {"k": 2}, n_outputs=2, opset=9)
    check_node("Einsum", {"a": f32(2, 3, 4), "b": f32(2, 4, 5)}, {"equation": "bij,bjk->bik"})
    check_node("Einsum", {"a": f32(3, 3)}, {"equation": "ii->i"})
    check_node("Einsum", {"a": f32(2, 3, 4), "b": f32(4, 5)}, {"equation": "...j,jk->...k"})


@pytest.mark.parametrize(
    "attrs,xs,ws",
    [({"pads": [1, 1, 1, 1]}, (1, 4, 9, 9), (6, 4, 3, 3)),
     ({"strides": [2, 2], "dilations": [2, 1], "pads": [2, 1, 0, 1]}, (2, 4, 11, 10), (6, 4, 3, 3)),
     ({"group": 2}, (1, 4, 7, 7), (6, 2, 3, 3)),
     ({"group": 4, "auto_pad": "SAME_UPPER", "strides": [2, 2]}, (1, 4, 8, 7), (4, 1, 3, 3)),
     ({"auto_pad": "SAME_LOWER"}, (1, 2, 6, 6), (3, 2, 4, 4)),
     ({"auto_pad": "VALID"}, (1, 2, 6, 6), (3, 2, 2, 2)),
     ({"strides": [2]}, (1, 3, 10), (4, 3, 3)),
     ({"pads": [1, 0, 1, 1, 0, 1]}, (1, 2, 4, 5, 4), (3, 2, 3, 2, 3))],
)  # fmt: skip
def test_conv(attrs, xs, ws):
    inputs = {"x": f32(*xs), "const_w": f32(*ws), "const_b": f32(ws[0])}
    check_node("Conv", inputs, attrs)


@pytest.mark.parametrize(
    "attrs,xs,ws",
    [({"strides": [2, 2]}, (1, 4, 5, 5), (4, 3, 3, 3)),
     ({"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}, (1, 4, 5, 5), (4, 3, 3, 3)),
     ({"strides": [2, 2], "group": 2, "dilations": [2, 1]}, (2, 4, 4, 5), (4, 1, 3, 2)),
     ({"strides": [2, 2], "output_shape": [10, 10]}, (1, 2, 5, 5), (2, 3, 3, 3)),
     ({"strides": [2, 2], "auto_pad": "SAME_UPPER"}, (1, 2, 5, 5), (2, 3, 3, 3)),
     ({"strides": [3]}, (1, 2, 5), (2, 3, 4))],
)  # fmt: skip
def test_conv_transpose(attrs, xs, ws):
    check_node(
        "ConvTranspose",
        {"x": f32(*xs), "const_w": f32(*ws), "const_b": f32(ws[1] * attrs.get("group", 1))},
        attrs,
    )


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize(
    "attrs",
    [{"kernel_shape": [2, 2], "strides": [2, 2]},
     {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
     {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
     {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 1], "ceil_mode": 1},
     {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]},
     {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}],
)  # fmt: skip
def test_pool(op, attrs):
    if op == "MaxPool":
        attrs = {k: v for k, v in attrs.items() if k != "count_include_pad"}
    check_node(op, {"x": f32(1, 3, 9, 8)}, attrs)


def test_pool_dilation_and_global():
    check_node("MaxPool", {"x": f32(1, 2, 9, 9)}, {"kernel_shape": [2, 2], "dilations": [2, 2]})
    check_node("GlobalAveragePool", {"x": f32(2, 3, 5, 4)})
    check_node("GlobalMaxPool", {"x": f32(2, 3, 5, 4)})
    check_node("MaxPool", {"x": f32(1, 2, 9)}, {"kernel_shape": [3], "strides": [2]})


@pytest.mark.parametrize(
    "attrs,a,b",
    [({}, (3, 4), (4, 5)), ({"transA": 1}, (4, 3), (4, 5)), ({"transB": 1}, (3, 4), (5, 4)),
     ({"alpha": 0.5, "beta": 2.0}, (3, 4), (4, 5))],
)  # fmt: skip
def test_gemm(attrs, a, b):
    check_node("Gemm", {"a": f32(*a), "const_b": f32(*b), "const_c": f32(5)}, attrs)


@pytest.mark.parametrize("a,b", [((2, 3, 4), (4, 5)), ((2, 1, 3, 4), (5, 4, 2)), ((4,), (2, 4, 3)),
                                 ((3, 4), (4,))])  # fmt: skip
def test_matmul(a, b):
    check_node("MatMul", {"a": f32(*a), "b": f32(*b)})


def test_normalizations():
    x = f32(2, 3, 4, 5)
    check_node("BatchNormalization", {"x": x, "const_s": f32(3), "const_b": f32(3),
                                      "const_m": f32(3), "const_v": pos(3)}, {"epsilon": 1e-3})  # fmt: skip
    check_node("InstanceNormalization", {"x": x, "const_s": f32(3), "const_b": f32(3)})
    check_node("LayerNormalization", {"x": x, "const_s": f32(5), "const_b": f32(5)})
    check_node("LayerNormalization", {"x": x, "const_s": f32(4, 5)}, {"axis": -2, "epsilon": 1e-3})
    check_node("LRN", {"x": x}, {"size": 3})
    check_node("LRN", {"x": f32(1, 6, 3, 3)}, {"size": 5, "alpha": 0.01, "beta": 0.5, "bias": 2.0})


def test_dropout_is_identity():
    check_node("Dropout", {"x": f32(3, 4)}, {"ratio": 0.3}, opset=10)
    check_node("Dropout", {"x": f32(3, 4)}, opset=13, n_outputs=2)
