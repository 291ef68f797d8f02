"""Simplifier: results on index patterns, float safety, randomized equivalence checks."""

import itertools
import random

import pytest

from tessera.arith import Analyzer, simplify
from tessera.ir import structural_equal
from tessera.tir import (
    Broadcast,
    Call,
    Cast,
    FloatImm,
    IntImm,
    Ramp,
    Range,
    Var,
    const,
    floordiv,
    floormod,
    if_then_else,
    max,
    min,
    select,
    truncdiv,
    truncmod,
)

x, y, z, n = Var("x"), Var("y"), Var("z"), Var("n")
i, j, k = Var("i"), Var("j"), Var("k")


def rng16(v):
    return {v: Range.from_min_extent(0, 16)}


def same(a, b):
    return structural_equal(a, b, map_free_vars=False)


@pytest.mark.parametrize(
    "before, expected, bounds",
    [
        ((i * 16 + j) - i * 16, j, {}),
        (x * 4 + x * 2, x * 6, {}),
        ((n + 15) - 15, n, {}),
        ((x + 1) * 4 - 4, x * 4, {}),
        (x - x, const(0), {}),
        (x * 0 + y, y, {}),
        (floordiv(i * 16 + j, 16), i, {**rng16(i), **rng16(j)}),
        (floormod(i * 16 + j, 16), j, {**rng16(i), **rng16(j)}),
        (floordiv(i, 16) * 16 + floormod(i, 16), i, {}),
        (floormod(i, 16) + floordiv(i, 16) * 16 + 1, i + 1, {}),
        (floordiv(floordiv(x, 4), 8), floordiv(x, 32), {}),
        (floormod(floormod(x, 16), 4), floormod(x, 4), {}),
        (floordiv(x * 8 + y, 4), x * 2 + floordiv(y, 4), {}),
        (floormod(x * 8 + y, 4), floormod(y, 4), {}),
        (floordiv(x, 1), x, {}),
        (floormod(x, 1), const(0), {}),
        (floordiv(j + 16, 16), const(1), rng16(j)),
        (floormod(j + 16, 16), j, rng16(j)),
        (min(x, x + 1), x, {}),
        (max(x, x - 3), x, {}),
        (min(i, 16), i, rng16(i)),
        (max(i, 0), i, rng16(i)),
        (min(x + 2, y + 2), min(x, y) + 2, {}),
        (max(min(x, y), x), x, {}),
        (i < 16, const(True), rng16(i)),
        (i >= 0, const(True), rng16(i)),
        (i > 15, const(False), rng16(i)),
        (i + 1 < 5, i < 4, {}),
        (x + 1 < y + 1, x < y, {}),
        (x * 2 == 1, const(False), {}),
        (x * 2 != x * 2, const(False), {}),
        (floordiv(x, 4) < 3, x < 12, {}),
        (truncdiv(i, 4), floordiv(i, 4), rng16(i)),
        (truncmod(i + 16, 16), i, rng16(i)),
    ],
)
def test_simplifies_to(before, expected, bounds):
    assert same(simplify(before, bounds), expected), f"{before} -> {simplify(before, bounds)}"


def test_boolean_algebra():
    c = Var("c", "bool")
    t, f = const(True), const(False)
    assert same(simplify(c & t), c)
    assert same(simplify(c & f), f)
    assert same(simplify(c | ~c), t)
    assert same(simplify(~~c), c)
    assert same(simplify(~(x < y)), y <= x)
    assert same(simplify((x < y) & (y < x)), f)
    assert same(simplify(select(c, x, x)), x)
    assert same(simplify(select(x < x, y, z)), z)
    assert same(simplify(if_then_else(t, x, y)), x)


def test_floats_are_only_folded():
    a = Var("a", "float32")
    assert same(simplify(FloatImm(1.5) + FloatImm(2.25)), FloatImm(3.75))
    # reassociation changes rounding, and x*0 is not 0 for inf/nan: left alone
    e = (a + FloatImm(1.0)) - FloatImm(1.0)
    assert same(simplify(e), e)
    assert same(simplify(a * FloatImm(0.0)), a * FloatImm(0.0))
    # float32 folding rounds to float32
    folded = simplify(FloatImm(0.1) + FloatImm(0.2))
    import numpy as np

    assert folded.value == float(np.float32(0.1) + np.float32(0.2))


def test_vector_parts_and_ramp_broadcast():
    r = Ramp(x * 4 - x * 4, IntImm(1), 4) + Broadcast(y, 4)
    assert same(simplify(r), Ramp(y, IntImm(1), 4))
    assert same(simplify(Ramp(x, IntImm(0), 4)), Broadcast(x, 4))


def test_opaque_nodes_keep_their_children_simplified():
    e = Call("int32", "popcount", (x + 0,))
    assert same(simplify(e), Call("int32", "popcount", (x,)))


def test_float_min_max_fold_propagates_nan_like_the_generated_code():
    nan = float("nan")
    for a, b in ((nan, 1.0), (1.0, nan)):
        for op in (min, max):
            folded = simplify(op(FloatImm(a), FloatImm(b)))
            assert isinstance(folded, FloatImm) and folded.value != folded.value, (op, a, b)
    assert simplify(max(FloatImm(1.0), FloatImm(2.0))).value == 2.0


