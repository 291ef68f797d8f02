"""Int8 convolution and dense on Arm MVE (Helium, the Cortex-M55): the reduction contiguous in
memory, 16 int8 products per VMLADAVA (Note [MVE dot] in codegen/micro.py).

    %acc = qnn.conv2d_mve(%x, %wm, %comp, strides=.., padding=.., dilation=.., groups=..,
                          pad_value=zp, kernel=[KH, KW])        # %wm: i8[O, KH, T, RP]
    %acc = qnn.dense_mve(%x, %wm, %comp, units=N)               # %wm: i8[N, KP]

Both compute what qnn.conv2d and qnn.dense mean, sum x_u w' (Note [int8 operands] in
topi/qnn.py), in the form MVE wants. VMLADAV multiplies bytes of one sign, so the data is
x_s = x_u - 128 as int8 (int8 data as it is, uint8 data with its sign bit flipped), and the
difference, 128 * (sum of the output channel's weights), is the constant `comp`, computed with
the packed weight at compile time (`pack_conv`, `pack_dense`): sum x_u w' = sum x_s w' + comp.

Note [MVE layouts]: a dot of 16 bytes needs 16 consecutive bytes of one reduction in both the
data and the weight. The kernels read a *run* of R bytes per step, in chunks of 16 (the last
one shorter, under a VCTP predicate), with the weight's run zero-padded to RP, a multiple of 16:

| form   | when                          | data (padded, built once per call) | run          |
|--------|-------------------------------|------------------------------------|--------------|
| rows   | groups == 1, dilation_w == 1  | NHWC, rows of WP * C bytes          | KW * C       |
| planes | one channel per group (dw 1)  | NCHW planes                        | KW           |
| taps   | any other conv                | NHWC, rows of WP * C bytes          | C per group  |

rows merges the kernel's columns and the channels into one run (a 1x1 conv's run is its C
channels; DS-CNN's first conv, 10x4 over one channel, runs 4 bytes). A strided 1x1 conv
without pads copies only the pixels it reads. The weight is
(O, KH, T, RP): T = KW for taps, else 1. The dense weight is (N, KP), K zero-padded to KP.
The register tile is the scalar dot's: ocb output channels x nw output pixels, their
accumulators live over the reduction, each chunk loading one vector per channel and one per
pixel (topi/micro/strategy.py, Note [MVE tile rule]).
"""

from __future__ import annotations

import numpy as np

from tessera import te, tir
from tessera.te.schedule import AttachType
from tessera.tir import op as tir_op
from tessera.topi.generic import inline_injective
from tessera.topi.qnn import conv_out_size
from tessera.topi.strategy import Config, record_config

LANES = 16  # int8 lanes of one 128-bit MVE vector
CONV_TAG = "micro_qconv_mve"
DENSE_TAG = "micro_qdense_mve"
DATA_TAG = "micro_mve_data"


def _static(shape) -> list[int]:
    return [int(d.value) if hasattr(d, "value") else int(d) for d in shape]


