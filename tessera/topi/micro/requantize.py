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
