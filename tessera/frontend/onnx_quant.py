"""ONNX converters for the integer quantization ops: QuantizeLinear, DequantizeLinear,
DynamicQuantizeLinear, MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv, in graph ops
(casts, rounding half to even, clipping to the integer type's range). Semantics follow
onnx.reference, float8/float4/int4/int2 included (`tessera.topi.cast_small` converts them).

Integer products run on the int8 kernels (qnn.conv2d / qnn.dense, `onnx_qint.py`): uint8 x
int8 words on vpdpbusd, int32 accumulation, requantized in float32 with MLAS's rounding (product,
clamp, round half to even, zero point), so that results match ONNX Runtime bit for bit. What
they cannot take (runtime weights, other ranks) runs as an int32 matmul or an exact float64 conv
(Note [float64 fallback]).
"""

from __future__ import annotations

import numpy as np
from onnx import helper

from tessera.frontend import onnx_qint as qint
from tessera.frontend.onnx_nn import _crop, _spatial
from tessera.frontend.onnx_registry import NodeError, onnx_op
from tessera.graph.ir import parse_dtype
from tessera.ir.small_types import FLOAT_FORMATS, INT_FORMATS


def _per_axis(b, v, x_shape, axis, block_size=0):
    """A scale or zero point broadcast against x: a scalar, a 1-D per-axis vector, or a
    blocked tensor (block_size > 0) repeated along the axis."""
    nd = len(x_shape)
    axis %= max(nd, 1)
    vs = b.shape_of(v)
    if len(vs) == 0 or (len(vs) == 1 and vs[0] == 1 and not block_size):
        return b.reshape(v, ())
    if block_size:
        blocks = vs[axis]
        reps = list(vs[: axis + 1]) + [block_size] + list(vs[axis + 1 :])
        v = b.reshape(v, (*vs[: axis + 1], 1, *vs[axis + 1 :]))
        v = b.reshape(b.call("expand", v, shape=tuple(reps)),
                      (*vs[:axis], blocks * block_size, *vs[axis + 1 :]))  # fmt: skip
        if blocks * block_size != x_shape[axis]:
            end = list(b.shape_of(v))
            end[axis] = x_shape[axis]
            v = b.call("slice", v, begin=(0,) * nd, end=tuple(end), strides=(1,) * nd)
        return v
    if len(vs) != 1:
        raise NodeError(f"a per-axis scale must be 1-D, got shape {vs}")
    shape = [1] * nd
    shape[axis] = vs[0]
    return b.reshape(v, shape)


def _as(b, v, dtype):
    dtype = parse_dtype(dtype)
    return v if v.type.dtype == dtype else b.call("cast", v, dtype=dtype)


def _saturate(b, x, dtype):
    """Round half to even, clip to dtype's range (int4 and int2 too), cast."""
    dt = parse_dtype(dtype)
    lo, hi = dt.min_value(), dt.max_value()
    x = b.call("clip", b.call("round", x), a_min=float(lo), a_max=float(hi))
    return _as(b, x, dtype)


def _out_type(zero_point, output_dtype):
    if zero_point is not None:
        return str(zero_point.type.dtype)
    if output_dtype:
        return np.dtype(helper.tensor_dtype_to_np_dtype(output_dtype)).name
    return "uint8"


def _quantize(b, x, y_scale, y_zero_point, axis, block_size, out, saturate=1):
    dt = parse_dtype(out)
    if not (dt.is_integer or dt.code in INT_FORMATS or dt.code in FLOAT_FORMATS):
        raise NodeError(f"quantizing to {out} is not supported")
    shape = b.shape_of(x)
    work = "float64" if x.type.dtype.numpy_name == "float64" else "float32"
    scale = _as(b, _per_axis(b, y_scale, shape, axis, block_size), work)
    q = b.call("divide", _as(b, x, work), scale)
    if dt.code in FLOAT_FORMATS:  # float8: no rounding to integers; the zero point is 0
        if dt.code == "float4_e2m1fn" and y_zero_point is not None:
            zp = _as(b, _per_axis(b, y_zero_point, shape, axis, block_size), work)
            q = b.call("add", q, zp)
        return b.call("cast", q, dtype=dt, saturate=bool(saturate))
    q = b.call("round", q)
    if y_zero_point is not None:
        zp = _as(b, _per_axis(b, y_zero_point, shape, axis, block_size), work)
        q = b.call("add", q, zp)
    return _saturate(b, q, out)


