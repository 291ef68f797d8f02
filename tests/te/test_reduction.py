"""Reductions: sum/max/min, comm_reducer, where, tuple reducers, reorder of reduce loops."""

import numpy as np
import pytest

from tessera import te, tir


def _lower(out, args, sched=None):
    s = te.create_schedule(out.op)
    if sched:
        sched(s)
    return te.lower(s, args)


def test_matmul(rng, run, loops):
    A = te.placeholder((5, 7), name="A")
    B = te.placeholder((7, 3), name="B")
    k = te.reduce_axis((0, 7), name="k")
    C = te.compute((5, 3), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    f = _lower(C, [A, B, C])
    assert loops(f) == [("i", 5, "serial", 0), ("j", 3, "serial", 1), ("k", 7, "serial", 2)]
    j_loop = f.body.body
    init, update_loop = j_loop.body.seq  # the init store sits before the reduction loop
    assert isinstance(init, tir.BufferStore) and init.value.value == 0.0
    a = rng.standard_normal((5, 7), dtype=np.float32)
    b = rng.standard_normal((7, 3), dtype=np.float32)
    *_, c = run(f, a, b, np.zeros((5, 3), np.float32))
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-6)


def test_sum_over_two_axes(rng, run):
    A = te.placeholder((4, 5, 6), name="A")
    r1 = te.reduce_axis((0, 5), name="r1")
    r2 = te.reduce_axis((0, 6), name="r2")
    B = te.compute((4,), lambda i: te.sum(A[i, r1, r2], axis=[r1, r2]), name="B")
    f = _lower(B, [A, B])
    a = rng.standard_normal((4, 5, 6), dtype=np.float32)
    _, b = run(f, a, np.zeros(4, np.float32))
    np.testing.assert_allclose(b, a.sum(axis=(1, 2)), rtol=1e-5)


@pytest.mark.parametrize("reducer,ref", [(te.max, np.max), (te.min, np.min)])
def test_max_min(rng, run, reducer, ref):
    A = te.placeholder((4, 9), name="A")
    k = te.reduce_axis((0, 9), name="k")
    B = te.compute((4,), lambda i: reducer(A[i, k], axis=k), name="B")
    f = _lower(B, [A, B])
    a = rng.standard_normal((4, 9), dtype=np.float32)
    _, b = run(f, a, np.zeros(4, np.float32))
    np.testing.assert_allclose(b, ref(a, axis=1))


def test_custom_comm_reducer_product(rng, run):
    prod = te.comm_reducer(lambda x, y: x * y, lambda t: te.const(1, t), name="prod")
    A = te.placeholder((3, 4), name="A")
    k = te.reduce_axis((0, 4), name="k")
    B = te.compute((3,), lambda i: prod(A[i, k], axis=k), name="B")
    f = _lower(B, [A, B])
    a = rng.uniform(0.5, 1.5, (3, 4)).astype(np.float32)
    _, b = run(f, a, np.zeros(3, np.float32))
    np.testing.assert_allclose(b, a.prod(axis=1), rtol=1e-6)


def test_where_condition(rng, run):
    A = te.placeholder((4, 8), name="A")
    k = te.reduce_axis((0, 8), name="k")
    B = te.compute((4,), lambda i: te.sum(A[i, k], axis=k, where=k % 2 == 0), name="B")
    f = _lower(B, [A, B])
    a = rng.standard_normal((4, 8), dtype=np.float32)
    _, b = run(f, a, np.zeros(4, np.float32))
    np.testing.assert_allclose(b, a[:, ::2].sum(axis=1), rtol=1e-5)


def test_reorder_reduce_outside_spatial_gets_init_nest(rng, run, loops):
    A = te.placeholder((6, 5), name="A")
    k = te.reduce_axis((0, 5), name="k")
    B = te.compute((6,), lambda i: te.sum(A[i, k], axis=k), name="B")

    def sched(s):
        s[B].reorder(k, B.op.axis[0])

    f = _lower(B, [A, B], sched)
    assert loops(f) == [("i.init", 6, "serial", 0), ("k", 5, "serial", 0), ("i", 6, "serial", 1)]
    a = rng.standard_normal((6, 5), dtype=np.float32)
    _, b = run(f, a, np.zeros(6, np.float32))
    np.testing.assert_allclose(b, a.sum(axis=1), rtol=1e-5)


def test_split_reduce_non_divisible(rng, run):
    A = te.placeholder((3, 10), name="A")
    k = te.reduce_axis((0, 10), name="k")
    B = te.compute((3,), lambda i: te.sum(A[i, k], axis=k), name="B")

    def sched(s):
        ko, ki = s[B].split(k, factor=4)
        s[B].reorder(ko, B.op.axis[0], ki)
        s[B].unroll(ki)

    f = _lower(B, [A, B], sched)
    a = rng.standard_normal((3, 10), dtype=np.float32)
    _, b = run(f, a, np.zeros(3, np.float32))
    np.testing.assert_allclose(b, a.sum(axis=1), rtol=1e-5)


def test_argmax_tuple_reducer(rng, run):
    A = te.placeholder((5, 7), name="A")
    k = te.reduce_axis((0, 7), name="k")
    idx, val = te.compute((5,), lambda i: te.argmax((k.var, A[i, k]), axis=k), name="am")
    s = te.create_schedule(idx.op)
    f = te.lower(s, [A, idx, val])
    a = rng.standard_normal((5, 7), dtype=np.float32)
    _, i_out, v_out = run(f, a, np.zeros(5, np.int32), np.zeros(5, np.float32))
    np.testing.assert_array_equal(i_out, a.argmax(axis=1))
    np.testing.assert_allclose(v_out, a.max(axis=1))


def test_elementwise_max_min_and_errors():
    x = te.var("x", "float32")
    assert isinstance(te.max(x, 1.0), tir.Max) and isinstance(te.min(x, 1.0), tir.Min)
    assert isinstance(te.sum(x, x), tir.Add)
    with pytest.raises(TypeError, match="needs `axis=`"):
        te.max(x)
