"""Rewrite rules for integer and boolean algebra, as tables in the expression language.

Each table is a list of `Rule(pattern, replacement, when=...)` (see `pattern.py`). The
simplifier tries the rules of a node's type after simplifying its children, first rule first.
Linear algebra (collecting like terms, cancelling, splitting constants out of divisions) is done
by the canonical form in `canonical.py`; these tables hold what a linear form cannot see.
All rules here are sound for integers with floor division; they are never applied to floats.
"""

from __future__ import annotations

from tessera.arith.pattern import Rule, Wild, WildConst, rule_table
from tessera.ir.dtype import bool_
from tessera.tir.expr import Not, Select
from tessera.tir.op import floordiv, floormod, max, min

x, y, z = Wild("x"), Wild("y"), Wild("z")
c1, c2 = WildConst("c1"), WildConst("c2")
p, q = Wild("p", bool_), Wild("q", bool_)


def _pos(*cs) -> bool:
    return all(c.value > 0 for c in cs)


def _not_float(x) -> bool:
    return not x.dtype.is_float


ADD_RULES = [
    Rule(x + 0, x),
    Rule(0 + x, x),
    Rule((x - y) + y, x),
    Rule(y + (x - y), x),
    Rule(x * c1 + x * c2, lambda x, c1, c2: x * (c1.value + c2.value)),
    Rule(floordiv(x, c1) * c1 + floormod(x, c1), x, when=lambda c1: c1.value != 0),
    # x = q*c1 + r: (q mod c2)*c1 + r = x mod (c1*c2); a flattened index split into digits
    # and put back together (rows fused across batch axes) becomes linear in x again
    Rule(
        floormod(floordiv(x, c1), c2) * c1 + floormod(x, c1),
        lambda x, c1, c2: floormod(x, c1.value * c2.value),
        when=lambda c1, c2: _pos(c1, c2),
    ),
    Rule(
        floormod(x, c1) + floormod(floordiv(x, c1), c2) * c1,
        lambda x, c1, c2: floormod(x, c1.value * c2.value),
        when=lambda c1, c2: _pos(c1, c2),
    ),
    Rule(
        (y + floormod(floordiv(x, c1), c2) * c1) + floormod(x, c1),
        lambda x, y, c1, c2: y + floormod(x, c1.value * c2.value),
        when=lambda c1, c2: _pos(c1, c2),
    ),
    Rule(min(x, y) + max(x, y), x + y),
    Rule(max(x, y) + min(x, y), x + y),
]

SUB_RULES = [
    Rule(x - 0, x),
    Rule(x - x, 0),
    Rule((x + y) - y, x),
    Rule((x + y) - x, y),
    Rule(x - floormod(x, c1), lambda x, c1: floordiv(x, c1) * c1, when=lambda c1: c1.value != 0),
]

MUL_RULES = [
    Rule(x * 0, 0),
    Rule(0 * x, 0),
    Rule(x * 1, x),
    Rule(1 * x, x),
    Rule(c1 * x, lambda x, c1: x * c1),  # constants go right: x*4, never 4*x
]

