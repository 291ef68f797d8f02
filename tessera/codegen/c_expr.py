"""C text of tir expressions, for the C code generator (`tessera.codegen.c`).

    ExprPrinter(names, helpers).text(A[i * 4 + j] * 2.0)    ->  "A[i * 4 + j] * 2.0f"

Operators are parenthesized by C precedence (and where `gcc -Wall` asks for clarity), not
everywhere. Representation, the invariants the statement emitter relies on:

- a value of a 16-bit float type (float16, bfloat16) is a C `float` holding a value that is
  exactly representable in that type: each operation rounds its result (so results match numpy's
  per-operation rounding); memory holds the bits as `uint16_t`.
- integer results narrower than 32 bits are cast back to their type after each operation (C
  computes them in `int`), so they wrap like numpy's.
- vector expressions are printed one lane at a time: `text(e, lane="lane")` is the value of lane
  `lane` (a `Ramp` is `base + lane * stride`, a `Broadcast` its scalar); the statement emitter
  wraps them in a loop over lanes. A vector variable is a C array indexed by the lane.
"""

from __future__ import annotations

import re
import struct

import numpy as np

from tessera.ir.dtype import DType
from tessera.tir import expr as E
from tessera.tir.stmt_functor import substitute

# C precedence levels (higher binds tighter)
PRIMARY, UNARY, MUL, ADD, SHIFT, REL, EQ = 16, 14, 13, 12, 11, 10, 9
BAND, XOR, BOR, LAND, LOR, COND = 8, 7, 6, 5, 4, 3
# `!x` binds like a unary operator, but gcc -Wall wants `(!x) == y`: rank it just above `<`.
NOT = 10.5

MATH_FUNCTIONS = (
    "exp exp2 log log2 log10 sqrt sin cos tan asin acos atan sinh cosh tanh asinh acosh atanh "
    "erf pow atan2 fmod floor ceil trunc fma"
).split()

C_KEYWORDS = set(
    "auto break case char const continue default do double else enum extern float for goto if "
    "inline int long register restrict return short signed sizeof static struct switch typedef "
    "union unsigned void volatile while _Bool _Complex _Imaginary bool true false size_t NULL "
    "int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t main "
    "INFINITY NAN isnan isinf nearbyint nearbyintf fabs fabsf copysign copysignf".split()
)
RESERVED = C_KEYWORDS | set(MATH_FUNCTIONS) | {f + "f" for f in MATH_FUNCTIONS}


def is_float16(dt: DType) -> bool:
    """float16 or bfloat16: held as float, stored as uint16_t."""
    return dt.is_float and dt.bits == 16


def storage_type(dt: DType) -> str:
    """The C type of one element of `dt` in memory."""
    dt = dt.element
    if dt.is_bool:
        return "bool"
    if dt.is_storage_only:  # float8, int4, ...: the stored byte (tessera.topi.cast_small)
        return "uint8_t"
    if dt.is_int:
        return f"int{dt.bits}_t"
    if dt.is_uint:
        return f"uint{dt.bits}_t"
    if dt.is_float:
        return {16: "uint16_t", 32: "float", 64: "double"}[dt.bits]
    raise ValueError(f"the C code generator has no C type for dtype {dt}")


def value_type(dt: DType) -> str:
    """The C type of a value of `dt` held in a variable."""
    return "float" if is_float16(dt) else storage_type(dt)


def suffix(dt: DType) -> str:
    """The type suffix of helpers that take values of `dt`: i32, u8, f32 (16-bit floats), b."""
    dt = dt.element
    if dt.is_bool:
        return "b"
    if dt.is_storage_only:
        return "u8"
    if dt.is_float:
        return "f64" if dt.bits == 64 else "f32"
    return ("i" if dt.is_int else "u") + str(dt.bits)


def _bits_suffix(dt: DType) -> str:
    """Suffix of the storage type (reinterpret works on bits)."""
    dt = dt.element
    if dt.is_float:
        return "f64" if dt.bits == 64 else "f32" if dt.bits == 32 else "u16"
    return suffix(dt)


