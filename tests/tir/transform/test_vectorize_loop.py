import pytest

from tessera import tir
from tessera.ir import assert_structural_equal
from tessera.tir.interpreter import assert_same_results
from tessera.tir.stmt_functor import collect
from tessera.tir.transform import vectorize_loop

S, V = tir.ForKind.SERIAL, tir.ForKind.VECTORIZED


def _ramp(base, lanes=16):
    return tir.Ramp(tir.convert(base), tir.const(1), lanes)


def _bufs(*names, n=64, dtype="float32"):
    return [tir.decl_buffer((n,), dtype, name) for name in names]


def test_elementwise_becomes_ramp_code():
    A, B, C = _bufs("A", "B", "C", n=4 * 16)
    x = tir.Var("x", "float32")
    i, j = tir.Var("i"), tir.Var("j")
    body = tir.BufferStore(C, A[i * 16 + j] * x + B[i * 16 + j], (i * 16 + j,))
    f = tir.PrimFunc("f", (A, B, C, x), tir.For(i, 0, 4, S, tir.For(j, 0, 16, V, body)))
    g = vectorize_loop(f)
    r = _ramp(i * 16)
    vec = tir.BufferStore(C, A[r] * tir.Broadcast(x, 16) + B[r], (r,))
    assert_structural_equal(g.body, tir.For(i, 0, 4, S, vec))
    assert_same_results(f, g, {"x": 1.5})


def test_loop_min_and_compare_select_cast_intrinsics_widen():
    A, C = _bufs("A", "C", n=32)
    j = tir.Var("j")
    a = A[j]
    value = tir.Select(a > 0.0, tir.exp(a), tir.Cast("float32", j) * a)
    f = tir.PrimFunc("f", (A, C), tir.For(j, 8, 16, V, tir.BufferStore(C, value, (j,))))
    g = vectorize_loop(f)
    assert isinstance(g.body, tir.BufferStore)
    assert g.body.value.dtype == tir.DType.parse("float32x16")
    assert_structural_equal(g.body.indices[0], _ramp(8))
    assert_same_results(f, g)


def test_let_and_if_then_else_without_loads():
    A, C = _bufs("A", "C", n=16)
    j, t = tir.Var("j"), tir.Var("t", "float32")
    guarded = tir.if_then_else(j < 5, t * 2.0, t)
    body = tir.LetStmt(t, A[j] + 1.0, tir.BufferStore(C, guarded, (j,)))
    f = tir.PrimFunc("f", (A, C), tir.For(j, 0, 16, V, body))
    g = vectorize_loop(f)
    assert isinstance(g.body, tir.LetStmt) and g.body.var.dtype.lanes == 16
    assert_same_results(f, g)


def test_lane_uniform_guarded_load_is_hoisted():
    # conv padding: the condition does not depend on the vectorized axis
    A = tir.decl_buffer((6, 16), "float32", "A")
    C = tir.decl_buffer((8, 16), "float32", "C")
    h, c = tir.Var("h"), tir.Var("c")
    value = tir.if_then_else(tir.all(h >= 1, h < 7), A[h - 1, c], 0.0)
    f = tir.PrimFunc(
        "f", (A, C), tir.For(h, 0, 8, S, tir.For(c, 0, 16, V, tir.BufferStore(C, value, (h, c))))
    )
    g = vectorize_loop(f)
    inner = g.body.body
    assert isinstance(inner, tir.IfThenElse) and inner.condition.dtype.lanes == 1
    assert isinstance(inner.then_case.value, tir.BufferLoad)
    assert_same_results(f, g)


def _is_vector(stmt):
    return bool(collect(stmt, lambda n: isinstance(n, tir.Ramp)))


