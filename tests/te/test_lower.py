"""te.lower: loop structure, guards, storage and numbers against numpy."""

import numpy as np
import pytest

from tessera import te, tir
from tessera.ir import structural_equal
from tessera.tir.stmt_functor import collect
from tessera.tir.verify import verify


def _vadd(n):
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute(A.shape, lambda i: A[i] + B[i], name="C")
    return A, B, C


def _guards(func):
    return collect(func.body, lambda x: isinstance(x, tir.IfThenElse))


def test_params_are_buffers_of_the_args(rng, run):
    A, B, C = _vadd(8)
    f = te.lower(te.create_schedule(C.op), [A, B, C], name="add")
    assert f.name == "add" and [p.name for p in f.params] == ["A", "B", "C"]
    assert all(isinstance(p, tir.Buffer) for p in f.params)
    a, b = rng.standard_normal((2, 8), dtype=np.float32)
    *_, c = run(f, a, b, np.zeros(8, np.float32))
    np.testing.assert_allclose(c, a + b)


def test_divisible_split_has_no_guard(loops):
    A, B, C = _vadd(64)
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=16)
    s[C].vectorize(xi)
    f = te.lower(s, [A, B, C])
    assert loops(f) == [("i.outer", 4, "serial", 0), ("i.inner", 16, "vectorized", 1)]
    assert not _guards(f)


def test_non_divisible_split_is_guarded_and_correct(rng, loops, run):
    A, B, C = _vadd(100)
    s = te.create_schedule(C.op)
    s[C].split(C.op.axis[0], factor=16)
    f = te.lower(s, [A, B, C])
    assert loops(f) == [("i.outer", 7, "serial", 0), ("i.inner", 16, "serial", 1)]
    (guard,) = _guards(f)
    assert isinstance(guard.condition, tir.Call) and guard.condition.op == "likely"
    a, b = rng.standard_normal((2, 100), dtype=np.float32)
    *_, c = run(f, a, b, np.zeros(100, np.float32))
    np.testing.assert_allclose(c, a + b)


@pytest.mark.parametrize("n", [1, 37, 64])
def test_symbolic_n(rng, loops, run, n):
    nv = te.var("n")
    A, B, C = _vadd(nv)
    s = te.create_schedule(C.op)
    s[C].split(C.op.axis[0], factor=16)
    f = te.lower(s, [A, B, C])
    assert f.params[0].shape[0] is nv and len(_guards(f)) == 1
    a, b = rng.standard_normal((2, n), dtype=np.float32)
    *_, c = run(f, a, b, np.zeros(n, np.float32))
    np.testing.assert_allclose(c, a + b)


def test_nparts_split_fuse_of_split_parts(rng, loops, run):
    A = te.placeholder((10, 6), name="A")
    B = te.compute((10, 6), lambda i, j: A[i, j] * 3.0, name="B")
    s = te.create_schedule(B.op)
    io, ii = s[B].split(B.op.axis[0], nparts=3)
    jo, ji = s[B].split(B.op.axis[1], factor=4)
    s[B].reorder(io, jo, ii, ji)
    fused = s[B].fuse(io, jo)
    s[B].parallel(fused)
    f = te.lower(s, [A, B])
    assert loops(f)[0] == ("i.outer.j.outer.fused", 6, "parallel", 0)
    a = rng.standard_normal((10, 6), dtype=np.float32)
    _, b = run(f, a, np.zeros((10, 6), np.float32))
    np.testing.assert_allclose(b, a * 3)


def test_scalar_var_param_and_pragma_and_bind(rng, run):
    A = te.placeholder((8,), name="A")
    alpha = te.var("alpha", "float32")
    B = te.compute((8,), lambda i: A[i] * alpha, name="B")
    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=4)
    s[B].pragma(xo, "unroll_explicit", 1)
    s[B].bind(xi, te.thread_axis("threadIdx.x"))
    f = te.lower(s, [A, alpha, B])
    assert f.params[1] is alpha
    outer = f.body
    assert outer.annotations == (("pragma_unroll_explicit", 1),)
    assert outer.body.kind == tir.ForKind.THREAD_BINDING
    assert outer.body.thread_tag == "threadIdx.x"
    a = rng.standard_normal(8, dtype=np.float32)
    _, _, b = run(f, a, 2.5, np.zeros(8, np.float32))
    np.testing.assert_allclose(b, a * 2.5)


