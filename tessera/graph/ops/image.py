"""Image ops: `resize` (nearest, linear, cubic; every ONNX coordinate transformation mode).

The attributes are ONNX Resize's, made static by the frontend: `size` is the full output
shape, `scales` one scale per axis (the given scales, or size / input size), `roi` one
(start, end) pair per axis for `tf_crop_and_resize`. Interpolation is separable: each axis whose
size or mapping changes is resampled in turn (the same result as ONNX's recursive reference).
"""

from __future__ import annotations

import numpy as np

from tessera.graph.ir import TensorType
from tessera.graph.op import OpKind, register_op
from tessera.graph.ops.common import require_float, type_error
from tessera.topi import image as topi_image

_COORD_MODES = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_half_pixel_for_nn",
    "tf_crop_and_resize",
)
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")

resize = register_op("image.resize", kind=OpKind.INJECTIVE)


@resize.type_rule
def _(
    x: TensorType,
    size,
    scales,
    roi=None,
    mode="nearest",
    coordinate_transformation_mode="half_pixel",
    nearest_mode="round_prefer_floor",
    cubic_coeff_a=-0.75,
    exclude_outside=0,
    extrapolation_value=0.0,
) -> TensorType:
    if mode not in ("nearest", "linear", "cubic"):
        raise type_error("image.resize", f"unknown mode {mode!r}")
    if coordinate_transformation_mode not in _COORD_MODES:
        raise type_error("image.resize", f"unknown mode {coordinate_transformation_mode!r}")
    if nearest_mode not in _NEAREST_MODES:
        raise type_error("image.resize", f"unknown nearest_mode {nearest_mode!r}")
    if len(size) != x.ndim or len(scales) != x.ndim:
        raise type_error("image.resize", f"needs one size and scale per axis of {x}")
    if mode != "nearest":
        require_float("image.resize", x)
    return x.with_shape(tuple(size))


@resize.compute
def _(
    x,
    size,
    scales,
    roi=None,
    mode="nearest",
    coordinate_transformation_mode="half_pixel",
    nearest_mode="round_prefer_floor",
    cubic_coeff_a=-0.75,
    exclude_outside=0,
    extrapolation_value=0.0,
):
    return topi_image.resize(
        x,
        size,
        scales,
        roi,
        mode,
        coordinate_transformation_mode,
        nearest_mode,
        cubic_coeff_a,
        exclude_outside,
        extrapolation_value,
    )


def _source_coords(out_len, in_len, scale, mode, roi):
    x = np.arange(out_len, dtype=np.float64)
    if mode == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        adjustment = out_len / (scale * in_len)
        center = in_len / 2
        return center * (1 - adjustment) + (x + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if out_len > 1 else np.zeros_like(x)
    if mode == "align_corners":
        return x * (in_len - 1) / (out_len - 1) if out_len > 1 else np.zeros_like(x)
    if mode == "asymmetric":
        return x / scale
    if mode == "tf_half_pixel_for_nn":
        return (x + 0.5) / scale
    start, end = roi
    if out_len > 1:
        return start * (in_len - 1) + x * (end - start) * (in_len - 1) / (out_len - 1)
    return np.full_like(x, 0.5 * (start + end) * (in_len - 1))


def _nearest(coords, nearest_mode, in_len):
    if nearest_mode == "round_prefer_floor":
        idx = np.ceil(coords - 0.5)
    elif nearest_mode == "round_prefer_ceil":
        idx = np.floor(coords + 0.5)
    elif nearest_mode == "floor":
        idx = np.floor(coords)
    else:
        idx = np.ceil(coords)
    return [np.clip(idx, 0, in_len - 1).astype(np.int64)], [np.ones_like(coords)]


def _linear(coords, in_len):
    c = np.clip(coords, 0, in_len - 1)
    lo = np.floor(c).astype(np.int64)
    t = c - lo
    return [lo, np.minimum(lo + 1, in_len - 1)], [1 - t, t]


def _cubic(coords, in_len, a, exclude_outside):
    base = np.floor(coords).astype(np.int64)
    t = coords - base
    d = [t + 1, t, 1 - t, 2 - t]  # distance of each of the 4 neighbours
    weights = []
    for s in d:
        s = np.abs(s)
        near = ((a + 2) * s - (a + 3)) * s * s + 1
        far = ((a * s - 5 * a) * s + 8 * a) * s - 4 * a
        weights.append(np.where(s <= 1, near, np.where(s < 2, far, 0.0)))
    idx = [base + k for k in (-1, 0, 1, 2)]
    if exclude_outside:
        weights = [
            np.where((i >= 0) & (i < in_len), w, 0.0) for i, w in zip(idx, weights, strict=True)
        ]
        total = sum(weights)
        weights = [w / total for w in weights]
    return [np.clip(i, 0, in_len - 1) for i in idx], weights


def _resample_axis(x, axis, out_len, scale, roi, attrs):
    in_len = x.shape[axis]
    mode = attrs["coordinate_transformation_mode"]
    coords = _source_coords(out_len, in_len, scale, mode, roi)
    if attrs["mode"] == "nearest":
        idx, weights = _nearest(coords, attrs["nearest_mode"], in_len)
    elif attrs["mode"] == "linear":
        idx, weights = _linear(coords, in_len)
    else:
        idx, weights = _cubic(coords, in_len, attrs["cubic_coeff_a"], attrs["exclude_outside"])
    shape = [1] * x.ndim
    shape[axis] = out_len
    if attrs["mode"] == "nearest":
        out = np.take(x, idx[0], axis=axis)
    else:
        out = sum(
            np.take(x, i, axis=axis) * w.reshape(shape) for i, w in zip(idx, weights, strict=True)
        )
    if mode == "tf_crop_and_resize":
        outside = ((coords < 0) | (coords > in_len - 1)).reshape(shape)
        out = np.where(outside, attrs["extrapolation_value"], out)
    return out


@resize.reference
def _(x, size, scales, roi=None, **attrs):
    attrs = {
        "mode": "nearest",
        "coordinate_transformation_mode": "half_pixel",
        "nearest_mode": "round_prefer_floor",
        "cubic_coeff_a": -0.75,
        "exclude_outside": 0,
        "extrapolation_value": 0.0,
        **attrs,
    }
    out = x.astype(np.float64) if x.dtype.kind == "f" else x
    for axis in range(x.ndim):
        same_mapping = attrs["coordinate_transformation_mode"] != "tf_crop_and_resize"
        if size[axis] == x.shape[axis] and scales[axis] == 1.0 and same_mapping:
            continue
        axis_roi = None if roi is None else (roi[axis], roi[axis + x.ndim])
        out = _resample_axis(out, axis, size[axis], scales[axis], axis_roi, attrs)
    return np.asarray(out).astype(x.dtype)
