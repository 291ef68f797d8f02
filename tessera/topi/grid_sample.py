"""GridSample as a te compute: sample x (N, C, *spatial) at the normalized points of a grid
(N, *out_spatial, D), for 1 to 3 spatial axes.

    y = topi.grid_sample.grid_sample(x, grid, mode="linear", padding_mode="zeros",
                                     align_corners=False)

Per spatial axis (the grid's last axis lists them innermost first: x, then y, then z) the
point is denormalized, then, outside the border, clamped ("border") or reflected
("reflection"); "nearest" rounds half to even first, as ONNX's reference does. Each tap of the
separable kernel (1 nearest, 2 linear, 4 cubic with a = -0.75) reads x at its integer position
under the padding mode: 0 outside ("zeros"), clamped, or reflected again. The output sums
weight products over all tap combinations (2^D or 4^D loads).

Note [cubic border]: with "border" padding, cubic mode clamps each tap's index but not the
point itself, as ONNX Runtime and PyTorch do (ONNX's Python reference clamps the point too;
its node tests do not cover the case, and models come from PyTorch and are checked on ORT).
"""

from __future__ import annotations

import itertools

from tessera import te
from tessera.tir.expr import Expr

MODES = ("nearest", "linear", "cubic")
PADDING_MODES = ("zeros", "border", "reflection")
_CUBIC_A = -0.75
STAGE = "grid_sample_stage"  # not "injective": these stages are not inlined


def _c(v: float, dtype) -> Expr:
    return te.const(float(v), dtype)


def _borders(size: int, align_corners: bool) -> tuple[float, float]:
    return (0.0, size - 1.0) if align_corners else (-0.5, size - 0.5)


def _reflect(v: Expr, lo: float, hi: float) -> Expr:
    """Reflect v by the near border until it lies in [lo, hi] (ONNX's _gs_reflect)."""
    dt = v.dtype
    span = _c(hi - lo, dt)

    def fold(dx, near, far):
        n = te.floor(dx / span)
        r = dx - n * span
        even = te.floormod(te.cast(n, "int64"), te.const(2, "int64")) == te.const(0, "int64")
        return te.select(even, near(r), far(r))

    below = fold(_c(lo, dt) - v, lambda r: _c(lo, dt) + r, lambda r: _c(hi, dt) - r)
    above = fold(v - _c(hi, dt), lambda r: _c(hi, dt) - r, lambda r: _c(lo, dt) + r)
    if hi == lo:
        return te.max(te.min(v, _c(hi, dt)), _c(lo, dt))
    return te.select(v < _c(lo, dt), below, te.select(v > _c(hi, dt), above, v))


def _round_half_even(v: Expr) -> Expr:
    dt = v.dtype
    f = te.floor(v)
    diff = v - f
    up = te.select(diff > _c(0.5, dt), f + _c(1, dt), f)
    odd = te.floormod(te.cast(f, "int64"), te.const(2, "int64")) == te.const(1, "int64")
    tie = te.select(odd, f + _c(1, dt), f)
    return te.select(diff == _c(0.5, dt), tie, up)


def _coord(g: Expr, size: int, mode: str, padding_mode: str, align_corners: bool) -> Expr:
    """The sampling position along one axis, in input pixels."""
    dt = g.dtype
    if align_corners:
        v = (g + _c(1, dt)) / _c(2, dt) * _c(size - 1, dt)
    else:
        v = ((g + _c(1, dt)) * _c(size, dt) - _c(1, dt)) / _c(2, dt)
    if mode == "nearest":
        v = _round_half_even(v)
    lo, hi = _borders(size, align_corners)
    if padding_mode == "border" and mode != "cubic":  # Note [cubic border]
        v = te.select(te.logical_or(v < _c(lo, dt), v > _c(hi, dt)),
                      te.max(te.min(v, _c(size - 1, dt)), _c(0, dt)), v)  # fmt: skip
    elif padding_mode == "reflection":
        v = _reflect(v, lo, hi)
    return v


