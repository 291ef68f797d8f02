"""Int8 convolution and dense for Cortex-M (target "c -device=micro"): qnn.conv2d's micro
compute and schedule, and qnn.dense's schedule, register tiles of scalar int32 accumulators.

    acc = qnn_conv2d_micro(x, w4, strides=..., padding=..., dilation=..., groups=..., pad_value=zp)
    s = schedule_qnn_conv2d_micro([requantize(acc + bias, scale)], target, config)

Both forms compute what qnn.conv2d means (sum of x_u w' over each window; Note [int8 operands]
in topi/qnn.py); which one a workload takes is `uses_words` (the strategy's implementations
"dot4" and "bytes" in topi/micro/strategy.py apply exactly where it says):

- dot4, channels per group a multiple of 4 (pointwise and ordinary convs): topi.qnn's packed
  words (4 channels of x_u per int32, packed once per call) times the weight words, one
  `dot_u8i8` per pair of words: two SMLADs on cores with the DSP extension (Note [DSP dot] in
  codegen/micro.py). A tile of ocb output channels x nw output pixels keeps ocb * nw
  accumulators in registers over the whole reduction, and gcc widens each word once per tile.
- bytes, other channel counts (depthwise, a first conv over 1 or 3 channels): a word would hold
  one useful byte (4x the products, 4x the packed input's RAM), so the padded input holds one
  byte per value (x_u as uint8), built once per call, and each product is one
  multiply-accumulate (MLA).

The epilogue (compensation, bias, requantize, ReLU) runs on the tile in registers and stores
straight into the NCHW output.
"""

from __future__ import annotations

from tessera import te, tir
from tessera.tir import op as tir_op
from tessera.topi.generic import inline_injective
from tessera.topi.micro.mve import (
    cache_channel_constants,
    schedule_column_tiles,
    tile_channels_columns,
    tiled_stage,
)
from tessera.topi.qnn import CONV_TAG, DENSE_TAG, PACK_TAG, conv_out_size, qnn_conv2d
from tessera.topi.strategy import Config, record_config
from tessera.topi.x86.int8_dense import schedule_pack

BYTES_TAG = "micro_qconv_bytes"
PAD_TAG = "micro_qconv_pad"


def _static(shape) -> list[int]:
    return [int(d.value) if hasattr(d, "value") else int(d) for d in shape]


def _find(outs, tag: str) -> te.Tensor | None:
    from tessera.topi.generic import traverse

    found = []
    traverse(outs, lambda op: found.append(op.output(0)) if op.tag == tag else None)
    return found[0] if found else None


def uses_words(in_per_group: int) -> bool:
    """The dot4 form (packed words, SMLAD) applies when a group's channels fill whole words."""
    return in_per_group % 4 == 0


