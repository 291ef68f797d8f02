"""Cross-layer equalization of activations (after Nagel et al., "Data-Free Quantization Through
Weight Equalization and Bias Correction", 2019), a float-to-float rewrite before calibration.

    classes = channel_classes(func)           # values that can be rescaled channel by channel
    ranges = {id(v): per-channel max |v|}     # of each class's quantized values (calibration)
    func, n = equalize(func, classes, ranges) # the same float function, channels evened out

A class is a set of NCHW values that share their channels: a conv's output, its bias add,
ReLU / clip (ReLU6), zero padding, max-pool, and the adds of a residual stream, which tie the
outputs of several convs together. Dividing every value of a class by a positive scale s[c] per
channel keeps the function when the convs that produce the class divide their output rows by
s, its bias adds divide their constants by s, a clip divides its bounds by s (ReLU6 becomes a
per-channel minimum: Note [equalized clip]), and the convs that read it multiply their input
columns by s. Note [activation equalization] says why and how s is chosen.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tessera.graph.ir import Call, Constant, Function, Value
from tessera.graph.op import get_op
from tessera.quantize.rewrite import conv_input_channels

# Note [activation equalization]
# tessera.quantize gives each activation one uint8 scale, from the range of its widest channel;
# a channel that spans a twentieth of that range is quantized with ~4 bits. In depthwise
# networks (MobileNet, EfficientNet-Lite) the channels of the linear bottlenecks and their
# residual streams differ 2-4x in range. Per-channel weights make the producing convs' output
# rows free to rescale (a row's int8 codes do not change when the row is multiplied by a
# positive number), so s[c] = (r[c] / max(r)) ** power (r: a channel's largest |value| over
# the calibration feeds) narrows the spread at no cost to those weights. The reading convs pay:
# their input columns are multiplied by s, so a narrow channel's column shrinks within its
# row's int8 range (for a depthwise reader, one column per row, that is free too). power = 1
# evens the ranges out fully; on EfficientNet-Lite0, measured on views outside the
# calibration set, power 1/2 raised the SQNR of every conv reading a residual stream (by 0.5-2
# dB) where power 1 lost up to 4 dB on the last stages (the weights' share). `floor` bounds s
# from below (dead channels, r = 0). Nagel et al. balance the two convs' weight ranges, which
# per-channel weights do not need; the float function is unchanged either way
# (tests/quantize/test_equalize.py checks it).

# Note [sparse channels]
# A ReLU's or ReLU6's output is sparse: a channel that stays near zero on the calibration feeds
# can fire on another input. Scaled up by 1 / s it then saturates at the tensor's upper end,
# where without equalization it had the headroom of the widest channel. On EfficientNet-Lite0,
# equalizing its ReLU6 outputs cost the depthwise and projection convs of the last stages
# 10-20 dB of SQNR on views outside the calibration set (agreement with fp32 fell from 92% to
# 80%), so classes with a ReLU or clip are left alone by default (`equalize_rectified`).

# Note [equalized clip]
# clip(x / s, a, b) = clip(x, a s, b s) / s for s > 0: ReLU (a = 0, b = inf) is unchanged and
# ReLU6's upper bound becomes 6 / s[c], a per-channel constant, so the clip turns into
# minimum(maximum(x, a / s), b / s) with constants of shape (C, 1, 1): element-wise ops with a
# per-channel operand, like the bias add, that fuse into the producing kernel's epilogue.

_PASS = ("nn.relu", "clip", "pad", "nn.max_pool2d", "multiply", "add")


@dataclass
class ChannelClass:
    """Values (by id) that share a per-channel scale; the calls that produce and read them."""

    channels: int
    values: dict = field(default_factory=dict)  # id -> Value
    producers: list = field(default_factory=list)  # body indices of convs writing a value
    readers: list = field(default_factory=list)  # body indices of convs reading a value
    ok: bool = True
    rectified: bool = False  # a ReLU or clip makes some of its values (Note [sparse channels])

    def quantized(self, func: Function) -> list[Value]:
        """The class's values that a conv reads (those tessera.quantize quantizes)."""
        reads = {id(func.body[k].inputs[0]) for k in self.readers}
        return [v for i, v in self.values.items() if i in reads]


def _const_weight_conv(call: Call) -> bool:
    return (call.op.name == "nn.conv2d" and len(call.inputs) == 2
            and isinstance(call.inputs[1], Constant)
            and str(call.inputs[1].type.dtype) == "float32")  # fmt: skip


