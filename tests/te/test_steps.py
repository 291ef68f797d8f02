"""Schedules as data: step records, their text, JSON round trip, and replay."""

import pytest

from tessera import te
from tessera.ir import structural_equal


def _matmul(n=64):
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def _schedule(s, A, B, C):
    CC = s.cache_write(C, "local")
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], 16, 16)
    f = s[C].fuse(xo, yo)
    s[C].parallel(f)
    s[CC].compute_at(s[C], f)
    xc, yc = s[CC].op.axis
    (kc,) = s[CC].op.reduce_axis
    ko, ki = s[CC].split(kc, factor=4)
    s[CC].reorder(ko, xc, ki, yc)
    s[CC].unroll(ki)
    s[CC].vectorize(yc)
    s[C].pragma(xi, "auto_unroll_max_step", 8)
    AA = s.cache_read(A, "local", [CC])
    s[AA].compute_at(s[CC], ko)


def test_steps_read_like_the_calls():
    A, B, C = _matmul()
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=64)
    s[C].reorder(xi, xo)
    s[C].vectorize(xo)
    assert [str(st) for st in s.steps] == [
        "split(C, i, factor=64)",
        "reorder(C, i.inner, i.outer)",
        "vectorize(C, i.outer)",
    ]
    assert str(s) == "\n".join(str(st) for st in s.steps)
    assert s.steps[0] == te.Split("C", "i", 64, None)


def test_tile_is_one_step():
    A, B, C = _matmul()
    s = te.create_schedule(C.op)
    s[C].tile(C.op.axis[0], C.op.axis[1], 8, 4)
    assert [str(st) for st in s.steps] == ["tile(C, i=8, j=4)"]


def test_replay_gives_the_same_ir():
    A, B, C = _matmul()
    s1 = te.create_schedule(C.op)
    _schedule(s1, A, B, C)
    s2 = te.create_schedule(C.op).replay(s1.steps)
    assert s2.steps == s1.steps
    assert structural_equal(te.lower(s1, [A, B, C]), te.lower(s2, [A, B, C]))


def test_json_round_trip_and_replay():
    A, B, C = _matmul()
    s1 = te.create_schedule(C.op)
    _schedule(s1, A, B, C)
    text = s1.steps_json()
    steps = te.steps_from_json(text)
    assert steps == s1.steps and te.steps_to_json(steps) == text
    s2 = te.create_schedule(C.op).apply_steps(steps)
    assert structural_equal(te.lower(s1, [A, B, C]), te.lower(s2, [A, B, C]))


def test_replay_on_a_fresh_compute_of_the_same_shape():
    A, B, C = _matmul()
    s1 = te.create_schedule(C.op)
    _schedule(s1, A, B, C)
    A2, B2, C2 = _matmul()  # new tensors, same names: a tuner's stored record applies
    s2 = te.create_schedule(C2.op).replay(te.steps_from_json(s1.steps_json()))
    assert structural_equal(te.lower(s1, [A, B, C]), te.lower(s2, [A2, B2, C2]))


def test_bad_records():
    with pytest.raises(ValueError, match="not a schedule step"):
        te.steps_from_json('[{"kind": "teleport"}]')
    with pytest.raises(ValueError, match="no field"):
        te.steps_from_json('[{"kind": "split", "stage": "C", "iv": "i", "bogus": 1}]')
    A, B, C = _matmul()
    s = te.create_schedule(C.op)
    with pytest.raises(ValueError, match="no stage named 'D'"):
        s.replay([te.Split("D", "i", 4, None)])
    with pytest.raises(ValueError, match="no iteration variable named 'q'"):
        s.replay([te.Split("C", "q", 4, None)])
    s[C].split(C.op.axis[0], factor=te.var("f"))
    with pytest.raises(ValueError, match="cannot be stored as JSON"):
        s.steps_json()
