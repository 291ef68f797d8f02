"""rfactor: a reduction as a partial reduction over a data-parallel axis, then its total."""

import numpy as np
import pytest

import tessera
from tessera import te
from tessera.te.steps import steps_from_json


def _row_sum(M, K, reducer=te.sum):
    A = te.placeholder((M, K), name="A")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M,), lambda i: reducer(A[i, k], axis=k), name="C")
    return A, C


@pytest.mark.parametrize("which", ["inner", "outer"])
@pytest.mark.parametrize("K, factor", [(203, 16), (64, 16), (5, 8)])
def test_rfactor_of_a_split_axis(rng, run, which, K, factor):
    A, C = _row_sum(7, K)
    s = te.create_schedule(C.op)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=factor)
    CF = s.rfactor(C, ki if which == "inner" else ko)
    extent = factor if which == "inner" else -(-K // factor)
    assert CF.name == "C.rf" and [int(d.value) for d in CF.shape] == [extent, 7]
    assert [iv.var.name for iv in s[C].op.reduce_axis] == [f"k.{which}.v"]
    assert [iv.var.name for iv in s[CF].op.reduce_axis] == [
        "k.outer" if which == "inner" else "k.inner"
    ]
    a = rng.standard_normal((7, K)).astype("f4")
    _, c = run(te.lower(s, [A, C]), a, np.zeros(7, "f4"))
    np.testing.assert_allclose(c, a.sum(axis=1), rtol=1e-5, atol=1e-5)


def test_rfactor_keeps_the_combiner_and_a_ragged_bound(rng, run):
    """max of partial maxima; K = 203 with factor 16: the last partials stop at the bound."""
    A, C = _row_sum(4, 203, te.max)
    s = te.create_schedule(C.op)
    _, ki = s[C].split(C.op.reduce_axis[0], factor=16)
    s.rfactor(C, ki)
    a = rng.standard_normal((4, 203)).astype("f4") - 10
    _, c = run(te.lower(s, [A, C]), a, np.zeros(4, "f4"))
    np.testing.assert_array_equal(c, a.max(axis=1))


def test_rfactor_of_an_unsplit_axis_and_a_second_reduce_axis(rng, run):
    """C[i] = sum over (k, l): rfactor at k leaves l as the partial reduction; factor_axis 1."""
    A = te.placeholder((3, 5, 6), name="A")
    k, l_ = te.reduce_axis((0, 5), name="k"), te.reduce_axis((0, 6), name="l")
    C = te.compute((3,), lambda i: te.sum(A[i, k, l_], axis=[k, l_]), name="C")
    s = te.create_schedule(C.op)
    CF = s.rfactor(C, k, factor_axis=1)
    assert [int(d.value) for d in CF.shape] == [3, 5]
    a = rng.standard_normal((3, 5, 6)).astype("f4")
    _, c = run(te.lower(s, [A, C]), a, np.zeros(3, "f4"))
    np.testing.assert_allclose(c, a.sum(axis=(1, 2)), rtol=1e-5, atol=1e-5)


def test_rfactor_of_the_only_loop(rng, run):
    A, C = _row_sum(3, 9)
    s = te.create_schedule(C.op)
    CF = s.rfactor(C, C.op.reduce_axis[0])
    assert not s[CF].op.reduce_axis
    a = rng.standard_normal((3, 9)).astype("f4")
    _, c = run(te.lower(s, [A, C]), a, np.zeros(3, "f4"))
    np.testing.assert_allclose(c, a.sum(axis=1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_rfactor_runs_a_long_reduction_in_parallel_and_in_vector_lanes(rng, target):
    """One long dot product (no data-parallel loop at all): 16 lanes of partial sums, computed
    in parallel chunks, then their total; compiled and run."""
    K = 100_003
    A = te.placeholder((K,), name="A")
    B = te.placeholder((K,), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((1,), lambda i: te.sum(A[k] * B[k], axis=k), name="C")
    s = te.create_schedule(C.op)
    ko, ki = s[C].split(k, factor=16)
    CF = s.rfactor(C, ki)
    lanes, row = s[CF].op.axis
    s[CF].reorder(row, lanes, *s[CF].op.reduce_axis)
    s[CF].parallel(lanes)
    lib = tessera.build(s, [A, B, C], target=target, name="dot")
    a, b = rng.standard_normal(K).astype("f4"), rng.standard_normal(K).astype("f4")
    c = np.zeros(1, "f4")
    lib(a, b, c)
    np.testing.assert_allclose(c[0], np.dot(a.astype("f8"), b.astype("f8")), rtol=1e-3)


def test_rfactor_is_recorded_and_replays(rng, run):
    A, C = _row_sum(5, 40)
    s = te.create_schedule(C.op)
    _, ki = s[C].split(C.op.reduce_axis[0], factor=8)
    s.rfactor(C, ki)
    assert str(s).splitlines()[-1] == "rfactor(C, k.inner, 0)"
    steps = steps_from_json(s.steps_json())
    A2, C2 = _row_sum(5, 40)
    s2 = te.create_schedule(C2.op).replay(steps)
    assert [st.name for st in s2.stages] == [st.name for st in s.stages]
    a = rng.standard_normal((5, 40)).astype("f4")
    _, c = run(te.lower(s2, [A2, C2]), a, np.zeros(5, "f4"))
    np.testing.assert_allclose(c, a.sum(axis=1), rtol=1e-5, atol=1e-5)


def test_rfactor_errors_are_clear():
    A, C = _row_sum(5, 40)
    s = te.create_schedule(C.op)
    with pytest.raises(ValueError, match="not a reduce axis"):
        s.rfactor(C, C.op.axis[0])
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=8)
    s[C].unroll(ki)
    with pytest.raises(ValueError, match="right after splitting"):
        s.rfactor(C, ki)
    B = te.compute((5, 40), lambda i, j: A[i, j] + 1, name="B")
    with pytest.raises(ValueError, match="not a reduction"):
        te.create_schedule(B.op).rfactor(B, B.op.axis[0])
