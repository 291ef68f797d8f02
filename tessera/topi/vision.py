"""Detection te operators: YOLO box decoding and greedy non-maximum suppression.

    boxes, scores = topi.vision.yolo_decode(x, anchors=((0.1, 0.2), (0.3, 0.4)), classes=80)
    selected, count = topi.vision.non_max_suppression(boxes, scores, 10, 0.45, 0.25)

NMS is greedy, so it is sequential in the number of boxes it keeps: the compute unrolls
`max_output_per_class` rounds, each an argmax over the boxes still alive followed by the
suppression of the boxes that overlap the winner (Note [unrolled nms]).
"""

from __future__ import annotations

from tessera import te

# Note [unrolled nms]: te has no loop-carried state, so round t of greedy NMS is its own
# tensor: pick_t = argmax of score among alive_t (lowest index on ties), then alive_{t+1} =
# alive_t and not (iou(box, pick_t) > threshold or box == pick_t). Each round is O(B*C*N), so
# K rounds cost O(K*B*C*N) like the usual implementation; the program grows with K, which is
# why MAX_UNROLLED_ROUNDS bounds it (the graph op reports a clear error past it).
MAX_UNROLLED_ROUNDS = 128


def _int(v) -> int:
    return int(v.value) if hasattr(v, "value") else int(v)


def _by_index(a, values, dtype):
    """values[a] for a small list of Python numbers, as a chain of selects."""
    out = te.const(values[-1], dtype)
    for i in range(len(values) - 2, -1, -1):
        out = te.select(a == i, te.const(values[i], dtype), out)
    return out


def yolo_decode(x: te.Tensor, anchors, classes: int, coords: int = 4):
    """(boxes [B, n*H*W, 4] as (x_center, y_center, w, h) in fractions of the image,
    scores [B, n*H*W, classes] = objectness * class score) of an activated YOLO output."""
    b_, c_, h_, w_ = (_int(d) for d in x.shape)
    n, per = len(anchors), coords + 1 + classes
    dtype = x.dtype
    aw, ah = [float(a[0]) for a in anchors], [float(a[1]) for a in anchors]

    def split(idx):
        return (
            te.floordiv(idx, h_ * w_),
            te.floormod(te.floordiv(idx, w_), h_),
            te.floormod(idx, w_),
        )

    def box(b, idx, k):
        a, r, col = split(idx)
        v = [x(b, a * per + j, r, col) for j in range(4)]
        cx = (te.cast(col, dtype) + v[0]) / te.const(float(w_), dtype)
        cy = (te.cast(r, dtype) + v[1]) / te.const(float(h_), dtype)
        bw = te.exp(v[2]) * _by_index(a, aw, dtype)
        bh = te.exp(v[3]) * _by_index(a, ah, dtype)
        return te.select(k == 0, cx, te.select(k == 1, cy, te.select(k == 2, bw, bh)))

    def score(b, idx, cls):
        a, r, col = split(idx)
        return x(b, a * per + coords, r, col) * x(b, a * per + coords + 1 + cls, r, col)

    boxes = te.compute((b_, n * h_ * w_, 4), box, name="yolo_boxes", tag="injective")
    scores = te.compute((b_, n * h_ * w_, classes), score, name="yolo_scores", tag="injective")
    return boxes, scores


def _lo(a, b):
    return te.select(a < b, a, b)


def _hi(a, b):
    return te.select(a < b, b, a)


def _corners(boxes, b, i, center_point_box):
    """(y1, x1, y2, x2) with y1 <= y2 and x1 <= x2 of box i of batch b."""
    v = [boxes(b, i, k) for k in range(4)]
    if center_point_box:  # (x_center, y_center, width, height)
        half = te.const(0.5, boxes.dtype)
        return v[1] - v[3] * half, v[0] - v[2] * half, v[1] + v[3] * half, v[0] + v[2] * half
    return _lo(v[0], v[2]), _lo(v[1], v[3]), _hi(v[0], v[2]), _hi(v[1], v[3])


def _iou_above(boxes, b, i, j, threshold, center_point_box):
    y1, x1, y2, x2 = _corners(boxes, b, i, center_point_box)
    q1, p1, q2, p2 = _corners(boxes, b, j, center_point_box)
    zero = te.const(0.0, boxes.dtype)
    inter = _hi(_lo(y2, q2) - _hi(y1, q1), zero) * _hi(_lo(x2, p2) - _hi(x1, p1), zero)
    area_i, area_j = (y2 - y1) * (x2 - x1), (q2 - q1) * (p2 - p1)
    iou = inter / (area_i + area_j - inter)
    # a box of no area never suppresses nor is suppressed (ONNX Runtime's rule)
    positive = te.logical_and(area_i > zero, area_j > zero)
    return te.logical_and(positive, iou > te.const(float(threshold), boxes.dtype))


