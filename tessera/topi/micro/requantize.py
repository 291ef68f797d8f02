"""Fixed-point requantize for cores where float is slow or absent: qnn.requantize_fixed.

    mult, shift = fixed_point(scale)        # per channel, at compile time; None: not exact
    %y = qnn.requantize_fixed(%acc, %mult, %shift, zero_point=zp, dtype="int8")

Note [fixed-point requantize]: a float32 scale s = m 2**e (m in [1/2, 1), 24 bits) is exactly
M 2**-(32 + t) with the int32 M = m 2**31 and t = -1 - e, which is at least 1 for s < 1/4
(requantize scales, input scale x weight scale / output scale, are far below it). Then

    y = clamp((((hi(acc * M) >> (t - 1)) + 1) >> 1) + zero_point, type's range)

with hi(p) = p >> 32, the high word of the 64-bit product (one SMULL on a Cortex-M), is exactly
acc * s rounded half up: ((h >> (t - 1)) + 1) >> 1 = (h + 2**(t - 1)) >> t, and the low word
cannot change that rounding shift because 2**(t - 1) is a whole number of high words. The
shift operand holds t - 1. qnn.requantize rounds float32(float32(acc) * s) half to
even, as ONNX Runtime does; the two differ only where that float32 product rounds across a half,
or on an exact tie: by at most one step. The epilogue is about 8 integer instructions instead of a
float multiply, clamp, rounding and conversion (30 on an M4F, a software float call on M0/M3).
Scales of 1/4 and more, and negative or non-finite ones, have no such form (fixed_point: None,
and the float requantize stays).
"""

from __future__ import annotations

import numpy as np

from tessera import te, tir
from tessera.tir import op as tir_op