def _round_up(n: int) -> int:
    return -(-n // LANES) * LANES


def conv_form(groups: int, in_per_group: int, dilation_w: int) -> str:
    """Note [MVE layouts]: "rows", "planes" or "taps"."""
    if groups == 1 and dilation_w == 1:
        return "rows"
    if in_per_group == 1 and dilation_w == 1:
        return "planes"
    return "taps"


def _compensation(w: np.ndarray) -> np.ndarray:
    """128 * the sum of each output's weights (first axis): sum x_u w' - sum x_s w'."""
    flat = np.asarray(w, np.int64).reshape(w.shape[0], -1)
    return (128 * flat.sum(axis=1)).astype(np.int32)


def pack_conv(w: np.ndarray, groups: int, dilation_w: int) -> tuple[np.ndarray, np.ndarray]:
    """(wm, comp) of a conv weight w (O, I/groups, KH, KW) int8 (Note [MVE layouts])."""
    o, cg, kh, kw = w.shape
    form = conv_form(groups, cg, dilation_w)
    runs = np.ascontiguousarray(np.asarray(w, np.int8).transpose(0, 2, 3, 1))  # (O, KH, KW, CG)
    if form != "taps":
        runs = runs.reshape(o, kh, 1, kw * cg)
    wm = np.zeros((*runs.shape[:3], _round_up(runs.shape[3])), np.int8)
    wm[..., : runs.shape[3]] = runs
    return wm, _compensation(w)


def unpack_conv(wm: np.ndarray, in_channels: int, groups: int, dilation_w: int,
                kernel) -> np.ndarray:  # fmt: skip
    """The inverse of pack_conv: (O, I/groups, KH, KW) int8."""
    o, kh, kw, cg = wm.shape[0], kernel[0], kernel[1], in_channels // groups
    runs = wm[..., : (cg if conv_form(groups, cg, dilation_w) == "taps" else kw * cg)]
    return np.ascontiguousarray(runs.reshape(o, kh, kw, cg).transpose(0, 3, 1, 2))


def pack_dense(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(wm, comp) of a dense weight (N, K) int8: rows zero-padded to a multiple of 16."""
    n, k = w.shape
    wm = np.zeros((n, _round_up(k)), np.int8)
    wm[:, :k] = w
    return wm, _compensation(w)


def _signed(v, dtype: str):
    """x_s = x_u - 128 as int8: int8 data as it is, uint8 data with its sign bit flipped."""
    if dtype == "int8":
        return v
    return (v.astype("int32") - 128).astype("int8")


def _dot(acc, data, first, weight, wfirst, n):
    """acc + the dot of up to 16 bytes from data[*first] and weight[*wfirst] (the last index
    of each the run's last byte: n - 1 further along the innermost axis)."""
    last = [*first[:-1], first[-1] + n - 1]
    return tir_op.dot16_s8(acc, data[tuple(first)], data[tuple(last)], weight[tuple(wfirst)], n)


def qnn_conv2d_mve(x, wm, comp, *, strides, padding, dilation, groups, pad_value,
                   kernel) -> te.Tensor:  # fmt: skip
    """(N, C, H, W) uint8/int8 data -> (N, O, OH, OW) int32, sum x_u w' over each window."""
    n, c, h, w = _static(x.shape)
    oc, kh, taps, rp = _static(wm.shape)
    kw = int(kernel[1])
    (sh, sw), (dh, dw) = strides, dilation
    pt, pl, pb, pr = padding
    cg, opg = c // groups, oc // groups
    form = conv_form(groups, cg, dw)
    run = {"rows": kw * cg, "planes": kw, "taps": cg}[form]
    if c % groups or oc % groups or rp != _round_up(run) or kh != int(kernel[0]):
        raise ValueError(f"qnn.conv2d_mve: data {x.shape}, weight {wm.shape}, groups {groups}")
    oh = conv_out_size(h, kh, sh, pt, pb, dh)
    ow = conv_out_size(w, kw, sw, pl, pr, dw)
    hp, wp = h + pt + pb, w + pl + pr
    dt = str(x.dtype)
    fill = tir.const((int(pad_value) & 255) - 128, "int8")  # the zero point (x_u) as x_s

    def value(b, ch, y, z):
        # C's ?: loads only on the taken side (micro kernels are C only): no clamped indices
        inside = tir_op.all(y >= pt, y < pt + h, z >= pl, z < pl + w)
        return tir_op.if_then_else(inside, _signed(x[b, ch, y - pt, z - pl], dt), fill)

    # a strided 1x1 conv without pads reads every sh-th row and sw-th pixel: only those are
    # copied, and the conv reads the copy with stride 1
    presample = kh == kw == 1 and (sh, sw) != (1, 1) and not any(padding) and form != "planes"
    if presample:
        hp, wp, ys, zs, sh, sw = oh, ow, sh, sw, 1, 1
    else:
        ys = zs = 1
    # Note [MVE whole vectors]: the weight's runs are zero-padded to 16 bytes, so a chunk may
    # load 16 bytes of data whatever the run's length: the bytes past the run meet zero weights.
    # The data gets a tail of pad bytes (more rows after each plane, more pixels after each
    # row) so that those 16 bytes stay inside it; the loads then need no VCTP predicate. Runs
    # of whole chunks (64 channels) need no tail.
    tail = LANES - 1 if run % LANES else 0
    if form == "planes":
        extra = -(-tail // wp)
        xp = te.compute((n, c, hp + extra, wp), value, name="x_planes", tag=DATA_TAG)
    else:  # NHWC rows of WP * C bytes
        extra = -(-tail // c)
        xp = te.compute((n, hp, (wp + extra) * c),
                        lambda b, y, q: value(b, q % c, y * ys, q // c * zs),
                        name="x_rows", tag=DATA_TAG)  # fmt: skip
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, taps), name="rx") if taps > 1 else None
    rj = te.reduce_axis((0, rp // LANES), name="rj") if rp > LANES else None

    def body(b, o, y, z):
        j = rj * LANES if rj is not None else 0
        g = o // opg
        row = y * sh + ry * dh
        if form == "planes":  # 16 bytes from (row, col) may run on into the next rows
            col = z * sw + j
            first = [b, g, row, col]
            last = [b, g, row + (col + LANES - 1) // wp, (col + LANES - 1) % wp]
            if not tail:  # whole chunks: the run's last byte is in the row
                last = [b, g, row, col + LANES - 1]
        else:
            col = z * sw + (rx * dw if rx is not None else 0)
            first = [b, row, col * c + g * cg + j]
            last = [*first[:-1], first[-1] + LANES - 1]
        wfirst = [o, ry, rx if rx is not None else 0, j]
        axes = [a for a in (ry, rx, rj) if a is not None]
        dot = tir_op.dot16_s8(0, xp[tuple(first)], xp[tuple(last)], wm[tuple(wfirst)], LANES)
        return te.sum(dot, axis=axes)

    acc = te.compute((n, oc, oh, ow), body, name="qconv_mve", tag=CONV_TAG)
    return te.compute((n, oc, oh, ow), lambda b, o, y, z: acc[b, o, y, z] + comp[o],
                      name="qconv_mve_out", tag="injective")  # fmt: skip


def qnn_dense_mve(x, wm, comp, units: int) -> te.Tensor:
    """(..., K) uint8/int8 data times wm (N, KP) -> (..., units) int32: sum_k x_u[k] w'[n, k]."""
    lead, k = _static(x.shape[:-1]), _static(x.shape[-1:])[0]
    rows = int(np.prod(lead)) if lead else 1
    if _static(wm.shape) != [units, _round_up(k)]:
        raise ValueError(f"qnn.dense_mve: data {x.shape}, weight {wm.shape}, units {units}")
    xf = te.compute((rows, k), lambda r, i: _signed(x(*_unravel(r, lead), i), str(x.dtype)),
                    name="x_signed", tag=DATA_TAG)  # fmt: skip
    rj = te.reduce_axis((0, wm.shape[1].value // LANES if hasattr(wm.shape[1], "value")
                         else int(wm.shape[1]) // LANES), name="rj")  # fmt: skip

    def body(r, o):
        j = rj * LANES
        return te.sum(_dot(0, xf, [r, j], wm, [o, j], tir_op.min(LANES, k - j)), axis=rj)

    acc = te.compute((rows, units), body, name="qdense_mve", tag=DENSE_TAG)
    return te.compute((*lead, units),
                      lambda *i: acc[_ravel(i[:-1], lead), i[-1]] + comp[i[-1]],
                      name="qdense_mve_out", tag="injective")  # fmt: skip


def _unravel(r, lead):
    from tessera.topi.transform import unravel_rows

    return unravel_rows(r, lead)


def _ravel(idx, lead):
    from tessera.topi.transform import ravel

    return ravel(idx, lead)


# -- schedules ---------------------------------------------------------------------------------


def _find(outs, tag: str) -> te.Tensor | None:
    from tessera.topi.generic import traverse

    found = []
    traverse(outs, lambda op: found.append(op.output(0)) if op.tag == tag else None)
    return found[0] if found else None


def _data_stage(anchor):
    return next(t for t in anchor.op.input_tensors if t.op.tag == DATA_TAG)


def schedule_qnn_conv2d_mve(outs, target=None, config: Config | None = None) -> te.Schedule:
    """Register tiles of ocb output channels x nw output pixels over the reduction's chunks;
    the padded data (Note [MVE layouts]) once per call."""
    from tessera.topi.micro.strategy import default_mve_tile

    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    s = te.create_schedule([t.op for t in outs])
    inline_injective(s, outs)
    anchor = _find(outs, CONV_TAG)
    _, oc, _, ow = _static(anchor.shape)
    if config is None:  # scheduled outside a build (no task): the strategy's default rule
        config = Config("mve", default_mve_tile(oc, ow, _depthwise(anchor)))
    ocb, nw = int(config["ocb"]), int(config["nw"])
    acc = s.cache_write(anchor, "local")
    tiled = _tile_output(s, outs, anchor)
    stage = s[tiled]
    oco, owo = tile_channels_columns(s, tiled, ocb, nw)
    s[acc].compute_at(stage, owo)
    cache_channel_constants(s, tiled, anchor, owo)
    data = s[_data_stage(anchor)]
    data.compute_root()
    if data.op.name == "x_rows":  # pixels x channels: no division per byte
        channels = _static(_data_stage(anchor).op.input_tensors[0].shape)[1]
        data.split(data.op.axis[-1], factor=channels)
    a = s[acc]
    n, o, oh, w = a.op.axis
    reduce = list(a.op.reduce_axis)
    a.reorder(n, oh, *reduce, o, w)
    a.unroll(o)
    a.unroll(w)
    record_config(s, config)
    return s


def cache_channel_constants(s, tiled, anchor, axis) -> None:
    """The epilogue's per-channel constants (compensation, bias, requantize multiplier and
    shift: inputs of shape (O,), (O, 1, 1) or (1, O, 1, 1)) read once per tile into locals:
    gcc keeps them in registers, where it would load them again after every int8 store (a
    char store may alias any buffer)."""
    if tiled is anchor:
        return
    oc = _static(anchor.shape)[1]
    readers: dict[int, tuple] = {}  # placeholder -> the ops (tiled, or inlined into it) reading it

    def visit(op):
        for t in op.input_tensors:
            if isinstance(t.op, te.PlaceholderOp):
                tensor, ops = readers.setdefault(id(t), (t, []))
                ops.append(op) if all(op is not o for o in ops) else None
            elif s[t.op].attach_type == AttachType.INLINE:
                visit(t.op)

    visit(tiled.op)
    for t, ops in readers.values():
        if 1 < int(np.prod(_static(t.shape))) <= oc:
            local = s.cache_read(t, "local", [op.output(0) for op in ops])
            s[local].compute_at(s[tiled], axis)


def _depthwise(anchor) -> bool:
    """One output channel per group reads one plane (the planes form)."""
    return _data_stage(anchor).op.name == "x_planes"


def _tile_output(s, outs, anchor):
    """The stage to tile: the one output of the epilogue when it has the anchor's shape (the
    anchor inlined into it), else the anchor, its views computed at root."""
    shape = _static(anchor.shape)
    view = [t for t in outs if t.op is not anchor.op]
    if len(outs) == 1 and view and _static(outs[0].shape) == shape:
        s[anchor].compute_inline()
        return outs[0]
    for t in view:
        s[t].compute_root()
    return anchor


def schedule_qnn_dense_mve(outs, target=None, config: Config | None = None) -> te.Schedule:
    """Tiles of nb output columns, their accumulators live over the k chunks: each chunk
    loads one vector of x for all nb columns."""
    from tessera.topi.micro.strategy import default_mve_columns

    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    s = te.create_schedule([t.op for t in outs])
    inline_injective(s, outs)
    anchor = _find(outs, DENSE_TAG)
    rows, cols = _static(anchor.shape)
    if config is None:
        config = Config("mve", nb=default_mve_columns(cols))
    nb = int(config["nb"])
    acc = s.cache_write(anchor, "local")
    tiled = tiled_stage(s, outs, anchor, rows, cols)
    data = _data_stage(anchor)
    if str(data.op.input_tensors[0].dtype) == "int8":
        s[data].compute_inline()  # int8 data as it is: the dot reads the input itself
    else:
        s[data].compute_root()
    schedule_column_tiles(s, tiled, acc, nb)
    record_config(s, config)
    return s


def tile_channels_columns(s, out: te.Tensor, ocb: int, nw: int):
    """Split out's (channel, column) into tiles of ocb x nw, unrolled innermost; returns the
    channel-block axis and the column-block axis."""
    stage = s[out]
    n, oc, oh, ow = stage.op.axis
    oco, oci = stage.split(oc, factor=ocb)
    owo, owi = stage.split(ow, factor=nw)
    stage.reorder(n, oco, oh, owo, oci, owi)
    stage.unroll(oci)
    stage.unroll(owi)
    return oco, owo


def tiled_stage(s, outs, anchor: te.Tensor, rows: int, cols: int) -> te.Tensor:
    """The stage a dense's column tiles run on: the epilogue's output where it is the group's
    one output with the anchor's rows x cols (the anchor inlined into it), else the anchor
    (the other outputs computed at root)."""
    view = [t for t in outs if t.op is not anchor.op]
    flat = [int(d) for d in _static(outs[0].shape)]
    if len(outs) == 1 and view and flat[-1] == cols and int(np.prod(flat)) == rows * cols:
        s[anchor].compute_inline()
        return outs[0]
    for t in view:
        s[t].compute_root()
    return anchor


def schedule_column_tiles(s, tiled: te.Tensor, acc: te.Tensor, nb: int) -> None:
    """Tiles of nb output columns (unrolled) on `tiled`'s last axis, each computing its
    accumulators `acc` with the reduction outside the nb columns (rows and columns unrolled)."""
    stage = s[tiled]
    outer, inner = stage.split(stage.op.axis[-1], factor=nb)
    stage.unroll(inner)
    s[acc].compute_at(stage, outer)
    a = s[acc]
    m, n = a.op.axis
    (k,) = a.op.reduce_axis
    a.reorder(m, k, n)
    a.unroll(m)
    a.unroll(n)


# -- int8 pools: the window sums of qnn.sum_pool2d -----------------------------------------------
# Note [MVE pool]: a window's row is KW consecutive bytes of its channel's plane (dilation 1), and
# when a window spans whole rows (KW = the padded width: a global pool) its KH rows are one run.
# Each chunk of a run is one dot16_s8 with a vector of ones (VMLADAVA of 16 bytes times 1: their
# sum). Pads are the zero point in a padded copy of the planes (built once per call, as the
# convs'); data without pads is read in place when it is int8. In x_s, the sum of x - zp over a
# window of `count` positions is sum x_s - count * zp_s; every window counts the same positions
# (the op's contract: pads counted, no overhang).
POOL_TAG = "micro_qpool_mve"


def sum_pool2d_mve(x, pool_size, strides, padding, dilation, zero_point=0) -> te.Tensor:
    """NCHW uint8/int8 -> int32 sums of x - zero_point over each window (Note [MVE pool])."""
    n, c, h, w = _static(x.shape)
    (kh, kw), (sh, sw), (dh, _) = pool_size, strides, dilation
    pt, pl, pb, pr = padding
    oh = conv_out_size(h, kh, sh, pt, pb, dh)
    ow = conv_out_size(w, kw, sw, pl, pr, 1)
    hp, wp = h + pt + pb, w + pl + pr
    dt = str(x.dtype)
    zp_s = int(zero_point) - (128 if dt == "uint8" else 0)
    if any(padding) or dt != "int8":
        fill = tir.const(zp_s, "int8")

        def value(b, ch, y, z):
            inside = tir_op.all(y >= pt, y < pt + h, z >= pl, z < pl + w)
            return tir_op.if_then_else(inside, _signed(x[b, ch, y - pt, z - pl], dt), fill)

        data = te.compute((n, c, hp, wp), value, name="x_planes", tag=DATA_TAG)
    else:
        data = x
    ones = te.compute((LANES,), lambda i: tir.const(1, "int8"), name="ones", tag=DATA_TAG)
    whole_rows = kw == wp and dh == 1  # the window's rows are one run
    run = kh * kw if whole_rows else kw
    ry = te.reduce_axis((0, kh), name="ry") if not whole_rows and kh > 1 else None
    chunks = -(-run // LANES)
    rj = te.reduce_axis((0, chunks), name="rj") if chunks > 1 else None

    def body(b, ch, i, j):
        k = rj * LANES if rj is not None else 0
        count = tir_op.min(LANES, run - k) if rj is not None else tir.const(run, "int32")
        row = i * sh + (ry * dh if ry is not None else 0)
        if whole_rows:  # rows i*sh .. + kh - 1 of the plane, from column 0 (kw == wp)
            first = [b, ch, row + k // wp, k % wp]
            last_at = k + count - 1
            last = [b, ch, row + last_at // wp, last_at % wp]
        else:
            first = [b, ch, row, j * sw + k]
            last = [b, ch, row, j * sw + k + count - 1]
        dot = tir_op.dot16_s8(0, data[tuple(first)], data[tuple(last)], ones[0], count)
        axes = [a for a in (ry, rj) if a is not None]
        return te.sum(dot, axis=axes) if axes else dot

    sums = te.compute((n, c, oh, ow), body, name="sum_pool_mve", tag=POOL_TAG)
    offset = kh * kw * zp_s
    return te.compute((n, c, oh, ow), lambda *i: sums(*i) - offset, name="sum_pool_mve_out",
                      tag="injective")  # fmt: skip


def schedule_sum_pool2d_mve(outs, target=None) -> te.Schedule:
    """The padded planes and the ones once per call; each output's runs in registers."""
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    s = te.create_schedule([t.op for t in outs])
    inline_injective(s, outs)
    anchor = _find(outs, POOL_TAG)
    for t in anchor.op.input_tensors:
        if getattr(t.op, "tag", None) == DATA_TAG:
            s[t].compute_root()
    if anchor.op.reduce_axis:
        acc = s.cache_write(anchor, "local")
        tiled = _tile_output(s, outs, anchor)
        stage = s[tiled]
        s[acc].compute_at(stage, stage.op.axis[-1])
    return s
