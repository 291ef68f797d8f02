"""ONNX converters for sampling-grid ops: GridSample and AffineGrid.

GridSample becomes `image.grid_sample` (opset 16's bilinear/bicubic are opset 20's
linear/cubic). AffineGrid is a matmul of theta with the base grid of normalized positions,
a constant when `size` is known.
"""

from __future__ import annotations

import numpy as np

from tessera.frontend.onnx_registry import NodeError, onnx_op, value_dtype

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


# -- DeformConv (opset 19): bilinear samples at offset positions, then a grouped matmul -------


def _parts(b, v, axis: int, count: int):
    if count == 1:
        return [v]
    out = b.call("split", v, axis=axis, sections=(b.shape_of(v)[axis] // count,) * count)
    return list(out)


@onnx_op("DeformConv", since=19)
def deform_conv(b, X, W, offset, B=None, mask=None, *, dilations=None, group=1,
                kernel_shape=None, offset_group=1, pads=None, strides=None):  # fmt: skip
    """Every kernel tap of every output position samples X bilinearly (zeros outside, as
    GridSample with align_corners=1 does) at its grid position plus its offset, scaled by its
    mask; the samples (N, C * kH * kW, oH * oW) then meet W in one grouped matmul."""
    if X.type.ndim != 4:
        raise NodeError(f"DeformConv supports 2-D inputs (N, C, H, W), got {X.type}")
    n, c, ih, iw = b.shape_of(X)
    oc, icg, kh, kw = b.shape_of(W)
    if kernel_shape is not None and tuple(kernel_shape) != (kh, kw):
        raise NodeError(f"kernel_shape {tuple(kernel_shape)} disagrees with W {W.type}")
    sh, sw = strides or (1, 1)
    dh, dw = dilations or (1, 1)
    pt, pl, pb, pr = pads or (0, 0, 0, 0)
    og, k = offset_group, kh * kw
    if c != icg * group or oc % group or c % og:
        raise NodeError(f"X {X.type}, W {W.type}, group {group} and offset_group {og} disagree")
    _, oc2, oh, ow = b.shape_of(offset)
    if oc2 != og * 2 * k:
        raise NodeError(f"offset {offset.type} needs {og * 2 * k} channels")
    want = ((ih + pt + pb - (kh - 1) * dh - 1) // sh + 1,
            (iw + pl + pr - (kw - 1) * dw - 1) // sw + 1)  # fmt: skip
    if (oh, ow) != want:
        raise NodeError(f"offset {offset.type} must be {want[0]} x {want[1]} (the output size)")
    if ih < 2 or iw < 2:
        raise NodeError(f"DeformConv samples need an input of at least 2 x 2, got {X.type}")
    dtype = value_dtype(X.type.dtype)
    taps_h, taps_w = np.meshgrid(np.arange(kh) * dh, np.arange(kw) * dw, indexing="ij")
    rows = (taps_h.reshape(k, 1, 1) + np.arange(oh).reshape(1, oh, 1) * sh - pt).astype(dtype)
    cols = (taps_w.reshape(k, 1, 1) + np.arange(ow).reshape(1, 1, ow) * sw - pl).astype(dtype)
    off = b.reshape(offset, (n, og, k, 2, oh, ow))
    dy, dx = (b.reshape(v, (n, og, k, oh, ow)) for v in b.call("split", off, axis=3,
                                                                sections=(1, 1)))  # fmt: skip

    def normalized(base, delta, size):  # pixel position -> GridSample's [-1, 1] (align_corners)
        pos = b.call("add", delta, b.const(np.broadcast_to(base, (k, oh, ow)).copy()))
        return b.call("subtract", b.call("multiply", pos, b.scalar(2.0 / (size - 1), pos)),
                      b.scalar(1.0, pos))  # fmt: skip

    y_n, x_n = normalized(rows, dy, ih), normalized(cols, dx, iw)
    grid = b.call("concatenate", b.reshape(x_n, (n, og, k * oh, ow, 1)),
                  b.reshape(y_n, (n, og, k * oh, ow, 1)), axis=4)  # fmt: skip
    weights = None if mask is None else b.reshape(mask, (n, og, 1, k * oh, ow))
    samples = []
    for j, (xg, gg) in enumerate(zip(_parts(b, X, 1, og), _parts(b, grid, 1, og), strict=True)):
        s = b.call("image.grid_sample", xg, b.reshape(gg, (n, k * oh, ow, 2)), mode="linear",
                   padding_mode="zeros", align_corners=1)  # fmt: skip
        if weights is not None:
            mj = _parts(b, weights, 1, og)[j] if og > 1 else weights
            s = b.call("multiply", s, b.reshape(mj, (n, 1, k * oh, ow)))
        samples.append(b.reshape(s, (n, c // og * k, oh * ow)))
    taps = samples[0] if og == 1 else b.call("concatenate", *samples, axis=1)
    taps = b.reshape(taps, (n, group, icg * k, oh * ow))
    w = b.reshape(W, (1, group, oc // group, icg * k))
    y = b.reshape(b.call("matmul", w, taps), (n, oc, oh, ow))
    if B is not None:
        y = b.call("add", y, b.reshape(B, (oc, 1, 1)))
    return y
