"""Every rule of every table is sound: random instances of its pattern keep their value."""

import random

import pytest

from tessera.arith import Analyzer, rules
from tessera.arith.pattern import WildConst, instantiate
from tessera.tir import IntImm, Var, floordiv, floormod, max, min

x, y = Var("x"), Var("y")
TABLES = [
    "ADD_RULES",
    "SUB_RULES",
    "MUL_RULES",
    "FLOORDIV_RULES",
    "FLOORMOD_RULES",
    "MIN_RULES",
    "MAX_RULES",
    "COMPARE_RULES",
    "AND_RULES",
    "OR_RULES",
    "NOT_RULES",
    "SELECT_RULES",
]
CASES = [(name, k) for name in TABLES for k in range(len(getattr(rules, name)))]


def _int_operand(r):
    pick = r.randrange(6)
    if pick == 0:
        return x
    if pick == 1:
        return y
    if pick == 2:
        return x * r.choice([-2, 3]) + y
    if pick == 3:
        return floordiv(x, r.choice([2, 3])) - y
    if pick == 4:
        return min(x, y) + 1
    return floormod(y, 5) - max(x, 2)


def _bool_operand(r):
    a, b = _int_operand(r), _int_operand(r)
    return [a < b, a <= b, a == b, a != b][r.randrange(4)]


def _bindings(rule, r):
    from tessera.ir.node import post_order

    binds = {}

    def bind(node):
        if isinstance(node, WildConst):
            binds.setdefault(node.name, IntImm(r.choice([-4, -3, -2, -1, 0, 1, 2, 3, 4, 6, 8])))
        elif type(node).__name__ == "Wild":
            if node.name not in binds:
                binds[node.name] = _bool_operand(r) if node.dtype.is_bool else _int_operand(r)

    post_order(rule.pattern, bind)
    return binds


@pytest.mark.parametrize("table, index", CASES)
def test_rule_is_sound(table, index, evaluate_fn):
    rule = getattr(rules, table)[index]
    r = random.Random(TABLES.index(table) * 100 + index)
    an = Analyzer()
    fired = 0
    for _ in range(60):
        before = instantiate(rule.pattern, _bindings(rule, r))
        after = rule.apply(before, an)
        if after is None:
            continue
        fired += 1
        for vx in range(-7, 8, 3):
            for vy in range(-6, 7, 3):
                env = {x: vx, y: vy}
                try:
                    want = evaluate_fn(before, env)
                except ZeroDivisionError:
                    continue
                assert evaluate_fn(after, env) == want, f"{before} -> {after} at {env}"
    assert fired, f"{table}[{index}] never applied: {rule.pattern}"


def test_an_index_split_into_digits_and_joined_again_is_the_index():
    # rows fused across batch axes (b0, b1, m) = (t // 66, t // 33 % 2, t % 33) and flattened
    # back: bound inference must see t itself, or a tile of 30 rows needs all 198 (issue: a
    # MatMul with a constant B compiled for minutes, in time proportional to its batch)
    t = Var("t")
    joined = floordiv(t, 66) * 66 + floormod(floordiv(t, 33), 2) * 33 + floormod(t, 33)
    assert Analyzer().simplify(joined) == t
    assert Analyzer().simplify(floormod(t, 33) + floormod(floordiv(t, 33), 2) * 33) == floormod(
        t, 66
    )
