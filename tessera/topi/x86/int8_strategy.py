"""The CPU strategy of qnn.conv2d (int8 convs): two implementations and their knobs.

    qnn.conv2d   rows      vectors along the output row, weight words broadcast
                           (topi/x86/int8_conv2d.py: schedule_qnn_conv2d); knobs nw, oc_block
                 channels  vectors of output channels, data words broadcast: the weight
                           re-packed (OB, I/4, KH, KW, B) for qnn.conv2d_packed
                           (schedule_qnn_conv2d_packed); knobs ow_block, oc_vectors
                 float     depthwise convs between blocked activations: the float conv's
                           blocked kernel on the exact integers (Note [float depthwise])

Which one runs by default is Note [int8 conv rule]. The layout hook answers the graph
passes transform/alter_layout.py (blocked int8 activations: qnn.conv2d_nchwc) and
transform/pack_qnn_weights.py (the weight blocks of the chosen config, NCHW data).
Registered under "cpu", like the float convs: the rules are over the vector width and the
registers.
"""

from __future__ import annotations

import numpy as np

from tessera.topi.strategy import Config, ConfigSpace, Knob, Workload, register_strategy
from tessera.topi.x86.cpu import vector_registers
from tessera.topi.x86.int8_conv2d import (
    CHANNEL_ROWS,
    ROW_VECTORS,
    channel_tile,
    conv_blocking,
    depthwise_blocking,
)

# Note [int8 conv rule]
# Both kernels do one vpdpbusd lane per word of 4 input channels per output: `words` = C/4 *
# KH * KW per output. The rows kernel fills vectors of L lanes along the output row: a row of
# OW pixels costs ceil(OW / L) * L lanes (7- and 14-wide rows waste lanes, and a partial vector
# is shuffled in and out). The channels kernel fills vectors of L output channels (OC padded
# to a multiple of L) and finishes each vector in registers, but stores it to L strided NCHW
# places: one more instruction per output, as much as a vpdpbusd of L lanes. In lanes of
# vpdpbusd work per output:
#     rows:     words * ceil(OW / L) * L / OW
#     channels: words * ceil(OC / L) * L / OC + L
# The default is the cheaper one (ties: rows). The channels kernel takes groups == 1 only.
# Asked by alter_layout with context "blocked" (Note [blocked int8 activations] in
# topi/qnn.py), when OC is a multiple of L, the channels kernel stores each vector whole into
# the blocked output: its "+ L" term goes, and ties go to channels (the rows kernel writes
# NCHW, which the next blocked conv packs again); its answer is then qnn.conv2d_nchwc (data in
# the input's blocks, or NCHW, the product in blocks of L), else the NCHW kernels.


# Note [float depthwise]
# A depthwise conv has no channel reduction, so int8 gains nothing from 4 bytes per word: the
# tap-word kernel (Note [depthwise tap words] in topi/qnn.py) builds words of 4 taps per output
# per call and fills rows of 7 or 14 outputs into vectors of 8 or 16, while the float conv's
# blocked kernel (NCHW[x]c, topi/x86/conv2d.py) has a vector of channels per pixel and one FMA
# per tap, loading each input vector once per tap. Measured: MobileNetV2's int8 depthwise convs
# ~1.7 ms against fp32's ~0.7 ms on a VNNI host (docs/performance.md), and slower still on
# AVX2 without VNNI (vpmaddwd pairs). So between blocked activations (what alter_layout asks,
# context "blocked") a depthwise qnn.conv2d runs by default as the float conv on the same
# integers (implementation "float"): alter_layout emits cast(x_u - pad_value) to float32, the
# float depthwise conv (its own strategy and knobs) with the int8 weights as floats, plus
# pad_value * sum(w) per channel, cast back to int32; the epilogue (compensation, requantize)
# is unchanged. Exact: every product and partial sum is an integer below 2**24 in magnitude
# (|x_u - pad| <= 255, |w| <= 128, two sums of at most FLOAT_EXACT_TAPS taps), whatever the
# order of the additions, so the int32 result is the integer kernel's, bit for bit. Where
# those integers only go on to dequantize(out - c, scale, zero_point) with c constant per
# channel (the compensation tessera.quantize writes), alter_layout computes out - c -
# zero_point in float instead (one subtract of c + zero_point - pad_value * sum(w), exact
# while that constant and the sum stay below 2**24) and the dequantize as a multiply: the
# same float32 as float32(int32) * scale, without the two conversions and the integer
# subtract (28x28x192 3x3 with its ReLU6 requantize, AVX2: 0.071 -> 0.066 ms a call). The
# tap-word kernel stays the NCHW default (no blocked float conv: the C target,
# "alter_layout.int8" off) and an implementation the tuner can pick ("rows").
FLOAT_EXACT_TAPS = 2**24 // (2 * 255 * 128)  # 257: taps whose float sums stay exact


