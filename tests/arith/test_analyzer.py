"""The Analyzer API: binding, proving, bounds, sets, and errors users can hit."""

import math

import pytest

from tessera.arith import Analyzer, IntSet, simplify
from tessera.ir import structural_equal
from tessera.tir import IntImm, Range, Var, floordiv, floormod
from tessera.tir import min as tmin

i, j, n, x = Var("i"), Var("j"), Var("n"), Var("x")


def test_bind_forms():
    an = Analyzer()
    an.bind(i, Range.from_min_extent(2, 4))  # [2, 6)
    an.bind(j, (3, 7))  # [3, 7), like range(3, 7)
    an.bind(n, IntSet.interval(1, 5))  # inclusive
    an.bind(x, 9)
    assert an.const_int_bound(i) == (2, 5)
    assert an.const_int_bound(j) == (3, 6)
    assert an.const_int_bound(n) == (1, 5)
    assert an.const_int_bound(x) == (9, 9)
    assert an.simplify(x * 2).value == 18


def test_rebinding_replaces_and_unbind_forgets():
    an = Analyzer()
    an.bind(i, (0, 4))
    assert an.can_prove(i < 4)
    an.bind(i, (0, 8))
    assert not an.can_prove(i < 4)
    an.unbind(i)
    assert an.const_int_bound(i) == (-math.inf, math.inf)


def test_copy_is_independent():
    an = Analyzer()
    an.bind(i, (0, 4))
    other = an.copy()
    other.bind(i, (0, 100))
    assert an.can_prove(i < 4) and not other.can_prove(i < 4)


def test_can_prove():
    an = Analyzer()
    an.bind(i, Range.from_min_extent(0, 16))
    an.bind(j, Range.from_min_extent(0, 4))
    assert an.can_prove(i * 4 + j < 64)
    assert an.can_prove(i * 4 + j >= 0)
    assert not an.can_prove(i * 4 + j < 63)
    assert an.can_prove((i < 16) & (j < 4))
    assert not an.can_prove(n < 4)  # unknown is not provable
    assert an.can_prove(floordiv(i, 4) * 4 + floormod(i, 4) == i)


def test_can_prove_equal():
    an = Analyzer()
    assert an.can_prove_equal((n + 15) - 15, n)
    assert an.can_prove_equal(floordiv(n, 4) * 4 + floormod(n, 4), n)
    assert not an.can_prove_equal(n, n + 1)
    assert an.can_prove_equal(i * 2 + 3, IntImm(3) + i + i)


def test_symbolic_ranges_chain():
    an = Analyzer()
    an.bind(n, Range.from_min_extent(1, 64))
    an.bind(i, Range.from_min_extent(0, n))
    assert an.can_prove(i < 64)
    assert an.can_prove(i <= n - 1) and an.can_prove(i < n)
    assert not an.can_prove(i < n - 1)
    assert structural_equal(an.simplify(tmin(i, n - 1)), i, map_free_vars=False)
    assert an.const_int_bound(n - i) == (-62, 64)


def test_module_simplify_with_bounds():
    out = simplify(floordiv(i * 8 + j, 8), {i: (0, 4), j: (0, 8)})
    assert out is i or structural_equal(out, i, map_free_vars=False)


def test_modular_set_uses_bound_values():
    an = Analyzer()
    an.bind(x, n * 4)
    assert an.modular_set(x + 2) == (4, 2)


@pytest.mark.parametrize(
    "var, value, error",
    [
        ("i", (0, 4), TypeError),
        (i, (0, 1, 2), ValueError),
        (i, "zero", TypeError),
        (i, [0, 4], TypeError),
    ],
)
def test_bind_errors_name_the_problem(var, value, error):
    with pytest.raises(error):
        Analyzer().bind(var, value)


def test_simplify_accepts_python_ints():
    assert Analyzer().simplify(3).value == 3
