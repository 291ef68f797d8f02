"""Ops whose output shape depends on the data (NonMaxSuppression, Unique), compiled with
run-time rows (Note [run-time rows]) and compared with ONNX Runtime."""

import numpy as np
import pytest
from onnx import helper

import tessera
from tessera.frontend import from_onnx
from tessera.frontend.testing import make_model, run_ort

R = np.random.default_rng(29)


def _compiled(model, feeds, **kw):
    mod, params = from_onnx(model, **kw)
    lib = tessera.build(mod, target="llvm", params=params)
    m = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))
    for name, value in feeds.items():
        m.set_input(name, value)
    m.run()
    return [m.get_output(i).numpy() for i in range(m.get_num_outputs())]


def _boxes(batches, n, center):
    xy = R.uniform(0, 10, (batches, n, 2))
    wh = R.uniform(0.5, 4, (batches, n, 2))
    if center:
        return np.concatenate([xy, wh], -1).astype(np.float32)
    corners = np.concatenate([xy, xy + wh], -1)
    flip = R.random((batches, n)) < 0.5  # corners in either order
    corners[flip] = corners[flip][:, [2, 3, 0, 1]]
    return corners.astype(np.float32)


@pytest.mark.parametrize(
    "center,limit,iou,score",
    [(0, 3, 0.3, 0.2), (1, 3, 0.3, 0.2), (1, 20, 0.5, None), (0, 0, 0.5, 0.1)],
)
def test_nms_matches_ort(center, limit, iou, score):
    boxes = _boxes(2, 12, center)
    scores = R.random((2, 3, 12)).astype(np.float32)
    scores[0, 0, 3] = scores[0, 0, 5]  # a tie: the lower index first
    inits = {"k": np.array([limit], np.int64), "iou": np.array([iou], np.float32)}
    names = ["boxes", "scores", "k", "iou"]
    if score is not None:
        inits["score"] = np.array([score], np.float32)
        names.append("score")
    node = helper.make_node("NonMaxSuppression", names, ["sel"], center_point_box=center)
    feeds = {"boxes": boxes, "scores": scores}
    model = make_model([node], feeds, ["sel"], inits, opset=11)
    (expected,) = run_ort(model, feeds)
    (got,) = _compiled(model, feeds)
    assert got.shape == expected.shape  # the rows this run selected
    np.testing.assert_array_equal(got, expected)


def test_nms_rows_change_between_runs():
    """One library, two inputs selecting different numbers of boxes."""
    node = helper.make_node("NonMaxSuppression", ["boxes", "scores", "k", "iou", "s"], ["sel"])
    inits = {"k": np.array([5], np.int64), "iou": np.array([0.5], np.float32),
             "s": np.array([0.5], np.float32)}  # fmt: skip
    boxes = _boxes(1, 8, 0)
    feeds = {"boxes": boxes, "scores": np.zeros((1, 1, 8), np.float32)}
    model = make_model([node], feeds, ["sel"], inits, opset=11)
    mod, params = from_onnx(model)
    lib = tessera.build(mod, target="llvm", params=params)
    m = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))
    m.set_input("boxes", boxes)
    counts = []
    for scores in (np.zeros((1, 1, 8)), np.ones((1, 1, 8)), R.random((1, 1, 8))):
        scores = scores.astype(np.float32)
        m.set_input("scores", scores)
        m.run()
        got = m.get_output(0).numpy()
        np.testing.assert_array_equal(got, run_ort(model, {**feeds, "scores": scores})[0])
        counts.append(got.shape[0])
    assert counts[0] == 0 and counts[1] > 0


@pytest.mark.parametrize("axis,sort", [(None, 0), (None, 1), (0, 1), (1, 0), (-1, 1)])
def test_unique_matches_ort(axis, sort):
    x = R.integers(0, 3, (4, 3, 2)).astype(np.float32)
    x[2] = x[0]  # a repeated slice along every axis choice
    x[:, 2] = x[:, 1]
    attrs = {"sorted": sort} if axis is None else {"sorted": sort, "axis": axis}
    node = helper.make_node("Unique", ["x"], ["y", "idx", "inv", "cnt"], **attrs)
    model = make_model([node], {"x": x}, ["y", "idx", "inv", "cnt"], opset=11)
    expected = run_ort(model, {"x": x})
    got = _compiled(model, {"x": x})
    for g, e in zip(got, expected, strict=True):
        assert g.shape == e.shape
        np.testing.assert_array_equal(g, e)


def test_unique_int_and_constant_input():
    x = np.array([5, -1, 5, 7, -1, 0], np.int64)
    node = helper.make_node("Unique", ["x"], ["y", "idx", "inv", "cnt"], sorted=0)
    model = make_model([node], {}, ["y", "idx", "inv", "cnt"], {"x": x}, opset=11)
    got = _compiled(model, {})  # folded while converting: trimmed then
    for g, e in zip(got, run_ort(model, {}), strict=True):
        np.testing.assert_array_equal(g, e)
    model = make_model([node], {"x": x}, ["y", "idx", "inv", "cnt"], opset=11)
    for g, e in zip(_compiled(model, {"x": x}), run_ort(model, {"x": x}), strict=True):
        np.testing.assert_array_equal(g, e)


def test_rows_fed_to_another_op_is_refused():
    nodes = [helper.make_node("Unique", ["x"], ["y"]), helper.make_node("Neg", ["y"], ["z"])]
    model = make_model(nodes, {"x": np.zeros(5, np.float32)}, ["z"], opset=11)
    why = r"reads an output of Unique 'y' \(its rows are counted at run time\): tessera supports"
    with pytest.raises(ValueError, match=why + " that only as a graph output"):
        from_onnx(model)


def test_unique_along_an_axis_from_an_exported_library(tmp_path):
    """The run-time rows ("rows", "rows_axis") travel in an exported library's plan."""
    from tessera.runtime import GraphModule, load_module

    node = helper.make_node("Unique", ["x"], ["y", "idx", "inv", "cnt"], axis=1)
    x = np.array([[1, 2, 1, 3], [4, 5, 4, 6]], np.float32)
    model = make_model([node], {"x": x}, ["y", "idx", "inv", "cnt"], opset=11)
    mod, params = from_onnx(model)
    lib = tessera.build(mod, target="llvm", params=params)
    m = GraphModule(load_module(lib.export_library(tmp_path / "unique.so"))["default"]())
    for data in (x, np.array([[1, 1, 1, 1], [2, 2, 2, 2]], np.float32)):
        got = m(x=data)
        for g, e in zip(got, run_ort(model, {"x": data}), strict=True):
            np.testing.assert_array_equal(g, e)
