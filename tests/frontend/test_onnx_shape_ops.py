"""ONNX converter tests for shape and data-movement ops, and their version differences."""

import numpy as np
import pytest

from tessera.frontend.testing import check_node

R = np.random.default_rng(1)


def f32(*shape):
    return R.standard_normal(shape).astype(np.float32)


def i64(*values):
    return np.array(values, np.int64)


def test_reshape_flatten_transpose():
    check_node("Reshape", {"x": f32(2, 3, 4), "const_s": i64(0, -1)})
    check_node("Reshape", {"x": f32(2, 3, 4), "const_s": i64(4, 0, 2)}, {"allowzero": 0}, opset=14)
    for axis in (0, 1, 2, -1):
        check_node("Flatten", {"x": f32(2, 3, 4)}, {"axis": axis})
    check_node("Transpose", {"x": f32(2, 3, 4)})
    check_node("Transpose", {"x": f32(2, 3, 4)}, {"perm": [1, 2, 0]})


@pytest.mark.parametrize("opset", [11, 13])
def test_squeeze_unsqueeze_versions(opset):
    x = f32(1, 3, 1, 4)
    if opset < 13:
        check_node("Squeeze", {"x": x}, {"axes": [0, -2]}, opset=opset)
        check_node("Unsqueeze", {"x": f32(3, 4)}, {"axes": [0, -1]}, opset=opset)
    else:
        check_node("Squeeze", {"x": x, "const_a": i64(0, -2)}, opset=opset)
        check_node("Unsqueeze", {"x": f32(3, 4), "const_a": i64(0, -1)}, opset=opset)
    check_node("Squeeze", {"x": x}, opset=opset)


def test_concat():
    check_node("Concat", {"a": f32(2, 3), "b": f32(2, 1), "c": f32(2, 2)}, {"axis": -1})


@pytest.mark.parametrize("opset", [11, 13, 18])
def test_split_versions(opset):
    x = f32(6, 4)
    if opset < 13:
        check_node("Split", {"x": x}, {"axis": 0, "split": [1, 2, 3]}, opset=opset, n_outputs=3)
    else:
        check_node("Split", {"x": x, "const_s": i64(1, 2, 3)}, opset=opset, n_outputs=3)
    if opset < 18:
        check_node("Split", {"x": x}, {"axis": 1}, opset=opset, n_outputs=2)
    else:
        check_node("Split", {"x": f32(7, 2)}, {"num_outputs": 3}, opset=opset, n_outputs=3)


@pytest.mark.parametrize(
    "starts,ends,axes,steps",
    [((1,), (3,), (0,), None), ((0, 1), (10, -1), None, None), ((-1,), (-10**18,), (1,), (-1,)),
     ((5, 0), (0, 3), (0, 1), (-2, 2)), ((1,), (2**63 - 1,), (-1,), (2,))],
)  # fmt: skip
def test_slice(starts, ends, axes, steps):
    inputs = {"x": f32(6, 5, 4), "const_s": i64(*starts), "const_e": i64(*ends)}
    if axes is not None:
        inputs["const_a"] = i64(*axes)
    if steps is not None:
        inputs["const_t"] = i64(*steps)
    check_node("Slice", inputs, opset=13)


def test_slice_opset_1_attributes():
    check_node("Slice", {"x": f32(6, 5)}, {"starts": [1, 0], "ends": [4, -1]}, opset=9)
    check_node("Slice", {"x": f32(6, 5)}, {"starts": [1], "ends": [100], "axes": [1]}, opset=9)


def test_gathers():
    check_node("Gather", {"x": f32(5, 4), "i": i64(0, -1, 3, 3)})
    check_node(
        "Gather", {"x": f32(5, 4, 3), "i": np.array([[0, 1], [2, -3]], np.int64)}, {"axis": 1}
    )
    check_node("GatherElements", {"x": f32(3, 4), "i": R.integers(-4, 4, (3, 2))}, {"axis": 1})
    check_node("GatherND", {"x": f32(3, 4, 2), "i": np.array([[0, 1], [2, 3]], np.int64)})
    check_node(
        "GatherND", {"x": f32(2, 4, 3), "i": np.array([[1], [3]], np.int64)}, {"batch_dims": 1}
    )


def test_expand_tile():
    check_node("Expand", {"x": f32(3, 1), "const_s": i64(2, 3, 4)})
    check_node("Expand", {"x": f32(2, 3, 4), "const_s": i64(3, 1)})
    check_node("Tile", {"x": f32(2, 3), "const_r": i64(2, 3)})


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_versions(mode):
    x = f32(1, 2, 4, 5)
    pads = [0, 0, 1, 2, 0, 0, 2, 1]
    if mode != "wrap":
        check_node("Pad", {"x": x}, {"mode": mode, "pads": pads, "value": 1.5}, opset=7)
    inputs = {"x": x, "const_p": i64(*pads)}
    if mode == "constant":
        inputs["const_v"] = np.array(1.5, np.float32)
    check_node("Pad", inputs, {"mode": mode}, opset=19)
    # axes input (opset 18) and negative pads (cropping)
    inputs = {"x": x, "const_p": i64(1, -1, 2, 0), "const_v": np.array(0, np.float32),
              "const_a": i64(1, 3)}  # fmt: skip
    check_node("Pad", inputs, opset=18)


def test_constants_and_generators():
    from onnx import helper

    check_node("ConstantOfShape", {"const_s": i64(2, 3)},
               {"value": helper.make_tensor("v", 7, [1], [5])})  # fmt: skip
    check_node("Range", {"const_a": np.array(1.0, np.float32), "const_b": np.array(7.0, np.float32),
                         "const_c": np.array(1.5, np.float32)})  # fmt: skip
    check_node("EyeLike", {"x": f32(3, 4)}, {"k": 1})
    check_node("OneHot", {"i": np.array([[0, 2], [-1, 1]], np.int64), "const_d": i64(3),
                          "const_v": np.array([0.5, 2.0], np.float32)}, {"axis": 1})  # fmt: skip
    check_node("Trilu", {"x": f32(4, 5), "const_k": i64(1)}, {"upper": 0})
    check_node("Shape", {"x": f32(2, 3, 4)}, {"start": 1}, opset=15)
    check_node("Size", {"x": f32(2, 3, 4)})
    check_node("NonZero", {"const_x": np.array([[1, 0], [0, 3]], np.float32)})


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_space(mode):
    check_node("DepthToSpace", {"x": f32(1, 8, 2, 3)}, {"blocksize": 2, "mode": mode})
    check_node("SpaceToDepth", {"x": f32(1, 2, 4, 6)}, {"blocksize": 2})