def non_max_suppression(
    boxes: te.Tensor,
    scores: te.Tensor,
    max_output_per_class: int,
    iou_threshold: float,
    score_threshold: float,
    center_point_box: int = 0,
):
    """Greedy class-wise NMS (ONNX NonMaxSuppression semantics): (selected [B*C*K, 3] int64
    rows (batch, class, box) in batch, class, score order, padded with -1; count [] int64)."""
    b_, n_ = _int(boxes.shape[0]), _int(boxes.shape[1])
    c_ = _int(scores.shape[1])
    k_ = min(int(max_output_per_class), n_)
    if k_ > MAX_UNROLLED_ROUNDS:
        raise ValueError(
            f"non_max_suppression keeping {k_} boxes per class needs {k_} unrolled rounds; the "
            f"compiled form supports up to {MAX_UNROLLED_ROUNDS}"
        )
    threshold = te.const(float(score_threshold), scores.dtype)
    alive = te.compute(
        (b_, c_, n_),
        lambda b, c, i: te.cast(scores(b, c, i) > threshold, "int32"),
        name="nms_alive0",
    )
    picks = []
    for t in range(k_):
        pick = _pick(alive, scores, t)
        picks.append(pick)
        if t + 1 < k_:
            alive = _suppress(alive, pick, boxes, iou_threshold, center_point_box, t)
    if k_ == 0:
        rows = te.compute((0, 3), lambda p, k: te.const(-1, "int64"), name="nms_selected")
        return rows, te.compute((), lambda: te.const(0, "int64"), name="nms_count")
    return _gather_selected(picks, b_, c_, k_)


def _pick(alive, scores, t):
    """Index of the best alive box per (batch, class), or -1 when none is alive. Dead boxes
    score the dtype's lowest value, and the argmax identity (-1, lowest) wins ties with them."""
    b_, c_, n_ = (_int(d) for d in alive.shape)
    j = te.reduce_axis((0, n_), name=f"j{t}")
    low = te.min_value(scores.dtype)

    def body(b, c):
        value = te.select(alive(b, c, j.var) > 0, scores(b, c, j.var), low)
        return te.argmax((j.var, value), axis=j)

    idx, _ = te.compute((b_, c_), body, name=f"nms_pick{t}")
    return idx


def _suppress(alive, pick, boxes, iou_threshold, center_point_box, t):
    zero = te.const(0, "int32")

    def body(b, c, i):
        p = pick(b, c)
        hit = te.logical_or(
            p == i, _iou_above(boxes, b, i, _hi(p, zero), iou_threshold, center_point_box)
        )
        return te.select(te.logical_and(p >= 0, hit), zero, alive(b, c, i))

    return te.compute(alive.shape, body, name=f"nms_alive{t + 1}")


def _unravel(p, c_, k_):
    return te.floordiv(p, c_ * k_), te.floormod(te.floordiv(p, k_), c_), te.floormod(p, k_)


def _gather_selected(picks, b_, c_, k_):
    """Rows (batch, class, box) of the picks, in (batch, class, round) order, compacted over
    the whole output (a class's picks are a valid prefix; classes keep different counts)."""

    def pick_at(b, c, r):
        out = picks[-1](b, c)
        for t in range(len(picks) - 2, -1, -1):
            out = te.select(r == t, picks[t](b, c), out)
        return out

    rows = b_ * c_ * k_
    table = te.compute((b_, c_, k_), pick_at, name="nms_table")
    one, none = te.const(1, "int32"), te.const(0, "int32")
    q = te.reduce_axis((0, rows), name="q")

    def valid(p):
        return table(*_unravel(p, c_, k_)) >= 0

    # dest[p]: how many valid entries come before entry p
    dest = te.compute(
        (rows,),
        lambda p: te.sum(te.select(te.logical_and(q.var < p, valid(q.var)), one, none), axis=q),
        name="nms_dest",
    )
    s = te.reduce_axis((0, rows), name="s")

    def row(p, k):
        bb, cc, rr = _unravel(s.var, c_, k_)
        value = te.select(k == 0, bb, te.select(k == 1, cc, table(bb, cc, rr)))
        hit = te.logical_and(valid(s.var), dest(s.var) == p)
        # one entry at most hits: sum the value + 1 so that no hit leaves -1
        return te.sum(te.select(hit, te.cast(value + 1, "int64"), te.const(0, "int64")), axis=s)

    shifted = te.compute((rows, 3), row, name="nms_rows")
    selected = te.compute(
        (rows, 3), lambda p, k: shifted(p, k) - te.const(1, "int64"), name="nms_selected"
    )
    r = te.reduce_axis((0, rows), name="r")
    count = te.compute(
        (),
        lambda: te.sum(te.select(valid(r.var), te.const(1, "int64"), te.const(0, "int64")), axis=r),
        name="nms_count",
    )
    return selected, count


