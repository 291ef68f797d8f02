"""Image te operators: `resize` (nearest, linear, cubic; every ONNX coordinate mode).

    y = topi.image.resize(x, size=(1, 3, 64, 64), scales=(1, 1, 2, 2), mode="linear")

One te.compute (tag "injective"): each resampled axis maps its output position to a source
coordinate (in float64, so nearest rounding matches the reference exactly) and to 1, 2 or 4
taps (index, weight); the output is the sum over the product of the axes' taps, which equals
resampling one axis after another. Weights and the sum use the input dtype (float32 for
narrower floats).
"""

from __future__ import annotations

import itertools

import numpy as np

from tessera import te
from tessera.ir.dtype import DType
from tessera.tir.expr import Expr

INJECTIVE = "injective"
_F64 = "float64"


def _f(v) -> Expr:
    return te.const(float(v), _F64)


def source_coord(o: Expr, out_len: int, in_len: int, scale: float, mode: str, roi) -> Expr:
    """The input coordinate of output position o along one axis (float64), as the reference."""
    x = te.cast(o, _F64)
    half = (x + _f(0.5)) / _f(scale) - _f(0.5)
    if mode == "half_pixel":
        return half
    if mode == "half_pixel_symmetric":
        adjustment = out_len / (scale * in_len)
        return _f(in_len / 2 * (1 - adjustment)) + half
    if mode == "pytorch_half_pixel":
        return half if out_len > 1 else _f(0)
    if mode == "align_corners":
        return x * _f(in_len - 1) / _f(out_len - 1) if out_len > 1 else _f(0)
    if mode == "asymmetric":
        return x / _f(scale)
    if mode == "tf_half_pixel_for_nn":
        return (x + _f(0.5)) / _f(scale)
    if mode == "tf_crop_and_resize":
        start, end = roi
        if out_len > 1:
            return _f(start * (in_len - 1)) + x * _f(end - start) * _f(in_len - 1) / _f(out_len - 1)
        return _f(0.5 * (start + end) * (in_len - 1))
    raise ValueError(f"unknown coordinate_transformation_mode {mode!r}")


def static_coords(out_len: int, in_len: int, scale: float, mode: str, roi) -> np.ndarray:
    """source_coord evaluated in numpy (the same float64 operations, in the same order)."""
    o = te.var("o")
    expr = source_coord(o, out_len, in_len, scale, mode, roi)
    x = np.arange(out_len, dtype=np.float64)
    return np.broadcast_to(_eval_f64(expr, o, x), (out_len,))


def _eval_f64(e: Expr, o, x: np.ndarray):
    """Evaluate the few node kinds source_coord builds, elementwise over numpy values of o."""
    from tessera.tir import expr as E

    if e is o:
        return x
    if isinstance(e, E.FloatImm | E.IntImm):
        return np.float64(e.value)
    if isinstance(e, E.Cast):
        return _eval_f64(e.value, o, x).astype(np.float64)
    ops = {E.Add: np.add, E.Sub: np.subtract, E.Mul: np.multiply, E.Div: np.divide}
    return ops[type(e)](_eval_f64(e.a, o, x), _eval_f64(e.b, o, x))


def _clamp_index(v: Expr, in_len: int) -> Expr:
    return te.max(te.min(v, in_len - 1), 0)


def _to_index(v: Expr) -> Expr:
    return te.cast(v, "int32")


def _nearest_taps(c: Expr, in_len: int, nearest_mode: str):
    if nearest_mode == "round_prefer_floor":
        idx = te.ceil(c - _f(0.5))
    elif nearest_mode == "round_prefer_ceil":
        idx = te.floor(c + _f(0.5))
    elif nearest_mode == "floor":
        idx = te.floor(c)
    else:
        idx = te.ceil(c)
    # clamp in float first: a far-out coordinate must not overflow the int conversion
    idx = te.max(te.min(idx, _f(in_len - 1)), _f(0))
    return [(_to_index(idx), None)]


def _linear_taps(c: Expr, in_len: int):
    c = te.max(te.min(c, _f(in_len - 1)), _f(0))
    lo = te.floor(c)
    t = c - lo
    lo_idx = _to_index(lo)
    return [(lo_idx, _f(1) - t), (te.min(lo_idx + 1, in_len - 1), t)]


def _cubic_weight(s: Expr, a: float) -> Expr:
    s = te.abs(s)
    near = ((_f(a + 2) * s - _f(a + 3)) * s * s) + _f(1)
    far = ((_f(a) * s - _f(5 * a)) * s + _f(8 * a)) * s - _f(4 * a)
    return te.select(s <= _f(1), near, te.select(s < _f(2), far, _f(0)))