FLOORDIV_RULES = [
    Rule(floordiv(x, 1), x),
    Rule(
        floordiv(floordiv(x, c1), c2),
        lambda x, c1, c2: floordiv(x, c1.value * c2.value),
        when=lambda c1, c2: _pos(c1, c2),
    ),
    Rule(
        floordiv(x * c1, c2),
        lambda x, c1, c2: floordiv(x, c2.value // c1.value),
        when=lambda c1, c2: _pos(c1, c2) and c2.value % c1.value == 0,
    ),
    Rule(
        floordiv(floormod(x, c1), c2), 0, when=lambda c1, c2: _pos(c1, c2) and c1.value <= c2.value
    ),
]

FLOORMOD_RULES = [
    Rule(floormod(x, 1), 0),
    Rule(floormod(x, -1), 0),
    Rule(
        floormod(floormod(x, c1), c2),
        lambda x, c2: floormod(x, c2),
        when=lambda c1, c2: _pos(c1, c2) and c1.value % c2.value == 0,
    ),
    Rule(floormod(x * c1, c2), 0, when=lambda c1, c2: c2.value != 0 and c1.value % c2.value == 0),
]

MIN_RULES = [
    Rule(min(x, x), x),
    Rule(min(c1, x), lambda x, c1: min(x, c1)),  # constants go right
    Rule(min(min(x, y), x), min(x, y)),
    Rule(min(min(x, y), y), min(x, y)),
    Rule(min(x, min(x, y)), min(x, y)),
    Rule(min(y, min(x, y)), min(x, y)),
    Rule(min(max(x, y), x), x),
    Rule(min(max(x, y), y), y),
    Rule(min(x, max(x, y)), x),
    Rule(min(y, max(x, y)), y),
    Rule(min(x + c1, y + c1), lambda x, y, c1: min(x, y) + c1),
    Rule(min(x * c1, y * c1), lambda x, y, c1: min(x, y) * c1, when=lambda c1: c1.value > 0),
    Rule(min(x * c1, y * c1), lambda x, y, c1: max(x, y) * c1, when=lambda c1: c1.value < 0),
    Rule(
        min(floordiv(x, c1), floordiv(y, c1)),
        lambda x, y, c1: floordiv(min(x, y), c1),
        when=lambda c1: c1.value > 0,
    ),
]

MAX_RULES = [
    Rule(max(x, x), x),
    Rule(max(c1, x), lambda x, c1: max(x, c1)),
    Rule(max(max(x, y), x), max(x, y)),
    Rule(max(max(x, y), y), max(x, y)),
    Rule(max(x, max(x, y)), max(x, y)),
    Rule(max(y, max(x, y)), max(x, y)),
    Rule(max(min(x, y), x), x),
    Rule(max(min(x, y), y), y),
    Rule(max(x, min(x, y)), x),
    Rule(max(y, min(x, y)), y),
    Rule(max(x + c1, y + c1), lambda x, y, c1: max(x, y) + c1),
    Rule(max(x * c1, y * c1), lambda x, y, c1: max(x, y) * c1, when=lambda c1: c1.value > 0),
    Rule(max(x * c1, y * c1), lambda x, y, c1: min(x, y) * c1, when=lambda c1: c1.value < 0),
    Rule(
        max(floordiv(x, c1), floordiv(y, c1)),
        lambda x, y, c1: floordiv(max(x, y), c1),
        when=lambda c1: c1.value > 0,
    ),
]

COMPARE_RULES = [
    Rule(x == x, True),
    Rule(x != x, False),
    Rule(x < x, False),
    Rule(x <= x, True),
    Rule(x > y, lambda x, y: y < x),  # one direction only: a < b and a <= b
    Rule(x >= y, lambda x, y: y <= x),
    # floordiv(x, c) < k  <=>  x < k*c  (and the other comparisons alike, for c > 0)
    Rule(
        floordiv(x, c1) < c2,
        lambda x, c1, c2: x < c1.value * c2.value,
        when=lambda c1, c2: _pos(c1, c2),
    ),
    Rule(
        c2 < floordiv(x, c1),
        lambda x, c1, c2: (c2.value + 1) * c1.value - 1 < x,
        when=lambda c1: c1.value > 0,
    ),
    Rule(
        floordiv(x, c1) <= c2,
        lambda x, c1, c2: x < (c2.value + 1) * c1.value,
        when=lambda c1: c1.value > 0,
    ),
    Rule(
        c2 <= floordiv(x, c1),
        lambda x, c1, c2: c2.value * c1.value <= x,
        when=lambda c1: c1.value > 0,
    ),
]

AND_RULES = [
    Rule(p & 1, p),
    Rule(1 & p, p),
    Rule(p & 0, False),
    Rule(0 & p, False),
    Rule(p & p, p),
    Rule(p & Not(p), False),
    Rule(Not(p) & p, False),
    Rule(p & (p & q), p & q),
    Rule((p & q) & p, p & q),
    Rule((p & q) & q, p & q),
    Rule(p & (p | q), p),
    Rule((p | q) & p, p),
    Rule((x < y) & (y < x), False),
    Rule((x < y) & (y <= x), False),
    Rule((x == y) & (x != y), False),
]

OR_RULES = [
    Rule(p | 0, p),
    Rule(0 | p, p),
    Rule(p | 1, True),
    Rule(1 | p, True),
    Rule(p | p, p),
    Rule(p | Not(p), True),
    Rule(Not(p) | p, True),
    Rule(p | (p | q), p | q),
    Rule((p | q) | p, p | q),
    Rule((p | q) | q, p | q),
    Rule(p | (p & q), p),
    Rule((p & q) | p, p),
    Rule((x < y) | (y <= x), True, when=_not_float),
    Rule((x <= y) | (y < x), True, when=_not_float),
    Rule((x == y) | (x != y), True),
]

NOT_RULES = [
    Rule(Not(Not(p)), p),
    # with a NaN every comparison is false, so these only hold for integer operands
    Rule(Not(x < y), lambda x, y: y <= x, when=_not_float),
    Rule(Not(x <= y), lambda x, y: y < x, when=_not_float),
    Rule(Not(x > y), lambda x, y: x <= y, when=_not_float),
    Rule(Not(x >= y), lambda x, y: x < y, when=_not_float),
    Rule(Not(x == y), lambda x, y: x != y),
    Rule(Not(x != y), lambda x, y: x == y),
]

SELECT_RULES = [
    Rule(Select(p, x, x), x),
    Rule(Select(Not(p), x, y), lambda p, x, y: Select(p, y, x)),
]

INT_RULES = rule_table(
    ADD_RULES
    + SUB_RULES
    + MUL_RULES
    + FLOORDIV_RULES
    + FLOORMOD_RULES
    + MIN_RULES
    + MAX_RULES
    + COMPARE_RULES
    + SELECT_RULES
)
BOOL_RULES = rule_table(AND_RULES + OR_RULES + NOT_RULES + SELECT_RULES + COMPARE_RULES[:4])
