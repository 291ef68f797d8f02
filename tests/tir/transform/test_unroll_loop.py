from tessera import tir
from tessera.ir import assert_structural_equal
from tessera.tir.interpreter import assert_same_results
from tessera.tir.stmt_functor import collect
from tessera.tir.transform import unroll_loop

S, U = tir.ForKind.SERIAL, tir.ForKind.UNROLLED


def test_constant_extent_becomes_copies():
    A = tir.decl_buffer((8,), "float32", "A")
    C = tir.decl_buffer((8,), "float32", "C")
    k = tir.Var("k")
    f = tir.PrimFunc("f", (A, C), tir.For(k, 2, 3, U, tir.BufferStore(C, A[k] + 1.0, (k,))))
    g = unroll_loop(f)
    expected = tir.seq(*(tir.BufferStore(C, A[t] + 1.0, (t,)) for t in (2, 3, 4)))
    assert_structural_equal(g.body, expected)
    assert_same_results(f, g)


def test_inner_loops_and_lets_get_fresh_vars():
    A = tir.decl_buffer((4, 5), "int32", "A")
    k, j, x = tir.Var("k"), tir.Var("j"), tir.Var("x")
    inner = tir.For(j, 0, 5, S, tir.LetStmt(x, k * 10 + j, tir.BufferStore(A, x, (k, j))))
    f = tir.PrimFunc("f", (A,), tir.For(k, 0, 4, U, inner))
    g = unroll_loop(f)
    loops = collect(g.body, lambda n: isinstance(n, tir.For))
    lets = collect(g.body, lambda n: isinstance(n, tir.LetStmt))
    assert len(loops) == 4 and len({id(lp.loop_var) for lp in loops}) == 4
    assert len({id(lt.var) for lt in lets}) == 4
    assert all(lp.kind is S for lp in loops)
    assert_same_results(f, g)


def test_nested_unrolled_and_allocate_copies():
    A = tir.decl_buffer((2, 3), "float32", "A")
    T = tir.decl_buffer((1,), "float32", "T", scope="local")
    i, j = tir.Var("i"), tir.Var("j")
    body = tir.Allocate(
        T, tir.seq(tir.BufferStore(T, A[i, j] * 3.0, (0,)), tir.BufferStore(A, T[0], (i, j)))
    )
    f = tir.PrimFunc("f", (A,), tir.For(i, 0, 2, U, tir.For(j, 0, 3, U, body)))
    g = unroll_loop(f)
    allocs = collect(g.body, lambda n: isinstance(n, tir.Allocate))
    assert len(allocs) == 6 and len({id(a.buffer) for a in allocs}) == 6
    assert not collect(g.body, lambda n: isinstance(n, tir.For))
    assert_same_results(f, g)


def test_symbolic_extent_stays_serial():
    n = tir.Var("n")
    A = tir.decl_buffer((n,), "float32", "A")
    k = tir.Var("k")
    f = tir.PrimFunc("f", (A,), tir.For(k, 0, n, U, tir.BufferStore(A, A[k] * 2.0, (k,))))
    g = unroll_loop(f)
    assert isinstance(g.body, tir.For) and g.body.kind is S and g.body.body is f.body.body
    assert_same_results(f, g, {"n": 5})


def test_nothing_to_unroll_returns_same_function():
    A = tir.decl_buffer((4,), "float32", "A")
    k = tir.Var("k")
    f = tir.PrimFunc("f", (A,), tir.For(k, 0, 4, S, tir.BufferStore(A, A[k] * 2.0, (k,))))
    assert unroll_loop(f) is f


def test_auto_unroll_pragma():
    A = tir.decl_buffer((16, 4), "float32", "A")
    i, j = tir.Var("i"), tir.Var("j")
    inner = tir.For(j, 0, 4, S, tir.BufferStore(A, A[i, j] + 1.0, (i, j)))
    outer = tir.For(i, 0, 16, S, inner, annotations=(("pragma_auto_unroll_max_step", 8),))
    g = unroll_loop(tir.PrimFunc("f", (A,), outer))
    # the inner loop (4 steps) unrolls; the outer one (64 steps) stays a loop
    assert isinstance(g.body, tir.For) and isinstance(g.body.body, tir.SeqStmt)
    assert len(g.body.body.seq) == 4
    assert_same_results(tir.PrimFunc("f", (A,), outer), g)


def test_unrolled_select_lookup_keeps_only_the_taken_option():
    # select(k == 0, a, select(k == 1, b, c)) per copy: one option each, no Select left
    A = tir.decl_buffer((3,), "float32", "A")
    C = tir.decl_buffer((3,), "float32", "C")
    k = tir.Var("k")
    options = [A[0] * 2.0, A[1] + A[2], A[2] - 1.0]
    lookup = tir.Select(k == 0, options[0], tir.Select(k == 1, options[1], options[2]))
    f = tir.PrimFunc("f", (A, C), tir.For(k, 0, 3, U, tir.BufferStore(C, lookup, (k,))))
    g = unroll_loop(f)
    assert not collect(g.body, lambda n: isinstance(n, tir.Select))
    expected = tir.seq(*(tir.BufferStore(C, options[t], (t,)) for t in range(3)))
    assert_structural_equal(g.body, expected)
    assert_same_results(f, g)
