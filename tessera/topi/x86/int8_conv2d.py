"""x86 schedule of qnn.conv2d: NCHW output, vectors along the output row, vpdpbusd per word.

    s = schedule_qnn_conv2d([requantize(qnn_conv2d(x, w4, ...) - comp, scale)], target)

The data is packed once per call into int32 words of 4 channels (N, C/4, H+pads, W+pads), so a
vector of 16 (AVX-512) or 8 (AVX2) consecutive output pixels of one row reads 16 consecutive
words (stride 1) and meets one broadcast weight word per output channel: a tile of ocb output
channels x nw vectors of pixels is ocb * nw accumulators in registers across the whole
(channel words, kh, kw) reduction, each step ocb broadcasts + nw loads for ocb * nw vpdpbusd.
The epilogue (compensation, bias, requantize, ReLU, residual) runs on the tile in registers and
stores straight into the NCHW output. Tiles (n, channel block, row) run in parallel.

1x1, 3x3, strided and grouped convs share this kernel. Depthwise convs take words of 4 taps
of a kernel row (Note [depthwise tap words] in topi/qnn.py), built per tile of channels from
its padded uint8 copy, both kept in cache next to the tile (`_schedule_depthwise`). Knobs
(defaults are the rule below): lanes, nw (vectors per row tile), ocb (channels per tile).

# Dispatch point (int8): registered on qnn.conv2d in tessera/graph/ops/qnn.py; becomes the
# "int8" implementation of conv2d's x86 strategy when that table lands.
"""

from __future__ import annotations

from tessera import te
from tessera.topi.generic import inline_injective, schedule_elementwise_stage
from tessera.topi.qnn import CONV_TAG, DW_PACK_TAG, DW_TAG
from tessera.topi.rules import RuleKnob
from tessera.topi.x86.cpu import (
    int8_fixed_registers,
    int8_operand_registers,
    stack_share,
    vector_registers,
)
from tessera.topi.x86.dense import find_tagged
from tessera.topi.x86.int8_dense import schedule_pack

ROW_VECTORS = 4  # the rule's most vectors of a row per tile (knob nw of the "rows" strategy)
CHANNEL_ROWS = 8  # the rule's most output channels per tile (knob oc_block)


def conv_lanes(target, ow: int) -> int:
    """The int32 lanes of a vector along the row: the target's (at most 16, the widest
    vpdpbusd), halved while half a vector covers the row (7x7 maps waste fewer lanes)."""
    lanes = min(16, max(1, target.vector_lanes("int32"))) if target is not None else 4
    while lanes > 4 and lanes // 2 >= ow:
        lanes //= 2
    return lanes


