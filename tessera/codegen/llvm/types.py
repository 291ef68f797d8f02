"""LLVM types of tir dtypes, constants, and every cast between them.

Registers: intN/uintN -> iN, bool -> i1, float16 -> half, float32 -> float, float64 -> double,
bfloat16 -> i16 (its bits: llvmlite has no bfloat type, and arithmetic on it goes through
float32 anyway), the storage-only types (float8, int4, ...) -> i8 (their stored byte: only
loads, stores, selects and reinterpret take them; `tessera.topi.cast_small` converts them).
Memory: the same, except bool, which is stored as one byte (i8).

    ty = llvm_type(DType.parse("float32x8"))        # <8 x float>
    v = cast(builder, v, int8, float32)             # sitofp

Casts to and from the 16-bit floats go through float32 (half <-> float is exact, and
float32 -> bfloat16 rounds to nearest even with NaNs kept quiet), so LLVM never needs the
`__truncdfhf2`-style helper functions that a JIT may not find.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir

from tessera.ir.dtype import DType, float32

I1, I8, I16, I32, I64 = (ir.IntType(n) for n in (1, 8, 16, 32, 64))
F32 = ir.FloatType()


def _scalar_type(dt: DType) -> ir.Type:
    if dt.code in ("int", "uint"):
        return ir.IntType(dt.bits)
    if dt.code == "bool":
        return I1
    if dt.code == "bfloat":
        return I16
    if dt.code == "float":
        return {16: ir.HalfType(), 32: F32, 64: ir.DoubleType()}[dt.bits]
    if dt.code == "handle":
        return I8.as_pointer()
    if dt.is_storage_only:
        return I8
    raise TypeError(f"no LLVM type for dtype {dt}")


def llvm_type(dt: DType) -> ir.Type:
    """The register type of dtype `dt` (vectors for lanes > 1)."""
    scalar = _scalar_type(dt.element)
    return scalar if dt.lanes == 1 else ir.VectorType(scalar, dt.lanes)


def storage_type(dt: DType) -> ir.Type:
    """The in-memory type of one element of a buffer of dtype `dt` (bool is a byte)."""
    scalar = I8 if dt.element.is_bool else _scalar_type(dt.element)
    return scalar if dt.lanes == 1 else ir.VectorType(scalar, dt.lanes)


def _bits_of(value, dt: DType) -> int:
    """Two's complement value of an integer constant, wrapped to dt's width."""
    v = int(value) & ((1 << dt.bits) - 1)
    return v - (1 << dt.bits) if v >= 1 << (dt.bits - 1) else v


def bf16_bits(value: float) -> int:
    """The bfloat16 bits of a Python float, rounded to nearest even (NaN stays NaN)."""
    f = np.array([value], dtype=np.float32).view(np.uint32)[0].item()
    if value != value:
        return ((f >> 16) | 0x40) & 0xFFFF
    return ((f + 0x7FFF + ((f >> 16) & 1)) >> 16) & 0xFFFF


def constant(value, dt: DType) -> ir.Constant:
    """An LLVM constant of dtype dt (a splat for vectors)."""
    el = dt.element
    if el.is_bool:
        scalar = ir.Constant(I1, int(bool(value)))
    elif el.is_integer:
        scalar = ir.Constant(_scalar_type(el), _bits_of(value, el))
    elif el.is_storage_only:  # tir holds these constants as their stored byte
        scalar = ir.Constant(I8, _bits_of(value, DType("uint", 8)))
    elif el.code == "bfloat":
        scalar = ir.Constant(I16, _bits_of(bf16_bits(float(value)), DType("int", 16)))
    elif el.is_float:
        if el.bits == 16:
            value = float(np.float16(value))
        elif el.bits == 32:
            value = float(np.float32(value))
        scalar = ir.Constant(_scalar_type(el), float(value))
    else:
        raise TypeError(f"cannot make an LLVM constant of dtype {dt}")
    if dt.lanes == 1:
        return scalar
    return ir.Constant(ir.VectorType(scalar.type, dt.lanes), [scalar] * dt.lanes)


def _with_lanes(ty: ir.Type, lanes: int) -> ir.Type:
    return ty if lanes == 1 else ir.VectorType(ty, lanes)


def bf16_to_f32(b: ir.IRBuilder, v, lanes: int):
    wide = b.zext(v, _with_lanes(I32, lanes))
    shifted = b.shl(wide, constant(16, DType("int", 32, lanes)))
    return b.bitcast(shifted, _with_lanes(F32, lanes))


def f32_to_bf16(b: ir.IRBuilder, v, lanes: int):
    """Round a float32 to bfloat16 bits: to nearest even; a NaN stays a (quiet) NaN."""
    i32 = DType("int", 32, lanes)
    bits = b.bitcast(v, _with_lanes(I32, lanes))
    lsb = b.and_(b.lshr(bits, constant(16, i32)), constant(1, i32))
    rounded = b.add(b.add(bits, constant(0x7FFF, i32)), lsb)
    result = b.trunc(b.lshr(rounded, constant(16, i32)), _with_lanes(I16, lanes))
    quiet = b.or_(
        b.trunc(b.lshr(bits, constant(16, i32)), result.type),
        constant(0x40, DType("int", 16, lanes)),
    )
    return b.select(b.fcmp_unordered("uno", v, v), quiet, result)


def to_f32(b: ir.IRBuilder, v, dt: DType):
    """A 16-bit float value widened to float32 (other floats unchanged)."""
    if dt.code == "bfloat":
        return bf16_to_f32(b, v, dt.lanes)
    if dt.is_float and dt.bits == 16:
        return b.fpext(v, _with_lanes(F32, dt.lanes))
    return v


def from_f32(b: ir.IRBuilder, v, dt: DType):
    """A float32 value narrowed back to the 16-bit float dt."""
    if dt.code == "bfloat":
        return f32_to_bf16(b, v, dt.lanes)
    if dt.is_float and dt.bits == 16:
        return b.fptrunc(v, _with_lanes(ir.HalfType(), dt.lanes))
    return v


def is_f16like(dt: DType) -> bool:
    return dt.is_float and dt.bits == 16


def cast(b: ir.IRBuilder, v, src: DType, dst: DType):
    """Convert value v of dtype src to dtype dst (same lanes), with C's conversion rules."""
    if src.element == dst.element:
        return v
    if src.is_storage_only or dst.is_storage_only:
        raise TypeError(
            f"cast from {src} to {dst}: storage types convert through tessera.topi.cast_small "
            "(reinterpret and integer operations), not a Cast"
        )
    lanes = dst.lanes
    if is_f16like(src):
        return cast(b, to_f32(b, v, src), float32.with_lanes(lanes), dst)
    if is_f16like(dst):
        return from_f32(b, cast(b, v, src, float32.with_lanes(lanes)), dst)
    ty = llvm_type(dst)
    if dst.is_bool:
        zero = constant(0, src)
        if src.is_float:
            return b.fcmp_unordered("!=", v, zero)  # NaN is true, as in C
        return b.icmp_unsigned("!=", v, zero)
    if src.is_bool:
        return b.uitofp(v, ty) if dst.is_float else b.zext(v, ty)
    if src.is_float and dst.is_float:
        return b.fpext(v, ty) if dst.bits > src.bits else b.fptrunc(v, ty)
    if src.is_float:
        return b.fptosi(v, ty) if dst.is_int else b.fptoui(v, ty)
    if dst.is_float:
        return b.sitofp(v, ty) if src.is_int else b.uitofp(v, ty)
    if dst.bits < src.bits:
        return b.trunc(v, ty)
    if dst.bits > src.bits:
        return b.sext(v, ty) if src.is_int else b.zext(v, ty)
    return v  # int <-> uint of the same width: the same bits
