from tessera import tir
from tessera.ir import assert_structural_equal
from tessera.tir.interpreter import assert_same_results
from tessera.tir.transform import remove_no_op

S = tir.ForKind.SERIAL


def _f(body, *params):
    return tir.PrimFunc("f", params, body)


def test_removes_each_kind_of_no_op():
    A = tir.decl_buffer((4,), "float32", "A")
    B = tir.decl_buffer((4,), "float32", "B")
    C = tir.decl_buffer((4,), "float32", "C")
    T = tir.decl_buffer((16,), "float32", "T")
    i, j, x = tir.Var("i"), tir.Var("j"), tir.Var("x")
    keep = tir.BufferStore(C, tir.const(1.0), (0,))
    body = tir.seq(
        tir.For(i, 0, 4, S, tir.Evaluate(tir.const(0))),
        tir.For(j, 0, 0, S, tir.BufferStore(B, tir.const(2.0), (j,))),
        tir.IfThenElse(tir.const(True), tir.BufferStore(A, A[0], (0,)), keep),
        tir.LetStmt(x, tir.const(3), tir.Evaluate(tir.const(1))),
        tir.Allocate(T, keep),
        tir.IfThenElse(tir.const(False), keep),
    )
    g = remove_no_op(_f(body, A, B, C))
    assert_structural_equal(g.body, keep)


def test_keeps_real_work_and_returns_same_object():
    A = tir.decl_buffer((4,), "float32", "A")
    i = tir.Var("i")
    f = _f(tir.For(i, 0, 4, S, tir.BufferStore(A, A[i] + 1.0, (i,))), A)
    assert remove_no_op(f) is f


def test_constant_condition_keeps_taken_branch_and_empty_then_inverts():
    A = tir.decl_buffer((4,), "float32", "A")
    i = tir.Var("i")
    work = tir.BufferStore(A, A[i] * 2.0, (i,))
    cond = i < 2
    f = _f(tir.For(i, 0, 4, S, tir.IfThenElse(cond, tir.Evaluate(tir.const(0)), work)), A)
    g = remove_no_op(f)
    assert_structural_equal(g.body, tir.For(i, 0, 4, S, tir.IfThenElse(tir.Not(cond), work)))
    assert_same_results(f, g)
    h = remove_no_op(_f(tir.IfThenElse(tir.const(False), work, tir.Evaluate(tir.const(0))), A))
    assert_structural_equal(h.body, tir.Evaluate(tir.const(0)))


def test_used_allocate_and_let_stay():
    A = tir.decl_buffer((4,), "float32", "A")
    T = tir.decl_buffer((1,), "float32", "T", scope="local")
    x = tir.Var("x", "float32")
    body = tir.Allocate(
        T,
        tir.seq(tir.BufferStore(T, A[1], (0,)), tir.LetStmt(x, T[0], tir.BufferStore(A, x, (0,)))),
    )
    f = _f(body, A)
    assert remove_no_op(f) is f
