"""set_scope, and a stage computed once at a loop for several readers computed in that loop
(Note [readers in scope] in te/bound.py): the softmax row pattern."""

import numpy as np
import pytest

import tessera
from tessera import te, tir
from tessera.tir.stmt_functor import collect


def _row_softmax(rows, n):
    """e = exp(x - max), its row sum, out = e / sum: e has two readers (sum and out)."""
    x = te.placeholder((rows, n), name="x")
    k = te.reduce_axis((0, n), name="k")
    mx = te.compute((rows,), lambda i: te.max(x[i, k], axis=k), name="mx")
    e = te.compute((rows, n), lambda i, j: te.exp(x[i, j] - mx[i]), name="e")
    k2 = te.reduce_axis((0, n), name="k2")
    total = te.compute((rows,), lambda i: te.sum(e[i, k2], axis=k2), name="total")
    out = te.compute((rows, n), lambda i, j: e[i, j] / total[i], name="out")
    return x, mx, e, total, out


def _reference(a):
    e = np.exp(a - a.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _schedule_rows(s, mx, e, total, out):
    row = out.op.axis[0]
    s[e].compute_at(s[out], row)
    s[total].compute_at(s[out], row)  # the second reader of e, in the same loop
    s[mx].compute_at(s[e], e.op.axis[0])
    return row


def test_stage_with_two_readers_at_one_loop_is_computed_once_per_row(rng, run):
    x, mx, e, total, out = _row_softmax(6, 10)
    s = te.create_schedule(out.op)
    _schedule_rows(s, mx, e, total, out)
    region = te.infer_bound(s).regions[s[e]]
    assert [r.extent.value for r in region] == [1, 10]  # one row, for both readers
    f = te.lower(s, [x, out])
    allocs = {a.buffer.name: a for a in collect(f.body, lambda n: isinstance(n, tir.Allocate))}
    assert [d.value for d in allocs["e"].buffer.shape] == [1, 10]
    a = rng.standard_normal((6, 10)).astype(np.float32)
    _, got = run(f, a, np.zeros_like(a))
    np.testing.assert_allclose(got, _reference(a), rtol=1e-5, atol=1e-6)


def test_reader_nested_deeper_in_the_loop_counts(rng):
    """total is computed at a stage that is itself computed at the row loop: still in scope."""
    x, mx, e, total, out = _row_softmax(5, 37)
    inv = te.compute((5,), lambda i: 1.0 / total[i], name="inv")
    y = te.compute((5, 37), lambda i, j: e[i, j] * inv[i], name="y")
    s = te.create_schedule(y.op)
    row = y.op.axis[0]
    s[e].compute_at(s[y], row)
    s[inv].compute_at(s[y], row)
    s[total].compute_at(s[inv], inv.op.axis[0])
    s[mx].compute_at(s[e], e.op.axis[0])
    s[y].parallel(row)
    jo, ji = s[y].split(y.op.axis[1], factor=8)
    s[y].vectorize(ji)
    f = tessera.build(s, [x, y], target="llvm")
    a = rng.standard_normal((5, 37)).astype(np.float32) * 3
    got = np.zeros_like(a)
    f(a, got)
    np.testing.assert_allclose(got, _reference(a), rtol=1e-5, atol=1e-6)


def test_reader_outside_the_loop_is_still_an_error():
    x, mx, e, total, out = _row_softmax(4, 8)
    s = te.create_schedule(out.op)
    s[e].compute_at(s[out], out.op.axis[0])  # total stays at root: it needs all of e
    with pytest.raises(ValueError, match="also read by total"):
        te.lower(s, [x, out])


def test_set_scope_local_allocates_on_the_stack_and_replays(rng, run):
    x, mx, e, total, out = _row_softmax(4, 8)
    s = te.create_schedule(out.op)
    _schedule_rows(s, mx, e, total, out)
    s[e].set_scope("local")
    assert str(s.steps[-1]) == "set_scope(e, local)"
    f = te.lower(s, [x, out])
    scopes = {
        a.buffer.name: a.buffer.scope
        for a in collect(f.body, lambda n: isinstance(n, tir.Allocate))
    }
    assert scopes["e"] == "local" and scopes["total"] == "global"
    again = te.create_schedule(out.op).replay(te.steps_from_json(s.steps_json()))
    assert again.stage_by_name("e").scope == "local"
    a = rng.standard_normal((4, 8)).astype(np.float32)
    lib = tessera.build(s, [x, out], target="llvm")
    got = np.zeros_like(a)
    lib(a, got)
    np.testing.assert_allclose(got, _reference(a), rtol=1e-5, atol=1e-6)


def test_set_scope_errors():
    x, mx, e, total, out = _row_softmax(4, 8)
    s = te.create_schedule(out.op)
    with pytest.raises(ValueError, match="scope must be global, local or shared"):
        s[e].set_scope("texture")
    with pytest.raises(ValueError, match="is an output"):
        s[out].set_scope("local")
    with pytest.raises(ValueError, match="placeholder"):
        s[x].set_scope("local")
