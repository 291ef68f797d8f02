"""Intrinsic operations: math functions, casts, conditionals, min/max — each builds a tir.Call.

    exp(x)                      Call(float32, "exp", (x,))
    if_then_else(c, a, b)       Call(a.dtype, "if_then_else", (c, a, b)): only the taken side
                                is evaluated, so a guarded out-of-bounds load is safe
    select(c, a, b)             Select(c, a, b): both sides evaluated

`INTRINSICS` lists every intrinsic a code generator must implement, with its operand kind.
"""

from __future__ import annotations

from tessera.ir.dtype import DType, bool_, float32
from tessera.tir.expr import (
    And,
    BufferLoad,
    Call,
    Cast,
    Div,
    Expr,
    FloatImm,
    IntImm,
    Max,
    Min,
    Mod,
    Not,
    Or,
    Select,
    _binary,
    _promote,
    const,
    convert,
)

# name -> (number of arguments, operand kind: "float", "number" (int or float), "int", "any")
INTRINSICS: dict[str, tuple[int, str]] = {
    "exp": (1, "float"),
    "exp2": (1, "float"),
    "log": (1, "float"),
    "log2": (1, "float"),
    "log10": (1, "float"),
    "sqrt": (1, "float"),
    "rsqrt": (1, "float"),
    "sin": (1, "float"),
    "cos": (1, "float"),
    "tan": (1, "float"),
    "asin": (1, "float"),
    "acos": (1, "float"),
    "atan": (1, "float"),
    "sinh": (1, "float"),
    "cosh": (1, "float"),
    "tanh": (1, "float"),
    "asinh": (1, "float"),
    "acosh": (1, "float"),
    "atanh": (1, "float"),
    "sigmoid": (1, "float"),
    "erf": (1, "float"),
    "pow": (2, "float"),
    "atan2": (2, "float"),
    "fmod": (2, "float"),
    "floor": (1, "float"),
    "ceil": (1, "float"),
    "round": (1, "float"),  # half to even, like numpy
    "trunc": (1, "float"),
    "isnan": (1, "float"),
    "isinf": (1, "float"),
    "abs": (1, "number"),
    "fma": (3, "float"),
    "bitwise_and": (2, "int"),
    "bitwise_or": (2, "int"),
    "bitwise_xor": (2, "int"),
    "bitwise_not": (1, "int"),
    "shift_left": (2, "int"),
    "shift_right": (2, "int"),
    "popcount": (1, "int"),
    "if_then_else": (3, "any"),
    "likely": (1, "any"),
    "reinterpret": (1, "any"),
    "prefetch": (3, "any"),  # (element, rw, locality): a hint, evaluated for its effect only
    # int32 lanes: acc + the 4 uint8 bytes of a times the 4 int8 bytes of b (vpdpbusd)
    "dot_u8i8": (3, "int"),
    # dot_u8i8 whose b pairs (bytes 0 and 1, 2 and 3) are bounded: |b0| + |b1| <= 128
    "dot_u8i8_bounded": (3, "int"),
    # int32 vectors of 4 lanes: acc + a 2x8 uint8 matrix times an 8x2 int8 one (AArch64 usmmla)
    "mmla_u8i8": (3, "int"),
    # acc + 16 int8 products from two addresses (Arm MVE's VMLADAVA; codegen/micro.py)
    "dot16_s8": (5, "int"),
    # float32 lanes: acc + the 2 bfloat16 halves of a times those of b (vdpbf16ps)
    "dot_bf16": (3, "any"),
}


def _float_call(name: str, *args) -> Expr:
    args = [convert(a) for a in args]
    if len(args) == 2:
        args = list(_promote(args[0], args[1]))
    for a in args:
        if not a.dtype.is_float:
            raise TypeError(f"{name} needs floating-point operands, got {a.dtype}; cast first")
    return Call(args[0].dtype, name, tuple(args))


def exp(x):
    return _float_call("exp", x)


def exp2(x):
    return _float_call("exp2", x)


def log(x):
    return _float_call("log", x)


def log2(x):
    return _float_call("log2", x)


def log10(x):
    return _float_call("log10", x)


def sqrt(x):
    return _float_call("sqrt", x)


def rsqrt(x):
    return _float_call("rsqrt", x)


def sin(x):
    return _float_call("sin", x)


def cos(x):
    return _float_call("cos", x)


def tan(x):
    return _float_call("tan", x)


def asin(x):
    return _float_call("asin", x)


def acos(x):
    return _float_call("acos", x)


def atan(x):
    return _float_call("atan", x)


def sinh(x):
    return _float_call("sinh", x)


