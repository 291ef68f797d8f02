"""Quantized (int8) ops: integer products on packed int8 weights, and the float32 requantize.

    %acc = qnn.dense(%x, %wp, units=N) : i32[1, N]        # %x: u8/i8[1, K]; %wp: i32 panels
    (bounded=True: the weight keeps topi.qnn.pairs_bounded, Note [bounded pairs])
    %acc = qnn.conv2d(%x, %w4, strides=.., padding=.., dilation=.., groups=.., pad_value=zp)
    %y = qnn.requantize(%acc, %scale, zero_point=zp, dtype="uint8") : u8[...]

The products are sum x_u * w' (Note [int8 operands] in tessera/topi/qnn.py): the zero point of
x is compensated by the caller with ordinary graph ops (they fuse into the kernel's epilogue).
Each op's reference is the integer arithmetic in numpy (int64, wrapped to int32), the oracle of
the tests. The CPU schedules are registered by topi/x86/ops.py (int8_dense.py, int8_conv2d.py).
"""

from __future__ import annotations

import numpy as np

from tessera.graph.ir import TensorType
from tessera.graph.op import OpKind, register_op
from tessera.graph.ops.common import broadcast_shapes, type_error
from tessera.topi import qnn as topi_qnn
from tessera.topi.nn import schedule as topi_nn_schedule

_DATA = ("uint8", "int8")


def _require_data(op, x: TensorType):
    if str(x.dtype) not in _DATA:
        raise type_error(op, f"data must be uint8 or int8, got {x}")


def _unsigned(x: np.ndarray) -> np.ndarray:
    return x.astype(np.int64) + (128 if x.dtype == np.int8 else 0)


# -- dense ------------------------------------------------------------------------------------

dense = register_op("qnn.dense", kind=OpKind.OUT_ELEMWISE_FUSABLE)


