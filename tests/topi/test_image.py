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


# Note [nearest by division]: nearest axes whose source index is floor(o * p / q) take the
# affine index instead of a table; vectors of outputs read one load and a shuffle (Note
# [repeated lanes] in codegen/llvm/emitter.py)
DIVISION = [
    ((1, 3, 7, 17), (1, 3, 14, 34), "asymmetric", "floor"),  # x2, a row of 4 vectors and a tail
    ((1, 2, 5, 11), (1, 2, 15, 33), "asymmetric", "round_prefer_floor"),  # x3
    ((1, 2, 3, 9), (1, 2, 12, 36), "half_pixel", "round_prefer_floor"),  # x4
    ((1, 2, 6, 40), (1, 2, 3, 20), "asymmetric", "floor"),  # /2: lanes two apart
    ((1, 1, 9, 51), (1, 1, 3, 17), "asymmetric", "round_prefer_ceil"),  # /3
    ((1, 1, 9, 51), (1, 1, 3, 17), "half_pixel", "round_prefer_floor"),  # 3 o + 1
    ((1, 2, 7, 21), (1, 2, 11, 33), "asymmetric", "floor"),  # 7 o // 11 rows, 21 -> 33 columns
    ((2, 5, 4, 3), (2, 5, 8, 6), "asymmetric", "floor"),  # rows shorter than a vector
]


@pytest.mark.parametrize("schedule_target", ["generic", "x86"])
def test_nearest_by_division_matches_the_reference(schedule_target):
    cases = [
        resize_case(shape, size, mode="nearest", coordinate_transformation_mode=c, nearest_mode=n)
        for shape, size, c, n in DIVISION
    ]
    u8 = RNG.integers(0, 255, size=(1, 2, 5, 13)).astype("uint8")
    attrs = {"size": (1, 2, 10, 26), "scales": (1, 1, 2, 2)}
    cases.append(("image.resize", [u8], {**attrs, "coordinate_transformation_mode": "asymmetric"}))
    check_ops(cases, schedule_target=schedule_target)


def _tables(shape, size, coord, nearest, scale=None):
    x = te.placeholder(shape, name="x")
    scales = tuple(o / i for o, i in zip(size, shape, strict=True))
    scales = scales if scale is None else (*scales[:2], scale, scale)
    y = image.resize(x, size, scales, mode="nearest", coordinate_transformation_mode=coord,
                     nearest_mode=nearest)  # fmt: skip
    found = []

    def visit(t):
        if getattr(t.op, "tag", None) == "resize_table":
            found.append(t.op.name)
        for s in getattr(t.op, "input_tensors", []):
            visit(s)

    visit(y)
    return found


def test_nearest_by_division_needs_no_table():
    assert _tables((1, 3, 7, 17), (1, 3, 14, 34), "asymmetric", "floor") == []
    assert _tables((1, 2, 6, 40), (1, 2, 3, 20), "asymmetric", "floor") == []
    assert _tables((1, 1, 7, 7), (1, 1, 11, 11), "asymmetric", "floor") == []  # 7 o // 11
    assert _tables((1, 1, 9, 9), (1, 1, 3, 3), "half_pixel", "round_prefer_floor") == []  # 3 o + 1
    # x2 with round_prefer_ceil on asymmetric coordinates: (o + 1) // 2 but for the last output,
    # clamped to the edge: the table stays
    assert _tables((1, 1, 4, 4), (1, 1, 8, 8), "asymmetric", "round_prefer_ceil") != []
    assert _tables((1, 1, 7, 7), (1, 1, 11, 11), "half_pixel", "round_prefer_floor") == []
    # a scale that is not size / input size (2.5 for 4 -> 9): floor(0.4 o) is 0, 0, 0, 1, 1, 2,
    # 2, 2, 3, no floor((4 o + r) / 9): the table stays
    assert _tables((1, 1, 4, 4), (1, 1, 9, 9), "asymmetric", "floor", scale=2.5) != []


def test_nearest_x2_reads_whole_vectors_not_lane_by_lane():
    """Note [nearest by division]: the x86 kernel of a nearest x2 has no per-lane inserts (the
    table's gather was 8 vinsertps a vector)."""
    from tessera.target import Target
    from tessera.topi.testing import build_cases

    target = Target("llvm -mcpu=haswell")
    attrs = {"coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
    case = resize_case((1, 4, 9, 34), (1, 4, 18, 68), mode="nearest", **attrs)
    mod, _ = build_cases([case], target, "x86")
    asm = mod.get_source("asm")
    assert "vinsertps" not in asm and "vpinsrd" not in asm