def _cubic_taps(c: Expr, in_len: int, a: float, exclude_outside: bool):
    # far-out coordinates (extrapolated crops) are clamped so the int conversion stays defined
    c = te.max(te.min(c, _f(in_len + 2)), _f(-3))
    base = te.floor(c)
    t = c - base
    base_idx = _to_index(base)
    dists = [t + _f(1), t, _f(1) - t, _f(2) - t]
    idx = [base_idx + k for k in (-1, 0, 1, 2)]
    weights = [_cubic_weight(d, a) for d in dists]
    if exclude_outside:
        weights = [
            te.select(te.all(i >= 0, i < in_len), w, _f(0))
            for i, w in zip(idx, weights, strict=True)
        ]
        total = weights[0] + weights[1] + weights[2] + weights[3]
        weights = [w / total for w in weights]
    return [(_clamp_index(i, in_len), w) for i, w in zip(idx, weights, strict=True)]


def _axis_roi(attrs: dict, axis: int):
    roi = attrs["roi"]
    return None if roi is None else (float(roi[axis]), float(roi[axis + attrs["ndim"]]))


def _axis_taps(o: Expr, axis: int, in_len: int, out_len: int, attrs: dict):
    """(taps, outside condition or None) of one resampled axis."""
    mode = attrs["coordinate_transformation_mode"]
    c = source_coord(o, out_len, in_len, attrs["scales"][axis], mode, _axis_roi(attrs, axis))
    if attrs["mode"] == "nearest":
        taps = _nearest_taps(c, in_len, attrs["nearest_mode"])
    elif attrs["mode"] == "linear":
        taps = _linear_taps(c, in_len)
    else:
        taps = _cubic_taps(c, in_len, attrs["cubic_coeff_a"], bool(attrs["exclude_outside"]))
    outside = None
    if axis in attrs["may_be_outside"]:
        outside = te.logical_or(c < _f(0), c > _f(in_len - 1))
    return taps, outside


def _is_identity_axis(axis: int, in_len: int, out_len: int, attrs: dict) -> bool:
    """Whether an axis is left as it is: skipped by the reference (same size, scale 1, not a
    crop), or mapped exactly onto itself. Records in attrs whether it can extrapolate."""
    mode = attrs["coordinate_transformation_mode"]
    scale = attrs["scales"][axis]
    if mode != "tf_crop_and_resize" and out_len == in_len and scale == 1.0:
        return True
    coords = static_coords(out_len, in_len, scale, mode, _axis_roi(attrs, axis))
    if mode == "tf_crop_and_resize" and np.any((coords < 0) | (coords > in_len - 1)):
        attrs["may_be_outside"].add(axis)
        return False
    # an integer coordinate reads one input element with weight 1 in every mode
    return out_len == in_len and np.array_equal(coords, np.arange(out_len))


def _pick(k: Expr, values):
    """values[k] for a loop variable k (a select chain: the tables are tiny)."""
    out = values[-1]
    for t, v in reversed(list(enumerate(values[:-1]))):
        out = te.select(k == t, v, out)
    return out


# Note [nearest by division]
# A nearest axis reads its source index from a table (one load per output element, then a
# load at that index: a gather of single elements; Resize nearest x2 of [1, 45, 49, 34] ran at
# 1.6-1.9x ONNX Runtime). Where the table is exactly floor((o * p + r) / q) for the reduced
# ratio p / q = in_len / out_len and some offset r (an integer upscale with asymmetric or
# half_pixel coordinates and the usual rounding: o // 2 for x2; an integer downscale: o * 2,
# or 3 o + 1 for half_pixel's /3), the index is that expression instead: affine in the loop,
# no table, and a vector of outputs loads at constant offsets from one address, which LLVM
# combines into one contiguous load and a shuffle (x2 on AVX2: 4 floats and a vpermps, no
# lane-by-lane inserts; tests/topi/test_image.py checks the assembly). The table is computed
# the reference's way and compared whole, so the rule holds for any mode and rounding that
# happens to produce it. Resize nearest x2 of [1, 45, 49, 34]: 1.87x -> 0.6-0.7x ORT.
_ROUND = {
    "round_prefer_floor": lambda c: np.ceil(c - 0.5),
    "round_prefer_ceil": lambda c: np.floor(c + 0.5),
    "floor": np.floor,
    "ceil": np.ceil,
}


