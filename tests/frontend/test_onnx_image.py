"""GridSample (opsets 16 and 20), AffineGrid, RoiAlign, MaxRoiPool and GlobalLpPool against
ONNX Runtime; GridSample, RoiAlign and MaxRoiPool compiled."""

import numpy as np
import pytest
from onnx import helper

import tessera
from tessera.frontend import from_onnx
from tessera.frontend.testing import check_node, make_model, run_ort

R = np.random.default_rng(13)


@pytest.mark.parametrize("align", [0, 1])
@pytest.mark.parametrize("nd", [2, 3])
def test_affine_grid(nd, align):
    theta = R.standard_normal((2, nd, nd + 1)).astype(np.float32)
    size = np.array([2, 3, 4, 5, 6][: nd + 2], np.int64)
    check_node("AffineGrid", {"theta": theta, "const_size": size}, {"align_corners": align},
               opset=20)  # fmt: skip


def test_grid_sample_opset16_names_and_compiled():
    x = R.standard_normal((1, 2, 5, 6)).astype(np.float32)
    grid = R.uniform(-1.2, 1.2, (1, 4, 3, 2)).astype(np.float32)
    feeds = {"x": x, "g": grid}
    node = helper.make_node("GridSample", ["x", "g"], ["y"], mode="bicubic",
                            padding_mode="border")  # fmt: skip
    model = make_model([node], feeds, ["y"], opset=16)
    mod, params = from_onnx(model)
    lib = tessera.build(mod, target="llvm", params=params)
    m = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))
    m.set_input("x", x)
    m.set_input("g", grid)
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), run_ort(model, feeds)[0], rtol=1e-4,
                               atol=1e-5)  # fmt: skip


def test_affine_grid_into_grid_sample():
    """The spatial-transformer pattern: AffineGrid feeding GridSample."""
    x = R.standard_normal((2, 3, 4, 5)).astype(np.float32)
    theta = (np.eye(2, 3)[None] + 0.1 * R.standard_normal((2, 2, 3))).astype(np.float32)
    nodes = [helper.make_node("AffineGrid", ["theta", "size"], ["g"]),
             helper.make_node("GridSample", ["x", "g"], ["y"])]  # fmt: skip
    inits = {"size": np.array([2, 3, 4, 5], np.int64)}
    model = make_model(nodes, {"x": x, "theta": theta}, ["y"], inits, opset=20)
    from tessera.frontend.testing import check_model

    check_model(model, {"x": x, "theta": theta})


def test_unknown_mode_is_a_clear_error():
    node = helper.make_node("GridSample", ["x", "g"], ["y"], mode="area")
    feeds = {"x": np.zeros((1, 1, 2, 2), np.float32), "g": np.zeros((1, 1, 1, 2), np.float32)}
    with pytest.raises(ValueError, match="unknown mode 'area'"):
        from_onnx(make_model([node], feeds, ["y"], opset=16))


