"""Integer (int8) operators: uint8 x int8 -> int32 products on `dot_u8i8` (vpdpbusd), and the
float32 requantize that ORT's MLAS uses.

    wp = pack_dense_weight(w8)                  # (N, K) int8 -> (ceil(N/16), ceil(K/4), 16) int32
    acc = qnn_dense(x, wp_tensor, units=N)      # x (..., K) uint8/int8 -> (..., N) int32
    w4 = pack_conv_weight(w8, groups)           # (O, I/g, KH, KW) int8 -> (O, ceil(I/g/4), KH, KW)
    acc = qnn_conv2d(x, w4_tensor, strides=..., padding=..., dilation=..., groups=..., pad_value=zp)
    y = requantize(acc, scale, zero_point=zp, dtype="uint8")

Note [int8 operands]: the products are of x_u = x (uint8 data) or x + 128 (int8 data, its sign
bit flipped) with int8 weights w' (the ONNX weight minus its zero point, which must fit int8).
Four consecutive K (or input-channel) bytes share one int32 word, the operand of vpdpbusd;
K is padded to a multiple of 4 with zero weights. The zero point of x is not subtracted here:
sum (x - zx) w' = sum x_u w' - zx_u sum w', and the caller subtracts the constant (or runtime)
second term in the epilogue (frontend/onnx_quant.py), where it fuses for free.
"""

from __future__ import annotations

import numpy as np

from tessera import te, tir
from tessera.tir import op as tir_op
from tessera.topi.transform import ravel, unravel_rows

PANEL = 16  # output columns per dense weight panel: one AVX-512 vector of int32, two of AVX2
DENSE_TAG = "qnn_dense"
CONV_TAG = "qnn_conv2d"
PACK_TAG = "qnn_pack"
DW_TAG = "qnn_conv2d_depthwise"


