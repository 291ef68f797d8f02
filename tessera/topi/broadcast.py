"""Broadcasting te operators: binary arithmetic, comparisons, logic, bit ops, `where`, `expand`.

    c = topi.broadcast.binary("add", a, b)     # numpy broadcasting, tag "broadcast"
    d = topi.broadcast.where(cond, a, b)

Shapes broadcast like numpy (a dim of constant 1 stretches). Integer division and modulo never
trap: a zero divisor gives 0 (as the numpy references do) and INT_MIN / -1 wraps, so a kernel
cannot crash the process on any input.
"""

from __future__ import annotations

from tessera import te
from tessera.tir.expr import Expr, is_const_int

BROADCAST = "broadcast"


def broadcast_shape(*shapes) -> tuple[Expr, ...]:
    """numpy broadcasting of te shapes; a symbolic dim is taken as equal to the others."""
    ndim = max(len(s) for s in shapes)
    out = []
    for k in range(ndim):
        dims = [s[len(s) - ndim + k] for s in shapes if len(s) - ndim + k >= 0]
        dim = dims[0]
        for d in dims[1:]:
            if is_const_int(dim, 1):
                dim = d
            elif not is_const_int(d, 1) and is_const_int(d) and is_const_int(dim):
                if d.value != dim.value:
                    raise ValueError(f"shapes {[list(s) for s in shapes]} do not broadcast")
        out.append(dim)
    return tuple(out)


def broadcast_index(t: te.Tensor, index) -> tuple[Expr, ...]:
    """The index of t that output element `index` reads (trailing dims aligned, 1s stretched)."""
    lead = len(index) - t.ndim
    return tuple(
        te.const(0, "int32") if is_const_int(d, 1) else index[lead + k]
        for k, d in enumerate(t.shape)
    )


def broadcast_compute(fn, tensors, name: str, tag: str = BROADCAST) -> te.Tensor:
    """out[i] = fn(t0[i'], t1[i'], ...) over the broadcast shape of the tensors."""
    shape = broadcast_shape(*[t.shape for t in tensors])
    return te.compute(
        shape, lambda *i: fn(*[t(*broadcast_index(t, i)) for t in tensors]), name=name, tag=tag
    )


# -- scalar semantics -------------------------------------------------------------------------


def _safe_divisor(b: Expr) -> tuple[Expr, Expr | None]:
    """(a divisor that never traps, the `b == -1` test for signed types or None)."""
    zero, one = te.const(0, b.dtype), te.const(1, b.dtype)
    if b.dtype.is_uint:
        return te.select(b == zero, one, b), None
    minus_one = b == te.const(-1, b.dtype)
    return te.select(te.logical_or(b == zero, minus_one), one, b), minus_one


def int_divide(a: Expr, b: Expr) -> Expr:
    """C (truncating) division; x / 0 == 0 and INT_MIN / -1 wraps, as numpy gives."""
    safe, minus_one = _safe_divisor(b)
    q = te.truncdiv(a, safe)
    if minus_one is not None:
        q = te.select(minus_one, te.const(0, a.dtype) - a, q)
    return te.select(b == te.const(0, b.dtype), te.const(0, a.dtype), q)


def int_mod(a: Expr, b: Expr, floor: bool) -> Expr:
    """numpy mod (floor: sign of b) or fmod (trunc: sign of a); x % 0 == 0 and x % -1 == 0."""
    safe, _ = _safe_divisor(b)
    r = te.floormod(a, safe) if floor else te.truncmod(a, safe)
    return te.select(safe == b, r, te.const(0, a.dtype))


def divide(a: Expr, b: Expr) -> Expr:
    return int_divide(a, b) if a.dtype.is_integer else a / b


def mod(a: Expr, b: Expr, fmod: bool) -> Expr:
    if a.dtype.is_float:
        return te.fmod(a, b) if fmod else float_mod(a, b)
    return int_mod(a, b, floor=not fmod)