@onnx_op("QuantizeLinear", since=10)
def quantize_linear(b, x, y_scale, y_zero_point=None, *, axis=1, block_size=0,
                    output_dtype=0, saturate=1, precision=0):  # fmt: skip
    out = _out_type(y_zero_point, output_dtype)
    return _quantize(b, x, y_scale, y_zero_point, axis, block_size, out, saturate)


@onnx_op("DequantizeLinear", since=10)
def dequantize_linear(b, x, x_scale, x_zero_point=None, *, axis=1, block_size=0,
                      output_dtype=0):  # fmt: skip
    if x.type.dtype.is_float:
        raise NodeError(f"dequantizing {x.type.dtype} is not supported")
    shape = b.shape_of(x)
    dx = _as(b, x, "float32")
    if x_zero_point is not None:
        zp = _as(b, _per_axis(b, x_zero_point, shape, axis, block_size), "float32")
        dx = b.call("subtract", dx, zp)
    scale = _per_axis(b, x_scale, shape, axis, block_size)
    y = b.call("multiply", dx, _as(b, scale, "float32"))
    out = helper.tensor_dtype_to_np_dtype(output_dtype) if output_dtype else x_scale.type.dtype
    return _as(b, y, out)


@onnx_op("DynamicQuantizeLinear", since=11)
def dynamic_quantize_linear(b, x):
    """uint8 with a scale and zero point from the range of x (which always includes 0), as
    ORT computes them."""
    zero = b.scalar(0, x)
    hi = b.call("maximum", b.call("max", x, axis=None, keepdims=False), zero)
    lo = b.call("minimum", b.call("min", x, axis=None, keepdims=False), zero)
    scale = b.call("divide", b.call("subtract", hi, lo), b.scalar(255, x))
    # an all-zero x has no range: ORT (GetQuantizationParameter) then takes scale 1, zero point 0
    scale = b.call("where", b.call("equal", hi, lo), b.scalar(1, x), scale)
    zp = _saturate(b, b.call("round", b.call("divide", b.call("negative", lo), scale)), "uint8")
    y = b.call("add", b.call("round", b.call("divide", x, scale)), _as(b, zp, "float32"))
    return _saturate(b, y, "uint8"), scale, zp


def _minus_zero_point(b, v, zero_point, axis, dtype):
    """v - zero_point in `dtype` (zero_point: scalar or 1-D along `axis` of v)."""
    v = _as(b, v, dtype)
    if zero_point is None:
        return v
    zp = _as(b, zero_point, dtype)
    if zp.type.ndim == 1 and zp.type.shape[0] != 1:
        shape = [1] * v.type.ndim
        shape[axis % v.type.ndim] = zp.type.shape[0]
        zp = b.reshape(zp, shape)
    elif zp.type.ndim:
        zp = b.reshape(zp, ())
    return b.call("subtract", v, zp)


def _centered(b, v, zero_point, axis_of_zp):
    """v - zero_point in float64 (exact for the float fallback of a conv)."""
    return _minus_zero_point(b, v, zero_point, axis_of_zp, "float64")


def _int32(b, v, zero_point, axis):
    """v - zero_point as int32 (the integer fallback of a product)."""
    return _minus_zero_point(b, v, zero_point, axis, "int32")


def _matmul_acc(b, A, B, a_zero_point, b_zero_point):
    """int32 (A - za) @ (B - zb): qnn.dense for a constant B, qnn.batch_matmul for a runtime B
    (scalar zero points), else an int32 matmul."""
    acc = qint.int_matmul(b, A, B, a_zero_point, b_zero_point)
    if acc is None:
        acc = qint.int_batch_matmul(b, A, B, a_zero_point, b_zero_point)
    if acc is not None:
        return acc
    # a's zero point is per row (axis -2), b's per column (axis -1)
    return b.call("matmul", _int32(b, A, a_zero_point, -2), _int32(b, B, b_zero_point, -1))


@onnx_op("MatMulInteger", since=10)
def matmul_integer(b, A, B, a_zero_point=None, b_zero_point=None):
    return _matmul_acc(b, A, B, a_zero_point, b_zero_point)


def _conv_attrs(b, x, w, auto_pad, dilations, kernel_shape, pads, strides):
    kernel = kernel_shape or b.shape_of(w)[2:]
    strides, dilations, pads = _spatial(b, x, kernel, auto_pad, dilations, pads, strides,
                                        signed=True)  # fmt: skip
    x, pads = _crop(b, x, pads)  # ORT's negative SAME pads crop the input
    return x, (strides, dilations, pads)