def test_deform_conv_against_onnx_reference(with_mask=True):
    """Groups, offset groups, strides, dilations and pads, compiled; against onnx.reference
    (ONNX Runtime has no CPU DeformConv)."""
    from onnx import TensorProto
    from onnx.reference import ReferenceEvaluator

    from tessera.frontend import onnx_backend

    x = R.standard_normal((2, 4, 7, 6)).astype(np.float32)
    w = R.standard_normal((6, 2, 3, 2)).astype(np.float32)
    oh, ow = 3, 6  # (7 + 1 + 1 - 5) // 2 + 1, (6 + 0 + 1 - 2) // 1 + 1
    offset = (1.5 * R.standard_normal((2, 2 * 2 * 6, oh, ow))).astype(np.float32)
    feeds = {"x": x, "w": w, "offset": offset, "bias": R.standard_normal(6).astype(np.float32)}
    names = ["x", "w", "offset", "bias"]
    if with_mask:
        feeds["mask"] = R.random((2, 2 * 6, oh, ow)).astype(np.float32)
        names.append("mask")
    node = helper.make_node("DeformConv", names, ["y"], group=2, offset_group=2,
                            strides=[2, 1], dilations=[2, 1], pads=[1, 0, 1, 1])  # fmt: skip
    model = make_model([node], feeds, ["y"], opset=19)
    model.graph.output[0].type.tensor_type.elem_type = TensorProto.FLOAT
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    got = onnx_backend.prepare(model).run(feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode,coord", [("avg", "half_pixel"), ("max", "output_half_pixel")])
def test_roi_align_matches_ort(mode, coord):
    """ROIs inside, across and beyond the map, a spatial scale, compiled; against ORT."""
    from tessera.frontend import onnx_backend

    x = R.standard_normal((2, 3, 10, 8)).astype(np.float32)
    rois = np.array([[0, 0, 9, 9], [2.5, 1, 14, 20], [-3, -2, 4, 3], [6, 6, 6.5, 6.2]], np.float32)
    feeds = {"x": x, "rois": rois, "idx": np.array([0, 1, 1, 0], np.int64)}
    node = helper.make_node("RoiAlign", ["x", "rois", "idx"], ["y"], mode=mode,
                            coordinate_transformation_mode=coord, output_height=3,
                            output_width=4, sampling_ratio=2, spatial_scale=0.5)  # fmt: skip
    model = make_model([node], feeds, ["y"], opset=16)
    got = onnx_backend.prepare(model).run(feeds)[0]
    np.testing.assert_allclose(got, run_ort(model, feeds)[0], rtol=1e-4, atol=1e-5)


def test_roi_align_adaptive_sampling_is_a_clear_error():
    feeds = {"x": np.zeros((1, 1, 4, 4), np.float32), "rois": np.zeros((1, 4), np.float32),
             "idx": np.zeros(1, np.int64)}  # fmt: skip
    node = helper.make_node("RoiAlign", ["x", "rois", "idx"], ["y"])
    with pytest.raises(ValueError, match="sampling_ratio=0 .* is not supported"):
        from_onnx(make_model([node], feeds, ["y"], opset=16))


def _rois(k, batches, extent):
    """k ROIs (batch, x1, y1, x2, y2) inside, across and beyond a map of `extent` pixels, and
    a malformed one (x2 < x1) whose corners round half away from zero."""
    corners = R.uniform(-4, extent + 4, (k, 4))
    lo, hi = np.minimum(corners[:, :2], corners[:, 2:]), np.maximum(corners[:, :2], corners[:, 2:])
    rois = np.concatenate([R.integers(0, batches, (k, 1)), lo, hi], 1).astype(np.float32)
    rois[0, 1:] = [2.5, 1.5, 0.5, 0.49999997]
    return rois


@pytest.mark.parametrize(
    "shape,pooled,scale",
    [((2, 3, 10, 12), (2, 3), 0.5), ((1, 4, 7, 7), (3, 3), 1.0), ((3, 2, 16, 9), (4, 2), 0.25),
     ((1, 1, 5, 6), (7, 7), 1.0)],
)  # fmt: skip
def test_max_roi_pool_matches_ort(shape, pooled, scale):
    """Compiled and interpreted, against ORT, on signed maps: bins of only negative values
    give their (negative) max, as ORT 1.32 does (an older ORT kernel started each max at
    FLT_MIN, the smallest positive float, and answered 1.2e-38 there; Note [max roi pool
    windows])."""
    x = R.standard_normal(shape).astype(np.float32)
    rois = _rois(6, shape[0], max(shape[2:]) / scale)
    feeds = {"x": x, "rois": rois}
    node = helper.make_node("MaxRoiPool", ["x", "rois"], ["y"], pooled_shape=list(pooled),
                            spatial_scale=scale)  # fmt: skip
    model = make_model([node], feeds, ["y"])
    want = run_ort(model, feeds)[0]
    check_node("MaxRoiPool", feeds, {"pooled_shape": list(pooled), "spatial_scale": scale},
               rtol=0, atol=0)  # fmt: skip
    mod, params = from_onnx(model)
    lib = tessera.build(mod, target="llvm", params=params)
    got = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))(**feeds)[0]
    np.testing.assert_array_equal(got, want)


def test_max_roi_pool_of_negative_values_is_their_max():
    """An all-negative map: every bin's max is negative (never FLT_MIN); an empty bin is 0."""
    x = -np.abs(R.standard_normal((1, 2, 6, 6))).astype(np.float32) - 1
    rois = np.array([[0, 0, 0, 5, 5], [0, 1, 2, 3, 3], [0, 7, 7, 9, 9]], np.float32)
    node = helper.make_node("MaxRoiPool", ["x", "rois"], ["y"], pooled_shape=[2, 2])
    model = make_model([node], {"x": x, "rois": rois}, ["y"])
    mod, params = from_onnx(model)
    lib = tessera.build(mod, target="llvm", params=params)
    got = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))(x=x, rois=rois)[0]
    np.testing.assert_array_equal(got[0, :, 0, 0], x[0, :, 0:3, 0:3].max(axis=(1, 2)))
    np.testing.assert_array_equal(got[1, :, 1, 1], x[0, :, 3:4, 2:4].max(axis=(1, 2)))
    assert (got[:2] < -1).all() and (got[2] == 0).all()  # the third ROI lies off the map
    np.testing.assert_array_equal(got, run_ort(model, {"x": x, "rois": rois})[0])


@pytest.mark.parametrize("shape", [(2, 3, 5), (1, 4, 6, 7), (2, 2, 3, 4, 5)])
@pytest.mark.parametrize("p", [1, 2, 3])
def test_global_lp_pool_matches_ort(shape, p):
    check_node("GlobalLpPool", {"x": R.standard_normal(shape).astype(np.float32)}, {"p": p})


def test_global_lp_pool_opset22_double_compiled():
    """Opset 22 in float64 (ORT and onnx.reference have no kernel for it): the definition."""
    x = R.standard_normal((2, 3, 4, 5))
    model = make_model([helper.make_node("GlobalLpPool", ["x"], ["y"], p=3)], {"x": x}, ["y"],
                       opset=22)  # fmt: skip
    want = (np.abs(x) ** 3).sum(axis=(2, 3), keepdims=True) ** (1 / 3)
    mod, params = from_onnx(model)
    lib = tessera.build(mod, target="llvm", params=params)
    got = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))(x=x)[0]
    np.testing.assert_allclose(got, want, rtol=1e-12)