def test_int_constant_folding_wraps_like_the_machine():
    big = IntImm(2**31 - 1)
    assert simplify(Cast("int8", IntImm(200))).value == -56
    assert simplify(big + IntImm(1) - IntImm(0)).value in (2**31, -(2**31))


def test_bound_values_are_substituted():
    an = Analyzer()
    an.bind(x, y * 2)
    assert same(an.simplify(x - y * 2), const(0))


def test_simplify_returns_same_object_when_nothing_changes():
    e = x * y + z
    assert simplify(e) is e or same(simplify(e), e)


# ---------------------------------------------------------------------------------------------
# randomized: simplify(e) evaluates like e for every value of the vars in their ranges

BOUNDS = {x: (-8, 8), y: (0, 16), z: (0, 4)}


def _leaf(r, names):
    if r.random() < 0.6:
        return r.choice(names)
    return IntImm(r.randint(-9, 9))


def _divisor(r):
    return r.choice([-7, -4, -3, -2, -1, 1, 2, 3, 4, 5, 8, 16])


def random_int(r, names, depth):
    if depth == 0 or r.random() < 0.15:
        return _leaf(r, names)
    a = random_int(r, names, depth - 1)
    b = random_int(r, names, depth - 1)
    op = r.choice(["+", "+", "-", "-", "*c", "*", "//", "%", "div", "mod", "min", "max", "sel"])
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*c":
        return a * r.randint(-5, 8)
    if op == "*":
        return a * (b if depth <= 2 else _leaf(r, names))
    if op == "//":
        return floordiv(a, _divisor(r))
    if op == "%":
        return floormod(a, _divisor(r))
    if op == "div":
        return truncdiv(a, _divisor(r))
    if op == "mod":
        return truncmod(a, _divisor(r))
    if op == "min":
        return min(a, b)
    if op == "max":
        return max(a, b)
    return select(random_bool(r, names, 1), a, b)


def random_index(r, names, depth):
    """Index-like: affine combinations, division and modulo by positive constants, min/max."""
    if depth == 0 or r.random() < 0.1:
        return _leaf(r, names)
    a = random_index(r, names, depth - 1)
    op = r.choice(["+", "-", "*c", "*c", "//", "//", "%", "%", "min", "max"])
    if op in ("+", "-", "min", "max"):
        b = random_index(r, names, depth - 1)
        make = {"+": lambda: a + b, "-": lambda: a - b, "min": lambda: min(a, b)}
        return make.get(op, lambda: max(a, b))()
    if op == "*c":
        return a * r.choice([-3, -1, 2, 3, 4, 6, 8, 16])
    c = r.choice([1, 2, 3, 4, 6, 8, 16])
    return floordiv(a, c) if op == "//" else floormod(a, c)


def random_bool(r, names, depth):
    a, b = random_int(r, names, depth), random_int(r, names, depth)
    cmp = r.choice(["<", "<=", ">", ">=", "==", "!="])
    out = {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}.get(cmp)
    if out is None:
        out = (a == b) if cmp == "==" else (a != b)
    roll = r.random()
    if depth > 0 and roll < 0.25:
        return out & random_bool(r, names, depth - 1)
    if depth > 0 and roll < 0.5:
        return out | random_bool(r, names, depth - 1)
    if roll < 0.6:
        return ~out
    return out


def _points(r, bounds, count):
    axes = [range(lo, hi) for lo, hi in bounds.values()]
    corners = list(itertools.product(*[(a[0], a[-1]) for a in axes]))
    rand = [tuple(r.choice(a) for a in axes) for _ in range(count)]
    return [dict(zip(bounds, p, strict=True)) for p in corners + rand]


def _check_equivalent(evaluate, make, seed, count, use_bounds):
    r = random.Random(seed)
    names = list(BOUNDS)
    for trial in range(count):
        e = make(r, names, r.randint(1, 4))
        got = simplify(e, BOUNDS if use_bounds else None)
        pts = _points(r, BOUNDS, 24)
        for env in pts:
            want = evaluate(e, env)
            have = evaluate(got, env)
            assert want == have, f"trial {trial}: {e}  ->  {got}  at {env}: {want} != {have}"


@pytest.mark.parametrize("use_bounds", [True, False])
def test_random_int_expressions_keep_their_value(use_bounds, evaluate_fn):
    _check_equivalent(evaluate_fn, random_int, 1234 + use_bounds, 400, use_bounds)


@pytest.mark.parametrize("use_bounds", [True, False])
def test_random_index_expressions_keep_their_value(use_bounds, evaluate_fn):
    _check_equivalent(evaluate_fn, random_index, 7 + use_bounds, 600, use_bounds)


@pytest.mark.parametrize("use_bounds", [True, False])
def test_random_bool_expressions_keep_their_value(use_bounds, evaluate_fn):
    _check_equivalent(evaluate_fn, random_bool, 99 + use_bounds, 300, use_bounds)


def test_float_comparisons_are_not_negated_because_of_nan():
    a, b = Var("a", "float32"), Var("b", "float32")
    e = ~(a < b)
    assert same(simplify(e), e)
    e = (a < b) | (b <= a)
    assert same(simplify(e), e)
    assert same(simplify(~(x < y)), y <= x)


def test_unsigned_arithmetic_is_only_folded():
    u = Var("u", "uint32")
    e = IntImm(0, "uint32") - u
    assert same(simplify(e), e)
    assert simplify(IntImm(0, "uint32") - IntImm(1, "uint32")).value == 2**32 - 1
