"""Sorting ops whose result size depends on the data: unique.

    %y, %indices, %inverse, %counts, %count = unique(%x, axis=None, sorted=True)

`unique` is numpy.unique(x, return_index=True, return_inverse=True, return_counts=True,
axis=axis) (ONNX Unique) at capacity: y has as many slices along `axis` as x (x's size, y
flat, when axis is None), of which the first `count` hold the unique slices, sorted or (sorted
False) in order of first occurrence; indices and counts have one entry per slot, inverse one
per slice of x. Slots past `count` are 0. Op.row_counts: y, indices and counts have `count`
rows at run time (Note [run-time rows] in graph_build/executor_plan.py); y's are along `axis`.
"""

from __future__ import annotations

import numpy as np

from tessera.graph.ir import TensorType
from tessera.graph.op import OpKind, register_op
from tessera.graph.ops.common import type_error
from tessera.topi import sort as topi_sort

unique = register_op("unique", kind=OpKind.OPAQUE)
unique.row_counts = {0: 4, 1: 4, 3: 4}


def _axis(x_ndim: int, axis):
    if axis is None:
        return None
    if not -x_ndim <= axis < max(x_ndim, 1):
        raise type_error("unique", f"axis {axis} is out of range for rank {x_ndim}")
    return axis % x_ndim


@unique.type_rule
def _(x: TensorType, axis=None, sorted=True):  # noqa: A002  (ONNX's name)
    a = _axis(x.ndim, axis)
    n = int(np.prod(x.shape, dtype=np.int64)) if a is None else x.shape[a]
    size = int(np.prod(x.shape, dtype=np.int64))
    if x.ndim and a is not None and size == 0:
        raise type_error("unique", f"an empty {x} has no slices to compare")
    y = TensorType((n,), x.dtype) if a is None else x
    i64 = "int64"
    total = TensorType((size if a is None else x.shape[a],), i64)
    return y, TensorType((n,), i64), total, TensorType((n,), i64), TensorType((), i64)


@unique.reference
def _(x, axis=None, sorted=True):  # noqa: A002
    a = _axis(x.ndim, axis)
    flat = x.reshape(-1) if a is None else x
    y, idx, inv, cnt = np.unique(flat, return_index=True, return_inverse=True,
                                 return_counts=True, axis=a)  # fmt: skip
    inv = inv.reshape(-1)
    if not sorted:  # first-occurrence order
        order = np.argsort(idx, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        y, idx, cnt, inv = np.take(y, order, axis=a or 0), idx[order], cnt[order], rank[inv]
    n = flat.size if a is None else x.shape[a]
    k = idx.size
    out_y = np.zeros((n,) if a is None else x.shape, x.dtype)
    if a is None:
        out_y[:k] = y
    else:
        out_y[(slice(None),) * a + (slice(0, k),)] = y
    pad = np.zeros(n - k, np.int64)
    return (out_y, np.concatenate([idx.astype(np.int64), pad]), inv.astype(np.int64),
            np.concatenate([cnt.astype(np.int64), pad]), np.array(k, np.int64))  # fmt: skip


@unique.compute
def _(x, axis=None, sorted=True):  # noqa: A002
    return topi_sort.unique(x, _axis(x.ndim, axis), bool(sorted))


def _row_axis(attrs, i: int) -> int:
    axis = attrs.get("axis")
    return 0 if i != 0 or axis is None else axis


unique.row_axis = _row_axis
