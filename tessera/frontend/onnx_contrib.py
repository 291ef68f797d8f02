"""ONNX converters for the quantized ops of the `com.microsoft` domain (ONNX Runtime's contrib
ops) that real exports contain, following ORT's kernels:

    QLinearAdd / QLinearMul        float32 of each dequantized side, combined, rounded, saturated
                                   (QLinearAdd of one shape: qnn.add; integers on micro targets)
    QLinearSigmoid / LeakyRelu     a 256-entry table built at compile time (as ORT does), gathered
    QLinearConcat                  each input requantized to the output's scale (copied if equal)
    QLinearGlobalAveragePool       int32 window sums, one float32 requantize
    QLinearAveragePool             int32 window sums (qnn.sum_pool2d), one requantize
    DynamicQuantizeMatMul          DynamicQuantizeLinear + the int8 matmul + scale and bias
    DynamicQuantizeLSTM            onnx_contrib_lstm.py

Values stay uint8/int8 between ops; only the requantize arithmetic is float32, like MLAS. ORT
rounds half to even everywhere (nearbyintf), so most results match it bit for bit; the table
ops can differ by one step where ORT's sigmoid differs from ours in the last float bit.
"""

from __future__ import annotations

import numpy as np

from tessera.frontend import onnx_contrib_float, onnx_contrib_lstm  # noqa: F401 (registers)
from tessera.frontend.onnx_quant import _as, _matmul_acc, _saturate, dynamic_quantize_linear
from tessera.frontend.onnx_registry import NodeError, onnx_op
from tessera.graph.ir import Constant

MS = "com.microsoft"


def _value(v, what: str) -> np.ndarray:
    if not isinstance(v, Constant):
        raise NodeError(f"{what} must be a constant (ORT's quantized contrib ops require it)")
    return v.array


def _zp(v) -> int:
    return 0 if v is None else int(_value(v, "a zero point").reshape(-1)[0])


def _scale(v) -> np.float32:
    return np.float32(_value(v, "a scale").reshape(-1)[0])


def _dequant(b, x, zp):
    """float32(x - zp) (exact: small integers)."""
    xi = _as(b, x, "int32")
    if zp:
        xi = b.call("subtract", xi, b.const(np.int32(zp)))
    return _as(b, xi, "float32")


def _out_dtype(y_zero_point, x) -> str:
    return str((y_zero_point if y_zero_point is not None else x).type.dtype)


def _finish(b, v, zp: int, dtype: str):
    """round half to even of v + zp, saturated (ORT: nearbyintf(v + zp), clamped)."""
    if zp:
        v = b.call("add", v, b.const(np.float32(zp)))
    return _saturate(b, v, dtype)


@onnx_op("QLinearAdd", domain=MS)
def qlinear_add(b, A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale,
                C_zero_point=None):  # fmt: skip
    cs = _scale(C_scale)
    ra, rb = np.float32(_scale(A_scale) / cs), np.float32(_scale(B_scale) / cs)
    if A.type.shape == B.type.shape and A.type.dtype == B.type.dtype:
        # one op (the same float32 arithmetic; the micro target's compute is in integers)
        return b.call("qnn.add", A, B, a_zero_point=_zp(A_zero_point),
                      b_zero_point=_zp(B_zero_point), a_ratio=float(ra), b_ratio=float(rb),
                      zero_point=_zp(C_zero_point), dtype=_out_dtype(C_zero_point, A))  # fmt: skip
    va = b.call("multiply", _dequant(b, A, _zp(A_zero_point)), b.const(ra))
    vb = b.call("multiply", _dequant(b, B, _zp(B_zero_point)), b.const(rb))
    return _finish(b, b.call("add", va, vb), _zp(C_zero_point), _out_dtype(C_zero_point, A))


@onnx_op("QLinearMul", domain=MS)
def qlinear_mul(b, A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale,
                C_zero_point=None):  # fmt: skip
    ratio = np.float32(_scale(A_scale) * _scale(B_scale) / _scale(C_scale))
    prod = b.call("multiply", _dequant(b, A, _zp(A_zero_point)), _dequant(b, B, _zp(B_zero_point)))
    v = b.call("multiply", prod, b.const(ratio))
    return _finish(b, v, _zp(C_zero_point), _out_dtype(C_zero_point, A))


def _lookup(b, X, table: np.ndarray):
    """table[x] for uint8 x, table[x + 128] for int8 x: one gather of a 256-entry constant."""
    idx = _as(b, X, "int32")
    if str(X.type.dtype) == "int8":
        idx = b.call("add", idx, b.const(np.int32(128)))
    return b.call("gather", b.const(table), idx, axis=0)


def _table(X, x_scale, x_zp, y_scale, y_zp, y_dtype, fn) -> np.ndarray:
    """ORT's QLinearLookup table: quantize(fn(dequantize(q))) for each of the 256 values."""
    q = np.arange(256) - (128 if str(X.type.dtype) == "int8" else 0)
    x = (q - x_zp).astype(np.float32) * np.float32(x_scale)
    y = fn(x.astype(np.float32)).astype(np.float32)
    info = np.iinfo(y_dtype)
    return np.clip(np.round(y / np.float32(y_scale)) + y_zp, info.min, info.max).astype(y_dtype)


@onnx_op("QLinearSigmoid", domain=MS)
def qlinear_sigmoid(b, X, X_scale, X_zero_point, Y_scale, Y_zero_point=None):
    dtype = _out_dtype(Y_zero_point, X)
    table = _table(X, _scale(X_scale), _zp(X_zero_point), _scale(Y_scale), _zp(Y_zero_point),
                   dtype, lambda x: 1 / (1 + np.exp(-x)))  # fmt: skip
    return _lookup(b, X, table)