def pack_words_np(w: np.ndarray, axis: int) -> np.ndarray:
    """int8 values -> int32 words of 4 consecutive values along `axis` (zero-padded to 4)."""
    w = np.moveaxis(np.asarray(w, np.int8), axis, -1)
    k = w.shape[-1]
    padded = np.zeros((*w.shape[:-1], -(-k // 4) * 4), np.int8)
    padded[..., :k] = w
    words = np.ascontiguousarray(padded).view(np.int32)
    return np.ascontiguousarray(np.moveaxis(words, -1, axis))


def pack_dense_weight(w: np.ndarray) -> np.ndarray:
    """A dense weight (N, K) int8 as panels (ceil(N / 16), ceil(K / 4), 16) of int32 words."""
    n = w.shape[0]
    words = pack_words_np(w, 1)  # (N, K4)
    panels = -(-n // PANEL)
    padded = np.zeros((panels * PANEL, words.shape[1]), np.int32)
    padded[:n] = words
    return np.ascontiguousarray(padded.reshape(panels, PANEL, -1).transpose(0, 2, 1))


PAIR_BOUND = 128  # |w0| + |w1| of a byte pair that vpmaddubsw sums without saturating


def pairs_bounded(w: np.ndarray, axis: int = -1) -> bool:
    """Whether the byte pairs of the words of w along `axis` (values 2p and 2p + 1; words start
    at 0) keep |w0| + |w1| <= 128 (Note [bounded pairs] in codegen/llvm/int8_dot.py)."""
    w = np.moveaxis(np.asarray(w, np.int64), axis, -1)
    if w.shape[-1] % 2:  # the padding's zero completes the last pair
        w = np.concatenate([w, np.zeros((*w.shape[:-1], 1), np.int64)], axis=-1)
    return bool((np.abs(w[..., 0::2]) + np.abs(w[..., 1::2]) <= PAIR_BOUND).all())


def split_bounded(w: np.ndarray, most_rows: float = 1 / 8):
    """A dense weight (N, K) int8 as main + residual, main's pairs bounded (pairs_bounded along
    K): where |w0| + |w1| > 128, main keeps w0 and the part of w1 the bound leaves (its sign,
    128 - |w0| of its size), the residual the rest of w1. Returns (main, rows, residual):
    residual (N, len(rows)) holds w - main at the K indices `rows` (odd, ascending), zero
    elsewhere; the product x @ w.T = x @ main.T + x[..., rows] @ residual.T, exactly. None
    when the residual takes more than `most_rows` of K (the second product would cost more
    than vpmaddubsw saves)."""
    w = np.asarray(w, np.int64)
    n, k = w.shape
    even, odd = w[:, 0 : k - 1 : 2], w[:, 1:k:2]  # the pairs that have two values
    room = PAIR_BOUND - np.abs(even)
    over = np.abs(odd) > room
    rows = 2 * np.flatnonzero(over.any(axis=0)) + 1
    if len(rows) > most_rows * k:
        return None
    main = w.copy()
    main[:, 1:k:2] = np.where(over, np.sign(odd) * room, odd)
    return main.astype(np.int8), rows, (w - main)[:, rows].astype(np.int8)


def unpack_dense_weight(wp: np.ndarray, units: int, k: int) -> np.ndarray:
    """The inverse of pack_dense_weight: (N, K) int8."""
    words = wp.transpose(0, 2, 1).reshape(-1, wp.shape[1])[:units]
    return np.ascontiguousarray(words).view(np.int8)[:, :k]


def pack_conv_weight(w: np.ndarray) -> np.ndarray:
    """A conv weight (O, I/groups, KH, KW) int8 as int32 words of 4 input channels."""
    return pack_words_np(w, 1)


def unpack_conv_weight(w4: np.ndarray, in_per_group: int) -> np.ndarray:
    w = np.moveaxis(w4, 1, -1)
    w = np.ascontiguousarray(w).view(np.int8)[..., :in_per_group]
    return np.moveaxis(w, -1, 1)


def _unsigned(v, dtype: str):
    """x_u of Note [int8 operands] as int32: uint8 as it is, int8 with its sign bit flipped."""
    v = v.astype("int32")
    return v + 128 if dtype == "int8" else v


def _word(get, count: int, pad_value: int, dtype: str):
    """An int32 word of 4 bytes get(j) (j < count; pad_value past the end)."""
    word = None
    for j in range(4):
        byte = tir.const(pad_value & 255, "int32") if j >= count else _unsigned(get(j), dtype)
        byte = byte if j == 0 else tir_op.shift_left(byte, 8 * j)
        word = byte if word is None else tir_op.bitwise_or(word, byte)
    return word


def _static(shape) -> list[int]:
    return [int(d.value) for d in shape]


def qnn_dense(x: te.Tensor, wp: te.Tensor, units: int, bounded: bool = False) -> te.Tensor:
    """(..., K) uint8/int8 times panels wp -> (..., units) int32: sum_k x_u[k] w'[n, k].
    bounded: the caller promises pairs_bounded of the weight (Note [bounded pairs])."""
    lead, K = _static(x.shape[:-1]), int(x.shape[-1].value)
    panels, k4, nr = _static(wp.shape)
    if k4 != -(-K // 4) or panels * nr < units:
        raise ValueError(f"qnn.dense: data {x.shape}, packed weight {wp.shape}, units {units}")
    M = int(np.prod(lead)) if lead else 1
    dt = str(x.dtype)

    def row(r):
        return unravel_rows(r, lead)

    def word(r, k):
        # past K: zero weights meet any byte; the guard keeps the load in bounds
        def get(j):
            kk = k * 4 + j
            return x(*row(r), tir_op.min(kk, K - 1)) if K % 4 else x(*row(r), kk)

        return _word(get, 4, 0, dt)

    xp = te.compute((M, k4), word, name="x_words", tag=PACK_TAG)
    k = te.reduce_axis((0, k4), name="k")
    rows = te.compute(
        (M, units),
        lambda r, j: te.sum(tir_op.dot_u8i8(0, xp[r, k], wp[j // nr, k, j % nr], bounded), axis=k),
        name="qdense",
        tag=DENSE_TAG,
        attrs={"nr": nr},
    )

    return te.compute(
        (*lead, units),
        lambda *i: rows(ravel(i[:-1], lead), i[-1]),
        name="qdense_out",
        tag="injective",
    )


BMM_TAG = "qnn_batch_matmul"


def _byte(v, flip: bool):
    """The low byte of an integer value as int32 (flip: minus 128 first, uint8 as int8)."""
    v = v.astype("int32")
    return tir_op.bitwise_and(v - 128 if flip else v, 255)


def qnn_batch_matmul(a: te.Tensor, b: te.Tensor) -> te.Tensor:
    """a (Ba, M, K) uint8/int8 times b (Bb, K, N) int8/uint8, both at run time -> (B, M, N)
    int32: sum_k a_u[k] b_s[k] (b_s: int8 b as it is, uint8 b minus 128). Both are packed
    into words per call (a along K per row, b along K per column)."""
    (ba, m, k), (bb, k2, n) = _static(a.shape), _static(b.shape)
    if k != k2 or (ba != bb and 1 not in (ba, bb)):
        raise ValueError(f"qnn.batch_matmul: operands {a.shape} and {b.shape} disagree")
    k4, batch = -(-k // 4), max(ba, bb)
    adt, flip = str(a.dtype), str(b.dtype) == "uint8"

    def a_word(i, r, q):
        return _word(lambda j: a[i, r, tir_op.min(q * 4 + j, k - 1)], 4, 0, adt)

    def b_word(i, q, c):
        word = None
        for j in range(4):
            kk = q * 4 + j
            byte = _byte(b[i, tir_op.min(kk, k - 1), c], flip)
            byte = tir_op.if_then_else(kk < k, byte, 0) if k % 4 else byte  # zero past K
            byte = byte if j == 0 else tir_op.shift_left(byte, 8 * j)
            word = byte if word is None else tir_op.bitwise_or(word, byte)
        return word

    # columns padded to whole vectors (zero words): the micro-kernel's tiles need no guards
    npad = -(-n // PANEL) * PANEL

    def b_padded(i, q, c):
        return tir_op.if_then_else(c < n, b_word(i, q, tir_op.min(c, n - 1)), 0)

    aw = te.compute((ba, m, k4), a_word, name="a_words", tag=PACK_TAG)
    bw = te.compute((bb, k4, npad), b_padded if npad > n else b_word, name="b_words",
                    tag=PACK_TAG)  # fmt: skip
    rk = te.reduce_axis((0, k4), name="k")
    acc = te.compute(
        (batch, m, npad),
        lambda i, r, c: te.sum(
            tir_op.dot_u8i8(0, aw[i if ba > 1 else 0, r, rk], bw[i if bb > 1 else 0, rk, c]),
            axis=rk,
        ),
        name="qbmm",
        tag=BMM_TAG,
    )
    if npad == n:
        return acc
    return te.compute((batch, m, n), lambda i, r, c: acc[i, r, c], name="qbmm_out",
                      tag="injective")  # fmt: skip


def conv_out_size(size, k, stride, pad_begin, pad_end, dilation) -> int:
    return (size + pad_begin + pad_end - dilation * (k - 1) - 1) // stride + 1


def data_shape(x) -> tuple[int, int, int, int]:
    """(N, C, H, W) of conv data in NCHW or in blocks of channels, (N, C/B, H, W, B)."""
    if len(x.shape) == 5:
        n, cb, h, w, b = _static(x.shape)
        return n, cb * b, h, w
    return tuple(_static(x.shape))


def data_byte(x, b, ch, y, z):
    """Byte (b, ch, y, z) of NCHW or blocked (N, C/B, H, W, B) conv data."""
    if len(x.shape) == 5:
        block = int(x.shape[4].value)
        return x[b, ch // block, y, z, ch % block]
    return x[b, ch, y, z]


def _conv_geometry(x, c4, kh, kw, groups, strides, padding, dilation):
    n, c, h, w = data_shape(x)
    (sh, sw), (dh, dw) = strides, dilation
    pt, pl, pb, pr = padding
    oh = conv_out_size(h, kh, sh, pt, pb, dh)
    ow = conv_out_size(w, kw, sw, pl, pr, dw)
    return n, c, h, w, oh, ow


def pack_conv_data(x, *, c4, kh, kw, strides, padding, dilation, groups, pad_value):
    """The data of a conv as int32 words of 4 channels, padded, (N, groups * c4, sh, sw, hq, wq),
    and `read(b, q, ty, tx, y, z)`: the word of channel word q under kernel tap offset (ty, tx)
    (ry * dh, rx * dw) for output pixel (y, z)."""
    n, c, h, w, oh, ow = _conv_geometry(x, c4, kh, kw, groups, strides, padding, dilation)
    cg = c // groups
    (sh, sw) = strides
    pt, pl, pb, pr = padding
    hp, wp = h + pt + pb, w + pl + pr
    dt = str(x.dtype)
    pad_u = int(pad_value)
    # Note [strided packing]: a strided conv's vector of output pixels would read every sh-th
    # word. A strided 1x1 conv packs only the words it reads; a larger strided kernel packs
    # the padded input as sh x sw phases (row phase py holds rows py, py + sh, ...), so that
    # kernel tap (ry, rx) reads phase ((ry*dh) % sh, (rx*dw) % sw) contiguously.
    presample = kh == kw == 1 and (sh, sw) != (1, 1) and not any(padding)
    ys, zs = (sh, sw) if presample else (1, 1)
    if presample:
        sh, sw, hp, wp = 1, 1, oh, ow
    hq, wq = -(-hp // sh), -(-wp // sw)

    def word(b, q, py, px, yq, zq):
        g, c4i = q // c4, q % c4
        y, z = (yq * sh + py) * ys, (zq * sw + px) * zs
        inside = tir_op.all(y >= pt, y < pt + h, z >= pl, z < pl + w)

        def get(j):
            ch = g * cg + c4i * 4 + j
            # channels past the group's end meet zero weights: any in-bounds byte will do
            ch = tir_op.min(ch, c - 1) if cg % 4 else ch
            return data_byte(x, b, ch, tir_op.max(tir_op.min(y - pt, h - 1), 0),
                             tir_op.max(tir_op.min(z - pl, w - 1), 0))  # fmt: skip

        fill = tir.const(int(np.array([pad_u] * 4, np.uint8).view(np.int32)[0]), "int32")
        return tir_op.if_then_else(inside, _word(get, 4, 0, dt), fill)

    xp = te.compute((n, groups * c4, sh, sw, hq, wq), word, name="x_words", tag=PACK_TAG)

    def read(b, q, ty, tx, y, z):
        return xp[b, q, ty % sh, tx % sw, y + ty // sh, z + tx // sw]

    return xp, read


def qnn_conv2d(x, w4, *, strides, padding, dilation, groups, pad_value) -> te.Tensor:
    """NCHW (or blocked, (N, C/B, H, W, B)) uint8/int8 data, words w4 (O, ceil(I/g/4), KH, KW)
    -> (N, O, OH, OW) int32: the sum of x_u w' over each window; padded positions read
    pad_value (the zero point, as x_u)."""
    n, c, h, w = data_shape(x)
    oc, c4, kh, kw = _static(w4.shape)
    cg = c // groups
    if c4 != -(-cg // 4) or c % groups or oc % groups:
        raise ValueError(f"qnn.conv2d: data {x.shape}, weight words {w4.shape}, groups {groups}")
    _, _, _, _, oh, ow = _conv_geometry(x, c4, kh, kw, groups, strides, padding, dilation)
    if groups == c == oc:
        return _depthwise(x, w4, (oh, ow), strides, padding, dilation, pad_value)
    _, read = pack_conv_data(x, c4=c4, kh=kh, kw=kw, strides=strides, padding=padding,
                             dilation=dilation, groups=groups, pad_value=pad_value)  # fmt: skip
    rc = te.reduce_axis((0, c4), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    opg = oc // groups
    dh, dw = dilation

    def body(b, o, y, z):
        q = (o // opg) * c4 + rc if groups > 1 else rc
        word = read(b, q, ry * dh, rx * dw, y, z)
        return te.sum(tir_op.dot_u8i8(0, word, w4[o, rc, ry, rx]), axis=[rc, ry, rx])

    return te.compute((n, oc, oh, ow), body, name="qconv", tag=CONV_TAG)


DW_PACK_TAG = "qnn_pack_taps"  # the depthwise data stages, computed per channel block


# Note [depthwise tap words]
# A depthwise conv has one input channel per output channel: a word of 4 channels would hold
# one useful byte. Its words run along the kernel's row instead: word q of padded row yp for
# output column z holds the data under taps 4q..4q+3 of that row, bytes
# x_p[yp, z * sw + (4q + j) * dw], and the weight word (c, ry, q) the weights of those taps (zero
# past KW). A 3x3 conv is then 3 dot_u8i8 (vpdpbusd) per vector of 16 outputs, where int32
# multiplies took 9 multiplies and 9 adds; the words are built per channel block from the padded
# uint8 copy (both stay in cache: compute_at the tile, topi/x86/int8_conv2d.py), contiguous in z
# whatever the stride, so the product loads them as plain vectors.


def _depthwise(x, w4, out_hw, strides, padding, dilation, pad_value) -> te.Tensor:
    """A depthwise qnn.conv2d on tap words (Note [depthwise tap words]): the padded data as x_u
    (uint8), its tap words (N, C, rows, ceil(KW/4), OW) and the weight's (C, KH, ceil(KW/4)),
    summed over (ry, q) by dot_u8i8 in int32 (exact: |sum| < 2**31)."""
    n, c, h, w = data_shape(x)
    _, _, kh, kw = _static(w4.shape)
    (sh, sw), (dh, dw) = strides, dilation
    pt, pl, pb, pr = padding
    oh, ow = out_hw
    kw4 = -(-kw // 4)
    rows = (oh - 1) * sh + (kh - 1) * dh + 1  # padded rows that some output reads
    dt = str(x.dtype)
    if max(pl, pr) > w:
        raise ValueError(f"qnn.conv2d: pads {padding} wider than the data {x.shape}")

    # Note [segmented rows]: a padded row is built as three segments of w bytes, (pad, data,
    # pad), so that each condition is the same across a vector of columns (the vectorizer
    # keeps a guarded load only then) and the data is one contiguous copy; column p of the
    # padded row is byte w - pl + p of the three, a plain offset once the index is flattened.
    def segment(b, ch, y, seg, i):
        inside = tir_op.all(seg == 1, y >= pt, y < pt + h)
        yc = tir_op.max(tir_op.min(y - pt, h - 1), 0)
        byte = _unsigned(data_byte(x, b, ch, yc, i), dt).astype("uint8")
        return tir_op.if_then_else(inside, byte, tir.const(int(pad_value), "uint8"))

    xp = te.compute((n, c, rows, 3, w), segment, name="x_padded", tag=DW_PACK_TAG)

    def tap(q, j):
        t = q * 4 + j  # taps past KW meet zero weights: any in-bounds byte will do
        return tir_op.min(t, kw - 1) if kw % 4 else t

    def x_word(b, ch, yp, q, z):
        word = None
        for j in range(4):
            f = w - pl + z * sw + tap(q, j) * dw
            byte = xp[b, ch, yp, f // w, f % w].astype("int32")
            byte = byte if j == 0 else tir_op.shift_left(byte, 8 * j)
            word = byte if word is None else tir_op.bitwise_or(word, byte)
        return word

    def w_word(ch, ry, q):
        word = None
        for j in range(4):
            byte = tir_op.bitwise_and(w4[ch, 0, ry, tap(q, j)], 255)  # the weight's int8 byte
            if kw % 4:
                byte = tir_op.if_then_else(q * 4 + j < kw, byte, 0)
            byte = byte if j == 0 else tir_op.shift_left(byte, 8 * j)
            word = byte if word is None else tir_op.bitwise_or(word, byte)
        return word

    xw = te.compute((n, c, rows, kw4, ow), x_word, name="x_taps", tag=DW_PACK_TAG)
    ww = te.compute((c, kh, kw4), w_word, name="w_taps", tag=DW_PACK_TAG)
    ry = te.reduce_axis((0, kh), name="ry")
    rq = te.reduce_axis((0, kw4), name="rq")

    def body(b, o, y, z):
        word = xw[b, o, y * sh + ry * dh, rq, z]
        return te.sum(tir_op.dot_u8i8(0, word, ww[o, ry, rq]), axis=[ry, rq])

    return te.compute((n, c, oh, ow), body, name="qconv_dw", tag=DW_TAG)


CONV_BLOCKED_TAG = "qnn_conv2d_packed"


def pack_conv_weight_blocked(w: np.ndarray, block: int) -> np.ndarray:
    """A conv weight (O, I, KH, KW) int8 as (ceil(O / block), ceil(I / 4), KH, KW, block) int32
    words: for each tap and word of 4 input channels, `block` output channels side by side (one
    vector operand of vpdpbusd); output channels past O have zero weights."""
    words = pack_words_np(w, 1)  # (O, I4, KH, KW)
    o = words.shape[0]
    blocks = -(-o // block)
    padded = np.zeros((blocks * block, *words.shape[1:]), np.int32)
    padded[:o] = words
    out = padded.reshape(blocks, block, *words.shape[1:]).transpose(0, 2, 3, 4, 1)
    return np.ascontiguousarray(out)


def unpack_conv_weight_blocked(wb: np.ndarray, channels: int, in_channels: int) -> np.ndarray:
    """The inverse of pack_conv_weight_blocked: (O, I, KH, KW) int8."""
    words = wb.transpose(0, 4, 1, 2, 3).reshape(-1, *wb.shape[1:4])[:channels]
    return unpack_conv_weight(np.ascontiguousarray(words), in_channels)


def qnn_conv2d_packed(x, wb, *, strides, padding, dilation, pad_value, channels) -> te.Tensor:
    """qnn.conv2d (groups 1) with output channels innermost: NCHW uint8/int8 data and weight
    blocks wb (OB, ceil(I/4), KH, KW, B) -> an (N, OB, OH, OW, B) int32 product (tagged
    CONV_BLOCKED_TAG), read back as (N, channels, OH, OW). Each step of the reduction meets one
    data word (4 channels of one pixel), broadcast, with a vector of B output channels."""
    acc = _blocked_product(x, wb, strides, padding, dilation, pad_value, channels)
    block = int(acc.shape[4].value)
    return te.compute(
        (acc.shape[0], channels, acc.shape[2], acc.shape[3]),
        lambda b, o, y, z: acc[b, o // block, y, z, o % block],
        name="qconv_out",
        tag="injective",
    )


# Note [blocked int8 activations]
# Between int8 convs the activations stay in blocks of channels, (N, C/B, H, W, B) uint8 with
# B a multiple of 4 (NCHW[B]c, as the float convs' NCHW[x]c): a word of 4 channels, the data
# operand of vpdpbusd, is then 4 consecutive bytes (one 32-bit load), where NCHW scattered
# them over 4 planes and every conv gathered and shifted them into words per call. The
# "channels" kernel (output channels in vectors) writes its product in blocks of its vector,
# so its epilogue (compensation, requantize or dequantize, bias, ReLU, residual add, the next
# quantize) ends in one contiguous store of B bytes per pixel. alter_layout asks the
# qnn.conv2d strategy (context "blocked": Note [int8 conv rule]) and moves the values; the
# element-wise epilogue ops, residual adds and the uint8 max pool run blocked between convs.
# The convs that keep the NCHW kernels (depthwise tap words, grouped, "rows") read blocked
# data as it is (`data_byte`) and write NCHW, which qnn.conv2d_nchwc packs into words per call
# as qnn.conv2d_packed does: no layout transform stands between two int8 convs. A 1x1
# stride-1 conv on blocked data reads its words where they are; a padded or strided one copies
# whole words into its padded buffer (no gather of bytes).


def qnn_conv2d_nchwc(x, wb, *, strides, padding, dilation, pad_value) -> te.Tensor:
    """qnn.conv2d_packed between blocked int8 activations (Note [blocked int8 activations]):
    data (N, C/Bi, H, W, Bi) uint8/int8 (Bi a multiple of 4: a word of 4 channels is 4
    consecutive bytes; or NCHW data, packed into words as qnn.conv2d_packed does) and weight
    blocks (OB, C/4, KH, KW, B) -> (N, OB, OH, OW, B) int32, the product in the layout its
    epilogue writes: a pixel's B channels, one vector, one store."""
    if len(x.shape) == 5 and int(x.shape[4].value) % 4:
        raise ValueError(f"qnn.conv2d_nchwc: data {x.shape} is not in blocks of 4k channels")
    ob, _, _, _, block = _static(wb.shape)
    return _blocked_product(x, wb, strides, padding, dilation, pad_value, ob * block)


def _blocked_product(x, wb, strides, padding, dilation, pad_value, channels) -> te.Tensor:
    n, c, h, w = data_shape(x)
    ob, c4, kh, kw, block = _static(wb.shape)
    if c4 != -(-c // 4) or ob * block < channels:
        raise ValueError(f"qnn.conv2d_packed: data {x.shape}, weight blocks {wb.shape}")
    _, _, _, _, oh, ow = _conv_geometry(x, c4, kh, kw, 1, strides, padding, dilation)
    unit = kh == kw == 1 and tuple(strides) == (1, 1) and not any(padding)
    if unit and len(x.shape) == 5:  # the words are where the data is: 4 bytes of one block
        read = _blocked_word_reader(x)
    else:
        _, read = pack_conv_data(x, c4=c4, kh=kh, kw=kw, strides=strides, padding=padding,
                                 dilation=dilation, groups=1, pad_value=pad_value)  # fmt: skip
    rc = te.reduce_axis((0, c4), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    dh, dw = dilation

    def body(b, o, y, z, lane):
        word = read(b, rc, ry * dh, rx * dw, y, z)
        return te.sum(tir_op.dot_u8i8(0, word, wb[o, rc, ry, rx, lane]), axis=[rc, ry, rx])

    return te.compute((n, ob, oh, ow, block), body, name="qconv_blocked", tag=CONV_BLOCKED_TAG)


def _blocked_word_reader(x):
    """read(b, q, 0, 0, y, z) of an unpadded stride-1 1x1 conv on blocked data: word q of
    pixel (y, z) straight from the data (its 4 bytes consecutive: one 32-bit load)."""
    words_per_block = int(x.shape[4].value) // 4
    dt = str(x.dtype)

    def read(b, q, ty, tx, y, z):
        blk, lane = q // words_per_block, (q % words_per_block) * 4
        return _word(lambda j: x[b, blk, y, z, lane + j], 4, 0, dt)

    return read


def requantize(acc, scale, *, zero_point: int, dtype: str):
    """saturate(round_half_even(float32(acc) * scale) + zero_point) as ORT's MLAS computes it:
    the product in float32, clamped to the type's range minus the zero point, then rounded."""
    info = np.iinfo(dtype)
    lo, hi = float(info.min - zero_point), float(info.max - zero_point)

    rank, srank = len(acc.shape), len(scale.shape)
    sshape = _static(scale.shape)

    def f(*i):
        # numpy broadcasting: scale's axes align with acc's last ones; extent-1 axes read 0
        idx = [0 if d == 1 else i[rank - srank + k] for k, d in enumerate(sshape)]
        v = acc(*i).astype("float32") * scale(*idx)
        v = tir_op.round(te.min(te.max(v, tir.const(lo, "float32")), tir.const(hi, "float32")))
        return (v.astype("int32") + zero_point).astype(dtype)

    return te.compute(acc.shape, f, name="requantize", tag="broadcast")


# Note [quantize clamp]
# qnn.quantize saturates with two compare-and-selects rather than te.min/te.max: those keep
# numpy's NaN propagation (codegen/llvm/emitter.py), which costs x86 an unordered compare, an
# or and a blend per bound (10 instructions for the two bounds, where a select is a compare
# and a blend); in an int8 epilogue after a depthwise conv's 9 FMAs that doubled the kernel
# (28x28x192 3x3: 0.056 -> 0.107 ms per call with the quantize). A NaN has no integer to
# become: it leaves the clamp as NaN and converts to what the instruction gives, as numpy's
# cast does.


def saturation(dtype: str, out_min=None, out_max=None) -> tuple[int, int]:
    """qnn.quantize's range: the dtype's, narrowed by out_min / out_max where given."""
    info = np.iinfo(dtype)
    lo = info.min if out_min is None else max(info.min, int(out_min))
    hi = info.max if out_max is None else min(info.max, int(out_max))
    return lo, hi


def quantize(x, *, scale: float, zero_point: int, dtype: str, out_min=None, out_max=None):
    """saturate(round_half_even(x * float32(1 / scale)) + zero_point), saturated to the dtype's
    range or to [out_min, out_max] within it: a multiply, where ONNX's QuantizeLinear divides
    (a division in every epilogue costs several multiplies; ONNX models keep their exact
    division, frontend/onnx_quant.py)."""
    lo, hi = saturation(dtype, out_min, out_max)

    def f(*i):
        return _saturated_code(x(*i), scale, zero_point, lo, hi).astype(dtype)

    return te.compute(x.shape, f, name="quantize", tag="elemwise")


def _saturated_code(v, scale: float, zero_point: int, lo: int, hi: int):
    """round_half_even(v * float32(1 / scale)) + zero_point saturated to [lo, hi], in float32
    (Note [quantize clamp]: compare-and-select, not te.min/te.max)."""
    v = tir_op.round(v * tir.const(float(reciprocal(scale)), "float32"))
    v = v + tir.const(float(zero_point), "float32")
    low, high = tir.const(float(lo), "float32"), tir.const(float(hi), "float32")
    v = tir_op.select(v < low, low, v)
    return tir_op.select(v > high, high, v)


# Note [16-bit activations by splitting]
# A layer whose activation needs more than 8 bits (tessera.quantize's a16 layers) keeps its int8
# weight and its uint8 x int8 kernels: the activation's 16-bit code q = saturate(round(x / s) +
# z, 0, 65535) is 256 * hi + lo with hi, lo bytes, and
#     sum_k w_k (q_k - z) = 256 * sum_k w_k (hi_k - z_hi) + sum_k w_k (lo_k - z_lo)
# with z = 256 * z_hi + z_lo, so the layer is two products of the same kind (qnn.conv2d or
# qnn.dense over the same packed weight; a conv's pad value is z_hi in the first and z_lo in
# the second, so a padded position is q = z, zero), each exact in int32 (|sum| <= K * 255 * 127
# < 2**31 for K < 66000). 256 times the first is not: it leaves int32 from K ~ 258 on, so the
# two are combined in float32 (tessera.quantize's rewrite: each dequantized by its own scale,
# 256 * s and s, and added), each term with float32's relative rounding of 2**-24 (~144 dB
# below the output, where the 16-bit grid itself is ~96 dB). A signed split (hi as int8 in
# [-128, 127], for a symmetric int16 grid) is the same arithmetic: the kernels read int8 data
# as x + 128 (Note [int8 operands]), which is the unsigned split of q + 32768, so it only
# moves the zero point to 32768; an asymmetric grid over the observed [min, max] is at least as
# fine as a symmetric one over [-max |x|, max |x|], and tessera.quantize uses it for every
# 16-bit activation, the signed residual stream too.


def quantize_byte(x, *, scale: float, zero_point: int, byte: int):
    """Byte `byte` (0: low, 1: high) of the uint16 code saturate(round_half_even(x * float32(1 /
    scale)) + zero_point, 0, 65535) as uint8 (Note [16-bit activations by splitting])."""

    def f(*i):
        v = _saturated_code(x(*i), scale, zero_point, 0, 65535).astype("int32")
        v = tir_op.shift_right(v, 8) if byte else tir_op.bitwise_and(v, 255)
        return v.astype("uint8")

    return te.compute(x.shape, f, name="quantize_byte", tag="elemwise")


def reciprocal(scale: float) -> np.float32:
    """float32(1 / float32(scale)): qnn.quantize's multiplier."""
    return np.float32(1.0) / np.float32(scale)


def dequantize(acc, scale, zero_point: int = 0):
    """float32(acc - zero_point) * scale (scale broadcast from the right, numpy style)."""
    rank, srank = len(acc.shape), len(scale.shape)
    sshape = _static(scale.shape)

    def f(*i):
        idx = [0 if d == 1 else i[rank - srank + k] for k, d in enumerate(sshape)]
        v = acc(*i).astype("int32")
        v = v - zero_point if zero_point else v
        return v.astype("float32") * scale(*idx)

    return te.compute(acc.shape, f, name="dequantize", tag="broadcast")


def sum_pool2d(x, pool_size, strides, padding, dilation, zero_point=0) -> te.Tensor:
    """NCHW uint8/int8 data -> int32 sums of x - zero_point over each window (tag "pool"); padded
    positions add nothing (ONNX's QLinearAveragePool counts them as the zero point)."""
    n, c, h, w = _static(x.shape)
    (kh, kw), (sh, sw), (dh, dw) = pool_size, strides, dilation
    pt, pl, pb, pr = padding
    oh = conv_out_size(h, kh, sh, pt, pb, dh)
    ow = conv_out_size(w, kw, sw, pl, pr, dw)
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    zp = te.const(int(zero_point), "int32")

    def value(b, ch, i, j):
        y, xx = i * sh - pt + ry * dh, j * sw - pl + rx * dw
        conds = []
        if pt or (oh - 1) * sh - pt + (kh - 1) * dh >= h:
            conds += [y >= 0, y < h]
        if pl or (ow - 1) * sw - pl + (kw - 1) * dw >= w:
            conds += [xx >= 0, xx < w]
        v = te.cast(x(b, ch, y, xx), "int32") - zp
        return te.if_then_else(te.all(*conds), v, te.const(0, "int32")) if conds else v

    return te.compute((n, c, oh, ow), lambda b, ch, i, j: te.sum(value(b, ch, i, j), axis=[ry, rx]),
                      name="sum_pool", tag="pool")  # fmt: skip


def qlinear_add(a, b, a_zero_point, b_zero_point, a_ratio, b_ratio, zero_point, dtype):
    """ORT's QLinearAdd: round_half_even(float32(a - za) * ra + float32(b - zb) * rb + zc),
    saturated, in float32 as MLAS computes it."""
    info = np.iinfo(dtype)
    lo, hi = tir.const(float(info.min), "float32"), tir.const(float(info.max), "float32")
    ra = tir.const(float(np.float32(a_ratio)), "float32")
    rb = tir.const(float(np.float32(b_ratio)), "float32")

    def side(x, zp, r, i):
        return (x(*i).astype("int32") - int(zp)).astype("float32") * r

    def f(*i):
        v = side(a, a_zero_point, ra, i) + side(b, b_zero_point, rb, i)
        v = v + tir.const(float(zero_point), "float32")
        return te.min(te.max(tir_op.round(v), lo), hi).astype(dtype)

    return te.compute(a.shape, f, name="qlinear_add", tag="broadcast")
