"""Constant bounds: floor vs truncating semantics, interval soundness and tightness, expressions."""

import itertools
import math
import random

import pytest

from tessera.arith import Analyzer
from tessera.arith import bound as B
from tessera.tir import (
    Cast,
    IntImm,
    Ramp,
    Range,
    Var,
    floordiv,
    floormod,
    select,
    truncdiv,
    truncmod,
)
from tessera.tir import max as tmax
from tessera.tir import min as tmin

x, y = Var("x"), Var("y")


def test_division_helpers_match_python_and_c():
    r = random.Random(0)
    values = [r.randint(-1000, 1000) for _ in range(300)] + [2**70 + 3, -(2**70) - 5, 0, 1, -1]
    for a in values:
        for b in [r.choice([-1, 1]) * r.randint(1, 50) for _ in range(5)] + [7, -7]:
            assert B.floordiv_int(a, b) == a // b
            if abs(a) < 2**50:
                assert B.truncdiv_int(a, b) == math.trunc(a / b)
                assert B.truncmod_int(a, b) == a - b * math.trunc(a / b)
            assert B.truncmod_int(a, b) == math.copysign(1, a) * (abs(a) % abs(b)) or a % b == 0


def _values(iv):
    return range(iv[0], iv[1] + 1)


INTERVALS = [(-7, -3), (-5, 4), (0, 0), (0, 9), (3, 12), (-9, -9), (-12, 12)]
DIVISORS = [(1, 1), (3, 3), (8, 8), (-4, -4), (2, 5), (-6, -1)]


@pytest.mark.parametrize("a", INTERVALS)
def test_interval_arithmetic_is_sound(a):
    ops = {
        "add": (B.add, lambda p, q: p + q, INTERVALS),
        "sub": (B.sub, lambda p, q: p - q, INTERVALS),
        "mul": (B.mul, lambda p, q: p * q, INTERVALS),
        "floordiv": (lambda s, t: B.div(s, t, trunc=False), lambda p, q: p // q, DIVISORS),
        "truncdiv": (lambda s, t: B.div(s, t, trunc=True), B.truncdiv_int, DIVISORS),
        "floormod": (B.floormod, lambda p, q: p % q, DIVISORS),
        "truncmod": (B.truncmod, B.truncmod_int, DIVISORS),
    }
    for name, (interval_fn, scalar_fn, others) in ops.items():
        for b in others:
            lo, hi = interval_fn(a, b)
            got = [scalar_fn(p, q) for p in _values(a) for q in _values(b)]
            assert lo <= min(got) and max(got) <= hi, (name, a, b, (lo, hi), (min(got), max(got)))
            if b[0] == b[1] and name in ("add", "sub", "floordiv", "truncdiv"):
                assert (lo, hi) == (min(got), max(got)), (name, a, b)  # exact for a constant


def test_floormod_is_exact_inside_one_period():
    assert B.floormod((17, 20), (8, 8)) == (1, 4)
    assert B.floormod((-3, -1), (8, 8)) == (5, 7)
    assert B.floormod((6, 9), (8, 8)) == (0, 7)
    assert B.floormod((0, 5), (3, 8)) == (0, 5)


def test_bounds_of_expressions():
    an = Analyzer()
    an.bind(x, Range.from_min_extent(0, 16))
    an.bind(y, (-4, 4))
    assert an.const_int_bound(x * 4 + 3) == (3, 63)
    assert an.const_int_bound(floormod(Var("z"), 8)) == (0, 7)
    assert an.const_int_bound(floordiv(y, 5)) == (-1, 0)  # floor: -4 // 5 == -1
    assert an.const_int_bound(truncdiv(y, 5)) == (0, 0)  # truncation: -4 / 5 -> 0
    assert an.const_int_bound(truncmod(y, 3)) == (-2, 2)
    assert an.const_int_bound(tmin(x, y)) == (-4, 3)
    assert an.const_int_bound(tmax(x, y)) == (0, 15)
    assert an.const_int_bound(select(x < 2, y, x)) == (-4, 15)
    assert an.const_int_bound(Var("free")) == (-math.inf, math.inf)
    assert an.const_int_bound(Var("u", "uint8")) == (0, 255)
    assert an.const_int_bound(Cast("int8", x * 100)) == (-128, 127)
    assert an.const_int_bound(Cast("int64", x)) == (0, 15)
    assert an.const_int_bound(Ramp(x, IntImm(2), 4)) == (0, 21)
    assert an.const_int_bound(Ramp(x, IntImm(-1), 4)) == (-3, 15)
    assert an.const_int_bound(x < 16) == (1, 1)


def test_symbolic_range_bounds_use_the_bounds_of_its_ends():
    n, i = Var("n"), Var("i")
    an = Analyzer()
    an.bind(n, Range.from_min_extent(1, 8))  # n in [1, 8]
    an.bind(i, Range.from_min_extent(0, n))  # i in [0, n - 1]
    assert an.const_int_bound(i) == (0, 7)


def test_random_expression_bounds_contain_every_value(evaluate_fn):
    r = random.Random(5)
    an = Analyzer()
    an.bind(x, (-6, 7))
    an.bind(y, (0, 9))
    leaves = [x, y, IntImm(3), IntImm(-2)]

    def gen(depth):
        if depth == 0:
            return r.choice(leaves)
        a, b = gen(depth - 1), gen(depth - 1)
        d = r.choice([2, 3, -4, 5])
        return r.choice(
            [
                lambda: a + b,
                lambda: a - b,
                lambda: a * b,
                lambda: floordiv(a, d),
                lambda: floormod(a, d),
                lambda: truncdiv(a, d),
                lambda: truncmod(a, d),
                lambda: tmin(a, b),
                lambda: tmax(a, b),
                lambda: select(a < b, a, b + 1),
            ]
        )()

    for _ in range(250):
        e = gen(r.randint(1, 3))
        lo, hi = an.const_int_bound(e)
        for vx, vy in itertools.product(range(-6, 7), range(0, 9, 2)):
            v = evaluate_fn(e, {x: vx, y: vy})
            assert lo <= v <= hi, f"{e}: {v} outside ({lo}, {hi})"
