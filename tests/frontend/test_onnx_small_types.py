"""ONNX models on the small storage types (float8, float4, int4, int2): inputs, initializers
and outputs of these types, moved by injective ops and converted by Cast / QuantizeLinear /
DequantizeLinear, compiled on llvm and c and compared with onnx.reference."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from tessera.frontend import onnx_backend

TARGETS = ["llvm", "c"]


def _model(nodes, inputs, outputs, inits=(), opset=23):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _check(model, feeds, target):
    want = ReferenceEvaluator(model).run(None, feeds)
    got = onnx_backend.prepare(model, target=target).run(feeds)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        nan = np.isnan(g.astype(np.float64)) & np.isnan(w.astype(np.float64))  # any NaN
        bits = g.view(np.uint8).reshape(*g.shape, -1) == w.view(np.uint8).reshape(*w.shape, -1)
        assert np.all(bits.all(axis=-1) | nan), (g, w)


@pytest.mark.parametrize("target", TARGETS)
def test_float8_moves_through_injective_ops(target):
    """Transpose, Reshape, Concat with an initializer, Gather, Slice: bytes move unchanged."""
    f8 = TensorProto.FLOAT8E4M3FN
    x = np.arange(24, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).reshape(2, 3, 4)
    w = (np.arange(8, dtype=np.uint8) + 100).view(ml_dtypes.float8_e4m3fn).reshape(2, 4)
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2]),
        helper.make_node("Reshape", ["t", "shape"], ["r"]),
        helper.make_node("Concat", ["r", "w"], ["c"], axis=0),
        helper.make_node("Gather", ["c", "idx"], ["g"], axis=0),
        helper.make_node("Cast", ["g"], ["y"], to=TensorProto.FLOAT),
    ]
    inits = [
        numpy_helper.from_array(np.array([6, 4], np.int64), "shape"),
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array(np.array([7, 0, 3], np.int64), "idx"),
    ]
    model = _model(
        nodes,
        [helper.make_tensor_value_info("x", f8, x.shape)],
        [
            helper.make_tensor_value_info("g", f8, (3, 4)),
            helper.make_tensor_value_info("y", TensorProto.FLOAT, (3, 4)),
        ],
        inits,
    )
    _check(model, {"x": x}, target)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(
    ("to", "saturate"),
    [(TensorProto.FLOAT8E5M2, 1), (TensorProto.FLOAT8E5M2, 0), (TensorProto.FLOAT8E4M3FNUZ, 0),
     (TensorProto.FLOAT4E2M1, 1), (TensorProto.INT4, 1), (TensorProto.UINT2, 1)],
)  # fmt: skip
def test_cast_round_trip(to, saturate, target):
    x = np.array([0.0, -0.0, 0.3, -1.5, 2.5, 1e5, -1e5, np.inf, 7.0, -9.0], np.float32)
    if to in (TensorProto.INT4, TensorProto.UINT2):
        # float -> int out of the int's range is undefined (onnx.reference's answer goes through
        # a numpy cast that differs between CPUs; topi/test_cast_small.py tests our wrapping)
        lo, hi = (-8, 7) if to == TensorProto.INT4 else (0, 3)
        x = x[np.isfinite(x) & (np.trunc(x) >= lo) & (np.trunc(x) <= hi)]
    nodes = [
        helper.make_node("Cast", ["x"], ["s"], to=to, saturate=saturate),
        helper.make_node("Cast", ["s"], ["y"], to=TensorProto.FLOAT16),
    ]
    model = _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [
            helper.make_tensor_value_info("s", to, x.shape),
            helper.make_tensor_value_info("y", TensorProto.FLOAT16, x.shape),
        ],
    )
    _check(model, {"x": x}, target)


@pytest.mark.parametrize("target", TARGETS)
def test_quantize_and_dequantize_int4_per_axis(target):
    x = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)
    scale = np.array([0.5, 0.25, 0.1], np.float32)
    zp = np.array([1, -2, 0], ml_dtypes.int4)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "scale", "zp"], ["q"], axis=0),
        helper.make_node("DequantizeLinear", ["q", "scale", "zp"], ["y"], axis=0),
    ]
    inits = [numpy_helper.from_array(scale, "scale"), numpy_helper.from_array(zp, "zp")]
    model = _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [
            helper.make_tensor_value_info("q", TensorProto.INT4, x.shape),
            helper.make_tensor_value_info("y", TensorProto.FLOAT, x.shape),
        ],
        inits,
    )
    _check(model, {"x": x}, target)


def test_arithmetic_on_float8_is_a_clear_error():
    f8 = TensorProto.FLOAT8E4M3FN
    model = _model(
        [helper.make_node("Add", ["x", "x"], ["y"])],
        [helper.make_tensor_value_info("x", f8, (4,))],
        [helper.make_tensor_value_info("y", f8, (4,))],
    )
    x = np.zeros(4, ml_dtypes.float8_e4m3fn)
    with pytest.raises(Exception, match="storage type"):
        onnx_backend.prepare(model).run({"x": x})


_E8M0_VALUES = np.array(
    [1.0, 3.0, 0.75, 1.5, 1.25, 1.75, -6.0, 0.0, 2.0**-127, 2.0**-130, 3e38, 2.0**127 * 1.5,
     np.inf, np.nan, 1e-45, 1.0 + 2.0**-23, 1.0 + 2.0**-22 + 2.0**-23],
    np.float32,
)  # fmt: skip


@pytest.mark.parametrize("round_mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [0, 1])
def test_float8e8m0_cast_rounds_and_saturates(round_mode, saturate):
    """float32 -> float8e8m0 by each rounding mode, saturating or not (against onnx's own
    numpy_helper.to_float8e8m0), and back to float32 and float16 (llvm)."""
    e8 = TensorProto.FLOAT8E8M0
    x = np.concatenate([_E8M0_VALUES, np.random.default_rng(3).standard_normal(40) * 1e3])
    x = x.astype(np.float32)
    nodes = [
        helper.make_node("Cast", ["x"], ["y"], to=e8, saturate=saturate, round_mode=round_mode),
        helper.make_node("Cast", ["y"], ["z"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["y"], ["h"], to=TensorProto.FLOAT16),
    ]
    model = _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", e8, x.shape),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, x.shape),
         helper.make_tensor_value_info("h", TensorProto.FLOAT16, x.shape)],
        opset=24,
    )  # fmt: skip
    y, z, h = onnx_backend.prepare(model, target="llvm").run({"x": x})
    want = numpy_helper.to_float8e8m0(x, saturate=bool(saturate), round_mode=round_mode)
    np.testing.assert_array_equal(y.view(np.uint8), want.view(np.uint8))
    exact = want.astype(np.float32)
    np.testing.assert_array_equal(z, exact)  # NaN where the byte is 255
    with np.errstate(over="ignore"):  # 2^16 and up are inf in float16
        np.testing.assert_array_equal(h, exact.astype(np.float16))


def test_float8e8m0_bad_round_mode_is_a_clear_error():
    node = helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT8E8M0, round_mode="odd")
    model = _model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT8E8M0, [2])], opset=24)
    with pytest.raises(ValueError, match="round_mode must be one of"):
        onnx_backend.prepare(model).run({"x": np.ones(2, np.float32)})
