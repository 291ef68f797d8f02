"""te.schedule: stages, primitives, leaf orders, and the errors for misuse."""

import pytest

from tessera import te
from tessera.tir import ForKind


def _matmul(n=16):
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def names(ivs):
    return [iv.var.name for iv in ivs]


def test_stages_for_every_reachable_op():
    A, B, C = _matmul()
    s = te.create_schedule(C.op)
    assert [st.name for st in s.stages] == ["A", "B", "C"]
    assert s[C].op is C.op and s[C.op] is s[C]
    assert names(s[C].leaf_iter_vars) == ["i", "j", "k"]


def test_split_names_and_leaf_order():
    A, B, C = _matmul()
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=4)
    assert names([xo, xi]) == ["i.outer", "i.inner"]
    assert names(s[C].leaf_iter_vars) == ["i.outer", "i.inner", "j", "k"]
    assert len(s[C].all_iter_vars) == 5
    ko, ki = s[C].split(C.op.reduce_axis[0], nparts=2)
    assert ko.iter_type == C.op.reduce_axis[0].iter_type


def test_tile_reorder_fuse():
    A, B, C = _matmul()
    s = te.create_schedule(C.op)
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 8)
    assert names(s[C].leaf_iter_vars) == ["i.outer", "j.outer", "i.inner", "j.inner", "k"]
    f = s[C].fuse(xo, yo)
    assert f.var.name == "i.outer.j.outer.fused"
    s[C].reorder(s[C].op.reduce_axis[0], xi)
    assert names(s[C].leaf_iter_vars) == ["i.outer.j.outer.fused", "k", "j.inner", "i.inner"]


def test_kinds_recorded():
    A, B, C = _matmul()
    s = te.create_schedule(C.op)
    s[C].parallel(C.op.axis[0])
    s[C].vectorize(C.op.axis[1])
    s[C].unroll(C.op.reduce_axis[0])
    s[C].pragma(C.op.axis[0], "auto_unroll_max_step", 16)
    attrs = s[C].iter_var_attrs
    assert attrs[C.op.axis[0]].kind == ForKind.PARALLEL
    assert attrs[C.op.axis[0]].pragmas == [("pragma_auto_unroll_max_step", 16)]
    assert attrs[C.op.reduce_axis[0]].kind == ForKind.UNROLLED


def test_misuse_errors():
    A, B, C = _matmul()
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    (k,) = C.op.reduce_axis
    s[C].split(i, factor=4)
    with pytest.raises(ValueError, match="i is no leaf of stage C"):
        s[C].split(i, factor=2)
    with pytest.raises(ValueError, match="given twice"):
        s[C].reorder(j, k, j)
    with pytest.raises(ValueError, match="reduction loop"):
        s[C].vectorize(k)
    with pytest.raises(ValueError, match="reduction loop"):
        s[C].parallel(k)
    with pytest.raises(ValueError, match="not adjacent"):
        s[C].fuse(s[C].leaf_iter_vars[0], j)
    with pytest.raises(ValueError, match="cannot fuse a reduction"):
        s[C].fuse(j, k)
    with pytest.raises(ValueError, match="exactly one of factor, nparts"):
        s[C].split(j)
    with pytest.raises(ValueError, match="positive"):
        s[C].split(j, factor=0)
    with pytest.raises(ValueError, match="placeholder"):
        s[A].split(j, factor=2)
    with pytest.raises(ValueError, match="not an operation of this schedule"):
        s[te.placeholder((1,), name="other")]


def test_compute_at_and_inline_errors():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] + 1, name="B")
    C = te.compute((8,), lambda i: B[i] * 2, name="C")
    D = te.compute((8,), lambda i: A[i] * 3, name="D")
    k = te.reduce_axis((0, 8), name="k")
    R = te.compute((1,), lambda i: te.sum(B[k], axis=k), name="R")
    E = te.compute((1,), lambda i: R[i] + 1, name="E")
    s = te.create_schedule([C.op, D.op, E.op])
    with pytest.raises(ValueError, match="D does not read B"):
        s[B].compute_at(s[D], D.op.axis[0])
    with pytest.raises(ValueError, match="not an iteration variable of C"):
        s[B].compute_at(s[C], D.op.axis[0])
    with pytest.raises(ValueError, match="is an output"):
        s[C].compute_inline()
    with pytest.raises(ValueError, match="is a reduction"):
        s[R].compute_inline()
    with pytest.raises(TypeError, match="thread_axis"):
        s[C].bind(C.op.axis[0], C.op.axis[0])


def test_compute_at_parent_consumes_through_inlined_stage():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] + 1, name="B")
    C = te.compute((8,), lambda i: B[i] * 2, name="C")
    D = te.compute((8,), lambda i: C[i] - 1, name="D")
    s = te.create_schedule(D.op)
    s[C].compute_inline()
    s[B].compute_at(s[D], D.op.axis[0])  # D reads B through the inlined C
    assert s[B].attach_stage is s[D]