def cosh(x):
    return _float_call("cosh", x)


def tanh(x):
    return _float_call("tanh", x)


def asinh(x):
    return _float_call("asinh", x)


def acosh(x):
    return _float_call("acosh", x)


def atanh(x):
    return _float_call("atanh", x)


def sigmoid(x):
    return _float_call("sigmoid", x)


def erf(x):
    return _float_call("erf", x)


def pow(x, y):  # noqa: A001 - the name users know
    return _float_call("pow", x, y)


power = pow


def atan2(y, x):
    return _float_call("atan2", y, x)


def fmod(x, y):
    return _float_call("fmod", x, y)


def floor(x):
    x = convert(x)
    return x if x.dtype.is_integer else _float_call("floor", x)


def ceil(x):
    x = convert(x)
    return x if x.dtype.is_integer else _float_call("ceil", x)


def round(x):  # noqa: A001
    x = convert(x)
    return x if x.dtype.is_integer else _float_call("round", x)


def trunc(x):
    x = convert(x)
    return x if x.dtype.is_integer else _float_call("trunc", x)


def isnan(x):
    x = convert(x)
    return Call(bool_.with_lanes(x.dtype.lanes), "isnan", (x,))


def isinf(x):
    x = convert(x)
    return Call(bool_.with_lanes(x.dtype.lanes), "isinf", (x,))


def abs(x):  # noqa: A001
    x = convert(x)
    if x.dtype.is_uint or x.dtype.is_bool:
        return x
    return Call(x.dtype, "abs", (x,))


def fma(a, b, c):
    """a * b + c, rounded once."""
    a, b, c = (convert(v) for v in (a, b, c))
    return Call(a.dtype, "fma", (a, b, c))


def dot_u8i8(acc, a, b, bounded: bool = False):
    """Per int32 lane: acc + sum over the 4 bytes j of uint8(a_j) * int8(b_j), as x86's vpdpbusd
    computes it (codegen/llvm/int8_dot.py); all three operands are int32 (4 bytes each).
    bounded: the caller promises |b0| + |b1| <= 128 for both byte pairs of every word of b
    (`dot_u8i8_bounded`, the same value; Note [bounded pairs] in codegen/llvm/int8_dot.py)."""
    acc, a, b = (convert(v, "int32") for v in (acc, a, b))
    for v in (acc, a, b):
        if v.dtype.element.code != "int" or v.dtype.element.bits != 32:
            raise TypeError(f"dot_u8i8 needs int32 operands, got {v.dtype}")
    return Call(acc.dtype, "dot_u8i8_bounded" if bounded else "dot_u8i8", (acc, a, b))


def mmla_u8i8(acc, a, b):
    """AArch64's USMMLA (FEAT_I8MM) per 4 int32 lanes: a's 16 bytes are a 2x8 uint8 matrix (row i:
    lanes 2i, 2i + 1), b's a 2x8 int8 one (row j: column j of the 8x2 operand); lane 2i + j of
    the result is acc's plus row i of a dot row j of b. Not lane-wise: it means something only
    on vectors of whole 4-lane segments, so a compute that uses it must be vectorized over them
    (Note [i8mm matrix step] in topi/arm/int8_mmla.py; codegen/llvm/int8_dot.py)."""
    acc, a, b = (convert(v, "int32") for v in (acc, a, b))
    for v in (acc, a, b):
        if v.dtype.element.code != "int" or v.dtype.element.bits != 32:
            raise TypeError(f"mmla_u8i8 needs int32 operands, got {v.dtype}")
    return Call(acc.dtype, "mmla_u8i8", (acc, a, b))


def dot16_s8(acc, first, last, weight, n):
    """acc + sum over j < min(n, 16) of int8 a[j] * int8 b[j], where a starts at the element
    `first` and b at `weight` (both BufferLoads of int8 buffers, whose addresses the C code
    takes). `last`, the element a[n - 1], is not read: it tells bound inference how far a
    goes. One MVE VMLADAVA with tail predication on cores that have it (codegen/micro.py)."""
    acc, n = convert(acc, "int32"), convert(n, "int32")
    for v in (first, last, weight):  # a te tensor's element (ProducerLoad) or a BufferLoad
        if not hasattr(v, "indices") or str(v.dtype) != "int8":
            raise TypeError(f"dot16_s8 needs int8 buffer elements, got {v}")
    return Call(acc.dtype, "dot16_s8", (acc, first, last, weight, n))