def qnn_conv2d_micro(x, w4, *, strides, padding, dilation, groups=1, pad_value=0) -> te.Tensor:
    """qnn.conv2d's compute for micro targets: the words form or the bytes form (module doc)."""
    c, cg = int(x.shape[1].value), int(x.shape[1].value) // groups
    if uses_words(cg):
        return qnn_conv2d(x, w4, strides=strides, padding=padding, dilation=dilation,
                          groups=groups, pad_value=pad_value)  # fmt: skip
    n, _, h, w = _static(x.shape)
    oc, _, kh, kw = _static(w4.shape)
    if c % groups or oc % groups:
        raise ValueError(f"qnn.conv2d: data {x.shape}, weight words {w4.shape}, groups {groups}")
    (sh, sw), (dh, dw) = strides, dilation
    pt, pl, pb, pr = padding
    oh = conv_out_size(h, kh, sh, pt, pb, dh)
    ow = conv_out_size(w, kw, sw, pl, pr, dw)
    signed = str(x.dtype) == "int8"
    fill = tir.const(int(pad_value) & 255, "int32")

    def padded(b, ch, y, z):
        inside = tir_op.all(y >= pt, y < pt + h, z >= pl, z < pl + w)
        v = x[b, ch, tir_op.max(tir_op.min(y - pt, h - 1), 0),
              tir_op.max(tir_op.min(z - pl, w - 1), 0)].astype("int32")  # fmt: skip
        u = v + 128 if signed else v  # x_u: int8 data with its sign bit flipped
        return tir_op.if_then_else(inside, u, fill).astype("uint8")

    xp = te.compute((n, c, h + pt + pb, w + pl + pr), padded, name="x_padded", tag=PAD_TAG)
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    rc = te.reduce_axis((0, cg), name="rc") if cg > 1 else None
    opg = oc // groups

    def weight(o, r):
        if r is None:  # one channel per group: byte 0 of the word
            return w4[o, 0, ry, rx].astype("int8").astype("int32")
        word = tir_op.shift_right(w4[o, r // 4, ry, rx], (r % 4) * 8)
        return word.astype("int8").astype("int32")

    def body(b, o, y, z):
        ch = (o // opg) * cg + (rc if rc is not None else 0)
        v = xp[b, ch, y * sh + ry * dh, z * sw + rx * dw].astype("int32")
        axes = [rc, ry, rx] if rc is not None else [ry, rx]
        return te.sum(v * weight(o, rc), axis=axes)

    return te.compute((n, oc, oh, ow), body, name="qconv_bytes", tag=BYTES_TAG)


def _geometry(anchor: te.Tensor, words: bool) -> tuple[int, int, int]:
    """(output channels, output columns, output channels per group) of the conv stage."""
    oc, ow = _static(anchor.shape)[1], _static(anchor.shape)[3]
    tag = PACK_TAG if words else PAD_TAG  # x_words (N, groups * C4, ...), x_padded (N, C, ...)
    data = next(t for t in anchor.op.input_tensors if t.op.tag == tag)
    per_group = {iv.var.name: _static([iv.dom.extent])[0] for iv in anchor.op.reduce_axis}
    in_per_group = per_group.get("rc", 1)  # words per group (dot4) or channels (bytes)
    groups = _static(data.shape)[1] // in_per_group
    return oc, ow, oc // groups


def _schedule_acc(s, acc):
    stage = s[acc]
    n, oc, oh, ow = stage.op.axis
    reduce = list(stage.op.reduce_axis)
    stage.reorder(n, oh, *reduce, oc, ow)
    stage.unroll(oc)
    stage.unroll(ow)
    # the kernel's columns unrolled: no loop counter per tap, and neighbouring pixels of a tile
    # share their loads of the data (and, dot4, its widening) between taps
    stage.unroll(reduce[-1])


def schedule_qnn_conv2d_micro(outs, target=None, config: Config | None = None) -> te.Schedule:
    """Register tiles of config's ocb output channels x nw output pixels (module docstring)."""
    from tessera.topi.micro.strategy import default_tile

    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    s = te.create_schedule([t.op for t in outs])
    inline_injective(s, outs)
    anchor = _find(outs, BYTES_TAG) or _find(outs, CONV_TAG)
    words = anchor.op.tag == CONV_TAG
    if words:
        schedule_pack(s, outs, target)
    oc, ow, opg = _geometry(anchor, words)
    if config is None:  # scheduled outside a build (no task): the strategy's default rule
        config = Config("dot4" if words else "bytes", default_tile(words, oc, ow, opg))
    ocb, nw = int(config["ocb"]), int(config["nw"])
    acc = s.cache_write(anchor, "local")
    shape = _static(anchor.shape)
    view = [t for t in outs if t.op is not anchor.op]
    if len(outs) == 1 and view and _static(outs[0].shape) == shape:
        s[anchor].compute_inline()
        tiled = outs[0]
    else:
        tiled = anchor
    oco, owo = tile_channels_columns(s, tiled, ocb, nw)
    s[acc].compute_at(s[tiled], owo)
    cache_channel_constants(s, tiled, anchor, owo)
    for t in view if tiled is anchor else ():
        s[t].compute_root()
    if not words:  # the padded input, once per call (one byte per value)
        s[next(t for t in anchor.op.input_tensors if t.op.tag == PAD_TAG)].compute_root()
    _schedule_acc(s, acc)
    record_config(s, config)
    return s


def schedule_qnn_dense_micro(outs, target=None, config: Config | None = None) -> te.Schedule:
    """qnn.dense (topi.qnn's packed words of x times weight panels, one dot_u8i8 per pair of
    words): tiles of config's nb output columns, nb accumulators in registers over the whole
    k loop, each step widening one word of x for all nb columns (Note [micro tile rule])."""
    from tessera.topi.micro.strategy import default_columns

    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    s = te.create_schedule([t.op for t in outs])
    inline_injective(s, outs)
    schedule_pack(s, outs, target)
    anchor = _find(outs, DENSE_TAG)
    rows, cols = _static(anchor.shape)
    if config is None:  # scheduled outside a build (no task): the strategy's default rule
        config = Config("dot4", nb=default_columns(cols))
    nb = int(config["nb"])
    acc = s.cache_write(anchor, "local")
    schedule_column_tiles(s, tiled_stage(s, outs, anchor, rows, cols), acc, nb)
    record_config(s, config)
    return s
