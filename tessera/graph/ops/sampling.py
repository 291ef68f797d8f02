"""Sampling ops: `image.grid_sample` (ONNX GridSample, 1-D to 3-D spatial).

    %y = image.grid_sample(%x, %grid, mode="linear", padding_mode="zeros", align_corners=0)

x is (N, C, *spatial), grid (N, *out_spatial, D) with D = the number of spatial axes, listed
innermost first (x, y, z) and normalized to [-1, 1]. The output is (N, C, *out_spatial). Modes
use ONNX 20's names (nearest, linear, cubic); the frontend maps opset 16's bilinear/bicubic.
"""

from __future__ import annotations

import itertools

import numpy as np

from tessera.graph.ir import TensorType
from tessera.graph.op import OpKind, register_op
from tessera.graph.ops.common import require_float, type_error
from tessera.topi import grid_sample as topi_grid_sample

grid_sample = register_op("image.grid_sample", kind=OpKind.INJECTIVE)


@grid_sample.type_rule
def _(x: TensorType, grid: TensorType, mode="linear", padding_mode="zeros", align_corners=0):
    op = "image.grid_sample"
    if mode not in topi_grid_sample.MODES:
        raise type_error(op, f"unknown mode {mode!r} (nearest, linear, cubic)")
    if padding_mode not in topi_grid_sample.PADDING_MODES:
        raise type_error(op, f"unknown padding_mode {padding_mode!r} (zeros, border, reflection)")
    require_float(op, x)
    require_float(op, grid)
    nd = x.ndim - 2
    if not 1 <= nd <= 3 or grid.ndim != nd + 2 or grid.shape[-1] != nd:
        raise type_error(op, f"grid {grid} does not fit input {x}")
    if grid.shape[0] != x.shape[0]:
        raise type_error(op, f"grid {grid} and input {x} differ in batch size")
    return x.with_shape((*x.shape[:2], *grid.shape[1:-1]))


def _reflect(v, lo, hi):
    span = hi - lo
    if span == 0:
        return np.clip(v, lo, hi)
    out = v.copy()
    for mask, dx, near, far in (
        (v < lo, lo - v, lambda r: lo + r, lambda r: hi - r),
        (v > hi, v - hi, lambda r: hi - r, lambda r: lo + r),
    ):
        n = np.floor(dx / span)
        r = dx - n * span
        out = np.where(mask, np.where(n % 2 == 0, near(r), far(r)), out)
    return out


def _axis_taps(g, size, mode, padding_mode, align_corners):
    """[(int index, weight, inside)] along one axis for every grid point."""
    v = (g + 1) / 2 * (size - 1) if align_corners else ((g + 1) * size - 1) / 2
    lo, hi = (0.0, size - 1.0) if align_corners else (-0.5, size - 0.5)
    if mode == "nearest":
        v = np.rint(v)
    if padding_mode == "border" and mode != "cubic":  # Note [cubic border] in topi.grid_sample
        v = np.where((v < lo) | (v > hi), np.clip(v, 0, size - 1), v)
    elif padding_mode == "reflection":
        v = _reflect(v, lo, hi)
    if mode == "nearest":
        taps = [(v.astype(np.int64), np.ones_like(v))]
    else:
        base = np.floor(v)
        t = v - base
        if mode == "linear":
            taps = [(base, 1 - t), (base + 1, t)]
        else:
            a = -0.75
            s = [t + 1, t, 1 - t, 2 - t]
            near = [((a + 2) * u - (a + 3)) * u * u + 1 for u in s]
            far = [((a * u - 5 * a) * u + 8 * a) * u - 4 * a for u in s]
            taps = [(base + k - 1, far[k] if k in (0, 3) else near[k]) for k in range(4)]
    out = []
    for i, w in taps:
        i = i.astype(np.int64)
        inside = (i >= 0) & (i < size)
        if padding_mode == "reflection":
            i = _reflect(i.astype(np.float64), lo, hi).astype(np.int64)
        out.append((np.clip(i, 0, size - 1), w, inside | (padding_mode != "zeros")))
    return out


@grid_sample.reference
def _(x, grid, mode="linear", padding_mode="zeros", align_corners=0):
    nd = x.ndim - 2
    acc = np.float64 if x.dtype == np.float64 else np.float32
    g = grid.astype(acc)
    per_axis = [
        _axis_taps(g[..., nd - 1 - d], x.shape[2 + d], mode, padding_mode, bool(align_corners))
        for d in range(nd)
    ]
    n = np.arange(x.shape[0]).reshape((-1,) + (1,) * nd)
    out = np.zeros((x.shape[1], *grid.shape[:-1]), acc)
    for combo in itertools.product(*per_axis):
        weight, inside = np.ones(grid.shape[:-1], acc), np.ones(grid.shape[:-1], bool)
        index = []
        for i, w, ok in combo:
            weight, inside = weight * w, inside & ok
            index.append(i)
        picked = x.transpose(1, 0, *range(2, x.ndim))[(slice(None), n, *index)].astype(acc)
        out += np.where(inside, weight * picked, 0)
    return np.moveaxis(out, 0, 1).astype(x.dtype)


@grid_sample.compute
def _(x, grid, mode="linear", padding_mode="zeros", align_corners=0):
    return topi_grid_sample.grid_sample(x, grid, mode, padding_mode, bool(align_corners))
