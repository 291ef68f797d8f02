"""Constant integer bounds: the inclusive interval (lo, hi) an integer expression lies in.

Bounds are plain Python numbers; an unknown side is -inf / +inf (float). The arithmetic follows
the IR's semantics: `FloorDiv`/`FloorMod` round toward -inf (Python's `//`, `%`), `Div`/`Mod` on
integers truncate toward zero (C). Index arithmetic is treated as mathematical integers (no
overflow), as TVM does; int32/int64 values of unknown origin are therefore unbounded.

    an.bind(i, Range(0, 16));  const_int_bound(i * 4 + 3, an)  ->  (3, 63)
    const_int_bound(floormod(x, 8), an)                        ->  (0, 7)
"""

from __future__ import annotations

import math

from tessera.ir.dtype import DType
from tessera.tir import expr as E

INF = math.inf
Bound = tuple[float, float]
EVERYTHING: Bound = (-INF, INF)


def floordiv_int(a: int, b: int) -> int:
    return a // b


def truncdiv_int(a: int, b: int) -> int:
    """C division: the quotient rounded toward zero (exact for big ints, unlike int(a / b))."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def truncmod_int(a: int, b: int) -> int:
    """C remainder: its sign follows a."""
    return a - b * truncdiv_int(a, b)


def dtype_bound(dt: DType) -> Bound:
    """What the type alone says. int32/int64 count as unbounded (see module docstring)."""
    if dt.is_bool:
        return (0, 1)
    if dt.is_uint:
        return (0, dt.element.max_value())
    if dt.is_int and dt.bits <= 16:
        return (dt.element.min_value(), dt.element.max_value())
    return EVERYTHING


# ---------------------------------------------------------------------------------------------
# interval arithmetic


def _mul(a, b):
    # 0 * inf is 0 here: the side that is 0 is exact, the infinite one only unknown
    if a == 0 or b == 0:
        return 0
    return a * b


def add(a: Bound, b: Bound) -> Bound:
    return (a[0] + b[0], a[1] + b[1])


def sub(a: Bound, b: Bound) -> Bound:
    return (a[0] - b[1], a[1] - b[0])


def mul(a: Bound, b: Bound) -> Bound:
    corners = [_mul(x, y) for x in a for y in b]
    return (min(corners), max(corners))


def _div_corner(a, b, trunc: bool):
    if math.isinf(a):
        return a if b > 0 else -a
    if math.isinf(b):
        return 0  # finite / huge: rounds to 0 (or -1 for floor of a negative; widened below)
    return truncdiv_int(int(a), int(b)) if trunc else floordiv_int(int(a), int(b))


def div(a: Bound, b: Bound, trunc: bool) -> Bound:
    """Quotient bounds. For a divisor of one sign the quotient is monotone in each operand."""
    if b[0] <= 0 <= b[1]:
        return EVERYTHING
    corners = [_div_corner(x, y, trunc) for x in a for y in b]
    lo, hi = min(corners), max(corners)
    if not trunc and (math.isinf(b[0]) or math.isinf(b[1])):
        lo, hi = min(lo, -1), max(hi, 0)
    return (lo, hi)


def floormod(a: Bound, b: Bound) -> Bound:
    if b[0] == b[1] and b[0] > 0 and not math.isinf(a[0]) and not math.isinf(a[1]):
        c = int(b[0])
        if a[0] // c == a[1] // c:  # inside one period: the remainder grows with a
            return (a[0] % c, a[1] % c)
    if b[0] > 0:
        hi = b[1] - 1
        return (0, min(hi, a[1]) if a[0] >= 0 else hi)
    if b[1] < 0:
        lo = b[0] + 1
        return (max(lo, a[0]) if a[1] <= 0 else lo, 0)
    return EVERYTHING


def truncmod(a: Bound, b: Bound) -> Bound:
    if b[0] <= 0 <= b[1]:
        return EVERYTHING
    m = max(abs(b[0]), abs(b[1])) - 1  # |remainder| < |divisor|
    lo = 0 if a[0] >= 0 else max(a[0], -m)
    hi = 0 if a[1] <= 0 else min(a[1], m)
    return (lo, hi)


def union(a: Bound, b: Bound) -> Bound:
    return (min(a[0], b[0]), max(a[1], b[1]))


def intersect(a: Bound, b: Bound) -> Bound:
    return (max(a[0], b[0]), min(a[1], b[1]))


# ---------------------------------------------------------------------------------------------
# bounds of expressions


def const_int_bound(e: E.Expr, analyzer) -> Bound:
    """Inclusive (lo, hi) of an integer or bool expression under the analyzer's var ranges."""
    cache = analyzer._bound_cache
    hit = cache.get(e)
    if hit is not None:
        return hit
    fn = _RULES.get(type(e))
    result = fn(e, analyzer) if fn is not None else _opaque(e)
    if e.dtype.is_uint or e.dtype.is_bool:
        result = intersect(result, dtype_bound(e.dtype))
    cache[e] = result
    return result


