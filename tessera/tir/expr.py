"""Expressions of the loop-level IR.

Expressions are frozen dataclasses. Python operators build IR, with scalars converted to the
other operand's type and mixed types promoted (int with float becomes float, narrow with wide
becomes wide):

    i = Var("i")
    e = i * 4 + 1          # Add(Mul(i, 4), 1), all int32
    c = i < 10             # LT(i, 10), dtype bool
    i == 0                 # EQ(i, 0): usable as a condition, and bool() of it is structural ==

Equality: `a == b` builds an `EQ` node whose truth value is structural equality, so dicts, `in`
and `assert a == b` work (the same convention as TVM). Variables, iteration variables and buffers
are identities: two `Var("i")` objects are different variables.

Index arithmetic: `//` is floor division, `%` is floor modulo (what loop splitting needs);
`/` is true division on floats and C's truncating division on integers (`Div`, `Mod`).

The iteration and reduction nodes (`Range`, `IterVar`, `CommReducer`, `Reduce`) are in
`iter_var.py` and re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tessera.ir.dtype import DType, bool_, float32, int32, int64
from tessera.ir.node import Node, field_names


def _same(a, b) -> bool:
    """Exact structural equality (variables by identity)."""
    if a is b:
        return True
    if isinstance(a, Node):
        if type(a) is not type(b) or a.is_leaf:
            return False
        return all(_same(getattr(a, n), getattr(b, n)) for n in field_names(type(a)))
    if isinstance(a, tuple):
        return (
            isinstance(b, tuple)
            and len(a) == len(b)
            and all(_same(x, y) for x, y in zip(a, b, strict=True))
        )
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True
    return type(a) is type(b) and a == b


def _hash(node) -> int:
    if isinstance(node, Node):
        if node.is_leaf:
            return id(node)
        cached = node.__dict__.get("_hash")
        if cached is None:
            cached = hash(
                (type(node).__name__, *(_hash(getattr(node, n)) for n in field_names(type(node))))
            )
            object.__setattr__(node, "_hash", cached)
        return cached
    if isinstance(node, tuple):
        return hash(tuple(_hash(v) for v in node))
    return hash(node)


class Expr(Node):
    """Base of expressions. Every expression has a `dtype`."""

    dtype: DType

    # structural equality and hashing (see module docstring)
    def __eq__(self, other):
        if not isinstance(other, (Expr, int, float, bool)):
            return NotImplemented
        return EQ(self, convert(other, self.dtype) if not isinstance(other, Expr) else other)

    def __ne__(self, other):
        if not isinstance(other, (Expr, int, float, bool)):
            return NotImplemented
        return NE(self, convert(other, self.dtype) if not isinstance(other, Expr) else other)

    def __hash__(self):
        return _hash(self)

    def same_as(self, other) -> bool:
        """Exact structural equality, without building an EQ node."""
        return _same(self, other)

    def __bool__(self):
        raise TypeError(
            f"cannot use the symbolic expression `{self}` as a Python bool; "
            "use te.if_then_else / tir.Select to branch on it"
        )

    # arithmetic
    def __add__(self, o):
        return _binary(Add, self, o)

    def __radd__(self, o):
        return _binary(Add, o, self)

    def __sub__(self, o):
        return _binary(Sub, self, o)

    def __rsub__(self, o):
        return _binary(Sub, o, self)

    def __mul__(self, o):
        return _binary(Mul, self, o)

    def __rmul__(self, o):
        return _binary(Mul, o, self)

    def __truediv__(self, o):
        return _binary(Div, self, o)

    def __rtruediv__(self, o):
        return _binary(Div, o, self)

    def __floordiv__(self, o):
        return _binary(FloorDiv, self, o)

    def __rfloordiv__(self, o):
        return _binary(FloorDiv, o, self)

    def __mod__(self, o):
        return _binary(FloorMod, self, o)

    def __rmod__(self, o):
        return _binary(FloorMod, o, self)

    def __neg__(self):
        if isinstance(self, IntImm):
            return IntImm(-self.value, self.dtype)
        if isinstance(self, FloatImm):
            return FloatImm(-self.value, self.dtype)
        return _binary(Sub, convert(0, self.dtype), self)

    def __lt__(self, o):
        return _binary(LT, self, o)

    def __le__(self, o):
        return _binary(LE, self, o)

    def __gt__(self, o):
        return _binary(GT, self, o)

    def __ge__(self, o):
        return _binary(GE, self, o)

    # logical on bools, bitwise on integers
    def __and__(self, o):
        return _logic_or_bits(And, "bitwise_and", self, o)

    def __rand__(self, o):
        return _logic_or_bits(And, "bitwise_and", o, self)

    def __or__(self, o):
        return _logic_or_bits(Or, "bitwise_or", self, o)

    def __ror__(self, o):
        return _logic_or_bits(Or, "bitwise_or", o, self)

    def __xor__(self, o):
        a, b = _promote(self, o)
        return Call(a.dtype, "bitwise_xor", (a, b))

    def __invert__(self):
        if self.dtype.is_bool:
            return Not(self)
        return Call(self.dtype, "bitwise_not", (self,))

    def __lshift__(self, o):
        a, b = _promote(self, o)
        return Call(a.dtype, "shift_left", (a, b))

    def __rshift__(self, o):
        a, b = _promote(self, o)
        return Call(a.dtype, "shift_right", (a, b))

    def astype(self, dtype) -> Expr:
        dtype = DType.parse(dtype)
        return self if dtype == self.dtype else Cast(dtype, self)


# ---------------------------------------------------------------------------------------------
# leaves and constants


@dataclass(frozen=True, eq=False)
class Var(Expr):
    """A variable. Two Vars named "i" are different variables."""

    name: str
    dtype: DType = int32
    is_leaf = True

    def __post_init__(self):
        object.__setattr__(self, "dtype", DType.parse(self.dtype))


def wrap_int(value: int, dt: DType) -> int:
    """value as the machine holds it in dt (two's complement; bool is 0 or 1)."""
    if dt.is_bool:
        return int(bool(value))
    bits = dt.bits
    value %= 1 << bits
    if dt.is_int and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


@dataclass(frozen=True, eq=False)
class IntImm(Expr):
    """An integer constant; its value is wrapped into dt as the machine holds it (2**31 as
    int32 is -2**31, -1 as uint8 is 255), so folding while building agrees with the code."""

    value: int
    dtype: DType = int32

    def __post_init__(self):
        dt = DType.parse(self.dtype)
        object.__setattr__(self, "dtype", dt)
        value = int(self.value)
        if dt.is_integer or dt.is_bool:
            value = wrap_int(value, dt)
        object.__setattr__(self, "value", value)


@dataclass(frozen=True, eq=False)
class FloatImm(Expr):
    value: float
    dtype: DType = float32

    def __post_init__(self):
        object.__setattr__(self, "dtype", DType.parse(self.dtype))
        object.__setattr__(self, "value", float(self.value))


@dataclass(frozen=True, eq=False)
class StringImm(Expr):
    value: str
    dtype: DType = field(default=DType("handle", 64))


# ---------------------------------------------------------------------------------------------
# arithmetic and logic


@dataclass(frozen=True, eq=False)
class BinaryOp(Expr):
    a: Expr
    b: Expr

    @property
    def dtype(self) -> DType:
        return self.a.dtype


class Add(BinaryOp):
    pass


class Sub(BinaryOp):
    pass


class Mul(BinaryOp):
    pass


class Div(BinaryOp):
    """a / b: true division for floats, truncating (C) division for integers."""


class Mod(BinaryOp):
    """Truncating (C) remainder: the sign follows a."""


class FloorDiv(BinaryOp):
    pass


class FloorMod(BinaryOp):
    pass


class Min(BinaryOp):
    pass


class Max(BinaryOp):
    pass


@dataclass(frozen=True, eq=False)
class CmpOp(Expr):
    a: Expr
    b: Expr

    @property
    def dtype(self) -> DType:
        return bool_.with_lanes(self.a.dtype.lanes)


class EQ(CmpOp):
    def __bool__(self):
        return _same(self.a, self.b)


class NE(CmpOp):
    def __bool__(self):
        return not _same(self.a, self.b)


class LT(CmpOp):
    pass


class LE(CmpOp):
    pass


class GT(CmpOp):
    pass


class GE(CmpOp):
    pass


@dataclass(frozen=True, eq=False)
class And(Expr):
    a: Expr
    b: Expr

    @property
    def dtype(self) -> DType:
        return self.a.dtype


@dataclass(frozen=True, eq=False)
class Or(Expr):
    a: Expr
    b: Expr

    @property
    def dtype(self) -> DType:
        return self.a.dtype


@dataclass(frozen=True, eq=False)
class Not(Expr):
    a: Expr

    @property
    def dtype(self) -> DType:
        return self.a.dtype


@dataclass(frozen=True, eq=False)
class Select(Expr):
    """condition ? true_value : false_value, both sides evaluated (see if_then_else for lazy)."""

    condition: Expr
    true_value: Expr
    false_value: Expr

    @property
    def dtype(self) -> DType:
        return self.true_value.dtype


@dataclass(frozen=True, eq=False)
class Cast(Expr):
    dtype: DType
    value: Expr

    def __post_init__(self):
        object.__setattr__(self, "dtype", DType.parse(self.dtype))


@dataclass(frozen=True, eq=False)
class Call(Expr):
    """An intrinsic call by name: `exp`, `if_then_else`, `bitwise_and`, ... (see tir.op)."""

    dtype: DType
    op: str
    args: tuple[Expr, ...]

    def __post_init__(self):
        object.__setattr__(self, "dtype", DType.parse(self.dtype))
        object.__setattr__(self, "args", tuple(self.args))


@dataclass(frozen=True, eq=False)
class Let(Expr):
    var: Var
    value: Expr
    body: Expr

    @property
    def dtype(self) -> DType:
        return self.body.dtype


# ---------------------------------------------------------------------------------------------
# memory and vectors


@dataclass(frozen=True, eq=False)
class BufferLoad(Expr):
    """buffer[indices]. A Ramp index loads a vector of `lanes` elements."""

    buffer: object  # tir.Buffer
    indices: tuple[Expr, ...]

    def __post_init__(self):
        object.__setattr__(self, "indices", tuple(self.indices))

    @property
    def dtype(self) -> DType:
        lanes = max((ix.dtype.lanes for ix in self.indices), default=1)
        return self.buffer.dtype.with_lanes(lanes * self.buffer.dtype.lanes)


@dataclass(frozen=True, eq=False)
class Ramp(Expr):
    """The vector [base, base + stride, ..., base + (lanes - 1) * stride]."""

    base: Expr
    stride: Expr
    lanes: int

    def __post_init__(self):
        object.__setattr__(self, "base", convert(self.base))
        object.__setattr__(self, "stride", convert(self.stride, self.base.dtype))

    @property
    def dtype(self) -> DType:
        return self.base.dtype.with_lanes(self.lanes)


@dataclass(frozen=True, eq=False)
class Broadcast(Expr):
    """The vector with `value` in each of `lanes` lanes."""

    value: Expr
    lanes: int

    def __post_init__(self):
        object.__setattr__(self, "value", convert(self.value))

    @property
    def dtype(self) -> DType:
        return self.value.dtype.with_lanes(self.lanes)


# ---------------------------------------------------------------------------------------------
# conversion and promotion


def const(value, dtype=None) -> Expr:
    """A constant: int -> int32 (int64 when it does not fit), float -> float32, bool -> bool."""
    if isinstance(value, Expr):
        return value if dtype is None else value.astype(dtype)
    if dtype is None:
        if isinstance(value, bool):
            dtype = bool_
        elif isinstance(value, int):
            dtype = int32 if -(2**31) <= value < 2**31 else int64
        elif isinstance(value, float):
            dtype = float32
        else:
            import numpy as np

            if isinstance(value, np.generic):
                return const(value.item(), DType.parse(value.dtype))
            raise TypeError(f"cannot make a constant from {value!r}")
    dtype = DType.parse(dtype)
    if dtype.lanes > 1:
        return Broadcast(const(value, dtype.element), dtype.lanes)
    if dtype.is_storage_only:  # float8, int4, ...: an IntImm of the stored byte
        from tessera.ir.small_types import encode

        return IntImm(encode(value, dtype), dtype)
    if dtype.is_float:
        return FloatImm(float(value), dtype)
    if dtype.is_bool:
        return IntImm(int(bool(value)), dtype)
    if dtype.is_handle:
        raise TypeError("cannot make a constant of type handle")
    return IntImm(int(value), dtype)


def convert(value, dtype=None) -> Expr:
    """An Expr from an Expr or a Python/numpy scalar (taking `dtype` for scalars when given)."""
    if isinstance(value, Expr):
        return value
    if hasattr(value, "as_expr"):  # te tensors of rank 0, iteration variables
        return value.as_expr()
    if dtype is not None:
        dtype = DType.parse(dtype)
        if isinstance(value, float) and not dtype.is_float:
            dtype = float32.with_lanes(dtype.lanes)  # 0.5 next to an int stays a float
        return const(value, dtype)
    return const(value)


def promote_types(a: DType, b: DType) -> DType:
    """The common type of a and b: float beats int beats bool; wider beats narrower."""
    lanes = max(a.lanes, b.lanes)
    ea, eb = a.element, b.element
    if ea == eb:
        return ea.with_lanes(lanes)
    if ea.is_float and eb.is_float:
        wide = ea if ea.bits >= eb.bits else eb
        if ea.bits == eb.bits:  # float16 with bfloat16
            wide = float32
        return wide.with_lanes(lanes)
    if ea.is_float or eb.is_float:
        return (ea if ea.is_float else eb).with_lanes(lanes)
    if ea.is_bool or eb.is_bool:
        return (eb if ea.is_bool else ea).with_lanes(lanes)
    bits = max(ea.bits, eb.bits)
    code = "int" if "int" in (ea.code, eb.code) else "uint"
    return DType(code, bits, lanes)


def _coerce(e: Expr, dt: DType) -> Expr:
    if e.dtype == dt:
        return e
    if e.dtype.lanes == 1 and dt.lanes > 1:
        e = _coerce(e, dt.element)
        return Broadcast(e, dt.lanes)
    if isinstance(e, IntImm | FloatImm) and dt.lanes == 1:
        return const(e.value, dt)
    return Cast(dt, e)


def _promote(a, b) -> tuple[Expr, Expr]:
    if not isinstance(a, Expr) and not hasattr(a, "as_expr"):
        b = convert(b)
        a = convert(a, b.dtype)
    elif not isinstance(b, Expr) and not hasattr(b, "as_expr"):
        a = convert(a)
        b = convert(b, a.dtype)
    else:
        a, b = convert(a), convert(b)
    if a.dtype != b.dtype:
        dt = promote_types(a.dtype, b.dtype)
        a, b = _coerce(a, dt), _coerce(b, dt)
    return a, b


_FOLD = {
    "Add": lambda x, y: x + y,
    "Sub": lambda x, y: x - y,
    "Mul": lambda x, y: x * y,
    "Min": min,
    "Max": max,
}


def _binary(cls, a, b) -> Expr:
    try:
        a, b = _promote(a, b)
    except TypeError:
        return NotImplemented
    name = cls.__name__
    if a.dtype.is_storage_only:
        raise TypeError(
            f"{name} of {a.dtype} values is not supported: {a.dtype} is a storage type; "
            "convert it with topi.cast_small first"
        )
    # fold integer constants as they are built: shapes like (n - 1) + 1 stay readable
    if isinstance(a, IntImm) and isinstance(b, IntImm) and a.dtype.is_integer:
        if name in _FOLD:
            return IntImm(_FOLD[name](a.value, b.value), a.dtype)
        if name == "FloorDiv" and b.value != 0:
            return IntImm(a.value // b.value, a.dtype)
        if name == "FloorMod" and b.value != 0:
            return IntImm(a.value % b.value, a.dtype)
    return cls(a, b)


def _logic_or_bits(logic_cls, bits_op: str, a, b) -> Expr:
    a, b = _promote(a, b)
    if a.dtype.is_bool:
        return logic_cls(a, b)
    if not a.dtype.is_integer:
        raise TypeError(f"bitwise {bits_op} needs integer operands, got {a.dtype}")
    return Call(a.dtype, bits_op, (a, b))


def is_const_int(e, value=None) -> bool:
    """True when e is an integer constant (equal to `value` when given)."""
    return isinstance(e, IntImm) and (value is None or e.value == value)


# The iteration and reduction nodes live in iter_var.py; importing them here keeps
# `tir.expr.IterVar` & co. working (iter_var.py imports this module, so this comes last).
from tessera.tir.iter_var import (  # noqa: E402, F401
    CommReducer,
    IterVar,
    IterVarType,
    Range,
    Reduce,
)
