"""The lowering pieces under kernels with symbolic extents: the analyzer's facts about
symbolic divisors and split ends, clamp_tails, te.SizeDispatch, and the widened index ramps."""

import numpy as np
import pytest

import tessera
from tessera import te, tir
from tessera.arith import Analyzer
from tessera.ir.module import IRModule
from tessera.tir.expr import IntImm, Range, Var

HOST = tessera.Target("llvm")


def _analyzer(n, **vars_):
    an = Analyzer()
    an.bind(n, Range.from_min_extent(IntImm(1, n.dtype), IntImm(2**31 - 2, n.dtype)))
    for v, r in vars_.values():
        an.bind(v, r)
    return an


def test_symbolic_divisor_and_split_end_facts():
    n, f, io, i = Var("n"), Var("f"), Var("io"), Var("i")
    zero = IntImm(0, n.dtype)
    an = _analyzer(n, f=(f, Range(zero, n * 12)))
    assert an.can_prove(f // n < 12) and an.can_prove(f % n < n)
    assert an.can_prove(f // n >= 0) and not an.can_prove(f // n < 11)
    assert an.can_prove(tir.const(1) <= f // n) is False  # f may be below n
    assert Analyzer().can_prove((n // 6) * 6 <= n)
    an = _analyzer(n, io=(io, Range(zero, n // 6)), i=(i, Range(zero, IntImm(6, n.dtype))))
    assert an.can_prove(io * 6 + i < n)  # the main part of a split of n by 6
    assert an.simplify(tir.min(io * 6 + i, n - 1)).same_as(an.simplify(io * 6 + i))
    # the fuse identity with a symbolic divisor
    assert Analyzer().simplify((f // n) * n + f % n).same_as(f)


def test_clamped_vector_index_and_widened_ramp_simplify():
    n, j = Var("n"), Var("j")
    an = _analyzer(n, j=(j, Range(IntImm(0, n.dtype), n // 16)))
    ramp = tir.Ramp(j * 16, IntImm(1, n.dtype), 16)
    clamped = tir.Min(ramp, tir.Broadcast(n - 1, 16))
    assert isinstance(an.simplify(clamped), tir.Ramp)
    wide = an.simplify(tir.Cast(tir.DType.parse("int64x16"), ramp))
    assert isinstance(wide, tir.Ramp) and wide.dtype == tir.DType.parse("int64x16")


def test_clamp_tails_is_refused_on_an_output():
    n = te.var("n")
    x = te.placeholder((n,), name="x")
    y = te.compute((n,), lambda i: x[i] + 1.0, name="y")
    s = te.create_schedule(y.op)
    with pytest.raises(ValueError, match="output"):
        s[y].clamp_tails()


def test_clamp_tails_computes_the_tail_tile_whole_and_stays_in_bounds():
    """A tile-sized stage past the end of x reads x clamped; only the output's stores are
    guarded, and every size gives numpy's answer (no read past x: n = 1 included)."""
    n = te.var("n")
    x = te.placeholder((n,), name="x")
    t = te.compute((n,), lambda i: x[i] * 2.0, name="t")
    y = te.compute((n,), lambda i: t[i] + 1.0, name="y")
    s = te.create_schedule(y.op)
    yo, _ = s[y].split(y.op.axis[0], factor=8)
    s[t].compute_at(s[y], yo)
    s[t].set_scope("local")
    s[t].clamp_tails()
    assert "clamp_tails(t)" in str(s)
    func = te.lower(s, [x, y], name="f")
    text = str(func)
    assert "min(" in text  # the clamped read of x
    f = tessera.build(IRModule({"f": func}), target=HOST)["f"]
    for size in (1, 7, 8, 19):
        a = np.arange(size, dtype="float32")
        out = np.empty(size, "float32")
        f(a, out)
        np.testing.assert_array_equal(out, a * 2 + 1)


def test_size_dispatch_lowers_to_one_kernel():
    n = te.var("n")
    x = te.placeholder((n, 16), name="x")
    y = te.compute(x.shape, lambda i, j: x[i, j] * 3.0, name="y")
    small, big = te.create_schedule(y.op), te.create_schedule(y.op)
    big[y].parallel(y.op.axis[0])
    big[y].vectorize(y.op.axis[1])
    d = te.SizeDispatch(n, [(4, small)], big)
    func = te.lower(d, [x, y], name="f")
    assert isinstance(func.body, tir.IfThenElse)
    f = tessera.build(IRModule({"f": func}), target=HOST)["f"]
    for size in (1, 3, 4, 9):
        a = np.random.default_rng(size).standard_normal((size, 16)).astype("float32")
        out = np.empty_like(a)
        f(a, out)
        np.testing.assert_allclose(out, a * 3)
    with pytest.raises(ValueError, match="ascend"):
        te.SizeDispatch(n, [(8, small), (4, small)], big)