def _nearest_division(axis: int, in_len: int, out_len: int, attrs: dict):
    """(p, q, r) where the nearest axis's source index is floor((o * p + r) / q) for every
    output o (Note [nearest by division]), else None."""
    from fractions import Fraction

    if attrs["mode"] != "nearest" or axis in attrs["may_be_outside"]:
        return None
    mode = attrs["coordinate_transformation_mode"]
    c = static_coords(out_len, in_len, attrs["scales"][axis], mode, _axis_roi(attrs, axis))
    table = np.clip(_ROUND[attrs["nearest_mode"]](c), 0, in_len - 1)
    p, q = Fraction(in_len, out_len).as_integer_ratio()
    o = np.arange(out_len, dtype=np.int64)
    for r in range(q * (int(table[0]) + 1)):  # the offset: table[0] == r // q
        if np.array_equal(table, (o * p + r) // q):
            return p, q, r
    return None


def _axis_table(axis: int, in_len: int, out_len: int, attrs: dict, acc: DType):
    """One axis's taps as small tensors over (output position, tap), so the coordinate math
    runs once per position and tap, not once per output element.
    Returns (taps, outside): taps is a list of functions o -> (index, weight or None)."""
    division = _nearest_division(axis, in_len, out_len, attrs)
    if division is not None:  # Note [nearest by division]
        p, q, r = division
        scaled = (lambda o: o) if p == 1 else (lambda o: o * p)
        shifted = scaled if r == 0 else (lambda o: scaled(o) + r)
        return [lambda o: (shifted(o) if q == 1 else te.floordiv(shifted(o), q), None)], None
    probe, probe_outside = _axis_taps(te.var("o"), axis, in_len, out_len, attrs)
    n_taps, has_weights = len(probe), probe[0][1] is not None

    def body(o, k):
        taps, outside = _axis_taps(o, axis, in_len, out_len, attrs)
        values = [_pick(k, [i for i, _ in taps])]
        if has_weights:
            values.append(_pick(k, [te.cast(w, acc) for _, w in taps]))
        if outside is not None:
            values.append(outside)
        return tuple(values)

    outs = te.compute((out_len, n_taps), body, name=f"resize_axis{axis}", tag="resize_table")
    idx = outs[0]
    weight = outs[1] if has_weights else None
    taps = [
        (lambda o, t=t: (idx(o, t), None if weight is None else weight(o, t)))
        for t in range(n_taps)
    ]
    outside = (lambda o: outs[-1](o, 0)) if probe_outside is not None else None
    return taps, outside


def _balanced(values, combine):
    """combine over values as a balanced tree (shallow expressions for 4^d-tap sums)."""
    while len(values) > 1:
        pairs = [combine(a, b) for a, b in zip(values[::2], values[1::2], strict=False)]
        values = pairs + (values[-1:] if len(values) % 2 else [])
    return values[0]


def resize(
    x: te.Tensor,
    size,
    scales,
    roi=None,
    mode="nearest",
    coordinate_transformation_mode="half_pixel",
    nearest_mode="round_prefer_floor",
    cubic_coeff_a=-0.75,
    exclude_outside=0,
    extrapolation_value=0.0,
) -> te.Tensor:
    """ONNX Resize with static sizes (the attributes of graph op `image.resize`)."""
    if mode not in ("nearest", "linear", "cubic"):
        raise ValueError(f"resize: unknown mode {mode!r}")
    in_shape = [int(d.value) for d in x.shape]
    attrs = {
        "mode": mode,
        "coordinate_transformation_mode": coordinate_transformation_mode,
        "nearest_mode": nearest_mode,
        "cubic_coeff_a": float(cubic_coeff_a),
        "exclude_outside": exclude_outside,
        "roi": roi,
        "scales": [float(s) for s in scales],
        "ndim": x.ndim,
        "may_be_outside": set(),
    }
    resampled = []
    for a in range(x.ndim):
        if _is_identity_axis(a, in_shape[a], int(size[a]), attrs):
            continue
        resampled.append(a)
    acc = x.dtype if not x.dtype.is_float or x.dtype.bits >= 32 else DType.parse("float32")

    tables = {a: _axis_table(a, in_shape[a], int(size[a]), attrs, acc) for a in resampled}
    if x.dtype.is_float:
        extrap = te.const(float(extrapolation_value), x.dtype)
    else:
        extrap = te.const(int(extrapolation_value), x.dtype)

    def body(*i):
        taps = [
            [tap(i[a]) for tap in tables[a][0]] if a in tables else [(i[a], None)]
            for a in range(x.ndim)
        ]
        terms = []
        for combo in itertools.product(*taps):
            v = x(*[idx for idx, _ in combo])
            weights = [w for _, w in combo if w is not None]
            if weights:
                v = te.cast(v, acc) * _balanced(weights, lambda a, b: a * b)
            terms.append(v)
        total = te.cast(_balanced(terms, lambda a, b: a + b), x.dtype)
        outside = [tables[a][1](i[a]) for a in tables if tables[a][1] is not None]
        return te.select(te.any(*outside), extrap, total) if outside else total

    return te.compute(tuple(int(s) for s in size), body, name="resize", tag=INJECTIVE)
