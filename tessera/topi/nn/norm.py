"""Normalizations: batch_norm (inference), layer_norm, instance_norm, and local response norm.

    y = layer_norm(x, gamma, beta, axis=-1, epsilon=1e-5)   # over x's axes [axis, ndim)
    y = batch_norm(x, gamma, beta, mean, var, axis=1)         # tag "broadcast": fuses freely

layer_norm and instance_norm compute each row's sum and sum of squares in one pass (a tuple
reduction, tags "layer_norm" / "instance_norm"), in float64 and shifted by the row's first
element, so the variance E[d^2] - E[d]^2 stays accurate where float32 sums would cancel.
The reduction records attrs["n_outer"], the number of leading axes a schedule can run in
parallel; the output is an element-wise stage (tag "elemwise").

layer_norm over the last axis splits the sums into 16 lanes and a combine (softmax.py, Note
[lane split]; the combine is `layer_norm_moments`), then a row stage `layer_norm_stats` holds
the row's mean of d and 1 / std in x's dtype, and the output (d - mean) * rstd * gamma + beta
is computed in x's dtype: vector loops of x's width, one row stage per row.
"""

from __future__ import annotations

from tessera import te
from tessera.ir.dtype import DType
from tessera.topi.nn.softmax import (
    _normalize_axis,
    lane_split_reduce,
    row_length,
    row_split,
    row_stage,
)
from tessera.topi.symbolic import product


def _acc(dtype: DType) -> DType:
    # float64 sums: single-pass variance without cancellation, whatever the row's mean
    return DType.parse("float64")


def batch_norm(x, gamma, beta, mean, var, epsilon=1e-5, axis=1) -> te.Tensor:
    """(x - mean) * gamma / sqrt(var + epsilon) + beta, the parameters indexed by axis `axis`."""
    axis = _normalize_axis(axis, x.ndim, "batch_norm")

    def f(*i):
        c = i[axis]
        scale = gamma(c) / te.sqrt(var(c) + epsilon)
        return (x(*i) - mean(c)) * scale + beta(c)

    return te.compute(x.shape, f, name="batch_norm", tag="broadcast")


_sums = te.comm_reducer(
    lambda a, b: (a[0] + b[0], a[1] + b[1]),
    lambda *ts: tuple(te.const(0, t) for t in ts),
    name="sum_and_squares",
)


def moments(x: te.Tensor, start: int, tag: str):
    """(sum, sum of squares) of x - x[row, 0, ...] over axes [start, ndim), each shaped
    x.shape[:start], in float64. Shifting by the row's first element keeps the sums small
    relative to the spread, so var = E[d^2] - E[d]^2 does not cancel."""
    acc = _acc(x.dtype)
    r = [te.reduce_axis((0, d), name=f"k{j}") for j, d in enumerate(x.shape[start:])]
    first = (0,) * (x.ndim - start)

    def f(*i):
        d = te.cast(x(*i, *r), acc) - te.cast(x(*i, *first), acc)
        return _sums((d, d * d), axis=r)

    return te.compute(x.shape[:start], f, name=f"{tag}_moments", tag=tag, attrs={"n_outer": start})


def _normalized(x, stats, start, epsilon, scale_shift, name):
    acc = _acc(x.dtype)
    total, squares = stats
    count = product([row_length(d) for d in x.shape[start:]])
    count = float(count) if isinstance(count, int) else te.cast(count, acc)
    first = (0,) * (x.ndim - start)

    def f(*i):
        row = i[:start]
        mean = total(*row) / count
        var = te.max(squares(*row) / count - mean * mean, te.const(0, acc))
        d = te.cast(x(*i), acc) - te.cast(x(*row, *first), acc)
        y = te.cast((d - mean) * te.rsqrt(var + epsilon), x.dtype)
        g, b = scale_shift(i)
        return y * g + b

    return te.compute(x.shape, f, name=name, tag="elemwise")


