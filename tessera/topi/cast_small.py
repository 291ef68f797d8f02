"""Conversions to and from the small storage types (float8, float4, int4, int2), in te.

Written once with integer operations on `reinterpret`ed bits, so every code generator gets
them without knowing the formats (they only load, store and reinterpret the bytes):

    y = topi.cast_small.cast(x, "float8_e4m3fn")               # float32 -> float8, saturating
    z = topi.cast_small.cast(y, "float16")                      # float8 -> float16, exact
    v = topi.cast_small.convert(x(i), "int4")                   # one expression

Rules (the ONNX Cast tables, `tessera.ir.small_types` says the same in Python): floats round to
nearest even; `saturate` (the default) clamps what is beyond the largest finite value (and
infinities) to it, else overflow is infinity (e5m2) or NaN; fnuz types have no -0 and one NaN;
float4_e2m1fn has neither and always saturates. float -> int4/int2 truncates then wraps, ints
wrap (ONNX: fixed point discards the higher bits). float64 is encoded from its own bits (no
double rounding through float32); the 16-bit floats go through float32 (exact).
"""

from __future__ import annotations

from tessera import te
from tessera.ir.dtype import DType, float32, float64, int32, uint8, uint32, uint64
from tessera.ir.small_types import (
    E8M0,
    E8M0_ROUND_MODES,
    FLOAT_FORMATS,
    INT_FORMATS,
    FloatFormat,
    int_range,
)
from tessera.tir.expr import Expr

ELEMWISE = "elemwise"

# source float: (bits type, exponent bits, mantissa bits, bias)
_IEEE = {32: (uint32, 8, 23, 127), 64: (uint64, 11, 52, 1023)}


def _u(value: int, dt: DType = uint32) -> Expr:
    return te.const(value, dt)


def _round_shift(x: Expr, shift: Expr | int) -> Expr:
    """x >> shift rounded to nearest, ties to even (shift >= 1)."""
    dt = x.dtype
    one = _u(1, dt)
    shift = shift if isinstance(shift, Expr) else _u(shift, dt)
    half_minus_one = (one << (shift - one)) - one
    return (x + half_minus_one + ((x >> shift) & one)) >> shift


def encode_float(v: Expr, fmt: FloatFormat, saturate: bool = True) -> Expr:
    """The byte (uint8) of float32/float64 value v in small float format fmt."""
    ut, ebits, mbits, bias = _IEEE[v.dtype.bits]
    width = v.dtype.bits
    bits = te.reinterpret(v, ut)
    sign = bits >> _u(width - 1, ut)
    mag = bits & _u((1 << (width - 1)) - 1, ut)
    inf_src = _u(((1 << ebits) - 1) << mbits, ut)
    exp = mag >> _u(mbits, ut)
    m = fmt.man_bits
    # normal in the target: keep the top m mantissa bits, rounded; then rebias the exponent
    normal = _round_shift(mag, mbits - m) - _u((bias - fmt.bias) << m, ut)
    # subnormal in the target: the full significand shifted by how far below the normal range
    implicit = te.select(exp != _u(0, ut), _u(1 << mbits, ut), _u(0, ut))
    full = (mag & _u((1 << mbits) - 1, ut)) | implicit
    # the shift is >= mbits - m + 1 where the target is subnormal; clamped for the other lanes
    shift = _u(mbits - m + bias + 1 - fmt.bias, ut) - te.max(exp, _u(1, ut))
    shift = te.min(te.max(shift, _u(1, ut)), _u(mbits + 2, ut))
    sub = _round_shift(full, shift)
    t = te.select(exp >= _u(bias + 1 - fmt.bias, ut), normal, sub)
    too_big = (t > _u(fmt.max_bits, ut)) | (mag == inf_src)
    over = fmt.max_bits if saturate or fmt.nan is None else None
    if over is None:
        over = fmt.inf_bits if fmt.has_inf else fmt.nan_bits
    t = te.select(too_big, _u(over, ut), t)
    top = _u(1 << (fmt.width - 1), ut)
    signed = t | te.select(sign != _u(0, ut), top, _u(0, ut))
    is_nan = mag > inf_src
    if fmt.nan is None:  # no NaN to give (ONNX: undefined): ml_dtypes' answer, a zero
        nan = te.select(sign != _u(0, ut), _u(0, ut), top)
    elif fmt.nan == "neg_zero":
        nan = top
        # no negative zero; overflow without saturation is the NaN too
        signed = te.select(t == _u(0, ut), _u(0, ut), signed)
        if not saturate:
            signed = te.select(too_big, top, signed)
    else:
        nan = te.select(sign != _u(0, ut), top, _u(0, ut)) | _u(fmt.nan_bits, ut)
    return te.cast(te.select(is_nan, nan, signed), uint8)