def fixed_point(scale: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(M, t - 1) as int32 arrays of scale's shape (Note [fixed-point requantize]), or None when
    some scale has no exact form."""
    s = np.asarray(scale, np.float32)
    if not np.all(np.isfinite(s)) or np.any(s < 0):
        return None
    m, e = np.frexp(s.astype(np.float64))  # exact: float32 in float64
    mult = np.round(m * 2.0**31).astype(np.int64)  # exact: 24 significant bits
    t = -1 - e.astype(np.int64)  # total right shift 31 - e = 32 + t
    zero = s == 0
    if np.any((t < 1) & ~zero):  # s >= 1/4
        return None
    mult, t = np.where(zero, 0, mult), np.where(zero, 1, t)
    # |hi(acc M)| < 2**30 (|acc| <= 2**31, M < 2**31): any shift past 31 rounds to 0, as 31 does
    t = np.minimum(t, 31)
    return mult.astype(np.int32), (t - 1).astype(np.int32)


def reference(acc, mult, shift, zero_point: int, dtype: str) -> np.ndarray:
    """numpy: what requantize_fixed computes (int64 arithmetic)."""
    info = np.iinfo(dtype)
    hi = (acc.astype(np.int64) * mult.astype(np.int64)) >> 32
    y = (((hi >> shift.astype(np.int64)) + 1) >> 1) + zero_point
    return np.clip(y, info.min, info.max).astype(dtype)


def requantize_fixed(acc, mult, shift, *, zero_point: int, dtype: str) -> te.Tensor:
    """The compute of qnn.requantize_fixed (mult and shift broadcast from the right)."""
    info = np.iinfo(dtype)
    rank, srank = len(acc.shape), len(mult.shape)
    sshape = [int(d.value) for d in mult.shape]

    def f(*i):
        idx = [0 if d == 1 else i[rank - srank + k] for k, d in enumerate(sshape)]
        product = acc(*i).astype("int64") * mult(*idx).astype("int64")
        hi = tir_op.shift_right(product, tir.const(32, "int64")).astype("int32")
        halves = tir_op.shift_right(hi, shift(*idx)) + 1
        y = tir_op.shift_right(halves, tir.const(1, "int32")) + zero_point
        y = te.min(te.max(y, tir.const(int(info.min), "int32")), tir.const(int(info.max), "int32"))
        return y.astype(dtype)

    return te.compute(acc.shape, f, name="requantize_fixed", tag="broadcast")


# Note [fixed-point add]: ORT's QLinearAdd, y = round_half_even(ra (a - za) + rb (b - zb)) + zc,
# on the micro target in integers: with M = round(r 2**s) for both ratios and s = 22 - e, where
# 2**e bounds the larger ratio, each |M| <= 2**22 and |a - za| <= 255, so the sum
# v = (a - za) Ma + (b - zb) Mb fits an int32; y = v / 2**s + zc rounded half to even (the
# floor plus zc, then one up where the remainder passes half, or equals it and that is odd).
# Where r 2**s is a whole number (ratios of powers of two, the usual ties) that is ORT's value
# exactly; otherwise the rounding of each M (at most 1/2) moves v by at most 255 (|a - za| times
# 1/2, twice), 255 / 2**s of a step (about 1e-4 for ratios near 1, less for smaller ones; ORT's
# float32 arithmetic errs by a few 1e-6 of its value): the two can differ by one step only where
# the exact value lies that close to a half. Ratios of 2**21 and more keep the float
# form (s would be below 1).


def add_fixed_form(a_ratio: float, b_ratio: float) -> tuple[int, int, int] | None:
    """(Ma, Mb, s) of Note [fixed-point add], or None (keep the float form)."""
    ra, rb = float(np.float32(a_ratio)), float(np.float32(b_ratio))
    if not (np.isfinite(ra) and np.isfinite(rb)):
        return None
    e = np.frexp(max(abs(ra), abs(rb)))[1] if max(abs(ra), abs(rb)) > 0 else 0
    s = min(30, 22 - int(e))
    if s < 1:
        return None
    return int(round(ra * 2.0**s)), int(round(rb * 2.0**s)), s


def add_fixed_reference(a, b, za, zb, form, zero_point, dtype) -> np.ndarray:
    """numpy: what qlinear_add_fixed computes (int64 arithmetic)."""
    ma, mb, s = form
    info = np.iinfo(dtype)
    v = (a.astype(np.int64) - za) * ma + (b.astype(np.int64) - zb) * mb
    q = v >> s
    r = v - (q << s)
    half = 1 << (s - 1)
    q = q + zero_point  # ties go to the even y, zero point included (as ORT adds it first)
    q = q + ((r > half) | ((r == half) & (q & 1 == 1)))
    return np.clip(q, info.min, info.max).astype(dtype)


def qlinear_add_micro(a, b, *, a_zero_point=0, b_zero_point=0, a_ratio=1.0, b_ratio=1.0,
                      zero_point=0, dtype="int8") -> te.Tensor:  # fmt: skip
    """qnn.add's compute on the micro target (Note [fixed-point add]); the float form where the
    ratios have no fixed form."""
    from tessera.topi import qnn as topi_qnn

    form = add_fixed_form(a_ratio, b_ratio)
    if form is None:
        return topi_qnn.qlinear_add(a, b, a_zero_point, b_zero_point, a_ratio, b_ratio,
                                    zero_point, dtype)  # fmt: skip
    ma, mb, s = form
    info = np.iinfo(dtype)
    i32 = "int32"

    def f(*i):
        va = (a(*i).astype(i32) - int(a_zero_point)) * tir.const(ma, i32)
        v = va + (b(*i).astype(i32) - int(b_zero_point)) * tir.const(mb, i32)
        q = tir_op.shift_right(v, tir.const(s, i32))
        r = v - tir_op.shift_left(q, tir.const(s, i32))
        q = q + int(zero_point)  # ties go to the even y, zero point included
        half = tir.const(1 << (s - 1), i32)
        up = tir_op.select((r > half) | ((r == half) & ((q & 1) == 1)), tir.const(1, i32),
                           tir.const(0, i32))  # fmt: skip
        y = q + up
        y = te.min(te.max(y, tir.const(int(info.min), i32)), tir.const(int(info.max), i32))
        return y.astype(dtype)

    return te.compute(a.shape, f, name="qlinear_add_fixed", tag="broadcast")