@onnx_op("QLinearLeakyRelu", domain=MS)
def qlinear_leaky_relu(b, X, X_scale, X_zero_point, Y_scale, Y_zero_point=None, *, alpha=0.01):
    dtype = _out_dtype(Y_zero_point, X)
    a = np.float32(alpha)
    table = _table(X, _scale(X_scale), _zp(X_zero_point), _scale(Y_scale), _zp(Y_zero_point),
                   dtype, lambda x: np.where(x >= 0, x, x * a))  # fmt: skip
    return _lookup(b, X, table)


def _requant_to(b, x, xs, xz, ys, yz, dtype):
    """x (scale xs, zero point xz) with the scale and zero point of the output."""
    if xs == ys and xz == yz:
        return x
    v = b.call("multiply", _dequant(b, x, xz), b.const(np.float32(xs / ys)))
    return _finish(b, v, yz, dtype)


@onnx_op("QLinearConcat", domain=MS)
def qlinear_concat(b, Y_scale, Y_zero_point, *inputs, axis):
    if len(inputs) % 3:
        raise NodeError(f"expects (X, scale, zero point) triples, got {len(inputs)} inputs")
    ys, yz = _scale(Y_scale), _zp(Y_zero_point)
    dtype = str(Y_zero_point.type.dtype)
    parts = [
        _requant_to(b, inputs[k], _scale(inputs[k + 1]), _zp(inputs[k + 2]), ys, yz, dtype)
        for k in range(0, len(inputs), 3)
    ]
    return b.call("concatenate", *parts, axis=axis)


@onnx_op("QLinearGlobalAveragePool", domain=MS)
def qlinear_global_average_pool(b, X, x_scale, x_zero_point, y_scale, y_zero_point=None, *,
                                channels_last=0):  # fmt: skip
    shape = b.shape_of(X)
    axes = tuple(range(1, len(shape) - 1)) if channels_last else tuple(range(2, len(shape)))
    count = int(np.prod([shape[a] for a in axes]))
    acc = b.call("sum", _as(b, X, "int32"), axis=axes, keepdims=True)
    xz = _zp(x_zero_point)
    if xz:
        acc = b.call("subtract", acc, b.const(np.int32(xz * count)))
    ratio = np.float32(_scale(x_scale) / (_scale(y_scale) * np.float32(count)))
    return b.call("qnn.requantize", acc, b.const(ratio), zero_point=_zp(y_zero_point),
                  dtype=_out_dtype(y_zero_point, X))  # fmt: skip


@onnx_op("QLinearAveragePool", domain=MS)
def qlinear_average_pool(b, X, x_scale, x_zero_point, y_scale, y_zero_point=None, *,
                         auto_pad="NOTSET", ceil_mode=0, count_include_pad=0, dilations=None,
                         kernel_shape, pads=None, strides=None, channels_last=0):  # fmt: skip
    """int32 window sums of x - zp (qnn.sum_pool2d), one requantize by xs / (ys * count), where
    every window counts the same positions (2-D; no pads, or pads counted); else in float32."""
    from tessera.frontend.onnx_nn import _spatial
    from tessera.topi.nn.pooling import pool_output_size

    if channels_last:
        raise NodeError("QLinearAveragePool: channels_last=1 is not supported")
    strides, dilations, pads = _spatial(b, X, kernel_shape, auto_pad, dilations, pads, strides)
    size, nd = b.shape_of(X)[2:], len(kernel_shape)
    floor = [pool_output_size(size[i], kernel_shape[i], strides[i], pads[i], pads[i + nd],
                              dilations[i], 0) for i in range(nd)]  # fmt: skip
    ceil = [pool_output_size(size[i], kernel_shape[i], strides[i], pads[i], pads[i + nd],
                             dilations[i], ceil_mode) for i in range(nd)]  # fmt: skip
    xz, yz, dtype = _zp(x_zero_point), _zp(y_zero_point), _out_dtype(y_zero_point, X)
    ratio = _scale(x_scale) / _scale(y_scale)
    if nd == 2 and floor == ceil and (count_include_pad or not any(pads)):
        count = int(np.prod(kernel_shape))
        acc = b.call("qnn.sum_pool2d", X, pool_size=tuple(kernel_shape), strides=tuple(strides),
                     padding=tuple(pads), dilation=tuple(dilations), zero_point=xz)  # fmt: skip
        scale = b.const(np.float32(ratio / np.float32(count)))
        return b.call("qnn.requantize", acc, scale, zero_point=yz, dtype=dtype)
    avg = b.call(f"nn.avg_pool{nd}d", _dequant(b, X, xz), pool_size=tuple(kernel_shape),
                 strides=tuple(strides), padding=tuple(pads), dilation=tuple(dilations),
                 ceil_mode=bool(ceil_mode), count_include_pad=bool(count_include_pad))  # fmt: skip
    return _finish(b, b.call("multiply", avg, b.const(np.float32(ratio))), yz, dtype)


@onnx_op("DynamicQuantizeMatMul", domain=MS)
def dynamic_quantize_matmul(b, A, B, b_scale, b_zero_point=None, bias=None):
    """float Y = (quantize(A) - za) @ (B - zb) * (a_scale * b_scale) + bias (ORT's order)."""
    aq, a_scale, a_zp = dynamic_quantize_linear(b, A)
    acc = _matmul_acc(b, aq, B, a_zp, b_zero_point)
    scale = b.call("multiply", a_scale, _as(b, b_scale, "float32"))
    y = b.call("multiply", _as(b, acc, "float32"), scale)
    return y if bias is None else b.call("add", y, bias)
