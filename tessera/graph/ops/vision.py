"""Detection ops: YOLO box decoding and class-wise non-maximum suppression.

    %boxes, %scores = vision.yolo_decode(%x, anchors=((0.03, 0.05), ...), classes=80)
    %selected, %count = vision.non_max_suppression(%boxes, %scores_bcn, max_output_per_class=100,
                                                   iou_threshold=0.45, score_threshold=0.25)

`vision.non_max_suppression` has the semantics of ONNX NonMaxSuppression (boxes [B, N, 4] as
corners (y1, x1, y2, x2) or, with center_point_box=1, (x_center, y_center, w, h); scores
[B, C, N]; a box is kept when its score > score_threshold and its IoU with every box kept
before it in its class is <= iou_threshold; ties in score keep the lower box index first). Its
output has a static shape: [B*C*K, 3] rows (batch, class, box), K = min(max_output_per_class,
N), the selected rows first in batch, class, score order, then rows of -1; and `count`, the
number of selected rows. ONNX's output is the first `count` rows.
"""

from __future__ import annotations

import numpy as np

from tessera.graph.ir import TensorType
from tessera.graph.op import OpKind, register_op
from tessera.graph.ops.common import require_float, require_rank, type_error
from tessera.topi import vision as topi_vision

int64 = "int64"

# -- yolo_decode ------------------------------------------------------------------------------

yolo_decode = register_op("vision.yolo_decode", kind=OpKind.INJECTIVE)


@yolo_decode.type_rule
def _(x: TensorType, anchors, classes, coords=4):
    require_float("vision.yolo_decode", x)
    require_rank("vision.yolo_decode", x, (4,))
    n, per = len(anchors), coords + 1 + classes
    if n < 1 or any(len(a) != 2 for a in anchors) or classes < 0:
        raise type_error("vision.yolo_decode", f"anchors must be (w, h) pairs, got {anchors}")
    b, c, h, w = x.shape
    if c != n * per:
        raise type_error(
            "vision.yolo_decode", f"{n} anchors of {classes} classes need {n * per} channels, {x}"
        )
    return x.with_shape((b, n * h * w, 4)), x.with_shape((b, n * h * w, classes))


@yolo_decode.reference
def _(x, anchors, classes, coords=4):
    b, c, h, w = x.shape
    n = len(anchors)
    y = x.reshape(b, n, coords + 1 + classes, h, w)
    col = np.arange(w, dtype=x.dtype).reshape(1, 1, 1, w)
    row = np.arange(h, dtype=x.dtype).reshape(1, 1, h, 1)
    a = np.asarray(anchors, x.dtype)
    boxes = np.stack(
        [
            (col + y[:, :, 0]) / x.dtype.type(w),
            (row + y[:, :, 1]) / x.dtype.type(h),
            np.exp(y[:, :, 2]) * a[:, 0].reshape(1, n, 1, 1),
            np.exp(y[:, :, 3]) * a[:, 1].reshape(1, n, 1, 1),
        ],
        axis=-1,
    )
    scores = y[:, :, coords : coords + 1] * y[:, :, coords + 1 :]
    scores = scores.transpose(0, 1, 3, 4, 2)
    return (
        boxes.reshape(b, n * h * w, 4).astype(x.dtype),
        scores.reshape(b, n * h * w, classes).astype(x.dtype),
    )


@yolo_decode.compute
def _(x, anchors, classes, coords=4):
    return topi_vision.yolo_decode(x, anchors, classes, coords)


# -- non_max_suppression ----------------------------------------------------------------------

nms = register_op("vision.non_max_suppression", kind=OpKind.OPAQUE)


def _num_rows(boxes: TensorType, scores: TensorType, max_output_per_class: int) -> int:
    b, n = boxes.shape[0], boxes.shape[1]
    return b * scores.shape[1] * min(max_output_per_class, n)


@nms.type_rule
def _(
    boxes: TensorType,
    scores: TensorType,
    max_output_per_class,
    iou_threshold=0.0,
    score_threshold=float("-inf"),
    center_point_box=0,
):
    op = "vision.non_max_suppression"
    require_float(op, boxes)
    if boxes.ndim != 3 or boxes.shape[2] != 4:
        raise type_error(op, f"boxes must be [batch, boxes, 4], got {boxes}")
    if scores.ndim != 3 or scores.shape[0] != boxes.shape[0] or scores.shape[2] != boxes.shape[1]:
        raise type_error(op, f"scores must be [batch, classes, boxes] for {boxes}, got {scores}")
    if scores.dtype != boxes.dtype:
        raise type_error(op, f"boxes {boxes} and scores {scores} must share one dtype")
    if int(max_output_per_class) < 0 or center_point_box not in (0, 1):
        raise type_error(op, "max_output_per_class must be >= 0 and center_point_box 0 or 1")
    rows = _num_rows(boxes, scores, int(max_output_per_class))
    return TensorType((rows, 3), int64), TensorType((), int64)


