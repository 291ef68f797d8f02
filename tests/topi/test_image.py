"""image.resize (graph/ops/image.py) against its numpy reference: every mode and coordinate
transformation, up- and down-sampling, batched per module."""

import numpy as np
import pytest

from tessera import te
from tessera.graph.op import get_op
from tessera.topi import image
from tessera.topi.testing import check_ops

RNG = np.random.default_rng(3)

COORD_MODES = [
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_half_pixel_for_nn",
    "tf_crop_and_resize",
]
NEAREST_MODES = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]
# (input shape, output size): up, down, non-integer ratios, one axis unchanged, size 1
SIZES = [
    ((1, 2, 4, 5), (1, 2, 8, 10)),
    ((1, 1, 6, 9), (1, 1, 4, 4)),
    ((2, 1, 5, 3), (2, 1, 7, 3)),
    ((1, 1, 3, 4), (1, 1, 1, 7)),
]
ROI = (0, 0, 0.2, 0.1, 1, 1, 0.9, 1.05)


def resize_case(shape, size, **attrs):
    x = RNG.uniform(-1, 1, size=shape).astype(attrs.pop("dtype", "float32"))
    scales = tuple(o / i for o, i in zip(size, shape, strict=True))
    if attrs.get("coordinate_transformation_mode") == "tf_crop_and_resize":
        attrs.setdefault("roi", ROI)
        attrs.setdefault("extrapolation_value", -3.0)
    return ("image.resize", [x], {"size": size, "scales": scales, **attrs})


@pytest.mark.parametrize("coord", COORD_MODES)
def test_linear_and_cubic(coord):
    cases = []
    for k, (shape, size) in enumerate(SIZES):
        # cubic kernels (16 taps) are slow to build: one size per mode, each size in turn
        modes = ("linear", "cubic") if k == COORD_MODES.index(coord) % len(SIZES) else ("linear",)
        for mode in modes:
            cases.append(resize_case(shape, size, mode=mode, coordinate_transformation_mode=coord))
    if coord in ("half_pixel", "align_corners", "tf_crop_and_resize"):
        # exclude_outside changes the weights, not the coordinates: three modes cover it
        shape, size = SIZES[0]
        cases.append(
            resize_case(
                shape,
                size,
                mode="cubic",
                coordinate_transformation_mode=coord,
                exclude_outside=1,
                cubic_coeff_a=-0.5,
            )
        )
    check_ops(cases, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("coord", COORD_MODES)
def test_nearest(coord):
    cases = [
        resize_case(
            shape, size, mode="nearest", coordinate_transformation_mode=coord, nearest_mode=nm
        )
        for shape, size in SIZES
        for nm in NEAREST_MODES
    ]
    check_ops(cases)


def test_nearest_of_integers_and_explicit_scales():
    x = RNG.integers(-100, 100, size=(1, 3, 4, 4)).astype("int32")
    u = RNG.integers(0, 255, size=(1, 1, 3, 5)).astype("uint8")
    cases = [
        ("image.resize", [x], {"size": (1, 3, 8, 8), "scales": (1, 1, 2, 2)}),
        # the given scale (2.5) is not size / input size: the coordinates follow the scale
        (
            "image.resize",
            [x],
            {
                "size": (1, 3, 9, 9),
                "scales": (1, 1, 2.5, 2.5),
                "coordinate_transformation_mode": "asymmetric",
            },
        ),
        ("image.resize", [u], {"size": (1, 1, 6, 2), "scales": (1, 1, 2, 0.4)}),
        (
            "image.resize",
            [x],
            {
                "size": (1, 3, 5, 5),
                "scales": (1, 1, 1.25, 1.25),
                "coordinate_transformation_mode": "tf_crop_and_resize",
                "roi": ROI,
                "extrapolation_value": 7.0,
            },
        ),
    ]
    check_ops(cases)


def test_resize_float64_and_rank3_on_both_targets():
    for target in ("llvm", "c"):
        cases = [
            resize_case((2, 5, 3), (2, 9, 3), mode="linear", dtype="float64"),
            resize_case((1, 2, 4, 4), (1, 2, 7, 6), mode="cubic"),
            resize_case((1, 2, 4, 4), (1, 2, 8, 8), mode="nearest"),
        ]
        check_ops(cases, target=target, rtol=1e-5, atol=1e-5)


def test_resize_is_injective_and_checks_mode():
    x = te.placeholder((1, 1, 4, 4), name="x")
    y = get_op("image.resize").rules["compute"](
        x, size=(1, 1, 8, 8), scales=(1, 1, 2, 2), mode="linear"
    )
    assert y.op.tag == "injective" and [int(d.value) for d in y.shape] == [1, 1, 8, 8]
    with pytest.raises(ValueError, match="unknown mode 'area'"):
        image.resize(x, size=(1, 1, 8, 8), scales=(1, 1, 2, 2), mode="area")
