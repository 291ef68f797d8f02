"""Injective ops that move data: reshape, transpose, concatenate, split, slice, gather,
gather_elements, gather_nd, expand, tile, pad, depth_to_space, space_to_depth, reverse.

Attributes are static and normalized by the frontend: `slice` gets one (begin, end, stride)
per axis in Python's `slice.indices` form; `pad` gets ONNX-order pads (all begins, then ends).
"""

from __future__ import annotations

import numpy as np

from tessera.graph.dims import is_symbolic, num_elements, same_dim
from tessera.graph.ir import TensorType
from tessera.graph.op import OpKind, register_op
from tessera.graph.ops.common import normalize_axes, normalize_axis, same_dtype, type_error
from tessera.ir.dtype import int32, int64
from tessera.topi import broadcast as topi_broadcast
from tessera.topi import transform as topi_transform

reshape = register_op("reshape", kind=OpKind.INJECTIVE)


@reshape.type_rule
def _(x: TensorType, newshape) -> TensorType:
    if any(isinstance(d, int) and d < 0 for d in newshape) or not same_dim(
        num_elements(newshape), num_elements(x.shape)
    ):
        raise type_error("reshape", f"cannot reshape {x} to {list(newshape)}")
    return x.with_shape(newshape)


@reshape.reference
def _(x, newshape):
    return x.reshape(newshape)


@reshape.compute
def _(x, newshape):
    return topi_transform.reshape(x, newshape)


transpose = register_op("transpose", kind=OpKind.INJECTIVE)


@transpose.type_rule
def _(x: TensorType, axes) -> TensorType:
    if sorted(normalize_axes("transpose", axes, x.ndim)) != list(range(x.ndim)):
        raise type_error("transpose", f"axes {list(axes)} are not a permutation for {x}")
    return x.with_shape(tuple(x.shape[a] for a in axes))


@transpose.reference
def _(x, axes):
    return np.transpose(x, axes)


@transpose.compute
def _(x, axes):
    return topi_transform.transpose(x, axes)


concatenate = register_op("concatenate", kind=OpKind.INJECTIVE)


@concatenate.type_rule
def _(*xs: TensorType, axis) -> TensorType:
    if not xs:
        raise type_error("concatenate", "needs at least one input")
    same_dtype("concatenate", *xs)
    axis = normalize_axis("concatenate", axis, xs[0].ndim)
    for t in xs:
        if t.ndim != xs[0].ndim or any(
            a != b for i, (a, b) in enumerate(zip(t.shape, xs[0].shape, strict=True)) if i != axis
        ):
            raise type_error("concatenate", f"shapes {[str(t) for t in xs]} differ off axis {axis}")
    size = sum(t.shape[axis] for t in xs)
    return xs[0].with_shape(tuple(size if i == axis else d for i, d in enumerate(xs[0].shape)))


@concatenate.reference
def _(*xs, axis):
    return np.concatenate(xs, axis=axis)


@concatenate.compute
def _(*xs, axis):
    return topi_transform.concatenate(xs, axis)


split = register_op("split", kind=OpKind.INJECTIVE)


@split.type_rule
def _(x: TensorType, axis, sections):
    axis = normalize_axis("split", axis, x.ndim)
    if sum(sections) != x.shape[axis] or min(sections, default=0) < 0:
        raise type_error("split", f"sections {list(sections)} do not add up to axis {axis} of {x}")
    return tuple(
        x.with_shape(tuple(s if i == axis else d for i, d in enumerate(x.shape))) for s in sections
    )


@split.reference
def _(x, axis, sections):
    return tuple(np.split(x, np.cumsum(sections)[:-1], axis=axis))


@split.compute
def _(x, axis, sections):
    return topi_transform.split(x, axis, sections)


slice_ = register_op("slice", kind=OpKind.INJECTIVE)


def _slice_len(start, stop, step):
    try:
        return topi_transform.slice_length(start, stop, step)
    except ValueError as err:
        raise type_error("slice", str(err)) from None