def _lanes(target) -> int:
    return max(1, min(16, target.vector_lanes("int32")))


class _QConv:
    """What the rule needs of a qnn.conv2d workload (None: not a static 2-d int8 conv)."""

    @staticmethod
    def of(wl: Workload, target) -> _QConv | None:
        if len(wl.inputs) != 2 or len(wl.output) != 4:
            return None
        (xs, xd), (ws, wd) = wl.inputs
        if len(xs) not in (4, 5) or len(ws) != 4 or xd not in ("uint8", "int8") or wd != "int32":
            return None
        if not all(isinstance(d, int) for d in (*xs, *ws, *wl.output)):
            return None
        q = _QConv()
        q.oc, q.c4, q.kh, q.kw = ws
        q.blocked_data = len(xs) == 5  # read as it is by the NCHW kernels (alter_layout)
        q.channels = xs[1] * xs[4] if q.blocked_data else xs[1]
        q.n, _, q.oh, q.ow = wl.output
        q.groups = wl.attr("groups", 1)
        q.depthwise = q.groups == q.channels == q.oc
        q.lanes = _lanes(target)
        q.blocks = -(-q.oc // q.lanes)
        return q

    def words(self) -> int:
        return self.c4 * self.kh * self.kw

    def rows_cost(self) -> float:
        return self.words() * -(-self.ow // self.lanes) * self.lanes / self.ow

    def channels_cost(self) -> float:
        return self.words() * self.blocks * self.lanes / self.oc + self.lanes


conv2d = register_strategy("qnn.conv2d", "cpu")


@conv2d.implementation("rows", priority=1)
def _rows_space(wl: Workload, target) -> ConfigSpace | None:
    """Knobs nw (vectors of a row per tile) and oc_block (output channels per tile), the
    register tile of schedule_qnn_conv2d; defaults: its rule, `conv_blocking` (depthwise convs:
    `depthwise_blocking`)."""
    q = _QConv.of(wl, target)
    if q is None:
        return None
    rule = depthwise_blocking if q.depthwise else conv_blocking
    lanes, nw, ocb = rule(target, q.oc, q.ow)
    regs = vector_registers(target)
    nws = tuple(sorted({*range(1, min(ROW_VECTORS, -(-q.ow // lanes)) + 1), nw}))
    ocbs = tuple(sorted({*range(1, min(2 * CHANNEL_ROWS, q.oc) + 1), ocb}))
    knobs = [Knob("nw", nws, default=nw), Knob("oc_block", ocbs, default=ocb)]
    # the accumulators, the row's data vectors and a weight broadcast fit the registers
    fits = [lambda v: v["nw"] * v["oc_block"] + v["nw"] + 1 <= max(regs, nw * ocb + nw + 1)]
    return ConfigSpace(knobs, fits)


def _channels_space(wl: Workload, target) -> ConfigSpace | None:
    q = _QConv.of(wl, target)
    if q is None or q.groups != 1 or not wl.constant or not wl.constant[1] or q.blocked_data:
        return None
    regs = vector_registers(target)

    def default(field):
        return lambda wl, target, context: channel_tile(target, q.ow, q.blocks)[field]

    ocvs = tuple(v for v in (1, 2, 3, 4) if q.blocks % v == 0)
    knobs = [
        Knob("ow_block", tuple(range(1, min(q.ow, regs) + 1)), default=default(0)),
        Knob("oc_vectors", ocvs, default=default(1)),
    ]
    return ConfigSpace(knobs, [lambda v: v["ow_block"] * v["oc_vectors"] + v["oc_vectors"] < regs])


def _channels_layout(wl: Workload, config: Config, context, target, w4: np.ndarray):
    """The weight words (O, I/4, KH, KW) as blocks (OB, I/4, KH, KW, L) of L output channels;
    asked by alter_layout (context "blocked"), between blocked activations where it can
    (Note [blocked int8 activations] in topi/qnn.py)."""
    if w4 is None:
        return None
    q = _QConv.of(wl, target)
    padded = np.zeros((q.blocks * q.lanes, *w4.shape[1:]), np.int32)
    padded[: q.oc] = w4
    blocks = np.ascontiguousarray(
        padded.reshape(q.blocks, q.lanes, *w4.shape[1:]).transpose(0, 2, 3, 4, 1)
    )
    attrs = {k: v for k, v in wl.attrs if k != "groups"}
    attrs["config"] = config.as_attr()
    if context.get("blocked") and q.oc % q.lanes == 0:
        return {"op": "qnn.conv2d_nchwc", "weight": blocks, "attrs": attrs,
                "in_block": _data_block(context), "out_block": q.lanes}  # fmt: skip
    attrs["channels"] = q.oc
    return {"op": "qnn.conv2d_packed", "weight": blocks, "attrs": attrs}


def _data_block(context) -> int | None:
    """The data layout qnn.conv2d_nchwc reads: the input's blocks when they hold whole words
    (a multiple of 4 channels); else (None) NCHW, packed into words per call, as the NCHW
    kernels do (the data of a conv after a depthwise one, which writes NCHW)."""
    given = context.get("in_block")
    return given if given is not None and given % 4 == 0 else None


conv2d.implementation("channels", priority=2, layout=_channels_layout)(_channels_space)


def _float_space(wl: Workload, target) -> ConfigSpace | None:
    """Depthwise convs within FLOAT_EXACT_TAPS taps (Note [float depthwise]); no knobs of its
    own: the float conv it becomes has its strategy's."""
    q = _QConv.of(wl, target)
    if q is None or not q.depthwise or q.kh * q.kw > FLOAT_EXACT_TAPS:
        return None
    if not (wl.constant and wl.constant[1]):
        return None
    return ConfigSpace()


def _float_layout(wl: Workload, config: Config, context, target, w4: np.ndarray):
    """The float depthwise conv alter_layout emits (context "blocked" only): its weight
    (C, 1, KH, KW) float32 (the int8 values) and attrs; "pad_value": the data's zero point
    (Note [float depthwise])."""
    if w4 is None or not context.get("blocked"):
        return None
    from tessera.topi.qnn import unpack_conv_weight

    attrs = {k: v for k, v in wl.attrs if k in ("strides", "padding", "dilation", "groups")}
    weight = unpack_conv_weight(np.asarray(w4, np.int32), 1).astype(np.float32)
    return {"op": "nn.conv2d", "weight": weight, "attrs": attrs,
            "pad_value": int(wl.attr("pad_value", 0))}  # fmt: skip


conv2d.implementation("float", priority=0, layout=_float_layout)(_float_space)


@conv2d.choose_default
def _default(wl: Workload, target, context) -> str:
    """Note [int8 conv rule]."""
    q = _QConv.of(wl, target)
    float_dw = context.get("blocked") and context.get("float_depthwise", True)
    if q is not None and float_dw and _float_space(wl, target) is not None:
        return "float"  # Note [float depthwise]
    if q is None or not context.get("rewrite", True) or _channels_space(wl, target) is None:
        return "rows"
    if context.get("blocked") and q.oc % q.lanes == 0:
        # between blocked activations: no strided stores (Note [blocked int8 activations])
        return "channels" if q.channels_cost() - q.lanes <= q.rows_cost() else "rows"
    return "channels" if q.channels_cost() < q.rows_cost() else "rows"
