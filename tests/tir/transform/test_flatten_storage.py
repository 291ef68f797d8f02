import numpy as np

from tessera import tir
from tessera.codegen.common import function_info
from tessera.ir import assert_structural_equal
from tessera.tir.interpreter import assert_same_results, interpret, random_arguments
from tessera.tir.transform import flatten_storage

S = tir.ForKind.SERIAL


def _copy_2d():
    n = tir.Var("n")
    A = tir.decl_buffer((n, 64), "float32", "A")
    B = tir.decl_buffer((n, 64), "float32", "B")
    i, j = tir.Var("i"), tir.Var("j")
    body = tir.For(i, 0, n, S, tir.For(j, 0, 64, S, tir.BufferStore(B, A[i, j] * 2.0, (i, j))))
    return tir.PrimFunc("f", (A, B), body), (n, A, B)


def test_params_become_flat_and_shapes_are_kept():
    f, (n, A, B) = _copy_2d()
    g = flatten_storage(f)
    # a symbolic dim: int64 offsets (the buffer may hold 2^31 elements or more)
    i64 = "int64"
    A1 = tir.decl_buffer((n.astype(i64) * tir.const(64, i64),), "float32", "A")
    B1 = tir.decl_buffer((n.astype(i64) * tir.const(64, i64),), "float32", "B")
    i, j = tir.Var("i"), tir.Var("j")
    offset = i.astype(i64) * tir.const(64, i64) + j.astype(i64)
    store = tir.BufferStore(B1, A1[offset] * 2.0, (offset,))
    expected = tir.PrimFunc(
        "f",
        (A1, B1),
        tir.For(i, 0, n, S, tir.For(j, 0, 64, S, store)),
        attrs=(("param_shapes", ((n, tir.const(64)), (n, tir.const(64)))),),
    )
    assert_structural_equal(g, expected)
    assert [p.name for p in g.params] == ["A", "B"]
    assert g.param_shape(g.params[0])[0] is n
    assert g.scalar_vars() == (n,)
    assert function_info(g).params[0].shape == ["n", 64]


def test_numerics_with_original_shapes():
    f, _ = _copy_2d()
    g = flatten_storage(f)
    assert_same_results(f, g, {"n": 3})
    a, b = random_arguments(g, {"n": 2})
    interpret(g, a, b)
    np.testing.assert_array_equal(b, a * 2)


def test_allocate_and_three_dims():
    A = tir.decl_buffer((2, 3, 4), "int32", "A")
    B = tir.decl_buffer((2, 3, 4), "int32", "B")
    T = tir.decl_buffer((3, 4), "int32", "T", scope="local")
    i, j, k = tir.Var("i"), tir.Var("j"), tir.Var("k")
    j2, k2 = tir.Var("j2"), tir.Var("k2")
    fill = tir.For(j, 0, 3, S, tir.For(k, 0, 4, S, tir.BufferStore(T, A[i, j, k] + 1, (j, k))))
    use = tir.For(j2, 0, 3, S, tir.For(k2, 0, 4, S, tir.BufferStore(B, T[j2, k2], (i, j2, k2))))
    f = tir.PrimFunc("g", (A, B), tir.For(i, 0, 2, S, tir.Allocate(T, tir.seq(fill, use))))
    g = flatten_storage(f)
    alloc = g.body.body
    assert alloc.buffer.shape[0].value == 12 and alloc.buffer.scope == "local"
    store = alloc.body.seq[1].body.body
    assert_structural_equal(store.indices[0], i * 12 + j2 * 4 + k2, map_free_vars=False)
    assert_same_results(f, g)


def test_one_dim_function_is_unchanged_and_pass_is_idempotent():
    A = tir.decl_buffer((8,), "float32", "A")
    i = tir.Var("i")
    f = tir.PrimFunc("h", (A,), tir.For(i, 0, 8, S, tir.BufferStore(A, A[i] + 1.0, (i,))))
    assert flatten_storage(f) is f
    g, _ = _copy_2d()
    once = flatten_storage(g)
    assert flatten_storage(once) is once


def test_scalar_buffer():
    A = tir.decl_buffer((), "float32", "A")
    f = tir.PrimFunc("s", (A,), tir.BufferStore(A, A[()] + 1.0, ()))
    g = flatten_storage(f)
    assert g.params[0].shape[0].value == 1
    assert g.body.indices[0].value == 0
    assert_same_results(f, g)


def test_fused_axis_index_is_simplified():
    A = tir.decl_buffer((6, 10), "float32", "A")
    f_ = tir.Var("f")
    store = tir.BufferStore(A, tir.const(1.0), (f_ // 10, f_ % 10))
    g = flatten_storage(tir.PrimFunc("h", (A,), tir.For(f_, 0, 60, S, store)))
    assert g.body.body.indices[0] is f_


def test_offsets_past_int32_are_int64():
    # 70000 * 70000 elements: the offset of A[69999, j] does not fit int32
    A = tir.decl_buffer((70000, 70000), "int8", "A")
    B = tir.decl_buffer((8,), "int8", "B")
    k = tir.Var("k")
    body = tir.For(k, 0, 8, S, tir.BufferStore(B, A[69999, k + 69992], (k,)))
    g = flatten_storage(tir.PrimFunc("f", (A, B), body))
    flat_a = g.params[0]
    assert flat_a.shape[0].dtype == tir.DType.parse("int64")
    assert flat_a.shape[0].value == 70000 * 70000
    index = g.body.body.value.indices[0]
    assert index.dtype == tir.DType.parse("int64")
    C = tir.decl_buffer((60, 64), "float32", "C")  # int32 offsets where they fit
    small = flatten_storage(tir.PrimFunc("s", (C,), tir.BufferStore(C, 1.0, (k, k))))
    assert small.body.indices[0].dtype == tir.DType.parse("int32")
    symbolic = flatten_storage(_copy_2d()[0])  # a symbolic dim: any size, int64 offsets
    assert symbolic.body.body.body.value.a.indices[0].dtype == tir.DType.parse("int64")


def test_offsets_past_int32_read_the_right_element():
    from tessera.codegen.llvm import build_llvm

    A = tir.decl_buffer((70000, 70000), "int8", "A")
    B = tir.decl_buffer((8,), "int8", "B")
    k = tir.Var("k")
    body = tir.For(k, 0, 8, S, tir.BufferStore(B, A[69999, k + 69992], (k,)))
    mod = build_llvm([flatten_storage(tir.PrimFunc("f", (A, B), body))])
    a = np.zeros((70000, 70000), "int8")  # 4.9 GB of address space; only one page is touched
    a[69999, -8:] = np.arange(1, 9)
    b = np.zeros(8, "int8")
    mod["f"](a, b)
    np.testing.assert_array_equal(b, np.arange(1, 9))
