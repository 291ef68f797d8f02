"""ONNX converters for sampling-grid ops: GridSample and AffineGrid.

GridSample becomes `image.grid_sample` (opset 16's bilinear/bicubic are opset 20's
linear/cubic). AffineGrid is a matmul of theta with the base grid of normalized positions,
a constant when `size` is known.
"""

from __future__ import annotations

import numpy as np

from tessera.frontend.onnx_registry import NodeError, onnx_op

_OLD_MODES = {"bilinear": "linear", "bicubic": "cubic", "nearest": "nearest"}


@onnx_op("GridSample", since=16)
def grid_sample_16(b, X, grid, *, align_corners=0, mode="bilinear", padding_mode="zeros"):
    if mode not in _OLD_MODES:
        raise NodeError(f"unknown mode {mode!r} (bilinear, nearest, bicubic)")
    return grid_sample_20(b, X, grid, align_corners=align_corners, mode=_OLD_MODES[mode],
                          padding_mode=padding_mode)  # fmt: skip


@onnx_op("GridSample", since=20)
def grid_sample_20(b, X, grid, *, align_corners=0, mode="linear", padding_mode="zeros"):
    if grid.type.dtype != X.type.dtype:
        grid = b.call("cast", grid, dtype=X.type.dtype.numpy_name)
    return b.call("image.grid_sample", X, grid, mode=mode, padding_mode=padding_mode,
                  align_corners=int(align_corners))  # fmt: skip


def _base_grid(spatial, align_corners):
    """(prod(spatial), D + 1) homogeneous normalized positions, innermost axis first."""
    axes = []
    for n in spatial:
        if align_corners:
            a = np.linspace(-1, 1, n) if n > 1 else np.zeros(1)
        else:
            a = (np.arange(n) * 2 + 1) / n - 1
        axes.append(a)
    mesh = np.meshgrid(*axes, indexing="ij")
    cols = [m.reshape(-1) for m in reversed(mesh)] + [np.ones(mesh[0].size)]
    return np.stack(cols, axis=1)


@onnx_op("AffineGrid", since=20)
def affine_grid(b, theta, size, *, align_corners=0):
    """grid[n, *pos] = theta[n] @ [x, y, (z,) 1] over the positions of size[2:]."""
    dims = [int(d) for d in b.known(size, "size")]
    if len(dims) not in (4, 5):
        raise NodeError(f"size {dims} must have 4 (2-D) or 5 (3-D) entries")
    n, spatial = dims[0], dims[2:]
    base = _base_grid(spatial, align_corners).astype(theta.type.dtype.numpy_name)
    grid = b.call("matmul", b.const(base), b.call("transpose", theta, axes=(0, 2, 1)))
    return b.reshape(grid, (n, *spatial, len(spatial)))