@pytest.mark.parametrize(
    "case",
    [
        "invariant_store",
        "lane_guard",
        "inner_loop",
        "symbolic",
        "guarded_load",
        "shifted_read",
        "repeated_index",
    ],
)
def test_falls_back_to_serial(case):
    n = tir.Var("n")
    A, C = _bufs("A", "C", n=64)
    i, j, k = tir.Var("i"), tir.Var("j"), tir.Var("k")
    extent, params, var_values = 16, (A, C), {}
    if case == "invariant_store":  # a reduction into C[0]
        body = tir.BufferStore(C, C[0] + A[j], (0,))
    elif case == "lane_guard":
        body = tir.IfThenElse(tir.likely(j < 9), tir.BufferStore(C, A[j], (j,)))
    elif case == "inner_loop":
        body = tir.For(k, 0, 2, S, tir.BufferStore(C, A[j * 2 + k], (j * 2 + k,)))
    elif case == "symbolic":
        extent, params, var_values = n, (A, C, n), {"n": 7}
        body = tir.BufferStore(C, A[j], (j,))
    elif case == "guarded_load":  # lanes 14, 15 would read past A (Note [loads in bounds])
        body = tir.BufferStore(C, tir.if_then_else(j < 9, A[j + 50], 0.0), (j,))
    elif case == "shifted_read":  # lane j reads what lane j - 1 wrote
        body = tir.BufferStore(C, C[j] + 1.0, (j + 1,))
    else:  # two lanes update one element
        body = tir.BufferStore(C, C[j // 2] + A[j], (j // 2,))
    f = tir.PrimFunc("f", params, tir.For(i, 0, 2, S, tir.For(j, 0, extent, V, body)))
    g = vectorize_loop(f)
    inner = g.body.body
    assert isinstance(inner, tir.For) and inner.kind is S and not _is_vector(inner)
    assert_same_results(f, g, var_values)


def test_outer_loops_untouched_and_only_vectorized_loops_change():
    A, C = _bufs("A", "C", n=16)
    j = tir.Var("j")
    f = tir.PrimFunc("f", (A, C), tir.For(j, 0, 16, S, tir.BufferStore(C, A[j], (j,))))
    assert vectorize_loop(f) is f


def test_two_dimensional_indices_and_int_math():
    A = tir.decl_buffer((4, 8), "int32", "A")
    C = tir.decl_buffer((4, 8), "int32", "C")
    i, j = tir.Var("i"), tir.Var("j")
    value = tir.max(A[i, j] // 3, A[i, j] % 5) - j
    f = tir.PrimFunc(
        "f", (A, C), tir.For(i, 0, 4, S, tir.For(j, 0, 8, V, tir.BufferStore(C, value, (i, j))))
    )
    g = vectorize_loop(f)
    store = g.body.body
    assert isinstance(store, tir.BufferStore)
    assert_structural_equal(store.indices, (tir.Broadcast(i, 8), _ramp(0, 8)))
    assert_same_results(f, g)


def test_read_then_write_same_index_vectorizes():
    A, C = _bufs("A", "C", n=16)
    j = tir.Var("j")
    f = tir.PrimFunc("f", (A, C), tir.For(j, 0, 16, V, tir.BufferStore(C, C[j] + A[j], (j,))))
    g = vectorize_loop(f)
    assert isinstance(g.body, tir.BufferStore) and g.body.value.dtype.lanes == 16
    assert_same_results(f, g)


def test_a_guard_over_loads_inside_the_buffer_vectorizes():
    """Note [loads in bounds]: pad's guard over a source index clamped into the data (and an
    outer loop's var in its range) is a select; one that may read past the end is not."""
    A, C = _bufs("A", "C", n=4 * 16)
    i, j = tir.Var("i"), tir.Var("j")
    src = i * 14 + tir.max(tir.min(j - 1, 13), 0)  # rows of 14, padded by 1 on both sides
    value = tir.if_then_else(tir.all(j >= 1, j < 15), A[src], 0.0)
    f = tir.PrimFunc("f", (A, C), tir.For(i, 0, 4, S, tir.For(j, 0, 16, V,
                     tir.BufferStore(C, value, (i * 16 + j,)))))  # fmt: skip
    g = vectorize_loop(f)
    assert _is_vector(g.body.body)
    assert_same_results(f, g, {})
    # the guard over an unclamped index: the last row's last lanes would read past A
    far = tir.if_then_else(tir.all(j >= 1, j < 15), A[i * 15 + j - 1 + 5], 0.0)
    f = tir.PrimFunc("f", (A, C), tir.For(i, 0, 4, S, tir.For(j, 0, 16, V,
                     tir.BufferStore(C, far, (i * 16 + j,)))))  # fmt: skip
    assert not _is_vector(vectorize_loop(f).body.body)


def test_a_guard_over_many_varying_loads_stays_serial():
    """A concatenate along the vectorized axis (a tree of guards, one load per input) would
    load every input in every lane: more than MAX_SELECT_LOADS varying loads stay serial."""
    from tessera.tir.transform.vectorize_loop import MAX_SELECT_LOADS

    n = MAX_SELECT_LOADS + 1
    ins = _bufs(*[f"A{k}" for k in range(n)], n=16)
    (C,) = _bufs("C", n=16 * n)
    j = tir.Var("j")
    value = ins[-1][tir.max(tir.min(j - 16 * (n - 1), 15), 0)]
    for k in reversed(range(n - 1)):
        value = tir.if_then_else(j < 16 * (k + 1), ins[k][tir.max(tir.min(j - 16 * k, 15), 0)],
                                 value)  # fmt: skip
    f = tir.PrimFunc("f", (*ins, C), tir.For(j, 0, 16, V, tir.BufferStore(C, value, (j,))))
    assert not _is_vector(vectorize_loop(f).body)
    assert_same_results(f, vectorize_loop(f), {})