def round_to(value: float, dt: DType) -> float:
    """`value` rounded to float type `dt` (round to nearest even), as a Python float."""
    if dt.bits == 64:
        return value
    if dt.code == "bfloat":
        f = np.float32(value)
        if np.isnan(f):
            return float(f)
        bits = struct.unpack("<I", struct.pack("<f", f))[0]
        bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
        return struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0]
    return float(np.float16(value) if dt.bits == 16 else np.float32(value))


def int_literal(value: int, dt: DType) -> tuple[str, float]:
    if dt.is_bool:
        return ("true" if value else "false"), PRIMARY
    if dt.bits == 64 and dt.is_int and value == -(2**63):
        return "INT64_MIN", PRIMARY
    if dt.is_int and dt.bits >= 32 and value == -(2**31):
        return "(-2147483647 - 1)", PRIMARY
    if dt.bits == 64 and not -(2**31) <= value < 2**31:
        text = f"{'INT' if dt.is_int else 'UINT'}64_C({value})"
        return text, PRIMARY
    text = f"{value}u" if dt.is_uint and dt.bits >= 32 else str(value)
    return text, (UNARY if value < 0 else PRIMARY)


def float_literal(value: float, dt: DType) -> tuple[str, float]:
    value = round_to(value, dt)
    suffix_ = "" if dt.bits == 64 else "f"
    if value != value:
        return ("NAN" if suffix_ else "(double)NAN"), PRIMARY
    if value in (float("inf"), float("-inf")):
        text = "INFINITY" if suffix_ else "(double)INFINITY"
        return (text, PRIMARY) if value > 0 else (f"-{text}", UNARY)
    text = repr(value) if dt.bits == 64 else str(np.float32(value))
    if not re.search(r"[.e]", text):
        text += ".0"
    return text + suffix_, (UNARY if text.startswith("-") else PRIMARY)


def wrap(item: tuple[str, float], need: float) -> str:
    text, prec = item
    return text if prec >= need else f"({text})"


_ARITH = {"Add": ("+", ADD), "Sub": ("-", ADD), "Mul": ("*", MUL)}
_CMP = {"LT": ("<", REL), "LE": ("<=", REL), "GT": (">", REL), "GE": (">=", REL)}
_CMP |= {"EQ": ("==", EQ), "NE": ("!=", EQ)}
_BITS = {
    "bitwise_and": ("&", BAND),
    "bitwise_or": ("|", BOR),
    "bitwise_xor": ("^", XOR),
    "shift_left": ("<<", SHIFT),
    "shift_right": (">>", SHIFT),
}