def float_mod(a: Expr, b: Expr) -> Expr:
    """numpy's float mod: the remainder takes the sign of b (a zero remainder too)."""
    zero = te.const(0.0, a.dtype)
    r = te.fmod(a, b)
    wrong_sign = te.logical_and(r != zero, (r < zero) != (b < zero))
    r = te.select(wrong_sign, r + b, r)
    signed_zero = te.select(b < zero, te.const(-0.0, a.dtype), zero)
    return te.select(r == zero, signed_zero, r)


# Largest float64 below 2**63: integer powers clip to int64's range before they wrap to their
# dtype, since a float out of an int's range converts to whatever the CPU's vector convert gives.
INT64_EDGE = 9.223372036854774784e18


def power(a: Expr, b: Expr) -> Expr:
    """a ** b in a's dtype; integer bases are raised in float64 (as the reference does), clipped
    to int64 and wrapped to a's width (a power too big for int8 is its value modulo 256)."""
    if a.dtype.is_float:
        return te.pow(a, te.cast(b, a.dtype))
    p = te.pow(te.cast(a, "float64"), te.cast(b, "float64"))
    p = te.min(te.max(p, te.const(-INT64_EDGE, "float64")), te.const(INT64_EDGE, "float64"))
    return te.cast(te.cast(p, "int64"), a.dtype)


def bit_shift(a: Expr, b: Expr, direction: str) -> Expr:
    """Shifts by a count outside [0, bits) give 0 (a right shift of a negative signed value:
    -1), not poison; signed right shifts are arithmetic, left shifts wrap (as ONNX BitShift)."""
    too_far = te.logical_or(b >= te.const(a.dtype.bits, b.dtype), b < te.const(0, b.dtype))
    safe = te.select(too_far, te.const(0, b.dtype), b)
    shifted = te.shift_left(a, safe) if direction == "LEFT" else te.shift_right(a, safe)
    outside = te.const(0, a.dtype)
    if direction == "RIGHT" and not a.dtype.is_uint:
        outside = te.select(a < te.const(0, a.dtype), te.const(-1, a.dtype), outside)
    return te.select(too_far, outside, shifted)


def _bool_or_number(logic, number):
    """numpy's add/multiply/maximum/minimum on bool arrays are or/and."""
    return lambda a, b: logic(a, b) if a.dtype.is_bool else number(a, b)


def _xor(a: Expr, b: Expr) -> Expr:
    return a != b if a.dtype.is_bool else te.bitwise_xor(a, b)


# name -> function of two scalar expressions
BINARY = {
    "add": _bool_or_number(te.logical_or, lambda a, b: a + b),
    "subtract": lambda a, b: a - b,
    "multiply": _bool_or_number(te.logical_and, lambda a, b: a * b),
    "divide": divide,
    "maximum": _bool_or_number(te.logical_or, te.max),
    "minimum": _bool_or_number(te.logical_and, te.min),
    "power": power,
    "equal": lambda a, b: a == b,
    "not_equal": lambda a, b: a != b,
    "less": lambda a, b: a < b,
    "less_equal": lambda a, b: a <= b,
    "greater": lambda a, b: a > b,
    "greater_equal": lambda a, b: a >= b,
    "logical_and": te.logical_and,
    "logical_or": te.logical_or,
    "logical_xor": _xor,
    "bitwise_and": te.bitwise_and,
    "bitwise_or": te.bitwise_or,
    "bitwise_xor": _xor,
}


def binary(name: str, a: te.Tensor, b: te.Tensor) -> te.Tensor:
    """The binary op `name` (a key of BINARY) with numpy broadcasting."""
    if name not in BINARY:
        raise ValueError(f"unknown binary op {name!r}; known: {', '.join(sorted(BINARY))}")
    return broadcast_compute(BINARY[name], [a, b], name)


def where(cond: te.Tensor, a: te.Tensor, b: te.Tensor) -> te.Tensor:
    return broadcast_compute(te.select, [cond, a, b], "where")


def expand(x: te.Tensor, shape) -> te.Tensor:
    """Broadcast x to `shape` (numpy broadcasting of both, as ONNX Expand)."""
    out_shape = broadcast_shape(x.shape, tuple(te.const(d, "int32") for d in shape))
    return te.compute(out_shape, lambda *i: x(*broadcast_index(x, i)), name="expand", tag=BROADCAST)