def _per_channel(c: Value, channels: int) -> np.ndarray | None:
    """A constant that broadcasts against (N, C, H, W) along C alone, as (C, 1, 1) floats."""
    if not isinstance(c, Constant) or c.type.ndim > 4:
        return None
    shape = (1,) * (4 - c.type.ndim) + tuple(c.type.shape)
    if shape[0] != 1 or shape[2:] != (1, 1) or shape[1] not in (1, channels):
        return None
    a = np.asarray(c.array, np.float32).reshape(-1)
    return np.broadcast_to(a, (channels,)).reshape(channels, 1, 1).copy()


def _passes(call: Call, x: Value) -> bool:
    """Whether call's output is its data input x rescaled by the same per-channel scale."""
    name, channels = call.op.name, x.type.shape[1]
    others = [v for v in call.inputs if v is not x]
    if name in ("nn.relu", "nn.max_pool2d"):  # NCHW, positively homogeneous
        return len(call.inputs) == 1
    if name == "clip":
        return True
    if name == "pad":
        pads = call.attrs["pad_width"]
        return (
            call.attrs.get("mode", "constant") == "constant"
            and call.attrs.get("value", 0) == 0
            and pads[1] == 0
            and pads[5] == 0
        )  # fmt: skip  (no channel padding)
    if name in ("add", "multiply") and len(others) == 1:
        o = others[0]
        if isinstance(o, Constant):
            return _per_channel(o, channels) is not None
        return name == "add" and o.type == x.type  # a residual add: o joins the class
    return False


def channel_classes(func: Function) -> list[ChannelClass]:
    """The classes of func's 4-D float values that convs produce and read, each with every
    producer and reader known; a class some other op reads or writes (a global pool, a
    reshape, the function's output) is left out."""
    producer = {id(v): k for k, c in enumerate(func.body) for v in c.outputs}
    parent: dict[int, int] = {}

    def find(i):
        while parent.get(i, i) != i:
            i = parent[i]
        return i

    def union(a, b):
        parent[find(a)] = find(b)

    values: dict[int, Value] = {}
    for call in func.body:
        x = call.inputs[0] if call.inputs else None
        if x is None or isinstance(x, Constant) or x.type.ndim != 4 or len(call.outputs) != 1:
            continue
        if call.op.name in _PASS and _passes(call, x):
            for v in (x, call.outputs[0], *call.inputs[1:]):
                if not isinstance(v, Constant):
                    values[id(v)] = v
                    union(id(v), id(x))
    for call in func.body:
        if _const_weight_conv(call):
            for v in (call.inputs[0], call.outputs[0]):
                values.setdefault(id(v), v)
    classes: dict[int, ChannelClass] = {}
    for i, v in values.items():
        cls = classes.setdefault(find(i), ChannelClass(int(v.type.shape[1])))
        cls.values[i] = v
    outputs = {id(v) for v in func.outputs}
    for cls in classes.values():
        for i, v in cls.values.items():
            k = producer.get(i)
            if k is None or i in outputs or str(v.type.dtype) != "float32":
                cls.ok = False
                continue
            call = func.body[k]
            if _const_weight_conv(call):
                cls.producers.append(k)
            elif not (call.op.name in _PASS and _passes(call, call.inputs[0])):
                cls.ok = False
            cls.rectified |= call.op.name in ("nn.relu", "clip")
    for k, call in enumerate(func.body):
        for pos, v in enumerate(call.inputs):
            cls = classes.get(find(id(v))) if id(v) in values else None
            if cls is None or isinstance(v, Constant):
                continue
            if _const_weight_conv(call) and pos == 0:
                cls.readers.append(k)
            elif not (call.op.name in _PASS and _passes(call, call.inputs[0])
                      and id(call.inputs[0]) in cls.values):  # fmt: skip
                cls.ok = False
    return [c for c in classes.values() if c.ok and c.producers and c.readers]


def channel_scales(ranges: np.ndarray, floor: float, power: float = 1.0) -> np.ndarray:
    """s[c] = (r[c] / max(r)) ** power, at least `floor` (Note [activation equalization])."""
    r = np.asarray(ranges, np.float64)
    top = float(r.max()) if r.size else 0.0
    if top <= 0:
        return np.ones_like(r, np.float32)
    return np.clip((r / top) ** power, floor, 1.0).astype(np.float32)


