"""Integer products of the quantized ONNX ops on the int8 kernels (graph/ops/qnn.py).

    acc = int_conv(b, x, w, x_zp, w_zp, conv_attrs)     # sum (x - zx)(w - zw) as int32, or None
    acc = int_matmul(b, a, bmat, a_zp, b_zp)             # the same for a @ b
    y = requantize(b, acc, scale, y_zp, dtype)           # ORT's float32 rounding

A product runs on qnn.conv2d / qnn.dense when the weight and its zero point are constants: then
sum (x - zx) w' = sum x_u w' - zx_u sum w' (Note [int8 operands] in topi/qnn.py), the second
term a constant, or, for a zero point computed at run time (DynamicQuantizeLinear), a product by
the constant sums. Where w' = w - zw leaves int8 (a uint8 weight with a zero point far from
128) both split it into an int8 weight and a shift per output times the data's sums (Note [wide
conv weights]). Otherwise (a weight at run time, or not of one of these forms) the caller falls
back (matmul: qnn.batch_matmul or an int32 matmul; conv: the exact float64 conv).
"""

from __future__ import annotations

import numpy as np

from tessera.graph.ir import Constant
from tessera.topi import qnn as topi_qnn


def _const(v) -> np.ndarray | None:
    return v.array if isinstance(v, Constant) else None


def _zp_array(zp, n: int) -> np.ndarray | None:
    """A constant zero point as int64 of shape (n,) (scalar broadcast), None when runtime."""
    if zp is None:
        return np.zeros(n, np.int64)
    arr = _const(zp)
    if arr is None:
        return None
    arr = arr.astype(np.int64).reshape(-1)
    return np.broadcast_to(arr, (n,)) if arr.size in (1, n) else None


def _weight_int8(w: np.ndarray, zp: np.ndarray, axis: int) -> np.ndarray | None:
    """w - zp (zp along `axis`) as int8, or None when it does not fit."""
    shape = [1] * w.ndim
    shape[axis] = -1
    centered = w.astype(np.int64) - zp.reshape(shape)
    if centered.min(initial=0) < -128 or centered.max(initial=0) > 127:
        return None
    return centered.astype(np.int8)


def _x_unsigned_zp(x, zp):
    """zx_u (Note [int8 operands]) of a constant scalar zero point, or None."""
    if zp is None:
        return 128 if str(x.type.dtype) == "int8" else 0
    arr = _const(zp)
    if arr is None or arr.size != 1:
        return None
    return int(arr.reshape(-1)[0]) + (128 if str(x.type.dtype) == "int8" else 0)