def _cubic_weights(t: Expr) -> list[Expr]:
    a, dt = _CUBIC_A, t.dtype

    def near(s):
        return ((_c(a + 2, dt) * s - _c(a + 3, dt)) * s) * s + _c(1, dt)

    def far(s):
        return ((_c(a, dt) * s - _c(5 * a, dt)) * s + _c(8 * a, dt)) * s - _c(4 * a, dt)

    one = _c(1, dt)
    return [far(t + one), near(t), near(one - t), far(_c(2, dt) - t)]


def _taps(v: Expr, mode: str) -> list[tuple[Expr, Expr]]:
    """(int32 position, weight) of each tap along one axis."""
    if mode == "nearest":
        return [(te.cast(v, "int32"), _c(1, v.dtype))]
    base = te.floor(v)
    t = v - base
    i0 = te.cast(base, "int32")
    if mode == "linear":
        return [(i0, _c(1, v.dtype) - t), (i0 + 1, t)]
    return [(i0 + (k - 1), w) for k, w in enumerate(_cubic_weights(t))]


def _pixel_index(i: Expr, size: int, padding_mode: str, align_corners: bool, dt):
    """(index to load, whether the tap is inside) under the padding mode."""
    inside = te.logical_and(i >= 0, i < size)
    if padding_mode == "zeros":
        return te.max(te.min(i, size - 1), 0), inside
    if padding_mode == "border":
        return te.max(te.min(i, size - 1), 0), te.const(True)
    lo, hi = _borders(size, align_corners)
    r = te.cast(_reflect(te.cast(i, dt), lo, hi), "int32")
    return te.max(te.min(r, size - 1), 0), te.const(True)


def _axis_stages(grid, d, nd, size, mode, padding_mode, align_corners, acc):
    """[(index tensor, weight tensor)] per tap along spatial axis d, each over (N, *out).
    They are separate stages (Note [grid stages]); a tap outside under "zeros" weighs 0."""
    shape = grid.shape[:-1]
    axis = te.const(nd - 1 - d, "int32")

    def coord(n, *o):
        return _coord(te.cast(grid(n, *o, axis), acc), size, mode, padding_mode, align_corners)

    v = te.compute(shape, coord, name=f"grid_coord{d}", tag=STAGE)
    stages = []
    for k in range(len(_taps(te.const(0.0, acc), mode))):

        def index(*p, k=k):
            i, _ = _taps(v(*p), mode)[k]
            return _pixel_index(i, size, padding_mode, align_corners, acc)[0]

        def weight(*p, k=k):
            i, w = _taps(v(*p), mode)[k]
            _, inside = _pixel_index(i, size, padding_mode, align_corners, acc)
            return te.select(inside, w, _c(0, acc))

        stages.append((
            te.compute(shape, index, name=f"grid_index{d}_{k}", tag=STAGE),
            te.compute(shape, weight, name=f"grid_weight{d}_{k}", tag=STAGE),
        ))  # fmt: skip
    return stages


def grid_sample(x, grid, mode="linear", padding_mode="zeros", align_corners=False):
    """Note [grid stages]: the coordinate of each axis and the index and weight of each tap are
    stages of their own, computed once per output point (not per channel) and read by the
    final sum; inlined, the shared coordinate expressions would be copied into every tap
    combination and the expression tree would grow as (taps per axis)^D."""
    if mode not in MODES or padding_mode not in PADDING_MODES:
        raise ValueError(f"grid_sample: unknown mode {mode!r} or padding_mode {padding_mode!r}")
    nd = x.ndim - 2
    spatial = [int(d.value) for d in x.shape[2:]]
    acc = "float64" if x.dtype.bits == 64 else "float32"
    per_axis = [
        _axis_stages(grid, d, nd, spatial[d], mode, padding_mode, bool(align_corners), acc)
        for d in range(nd)
    ]
    out_shape = (*x.shape[:2], *grid.shape[1:-1])

    def body(n, c, *o):
        total = None
        for combo in itertools.product(*per_axis):
            weight = None
            for _, w in combo:
                weight = w(n, *o) if weight is None else weight * w(n, *o)
            term = weight * te.cast(x(n, c, *[i(n, *o) for i, _ in combo]), acc)
            total = term if total is None else total + term
        return te.cast(total, x.dtype)

    return te.compute(out_shape, body, name="grid_sample", tag="grid_sample")
