"""Divisibility: modular_set (coeff, base), checked on examples and by brute force."""

import random

import pytest

from tessera.arith import Analyzer
from tessera.tir import IntImm, Ramp, Var, floordiv, floormod, max, select, truncdiv

x, y = Var("x"), Var("y")


@pytest.mark.parametrize(
    "e, expected",
    [
        (x * 8 + 4, (8, 4)),
        (x * 6 + y * 4 + 1, (2, 1)),
        (floordiv(x * 8, 2), (4, 0)),
        (floordiv(x * 8 + 5, 4), (2, 1)),
        (floormod(x * 6 + 3, 4), (2, 1)),
        (x * 4 - 6, (4, 2)),
        ((x * 2 + 1) * (y * 2 + 1), (2, 1)),
        (max(x * 4, y * 4 + 8), (4, 0)),
        (select(x < y, x * 6, y * 6 + 3), (3, 0)),
        (IntImm(7), (0, 7)),
        (x, (1, 0)),
        (Ramp(x * 8, IntImm(2), 4), (2, 0)),
    ],
)
def test_modular_set(e, expected):
    assert Analyzer().modular_set(e) == expected


def test_truncdiv_uses_floor_rule_only_when_nonnegative():
    an = Analyzer()
    assert an.modular_set(truncdiv(x * 8, 4)) == (1, 0)
    an.bind(x, (0, 100))
    assert an.modular_set(truncdiv(x * 8, 4)) == (2, 0)


def test_modular_sets_hold_for_random_values(evaluate_fn):
    r = random.Random(3)
    for _ in range(200):
        a, b = r.randint(-6, 6), r.randint(-5, 5)
        c, d = r.choice([1, 2, 3, 4, 8]), r.randint(-3, 3)
        pick = r.randrange(4)
        if pick == 0:
            e = (x * a + b) * c + y * 6
        elif pick == 1:
            e = floordiv(x * (c * 4) + b, c)
        elif pick == 2:
            e = floormod(x * a + b, c) + d
        else:
            e = max(x * a + b, y * (a * 2) + b)
        coeff, base = Analyzer().modular_set(e)
        for vx in range(-5, 6):
            for vy in range(-3, 4):
                v = evaluate_fn(e, {x: vx, y: vy})
                assert (v == base) if coeff == 0 else (v - base) % coeff == 0, (e, coeff, base)
