"""Resize and Upsample across opsets, modes and coordinate transformations, against ORT."""

import numpy as np
import pytest

from tessera.frontend.testing import check_node

R = np.random.default_rng(2)
X = R.standard_normal((1, 2, 4, 5)).astype(np.float32)
EMPTY = np.zeros(0, np.float32)

COORD = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "half_pixel_symmetric"]


@pytest.mark.parametrize("coord", COORD)
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("scales", [(1, 1, 2, 1.5), (1, 1, 0.5, 0.6)])
def test_resize_scales(coord, mode, scales):
    inputs = {"x": X, "const_roi": EMPTY, "const_scales": np.array(scales, np.float32)}
    check_node("Resize", inputs, {"mode": mode, "coordinate_transformation_mode": coord}, opset=19)


@pytest.mark.parametrize(
    "nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]
)
def test_resize_sizes_nearest_modes(nearest_mode):
    inputs = {"x": X, "const_roi": EMPTY, "const_scales": EMPTY,
              "const_sizes": np.array([1, 2, 7, 3], np.int64)}  # fmt: skip
    attrs = {"mode": "nearest", "nearest_mode": nearest_mode}
    check_node("Resize", inputs, attrs, opset=13)


def test_resize_cubic_options_and_crop():
    inputs = {"x": X, "const_roi": EMPTY, "const_scales": np.array([1, 1, 2, 2], np.float32)}
    check_node("Resize", inputs, {"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": 1})
    roi = np.array([0, 0, 0.2, 0.1, 1, 1, 0.9, 1.2], np.float32)
    inputs = {"x": X, "const_roi": roi, "const_scales": EMPTY,
              "const_sizes": np.array([1, 2, 5, 6], np.int64)}  # fmt: skip
    attrs = {"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize",
             "extrapolation_value": -3.0}  # fmt: skip
    check_node("Resize", inputs, attrs, opset=13)


def test_resize_axes_opset_18():
    inputs = {"x": X, "const_roi": EMPTY, "const_scales": np.array([2, 3], np.float32)}
    check_node("Resize", inputs, {"mode": "linear", "axes": [2, 3]}, opset=18)


def test_resize_10_and_upsample():
    scales = np.array([1, 1, 2, 3], np.float32)
    check_node("Resize", {"x": X, "const_s": scales}, {"mode": "nearest"}, opset=10)
    check_node("Resize", {"x": X, "const_s": scales}, {"mode": "linear"}, opset=10)
    check_node("Upsample", {"x": X, "const_s": scales}, {"mode": "nearest"}, opset=9)
    check_node("Upsample", {"x": X}, {"mode": "linear", "scales": [1.0, 1.0, 2.0, 2.0]}, opset=7)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("exclude", [0, 1])
def test_resize_antialias(mode, exclude):
    """antialias=1: the filter stretched by 1/scale when downsampling (one axis up, two down)."""
    x = R.standard_normal((1, 2, 9, 11)).astype(np.float32)
    attrs = {"mode": mode, "antialias": 1, "exclude_outside": exclude}
    scales = np.array([1, 1, 0.4, 0.7], np.float32)
    check_node("Resize", {"x": x, "const_roi": EMPTY, "const_scales": scales}, attrs, opset=18)
    sizes = {"x": x, "const_roi": EMPTY, "const_scales": EMPTY,
             "const_sizes": np.array([1, 2, 13, 4], np.int64)}  # fmt: skip
    check_node("Resize", sizes, attrs, opset=18)
