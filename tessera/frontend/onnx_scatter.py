"""ONNX converters for the index-driven data movement ops: Scatter, ScatterElements, ScatterND,
TensorScatter (KV-cache writes), ReverseSequence and MaxUnpool.

Scatters become the `scatter_elements` / `scatter_nd` graph ops; TensorScatter and
ReverseSequence are gathers whose indices are computed in the graph from the write indices or
the sequence lengths (so those may be runtime inputs); MaxUnpool scatters each (n, c) plane.
"""

from __future__ import annotations

import numpy as np

from tessera.frontend.onnx_registry import NodeError, onnx_op


@onnx_op("Scatter", since=9)
def scatter(b, data, indices, updates, *, axis=0):
    return b.call("scatter_elements", data, indices, updates, axis=axis, reduction="none")


@onnx_op("ScatterElements", since=11)
def scatter_elements(b, data, indices, updates, *, axis=0, reduction="none"):
    return b.call("scatter_elements", data, indices, updates, axis=axis, reduction=reduction)


@onnx_op("ScatterND", since=11)
def scatter_nd(b, data, indices, updates, *, reduction="none"):
    return b.call("scatter_nd", data, indices, updates, reduction=reduction)


def _along(b, n: int, axis: int, ndim: int, dtype="int64"):
    """arange(n) shaped to broadcast along `axis` of a rank-`ndim` tensor."""
    shape = [1] * ndim
    shape[axis] = n
    return b.const(np.arange(n, dtype=dtype).reshape(shape))


def _per_batch(b, v, batch_axis: int, ndim: int):
    """A [batch] vector shaped to broadcast along `batch_axis`, as int64."""
    if v.type.dtype.numpy_name != "int64":
        v = b.call("cast", v, dtype="int64")
    shape = [1] * ndim
    shape[batch_axis] = b.shape_of(v)[0]
    return b.reshape(v, shape)


@onnx_op("TensorScatter", since=24)
def tensor_scatter(b, past_cache, update, write_indices=None, *, axis=-2, mode="linear"):
    """present[.., s, ..] = update[.., s - w[batch], ..] where 0 <= s - w < sequence_length
    (s - w taken modulo max_sequence_length in "circular" mode), else past[.., s, ..]."""
    if mode not in ("linear", "circular"):
        raise NodeError(f"unknown mode {mode!r}")
    shape, ndim = b.shape_of(past_cache), past_cache.type.ndim
    axis = axis % ndim
    if axis == 0:
        raise NodeError("axis must not be the batch axis 0")
    size, length = shape[axis], b.shape_of(update)[axis]
    rel = _along(b, size, axis, ndim)
    if write_indices is not None:
        rel = b.call("subtract", rel, _per_batch(b, write_indices, 0, ndim))
    if mode == "circular":
        rel = b.call("mod", rel, b.scalar(size, rel), fmod=0)
    inside = b.call(
        "logical_and",
        b.call("greater_equal", rel, b.scalar(0, rel)),
        b.call("less", rel, b.scalar(length, rel)),
    )
    index_shape = list(shape)
    index = b.call("clip", rel, a_min=0, a_max=length - 1)
    index = b.call("expand", index, shape=tuple(index_shape))
    picked = b.call("gather_elements", update, index, axis=axis)
    return b.call("where", inside, picked, past_cache)


@onnx_op("ReverseSequence", since=10)
def reverse_sequence(b, input, sequence_lens, *, batch_axis=1, time_axis=0):
    """out[.., t, ..] = input[.., len[b] - 1 - t, ..] for t < len[b], else input as it is."""
    shape, ndim = b.shape_of(input), input.type.ndim
    if {batch_axis, time_axis} != {0, 1}:
        raise NodeError(f"batch_axis {batch_axis} and time_axis {time_axis} must be 0 and 1")
    t = _along(b, shape[time_axis], time_axis, ndim)
    lens = _per_batch(b, sequence_lens, batch_axis, ndim)
    flipped = b.call("subtract", b.call("subtract", lens, b.scalar(1, lens)), t)
    index = b.call("where", b.call("less", t, lens), flipped, t)
    index = b.call("expand", index, shape=tuple(shape))
    return b.call("gather_elements", input, index, axis=time_axis)


@onnx_op("MaxUnpool", since=9)
def max_unpool(b, X, I, output_shape=None, *, kernel_shape, pads=None, strides=None):
    """Each value of X goes to the flat position I names in the output (the positions MaxPool's
    Indices output gives); the rest is 0. Each (n, c) plane is one scatter."""
    shape = b.shape_of(X)
    nd = len(kernel_shape)
    strides = tuple(strides or (1,) * nd)
    pads = tuple(pads or (0,) * (2 * nd))
    spatial = [
        (shape[2 + k] - 1) * strides[k] + kernel_shape[k] - pads[k] - pads[k + nd]
        for k in range(nd)
    ]
    inferred = (*shape[:2], *spatial)
    planes, plane = shape[0] * shape[1], int(np.prod(spatial))
    in_plane = int(np.prod(shape[2:]))
    offsets = b.const((np.arange(planes, dtype=np.int64) * plane).reshape(planes, 1))
    offsets = b.call("cast", offsets, dtype=I.type.dtype.numpy_name)
    index = b.call("subtract", b.reshape(I, (planes, in_plane)), offsets)
    zeros = b.const(np.zeros((planes, plane), X.type.dtype.numpy_name))
    y = b.call("scatter_elements", zeros, index, b.reshape(X, (planes, in_plane)), axis=1)
    y = b.reshape(y, inferred)
    if output_shape is None:
        return y
    # ONNX's reference: the indices address the inferred shape, which is then padded at the end
    out_shape = [int(d) for d in b.known(output_shape, "output_shape")]
    extra = [o - i for o, i in zip(out_shape, inferred, strict=True)]
    if min(extra) < 0:
        raise NodeError(f"output_shape {out_shape} is smaller than the unpooled {list(inferred)}")
    return b.call("pad", y, pad_width=(0,) * len(extra) + tuple(extra), mode="constant", value=0.0)