@slice_.type_rule
def _(x: TensorType, begin, end, strides) -> TensorType:
    if not len(begin) == len(end) == len(strides) == x.ndim:
        raise type_error("slice", f"needs one begin, end and stride per axis of {x}")
    if 0 in strides:
        raise type_error("slice", "strides must not be 0")
    for e, d in zip(end, x.shape, strict=True):
        if is_symbolic(e) and not same_dim(e, d):
            raise type_error("slice", f"a symbolic end {e} must be its axis' dim, got {x}")
    return x.with_shape(tuple(_slice_len(*a) for a in zip(begin, end, strides, strict=True)))


@slice_.reference
def _(x, begin, end, strides):
    # slice.indices form: a stop of -1 with a negative step means "through index 0".
    index = tuple(
        slice(b, None if e < 0 else e, s) for b, e, s in zip(begin, end, strides, strict=True)
    )
    return x[index]


@slice_.compute
def _(x, begin, end, strides):
    return topi_transform.strided_slice(x, begin, end, strides)


def _wrap_indices(indices, dim):
    return np.where(indices < 0, indices + dim, indices)


gather = register_op("gather", kind=OpKind.INJECTIVE)


@gather.type_rule
def _(x: TensorType, indices: TensorType, axis=0) -> TensorType:
    axis = normalize_axis("gather", axis, x.ndim)
    if indices.dtype not in (int32, int64):
        raise type_error("gather", f"indices must be int32 or int64, got {indices}")
    return x.with_shape((*x.shape[:axis], *indices.shape, *x.shape[axis + 1 :]))


@gather.reference
def _(x, indices, axis=0):
    return np.take(x, _wrap_indices(indices, x.shape[axis]), axis=axis)


@gather.compute
def _(x, indices, axis=0):
    return topi_transform.gather(x, indices, axis)


gather_elements = register_op("gather_elements", kind=OpKind.INJECTIVE)


@gather_elements.type_rule
def _(x: TensorType, indices: TensorType, axis=0) -> TensorType:
    normalize_axis("gather_elements", axis, x.ndim)
    if indices.ndim != x.ndim:
        raise type_error("gather_elements", f"indices {indices} and data {x} differ in rank")
    return x.with_shape(indices.shape)


@gather_elements.reference
def _(x, indices, axis=0):
    return np.take_along_axis(x, _wrap_indices(indices, x.shape[axis]), axis=axis)


@gather_elements.compute
def _(x, indices, axis=0):
    return topi_transform.gather_elements(x, indices, axis)


gather_nd = register_op("gather_nd", kind=OpKind.INJECTIVE)


@gather_nd.type_rule
def _(x: TensorType, indices: TensorType, batch_dims=0) -> TensorType:
    last = indices.shape[-1] if indices.ndim else 0
    if indices.ndim < 1 or batch_dims + last > x.ndim:
        raise type_error("gather_nd", f"indices {indices} do not fit data {x}")
    return x.with_shape((*indices.shape[:-1], *x.shape[batch_dims + last :]))


@gather_nd.reference
def _(x, indices, batch_dims=0):
    batch = x.shape[:batch_dims]
    nb = int(np.prod(batch, dtype=np.int64))
    xs = x.reshape(nb, *x.shape[batch_dims:])
    idx = indices.reshape(nb, -1, indices.shape[-1])
    rows = []
    for b in range(nb):
        ib = _wrap_indices(idx[b], np.array(xs.shape[1 : 1 + idx.shape[-1]]))
        rows.append(xs[b][tuple(ib.T)])
    return np.stack(rows).reshape(*indices.shape[:-1], *x.shape[batch_dims + indices.shape[-1] :])


@gather_nd.compute
def _(x, indices, batch_dims=0):
    return topi_transform.gather_nd(x, indices, batch_dims)


expand = register_op("expand", kind=OpKind.BROADCAST)


@expand.type_rule
def _(x: TensorType, shape) -> TensorType:
    from tessera.graph.ops.common import broadcast_shapes

    return x.with_shape(broadcast_shapes("expand", x.shape, tuple(shape)))


@expand.reference
def _(x, shape):
    return np.array(np.broadcast_to(x, np.broadcast_shapes(x.shape, tuple(shape))))


@expand.compute
def _(x, shape):
    return topi_broadcast.expand(x, shape)


tile = register_op("tile", kind=OpKind.INJECTIVE)


