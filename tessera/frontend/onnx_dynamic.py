"""ONNX converters for ops whose output shape depends on the data: NonMaxSuppression, Unique;
and the ROI poolers RoiAlign and MaxRoiPool.

tessera compiles every buffer at a static shape, so such an op writes a buffer of the largest
size its input shapes allow (NMS: batches x classes x min(max_output_per_class, boxes) rows;
Unique: one row per input element or slice) plus an int64 count of the rows it filled. As a
model output the executor returns the filled rows (Note [run-time rows] in
graph_build/executor_plan.py); a value with run-time rows that feeds another op is refused
(`ConvertContext.partial_rows`), as a Loop's early-stopping scan outputs are.
"""

from __future__ import annotations

import numpy as np

from tessera.frontend.onnx_registry import NodeError, onnx_op
from tessera.graph.ir import Constant


def _scalar(b, v, default, what: str):
    if v is None:
        return default
    a = np.asarray(b.known(v, what)).reshape(-1)
    if a.size != 1:
        raise NodeError(f"input {what!r} must hold one value, got {a.size}")
    return a[0].item()


def _partial(b, outs, counted: dict[int, int], count_index: int, what: str):
    """The node's outputs: trimmed at once when they folded to constants, else marked as
    having run-time rows (readable only as model outputs). `counted`: output -> the axis its
    rows are counted along."""
    count = outs[count_index]
    if isinstance(count, Constant):
        n = int(count.array)
        trim = {k: (slice(None),) * a + (slice(0, n),) for k, a in counted.items()}
        return tuple(
            b.const(outs[k].array[trim[k]]) if k in trim else outs[k] for k in range(count_index)
        )
    for k in counted:
        b.partial_rows[id(outs[k])] = f"{what} (its rows are counted at run time)"
    return outs[:count_index]


@onnx_op("NonMaxSuppression", since=10)
def non_max_suppression(b, boxes, scores, max_output_boxes_per_class=None, iou_threshold=None,
                        score_threshold=None, *, center_point_box=0):  # fmt: skip
    k = int(_scalar(b, max_output_boxes_per_class, 0, "max_output_boxes_per_class"))
    iou = float(_scalar(b, iou_threshold, 0.0, "iou_threshold"))
    score = float(_scalar(b, score_threshold, float("-inf"), "score_threshold"))
    if not 0.0 <= iou <= 1.0:
        raise NodeError(f"iou_threshold must be in [0, 1], got {iou}")
    if scores.type.dtype != boxes.type.dtype:
        scores = b.call("cast", scores, dtype=boxes.type.dtype)
    outs = b.call("vision.non_max_suppression", boxes, scores, max_output_per_class=max(k, 0),
                  iou_threshold=iou, score_threshold=score,
                  center_point_box=int(center_point_box))  # fmt: skip
    (selected,) = _partial(b, outs, {0: 0}, 1, f"the selected boxes of NonMaxSuppression "
                           f"{b.node_name or b.name_hint!r}")  # fmt: skip
    return selected


@onnx_op("Unique", since=11)
def unique(b, X, *, axis=None, sorted=1):  # noqa: A002  (ONNX's name)
    if axis is not None:
        if not -X.type.ndim <= axis < X.type.ndim:
            raise NodeError(f"axis {axis} is out of range for rank {X.type.ndim}")
        axis %= X.type.ndim
    outs = b.call("unique", X, axis=axis, sorted=bool(sorted))
    what = f"an output of Unique {b.node_name or b.name_hint!r}"
    return _partial(b, outs, {0: axis or 0, 1: 0, 3: 0}, 4, what)


@onnx_op("RoiAlign", since=10)
def roi_align(b, X, rois, batch_indices, *, coordinate_transformation_mode="half_pixel",
              mode="avg", output_height=1, output_width=1, sampling_ratio=0,
              spatial_scale=1.0):  # fmt: skip
    if b.opset < 16 and coordinate_transformation_mode == "half_pixel":
        coordinate_transformation_mode = "output_half_pixel"  # RoiAlign-10 had no half pixel
    coord = coordinate_transformation_mode
    if coord not in ("half_pixel", "output_half_pixel"):
        raise NodeError(f"unknown coordinate_transformation_mode {coord!r}")
    if sampling_ratio <= 0:
        raise NodeError(
            "sampling_ratio=0 (adaptive: each ROI's sample count depends on its size, a run-time "
            "value) is not supported; give sampling_ratio >= 1"
        )
    if rois.type.dtype != X.type.dtype:
        rois = b.call("cast", rois, dtype=X.type.dtype)
    return b.call("vision.roi_align", X, rois, batch_indices,
                  output_size=(int(output_height), int(output_width)),
                  spatial_scale=float(spatial_scale), sampling_ratio=int(sampling_ratio),
                  mode=mode, half_pixel=coordinate_transformation_mode == "half_pixel")  # fmt: skip


@onnx_op("MaxRoiPool")
def max_roi_pool(b, X, rois, *, pooled_shape, spatial_scale=1.0):
    if len(pooled_shape) != 2:
        raise NodeError(f"pooled_shape must have 2 sizes, got {list(pooled_shape)}")
    if rois.type.dtype != X.type.dtype:
        rois = b.call("cast", rois, dtype=X.type.dtype)
    return b.call("vision.max_roi_pool", X, rois,
                  pooled_shape=tuple(int(v) for v in pooled_shape),
                  spatial_scale=float(spatial_scale))  # fmt: skip