def roi_align(x: te.Tensor, rois: te.Tensor, batch_indices: te.Tensor, output_size,
              scale: float, sampling_ratio: int, mode: str = "avg",
              half_pixel: bool = True) -> te.Tensor:  # fmt: skip
    """ONNX RoiAlign (ONNX Runtime's algorithm): (R, C, ph, pw); each bin averages (or, mode
    "max", takes the largest weighted corner of) sampling_ratio^2 bilinear samples. A sample
    beyond the map by more than one pixel counts 0; one nearer is clamped to the edge."""
    _, c_, h_, w_ = (_int(d) for d in x.shape)
    r_ = _int(rois.shape[0])
    oh, ow = output_size
    g = int(sampling_ratio)
    dt = x.dtype
    iy, ix = te.reduce_axis((0, g), name="iy"), te.reduce_axis((0, g), name="ix")
    off = te.const(0.5 if half_pixel else 0.0, dt)
    sc = te.const(float(scale), dt)
    one, zero = te.const(1.0, dt), te.const(0.0, dt)

    def axis_sample(r, start_k, end_k, p, i, pooled, size):
        """(low, high, weight of low, weight of high, inside) along one axis."""
        start = rois(r, start_k) * sc - off
        length = rois(r, end_k) * sc - off - start
        if not half_pixel:
            length = _hi(length, one)
        binsize = length / te.const(float(pooled), dt)
        pos = (
            start
            + te.cast(p, dt) * binsize
            + (te.cast(i, dt) + te.const(0.5, dt)) * (binsize / te.const(float(g), dt))
        )
        inside = te.logical_and(pos >= te.const(-1.0, dt), pos <= te.const(float(size), dt))
        pos = _hi(pos, zero)
        low = te.min(te.cast(pos, "int32"), size - 1)  # pos >= 0: the cast floors
        edge = low >= size - 1
        high = te.select(edge, low, low + 1)
        frac = te.select(edge, zero, pos - te.cast(low, dt))
        return low, high, one - frac, frac, inside

    def body(r, c, p, q):
        b = te.cast(batch_indices(r), "int32")
        yl, yh, wyl, wyh, in_y = axis_sample(r, 1, 3, p, iy.var, oh, h_)
        xl, xh, wxl, wxh, in_x = axis_sample(r, 0, 2, q, ix.var, ow, w_)
        corners = [x(b, c, yl, xl) * (wyl * wxl), x(b, c, yl, xh) * (wyl * wxh),
                   x(b, c, yh, xl) * (wyh * wxl), x(b, c, yh, xh) * (wyh * wxh)]  # fmt: skip
        inside = te.logical_and(in_y, in_x)
        if mode == "avg":
            v = corners[0] + corners[1] + corners[2] + corners[3]
            return te.sum(te.select(inside, v, zero), axis=[iy, ix])
        v = _hi(_hi(corners[0], corners[1]), _hi(corners[2], corners[3]))
        return te.max(te.select(inside, v, zero), axis=[iy, ix])

    pooled = te.compute((r_, c_, oh, ow), body, name="roi_align_sum")
    if mode == "max":
        return pooled
    count = te.const(float(max(g * g, 1)), dt)
    return te.compute(pooled.shape, lambda *i: pooled(*i) / count, name="roi_align",
                      tag="injective")  # fmt: skip


