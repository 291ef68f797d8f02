"""IntSet and int_set: split/fuse index patterns, halos, symbolic ends, soundness by brute force."""

import itertools
import random

import pytest

from tessera.arith import Analyzer, IntSet
from tessera.ir import structural_equal
from tessera.tir import IntImm, Ramp, Range, Var, floordiv, floormod, select, truncmod
from tessera.tir import max as tmax
from tessera.tir import min as tmin

i, j, y, dy, n, f = (Var(s) for s in ("i", "j", "y", "dy", "n", "f"))


def R(lo, extent):
    return Range.from_min_extent(lo, extent)


def ends(s):
    return (s.min_value, s.max_value)


def same(a, b):
    return structural_equal(a, b, map_free_vars=False)


def test_constructors():
    s = IntSet.from_range(R(2, 5))
    assert (s.min_value.value, s.max_value.value) == (2, 6)
    assert IntSet.single_point(i).is_single_point()
    assert not IntSet.interval(0, 3).is_single_point()
    r = IntSet.interval(i, i + 3).to_range()
    assert same(r.min, i) and r.extent.value == 4
    with pytest.raises(ValueError, match="unbounded"):
        IntSet(None, IntImm(3)).to_range()
    with pytest.raises(TypeError, match="Range"):
        IntSet.from_range((0, 4))


def test_union_and_intersect_simplify_symbolic_ends():
    u = IntSet.interval(y, y + 2).union(IntSet.interval(y + 1, y + 5))
    assert same(u.min_value, y) and same(u.max_value, y + 5)
    v = IntSet.interval(y, y + 2).intersect(IntSet.interval(y + 1, y + 5))
    assert same(v.min_value, y + 1) and same(v.max_value, y + 2)
    assert IntSet.interval(0, 3).union(IntSet(None, IntImm(1))).min_value is None


def test_split_index_pattern():
    s = Analyzer().int_set(i * 16 + j, {i: R(0, 4), j: R(0, 16)})
    assert (s.min_value.value, s.max_value.value) == (0, 63)
    s = Analyzer().int_set(i * 16 + j, {j: R(0, 16)})  # i a symbol: one row
    assert same(s.min_value, i * 16) and same(s.max_value, i * 16 + 15)


def test_fuse_index_pattern():
    an = Analyzer()
    s = an.int_set(floordiv(f, 16), {f: R(0, 64)})
    assert (s.min_value.value, s.max_value.value) == (0, 3)
    s = an.int_set(floormod(f, 16), {f: R(0, 64)})
    assert (s.min_value.value, s.max_value.value) == (0, 15)
    s = an.int_set(floormod(f, 16), {f: R(16, 8)})  # inside one period: exact
    assert (s.min_value.value, s.max_value.value) == (0, 7)
    s = an.int_set(floordiv(i * 16 + j, 16), {i: R(0, 4), j: R(0, 16)})
    assert (s.min_value.value, s.max_value.value) == (0, 3)


def test_halo_with_symbolic_base():
    s = Analyzer().int_set(y + dy, {dy: IntSet.interval(0, 2)})
    assert same(s.min_value, y) and same(s.max_value, y + 2)
    s = Analyzer().int_set(y * 2 + dy - 1, {dy: R(0, 3)})
    assert same(s.min_value, y * 2 - 1) and same(s.max_value, y * 2 + 1)
    # a tile of 8 outputs of a 3-tap stencil reads 10 inputs
    s = Analyzer().int_set(y * 8 + i + dy, {i: R(0, 8), dy: R(0, 3)})
    assert same(s.to_range().extent, IntImm(10))


def test_symbolic_domain_and_negative_coefficients():
    s = Analyzer().int_set(n - 1 - i, {i: R(0, n)})
    assert s.min_value.value == 0 and same(s.max_value, n - 1)
    s = Analyzer().int_set(tmin(i, n), {i: R(0, 8)})
    assert same(s.min_value, tmin(n, 0)) and same(s.max_value, tmin(n, 7))


def test_relax_bound_vars():
    an = Analyzer()
    an.bind(y, R(0, 4))
    s = an.int_set(y + dy, {dy: R(0, 3)})
    assert same(s.min_value, y)
    s = an.int_set(y + dy, {dy: R(0, 3)}, relax_bound_vars=True)
    assert (s.min_value.value, s.max_value.value) == (0, 5)


def test_ramp_and_opaque():
    s = Analyzer().int_set(Ramp(i * 4, IntImm(1), 4), {i: R(0, 2)})
    assert (s.min_value.value, s.max_value.value) == (0, 7)
    s = Analyzer().int_set(y * 3, {})
    assert s.is_single_point()


def test_dom_map_must_be_keyed_by_var():
    with pytest.raises(TypeError, match="tir.Var"):
        Analyzer().int_set(i, {"i": R(0, 4)})


def _random_index(r, depth):
    if depth == 0:
        return r.choice([i, j, IntImm(r.randint(-3, 5))])
    a, b = _random_index(r, depth - 1), _random_index(r, depth - 1)
    return r.choice(
        [
            lambda: a + b,
            lambda: a - b,
            lambda: a * r.choice([-2, 3, 4]),
            lambda: floordiv(a, r.choice([2, 3, 4])),
            lambda: floormod(a, r.choice([2, 5])),
            lambda: truncmod(a, 3),
            lambda: tmin(a, b),
            lambda: tmax(a, b),
            lambda: select(a < b, a, b),
        ]
    )()


def test_random_sets_contain_every_value(evaluate_fn):
    r = random.Random(11)
    dom = {i: R(-3, 7), j: R(0, 6)}
    for _ in range(250):
        e = _random_index(r, r.randint(1, 3))
        s = Analyzer().int_set(e, dom)
        lo = -(10**9) if s.min_value is None else s.min_value.value
        hi = 10**9 if s.max_value is None else s.max_value.value
        for vi, vj in itertools.product(range(-3, 4), range(0, 6)):
            v = evaluate_fn(e, {i: vi, j: vj})
            assert lo <= v <= hi, f"{e}: {v} not in {s}"


def test_pairs_are_half_open_like_bind():
    s = Analyzer().int_set(i * 2, {i: (0, 4)})
    assert (s.min_value.value, s.max_value.value) == (0, 6)
