"""Element-wise te operators: unary math, predicates, `cast`, `clip`.

    y = topi.elemwise.unary("exp", x)          # te.compute(x.shape, exp(x[i...]), tag="elemwise")
    y = topi.elemwise.cast(x, "int32")         # float -> int truncates toward zero
    y = topi.elemwise.clip(x, a_min=0.0, a_max=6.0)

Every compute here is tagged "elemwise", so a fused group inlines it into its consumer.
Semantics follow the numpy references of the graph ops (`tessera/graph/ops/tensor.py`).
"""

from __future__ import annotations

import numpy as np

from tessera import te
from tessera.ir.dtype import DType
from tessera.tir.expr import Expr

ELEMWISE = "elemwise"


def _sign(v: Expr) -> Expr:
    zero, one = te.const(0, v.dtype), te.const(1, v.dtype)
    if v.dtype.is_uint or v.dtype.is_bool:
        return te.select(v > zero, one, zero)
    out = te.select(v > zero, one, te.select(v < zero, te.const(-1, v.dtype), zero))
    # numpy: sign(nan) is nan
    return te.select(te.isnan(v), v, out) if v.dtype.is_float else out


def _negative(v: Expr) -> Expr:
    return te.const(0, v.dtype) - v


def _reciprocal(v: Expr) -> Expr:
    return te.const(1, v.dtype) / v


_INTRINSIC = {
    name: getattr(te, name)
    for name in (
        "exp log sqrt rsqrt sin cos tan asin acos atan sinh cosh tanh asinh acosh atanh erf "
        "floor ceil round sigmoid isnan isinf"
    ).split()
}

# name -> function of one scalar expression
UNARY = {
    **_INTRINSIC,
    "reciprocal": _reciprocal,
    "negative": _negative,
    "abs": te.abs,
    "sign": _sign,
    "copy": lambda v: v,
    "logical_not": te.logical_not,
    "bitwise_not": te.bitwise_not,
}


def unary(name: str, x: te.Tensor) -> te.Tensor:
    """Apply the unary op `name` (a key of UNARY) to every element of x."""
    if name not in UNARY:
        raise ValueError(f"unknown unary op {name!r}; known: {', '.join(sorted(UNARY))}")
    fn = UNARY[name]
    return te.compute(x.shape, lambda *i: fn(x(*i)), name=name, tag=ELEMWISE)


def cast_expr(v: Expr, dtype) -> Expr:
    """numpy's astype: to bool means `!= 0`; float to int truncates toward zero."""
    dtype = DType.parse(dtype)
    if dtype == v.dtype:
        return v
    if dtype.is_bool:
        return v != te.const(0, v.dtype)
    return te.cast(v, dtype)


def cast(x: te.Tensor, dtype) -> te.Tensor:
    return te.compute(x.shape, lambda *i: cast_expr(x(*i), dtype), name="cast", tag=ELEMWISE)


def scalar_as(value, dtype) -> Expr:
    """A Python scalar converted as numpy converts it to dtype (2.7 -> 2 for ints)."""
    dtype = DType.parse(dtype)
    return te.const(np.asarray(value).astype(dtype.numpy_name).item(), dtype)


def clip(x: te.Tensor, a_min=None, a_max=None) -> te.Tensor:
    """max(x, a_min), then min(., a_max); a bound of None is no bound."""

    def body(*i):
        v = x(*i)
        if a_min is not None:
            v = te.max(v, scalar_as(a_min, x.dtype))
        if a_max is not None:
            v = te.min(v, scalar_as(a_max, x.dtype))
        return v

    return te.compute(x.shape, body, name="clip", tag=ELEMWISE)
