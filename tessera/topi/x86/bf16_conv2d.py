"""bf16 conv: the blocked float conv (topi/x86/conv2d.py, NCHW[x]c) with bfloat16 products on
`dot_bf16` (vdpbf16ps) and float32 accumulation.

    wp = pack_bf16_conv_weight(w)  # (OB, IB, KH, KW, ib, ob) f32 -> (.., ib/2, ob) int32 words
    %y = bf16.conv2d_nchwc(%x, %wp, strides=.., padding=.., dilation=..) : f32[N, OB, OH, OW, ob]

The data (float32 NCHW[ib]c) is rounded to bfloat16 once per call while it is packed into words
of two channels of a block (N, IB, H, W, ib/2) at root; the padding is applied to the words.
Then it is the float conv's micro-kernel (Note [conv micro-kernel]): each step broadcasts one
word (two input channels of one pixel) and meets oc_vectors weight vectors of ob output
channels, with ow_block x oc_vectors float32 accumulators in registers; half the steps of the
float kernel, each a vdpbf16ps. Groups of 1 and even input blocks only (the graph pass,
tessera/quantize/bf16.py, leaves other convs float32).
"""

from __future__ import annotations

import numpy as np

from tessera import te, tir
from tessera.graph.ir import TensorType
from tessera.graph.op import OpKind, get_op, register_op
from tessera.graph.ops.common import type_error
from tessera.runtime.ndarray import bfloat16_bits_to_float, float_to_bfloat16_bits
from tessera.tir import op as tir_op
from tessera.topi.generic import schedule_elementwise_stage, traverse
from tessera.topi.x86 import conv2d as x86_conv2d
from tessera.topi.x86.bf16_dense import _bf16_half, round_bf16

PACK_TAG = "bf16_pack"


def pack_bf16_conv_weight(w: np.ndarray) -> np.ndarray:
    """A blocked conv weight (OB, IB, KH, KW, ib, ob) float32 as int32 words of two bfloat16 of
    consecutive input channels (the even one in the low half): (OB, IB, KH, KW, ib/2, ob)."""
    if w.ndim != 6 or w.shape[4] % 2:
        raise ValueError(f"bf16 conv weight: blocked, with an even input block, got {w.shape}")
    bits = float_to_bfloat16_bits(np.asarray(w, np.float32)).astype(np.uint32)
    words = bits[..., 0::2, :] | (bits[..., 1::2, :] << np.uint32(16))
    return np.ascontiguousarray(words.view(np.int32))


def unpack_bf16_conv_weight(wp: np.ndarray) -> np.ndarray:
    """The inverse of pack_bf16_conv_weight: the blocked float32 weight (bfloat16 values)."""
    u = np.asarray(wp).view(np.uint32)
    lo, hi = (u & np.uint32(0xFFFF)).astype(np.uint16), (u >> np.uint32(16)).astype(np.uint16)
    bits = np.stack([lo, hi], axis=5).reshape(*wp.shape[:4], 2 * wp.shape[4], wp.shape[5])
    return bfloat16_bits_to_float(bits)


def float_weight_shape(wp_shape) -> tuple:
    ocb, icb, kh, kw, i2, ob = wp_shape
    return (ocb, icb, kh, kw, 2 * i2, ob)


def bf16_conv2d_nchwc(x: te.Tensor, wp: te.Tensor, strides, padding, dilation) -> te.Tensor:
    x_shape = [int(d.value) for d in x.shape]
    wp_shape = [int(d.value) for d in wp.shape]
    out_shape, _ = x86_conv2d.conv2d_nchwc_shape(
        x_shape, float_weight_shape(wp_shape), strides, padding, dilation, 1
    )
    n, icb, h, w, ib = x_shape
    ocb, _, kh, kw, i2, ob = wp_shape

    def word(b, c, i, j, k):
        lo = _bf16_half(x[b, c, i, j, 2 * k], False)
        hi = _bf16_half(x[b, c, i, j, 2 * k + 1], True)
        return tir_op.reinterpret(tir_op.bitwise_or(hi, lo), "int32")

    xw = te.compute((n, icb, h, w, i2), word, name="x_bf16", tag=PACK_TAG)
    if any(padding):
        xw = x86_conv2d.pad_nchwc(xw, padding[:2], padding[2:])
    rco = te.reduce_axis((0, icb), name="rco")
    rh = te.reduce_axis((0, kh), name="rh")
    rw = te.reduce_axis((0, kw), name="rw")
    rci = te.reduce_axis((0, i2), name="rci")
    (sh, sw), (dh, dw) = strides, dilation
    zero = tir.const(0.0, "float32")

    def f(b, oc, oh, ow, oi):
        i, j = oh * sh + rh.var * dh, ow * sw + rw.var * dw
        return te.sum(
            tir_op.dot_bf16(zero, xw[b, rco, i, j, rci], wp[oc, rco, rh, rw, rci, oi]),
            axis=[rco, rh, rw, rci],
        )

    attrs = {"depthwise": 0, "window_h": (kh - 1) * dh + 1, "window_w": (kw - 1) * dw + 1,
             "stride_w": sw}  # fmt: skip
    return te.compute(out_shape, f, name="conv2d_nchwc", tag=x86_conv2d.CONV_TAG, attrs=attrs)


def schedule_bf16_conv2d_nchwc(outs, target=None) -> te.Schedule:
    """The float conv's schedule; the packed words computed once, at root, in parallel."""
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    s = x86_conv2d.schedule_conv2d_nchwc(outs, target)
    found = []
    traverse(outs, lambda op: found.append(op.output(0)) if op.tag == PACK_TAG else None)
    for t in found:
        s[t].compute_root()
        schedule_elementwise_stage(s, t, target)
    return s


# -- the graph op ------------------------------------------------------------------------------

conv2d = register_op("bf16.conv2d_nchwc", kind=OpKind.OUT_ELEMWISE_FUSABLE)


@conv2d.type_rule
def _(x: TensorType, wp: TensorType, strides, padding, dilation) -> TensorType:
    op = "bf16.conv2d_nchwc"
    if str(x.dtype) != "float32" or x.ndim != 5 or not x.is_static:
        raise type_error(op, f"data must be static float32 NCHW[x]c, got {x}")
    if str(wp.dtype) != "int32" or wp.ndim != 6 or x.shape[4] != 2 * wp.shape[4]:
        raise type_error(op, f"data {x} and weight words {wp} disagree")
    try:
        shape, _ = x86_conv2d.conv2d_nchwc_shape(
            x.shape, float_weight_shape(wp.shape), strides, padding, dilation, 1
        )
    except ValueError as err:
        raise type_error(op, str(err)) from None
    return x.with_shape(shape)


@conv2d.reference
def _(x, wp, strides, padding, dilation):
    """The float conv's reference on the bfloat16 values (sums in float64)."""
    attrs = dict(strides=strides, padding=padding, dilation=dilation)
    xr = round_bf16(x).astype(np.float64)
    w = unpack_bf16_conv_weight(wp).astype(np.float64)
    return get_op("nn.conv2d_nchwc").evaluate([xr, w], attrs)[0].astype(np.float32)


@conv2d.compute
def _(x, wp, *, strides, padding, dilation):
    return bf16_conv2d_nchwc(x, wp, strides, padding, dilation)


conv2d.schedule("generic")(schedule_bf16_conv2d_nchwc)
conv2d.schedule("x86")(schedule_bf16_conv2d_nchwc)