def _opaque(e: E.Expr) -> Bound:
    return dtype_bound(e.dtype) if not e.dtype.is_float else EVERYTHING


def _b(e, an) -> Bound:
    return const_int_bound(e, an)


def _var(v: E.Var, an) -> Bound:
    return an._var_bound(v)


def _binop(fn):
    return lambda e, an: fn(_b(e.a, an), _b(e.b, an))


def _int_only(fn):
    def rule(e, an):
        return fn(e, an) if not e.dtype.is_float else EVERYTHING

    return rule


def _select(e: E.Select, an) -> Bound:
    cond = _b(e.condition, an)
    if cond == (1, 1):
        return _b(e.true_value, an)
    if cond == (0, 0):
        return _b(e.false_value, an)
    return union(_b(e.true_value, an), _b(e.false_value, an))


def _cast(e: E.Cast, an) -> Bound:
    src = e.value.dtype
    if e.dtype.is_float or src.is_float:
        return _opaque(e)
    inner = _b(e.value, an)
    limit = dtype_bound(e.dtype)
    if e.dtype.is_integer and e.dtype.bits >= 32 and not e.dtype.is_uint:
        # a wide signed target holds every narrower value, and we do not model overflow
        return inner
    if limit[0] <= inner[0] and inner[1] <= limit[1]:
        return inner
    return limit


def _compare(e: E.CmpOp, an) -> Bound:
    if e.a.dtype.is_float:
        return (0, 1)
    d = sub(_b(e.a, an), _b(e.b, an))
    decide = {
        E.LT: (d[1] < 0, d[0] >= 0),
        E.LE: (d[1] <= 0, d[0] > 0),
        E.GT: (d[0] > 0, d[1] <= 0),
        E.GE: (d[0] >= 0, d[1] < 0),
        E.EQ: (d == (0, 0), d[0] > 0 or d[1] < 0),
        E.NE: (d[0] > 0 or d[1] < 0, d == (0, 0)),
    }[type(e)]
    if decide[0]:
        return (1, 1)
    if decide[1]:
        return (0, 0)
    return (0, 1)


def _call(e: E.Call, an) -> Bound:
    if e.op == "likely":
        return _b(e.args[0], an)
    if e.op == "if_then_else":
        return _select(E.Select(*e.args), an)
    if e.op == "abs" and not e.dtype.is_float:
        lo, hi = _b(e.args[0], an)
        if lo >= 0:
            return (lo, hi)
        if hi <= 0:
            return (-hi, -lo)
        return (0, max(-lo, hi))
    return _opaque(e)


def _ramp(e: E.Ramp, an) -> Bound:
    last = mul(_b(e.stride, an), (e.lanes - 1, e.lanes - 1))
    return add(_b(e.base, an), union((0, 0), last))


def _let(e: E.Let, an) -> Bound:
    from tessera.tir.stmt_functor import substitute

    return _b(substitute(e.body, {e.var: e.value}), an)


def _and(e, an):
    a, b = _b(e.a, an), _b(e.b, an)
    return (min(a[0], b[0]), min(a[1], b[1]))


def _or(e, an):
    a, b = _b(e.a, an), _b(e.b, an)
    return (max(a[0], b[0]), max(a[1], b[1]))


def _not(e, an):
    a = _b(e.a, an)
    return (1 - a[1], 1 - a[0])


_RULES = {
    E.IntImm: lambda e, an: (e.value, e.value),
    E.Var: _var,
    E.Add: _int_only(_binop(add)),
    E.Sub: _int_only(_binop(sub)),
    E.Mul: _int_only(_binop(mul)),
    E.FloorDiv: _int_only(_binop(lambda a, b: div(a, b, trunc=False))),
    E.Div: _int_only(_binop(lambda a, b: div(a, b, trunc=True))),
    E.FloorMod: _int_only(_binop(floormod)),
    E.Mod: _int_only(_binop(truncmod)),
    E.Min: _int_only(_binop(lambda a, b: (min(a[0], b[0]), min(a[1], b[1])))),
    E.Max: _int_only(_binop(lambda a, b: (max(a[0], b[0]), max(a[1], b[1])))),
    E.Select: _int_only(_select),
    E.Cast: _cast,
    E.Call: _call,
    E.Ramp: _int_only(_ramp),
    E.Broadcast: lambda e, an: _b(e.value, an),
    E.Let: _let,
    E.And: _and,
    E.Or: _or,
    E.Not: _not,
    **{cls: _compare for cls in (E.LT, E.LE, E.GT, E.GE, E.EQ, E.NE)},
}
