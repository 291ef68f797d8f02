"""Divisibility: the modular set (coeff, base) of an integer expression, e == coeff*k + base.

coeff == 0 means e is the constant base; coeff == 1 (base 0) means nothing is known. Otherwise
0 <= base < coeff. Used to prove alignment (vector loads) and to decide equalities.

    modular_set(i*8 + 4)           ->  (8, 4)
    modular_set(i*6 + j*4 + 1)     ->  (2, 1)
    modular_set(floordiv(i*8, 2))  ->  (4, 0)
"""

from __future__ import annotations

import math

from tessera.tir import expr as E

Modular = tuple[int, int]
UNKNOWN: Modular = (1, 0)


def _make(coeff: int, base: int) -> Modular:
    coeff = abs(coeff)
    return (coeff, base % coeff) if coeff else (0, base)


def _union(a: Modular, b: Modular) -> Modular:
    """Both a's and b's values (for min, max, select)."""
    coeff = math.gcd(math.gcd(a[0], b[0]), abs(a[1] - b[1]))
    return _make(coeff, a[1])


def modular_set(e: E.Expr, analyzer) -> Modular:
    fn = _RULES.get(type(e))
    if fn is None or not e.dtype.is_integer:
        return UNKNOWN
    return fn(e, analyzer)


def _m(e, an) -> Modular:
    return modular_set(e, an)


def _var(v, an) -> Modular:
    value = an._values.get(v)
    if value is not None:
        return _m(value, an)
    return UNKNOWN


def _add(e, an) -> Modular:
    (c1, b1), (c2, b2) = _m(e.a, an), _m(e.b, an)
    return _make(math.gcd(c1, c2), b1 + b2)


def _sub(e, an) -> Modular:
    (c1, b1), (c2, b2) = _m(e.a, an), _m(e.b, an)
    return _make(math.gcd(c1, c2), b1 - b2)


def _mul(e, an) -> Modular:
    # (c1*k1 + b1)(c2*k2 + b2) = c1c2*k1k2 + c1b2*k1 + c2b1*k2 + b1b2
    (c1, b1), (c2, b2) = _m(e.a, an), _m(e.b, an)
    coeff = math.gcd(math.gcd(c1 * c2, c1 * b2), c2 * b1)
    return _make(coeff, b1 * b2)


def _floordiv(e, an) -> Modular:
    (c1, b1), (c2, b2) = _m(e.a, an), _m(e.b, an)
    if c2 != 0 or b2 == 0:
        return UNKNOWN
    if c1 == 0:
        return (0, b1 // b2)
    if b2 > 0 and c1 % b2 == 0:
        # floor((c1*k + b1) / d) = (c1/d)*k + floor(b1 / d), with 0 <= b1 < c1
        return _make(c1 // b2, b1 // b2)
    return UNKNOWN


def _floormod(e, an) -> Modular:
    (c1, b1), (c2, b2) = _m(e.a, an), _m(e.b, an)
    if c2 != 0 or b2 == 0:
        return UNKNOWN
    if c1 == 0:
        return (0, b1 % b2)
    # x - d*floor(x/d): a multiple of gcd(c1, d) away from b1
    return _make(math.gcd(c1, b2), b1)


def _trunc(floor_rule):
    def rule(e, an):
        # truncation agrees with floor for a non-negative numerator and a positive divisor
        if an.const_int_bound(e.a)[0] >= 0 and an.const_int_bound(e.b)[0] > 0:
            return floor_rule(e, an)
        return UNKNOWN

    return rule


def _min_max(e, an) -> Modular:
    return _union(_m(e.a, an), _m(e.b, an))


def _select(e, an) -> Modular:
    return _union(_m(e.true_value, an), _m(e.false_value, an))


def _cast(e, an) -> Modular:
    if e.value.dtype.is_integer and e.dtype.bits >= e.value.dtype.bits:
        return _m(e.value, an)
    return UNKNOWN


def _call(e, an) -> Modular:
    if e.op == "if_then_else":
        return _union(_m(e.args[1], an), _m(e.args[2], an))
    if e.op == "shift_left" and isinstance(e.args[1], E.IntImm) and e.args[1].value >= 0:
        c, b = _m(e.args[0], an)
        return _make(c << e.args[1].value, b << e.args[1].value)
    return UNKNOWN


def _ramp(e, an) -> Modular:
    # every lane, base + stride*k for k in [0, lanes): use modular_set(ramp.base) for lane 0
    cs, bs = _m(e.stride, an)
    cb, bb = _m(e.base, an)
    return _make(math.gcd(math.gcd(cb, cs), bs), bb)


def _let(e, an) -> Modular:
    from tessera.tir.stmt_functor import substitute

    return _m(substitute(e.body, {e.var: e.value}), an)


_RULES = {
    E.IntImm: lambda e, an: (0, e.value),
    E.Var: _var,
    E.Add: _add,
    E.Sub: _sub,
    E.Mul: _mul,
    E.FloorDiv: _floordiv,
    E.FloorMod: _floormod,
    E.Div: _trunc(_floordiv),
    E.Mod: _trunc(_floormod),
    E.Min: _min_max,
    E.Max: _min_max,
    E.Select: _select,
    E.Cast: _cast,
    E.Call: _call,
    E.Let: _let,
    E.Ramp: _ramp,
    E.Broadcast: lambda e, an: _m(e.value, an),
}
