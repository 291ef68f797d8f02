"""Integer products of the quantized ONNX ops on the int8 kernels (graph/ops/qnn.py).

    acc = int_conv(b, x, w, x_zp, w_zp, conv_attrs)     # sum (x - zx)(w - zw) as int32, or None
    acc = int_matmul(b, a, bmat, a_zp, b_zp)             # the same for a @ b
    y = requantize(b, acc, scale, y_zp, dtype)           # ORT's float32 rounding

A product runs on qnn.conv2d / qnn.dense when the weight and its zero point are constants and
the weight minus its zero point fits int8 (always for int8 weights with zero point 0, and for
uint8 weights with zero point 128): then sum (x - zx) w' = sum x_u w' - zx_u sum w' (Note [int8
operands] in topi/qnn.py), the second term a constant, or, for a zero point computed at run time
(DynamicQuantizeLinear), a product by the constant column sums. Otherwise the caller falls back
(matmul: int32 matmul; conv: the exact float64 conv).
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
    """int32 sum (x - zx)(w - zw) of a 2-D conv on qnn.conv2d, or None (not on the fast path)."""
    wa = _const(w)
    if wa is None or wa.ndim != 4 or str(x.type.dtype) not in ("uint8", "int8"):
        return None
    zw = _zp_array(w_zp, wa.shape[0])
    zx = _x_unsigned_zp(x, x_zp)
    if zw is None or zx is None:
        return None
    w8 = _weight_int8(wa, zw, 0)
    if w8 is None:
        return None
    acc = b.call("qnn.conv2d", x, b.const(topi_qnn.pack_conv_weight(w8)), strides=strides,
                 padding=pads, dilation=dilations, groups=group, pad_value=zx)  # fmt: skip
    # padded positions read zx_u too, so every window position is compensated
    comp = zx * w8.astype(np.int64).sum(axis=(1, 2, 3))
    if not comp.any():
        return acc
    return b.call("subtract", acc, b.const(comp.astype(np.int32).reshape(-1, 1, 1)))


def int_matmul(b, a, bmat, a_zp, b_zp):
    """int32 (a - za) @ (bmat - zb) with a constant 2-D bmat on qnn.dense, or None."""
    ba = _const(bmat)
    if ba is None or ba.ndim != 2 or str(a.type.dtype) not in ("uint8", "int8"):
        return None
    zb = _zp_array(b_zp, ba.shape[1])
    if zb is None:
        return None
    w8 = _weight_int8(ba, zb, 1)
    if w8 is None:
        return None
    acc = b.call("qnn.dense", a, b.const(topi_qnn.pack_dense_weight(w8.T)), units=ba.shape[1])
    colsum = w8.astype(np.int64).sum(axis=0)
    if not colsum.any():
        return acc
    zx = _x_unsigned_zp(a, a_zp)
    if zx is not None:
        comp = b.const((zx * colsum).astype(np.int32))
    else:  # a zero point computed at run time: a scalar or one per row (a's axis -2)
        zpv = b.call("cast", a_zp, dtype="int32")
        if str(a.type.dtype) == "int8":
            zpv = b.call("add", zpv, b.const(np.int32(128)))
        if zpv.type.ndim == 1 and zpv.type.shape[0] != 1:
            zpv = b.reshape(zpv, (zpv.type.shape[0], 1))
        elif zpv.type.ndim:
            zpv = b.reshape(zpv, ())
        comp = b.call("multiply", zpv, b.const(colsum.astype(np.int32)))
    return b.call("subtract", acc, comp)


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
    a3, b3 = b.reshape(a, (batch_a, m, k)), b.reshape(bmat, (batch_b, k, n))
    acc = b.call("qnn.batch_matmul", a3, b3)
    a_u = b.call("cast", a3, dtype="int32")
    if str(a.type.dtype) == "int8":
        a_u = b.call("add", a_u, b.const(np.int32(128)))
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