class ExprPrinter:
    """Prints expressions; records the helpers it uses in `helpers` (a set of names)."""

    def __init__(self, names, helpers: set[str]):
        self.names = names
        self.helpers = helpers
        self.vector_vars: set[int] = set()  # ids of Vars held in C arrays (one entry per lane)
        self.nonneg_vars: set[int] = set()  # ids of Vars known to be >= 0 (loop variables)

    def text(self, e: E.Expr, lane: str | None = None) -> str:
        return self.p(e, lane)[0]

    def p(self, e: E.Expr, lane: str | None) -> tuple[str, float]:
        method = getattr(self, "_" + type(e).__name__, None)
        if method is None:
            raise ValueError(f"the C code generator cannot emit a {type(e).__name__}: {e}")
        if e.dtype.lanes > 1 and lane is None:
            raise ValueError(f"vector expression {e} used where a scalar is expected")
        return method(e, lane)

    def helper(self, name: str, *args: str) -> tuple[str, float]:
        self.helpers.add(name)
        return f"tessera_{name}({', '.join(args)})", PRIMARY

    # -- leaves -----------------------------------------------------------------------------

    def _Var(self, e, lane):
        name = self.names.get(e)
        if id(e) in self.vector_vars:
            if lane is None:
                raise ValueError(f"vector variable {e.name} used where a scalar is expected")
            return f"{name}[{lane}]", PRIMARY
        return name, PRIMARY

    def _IntImm(self, e, lane):
        return int_literal(e.value, e.dtype)

    def _FloatImm(self, e, lane):
        return float_literal(e.value, e.dtype)

    def _StringImm(self, e, lane):
        raise ValueError(f"the C code generator cannot emit the string {e.value!r} as a value")

    # -- arithmetic -------------------------------------------------------------------------

    def finish(self, dt: DType, item: tuple[str, float]) -> tuple[str, float]:
        """Bring a C result back to `dt`: narrow integers wrap, 16-bit floats round."""
        if dt.is_integer and dt.bits < 32:
            return f"({storage_type(dt)}){wrap(item, UNARY)}", UNARY
        if is_float16(dt):
            return self.helper("bf16_round" if dt.code == "bfloat" else "f16_round", item[0])
        return item

    def binary(self, a, b, op, prec, lane, left=None, right=None) -> tuple[str, float]:
        """`a op b`, operands parenthesized unless they bind at least `left` / `right`."""
        left = prec if left is None else left
        right = prec + 1 if right is None else right
        return f"{wrap(self.p(a, lane), left)} {op} {wrap(self.p(b, lane), right)}", prec

    def _arith(self, e, lane):
        op, prec = _ARITH[type(e).__name__]
        return self.finish(e.dtype, self.binary(e.a, e.b, op, prec, lane))

    _Add = _Sub = _Mul = _arith

    def safe_divisor(self, e) -> bool:
        """A constant divisor other than 0 and -1: `/` and `%` cannot trap."""
        e = e.value if isinstance(e, E.Broadcast) else e
        return isinstance(e, E.IntImm) and e.value not in (0, -1)

    def _int_div_mod(self, e, lane, name, c_op):
        """Integer `/` or `%`; a divisor that may be 0 or -1 goes through a helper that does
        not trap (Note [integer division by zero] in codegen/llvm/emitter.py)."""
        if self.safe_divisor(e.b):
            return self.finish(e.dtype, self.binary(e.a, e.b, c_op, MUL, lane))
        return self.helper(f"{name}_{suffix(e.dtype)}", self.text(e.a, lane), self.text(e.b, lane))

    def _Div(self, e, lane):
        if e.dtype.is_integer:
            return self._int_div_mod(e, lane, "div", "/")
        return self.finish(e.dtype, self.binary(e.a, e.b, "/", MUL, lane))

    def _Mod(self, e, lane):
        if e.dtype.is_float:
            return self.finish(e.dtype, self.math("fmod", e.dtype, [e.a, e.b], lane))
        return self._int_div_mod(e, lane, "mod", "%")

    def _floor_op(self, e, lane, name, c_op):
        dt = e.dtype
        if dt.is_uint:  # floor and truncating division agree
            return self._int_div_mod(e, lane, "div" if c_op == "/" else "mod", c_op)
        if dt.is_int and self.nonneg(e.a) and self.positive_const(e.b):
            return self.finish(dt, self.binary(e.a, e.b, c_op, MUL, lane))
        args = (self.text(e.a, lane), self.text(e.b, lane))
        item = self.helper(f"{name}_{suffix(dt)}", *args)
        return item if dt.is_integer else self.finish(dt, item)  # helpers return the int type

    def _FloorDiv(self, e, lane):
        return self._floor_op(e, lane, "floordiv", "/")

    def _FloorMod(self, e, lane):
        return self._floor_op(e, lane, "floormod", "%")

    def _Min(self, e, lane):
        return self.helper(f"min_{suffix(e.dtype)}", self.text(e.a, lane), self.text(e.b, lane))

    def _Max(self, e, lane):
        return self.helper(f"max_{suffix(e.dtype)}", self.text(e.a, lane), self.text(e.b, lane))

    def positive_const(self, e) -> bool:
        return isinstance(e, E.IntImm) and e.value > 0

    def nonneg(self, e) -> bool:
        """A cheap proof that integer expression `e` is >= 0 (so `/` and `%` floor)."""
        if isinstance(e, E.IntImm):
            return e.value >= 0
        if isinstance(e, E.Var):
            return id(e) in self.nonneg_vars
        if isinstance(e, (E.Add, E.Mul, E.Min, E.FloorDiv, E.FloorMod, E.Div, E.Mod)):
            return self.nonneg(e.a) and self.nonneg(e.b)
        if isinstance(e, E.Max):
            return self.nonneg(e.a) or self.nonneg(e.b)
        if isinstance(e, E.Ramp):
            return self.nonneg(E.convert(e.base)) and self.nonneg(E.convert(e.stride))
        if isinstance(e, E.Broadcast):
            return self.nonneg(e.value)
        return False

    # -- logic ------------------------------------------------------------------------------

    def _compare(self, e, lane):
        op, prec = _CMP[type(e).__name__]
        return self.binary(e.a, e.b, op, prec, lane, left=SHIFT, right=SHIFT)

    _LT = _LE = _GT = _GE = _EQ = _NE = _compare

    def _And(self, e, lane):
        return self.binary(e.a, e.b, "&&", LAND, lane)

    def _Or(self, e, lane):
        return self.binary(e.a, e.b, "||", LOR, lane, left=LAND + 1, right=LAND + 1)

    def _Not(self, e, lane):
        return f"!{wrap(self.p(e.a, lane), UNARY)}", NOT

    def ternary(self, cond, t, f, lane) -> tuple[str, float]:
        parts = [wrap(self.p(x, lane), LOR) for x in (cond, t, f)]
        return f"{parts[0]} ? {parts[1]} : {parts[2]}", COND

    def _Select(self, e, lane):
        return self.ternary(e.condition, e.true_value, e.false_value, lane)

    def _Let(self, e, lane):
        # Lets that the statement emitter could not hoist (inside if_then_else branches, where
        # evaluating the value early could be unsafe) are inlined: tir expressions are pure.
        return self.p(substitute(e.body, {e.var: e.value}), lane)

    # -- casts ------------------------------------------------------------------------------

    def _Cast(self, e, lane):
        src, dst = e.value.dtype.element, e.dtype.element
        if (src.is_storage_only or dst.is_storage_only) and src != dst:
            raise ValueError(
                f"cast from {src} to {dst}: storage types convert through "
                "tessera.topi.cast_small (reinterpret and integer operations), not a Cast"
            )
        if dst.is_bool:
            return f"{wrap(self.p(e.value, lane), SHIFT)} != 0", EQ
        if is_float16(dst):
            return self.to_float16(e.value, dst, lane, rounded=True)
        if (is_float16(src) and dst.bits == 32 and dst.is_float) or src == dst:
            return self.p(e.value, lane)
        return f"({value_type(dst)}){wrap(self.p(e.value, lane), UNARY)}", UNARY

    def to_float16(self, value: E.Expr, dst: DType, lane, rounded: bool) -> tuple[str, float]:
        """`value` converted to 16-bit float type `dst`: its bits, or (rounded) a float."""
        src = value.dtype.element
        tag = "bf16" if dst.code == "bfloat" else "f16"
        if is_float16(src) and src == dst:
            if rounded:
                return self.p(value, lane)
            if isinstance(value, E.BufferLoad):  # copy the bits as they are
                return self.load(value, lane, convert=False)
            return self.helper(f"f32_to_{tag}", self.text(value, lane))
        if src.is_float and src.bits >= 32:
            bits = self.helper(f"f{src.bits}_to_{tag}", self.text(value, lane))
        elif is_float16(src):
            bits = self.helper(f"f32_to_{tag}", self.text(value, lane))
        else:  # integers go through double, which holds int32 exactly
            text = f"(double){wrap(self.p(value, lane), UNARY)}"
            bits = self.helper(f"f64_to_{tag}", text)
        return self.helper(f"{tag}_to_f32", bits[0]) if rounded else bits

    def store_bits(self, value: E.Expr, lane) -> str:
        """The uint16_t bits to store for a 16-bit float value (without rounding twice)."""
        dst = value.dtype.element
        if isinstance(value, E.Cast):
            return self.to_float16(value.value, dst, lane, rounded=False)[0]
        if isinstance(value, E.BufferLoad):
            return self.to_float16(value, dst, lane, rounded=False)[0]
        tag = "bf16" if dst.code == "bfloat" else "f16"
        inner = self.p_unrounded(value, lane)
        return self.helper(f"f32_to_{tag}", inner[0])[0]

    def p_unrounded(self, e, lane) -> tuple[str, float]:
        """A 16-bit float expression without its final rounding (a store rounds it anyway)."""
        if not isinstance(e, (E.BinaryOp, E.Call)):
            return self.p(e, lane)
        return getattr(_NoFinalRound(self), "_" + type(e).__name__)(e, lane)

    # -- memory and vectors -------------------------------------------------------------------

    def _BufferLoad(self, e, lane):
        return self.load(e, lane, convert=True)

    def load(self, e, lane, convert: bool) -> tuple[str, float]:
        if len(e.indices) != 1:
            raise ValueError(
                f"buffer {e.buffer.name} is indexed with {len(e.indices)} indices; the C code "
                "generator takes flattened buffers (run flatten_storage first)"
            )
        text = f"{self.names.get(e.buffer)}[{self.text(e.indices[0], lane)}]"
        dt = e.buffer.dtype
        if convert and is_float16(dt):
            return self.helper("bf16_to_f32" if dt.code == "bfloat" else "f16_to_f32", text)
        return text, PRIMARY

    def _Ramp(self, e, lane):
        base, stride = E.convert(e.base), E.convert(e.stride)
        step = (lane, PRIMARY)
        if not (isinstance(stride, E.IntImm) and stride.value == 1):
            step = (f"{lane} * {wrap(self.p(stride, None), MUL + 1)}", MUL)
        if isinstance(base, E.IntImm) and base.value == 0:
            return step
        return f"{wrap(self.p(base, None), ADD)} + {wrap(step, ADD + 1)}", ADD

    def _Broadcast(self, e, lane):
        return self.p(e.value, None)

    # -- intrinsics -------------------------------------------------------------------------

    def math(self, name: str, dt: DType, args, lane) -> tuple[str, float]:
        fn = name if dt.element.bits == 64 else name + "f"
        return f"{fn}({', '.join(self.text(a, lane) for a in args)})", PRIMARY

    def _Call(self, e, lane):
        op, dt, args = e.op, e.dtype, e.args
        method = getattr(self, "_call_" + op, None)
        if method is not None:
            return method(e, lane)
        if op in MATH_FUNCTIONS:
            return self.finish(dt, self.math(op, dt, args, lane))
        if op in _BITS:
            sym, prec = _BITS[op]
            if op == "shift_left" and isinstance(args[0], E.IntImm) and dt.element.bits == 64:
                # a literal is an int (or unsigned int) in C: 1 << 40 must shift a 64-bit one
                lit = wrap(self.p(args[0], lane), UNARY)
                amount = wrap(self.p(args[1], lane), UNARY)
                return self.finish(dt, (f"({storage_type(dt)}){lit} << {amount}", SHIFT))
            item = self.binary(args[0], args[1], sym, prec, lane, left=UNARY, right=UNARY)
            return self.finish(dt, item)
        raise ValueError(f"the C code generator does not know the intrinsic {op!r} (in {e})")

    def _call_rsqrt(self, e, lane):
        one = "1.0" if e.dtype.element.bits == 64 else "1.0f"
        return self.finish(e.dtype, (f"{one} / {self.math('sqrt', e.dtype, e.args, lane)[0]}", MUL))

    def _call_sigmoid(self, e, lane):
        x = self.text(e.args[0], lane)
        width = "f64" if e.dtype.element.bits == 64 else "f32"  # 16-bit floats compute in f32
        return self.finish(e.dtype, self.helper(f"sigmoid_{width}", x))

    def _call_round(self, e, lane):
        # nearbyint rounds half to even in the default rounding mode, like numpy.round
        return self.finish(e.dtype, self.math("nearbyint", e.dtype, e.args, lane))

    def _call_abs(self, e, lane):
        if e.dtype.is_float:
            return self.math("fabs", e.dtype, e.args, lane)
        return self.helper(f"abs_{suffix(e.dtype)}", self.text(e.args[0], lane))

    def _call_isnan(self, e, lane):
        return f"isnan({self.text(e.args[0], lane)})", PRIMARY

    def _call_isinf(self, e, lane):
        return f"isinf({self.text(e.args[0], lane)})", PRIMARY

    def _call_bitwise_not(self, e, lane):
        return self.finish(e.dtype, (f"~{wrap(self.p(e.args[0], lane), UNARY)}", UNARY))

    def _call_popcount(self, e, lane):
        x = e.args[0]
        unsigned = f"uint{x.dtype.bits}_t"
        count = self.helper("popcount", f"({unsigned}){wrap(self.p(x, lane), UNARY)}")
        if e.dtype.element.bits == 32 and e.dtype.is_int:
            return count
        return f"({storage_type(e.dtype)}){count[0]}", UNARY

    def _call_prefetch(self, e, lane):
        # the statement printer puts it under `#if defined(__GNUC__)` (c.py, _Evaluate)
        element, rw, locality = e.args
        address = wrap(self.load(element, None, convert=False), UNARY)
        return f"__builtin_prefetch(&{address}, {rw.value}, {locality.value})", PRIMARY

    def _call_dot_u8i8(self, e, lane):
        return self.helper("dot_u8i8", *(self.text(a, lane) for a in e.args))

    _call_dot_u8i8_bounded = _call_dot_u8i8  # exact either way in C

    def _call_dot16_s8(self, e, lane):
        acc, first, _last, weight, n = e.args  # `_last` is for bound inference only
        a, b = (wrap(self.load(v, None, convert=False), UNARY) for v in (first, weight))
        return self.helper("dot16_s8", self.text(acc, lane), f"&{a}", f"&{b}", self.text(n, lane))

    def _call_dot_bf16(self, e, lane):
        return self.helper("dot_bf16", *(self.text(a, lane) for a in e.args))

    def _call_likely(self, e, lane):
        return self.p(e.args[0], lane)

    def _call_if_then_else(self, e, lane):
        # C evaluates only the taken side of ?:, so a guarded out-of-bounds load is safe
        return self.ternary(*e.args, lane)

    def _call_reinterpret(self, e, lane):
        x = e.args[0]
        src, dst = x.dtype.element, e.dtype.element
        if src.bits != dst.bits:
            raise ValueError(f"reinterpret from {src} to {dst}: the sizes differ")
        if src == dst:
            return self.p(x, lane)
        if src.is_storage_only or dst.is_storage_only:  # bytes: uint8_t <-> int8_t/uint8_t
            bits = self.p(x, lane)
            if storage_type(src) == storage_type(dst):
                return bits
            return f"({storage_type(dst)}){wrap(bits, UNARY)}", UNARY
        if is_float16(src):
            tag = "bf16" if src.code == "bfloat" else "f16"
            bits = self.helper(f"f32_to_{tag}", self.text(x, lane))
        else:
            bits = self.p(x, lane)
        if is_float16(dst):
            tag = "bf16" if dst.code == "bfloat" else "f16"
            return self.helper(f"{tag}_to_f32", f"(uint16_t){wrap(bits, UNARY)}")
        if is_float16(src):
            return f"({storage_type(dst)}){bits[0]}", UNARY
        return self.helper(f"reinterpret_{_bits_suffix(src)}_{_bits_suffix(dst)}", bits[0])


class _NoFinalRound(ExprPrinter):
    """Prints one node without its final rounding; its operands go to `outer` (which rounds)."""

    def __init__(self, outer: ExprPrinter):
        super().__init__(outer.names, outer.helpers)
        self.outer = outer

    def finish(self, dt, item):
        return item

    def p(self, e, lane):
        return self.outer.p(e, lane)