@dense.type_rule
def _(x: TensorType, wp: TensorType, units, bounded=False) -> TensorType:
    _require_data("qnn.dense", x)
    if str(wp.dtype) != "int32" or wp.ndim != 3 or x.ndim < 1:
        raise type_error("qnn.dense", f"expects int32 weight panels (P, K/4, 16), got {wp}")
    if wp.shape[1] != -(-x.shape[-1] // 4) or wp.shape[0] * wp.shape[2] < units:
        raise type_error("qnn.dense", f"data {x} and weight panels {wp} disagree ({units} units)")
    return TensorType((*x.shape[:-1], units), "int32")


@dense.reference
def _(x, wp, units, bounded=False):
    w = topi_qnn.unpack_dense_weight(wp, units, x.shape[-1]).astype(np.int64)
    return (_unsigned(x) @ w.T).astype(np.int32)


@dense.compute
def _(x, wp, *, units, bounded=False):
    return topi_qnn.qnn_dense(x, wp, units, bounded)


# -- batch_matmul (both operands at run time) ---------------------------------------------------

batch_matmul = register_op("qnn.batch_matmul", kind=OpKind.OUT_ELEMWISE_FUSABLE)


@batch_matmul.type_rule
def _(a: TensorType, b: TensorType) -> TensorType:
    _require_data("qnn.batch_matmul", a)
    _require_data("qnn.batch_matmul", b)
    if a.ndim != 3 or b.ndim != 3 or a.shape[2] != b.shape[1]:
        raise type_error("qnn.batch_matmul", f"expects (B, M, K) and (B, K, N), got {a}, {b}")
    batch = broadcast_shapes("qnn.batch_matmul", a.shape[:1], b.shape[:1])
    return TensorType((*batch, a.shape[1], b.shape[2]), "int32")


@batch_matmul.reference
def _(a, b):
    bs = b.astype(np.int64) - (128 if b.dtype == np.uint8 else 0)
    return np.matmul(_unsigned(a), bs).astype(np.int32)


@batch_matmul.compute
def _(a, b):
    return topi_qnn.qnn_batch_matmul(a, b)


# -- conv2d -----------------------------------------------------------------------------------

conv2d = register_op("qnn.conv2d", kind=OpKind.OUT_ELEMWISE_FUSABLE)


@conv2d.type_rule
def _(x: TensorType, w4: TensorType, strides, padding, dilation, groups=1, pad_value=0):
    _require_data("qnn.conv2d", x)
    if str(w4.dtype) != "int32" or x.ndim not in (4, 5) or w4.ndim != 4:
        raise type_error("qnn.conv2d", f"expects NCHW (or NCHW[x]c) data and int32 weight "
                         f"words, got {x}, {w4}")  # fmt: skip
    c = _channels(x)
    if groups < 1 or c % groups or w4.shape[0] % groups:
        raise type_error("qnn.conv2d", f"channels of {x} and {w4} disagree (groups={groups})")
    if w4.shape[1] != -(-(c // groups) // 4):
        raise type_error("qnn.conv2d", f"weight words {w4} do not cover the channels of {x}")
    if len(strides) != 2 or len(padding) != 4 or len(dilation) != 2:
        raise type_error("qnn.conv2d", "needs 2 strides, 4 pads and 2 dilations")
    out = _conv_out("qnn.conv2d", x.shape[2:4], w4.shape[2:4], strides, padding, dilation)
    return TensorType((x.shape[0], w4.shape[0], *out), "int32")


def _channels(x: TensorType) -> int:
    """The channels of NCHW data or of blocked data (N, C/B, H, W, B)."""
    return x.shape[1] * x.shape[4] if x.ndim == 5 else x.shape[1]


def _plain(x: np.ndarray) -> np.ndarray:
    """Blocked data (N, C/B, H, W, B) as NCHW; NCHW data as it is."""
    if x.ndim == 4:
        return x
    n, cb, h, w, b = x.shape
    return np.ascontiguousarray(x.transpose(0, 1, 4, 2, 3)).reshape(n, cb * b, h, w)


@conv2d.reference
def _(x, w4, strides, padding, dilation, groups=1, pad_value=0):
    from tessera.graph.ops import nn_ref

    x = _plain(x)
    cg = x.shape[1] // groups
    w = topi_qnn.unpack_conv_weight(w4, cg).astype(np.float64)
    xu = _unsigned(x).astype(np.float64)
    pt, pl, pb, pr = padding
    xu = np.pad(xu, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=pad_value)
    # float64 is exact here: |products| < 2**15 and a few million terms stay below 2**53
    y = nn_ref.conv(xu, w, strides=strides, padding=(0, 0, 0, 0), dilation=dilation,
                    groups=groups)  # fmt: skip
    return np.round(y).astype(np.int64).astype(np.int32)


@conv2d.compute
def _(x, w4, *, strides, padding, dilation, groups=1, pad_value=0):
    return topi_qnn.qnn_conv2d(x, w4, strides=strides, padding=padding, dilation=dilation,
                               groups=groups, pad_value=pad_value)  # fmt: skip


# -- conv2d with output channels in vectors (the "channels" implementation of qnn.conv2d) ------

conv2d_packed = register_op("qnn.conv2d_packed", kind=OpKind.OUT_ELEMWISE_FUSABLE)


@conv2d_packed.type_rule
def _(x: TensorType, wb: TensorType, strides, padding, dilation, channels, pad_value=0,
      config=None):  # fmt: skip
    _require_data("qnn.conv2d_packed", x)
    if str(wb.dtype) != "int32" or x.ndim != 4 or wb.ndim != 5:
        raise type_error("qnn.conv2d_packed", f"expects NCHW data and int32 weight blocks (OB, "
                         f"I/4, KH, KW, B), got {x}, {wb}")  # fmt: skip
    if wb.shape[1] != -(-x.shape[1] // 4) or wb.shape[0] * wb.shape[4] < channels:
        raise type_error("qnn.conv2d_packed", f"weight blocks {wb} do not fit {x} ({channels})")
    out = [
        topi_qnn.conv_out_size(
            x.shape[2 + i], wb.shape[2 + i], strides[i], padding[i], padding[i + 2], dilation[i]
        )  # fmt: skip
        for i in range(2)
    ]
    if min(out) < 1:
        raise type_error("qnn.conv2d_packed", f"kernel {wb.shape[2:4]} is larger than {x}")
    return TensorType((x.shape[0], channels, *out), "int32")


@conv2d_packed.reference
def _(x, wb, strides, padding, dilation, channels, pad_value=0, config=None):
    w = topi_qnn.unpack_conv_weight_blocked(wb, channels, x.shape[1])
    w4 = topi_qnn.pack_conv_weight(w)
    attrs = dict(strides=strides, padding=padding, dilation=dilation, pad_value=pad_value)
    return conv2d.evaluate([x, w4], attrs)[0]


@conv2d_packed.compute
def _(x, wb, *, strides, padding, dilation, channels, pad_value=0, config=None):
    return topi_qnn.qnn_conv2d_packed(x, wb, strides=strides, padding=padding, dilation=dilation,
                                      pad_value=pad_value, channels=channels)  # fmt: skip


# -- conv2d between blocked int8 activations (Note [blocked int8 activations], topi/qnn.py) ----

conv2d_nchwc = register_op("qnn.conv2d_nchwc", kind=OpKind.OUT_ELEMWISE_FUSABLE)


@conv2d_nchwc.type_rule
def _(x: TensorType, wb: TensorType, strides, padding, dilation, pad_value=0, config=None):
    _require_data("qnn.conv2d_nchwc", x)
    blocks = x.ndim == 5 and x.shape[4] % 4 == 0
    if str(wb.dtype) != "int32" or not (x.ndim == 4 or blocks) or wb.ndim != 5:
        want = "data NCHW or (N, C/B, H, W, B), B a multiple of 4, int32 weight blocks"
        raise type_error("qnn.conv2d_nchwc", f"expects {want} (OB, C/4, KH, KW, B), got {x}, {wb}")
    if wb.shape[1] != -(-_channels(x) // 4):
        raise type_error("qnn.conv2d_nchwc", f"weight blocks {wb} do not fit {x}")
    out = _conv_out("qnn.conv2d_nchwc", x.shape[2:4], wb.shape[2:4], strides, padding, dilation)
    return TensorType((x.shape[0], wb.shape[0], *out, wb.shape[4]), "int32")


@conv2d_nchwc.reference
def _(x, wb, strides, padding, dilation, pad_value=0, config=None):
    plain = _plain(x)
    channels = wb.shape[0] * wb.shape[4]
    attrs = dict(strides=strides, padding=padding, dilation=dilation, pad_value=pad_value,
                 channels=channels)  # fmt: skip
    y = conv2d_packed.evaluate([plain, wb], attrs)[0]
    n, _, oh, ow = y.shape
    y = y.reshape(n, wb.shape[0], wb.shape[4], oh, ow)
    return np.ascontiguousarray(y.transpose(0, 1, 3, 4, 2))


@conv2d_nchwc.compute
def _(x, wb, *, strides, padding, dilation, pad_value=0, config=None):
    return topi_qnn.qnn_conv2d_nchwc(x, wb, strides=strides, padding=padding, dilation=dilation,
                                     pad_value=pad_value)  # fmt: skip


def _conv_out(op, size, kernel, strides, padding, dilation) -> list[int]:
    out = [
        topi_qnn.conv_out_size(
            size[i], kernel[i], strides[i], padding[i], padding[i + 2], dilation[i]
        )  # fmt: skip
        for i in range(2)
    ]
    if min(out) < 1:
        raise type_error(op, f"kernel {tuple(kernel)} is larger than the padded input {size}")
    return out


# -- requantize -------------------------------------------------------------------------------

requantize = register_op("qnn.requantize", kind=OpKind.BROADCAST)


@requantize.type_rule
def _(acc: TensorType, scale: TensorType, zero_point=0, dtype="uint8") -> TensorType:
    if str(acc.dtype) != "int32" or str(scale.dtype) != "float32":
        raise type_error("qnn.requantize", f"expects int32 data and float32 scale, {acc} {scale}")
    if dtype not in _DATA:
        raise type_error("qnn.requantize", f"dtype must be uint8 or int8, got {dtype}")
    if broadcast_shapes("qnn.requantize", acc.shape, scale.shape) != acc.shape:
        raise type_error("qnn.requantize", f"scale {scale} must broadcast to {acc}")
    return TensorType(acc.shape, dtype)


@requantize.reference
def _(acc, scale, zero_point=0, dtype="uint8"):
    info = np.iinfo(dtype)
    v = acc.astype(np.float32) * scale.astype(np.float32)
    v = np.clip(v, np.float32(info.min - zero_point), np.float32(info.max - zero_point))
    return (np.round(v).astype(np.int32) + zero_point).astype(dtype)


@requantize.compute
def _(acc, scale, *, zero_point=0, dtype="uint8"):
    return topi_qnn.requantize(acc, scale, zero_point=zero_point, dtype=dtype)


# -- quantize, dequantize (tessera.quantize's explicit conversions) ---------------------------

quantize = register_op("qnn.quantize", kind=OpKind.ELEMWISE)


# out_min, out_max: a narrower saturation range than the dtype's (a ReLU or clip folded in:
# Note [clamps folded into quantize] in transform/fold_qnn_clamp.py)
@quantize.type_rule
def _(x: TensorType, scale=1.0, zero_point=0, dtype="uint8", out_min=None, out_max=None):
    if str(x.dtype) != "float32" or dtype not in _DATA:
        raise type_error("qnn.quantize", f"quantizes float32 to uint8/int8, got {x} -> {dtype}")
    lo, hi = topi_qnn.saturation(dtype, out_min, out_max)
    if lo > hi:
        raise type_error("qnn.quantize", f"empty range [{out_min}, {out_max}] for {dtype}")
    return TensorType(x.shape, dtype)


@quantize.reference
def _(x, scale=1.0, zero_point=0, dtype="uint8", out_min=None, out_max=None):
    lo, hi = topi_qnn.saturation(dtype, out_min, out_max)
    q = np.round(x.astype(np.float32) * topi_qnn.reciprocal(scale)) + zero_point
    return np.clip(q, lo, hi).astype(dtype)


@quantize.compute
def _(x, *, scale=1.0, zero_point=0, dtype="uint8", out_min=None, out_max=None):
    return topi_qnn.quantize(x, scale=scale, zero_point=zero_point, dtype=dtype,
                             out_min=out_min, out_max=out_max)  # fmt: skip


# qnn.quantize_byte: one byte of a 16-bit activation code, the data of one pass of a layer
# computed in two (Note [16-bit activations by splitting] in topi/qnn.py)
quantize_byte = register_op("qnn.quantize_byte", kind=OpKind.ELEMWISE)


@quantize_byte.type_rule
def _(x: TensorType, scale=1.0, zero_point=0, byte=0):
    if str(x.dtype) != "float32" or byte not in (0, 1) or not 0 <= zero_point <= 65535:
        raise type_error("qnn.quantize_byte", f"quantizes float32 to byte 0 or 1 of a uint16 "
                         f"code (zero point in [0, 65535]), got {x}, byte={byte}, "
                         f"zero_point={zero_point}")  # fmt: skip
    return TensorType(x.shape, "uint8")


@quantize_byte.reference
def _(x, scale=1.0, zero_point=0, byte=0):
    q = np.round(x.astype(np.float32) * topi_qnn.reciprocal(scale)) + np.float32(zero_point)
    q = np.clip(q, 0, 65535).astype(np.int64)
    return ((q >> (8 * byte)) & 255).astype(np.uint8)


@quantize_byte.compute
def _(x, *, scale=1.0, zero_point=0, byte=0):
    return topi_qnn.quantize_byte(x, scale=scale, zero_point=zero_point, byte=byte)


dequantize = register_op("qnn.dequantize", kind=OpKind.BROADCAST)


@dequantize.type_rule
def _(acc: TensorType, scale: TensorType, zero_point=0) -> TensorType:
    if str(acc.dtype) not in ("int32", "uint8", "int8") or str(scale.dtype) != "float32":
        raise type_error("qnn.dequantize", f"expects integer data, float32 scale: {acc} {scale}")
    if broadcast_shapes("qnn.dequantize", acc.shape, scale.shape) != acc.shape:
        raise type_error("qnn.dequantize", f"scale {scale} must broadcast to {acc}")
    return TensorType(acc.shape, "float32")


@dequantize.reference
def _(acc, scale, zero_point=0):
    centered = (acc.astype(np.int64) - zero_point).astype(np.float32)
    return (centered * scale.astype(np.float32)).astype(np.float32)


@dequantize.compute
def _(acc, scale, *, zero_point=0):
    return topi_qnn.dequantize(acc, scale, zero_point)


# -- sum_pool2d (int8 average pools: the window sums, requantized by the caller) --------------

sum_pool2d = register_op("qnn.sum_pool2d", kind=OpKind.OUT_ELEMWISE_FUSABLE)


@sum_pool2d.type_rule
def _(x: TensorType, pool_size, strides, padding, dilation, zero_point=0):
    _require_data("qnn.sum_pool2d", x)
    if x.ndim != 4 or len(pool_size) != 2 or len(strides) != 2 or len(padding) != 4:
        raise type_error("qnn.sum_pool2d", f"expects NCHW data, 2 sizes, 2 strides, 4 pads: {x}")
    out = [
        topi_qnn.conv_out_size(
            x.shape[2 + i], pool_size[i], strides[i], padding[i], padding[i + 2], dilation[i]
        )  # fmt: skip
        for i in range(2)
    ]
    if min(out) < 1:
        raise type_error("qnn.sum_pool2d", f"window {pool_size} is larger than padded input {x}")
    return TensorType((*x.shape[:2], *out), "int32")


@sum_pool2d.reference
def _(x, pool_size, strides, padding, dilation, zero_point=0):
    xs = x.astype(np.int64) - zero_point
    pt, pl, pb, pr = padding
    xs = np.pad(xs, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    (kh, kw), (sh, sw), (dh, dw) = pool_size, strides, dilation
    oh = (xs.shape[2] - (kh - 1) * dh - 1) // sh + 1
    ow = (xs.shape[3] - (kw - 1) * dw - 1) // sw + 1
    y = np.zeros((*x.shape[:2], oh, ow), np.int64)
    for i in range(kh):
        for j in range(kw):
            y += xs[:, :, i * dh : i * dh + (oh - 1) * sh + 1 : sh,
                    j * dw : j * dw + (ow - 1) * sw + 1 : sw]  # fmt: skip
    return y.astype(np.int32)


@sum_pool2d.compute
def _(x, *, pool_size, strides, padding, dilation, zero_point=0):
    return topi_qnn.sum_pool2d(x, pool_size, strides, padding, dilation, zero_point)


sum_pool2d.schedule("generic")(topi_nn_schedule.schedule_pool)


# -- add (ORT's QLinearAdd of two same-shape int8 tensors) -------------------------------------

add = register_op("qnn.add", kind=OpKind.BROADCAST)


@add.type_rule
def _(a: TensorType, b: TensorType, a_zero_point=0, b_zero_point=0, a_ratio=1.0, b_ratio=1.0,
      zero_point=0, dtype="int8"):  # fmt: skip
    _require_data("qnn.add", a)
    if a.dtype != b.dtype or a.shape != b.shape or dtype not in _DATA:
        raise type_error("qnn.add", f"expects two int8/uint8 tensors of one type, {a} {b}")
    return TensorType(a.shape, dtype)


@add.reference
def _(a, b, a_zero_point=0, b_zero_point=0, a_ratio=1.0, b_ratio=1.0, zero_point=0, dtype="int8"):
    info = np.iinfo(dtype)
    va = (a.astype(np.int32) - a_zero_point).astype(np.float32) * np.float32(a_ratio)
    vb = (b.astype(np.int32) - b_zero_point).astype(np.float32) * np.float32(b_ratio)
    v = (va + vb) + np.float32(zero_point)
    return np.clip(np.round(v), info.min, info.max).astype(dtype)


@add.compute
def _(a, b, *, a_zero_point=0, b_zero_point=0, a_ratio=1.0, b_ratio=1.0, zero_point=0,
      dtype="int8"):  # fmt: skip
    return topi_qnn.qlinear_add(a, b, a_zero_point, b_zero_point, a_ratio, b_ratio, zero_point,
                                dtype)  # fmt: skip