def dot_bf16(acc, a, b):
    """Per float32 lane: acc + hi(a) * hi(b) + lo(a) * lo(b), hi and lo the two bfloat16 halves
    of the int32 words a and b, as x86's vdpbf16ps computes it (codegen/llvm/bf16_dot.py)."""
    acc = convert(acc, "float32")
    a, b = (convert(v, "int32") for v in (a, b))
    if acc.dtype.element.code != "float" or acc.dtype.element.bits != 32:
        raise TypeError(f"dot_bf16 accumulates in float32, got {acc.dtype}")
    for v in (a, b):
        if v.dtype.element.code != "int" or v.dtype.element.bits != 32:
            raise TypeError(f"dot_bf16 needs int32 words of two bfloat16, got {v.dtype}")
    return Call(acc.dtype, "dot_bf16", (acc, a, b))


def popcount(x):
    x = convert(x)
    return Call(x.dtype, "popcount", (x,))


def bitwise_and(a, b):
    return convert(a) & b


def bitwise_or(a, b):
    return convert(a) | b


def bitwise_xor(a, b):
    return convert(a) ^ b


def bitwise_not(a):
    return ~convert(a)


def shift_left(a, b):
    return convert(a) << b


def shift_right(a, b):
    return convert(a) >> b


def truncdiv(a, b):
    return _binary(Div, a, b)


def truncmod(a, b):
    return _binary(Mod, a, b)


def floordiv(a, b):
    return convert(a) // b if isinstance(a, Expr) else convert(a, convert(b).dtype) // b


def floormod(a, b):
    return convert(a) % b if isinstance(a, Expr) else convert(a, convert(b).dtype) % b


def min(a, b):  # noqa: A001
    return _binary(Min, a, b)


def max(a, b):  # noqa: A001
    return _binary(Max, a, b)


def cast(x, dtype) -> Expr:
    x = convert(x)
    dtype = DType.parse(dtype)
    if x.dtype == dtype:
        return x
    if isinstance(x, IntImm | FloatImm) and dtype.lanes == 1:
        return const(x.value, dtype)
    return Cast(dtype, x)


def reinterpret(x, dtype) -> Expr:
    x = convert(x)
    return Call(DType.parse(dtype), "reinterpret", (x,))


def if_then_else(cond, t, f) -> Expr:
    """cond ? t : f, evaluating only the side that is taken."""
    cond = convert(cond)
    if not cond.dtype.is_bool:
        cond = cond != 0
    t, f = _promote(t, f)
    if isinstance(cond, IntImm):
        return t if cond.value else f
    return Call(t.dtype, "if_then_else", (cond, t, f))


def select(cond, t, f) -> Expr:
    """cond ? t : f, evaluating both sides."""
    cond = convert(cond)
    t, f = _promote(t, f)
    return Select(cond, t, f)


def likely(cond) -> Expr:
    cond = convert(cond)
    return Call(cond.dtype, "likely", (cond,))


def prefetch(element, rw: int = 0, locality: int = 3) -> Expr:
    """A hint to fetch the cache line holding `element` (a scalar BufferLoad: its address, it is
    not read) for a read (rw=0) or a write (rw=1), to keep in all cache levels (locality=3) down
    to none (0), as C's `__builtin_prefetch`. Never faults; use it as `Evaluate(prefetch(...))`.
    """
    if not isinstance(element, BufferLoad) or element.dtype.lanes != element.buffer.dtype.lanes:
        raise TypeError(f"prefetch needs a scalar buffer element (A[i]), got {element!r}")
    for name, value, top in (("rw", rw, 1), ("locality", locality, 3)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= top:
            raise ValueError(f"prefetch: {name} must be an integer in [0, {top}], got {value!r}")
    return Call("int32", "prefetch", (element, IntImm(rw), IntImm(locality)))


def logical_and(*conds) -> Expr:
    out = convert(conds[0])
    for c in conds[1:]:
        out = And(out, convert(c))
    return out


def logical_or(*conds) -> Expr:
    out = convert(conds[0])
    for c in conds[1:]:
        out = Or(out, convert(c))
    return out


def logical_not(c) -> Expr:
    return Not(convert(c))


def all(*conds) -> Expr:  # noqa: A001
    return logical_and(*conds) if conds else const(True)


def any(*conds) -> Expr:  # noqa: A001
    return logical_or(*conds) if conds else const(False)


def min_value(dtype) -> Expr:
    dtype = DType.parse(dtype)
    return const(dtype.min_value(), dtype)


def max_value(dtype) -> Expr:
    dtype = DType.parse(dtype)
    return const(dtype.max_value(), dtype)


def infinity(dtype=float32) -> Expr:
    return const(float("inf"), dtype)
