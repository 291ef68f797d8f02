"""Transposed convolutions as one ordinary convolution (the sub-pixel form), for every frontend.

    y = conv_transpose(b, x, w, strides=(2, 2), padding=(0, 0, 0, 0), dilation=(1, 1),
                       groups=1, output_padding=(0, 0))

A transposed convolution computed directly reads a stride-dilated input whose taps are mostly
zeros (s^2 - 1 of every s^2 in 2-D) through a kernel with no fast schedule. When the weight is a
constant (it is in every trained model), the converters emit instead one stride-1 convolution
with s1*s2*... times the output channels, followed by a depth-to-space shuffle and a crop, all
ordinary ops: the convolution takes the target's fast kernels (blocked layout, packed weights).
A weight computed at run time keeps `nn.convNd_transpose`. Note [sub-pixel transposed conv].
"""

from __future__ import annotations

import math

import numpy as np

from tessera.graph.builder import GraphBuilder
from tessera.graph.ir import Constant, Value
from tessera.graph.op import get_op

# Note [sub-pixel transposed conv]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Along one axis (stride s, dilation d, K taps), input i and tap k reach the uncropped output
# position s*i + d*k. Write d*k = s*a + p (a = d*k // s, p = d*k % s): output s*q + p takes
# x[q - a] * w[k]. So output phase p (q running) is a stride-1 correlation of x, padded with
# A = d*(K-1) // s in front, with the T = A + 1 taps V[p, t] = w[k] where a = A - t and
# d*k % s == p (zero where no tap lands: each (a, p) names at most one k). All s phases are the
# output channels of one convolution (channel o*s + p); interleaving them (o, q, p) -> (o, s*q+p)
# gives the uncropped output, of which the pads are cropped. Work: T^n taps per output instead
# of K^n of the dilated input (T <= ceil(K/s) for d = 1: 1 tap for K = s, the upsampling heads
# of segmentation and OCR models), every multiply on data. Front pads that are whole strides
# are taken off the input padding instead of computed and cropped.


def subpixel_weight(w: np.ndarray, strides, dilation, groups: int) -> np.ndarray:
    """The convolution weight (O*S, C/groups, T...) of a transposed conv's (C, O/groups, K...)."""
    nd = w.ndim - 2
    c, og = w.shape[:2]
    for i in range(nd):
        axis, s, d, k = 2 + 2 * i, strides[i], dilation[i], w.shape[2 + 2 * i]
        taps = (d * (k - 1)) // s + 1
        placed = np.zeros((*w.shape[:axis], s * taps, *w.shape[axis + 1 :]), w.dtype)
        index = [slice(None)] * w.ndim
        index[axis] = slice(0, d * (k - 1) + 1, d)
        placed[tuple(index)] = w
        w = np.flip(placed.reshape(*w.shape[:axis], taps, s, *w.shape[axis + 1 :]), axis)
    # w: (C, og, T1, s1, T2, s2, ...) -> (groups, og, s1, s2, ..., C/groups, T1, T2, ...)
    w = w.reshape(groups, c // groups, og, *w.shape[2:])
    taps_axes = [3 + 2 * i for i in range(nd)]
    phase_axes = [4 + 2 * i for i in range(nd)]
    w = w.transpose(0, 2, *phase_axes, 1, *taps_axes)
    phases = math.prod(strides)
    return np.ascontiguousarray(w.reshape(groups * og * phases, c // groups, *w.shape[-nd:]))


def _axis_plan(size, kernel, s, d, pad_begin, out):
    """(front pad, end pad, crop start) of one axis: see Note [sub-pixel transposed conv]."""
    a = (d * (kernel - 1)) // s
    whole = min(pad_begin // s, a)  # front pads that are whole strides: less input padding
    front, crop = a - whole, pad_begin - s * whole
    rows = -(-(crop + out) // s)  # phase rows needed to cover the crop
    end = max(0, rows - size - front + a)
    return front, end, crop


def conv_transpose(
    b: GraphBuilder, x: Value, w: Value, *, strides, padding, dilation, groups, output_padding
) -> Value:
    """`nn.convNd_transpose(x, w, ...)` (ONNX semantics), emitted in its sub-pixel form when
    the weight is a constant."""
    nd = x.type.ndim - 2
    strides, padding, dilation = tuple(strides), tuple(padding), tuple(dilation)
    attrs = dict(strides=strides, padding=padding, dilation=dilation, groups=groups,
                 output_padding=tuple(output_padding))  # fmt: skip
    op = get_op(f"nn.conv{nd}d_transpose")
    if not isinstance(w, Constant) or isinstance(x, Constant):
        return b.call(op, x, w, **attrs)
    ((n, o, *out),) = (t.shape for t in op.infer_type([x.type, w.type], attrs))  # checks attrs
    plans = [
        _axis_plan(
            x.type.shape[2 + i], w.type.shape[2 + i], strides[i], dilation[i], padding[i], out[i]
        )  # fmt: skip
        for i in range(nd)
    ]
    v = b.const(subpixel_weight(w.array, strides, dilation, groups), name=f"{w.name}_subpixel")
    pads = tuple(p[0] for p in plans) + tuple(p[1] for p in plans)
    y = b.call(f"nn.conv{nd}d", x, v, strides=(1,) * nd, padding=pads, dilation=(1,) * nd,
               groups=groups)  # fmt: skip
    rows = y.type.shape[2:]
    if any(s > 1 for s in strides):  # channel o*S + phase -> interleaved positions
        y = b.call("reshape", y, newshape=(n, o, *strides, *rows))
        axes = (0, 1, *(a for i in range(nd) for a in (2 + nd + i, 2 + i)))
        y = b.call("transpose", y, axes=axes)
        y = b.call(
            "reshape", y, newshape=(n, o, *(r * s for r, s in zip(rows, strides, strict=True)))
        )
    begin = tuple(p[2] for p in plans)
    if any(begin) or tuple(y.type.shape[2:]) != tuple(out):
        end = tuple(begin[i] + out[i] for i in range(nd))
        y = b.call("slice", y, begin=(0, 0, *begin), end=(n, o, *end), strides=(1,) * (nd + 2))
    return y