def _layer_norm_last(x, epsilon, scale_shift) -> te.Tensor:
    """layer_norm over the last (static) axis: lane-split moments, float32 normalize pass."""
    acc = _acc(x.dtype)
    lead, n = list(x.shape[:-1]), row_length(x.shape[-1])

    def shifted(*i):
        d = te.cast(x(*i), acc) - te.cast(x(*i[:-1], 0), acc)
        return d, d * d

    split = row_split(n, acc)
    total, squares = lane_split_reduce(shifted, lead, n, _sums, "layer_norm_moments", split)
    count = float(n) if isinstance(n, int) else te.cast(n, acc)

    def stats(*r):
        mean = total(*r) / count
        var = te.max(squares(*r) / count - mean * mean, te.const(0, acc))
        return te.cast(mean, x.dtype), te.cast(te.rsqrt(var + epsilon), x.dtype)

    mean, rstd = row_stage(lead, stats, "layer_norm_stats")

    def f(*i):
        row = i[:-1]
        y = (x(*i) - x(*row, 0) - mean(*row)) * rstd(*row)
        g, b = scale_shift(i)
        return y * g + b

    return te.compute(x.shape, f, name="layer_norm", tag="elemwise")


def layer_norm(x, gamma, beta, axis=-1, epsilon=1e-5) -> te.Tensor:
    """Normalize over axes [axis, ndim); gamma and beta broadcast to x.shape[axis:] (numpy)."""
    start = _normalize_axis(axis, x.ndim, "layer_norm")

    def param(p, i):
        lead = x.ndim - p.ndim
        return p(
            *[0 if getattr(p.shape[j], "value", None) == 1 else i[lead + j] for j in range(p.ndim)]
        )

    scale_shift = lambda i: (param(gamma, i), param(beta, i))  # noqa: E731
    if start == x.ndim - 1:
        return _layer_norm_last(x, epsilon, scale_shift)
    stats = moments(x, start, "layer_norm")
    return _normalized(x, stats, start, epsilon, scale_shift, "layer_norm")


def instance_norm(x, gamma, beta, epsilon=1e-5) -> te.Tensor:
    """Normalize each (n, c) over the spatial axes; gamma and beta are per channel."""
    if x.ndim < 3:
        raise ValueError(f"instance_norm: expects data of rank >= 3, got {x.shape}")
    stats = moments(x, 2, "instance_norm")
    return _normalized(x, stats, 2, epsilon, lambda i: (gamma(i[1]), beta(i[1])), "instance_norm")


def lrn(x, size, alpha=1e-4, beta=0.75, bias=1.0) -> te.Tensor:
    """ONNX LRN: x / (bias + alpha / size * square_sum) ** beta, the square sum over channels
    [c - (size - 1) // 2, c + ceil((size - 1) / 2)]. The square sum (tag "lrn", the anchor of
    `schedule_lrn`) clamps its channel index, so every load is in bounds and the innermost
    axis vectorizes; the power is exp(-beta * log(d)) times x (vectorized exp and log, where
    pow is a libm call per element; d >= bias > 0 in every model, and d = 0 gives x * inf as
    x / 0 ** beta does)."""
    if x.ndim < 3:
        raise ValueError(f"lrn: expects data of rank >= 3, got {x.shape}")
    channels = x.shape[1].value
    lo = (size - 1) // 2
    # a sum of `size` squares has no cancellation: x's own precision (at least float32) holds
    # it, and keeps exp and log in vector code (float64 took a libm call per element)
    dtype = DType.parse(x.dtype)
    acc = dtype if dtype.bits >= 32 else DType.parse("float32")
    r = te.reduce_axis((0, size), name="rc")

    def square_sum(n, c, *sp):
        ch = c - lo + r.var
        inside = te.all(ch >= 0, ch < channels)
        v = te.cast(x(n, te.min(te.max(ch, 0), channels - 1), *sp), acc)
        return te.sum(te.select(inside, v * v, te.const(0, acc)), axis=r)

    sq = te.compute(x.shape, square_sum, name="lrn_square_sum", tag="lrn")

    def f(*i):
        d = sq(*i) * (alpha / size) + bias
        scale = te.exp(te.log(d) * te.const(-beta, acc))
        return te.cast(te.cast(x(*i), acc) * scale, x.dtype)

    return te.compute(x.shape, f, name="lrn", tag="elemwise")