def _conv_acc(b, x, w, x_zero_point, w_zero_point, group, attrs):
    """int32 sum (x - zx)(w - zw): qnn.conv2d where it applies, else an exact float64 conv."""
    strides, dilations, pads = attrs
    if len(strides) == 2:
        acc = qint.int_conv(b, x, w, x_zero_point, w_zero_point, strides, pads, dilations, group)
        if acc is not None:
            return acc
    # Note [float64 fallback]: a runtime weight or zero point, or a weight minus its zero point
    # outside int8, or a 1-D/3-D conv: float64 is exact for these products (|x w| < 2**16 and
    # sums below 2**53), so the float conv kernels serve.
    xc, wc = _centered(b, x, x_zero_point, 1), _centered(b, w, w_zero_point, 0)
    nd = len(strides)
    y = b.call(f"nn.conv{nd}d", xc, wc, strides=strides, padding=pads, dilation=dilations,
               groups=group)  # fmt: skip
    return _as(b, y, "int32")


@onnx_op("ConvInteger", since=10)
def conv_integer(b, x, w, x_zero_point=None, w_zero_point=None, *, auto_pad="NOTSET",
                 dilations=None, group=1, kernel_shape=None, pads=None, strides=None):  # fmt: skip
    x, attrs = _conv_attrs(b, x, w, auto_pad, dilations, kernel_shape, pads, strides)
    return _conv_acc(b, x, w, x_zero_point, w_zero_point, group, attrs)


def _requantize(b, acc, scale, y_scale, y_zero_point, out):
    """acc * float32(scale / y_scale) + y_zero_point, saturated to out, in float32 as ORT's
    MLAS does; the factor is rounded to float32 first."""
    factor = b.call("divide", _as(b, scale, "float32"), _as(b, y_scale, "float32"))
    y = b.call("multiply", _as(b, acc, "float32"), factor)
    if y_zero_point is not None:
        y = b.call("add", y, _as(b, b.reshape(y_zero_point, ()), "float32"))
    return _saturate(b, y, out)


def _qlinear_out(b, acc, a_scale, w_scale, y_scale, y_zero_point, out, axis):
    """Requantize on qnn.requantize (constant scales and zero point), else in graph ops."""
    if str(out) in ("uint8", "int8") and qint.constant_zero_point(y_zero_point):
        scale = qint.requant_scale(b, a_scale, w_scale, y_scale, acc.type.ndim, axis)
        if scale is not None:
            return qint.requantize(b, acc, scale, y_zero_point, str(out))
    scale = b.call("multiply", _as(b, a_scale, "float32"), _as(b, w_scale, "float32"))
    if scale.type.ndim == 1 and scale.type.shape[0] > 1:
        scale = b.reshape(scale, (scale.type.shape[0], *(1,) * (acc.type.ndim - 1 - axis)))
    return _requantize(b, acc, scale, y_scale, y_zero_point, out)


@onnx_op("QLinearMatMul", since=10)
def qlinear_matmul(b, a, a_scale, a_zero_point, b_, b_scale, b_zero_point, y_scale,
                   y_zero_point):  # fmt: skip
    acc = _matmul_acc(b, a, b_, a_zero_point, b_zero_point)
    out = y_zero_point.type.dtype.numpy_name if y_zero_point is not None else a.type.dtype
    return _qlinear_out(b, acc, a_scale, b_scale, y_scale, y_zero_point, out, acc.type.ndim - 1)


@onnx_op("QLinearConv", since=10)
def qlinear_conv(b, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point,
                 B=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
                 pads=None, strides=None):  # fmt: skip
    x, attrs = _conv_attrs(b, x, w, auto_pad, dilations, kernel_shape, pads, strides)
    acc = _conv_acc(b, x, w, x_zero_point, w_zero_point, group, attrs)
    if B is not None:
        bias_shape = (b.shape_of(B)[0], *(1,) * (acc.type.ndim - 2))
        acc = b.call("add", acc, b.reshape(_as(b, B, "int32"), bias_shape))
    out = y_zero_point.type.dtype.numpy_name if y_zero_point is not None else x.type.dtype
    return _qlinear_out(b, acc, x_scale, w_scale, y_scale, y_zero_point, out, 1)
