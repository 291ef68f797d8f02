"""Scatter ops: `scatter_elements` and `scatter_nd`, with ONNX's reductions.

    %y = scatter_elements(%data, %indices, %updates, axis=1, reduction="add")
    %y = scatter_nd(%data, %indices, %updates, reduction="none")

The output has the data's type. `reduction` is "none" (the last update to a position wins, as
ONNX's reference applies them in order), "add", "mul", "max" or "min". Indices may be negative
(counted from the end). The compute rules (`topi.scatter`) gather per output position.
"""

from __future__ import annotations

import numpy as np

from tessera.graph.ir import TensorType
from tessera.graph.op import OpKind, register_op
from tessera.graph.ops.common import normalize_axis, same_dtype, type_error
from tessera.topi import reduce as topi_reduce
from tessera.topi import scatter as topi_scatter

_COMBINE = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _check_reduction(op: str, reduction: str, data: TensorType) -> None:
    if reduction not in topi_scatter.REDUCTIONS:
        raise type_error(op, f"unknown reduction {reduction!r}")
    if reduction != "none" and data.dtype.is_bool:
        raise type_error(op, f"reduction {reduction!r} is not defined for {data}")


def _check_indices(op: str, indices: TensorType) -> None:
    if not indices.dtype.is_integer:
        raise type_error(op, f"indices must be integers, got {indices}")


def _write(out, index, value, reduction):
    out[index] = value if reduction == "none" else _COMBINE[reduction](out[index], value)


scatter_elements = register_op("scatter_elements", kind=OpKind.OPAQUE)


@scatter_elements.type_rule
def _(data: TensorType, indices: TensorType, updates: TensorType, axis=0, reduction="none"):
    op = "scatter_elements"
    axis = normalize_axis(op, axis, data.ndim)
    _check_reduction(op, reduction, data)
    _check_indices(op, indices)
    same_dtype(op, data, updates)
    if indices.shape != updates.shape or indices.ndim != data.ndim:
        raise type_error(op, f"indices {indices} and updates {updates} must match data's rank")
    if any(
        n > d for k, (n, d) in enumerate(zip(indices.shape, data.shape, strict=True)) if k != axis
    ):
        raise type_error(op, f"indices {indices} are larger than data {data} off axis {axis}")
    return data


@scatter_elements.reference
def _(data, indices, updates, axis=0, reduction="none"):
    out = np.array(data, copy=True)
    axis %= data.ndim
    for j in np.ndindex(indices.shape):
        index = list(j)
        index[axis] = int(indices[j]) % data.shape[axis]
        _write(out, tuple(index), updates[j], reduction)
    return out


@scatter_elements.compute
def _(data, indices, updates, axis=0, reduction="none"):
    return topi_scatter.scatter_elements(data, indices, updates, axis, reduction)


# Its sorting network, searches and scans are stages of their own (topi/scatter.py)
scatter_elements.schedule("generic")(topi_reduce.schedule_stages)


scatter_nd = register_op("scatter_nd", kind=OpKind.OPAQUE)


@scatter_nd.type_rule
def _(data: TensorType, indices: TensorType, updates: TensorType, reduction="none"):
    op = "scatter_nd"
    _check_reduction(op, reduction, data)
    _check_indices(op, indices)
    same_dtype(op, data, updates)
    if indices.ndim < 1 or not 1 <= indices.shape[-1] <= data.ndim:
        raise type_error(op, f"the last axis of indices {indices} must index into {data}")
    expected = indices.shape[:-1] + data.shape[indices.shape[-1] :]
    if updates.shape != expected:
        raise type_error(op, f"updates {updates} must have shape {list(expected)}")
    return data


@scatter_nd.reference
def _(data, indices, updates, reduction="none"):
    out = np.array(data, copy=True)
    q = indices.shape[-1]
    for u in np.ndindex(indices.shape[:-1]):
        index = tuple(int(v) % n for v, n in zip(indices[u], data.shape[:q], strict=True))
        _write(out, index, updates[u], reduction)
    return out


@scatter_nd.compute
def _(data, indices, updates, reduction="none"):
    if indices.ndim == 1:  # one update: give it a batch axis of 1
        from tessera.topi import transform as topi_transform

        indices = topi_transform.reshape(indices, (1, int(indices.shape[0].value)))
        updates = topi_transform.reshape(updates, (1, *(int(d.value) for d in updates.shape)))
    return topi_scatter.scatter_nd(data, indices, updates, reduction)
