"""softmax and log_softmax over any axis, numerically stable (the row maximum is subtracted).

    y = softmax(x, axis=-1)
    # (m, s) = online_max_sum_j x[.., j, ..]   (s = sum_j exp(x_j - m), m = max_j x_j)
    # y = exp(x - m) / s

Note [online softmax]: the row's maximum and its sum of exp(x - max) come from one tuple
reduction (tag "softmax"): combining (m1, s1) with (m2, s2) rescales the smaller side's sum by
exp(-|m1 - m2|). One pass over the row, one exp per element, and the output reads a single stage
(so a schedule can compute the reduction per row, inside the output's parallel loop). The
identity's maximum is the lowest finite value, not -inf, so rows holding -inf (masks) work.
The reduction records attrs["n_outer"] = axis, the leading axes a schedule can run in parallel;
the output is an element-wise stage (tag "elemwise"), so an epilogue can absorb it.
"""

from __future__ import annotations

import numpy as np

from tessera import te


def _normalize_axis(axis: int, ndim: int, op: str) -> int:
    if not -ndim <= axis < max(ndim, 1):
        raise ValueError(f"{op}: axis {axis} is out of range for a tensor of rank {ndim}")
    return axis % ndim


def _combine(a, b):
    (m1, s1), (m2, s2) = a, b
    e = te.exp(te.min(m1 - m2, m2 - m1))  # exp(-|m1 - m2|), written so that it is one exp
    return te.max(m1, m2), te.select(m1 >= m2, s1 + s2 * e, s1 * e + s2)


def _lowest_finite(dtype):
    # DType.min_value is -inf for floats; -inf - -inf would make the rescaling NaN
    return te.const(float(np.finfo(str(dtype)).min), dtype)


_max_sum = te.comm_reducer(
    _combine, lambda tm, ts: (_lowest_finite(tm), te.const(0, ts)), name="max_sum"
)


def row_max_sum(x: te.Tensor, axis: int, tag: str):
    """(max over axis, sum over axis of exp(x - max)), shaped like x without `axis`."""
    shape = [d for k, d in enumerate(x.shape) if k != axis]
    k = te.reduce_axis((0, x.shape[axis]), name="k")

    def f(*i):
        v = x(*i[:axis], k, *i[axis:])
        return _max_sum((v, te.const(1, x.dtype)), axis=k)

    return te.compute(shape, f, name=f"{tag}_max_sum", tag=tag, attrs={"n_outer": axis})


def softmax(x: te.Tensor, axis: int = -1) -> te.Tensor:
    axis = _normalize_axis(axis, x.ndim, "softmax")
    row_max, row_sum = row_max_sum(x, axis, "softmax")

    def f(*i):
        rest = (*i[:axis], *i[axis + 1 :])
        return te.exp(x(*i) - row_max(*rest)) / row_sum(*rest)

    return te.compute(x.shape, f, name="softmax", tag="elemwise")


def log_softmax(x: te.Tensor, axis: int = -1) -> te.Tensor:
    axis = _normalize_axis(axis, x.ndim, "log_softmax")
    row_max, row_sum = row_max_sum(x, axis, "log_softmax")

    def f(*i):
        rest = (*i[:axis], *i[axis + 1 :])
        return x(*i) - row_max(*rest) - te.log(row_sum(*rest))

    return te.compute(x.shape, f, name="log_softmax", tag="elemwise")
