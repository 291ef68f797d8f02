from tessera import tir
from tessera.ir import assert_structural_equal
from tessera.tir.interpreter import assert_same_results
from tessera.tir.transform import simplify

S = tir.ForKind.SERIAL


def test_bound_loop_var_removes_guard_and_folds_index():
    A = tir.decl_buffer((64,), "float32", "A")
    i, j = tir.Var("i"), tir.Var("j")
    index = (i * 4 + j * 4) - i * 4 + (j + i)
    guarded = tir.IfThenElse(tir.likely(i < 16), tir.BufferStore(A, tir.const(1.0), (index,)))
    f = tir.PrimFunc("f", (A,), tir.For(i, 0, 16, S, tir.For(j, 0, 1, S, guarded)))
    g = simplify(f)
    assert_structural_equal(g.body, tir.For(i, 0, 16, S, tir.BufferStore(A, tir.const(1.0), (i,))))
    assert_same_results(f, g)


def test_extent_zero_dropped_and_false_guard_takes_else():
    A = tir.decl_buffer((8,), "float32", "A")
    i, k = tir.Var("i"), tir.Var("k")
    other = tir.BufferStore(A, tir.const(2.0), (i,))
    body = tir.seq(
        tir.For(k, 0, 0, S, tir.BufferStore(A, tir.const(5.0), (k,))),
        tir.IfThenElse(i >= 8, tir.BufferStore(A, tir.const(3.0), (0,)), other),
    )
    f = tir.PrimFunc("f", (A,), tir.For(i, 0, 8, S, body))
    g = simplify(f)
    assert_structural_equal(g.body.body.seq[1], other)
    assert_same_results(f, g)


def test_unprovable_guard_stays_and_nothing_changes():
    n = tir.Var("n")
    A = tir.decl_buffer((n,), "float32", "A")
    i = tir.Var("i")
    f = tir.PrimFunc(
        "f",
        (A,),
        tir.For(i, 0, 16, S, tir.IfThenElse(tir.likely(i < n), tir.BufferStore(A, A[i], (i,)))),
    )
    assert simplify(f) is f


def test_shape_vars_are_non_negative():
    n = tir.Var("n")
    A = tir.decl_buffer((n,), "float32", "A")
    i = tir.Var("i")
    store = tir.BufferStore(A, tir.const(0.0), (i,))
    f = tir.PrimFunc("f", (A,), tir.For(i, 0, tir.max(n, 0), S, store))
    assert_structural_equal(simplify(f).body, tir.For(i, 0, n, S, store))


def test_let_value_bounds_are_known():
    A = tir.decl_buffer((8,), "int32", "A")
    i, t = tir.Var("i"), tir.Var("t")
    inner = tir.IfThenElse(t < 8, tir.BufferStore(A, t, (i,)))
    f = tir.PrimFunc("f", (A,), tir.For(i, 0, 8, S, tir.LetStmt(t, i % 8, inner)))
    g = simplify(f)
    assert isinstance(g.body.body.body, tir.BufferStore)
    assert_same_results(f, g)
