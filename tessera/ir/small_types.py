"""The small ONNX storage types: their formats, and scalar conversions in plain Python.

The float formats (float8 e4m3fn / e4m3fnuz / e5m2 / e5m2fnuz, float4 e2m1fn) are described by
`FloatFormat`; the conversion code (`tessera.topi.cast_small`) and the constants of these types
(`tir.const`) both read this table, so the two agree. `encode` / `decode` convert one Python
number following the ONNX Cast tables (round to nearest even; `saturate`):

    encode(1000.0, "float8_e4m3fn")                  ->  0x7E  (448, the largest finite)
    encode(1000.0, "float8_e4m3fn", saturate=False)  ->  0x7F  (NaN)
    decode(0x7E, "float8_e4m3fn")                    ->  448.0
    encode(-9, "int4")                               ->  0x7   (wraps: numpy's and ml_dtypes')

Ints are stored in the low bits of their byte (ml_dtypes' layout: int4 -1 is 0x0F).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache


@dataclass(frozen=True)
class FloatFormat:
    """A small float: 1 sign bit, `exp_bits`, `man_bits`, exponent `bias`.

    nan: "ieee" (exponent all ones, mantissa not 0; all ones with mantissa 0 is infinity),
    "ones" (exponent and mantissa all ones: e4m3fn), "neg_zero" (the bits of -0 are the only
    NaN: the fnuz types), or None (no NaN, no infinity: e2m1fn).
    """

    exp_bits: int
    man_bits: int
    bias: int
    nan: str | None

    @property
    def width(self) -> int:
        return 1 + self.exp_bits + self.man_bits

    @property
    def has_inf(self) -> bool:
        return self.nan == "ieee"

    @property
    def max_bits(self) -> int:
        """The bits of the largest finite value (sign bit clear)."""
        ones = (1 << (self.width - 1)) - 1
        if self.nan == "ieee":
            return ones - (1 << self.man_bits)  # the largest exponent holds inf and NaN
        if self.nan == "ones":
            return ones - 1
        return ones

    @property
    def nan_bits(self) -> int:
        """The bits of the NaN a conversion makes (sign bit clear; fnuz: the only NaN)."""
        if self.nan == "neg_zero":
            return 1 << (self.width - 1)
        if self.nan == "ones":
            return (1 << (self.width - 1)) - 1
        if self.nan == "ieee":  # quiet: the top mantissa bit set
            return ((1 << self.exp_bits) - 1) << self.man_bits | 1 << (self.man_bits - 1)
        raise ValueError("this format has no NaN")

    @property
    def inf_bits(self) -> int:
        return ((1 << self.exp_bits) - 1) << self.man_bits


FLOAT_FORMATS = {
    "float8_e4m3fn": FloatFormat(4, 3, 7, "ones"),
    "float8_e4m3fnuz": FloatFormat(4, 3, 8, "neg_zero"),
    "float8_e5m2": FloatFormat(5, 2, 15, "ieee"),
    "float8_e5m2fnuz": FloatFormat(5, 2, 16, "neg_zero"),
    "float4_e2m1fn": FloatFormat(2, 1, 1, None),
}

# name -> (value bits, signed)
INT_FORMATS = {"int4": (4, True), "uint4": (4, False), "int2": (2, True), "uint2": (2, False)}


# float8e8m0 (OCP MX scales): 8 exponent bits and nothing else, 2^(e - 127); e = 255 is NaN; no
# sign, zero or infinity. Conversion to it (ONNX Cast, onnx.numpy_helper.to_float8e8m0) keeps
# the float32 exponent field and rounds by `round_mode`: "up" (any mantissa bit set), "down"
# (truncate) or "nearest" (guard bit and any of round, sticky, or a non-zero exponent);
# `saturate` stops at 2^127 (bits 254) instead of rounding into NaN. NaN and inf become NaN;
# the sign is dropped (|x|'s exponent).
E8M0 = "float8_e8m0fnu"
E8M0_ROUND_MODES = ("up", "down", "nearest")


def e8m0_round(f_bits: int, saturate: bool = True, round_mode: str = "up") -> int:
    """The e8m0 byte of the float32 whose bits are `f_bits`."""
    exponent = (f_bits >> 23) & 0xFF
    if exponent == 0xFF:
        return 0xFF
    if round_mode == "nearest":
        g, r, s = f_bits & 0x400000, f_bits & 0x200000, f_bits & 0x1FFFFF
        up = bool(g) and bool(r or s or exponent > 0)
    elif round_mode == "up":
        up = bool(f_bits & 0x7FFFFF)
    elif round_mode == "down":
        up = False
    else:
        raise ValueError(f"round_mode must be one of {E8M0_ROUND_MODES}, got {round_mode!r}")
    if up and saturate and exponent == 0xFE:
        up = False
    return exponent + up


def _name(dtype) -> str:
    name = str(dtype)
    if name == E8M0:
        return name
    if name not in FLOAT_FORMATS and name not in INT_FORMATS:
        raise ValueError(f"{name} is not a small storage type")
    return name


def decode(bits: int, dtype) -> float | int:
    """The value of the stored byte `bits` (a float for the float formats, else an int)."""
    name = _name(dtype)
    if name == E8M0:
        return math.nan if int(bits) & 0xFF == 0xFF else math.ldexp(1.0, (int(bits) & 0xFF) - 127)
    if name in INT_FORMATS:
        width, signed = INT_FORMATS[name]
        low = int(bits) & ((1 << width) - 1)
        return low - (1 << width) if signed and low >> (width - 1) else low
    f = FLOAT_FORMATS[name]
    bits = int(bits) & ((1 << f.width) - 1)
    sign = -1.0 if bits >> (f.width - 1) else 1.0
    mag = bits & ((1 << (f.width - 1)) - 1)
    if f.nan == "neg_zero" and bits == f.nan_bits:
        return math.nan
    if f.nan == "ones" and mag == f.nan_bits:
        return math.nan
    if f.nan == "ieee" and mag >= f.inf_bits:
        return sign * math.inf if mag == f.inf_bits else math.nan
    exp, man = mag >> f.man_bits, mag & ((1 << f.man_bits) - 1)
    if exp == 0:
        return sign * math.ldexp(man, 1 - f.bias - f.man_bits)
    return sign * math.ldexp((1 << f.man_bits) + man, exp - f.bias - f.man_bits)


@cache
def _finite_bits(name: str) -> dict[float, int]:
    """Every non-negative finite value of a float format -> its bits."""
    f = FLOAT_FORMATS[name]
    return {decode(b, name): b for b in range(f.max_bits + 1)}


def int_range(name: str) -> tuple[int, int]:
    """The least and greatest value of the small int type `name` (int4, uint2, ...)."""
    width, signed = INT_FORMATS[name]
    return (-(1 << (width - 1)), (1 << (width - 1)) - 1) if signed else (0, (1 << width) - 1)


def encode(value, dtype, saturate: bool = True) -> int:
    """The stored byte of `value` converted to `dtype` by the ONNX Cast rules."""
    name = _name(dtype)
    if name == E8M0:  # through float32, as ONNX converts (round_mode "up")
        import struct

        try:
            f_bits = struct.unpack("<I", struct.pack("<f", float(value)))[0]
        except OverflowError:  # beyond float32: its infinity
            f_bits = 0x7F800000
        return e8m0_round(f_bits, saturate)
    if name in INT_FORMATS:  # ints wrap (ONNX: discard higher bits); floats truncate, and one
        width, _ = INT_FORMATS[name]  # out of the type's range is 0 (as ml_dtypes 0.7)
        v = float(value) if not isinstance(value, int) else value
        if isinstance(v, float):
            lo, hi = int_range(name)
            if not (lo - 1 < v < hi + 1):  # NaN too
                return 0
        return int(v) & ((1 << width) - 1)
    f = FLOAT_FORMATS[name]
    v = float(value)
    sign = 1 << (f.width - 1) if math.copysign(1.0, v) < 0 else 0
    if math.isnan(v):
        if f.nan is None:  # no NaN: ONNX leaves it undefined; ml_dtypes gives -0 (+0 for -NaN)
            return sign ^ (1 << (f.width - 1))
        return f.nan_bits if f.nan == "neg_zero" else sign | f.nan_bits
    a = abs(v)
    if math.isinf(a):
        mag = None
    else:
        # the quantum of a's binade (or of the subnormals), then round half to even
        exp = max(math.frexp(a)[1] - 1, 1 - f.bias) if a else 1 - f.bias
        quantum = math.ldexp(1.0, exp - f.man_bits)
        rounded = round(a / quantum) * quantum
        mag = _finite_bits(name).get(rounded)  # None: beyond the largest finite
    if mag is None:
        if saturate or f.nan is None:
            mag = f.max_bits
        elif f.nan == "neg_zero":
            return f.nan_bits
        else:
            mag = f.inf_bits if f.has_inf else f.nan_bits
    if mag == 0 and f.nan == "neg_zero":
        return 0  # no negative zero
    return sign | mag