def test_root_intermediate_is_allocated(rng, run):
    A = te.placeholder((6,), name="A")
    B = te.compute((6,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((6,), lambda i: B[i] * 2.0, name="C")
    f = te.lower(te.create_schedule(C.op), [A, C])
    assert isinstance(f.body, tir.Allocate) and f.body.buffer.name == "B"
    assert f.body.buffer.scope == "global"
    a = rng.standard_normal(6, dtype=np.float32)
    _, c = run(f, a, np.zeros(6, np.float32))
    np.testing.assert_allclose(c, (a + 1) * 2)


def test_compute_inline_substitutes(rng, run):
    A = te.placeholder((6,), name="A")
    B = te.compute((6,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((6,), lambda i: B[i] * B[5 - i], name="C")
    s = te.create_schedule(C.op)
    s[B].compute_inline()
    f = te.lower(s, [A, C])
    assert not collect(f.body, lambda x: isinstance(x, tir.Allocate))
    assert isinstance(f.body, tir.For)
    a = rng.standard_normal(6, dtype=np.float32)
    _, c = run(f, a, np.zeros(6, np.float32))
    np.testing.assert_allclose(c, (a + 1) * (a[::-1] + 1), rtol=1e-6)


def test_inline_with_an_index_of_another_dtype(run):
    # B's body mixes its int32 axis with int32 constants; C reads B at an int64 index. The
    # inlined body must stay well typed (the index is cast to the axis dtype).
    A = te.placeholder((6,), name="A")
    I = te.placeholder((3,), "int64", name="I")
    B = te.compute((6,), lambda i: A[5 - i], name="B")
    C = te.compute((3,), lambda j: B[I[j]], name="C")
    s = te.create_schedule(C.op)
    s[B].compute_inline()
    f = te.lower(s, [A, I, C])
    verify(f)
    a, idx = np.arange(6, dtype=np.float32), np.array([0, 4, 5], np.int64)
    *_, c = run(f, a, idx, np.zeros(3, np.float32))
    np.testing.assert_allclose(c, a[5 - idx])


def test_no_te_nodes_reach_tir():
    A = te.placeholder((4, 4), name="A")
    k = te.reduce_axis((0, 4), name="k")
    B = te.compute((4,), lambda i: te.max(A[i, k], axis=k), name="B")
    f = te.lower(te.create_schedule(B.op), [A, B])
    bad = collect(f.body, lambda x: isinstance(x, (te.ProducerLoad, tir.Reduce)))
    assert bad == []


def test_lower_is_deterministic_structurally():
    A, B, C = _vadd(100)
    s = te.create_schedule(C.op)
    s[C].split(C.op.axis[0], factor=16)
    assert structural_equal(te.lower(s, [A, B, C]), te.lower(s, [A, B, C]))


def test_argument_errors():
    A, B, C = _vadd(8)
    s = te.create_schedule(C.op)
    with pytest.raises(ValueError, match="placeholder B is read by C"):
        te.lower(s, [A, C])
    with pytest.raises(ValueError, match="output C must be in the argument list"):
        te.lower(s, [A, B])
    with pytest.raises(TypeError, match="tensors or te.var"):
        te.lower(s, [A, B, C, 3])
    with pytest.raises(ValueError, match="given twice"):
        te.lower(s, [A, A, B, C])
    with pytest.raises(TypeError, match="te.Schedule"):
        te.lower(C, [A, B, C])


def test_multi_output_compute_numbers(rng, run):
    A = te.placeholder((5,), name="A")
    x, y = te.compute((5,), lambda i: (A[i] + 1.0, A[i] * 2.0), name="two")
    f = te.lower(te.create_schedule(x.op), [A, x, y])
    a = rng.standard_normal(5, dtype=np.float32)
    _, xo, yo = run(f, a, np.zeros(5, np.float32), np.zeros(5, np.float32))
    np.testing.assert_allclose(xo, a + 1)
    np.testing.assert_allclose(yo, a * 2)


def test_nested_compute_at_chain(rng, run):
    A = te.placeholder((12,), name="A")
    B = te.compute((12,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((11,), lambda i: B[i] + B[i + 1], name="C")
    D = te.compute((10,), lambda i: C[i] * C[i + 1], name="D")
    s = te.create_schedule(D.op)
    do, di = s[D].split(D.op.axis[0], factor=4)
    s[C].compute_at(s[D], do)
    s[B].compute_at(s[C], s[C].op.axis[0])
    f = te.lower(s, [A, D])
    a = rng.standard_normal(12, dtype=np.float32)
    _, d = run(f, a, np.zeros(10, np.float32))
    b = a + 1
    c = b[:-1] + b[1:]
    np.testing.assert_allclose(d, c[:-1] * c[1:], rtol=1e-5)


def test_compute_at_stage_that_is_an_argument_writes_in_place(rng, run):
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((8,), lambda i: B[i] + 1.0, name="C")
    s = te.create_schedule(C.op)
    s[B].compute_at(s[C], C.op.axis[0])
    f = te.lower(s, [A, B, C])
    assert not collect(f.body, lambda x: isinstance(x, tir.Allocate))
    a = rng.standard_normal(8, dtype=np.float32)
    _, b, c = run(f, a, np.zeros(8, np.float32), np.zeros(8, np.float32))
    np.testing.assert_allclose(b, a * 2)
    np.testing.assert_allclose(c, a * 2 + 1)
