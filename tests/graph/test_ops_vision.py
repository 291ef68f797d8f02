"""The detection ops: vision.yolo_decode and vision.non_max_suppression, their numpy references
on hand-built cases (overlap chains, ties, empty results, IoU exactly at the threshold), ONNX
Runtime's NonMaxSuppression, and the compiled te forms against the references."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera.graph import run_function
from tessera.graph.builder import GraphBuilder
from tessera.graph.op import get_op
from tessera.ir.module import IRModule

NMS = get_op("vision.non_max_suppression")
DECODE = get_op("vision.yolo_decode")


def nms(boxes, scores, k=10, iou=0.5, score=0.0, center=0):
    attrs = dict(max_output_per_class=k, iou_threshold=iou, score_threshold=score,
                 center_point_box=center)  # fmt: skip
    sel, count = NMS.evaluate(
        [np.asarray(boxes, np.float32), np.asarray(scores, np.float32)], attrs
    )
    assert (sel[int(count) :] == -1).all()
    return [tuple(r) for r in sel[: int(count)].tolist()]


def row(x1, w=1.0):
    """A unit-height box (y1, x1, y2, x2) starting at x1."""
    return [0.0, x1, 1.0, x1 + w]


def test_greedy_chain_keeps_the_box_its_suppressed_neighbour_overlapped():
    # A overlaps B (IoU 0.6), B overlaps C (0.6), A and C barely (0.18): greedy keeps A and C
    boxes = [[row(0.0), row(0.25), row(0.5)]]
    assert nms(boxes, [[[0.9, 0.8, 0.7]]], iou=0.5) == [(0, 0, 0), (0, 0, 2)]


def test_ties_keep_the_lower_index_and_identical_boxes_suppress():
    boxes = [[row(5.0), row(0.0), row(0.0), row(10.0)]]
    assert nms(boxes, [[[0.5, 0.9, 0.9, 0.9]]]) == [(0, 0, 1), (0, 0, 3), (0, 0, 0)]


def test_iou_exactly_at_the_threshold_is_not_suppressed():
    boxes = [[row(0.0, 2.0), row(1.0, 1.0)]]  # IoU = 1/2
    assert nms(boxes, [[[0.9, 0.8]]], iou=0.5) == [(0, 0, 0), (0, 0, 1)]
    assert nms(boxes, [[[0.9, 0.8]]], iou=0.49) == [(0, 0, 0)]


def test_empty_results():
    boxes = [[row(0.0), row(3.0)]]
    assert nms(boxes, [[[0.1, 0.2]]], score=0.2) == []  # strictly greater than the threshold
    sel, count = NMS.evaluate([np.zeros((1, 2, 4), np.float32), np.ones((1, 3, 2), np.float32)],
                              dict(max_output_per_class=0))  # fmt: skip
    assert sel.shape == (0, 3) and count == 0


def test_classes_and_batches_are_independent_and_max_output_caps_each_class():
    boxes = np.array([[row(0.0), row(2.0), row(4.0)], [row(0.0), row(0.1), row(0.2)]])
    scores = np.array([[[0.3, 0.2, 0.1], [0.1, 0.9, 0.5]], [[0.3, 0.2, 0.1], [0.0, 0.0, 0.0]]])
    assert nms(boxes, scores, k=2) == [(0, 0, 0), (0, 0, 1), (0, 1, 1), (0, 1, 2), (1, 0, 0)]


def test_center_point_boxes_and_flipped_corners_mean_the_same_boxes():
    corners = np.array([[row(0.0), row(0.25), row(0.5), [1.0, 3.0, 0.0, 2.0]]])
    flipped = corners[..., [2, 3, 0, 1]]
    y1, x1, y2, x2 = np.moveaxis(corners, -1, 0)
    centers = np.stack([(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1], axis=-1)
    scores = [[[0.9, 0.8, 0.7, 0.6]]]
    expected = nms(corners, scores)
    assert nms(flipped, scores) == expected
    assert nms(centers, scores, center=1) == expected == [(0, 0, 0), (0, 0, 2), (0, 0, 3)]


def test_boxes_without_area_are_kept_and_never_suppress():
    boxes = [[row(0.0, 0.0), row(0.0), row(0.0, 0.0)]]
    assert nms(boxes, [[[0.9, 0.8, 0.7]]]) == [(0, 0, 0), (0, 0, 1), (0, 0, 2)]


def _random_case(seed, b=2, n=12, c=3):
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0, 4, (b, n, 2))
    wh = rng.uniform(0.5, 2, (b, n, 2))
    boxes = np.concatenate([xy, xy + wh], axis=-1).astype(np.float32)
    scores = rng.choice([0.1, 0.3, 0.5, 0.7, 0.9], (b, c, n)).astype(np.float32)  # many ties
    return boxes, scores


@pytest.mark.parametrize("seed", range(4))
def test_matches_onnxruntime(seed):
    from onnx import TensorProto, helper

    from tessera.frontend.testing import run_ort

    boxes, scores = _random_case(seed)
    node = helper.make_node("NonMaxSuppression", ["b", "s", "k", "iou", "score"], ["y"])
    consts = {"k": np.array([5], np.int64), "iou": np.array([0.3], np.float32),
              "score": np.array([0.2], np.float32)}  # fmt: skip
    graph = helper.make_graph(
        [node], "nms",
        [helper.make_tensor_value_info("b", TensorProto.FLOAT, boxes.shape),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, scores.shape)],
        [helper.make_tensor_value_info("y", TensorProto.INT64, None)],
        [tessera_tensor(k, v) for k, v in consts.items()],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    model.ir_version = 8
    (expected,) = run_ort(model, {"b": boxes, "s": scores})
    got = nms(boxes, scores, k=5, iou=0.3, score=0.2)
    assert got == [tuple(r) for r in expected.tolist()]


def tessera_tensor(name, array):
    from onnx import numpy_helper

    return numpy_helper.from_array(array, name)


def _compiled(build_graph, inputs):
    b = GraphBuilder(fold=False)
    params = [b.param(name, a.shape, str(a.dtype)) for name, a in inputs.items()]
    func = b.finish(list(build_graph(b, *params)))
    expected = run_function(func, inputs)
    lib = tessera.build(IRModule({"main": func}), target="llvm")
    m = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))
    for name, a in inputs.items():
        m.set_input(name, a)
    m.run()
    return [m.get_output(i).numpy() for i in range(len(expected))], expected


def test_nms_compiled_matches_reference():
    boxes, scores = _random_case(7, b=2, n=10, c=3)
    attrs = dict(max_output_per_class=4, iou_threshold=0.1, score_threshold=0.4)
    got, expected = _compiled(
        lambda b, x, s: b.call("vision.non_max_suppression", x, s, **attrs),
        {"boxes": boxes, "scores": scores},
    )
    assert int(expected[1]) > 0 and (expected[0] == -1).any()  # the case has padding rows
    # a model output of the op has run-time rows: the selected ones (Op.row_counts)
    np.testing.assert_array_equal(got[0], expected[0][: int(expected[1])])
    np.testing.assert_array_equal(got[1], expected[1])


def test_yolo_decode_hand_built():
    # 2 anchors, 1 class, a 2x3 grid: x = (col + tx) / 3, y = (row + ty) / 2, w = e^tw * aw
    x = np.zeros((1, 2 * 6, 2, 3), np.float32)
    x[0, 6 + 0, 1, 2], x[0, 6 + 1, 1, 2] = 0.5, 0.25  # anchor 1, row 1, col 2
    x[0, 6 + 2, 1, 2], x[0, 6 + 3, 1, 2] = np.log(2.0), 0.0
    x[0, 6 + 4, 1, 2], x[0, 6 + 5, 1, 2] = 0.8, 0.5  # objectness, class score
    anchors = ((0.1, 0.2), (0.3, 0.4))
    boxes, scores = DECODE.evaluate([x], dict(anchors=anchors, classes=1))
    assert boxes.shape == (1, 12, 4) and scores.shape == (1, 12, 1)
    i = 6 + 1 * 3 + 2  # anchor 1, then row-major cells
    np.testing.assert_allclose(boxes[0, i], [2.5 / 3, 1.25 / 2, 0.6, 0.4], rtol=1e-6)
    np.testing.assert_allclose(scores[0, i], [0.4], rtol=1e-6)
    np.testing.assert_allclose(boxes[0, 0], [0, 0, 0.1, 0.2], rtol=1e-6)
    assert np.count_nonzero(scores) == 1


def test_yolo_decode_compiled_matches_reference():
    x = np.random.default_rng(3).uniform(0, 1, (2, 3 * 7, 4, 5)).astype(np.float32)
    attrs = dict(anchors=((0.1, 0.2), (0.3, 0.4), (0.5, 0.6)), classes=2)
    got, expected = _compiled(lambda b, v: b.call("vision.yolo_decode", v, **attrs), {"x": x})
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-7)


def test_type_errors_name_the_op():
    b = GraphBuilder()
    x = b.param("x", (1, 10, 2, 2), "float32")
    with pytest.raises(TypeError, match="vision.yolo_decode"):
        b.call("vision.yolo_decode", x, anchors=((0.1, 0.2),), classes=80)
    boxes, scores = b.param("b", (1, 5, 4), "float32"), b.param("s", (1, 2, 4), "float32")
    with pytest.raises(TypeError, match="scores must be"):
        b.call("vision.non_max_suppression", boxes, scores, max_output_per_class=3)


def test_a_graph_with_the_detection_ops_prints_and_parses_back():
    from tessera.graph import parse_function

    text = """def main(%x: f32[1, 14, 2, 2]) {
  %v, %v_1 = vision.yolo_decode(%x, anchors=[[0.1, 0.2], [0.3, 0.4]], classes=2) : (f32[1, 8, 4], f32[1, 8, 2]);
  %v_2 = transpose(%v_1, axes=[0, 2, 1]) : f32[1, 2, 8];
  %v_3, %v_4 = vision.non_max_suppression(%v, %v_2, center_point_box=1, iou_threshold=0.5, max_output_per_class=3, score_threshold=-inf) : (i64[6, 3], i64[]);
  return %v_3, %v_4
}"""  # noqa: E501
    func = parse_function(text)
    assert str(func) == text
    x = np.random.default_rng(0).uniform(0, 1, (1, 14, 2, 2)).astype(np.float32)
    selected, count = run_function(func, [x])
    assert selected.shape == (6, 3) and 0 < int(count) <= 6