def int_conv(b, x, w, x_zp, w_zp, strides, pads, dilations, group):
    """int32 sum (x - zx)(w - zw) of a 2-D conv on qnn.conv2d, or None (not on the fast path).

    Note [wide conv weights]: a uint8 weight with a zero point far from 128 (ORT's dynamic
    quantization writes them) leaves w - zw outside int8. Then w - zw = (w - c) + (c - zw)
    with c = 128 (uint8) or 0 (int8), w - c int8, and the second part a per-channel shift s:
    sum (x - zx)(w - zw) = sum (x - zx)(w - c) + s * sum (x - zx), the last a window sum of
    the data (a qnn.conv2d with a ones weight, one output per group). A zero point computed at
    run time (DynamicQuantizeLinear) pads the data explicitly with it (a where over the padded
    data), so every window position is compensated alike."""
    wa = _const(w)
    if wa is None or wa.ndim != 4 or str(x.type.dtype) not in ("uint8", "int8"):
        return None
    out_channels = wa.shape[0]
    zw = _zp_array(w_zp, out_channels)
    if zw is None or str(wa.dtype) not in ("uint8", "int8"):
        return None
    w8 = _weight_int8(wa, zw, 0)
    shift = np.zeros(out_channels, np.int64)
    if w8 is None:
        c = 128 if str(wa.dtype) == "uint8" else 0
        w8 = (wa.astype(np.int64) - c).astype(np.int8)
        shift = c - zw
    zx = _x_unsigned_zp(x, x_zp)
    if zx is None:  # run time: pad with it here, then convolve without padding
        zx = _x_unsigned_runtime(b, x, x_zp)
        x, pads = _pad_with(b, x, pads, zx), (0, 0, 0, 0)
        pad_value = 0
    else:
        pad_value = zx

    def conv(weight):
        return b.call("qnn.conv2d", x, b.const(topi_qnn.pack_conv_weight(weight)),
                      strides=strides, padding=pads, dilation=dilations, groups=group,
                      pad_value=pad_value)  # fmt: skip

    def times_zx(values: np.ndarray):  # zx_u * values, shaped (O, 1, 1), int32
        return _times_zx(b, zx, values.reshape(-1, 1, 1))

    acc = conv(w8)
    # window positions (pads included) read zx_u, so each is compensated alike
    weight_sums = w8.astype(np.int64).sum(axis=(1, 2, 3))
    if weight_sums.any():
        acc = b.call("subtract", acc, times_zx(weight_sums))
    if shift.any():
        per_group = wa.shape[1] * wa.shape[2] * wa.shape[3]
        ones = np.ones((group, *wa.shape[1:]), np.int8)
        sums = conv(ones)  # (N, group, OH, OW): the window sums of x_u
        if group > 1:
            n, _, oh, ow = sums.type.shape
            sums = b.reshape(sums, (n, group, 1, oh, ow))
            sums = b.call("expand", sums, shape=(n, group, out_channels // group, oh, ow))
            sums = b.reshape(sums, (n, out_channels, oh, ow))
        window = b.call("subtract", sums, times_zx(np.full(1, per_group, np.int64)))
        acc = b.call("add", acc, b.call("multiply", window, b.const(
            shift.astype(np.int32).reshape(-1, 1, 1))))  # fmt: skip
    return acc


def _x_unsigned_runtime(b, x, zp, shape=()):
    """zx_u as int32 computed at run time (x's zero point plus 128 for int8 data), of
    `shape` (a scalar, or (rows, 1) for a zero point per row)."""
    return _unsigned(b, b.reshape(zp, shape), x.type.dtype)


def _unsigned(b, v, dtype):
    """v as int32 values of the unsigned reading (Note [int8 operands]): plus 128 for int8."""
    v = b.call("cast", v, dtype="int32")
    return b.call("add", v, b.const(np.int32(128))) if str(dtype) == "int8" else v


def _times_zx(b, zx, values: np.ndarray):
    """zx_u * values as int32: a constant when zx_u is (an int), else a product."""
    if isinstance(zx, int):
        return b.const((zx * values).astype(np.int32))
    return b.call("multiply", zx, b.const(values.astype(np.int32)))


def _pad_with(b, x, pads, zx):
    """x padded by the conv's pads (top, left, bottom, right) with the run-time value zx_u."""
    if not any(pads):
        return x
    n, c, h, w = x.type.shape
    top, left, bottom, right = pads
    widths = (0, 0, top, left, 0, 0, bottom, right)
    padded = b.call("pad", x, pad_width=widths)
    inside = np.zeros((1, 1, h + top + bottom, w + left + right), bool)
    inside[:, :, top : top + h, left : left + w] = True
    fill = b.call("cast", zx, dtype=str(x.type.dtype))
    if str(x.type.dtype) == "int8":  # zx_u - 128 is the int8 value that reads as zx_u
        fill = b.call("cast", b.call("subtract", zx, b.const(np.int32(128))), dtype="int8")
    return b.call("where", b.const(inside), padded, fill)


def int_matmul(b, a, bmat, a_zp, b_zp):
    """int32 (a - za) @ (bmat - zb) with a constant 2-D bmat on qnn.dense, or None.

    A weight whose w - zw leaves int8 (a uint8 weight with a zero point far from 128, as ORT's
    dynamic quantization writes them) splits as a conv's does (Note [wide conv weights]):
    w - zw = (w - c) + (c - zw), c = 128 (uint8) or 0 (int8), so the product is qnn.dense over
    w - c plus s * rowsum(a - za) with s = c - zw per column."""
    ba = _const(bmat)
    if ba is None or ba.ndim != 2 or str(a.type.dtype) not in ("uint8", "int8"):
        return None
    zb = _zp_array(b_zp, ba.shape[1])
    if zb is None or str(ba.dtype) not in ("uint8", "int8"):
        return None
    w8 = _weight_int8(ba, zb, 1)
    shift = np.zeros(ba.shape[1], np.int64)
    if w8 is None:
        c = 128 if str(ba.dtype) == "uint8" else 0
        w8 = (ba.astype(np.int64) - c).astype(np.int8)
        shift = c - zb
    acc = _bounded_dense(b, a, w8.T)
    colsum = w8.astype(np.int64).sum(axis=0)
    if not colsum.any() and not shift.any():
        return acc
    zx = _x_unsigned_zp(a, a_zp)
    if zx is None:  # a zero point computed at run time: a scalar or one per row (a's axis -2)
        per_row = a_zp.type.ndim == 1 and a_zp.type.shape[0] != 1
        zx = _x_unsigned_runtime(b, a, a_zp, (a_zp.type.shape[0], 1) if per_row else ())
    if colsum.any():
        acc = b.call("subtract", acc, _times_zx(b, zx, colsum))
    if shift.any():  # + s * sum_k (x_u - zx_u), one sum per row of a
        x_u = _unsigned(b, a, a.type.dtype)
        rows = b.call("sum", x_u, axis=(a.type.ndim - 1,), keepdims=True)
        rows = b.call("subtract", rows, _times_zx(b, zx, np.asarray(ba.shape[0])))
        acc = b.call("add", acc, b.call("multiply", rows, b.const(shift.astype(np.int32))))
    return acc


def _bounded_dense(b, a, w):
    """a_u @ w.T on qnn.dense (w: (N, K) int8), its weights' pairs bounded where they can be
    (Note [bounded pairs] in codegen/llvm/int8_dot.py): all of w, or a main part of it plus a
    residual product over the few K indices whose pairs break the bound (topi_qnn.split_bounded),
    else none."""
    units = w.shape[0]

    def dense(x, weight):
        bounded = topi_qnn.pairs_bounded(weight)
        wp = b.const(topi_qnn.pack_dense_weight(weight))
        return b.call("qnn.dense", x, wp, units=units, bounded=bounded)

    split = topi_qnn.split_bounded(w)
    if split is None or not len(split[1]):  # past the bound in too many rows, or in none
        return dense(a, w)
    main, rows, residual = split
    picked = b.call("gather", a, b.const(rows.astype(np.int64)), axis=a.type.ndim - 1)
    return b.call("add", dense(a, main), dense(picked, residual))


def requant_scale(b, in_scale, w_scale, y_scale, rank: int, axis: int):
    """float32(float32(in_scale * w_scale) / y_scale) as ORT computes it, shaped to broadcast
    over an output of `rank` dims along `axis` (per channel), or None when not constant."""
    vals = [_const(v) for v in (in_scale, w_scale, y_scale)]
    if any(v is None for v in vals):
        return None
    xs, ws, ys = (np.asarray(v, np.float32).reshape(-1) for v in vals)
    scale = (xs * ws).astype(np.float32) / ys
    if scale.size == 1:
        return b.const(scale.reshape(()).astype(np.float32))
    shape = [1] * (rank - axis)
    shape[0] = scale.size
    return b.const(scale.astype(np.float32).reshape(shape))


def requantize(b, acc, scale, y_zero_point, dtype: str):
    zp = 0 if y_zero_point is None else int(_const(y_zero_point).reshape(-1)[0])
    return b.call("qnn.requantize", acc, scale, zero_point=zp, dtype=dtype)


def constant_zero_point(zp) -> bool:
    return zp is None or (_const(zp) is not None and _const(zp).size == 1)


def _scalar_zp(b, zp, shift: int):
    """A scalar zero point as an int32 value plus `shift` (None when zp is not a scalar); a
    Python int when it is a constant."""
    if zp is None:
        return shift
    arr = _const(zp)
    if arr is not None:
        return int(arr.reshape(-1)[0]) + shift if arr.size == 1 else None
    if zp.type.ndim and int(np.prod(zp.type.shape)) != 1:
        return None
    v = b.reshape(b.call("cast", zp, dtype="int32"), ())
    return b.call("add", v, b.const(np.int32(shift))) if shift else v


def _times(b, v, zp):
    """v * zp for an int32 value v and a zero point (int or value); None when zp is 0."""
    if isinstance(zp, int):
        return None if zp == 0 else b.call("multiply", v, b.const(np.int32(zp)))
    return b.call("multiply", v, zp)


def int_batch_matmul(b, a, bmat, a_zp, b_zp):
    """int32 (a - za) @ (bmat - zb) with both operands at run time on qnn.batch_matmul (scalar
    zero points), or None: sum a_u b_s - zb_s rowsum(a_u) - za_u colsum(b_s) + K za_u zb_s."""
    kinds = ("uint8", "int8")
    if str(a.type.dtype) not in kinds or str(bmat.type.dtype) not in kinds:
        return None
    if a.type.ndim < 2 or bmat.type.ndim < 2 or not a.type.is_static or not bmat.type.is_static:
        return None
    (*ab, m, k), (*bb, _, n) = a.type.shape, bmat.type.shape
    batch_a, batch_b = int(np.prod(ab)), int(np.prod(bb))
    lead = ab if batch_a >= batch_b else bb
    if batch_a != batch_b and 1 not in (batch_a, batch_b):
        return None
    za = _scalar_zp(b, a_zp, 128 if str(a.type.dtype) == "int8" else 0)
    zb = _scalar_zp(b, b_zp, -128 if str(bmat.type.dtype) == "uint8" else 0)
    if za is None or zb is None:
        return None
    if batch_b == 1:  # one b for every batch of a: a's batches are more rows of one product
        batch_a, m_rows = 1, batch_a * m  # (one product, not a batch that broadcasts b)
    else:
        m_rows = m
    a3, b3 = b.reshape(a, (batch_a, m_rows, k)), b.reshape(bmat, (batch_b, k, n))
    acc = b.call("qnn.batch_matmul", a3, b3)
    a_u = _unsigned(b, a3, a.type.dtype)
    b_s = b.call("cast", b3, dtype="int32")
    if str(bmat.type.dtype) == "uint8":
        b_s = b.call("subtract", b_s, b.const(np.int32(128)))
    terms = [
        _times(b, b.call("sum", a_u, axis=(2,), keepdims=True), zb),
        _times(b, b.call("sum", b_s, axis=(1,), keepdims=True), za),
    ]
    for t in terms:
        if t is not None:
            acc = b.call("subtract", acc, t)
    if terms[0] is not None and terms[1] is not None:  # both zero points nonzero
        k_za = _times(b, b.const(np.int32(k)), za)
        acc = b.call("add", acc, _times(b, k_za, zb))
    return b.reshape(acc, (*lead, m, n))