def decode_float(byte: Expr, fmt: FloatFormat) -> Expr:
    """The float32 value of the byte (uint8) of a small float of format fmt (exact)."""
    b = te.cast(byte, uint32) & _u((1 << fmt.width) - 1)
    m = fmt.man_bits
    sign = (b >> _u(fmt.width - 1)) & _u(1)
    mag = b & _u((1 << (fmt.width - 1)) - 1)
    exp = mag >> _u(m)
    man = mag & _u((1 << m) - 1)
    normal = ((exp + _u(127 - fmt.bias)) << _u(23)) | (man << _u(23 - m))
    scale = 2.0 ** (1 - fmt.bias - m)
    sub = te.reinterpret(te.cast(man, float32) * te.const(scale, float32), uint32)
    out = te.select(exp == _u(0), sub, normal)
    nan32, inf32 = _u(0x7FC00000), _u(0x7F800000)
    if fmt.nan == "ieee":
        top = _u((1 << fmt.exp_bits) - 1)
        out = te.select(exp == top, te.select(man == _u(0), inf32, nan32), out)
    elif fmt.nan == "ones":
        out = te.select(mag == _u(fmt.nan_bits), nan32, out)
    elif fmt.nan == "neg_zero":
        out = te.select(b == _u(fmt.nan_bits), nan32, out)
        sign = te.select(b == _u(fmt.nan_bits), _u(0), sign)
    return te.reinterpret(out | (sign << _u(31)), float32)


def _encode_int(v: Expr, dt: DType) -> Expr:
    """The byte of int4/int2 dt holding v. Integers wrap. Floats truncate toward zero, and one
    whose truncation the type cannot hold (NaN and infinities too) becomes 0: ONNX leaves it
    undefined, and this is what its reference (ml_dtypes) gives, the same on every CPU."""
    width, _ = INT_FORMATS[dt.code]
    if v.dtype.is_float:
        lo, hi = int_range(dt.code)
        f = v if v.dtype.bits >= 32 else te.cast(v, float32)
        inside = te.logical_and(f > te.const(lo - 1, f.dtype), f < te.const(hi + 1, f.dtype))
        v = te.select(inside, te.cast(f, int32), te.const(0, int32))
    elif not v.dtype.is_integer:
        v = te.cast(v, int32)
    return te.cast(v & te.const((1 << width) - 1, v.dtype), uint8)


def _decode_int(byte: Expr, dt: DType) -> Expr:
    """The int32 value of the byte of int4/int2 dt (its low bits, sign-extended if signed)."""
    width, signed = INT_FORMATS[dt.code]
    low = te.cast(byte, int32) & te.const((1 << width) - 1, int32)
    if not signed:
        return low
    top = te.const(1 << (width - 1), int32)
    return (low ^ top) - top


def _decode_e8m0(byte: Expr) -> Expr:
    """2^(e - 127) as float32 (e = 0: the subnormal 2^-127; e = 255: NaN)."""
    e = te.cast(byte, uint32)
    bits = te.select(e == _u(0xFF), _u(0x7FC00000), te.select(e == _u(0), _u(0x400000), e << 23))
    return te.reinterpret(bits, float32)


def _encode_e8m0(v: Expr, saturate: bool, round_mode: str) -> Expr:
    """The e8m0 byte of float32 v (small_types.e8m0_round, in integer operations)."""
    if round_mode not in E8M0_ROUND_MODES:
        raise ValueError(f"round_mode must be one of {E8M0_ROUND_MODES}, got {round_mode!r}")
    f = te.reinterpret(v, uint32)
    exponent = (f >> 23) & _u(0xFF)
    if round_mode == "nearest":
        g = (f & _u(0x400000)) != _u(0)
        rest = te.logical_or((f & _u(0x3FFFFF)) != _u(0), exponent > _u(0))
        up = te.logical_and(g, rest)
    elif round_mode == "up":
        up = (f & _u(0x7FFFFF)) != _u(0)
    else:
        up = te.const(False, "bool")
    if saturate:
        up = te.logical_and(up, exponent != _u(0xFE))
    out = te.select(exponent == _u(0xFF), exponent, exponent + te.select(up, _u(1), _u(0)))
    return te.cast(out, uint8)


def _from_small(v: Expr, dt: DType) -> Expr:
    """A small-type value as the plain type that holds it exactly: float32 or int32."""
    byte = te.reinterpret(v, uint8)
    if dt.code == E8M0:
        return _decode_e8m0(byte)
    if dt.code in INT_FORMATS:
        return _decode_int(byte, dt)
    return decode_float(byte, FLOAT_FORMATS[dt.code])


def _plain_cast(v: Expr, dtype: DType) -> Expr:
    """numpy's astype between plain types (to bool means != 0)."""
    if v.dtype == dtype:
        return v
    if dtype.is_bool:
        return v != te.const(0, v.dtype)
    return te.cast(v, dtype)