def conv_blocking(target, oc: int, ow: int) -> tuple[int, int, int]:
    """(lanes, nw, ocb): vectors of int32 lanes along the row, nw of them per tile (enough to
    cover the row, at most ROW_VECTORS), and as many output channels as leave registers for
    the loads (at most CHANNEL_ROWS): the defaults of the "rows" strategy's knobs."""
    lanes = conv_lanes(target, ow)
    nw = max(1, min(ROW_VECTORS, -(-ow // lanes)))
    regs = vector_registers(target) if target is not None else 16
    ocb = max(1, min(CHANNEL_ROWS, (regs - nw - 1) // nw, oc))
    return lanes, nw, ocb


def depthwise_blocking(target, oc: int, ow: int) -> tuple[int, int, int]:
    """(lanes, nw, ocb) of a depthwise conv: vectors along the row as `conv_blocking`, and as
    many channels per tile as give DEPTHWISE_CHAINS independent accumulators (a channel's
    vectors share no operand with another's: more channels buy only latency hiding, and each
    adds its tap words to the tile's cache footprint)."""
    lanes = conv_lanes(target, ow)
    nw = max(1, min(ROW_VECTORS, -(-ow // lanes)))
    return lanes, nw, max(1, min(oc, -(-DEPTHWISE_CHAINS.value() // nw)))


DEPTHWISE_CHAINS = RuleKnob(
    "int8.depthwise_chains", (2, 4, 6, 8), 4,
    "independent accumulators per int8 depthwise tile (at least the dot product's latency)",
)  # fmt: skip


def _tile(s, out, lanes, nw, ocb):
    stage = s[out]
    n, oc, oh, ow = stage.op.axis
    oco, oci = stage.split(oc, factor=ocb)
    owo, owi = stage.split(ow, factor=lanes * nw)
    stage.reorder(n, oco, oh, owo, oci, owi)
    par = stage.fuse(n, oco, oh)
    stage.parallel(par)
    owv, owl = stage.split(owi, factor=lanes)
    stage.unroll(oci)
    stage.unroll(owv)
    stage.vectorize(owl)
    return owo


def _schedule_acc(s, acc, lanes):
    stage = s[acc]
    n, oc, oh, ow = stage.op.axis
    owv, owl = stage.split(ow, factor=lanes)
    stage.reorder(n, oh, *stage.op.reduce_axis, oc, owv, owl)  # (rc,) ry, rx
    stage.unroll(oc)
    stage.unroll(owv)
    stage.vectorize(owl)


def schedule_qnn_conv2d(outs, target=None, config=None) -> te.Schedule:
    """Row tiles of nw vectors x ocb output channels (`config`: the "rows" strategy's knobs
    nw and oc_block; None or another implementation: the rule, `conv_blocking`)."""
    from tessera.topi.strategy import record_config

    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    s = te.create_schedule([t.op for t in outs])
    inline_injective(s, outs)
    schedule_pack(s, outs, target)
    if any(t.op.tag == DW_TAG for t in _stages(outs)):
        return _schedule_depthwise(s, outs, target, config)
    anchor = find_tagged(outs, CONV_TAG)
    _, oc, _, ow = (int(d.value) for d in anchor.shape)
    lanes, nw, ocb = conv_blocking(target, oc, ow)
    if config is not None and config.impl == "rows" and "nw" in config:
        nw, ocb = config["nw"], config["oc_block"]
        record_config(s, config)
    acc = s.cache_write(anchor, "local")
    view = [t for t in outs if t.op is not anchor.op]
    same = (
        len(outs) == 1
        and view
        and [int(d.value) for d in outs[0].shape] == [int(d.value) for d in anchor.shape]
    )
    if same:
        s[anchor].compute_inline()
        tile = _tile(s, outs[0], lanes, nw, ocb)
        s[acc].compute_at(s[outs[0]], tile)
    else:
        tile = _tile(s, anchor, lanes, nw, ocb)
        s[acc].compute_at(s[anchor], tile)
        for t in view:
            schedule_elementwise_stage(s, t, target)
    _schedule_acc(s, acc, lanes)
    return s


def _static(shape) -> list[int]:
    return [int(d.value) for d in shape]


def _stages(outs) -> list[te.Tensor]:
    from tessera.topi.generic import traverse

    found = []
    traverse(outs, lambda op: found.append(op.output(0)))
    return found


# a block's data stages stay on the stack up to 1 / DEPTHWISE_STACK_SHARE of the target's thread
# stack (`stack_share` in cpu.py: 512 KiB of the default 8 MiB)
DEPTHWISE_STACK_SHARE = 16


def _block_bytes(anchor, ocb: int) -> int:
    """Bytes of one channel block's padded rows and tap words (their shapes per channel)."""
    total = 0
    for t in _stages([anchor]):
        if t.op.tag == DW_PACK_TAG:
            per_channel = 1
            for d in t.shape[len(t.shape) - 3 :]:
                per_channel *= int(d.value)
            total += per_channel * ocb * t.dtype.itemsize
    return total


def _schedule_depthwise(s, outs, target, config) -> te.Schedule:
    """Tiles of ocb channels x nw row vectors, parallel over channel blocks; each block's
    padded rows and tap words are built at the block (in cache), then its rows run through
    the tile, one dot_u8i8 per (kernel row, tap word) and vector."""
    from tessera.topi.generic import const_extent, vector_lanes
    from tessera.topi.strategy import record_config

    anchor = find_tagged(outs, DW_TAG)
    _, oc, _, ow = (int(d.value) for d in anchor.shape)
    lanes, nw, ocb = depthwise_blocking(target, oc, ow)
    if config is not None and config.impl == "rows" and "nw" in config:
        nw, ocb = config["nw"], config["oc_block"]
        record_config(s, config)
    acc = s.cache_write(anchor, "local")
    view = [t for t in outs if t.op is not anchor.op]
    shape = [int(d.value) for d in anchor.shape]
    if len(outs) == 1 and view and [int(d.value) for d in outs[0].shape] == shape:
        s[anchor].compute_inline()
        tiled = outs[0]
    else:
        tiled = anchor
        for t in view:
            schedule_elementwise_stage(s, t, target)
    stage = s[tiled]
    n, oc_axis, oh, ow_axis = stage.op.axis
    oco, oci = stage.split(oc_axis, factor=ocb)
    owo, owi = stage.split(ow_axis, factor=lanes * nw)
    stage.reorder(n, oco, oh, owo, oci, owi)
    block = stage.fuse(n, oco)
    stage.parallel(block)
    owv, owl = stage.split(owi, factor=lanes)
    stage.unroll(oci)
    stage.unroll(owv)
    stage.vectorize(owl)
    s[acc].compute_at(stage, owo)
    _schedule_acc(s, acc, lanes)
    stacked = _block_bytes(anchor, ocb) <= stack_share(target, DEPTHWISE_STACK_SHARE)
    for t in _stages([anchor]):
        if t.op.tag != DW_PACK_TAG:
            continue
        s[t].compute_at(stage, block)
        if stacked:  # on the stack: no allocation per block (a heap block each took ~1 us)
            s[t].set_scope("local")
        inner = s[t].op.axis[-1]
        width = vector_lanes(target, t.dtype)
        extent = const_extent(inner) or 0
        if 1 < extent <= width:  # a short row (14 or 7 wide): one partial vector
            s[t].vectorize(inner)
        elif width > 1 and extent > width:
            s[t].vectorize(s[t].split(inner, factor=width)[1])
    return s


# -- output channels in vectors (qnn.conv2d_packed) --------------------------------------------


def channel_tile(target, ow: int, blocks: int) -> tuple[int, int]:
    """(ow_block, oc_vectors) of qnn.conv2d_packed: oc_vectors blocks of output channels (2
    where the blocks pair up) times ow_block pixels of a row in registers, at most half of the
    vector registers as accumulators (the rest hold weight vectors, the broadcast word and the
    epilogue's temporaries: more spill); a row longer than that is cut into equal tiles."""
    regs = vector_registers(target) if target is not None else 16
    ocv = 2 if blocks % 2 == 0 else 1
    # on vpmaddwd pairs the operands take two registers each (Note [int8 pair registers])
    per = int8_operand_registers(target)
    free = regs - per * (ocv + 1) - int8_fixed_registers(target) if per > 1 else regs
    most = max(1, min(regs // 2, free) // ocv)
    tiles = -(-ow // most)
    return -(-ow // tiles), ocv


def schedule_qnn_conv2d_packed(outs, target=None, config=None) -> te.Schedule:
    """The (N, OB, OH, OW, B) product in register tiles of ow_block pixels x oc_vectors
    blocks (each pixel's data word broadcast, each block one vector of weights), computed
    at root; the epilogue (compensation, requantize, ...) reads it back in NCHW."""
    from tessera.topi.qnn import CONV_BLOCKED_TAG
    from tessera.topi.strategy import record_config

    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    s = te.create_schedule([t.op for t in outs])
    inline_injective(s, outs)
    schedule_pack(s, outs, target)
    anchor = find_tagged(outs, CONV_BLOCKED_TAG)
    _, blocks, _, ow, _ = (int(d.value) for d in anchor.shape)
    owb, ocv = channel_tile(target, ow, blocks)
    if config is not None:
        owb, ocv = config["ow_block"], config["oc_vectors"]
        record_config(s, config)
    acc = s.cache_write(anchor, "local")
    block = int(anchor.shape[4].value)
    if len(outs) == 1 and len(outs[0].shape) == 4:
        # the epilogue in the tile: each vector of `block` channels of one pixel is finished
        # in registers and stored to its NCHW places (a strided store)
        s[anchor].compute_inline()
        stage = s[outs[0]]
        n, o, oh, z = stage.op.axis
        oo, oi = stage.split(o, factor=block * ocv)
        obi, lane = stage.split(oi, factor=block)
        zo, zi = stage.split(z, factor=owb)
        stage.reorder(n, oo, oh, zo, obi, zi, lane)
        stage.parallel(stage.fuse(n, oo, oh))
        stage.unroll(obi)
        stage.unroll(zi)
        stage.vectorize(lane)
    else:
        # blocked output (qnn.conv2d_nchwc, Note [blocked int8 activations] in topi/qnn.py):
        # a lone epilogue in the anchor's layout is finished in the tile and each pixel's
        # vector of `block` channels stored whole; other epilogues read the product back
        fused = len(outs) == 1 and outs[0].op is not anchor.op
        fused = fused and _static(outs[0].shape) == _static(anchor.shape)
        if fused:
            s[anchor].compute_inline()
        stage = s[outs[0]] if fused else s[anchor]
        n, ob, oh, z, lane = stage.op.axis
        obo, obi = stage.split(ob, factor=ocv)
        zo, zi = stage.split(z, factor=owb)
        stage.reorder(n, obo, oh, zo, obi, zi, lane)
        stage.parallel(stage.fuse(n, obo, oh))
        stage.vectorize(lane)
        for t in outs if not fused else ():
            if t.op is not anchor.op:  # the product itself an output: tiled above
                schedule_elementwise_stage(s, t, target)
    s[acc].compute_at(stage, zo)
    a = s[acc]
    n, ob, oh, z, lane = a.op.axis
    rc, ry, rx = a.op.reduce_axis
    a.reorder(n, oh, rc, ry, rx, ob, z, lane)
    a.unroll(ob)
    a.unroll(z)
    a.vectorize(lane)
    return s
