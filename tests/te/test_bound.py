"""Bound inference: loop extents through split/fuse, and regions of compute_at stages."""

import numpy as np
import pytest

from tessera import te, tir
from tessera.tir.stmt_functor import collect


def _blur(H, W):
    inp = te.placeholder((H + 2, W + 2), name="inp")
    bx = te.compute(
        (H + 2, W), lambda y, x: (inp[y, x] + inp[y, x + 1] + inp[y, x + 2]) / 3.0, name="blur_x"
    )
    by = te.compute(
        (H, W), lambda y, x: (bx[y, x] + bx[y + 1, x] + bx[y + 2, x]) / 3.0, name="blur_y"
    )
    return inp, bx, by


def _blur_ref(a):
    bx = (a[:, :-2] + a[:, 1:-1] + a[:, 2:]) / 3
    return (bx[:-2] + bx[1:-1] + bx[2:]) / 3


def _ext(r):
    return r.extent.value if isinstance(r.extent, tir.IntImm) else r.extent


def test_split_and_fuse_extents():
    A = te.placeholder((100, 6), name="A")
    B = te.compute((100, 6), lambda i, j: A[i, j], name="B")
    s = te.create_schedule(B.op)
    io, ii = s[B].split(B.op.axis[0], factor=16)
    f = s[B].fuse(ii, B.op.axis[1])
    ranges = te.infer_bound(s).ranges
    assert [_ext(ranges[v]) for v in (io, ii, f)] == [7, 16, 96]


def test_blur_at_consumer_x_region_has_halo(rng, run):
    inp, bx, by = _blur(6, 5)
    s = te.create_schedule(by.op)
    s[bx].compute_at(s[by], by.op.axis[1])
    region = te.infer_bound(s).regions[s[bx]]
    assert [_ext(r) for r in region] == [3, 1]  # 2 larger than the 1x1 consumer point
    assert region[0].min is by.op.axis[0].var
    f = te.lower(s, [inp, by])
    (alloc,) = collect(f.body, lambda x: isinstance(x, tir.Allocate))
    assert [d.value for d in alloc.buffer.shape] == [3, 1]
    a = rng.standard_normal((8, 7), dtype=np.float32)
    _, out = run(f, a, np.zeros((6, 5), np.float32))
    np.testing.assert_allclose(out, _blur_ref(a), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("H,W", [(16, 16), (13, 11)])
def test_blur_tiled_region_is_tile_plus_two(rng, run, H, W):
    inp, bx, by = _blur(H, W)
    s = te.create_schedule(by.op)
    yo, xo, yi, xi = s[by].tile(by.op.axis[0], by.op.axis[1], 8, 4)
    s[bx].compute_at(s[by], xo)
    region = te.infer_bound(s).regions[s[bx]]
    assert [_ext(r) for r in region] == [10, 4]
    f = te.lower(s, [inp, by])
    a = rng.standard_normal((H + 2, W + 2), dtype=np.float32)
    _, out = run(f, a, np.zeros((H, W), np.float32))
    np.testing.assert_allclose(out, _blur_ref(a), rtol=1e-5, atol=1e-6)


def test_compute_at_inner_loop_after_reorder(rng, run):
    inp, bx, by = _blur(8, 8)
    s = te.create_schedule(by.op)
    y, x = by.op.axis
    s[by].reorder(x, y)
    s[bx].compute_at(s[by], x)  # y stays inside: the whole column plus the halo
    region = te.infer_bound(s).regions[s[bx]]
    assert [_ext(r) for r in region] == [10, 1]
    f = te.lower(s, [inp, by])
    a = rng.standard_normal((10, 10), dtype=np.float32)
    _, out = run(f, a, np.zeros((8, 8), np.float32))
    np.testing.assert_allclose(out, _blur_ref(a), rtol=1e-5, atol=1e-6)


def test_attach_loop_that_was_split_is_an_error():
    inp, bx, by = _blur(8, 8)
    s = te.create_schedule(by.op)
    s[bx].compute_at(s[by], by.op.axis[0])
    s[by].split(by.op.axis[0], factor=2)
    with pytest.raises(ValueError, match="no longer a loop"):
        te.lower(s, [inp, by])


def test_attached_stage_with_another_consumer_is_an_error():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] + 1, name="B")
    C = te.compute((8,), lambda i: B[i] * 2, name="C")
    D = te.compute((8,), lambda i: B[i] + C[i], name="D")
    s = te.create_schedule(D.op)
    s[B].compute_at(s[C], C.op.axis[0])
    with pytest.raises(ValueError, match="also read by D"):
        te.lower(s, [A, D])