@tile.type_rule
def _(x: TensorType, reps) -> TensorType:
    if len(reps) != x.ndim or min(reps, default=0) < 0:
        raise type_error("tile", f"needs one non-negative repeat per axis of {x}, got {reps}")
    return x.with_shape(tuple(d * r for d, r in zip(x.shape, reps, strict=True)))


@tile.reference
def _(x, reps):
    return np.tile(x, reps)


@tile.compute
def _(x, reps):
    return topi_transform.tile(x, reps)


pad = register_op("pad", kind=OpKind.INJECTIVE)
_PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "edge", "wrap": "wrap"}


@pad.type_rule
def _(x: TensorType, pad_width, mode="constant", value=0.0) -> TensorType:
    if mode not in _PAD_MODES:
        raise type_error("pad", f"unknown mode {mode!r} (constant, reflect, edge, wrap)")
    if len(pad_width) != 2 * x.ndim:
        raise type_error("pad", f"needs {2 * x.ndim} pads for {x}, got {list(pad_width)}")
    n = x.ndim
    shape = tuple(d + pad_width[i] + pad_width[i + n] for i, d in enumerate(x.shape))
    if min(shape, default=0) < 0:
        raise type_error("pad", f"pads {list(pad_width)} crop {x} below size 0")
    return x.with_shape(shape)


@pad.reference
def _(x, pad_width, mode="constant", value=0.0):
    n = x.ndim
    # Negative pads crop (ONNX allows them); crop first, then pad.
    crop = tuple(
        slice(max(0, -pad_width[i]), x.shape[i] - max(0, -pad_width[i + n])) for i in range(n)
    )
    x = x[crop]
    widths = [(max(0, pad_width[i]), max(0, pad_width[i + n])) for i in range(n)]
    if mode == "constant":
        return np.pad(x, widths, mode="constant", constant_values=np.array(value).astype(x.dtype))
    return np.pad(x, widths, mode=_PAD_MODES[mode])


@pad.compute
def _(x, pad_width, mode="constant", value=0.0):
    return topi_transform.pad(x, pad_width, mode, value)


depth_to_space = register_op("nn.depth_to_space", kind=OpKind.INJECTIVE)


@depth_to_space.type_rule
def _(x: TensorType, block_size, mode="DCR") -> TensorType:
    if x.ndim != 4 or x.shape[1] % (block_size * block_size) or mode not in ("DCR", "CRD"):
        raise type_error("nn.depth_to_space", f"bad input {x}, block {block_size}, mode {mode}")
    n, c, h, w = x.shape
    return x.with_shape((n, c // block_size**2, h * block_size, w * block_size))


@depth_to_space.reference
def _(x, block_size, mode="DCR"):
    n, c, h, w = x.shape
    b = block_size
    if mode == "DCR":
        y = x.reshape(n, b, b, c // b**2, h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape(n, c // b**2, b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return y.reshape(n, c // b**2, h * b, w * b)


@depth_to_space.compute
def _(x, block_size, mode="DCR"):
    return topi_transform.depth_to_space(x, block_size, mode)


space_to_depth = register_op("nn.space_to_depth", kind=OpKind.INJECTIVE)


@space_to_depth.type_rule
def _(x: TensorType, block_size) -> TensorType:
    if x.ndim != 4 or x.shape[2] % block_size or x.shape[3] % block_size:
        raise type_error("nn.space_to_depth", f"bad input {x} for block size {block_size}")
    n, c, h, w = x.shape
    return x.with_shape((n, c * block_size**2, h // block_size, w // block_size))


@space_to_depth.reference
def _(x, block_size):
    n, c, h, w = x.shape
    b = block_size
    y = x.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4)
    return y.reshape(n, c * b * b, h // b, w // b)


@space_to_depth.compute
def _(x, block_size):
    return topi_transform.space_to_depth(x, block_size)


reverse = register_op("reverse", kind=OpKind.INJECTIVE)


@reverse.type_rule
def _(x: TensorType, axis) -> TensorType:
    normalize_axes("reverse", axis, x.ndim)
    return x


@reverse.reference
def _(x, axis):
    return np.flip(x, axis=tuple(axis))


@reverse.compute
def _(x, axis):
    return topi_transform.reverse(x, axis)
