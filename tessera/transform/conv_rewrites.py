"""Convs that the blocked kernels serve badly, re-expressed as other convs by the layout pass
(transform/alter_layout.py, whose rewriter takes these methods from `ConvRewrites`):

    depthwise_multiplier   k depthwise convs, concatenated, channels shuffled
    live_tap_regions       one conv per output region over its live taps (transform/conv_taps.py)
    dilated_as_phases      a dilated conv as the Winograd conv of its input's d x d phases
    as_row                 a conv over one-column data as the conv of its transpose (a row)

Each builds the new convs as graph calls and hands them back to the rewriter's `conv`, so the
strategies choose their layouts and kernels as for any conv.
"""

from __future__ import annotations

import numpy as np

from tessera.graph.ir import Call, Constant, Value
from tessera.graph.op import get_op
from tessera.topi import strategy


class ConvRewrites:
    """The conv re-expressions of alter_layout's rewriter (a mixin: `self` is that rewriter,
    with its conv, concatenate, emit, to_block, set_blocked, blocked, ... )."""

    def depthwise_multiplier(self, call: Call) -> bool:
        """Note [depthwise multipliers]: k depthwise convs, concatenated, channels shuffled."""
        (x, w), (out,) = call.inputs, call.outputs
        k = multiplier(call)
        if self.is_padded(x):
            return False  # the concatenation needs the true channels
        t = out.type.with_shape((out.type.shape[0], x.type.shape[1], *out.type.shape[2:]))
        parts = []
        for j in range(k):
            wj = Constant.of(w.name, np.ascontiguousarray(w.array[j::k]))
            yj = Value(self._name(out, f"m{j}_"), t)
            if not self.conv(Call(call.op, (x, wj), call.attrs, (yj,), call.span)):
                return False  # only the first can refuse (they have one workload), emitting nothing
            parts.append(yj)
        cat = Value(self._name(out, "m"), out.type)
        concat = Call(get_op("concatenate"), tuple(parts), {"axis": 1}, (cat,), call.span)
        if not self.concatenate(concat):
            return False
        catb, block = self.blocked[id(cat)]
        yb = self.emit("channel_shuffle", [catb], {"groups": k}, name=self._name(out, "nchwc"))
        self.set_blocked(out, yb, block)
        return True

    def live_tap_regions(self, call: Call, axes) -> bool:
        """Note [live-tap regions]: one conv per region of the output, over the region's input
        window with its live taps and no padding; concatenated along W, then H."""
        (x, w), (out,) = call.inputs, call.outputs
        a = call.attrs
        (sh, sw), (dh, dw), (ph, pw) = a["strides"], a["dilation"], a["padding"][:2]
        n, c = x.type.shape[:2]
        rows = []
        for r0, r1, h0, h1 in axes[0]:
            parts = []
            for c0, c1, w0, w1 in axes[1]:
                top, left = r0 * sh + h0 * dh - ph, c0 * sw + w0 * dw - pw
                bottom = (r1 - 1) * sh + h1 * dh - ph + 1
                right = (c1 - 1) * sw + w1 * dw - pw + 1
                xs = self.window(x, top, bottom, left, right)
                ws = w.array[:, :, h0 : h1 + 1, w0 : w1 + 1]
                ws = Constant.of(w.name, np.ascontiguousarray(ws))
                shape = (out.type.shape[0], out.type.shape[1], r1 - r0, c1 - c0)
                ys = Value(self._name(out, "region"), out.type.with_shape(shape))
                dilation = [dh if h1 > h0 else 1, dw if w1 > w0 else 1]
                attrs = dict(a, padding=[0, 0, 0, 0], dilation=dilation)
                region = Call(call.op, (xs, ws), attrs, (ys,), call.span)
                if not self.conv(region, xs, ys):
                    inputs = [self.plain(xs), self.constant(w.name, ws.array)]
                    self.emit(call.op.name, inputs, attrs, out=ys)
                parts.append(ys)
            rows.append(parts)
        block = self.block_of(rows[0][0])  # all regions in the first one's layout

        def in_layout(v: Value) -> Value:
            if block is None:
                return self.plain(v) if id(v) in self.blocked else v
            return self.to_block(v, block)

        def concat(vs, axis, out=None):
            if len(vs) == 1 and out is None:
                return vs[0]
            return self.emit("concatenate", vs, {"axis": axis}, out=out, name=self._name(x, "cat"))

        bands = [concat([in_layout(v) for v in parts], 3) for parts in rows]
        if block is None:
            concat(bands, 2, out=out)
        else:
            self.set_blocked(out, concat(bands, 2), block)
        return True

    def dilated_as_phases(self, call: Call) -> bool:
        """Note [dilated phases]: a dilated conv as the undilated conv of its input's d x d
        phases stacked along the batch, when that conv is a Winograd one; False: not done."""
        (x, w), (out,) = call.inputs, call.outputs
        a = call.attrs
        d = tuple(a["dilation"])
        n, c, h, wd = x.type.shape
        if (
            not all(isinstance(v, int) for v in (*x.type.shape, *out.type.shape))
            or not self.use_winograd
            or d[0] != d[1]
            or d[0] == 1
            or tuple(a["strides"]) != (1, 1)
            or a.get("groups", 1) != 1
            or h % d[0]
            or wd % d[0]
            or any(p % d[0] for p in a["padding"])
        ):
            return False
        d = d[0]
        phase_type = x.type.with_shape((d * d * n, c, h // d, wd // d))
        xp = Value(self._name(x, "phases"), phase_type)
        oshape = out.type.shape
        yp = Value(
            self._name(out, "phases"),
            out.type.with_shape((d * d * n, oshape[1], oshape[2] // d, oshape[3] // d)),
        )
        if oshape[2] % d or oshape[3] % d:
            return False
        attrs = dict(a, dilation=[1, 1], padding=[p // d for p in a["padding"]])
        phase_call = Call(call.op, (xp, w), attrs, (yp,), call.span)
        plan = strategy.plan_layout(phase_call, self.target, self.conv_context(x, True))
        if plan is None or "winograd" not in plan["op"]:
            return False
        xb = self.to_block(x, plan["in_block"])
        cb, b = xb.type.shape[1], plan["in_block"]
        phases = []
        for p in range(d):
            for q in range(d):
                attrs = {
                    "begin": [0, 0, p, q, 0],
                    "end": [n, cb, h, wd, b],
                    "strides": [1, 1, d, d, 1],
                }
                phases.append(self.emit("slice", [xb], attrs, name=self._name(x, "phase")))
        stacked = self.emit("concatenate", phases, {"axis": 0}, name=xp.name)
        self.set_blocked(xp, stacked, b)
        if not self.conv(phase_call, xp, yp):
            return False
        yb, ob = self.blocked[id(yp)]
        _, obn, ph, pw, _ = yb.type.shape
        split = self.emit(
            "reshape",
            [yb],
            {"newshape": [d, d, n, obn, ph, pw, ob]},
            name=self._name(out, "phases"),
        )
        moved = self.emit(
            "transpose",
            [split],
            {"axes": [2, 3, 4, 0, 5, 1, 6]},
            name=self._name(out, "interleaved"),
        )
        merged = self.emit(
            "reshape",
            [moved],
            {"newshape": [n, obn, ph * d, pw * d, ob]},
            name=self._name(out, "nchwc"),
        )
        self.set_blocked(out, merged, ob)
        return True

    def window(self, x: Value, top: int, bottom: int, left: int, right: int) -> Value:
        """x[:, :, top:bottom, left:right], sliced in x's blocked layout where x has one."""
        n, c = x.type.shape[:2]
        xs = Value(self._name(x, "window"), x.type.with_shape((n, c, bottom - top, right - left)))
        if id(x) not in self.blocked:
            attrs = {"begin": [0, 0, top, left], "end": [n, c, bottom, right], "strides": [1] * 4}
            self.emit("slice", [x], attrs, out=xs)
            return xs
        xb, block = self.blocked[id(x)]
        attrs = {
            "begin": [0, 0, top, left, 0],
            "end": [n, xb.type.shape[1], bottom, right, block],
            "strides": [1] * 5,
        }
        self.set_blocked(xs, self.emit("slice", [xb], attrs, name=xs.name), block)
        return xs


# Note [dilated phases]
# A conv with dilation d and stride 1 reads, for the outputs of one phase (rows i = p mod d,
# columns j = q mod d), only the inputs of that same phase: output (p + d*i', q + d*j') reads
# input (p + d*(i' + t - pad/d), ...). So when d divides the map and the padding, the conv is
# the undilated conv (padding / d) of the d x d phase images x[:, :, p::d, q::d], stacked along
# the batch (TensorFlow's space_to_batch for atrous convs), and its output is the phases
# interleaved back (a reshape, a transpose, a reshape). The undilated conv can be a Winograd one
# (DeepLabV3's backbone: dilation 2 and 4 3x3 convs on 28x28 maps, direct at 1.3-1.4x ORT,
# Winograd on the phases at 0.5-0.8x): the rewrite is made only when the conv's strategy picks
# Winograd for the phase conv, since the slices and the interleave cost two copies of the data.


# Note [depthwise multipliers]
# A depthwise conv with a channel multiplier k (groups = C inputs, k * C outputs; output
# channel c * k + j reads input channel c) is k plain depthwise convs, the j-th with the
# weights of outputs j, k + j, 2k + j, ..., concatenated (channel j * C + c) and shuffled back
# with channel_shuffle(groups=k) (c * k + j <- j * C + c): all three blocked kernels, where the
# NCHW grouped conv it was ran its generic schedule.


def multiplier(call: Call) -> int:
    """k of a depthwise conv with channel multiplier k (groups = input channels, k * groups
    outputs); 1 for any other conv."""
    (x, w), groups = call.inputs, call.attrs.get("groups", 1)
    c, o = x.type.shape[1], w.type.shape[0]
    if groups > 1 and groups == c and w.type.shape[1] == 1 and o % c == 0:
        return o // c
    return 1


# Note [column convs]
# The register tile of the blocked kernels runs along a row (Note [conv micro-kernel]): a conv
# whose data is one column wide (W = 1: a (K, 1) kernel over a sequence laid out as H, Magika's
# 5x1 conv over 2048 positions) got tiles of one output and ran at a third of its roof. Data of
# width 1 has the memory of its transpose, (N, C, 1, H) (and blocked, (N, C/b, 1, H, b)), so
# such a conv runs as the conv of the transposed kernel over one row, between two reshapes that
# move no data.


def is_column(call: Call) -> bool:
    """A conv over data one column wide, with a kernel one column wide and no W padding."""
    (x, w), (y,) = call.inputs, call.outputs
    pads = call.attrs["padding"]
    return (
        x.type.shape[3] == 1
        and w.type.shape[3] == 1
        and pads[1] == pads[3] == 0
        and y.type.shape[2] > 1
    )


def swap_hw(shape) -> list[int]:
    shape = list(shape)
    shape[2], shape[3] = shape[3], shape[2]
    return shape


def as_row(call: Call) -> Call:
    """The conv of the transposed kernel over the transposed (one-row) data (Note [column
    convs]): the same result, transposed."""
    (x, w), (y,) = call.inputs, call.outputs
    a = call.attrs
    top, left, bottom, right = a["padding"]
    attrs = dict(
        a,
        strides=list(a["strides"])[::-1],
        dilation=list(a["dilation"])[::-1],
        padding=[left, top, right, bottom],
    )
    xt = Value(x.name, x.type.with_shape(swap_hw(x.type.shape)))
    wt = Constant.of(w.name, np.ascontiguousarray(w.array.transpose(0, 1, 3, 2)))
    yt = Value(y.name, y.type.with_shape(swap_hw(y.type.shape)))
    return Call(call.op, (xt, wt), attrs, (yt,), call.span)