def _scaled_conv_weight(w: np.ndarray, groups: int, rows, cols) -> np.ndarray:
    """w (O, I/groups, KH, KW) with row o divided by rows[o] and the column that reads input
    channel c multiplied by cols[c] (None: unchanged)."""
    w = np.array(w, np.float32)
    o_count, per_group = w.shape[0], w.shape[1]
    if rows is not None:
        w /= rows.reshape(-1, 1, 1, 1)
    if cols is not None:
        channel = conv_input_channels(o_count, per_group, groups)
        w *= cols.reshape(-1)[channel][:, :, None, None]
    return w


def equalize(func: Function, classes: list[ChannelClass], ranges: dict, floor: float = 1 / 64,
             power: float = 0.5, rectified: bool = False,
             rectified_floor: float | None = None) -> Function:  # fmt: skip
    """(func with each class's values divided by channel_scales(max of its quantized values'
    per-channel ranges), the number of classes rescaled); ranges: {id(value): per-channel
    max |value|}; classes with a ReLU or clip only when `rectified`, their scales at least
    `rectified_floor` (None: `floor`; Note [sparse channels]). The same function."""
    scale_of: dict[int, np.ndarray] = {}
    count = 0
    rows: dict[int, np.ndarray] = {}
    cols: dict[int, np.ndarray] = {}
    for cls in classes:
        r = [ranges[id(v)] for v in cls.quantized(func) if id(v) in ranges]
        if not r or (cls.rectified and not rectified):
            continue
        lowest = rectified_floor if cls.rectified and rectified_floor is not None else floor
        s = channel_scales(np.max(r, axis=0), lowest, power).reshape(-1, 1, 1)
        if np.all(s == 1):
            continue
        for i in cls.values:
            scale_of[i] = s
        for k in cls.producers:
            rows[k] = s
        for k in cls.readers:
            cols[k] = s
        count += 1
    if not scale_of:
        return func, 0
    body, constants = [], list(func.constants)

    def const(array, hint):
        c = Constant.of(f"{hint}_eq{len(constants)}", np.ascontiguousarray(array, np.float32))
        constants.append(c)
        return c

    for k, call in enumerate(func.body):
        out = call.outputs[0] if call.outputs else None
        if k in rows or k in cols:
            w = call.inputs[1]
            new = _scaled_conv_weight(w.array, call.attrs.get("groups", 1), rows.get(k),
                                      cols.get(k))  # fmt: skip
            call = Call(call.op, (call.inputs[0], const(new, w.name)), call.attrs, call.outputs,
                        call.span)  # fmt: skip
        elif (
            out is not None
            and id(out) in scale_of
            and call.op.name == "add"
            and isinstance(call.inputs[1], Constant)
        ):
            bias = _per_channel(call.inputs[1], out.type.shape[1]) / scale_of[id(out)]
            call = Call(call.op, (call.inputs[0], const(bias, call.inputs[1].name)), call.attrs,
                        call.outputs, call.span)  # fmt: skip
        elif out is not None and id(out) in scale_of and call.op.name == "clip":
            body.extend(_equalized_clip(call, scale_of[id(out)], const))
            continue
        body.append(call)
    used = {id(v) for c in body for v in c.inputs} | {id(v) for v in func.outputs}
    return Function(func.name, func.params, tuple(body), func.outputs,
                    tuple(c for c in constants if id(c) in used)), count  # fmt: skip


def _equalized_clip(call: Call, s: np.ndarray, const) -> list[Call]:
    """clip(x, a, b) on values divided by s: minimum(maximum(x, a / s), b / s) (Note
    [equalized clip]); the last call defines the clip's output."""
    x, out = call.inputs[0], call.outputs[0]
    lo, hi = float(call.attrs["a_min"]), float(call.attrs["a_max"])
    steps = [(op, bound) for op, bound in (("maximum", lo), ("minimum", hi)) if np.isfinite(bound)]
    calls = []
    for j, (op, bound) in enumerate(steps):
        o = get_op(op)
        c = const(np.float32(bound) / s, f"{out.name}_{op}")
        last = j == len(steps) - 1
        (t,) = o.infer_type([x.type, c.type], {})
        y = out if last else Value(f"{out.name}_{op}", t)
        calls.append(Call(o, (x, c), {}, (y,), call.span))
        x = y
    return calls or [call]