def convert(v: Expr, dtype, saturate: bool = True, round_mode: str = "up") -> Expr:
    """v converted to dtype, where v's dtype or dtype (or both) is a small storage type
    (`round_mode`: float8_e8m0fnu's rounding, small_types.E8M0)."""
    dtype = DType.parse(dtype)
    src = v.dtype
    if src == dtype:
        return v
    if src.is_storage_only:
        v = _from_small(v, src)
        if not dtype.is_storage_only:
            return _plain_cast(v, dtype)
        src = v.dtype
    if not dtype.is_storage_only:
        raise ValueError(f"convert: neither {src} nor {dtype} is a small storage type")
    if dtype.code in INT_FORMATS:
        return te.reinterpret(_encode_int(v, dtype), dtype)
    if dtype.code == E8M0:  # from float32, as ONNX converts
        v = v if v.dtype == float32 else te.cast(v, float32)
        return te.reinterpret(_encode_e8m0(v, saturate, round_mode), dtype)
    if src.is_bool or (src.is_integer and src.bits <= 16):
        v = te.cast(v, float32)  # exact
    elif src.is_integer or src.bits == 16:  # 16-bit floats widen exactly to float32
        v = te.cast(v, float64 if src.is_integer else float32)
    return te.reinterpret(encode_float(v, FLOAT_FORMATS[dtype.code], saturate), dtype)


def cast(x: te.Tensor, dtype, saturate: bool = True, round_mode: str = "up") -> te.Tensor:
    """x converted element-wise to dtype (x's dtype or dtype a small storage type)."""
    dtype = DType.parse(dtype)
    return te.compute(
        x.shape,
        lambda *i: convert(x(*i), dtype, saturate, round_mode),
        name="cast",
        tag=ELEMWISE,
    )


def _to_float32_round_to_odd(x):
    """float64 -> float32 rounding to odd: a later rounding to a few bits is then exact."""
    import numpy as np

    with np.errstate(over="ignore"):
        y = x.astype(np.float32)
    inexact = (y.astype(np.float64) != x) & ~np.isnan(x)
    even = (y.view(np.uint32) & 1) == 0
    toward = np.where(x > y, np.float32(np.inf), np.float32(-np.inf))
    return np.where(inexact & even, np.nextafter(y, toward), y)


def _reference_e8m0(x, saturate: bool, round_mode: str):
    import ml_dtypes
    import numpy as np

    from tessera.ir.small_types import e8m0_round

    with np.errstate(over="ignore"):
        f = np.asarray(x, np.float32).reshape(-1).view(np.uint32)
    out = np.array([e8m0_round(int(b), saturate, round_mode) for b in f], np.uint8)
    return out.reshape(np.shape(x)).view(ml_dtypes.float8_e8m0fnu)


def reference(x, dtype, saturate: bool = True, round_mode: str = "up"):
    """The numpy reference of `cast` (ml_dtypes arrays for the small types), by the ONNX rules:
    what onnx.reference computes (saturation: clip to the largest finite, then round), except
    that float64 rounds once, as the ONNX tables say (ml_dtypes rounds it to float32 first, so
    a float64 a hair off a tie between two float8 values may round the other way there)."""
    import ml_dtypes
    import numpy as np

    dtype = DType.parse(dtype)
    target = dtype.dtype
    x = np.asarray(x)
    if dtype.code == E8M0:
        if x.dtype.kind == "V":
            x = x.astype(np.float32)
        return _reference_e8m0(x, saturate, round_mode)
    if x.dtype.kind == "V":  # ml_dtypes: bfloat16 and the small types hold exactly in these
        x = x.astype(np.int32 if x.dtype.name in INT_FORMATS else np.float32)
    if dtype.code in FLOAT_FORMATS and x.dtype.kind in "iub":
        x = x.astype(np.float64)
    if dtype.code in FLOAT_FORMATS and x.dtype == np.float64:
        x = _to_float32_round_to_odd(x)
    if dtype.code in FLOAT_FORMATS and saturate and FLOAT_FORMATS[dtype.code].nan is not None:
        top = float(ml_dtypes.finfo(target).max)
        x = np.clip(x, -top, top)
    if dtype.code in INT_FORMATS and x.dtype.kind == "f":  # out of range: 0 (_encode_int)
        lo, hi = int_range(dtype.code)
        with np.errstate(invalid="ignore"):
            x = np.where((x > lo - 1) & (x < hi + 1), np.trunc(x), 0).astype(np.int64)
    if not dtype.is_storage_only and x.dtype.kind == "f" and target.kind in "iu":
        with np.errstate(invalid="ignore"):
            return np.trunc(x).astype(target)
    return x.astype(target)
