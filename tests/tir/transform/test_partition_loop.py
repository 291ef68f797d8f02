import pytest

from tessera import tir
from tessera.ir import assert_structural_equal
from tessera.tir.interpreter import assert_same_results
from tessera.tir.stmt_functor import collect
from tessera.tir.transform import partition_loop, vectorize_loop

S, V = tir.ForKind.SERIAL, tir.ForKind.VECTORIZED


def _split_copy(n, kind=S):
    A = tir.decl_buffer((n,), "float32", "A")
    B = tir.decl_buffer((n,), "float32", "B")
    io, ii = tir.Var("io"), tir.Var("ii")
    idx = io * 16 + ii
    guarded = tir.IfThenElse(tir.likely(idx < n), tir.BufferStore(B, A[idx] * 2.0, (idx,)))
    body = tir.For(io, 0, (n + 15) // 16, S, tir.For(ii, 0, 16, kind, guarded))
    return tir.PrimFunc("f", (A, B), body), (A, B, io, ii)


def test_symbolic_split_peels_tail():
    n = tir.Var("n")
    f, (A, B, io, ii) = _split_copy(n)
    g = partition_loop(f)
    idx = io * 16 + ii
    main = tir.For(
        io, 0, n // 16, S, tir.For(ii, 0, 16, S, tir.BufferStore(B, A[idx] * 2.0, (idx,)))
    )
    io1, ii1 = tir.Var("io"), tir.Var("ii")  # the tail binds fresh variables
    idx1 = io1 * 16 + ii1
    # the tail's serial inner loop runs exactly its live iterations (Note [exact serial tails])
    tail = tir.BufferStore(B, A[idx1] * 2.0, (idx1,))
    expected_tail = tir.For(
        io1, n // 16, (n + 15) // 16 - n // 16, S, tir.For(ii1, 0, n - io1 * 16, S, tail)
    )
    assert_structural_equal(g.body.seq[0], main)
    assert isinstance(g.body, tir.SeqStmt) and len(g.body.seq) == 2
    assert_structural_equal(g.body.seq[1], expected_tail)
    # no variable is bound twice
    loops = collect(g.body, lambda x: isinstance(x, tir.For))
    assert len({id(lp.loop_var) for lp in loops}) == len(loops)
    for value in (0, 1, 15, 16, 17, 50):
        assert_same_results(f, g, {"n": value})


def test_constant_split_and_vectorizable_main():
    f, _ = _split_copy(tir.const(37), kind=V)
    g = partition_loop(f)
    main, tail = g.body.seq
    assert main.extent.value == 2 and tail.min.value == 2 and tail.extent.value == 1
    assert not collect(main, lambda x: isinstance(x, tir.IfThenElse))
    h = vectorize_loop(g)
    assert collect(h.body.seq[0], lambda x: isinstance(x, tir.Ramp))
    assert_same_results(f, h)


def test_lower_bound_guard_peels_head():
    # padding: rows h < 2 are out of range
    A = tir.decl_buffer((10,), "float32", "A")
    B = tir.decl_buffer((12,), "float32", "B")
    h = tir.Var("h")
    value = tir.BufferStore(B, A[h - 2] + 1.0, (h,))
    f = tir.PrimFunc("f", (A, B), tir.For(h, 0, 12, S, tir.IfThenElse(tir.likely(h >= 2), value)))
    g = partition_loop(f)
    head, main = g.body.seq
    assert head.min.value == 0 and head.extent.value == 2
    assert main.min.value == 2 and main.extent.value == 10
    assert isinstance(main.body, tir.BufferStore)
    assert_same_results(f, g)


def test_two_dims_peel_rows_then_columns():
    H, W = 20, 13
    A = tir.decl_buffer((H, W), "float32", "A")
    yo, xo, yi, xi = (tir.Var(s) for s in ("yo", "xo", "yi", "xi"))
    y, x = yo * 8 + yi, xo * 8 + xi
    cond = tir.likely(tir.all(y < H, x < W))
    store = tir.IfThenElse(cond, tir.BufferStore(A, A[y, x] * 3.0, (y, x)))
    loops = tir.For(yi, 0, 8, S, tir.For(xi, 0, 8, S, store))
    f = tir.PrimFunc("f", (A,), tir.For(yo, 0, 3, S, tir.For(xo, 0, 2, S, loops)))
    g = partition_loop(f)
    rows_main, rows_tail = g.body.seq
    assert rows_main.extent.value == 2
    cols_main, cols_tail = rows_main.body.seq
    assert not collect(cols_main, lambda n: isinstance(n, tir.IfThenElse))
    assert collect(cols_tail, lambda n: isinstance(n, tir.IfThenElse))
    assert_same_results(f, g)


@pytest.mark.parametrize("case", ["not_likely", "let_var", "nonlinear"])
def test_leaves_other_guards_alone(case):
    A = tir.decl_buffer((40,), "float32", "A")
    i, t = tir.Var("i"), tir.Var("t")
    store = tir.BufferStore(A, A[i] + 1.0, (i,))
    if case == "not_likely":
        body = tir.IfThenElse(i < 7, store)
    elif case == "let_var":
        body = tir.LetStmt(t, i * 2, tir.IfThenElse(tir.likely(t < 7), store))
    else:
        body = tir.IfThenElse(tir.likely(i * i < 7), store)
    f = tir.PrimFunc("f", (A,), tir.For(i, 0, 40, S, body))
    assert partition_loop(f) is f


def test_guard_always_true_is_removed_without_split():
    A = tir.decl_buffer((16,), "float32", "A")
    i = tir.Var("i")
    store = tir.BufferStore(A, A[i] + 1.0, (i,))
    f = tir.PrimFunc("f", (A,), tir.For(i, 0, 16, S, tir.IfThenElse(tir.likely(i < 20), store)))
    g = partition_loop(f)
    assert_structural_equal(g.body, tir.For(i, 0, 16, S, store))


def test_one_iteration_tail_splits_inner_loop_into_constant_extents():
    A = tir.decl_buffer((40,), "float32", "A")
    jo, ji = tir.Var("jo"), tir.Var("ji")
    j = jo * 16 + ji
    store = tir.IfThenElse(tir.likely(j < 40), tir.BufferStore(A, A[j] + 1.0, (j,)))
    f = tir.PrimFunc("f", (A,), tir.For(jo, 0, 3, S, tir.For(ji, 0, 16, V, store)))
    g = partition_loop(f)
    main, tail = g.body.seq
    assert main.extent.value == 2 and tail.extent.value == 1
    tail_main, tail_rest = tail.body.seq
    assert tail_main.kind is V and tail_main.extent.value == 8
    assert isinstance(tail_main.body, tir.BufferStore)
    assert tail_rest.min.value == 8 and isinstance(tail_rest.body, tir.IfThenElse)
    assert_same_results(f, g)
    h = vectorize_loop(g)
    lanes = {r.lanes for r in collect(h.body, lambda x: isinstance(x, tir.Ramp))}
    assert lanes == {8, 16}
    assert_same_results(f, h)


def test_exact_serial_tail_only_where_the_guard_is_exact():
    """A tail's guard that an else branch follows, or that depends on a loop inside, keeps the
    tail loop whole (Note [exact serial tails]); all of them agree with the unpartitioned
    loops at every size."""
    n = tir.Var("n")
    A, B = tir.decl_buffer((n,), "float32", "A"), tir.decl_buffer((n,), "float32", "B")
    io, ii, jj = tir.Var("io"), tir.Var("ii"), tir.Var("jj")
    idx = io * 16 + ii
    store = tir.BufferStore(B, A[idx] * 2.0, (idx,))
    other = tir.BufferStore(B, A[0], (0,))
    bodies = {
        "else": tir.IfThenElse(tir.likely(idx < n), store, other),
        "inner": tir.For(jj, 0, 2, S, tir.IfThenElse(tir.likely(idx + jj < n), store)),
    }
    for name, body in bodies.items():
        loop = tir.For(io, 0, (n + 15) // 16, S, tir.For(ii, 0, 16, S, body))
        f = tir.PrimFunc(name, (A, B), loop)
        g = partition_loop(f)
        loops = collect(g.body, lambda x: isinstance(x, tir.For))
        tails = [lp for lp in loops if lp.loop_var.name == "ii"]
        assert all(isinstance(lp.extent, tir.IntImm) for lp in tails), name
        for value in (1, 15, 16, 17, 50):
            assert_same_results(f, g, {"n": value})


def test_clamp_under_a_proven_guard_goes_with_it():
    """A read clamped into bounds (`min(k, n - 1)`, a tile computed whole) under the guard
    `k < n` reads k where the guard is proven (Note [clamps under a guard])."""
    n = tir.Var("n")
    A = tir.decl_buffer((n,), "float32", "A")
    B = tir.decl_buffer((n,), "float32", "B")
    io, ii = tir.Var("io"), tir.Var("ii")
    idx = io * 16 + ii
    clamped = A[tir.min(idx, n - 1)] * 2.0
    guarded = tir.IfThenElse(tir.likely(idx < n), tir.BufferStore(B, clamped, (idx,)))
    body = tir.For(io, 0, (n + 15) // 16, S, tir.For(ii, 0, 16, S, guarded))
    f = tir.PrimFunc("f", (A, B), body)
    g = partition_loop(f)
    assert not collect(g.body, lambda x: isinstance(x, tir.Min))
    for value in (1, 15, 16, 17, 50):
        assert_same_results(f, g, {"n": value})