# Note [max roi pool windows]
# MaxRoiPool's bins have sizes that depend on the ROIs, known only at run time, so a bin's
# window cannot be a reduce axis of its own extent. The max is separable: first over rows,
# (R, C, ph, W), each row window a masked max over all H rows; then over that along columns,
# (R, C, ph, pw). That costs O(R C ph W (H + pw)) instead of O(R C ph pw H W) for one masked
# max over the whole map. Coordinates follow ONNX Runtime (Caffe's ROI pooling): rounded half
# away from zero, a malformed ROI counts 1x1, bins floor/ceil'd in float32, an empty bin is 0.
# A bin's value is the true max of its pixels, also when all are negative: the ONNX spec says
# "max pooling" and has no reference implementation or node test for the op (onnx.reference
# has no MaxRoiPool), Caffe starts each bin at -FLT_MAX, and ONNX Runtime 1.32 gives the true
# max. (An older ORT kernel started at numeric_limits<float>::min(), i.e. FLT_MIN = 1.2e-38,
# the smallest *positive* float, and so answered FLT_MIN for an all-negative bin: a bug, not
# followed.) tests/frontend/test_onnx_image.py checks signed and all-negative maps against ORT.


def _round_half_away(v):
    """C's round(): to the nearest int, halves away from zero (exact, in v's type)."""
    a = te.abs(v)
    whole = te.floor(a)
    up = te.select(a - whole >= te.const(0.5, v.dtype), te.const(1.0, v.dtype),
                   te.const(0.0, v.dtype))  # fmt: skip
    n = te.cast(whole + up, "int32")
    return te.select(v < te.const(0.0, v.dtype), -n, n)


def _roi_window(rois, r, p, start_k: int, end_k: int, pooled: int, size: int, scale: float):
    """[start, end) of bin p along one axis of ROI r, clamped to [0, size]."""
    f32 = "float32"
    start = _round_half_away(te.cast(rois(r, start_k), f32) * te.const(scale, f32))
    end = _round_half_away(te.cast(rois(r, end_k), f32) * te.const(scale, f32))
    length = te.max(end - start + 1, te.const(1, "int32"))
    binsize = te.cast(length, f32) / te.const(float(pooled), f32)
    lo = te.cast(te.floor(te.cast(p, f32) * binsize), "int32") + start
    hi = te.cast(te.ceil(te.cast(p + 1, f32) * binsize), "int32") + start
    zero, top = te.const(0, "int32"), te.const(size, "int32")
    return te.min(te.max(lo, zero), top), te.min(te.max(hi, zero), top)


def max_roi_pool(x: te.Tensor, rois: te.Tensor, pooled_shape, spatial_scale: float):
    """ONNX MaxRoiPool: (R, C, ph, pw), the max of each bin of each ROI (batch, x1, y1, x2, y2)
    (Note [max roi pool windows]): the true max, negative where all the bin's pixels are
    (never FLT_MIN, as an older ONNX Runtime gave); 0 for a bin that lies off the map."""
    _, c_, h_, w_ = (_int(d) for d in x.shape)
    r_ = _int(rois.shape[0])
    ph_, pw_ = (int(v) for v in pooled_shape)
    dt = x.dtype
    lowest = te.min_value(dt)
    kh, kw = te.reduce_axis((0, h_), name="kh"), te.reduce_axis((0, w_), name="kw")

    def rows(r, c, p, w):
        lo, hi = _roi_window(rois, r, p, 2, 4, ph_, h_, spatial_scale)
        inside = te.logical_and(kh.var >= lo, kh.var < hi)
        b = te.cast(rois(r, 0), "int32")
        return te.max(te.select(inside, x(b, c, kh.var, w), lowest), axis=[kh])

    row_max = te.compute((r_, c_, ph_, w_), rows, name="max_roi_pool_rows")

    def bins(r, c, p, q):
        lo, hi = _roi_window(rois, r, q, 1, 3, pw_, w_, spatial_scale)
        inside = te.logical_and(kw.var >= lo, kw.var < hi)
        return te.max(te.select(inside, row_max(r, c, p, kw.var), lowest), axis=[kw])

    pooled = te.compute((r_, c_, ph_, pw_), bins, name="max_roi_pool_bins")

    def empty_is_zero(r, c, p, q):
        h_lo, h_hi = _roi_window(rois, r, p, 2, 4, ph_, h_, spatial_scale)
        w_lo, w_hi = _roi_window(rois, r, q, 1, 3, pw_, w_, spatial_scale)
        empty = te.logical_or(h_hi <= h_lo, w_hi <= w_lo)
        return te.select(empty, te.const(0, dt), pooled(r, c, p, q))

    return te.compute(pooled.shape, empty_is_zero, name="max_roi_pool", tag="injective")