def corners(boxes: np.ndarray, center_point_box: int) -> np.ndarray:
    """(y1, x1, y2, x2) with y1 <= y2, x1 <= x2 of [..., 4] boxes."""
    if center_point_box:
        x, y, w, h = np.moveaxis(boxes, -1, 0)
        return np.stack([y - h / 2, x - w / 2, y + h / 2, x + w / 2], axis=-1)
    y1, x1, y2, x2 = np.moveaxis(boxes, -1, 0)
    return np.stack([np.minimum(y1, y2), np.minimum(x1, x2), np.maximum(y1, y2),
                     np.maximum(x1, x2)], axis=-1)  # fmt: skip


def iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of corner boxes a [..., 4] and b [..., 4] (broadcast); 0 when either has no area."""
    ih = np.maximum(np.minimum(a[..., 2], b[..., 2]) - np.maximum(a[..., 0], b[..., 0]), 0)
    iw = np.maximum(np.minimum(a[..., 3], b[..., 3]) - np.maximum(a[..., 1], b[..., 1]), 0)
    inter = ih * iw
    area_a = (a[..., 2] - a[..., 0]) * (a[..., 3] - a[..., 1])
    area_b = (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])
    with np.errstate(divide="ignore", invalid="ignore"):
        out = inter / (area_a + area_b - inter)
    return np.where((area_a > 0) & (area_b > 0), out, 0)


@nms.reference
def _(
    boxes,
    scores,
    max_output_per_class,
    iou_threshold=0.0,
    score_threshold=float("-inf"),
    center_point_box=0,
):
    b_, n_ = boxes.shape[:2]
    k_ = min(int(max_output_per_class), n_)
    out = np.full((b_ * scores.shape[1] * k_, 3), -1, np.int64)
    count = 0
    for b in range(b_):
        box = corners(boxes[b], center_point_box)
        for c in range(scores.shape[1]):
            s = scores[b, c]
            order = np.argsort(-s, kind="stable")  # ties: the lower index first
            kept: list[int] = []
            for i in order:
                if len(kept) == k_ or not s[i] > score_threshold:
                    break
                if not kept or not np.any(iou(box[i], box[kept]) > iou_threshold):
                    kept.append(int(i))
            for i in kept:
                out[count] = (b, c, i)
                count += 1
    return out, np.array(count, np.int64)


@nms.compute
def _(
    boxes,
    scores,
    max_output_per_class,
    iou_threshold=0.0,
    score_threshold=float("-inf"),
    center_point_box=0,
):
    return topi_vision.non_max_suppression(
        boxes, scores, max_output_per_class, iou_threshold, score_threshold, center_point_box
    )


nms.row_counts = {0: 1}  # the selected rows: the first `count` (Note [run-time rows])


# -- roi_align --------------------------------------------------------------------------------

roi_align = register_op("vision.roi_align", kind=OpKind.OPAQUE)


@roi_align.type_rule
def _(x: TensorType, rois: TensorType, batch_indices: TensorType, output_size, spatial_scale,
      sampling_ratio, mode="avg", half_pixel=True):  # fmt: skip
    op = "vision.roi_align"
    require_float(op, x)
    require_rank(op, x, (4,))
    if rois.ndim != 2 or rois.shape[1] != 4 or rois.dtype != x.dtype:
        raise type_error(op, f"rois must be [rois, 4] of {x.dtype}, got {rois}")
    if batch_indices.shape != (rois.shape[0],) or not batch_indices.dtype.is_integer:
        raise type_error(op, f"batch_indices must be {rois.shape[0]} integers, got {batch_indices}")
    if mode not in ("avg", "max") or int(sampling_ratio) < 1:
        raise type_error(op, f"mode avg/max and sampling_ratio >= 1, got {mode}, {sampling_ratio}")
    oh, ow = output_size
    return x.with_shape((rois.shape[0], x.shape[1], int(oh), int(ow)))


@roi_align.reference
def _(x, rois, batch_indices, output_size, spatial_scale, sampling_ratio, mode="avg",
      half_pixel=True):  # fmt: skip
    oh, ow = output_size
    g, (_, _, h, w) = int(sampling_ratio), x.shape
    out = np.zeros((rois.shape[0], x.shape[1], oh, ow), x.dtype)
    off = 0.5 if half_pixel else 0.0
    for r, box in enumerate(rois.astype(np.float64)):
        x1, y1, x2, y2 = box * spatial_scale - off
        rh, rw = y2 - y1, x2 - x1
        if not half_pixel:
            rh, rw = max(rh, 1.0), max(rw, 1.0)
        ys = y1 + (np.arange(oh)[:, None] + (np.arange(g)[None, :] + 0.5) / g) * (rh / oh)
        xs = x1 + (np.arange(ow)[:, None] + (np.arange(g)[None, :] + 0.5) / g) * (rw / ow)

        def taps(pos, size):
            inside = (pos >= -1.0) & (pos <= size)
            pos = np.maximum(pos, 0)
            low = np.minimum(pos.astype(np.int64), size - 1)
            edge = low >= size - 1
            high = np.where(edge, low, low + 1)
            frac = np.where(edge, 0.0, pos - low)
            return low, high, 1 - frac, frac, inside

        yl, yh, wyl, wyh, iny = (a[:, :, None, None] for a in taps(ys, h))  # (oh, g, 1, 1)
        xl, xh, wxl, wxh, inx = (a[None, None] for a in taps(xs, w))  # (1, 1, ow, g)
        img = x[int(batch_indices[r])].astype(np.float64)
        corners = [img[:, yl, xl] * (wyl * wxl), img[:, yl, xh] * (wyl * wxh),
                   img[:, yh, xl] * (wyh * wxl), img[:, yh, xh] * (wyh * wxh)]  # fmt: skip
        inside = iny & inx
        if mode == "avg":
            v = np.where(inside, sum(corners), 0.0).sum(axis=(2, 4)) / max(g * g, 1)
        else:
            v = np.where(inside, np.maximum.reduce(corners), 0.0).max(axis=(2, 4))
        out[r] = v
    return out


@roi_align.compute
def _(x, rois, batch_indices, output_size, spatial_scale, sampling_ratio, mode="avg",
      half_pixel=True):  # fmt: skip
    return topi_vision.roi_align(x, rois, batch_indices, output_size, spatial_scale,
                                 sampling_ratio, mode, half_pixel)  # fmt: skip


# -- max_roi_pool -----------------------------------------------------------------------------

max_roi_pool = register_op("vision.max_roi_pool", kind=OpKind.OPAQUE)


@max_roi_pool.type_rule
def _(x: TensorType, rois: TensorType, pooled_shape, spatial_scale):
    op = "vision.max_roi_pool"
    require_float(op, x)
    require_rank(op, x, (4,))
    if rois.ndim != 2 or rois.shape[1] != 5 or rois.dtype != x.dtype:
        raise type_error(op, f"rois must be [rois, 5] of {x.dtype}, got {rois}")
    if len(pooled_shape) != 2 or min(pooled_shape) < 1 or not spatial_scale > 0:
        raise type_error(op, f"pooled_shape must be 2 sizes >= 1 and spatial_scale > 0, got "
                             f"{list(pooled_shape)}, {spatial_scale}")  # fmt: skip
    return x.with_shape((rois.shape[0], x.shape[1], *(int(v) for v in pooled_shape)))


def _roi_windows(start, end, pooled, size):
    """[lo, hi) of every bin along one axis (Note [max roi pool windows] in topi/vision.py)."""
    start, end = (int(np.sign(v) * np.floor(abs(v) + np.float32(0.5))) for v in (start, end))
    binsize = np.float32(max(end - start + 1, 1)) / np.float32(pooled)
    p = np.arange(pooled, dtype=np.float32)
    lo = np.floor(p * binsize).astype(np.int64) + start
    hi = np.ceil((p + 1) * binsize).astype(np.int64) + start
    return np.clip(lo, 0, size), np.clip(hi, 0, size)


@max_roi_pool.reference
def _(x, rois, pooled_shape, spatial_scale):
    (ph, pw), (_, c, h, w) = pooled_shape, x.shape
    out = np.zeros((rois.shape[0], c, ph, pw), x.dtype)
    scale = np.float32(spatial_scale)
    for r, (b, x1, y1, x2, y2) in enumerate(rois.astype(np.float32)):
        rows = _roi_windows(y1 * scale, y2 * scale, ph, h)
        cols = _roi_windows(x1 * scale, x2 * scale, pw, w)
        for i, (h0, h1) in enumerate(zip(*rows, strict=True)):
            for j, (w0, w1) in enumerate(zip(*cols, strict=True)):
                if h1 > h0 and w1 > w0:
                    out[r, :, i, j] = x[int(b), :, h0:h1, w0:w1].max(axis=(1, 2))
    return out


@max_roi_pool.compute
def _(x, rois, pooled_shape, spatial_scale):
    return topi_vision.max_roi_pool(x, rois, pooled_shape, spatial_scale)
