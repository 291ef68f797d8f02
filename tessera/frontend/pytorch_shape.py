"""ATen converters that move data without computing: views, permutes, slicing, concatenation,
indexing, padding, copies and casts. Argument names are those of the ATen schemas.

Views whose target shape torch spells with -1 or implied dims (view, squeeze, unsqueeze,
expand) take the shape torch computed for the node (`b.out_shape`).
"""

from __future__ import annotations

import numpy as np

from tessera.frontend.pytorch_registry import NodeError, aten_op


@aten_op("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default",
         "aten.squeeze.dims", "aten.squeeze.dim", "aten.squeeze.default",
         "aten.unsqueeze.default", "aten.flatten.using_ints", "aten.view_copy.default",
         "aten.unflatten.int")  # fmt: skip
def view(b, self, **_):
    return b.reshape(self, b.out_shape)


@aten_op("aten.clone.default", "aten.alias.default", "aten.detach.default",
         "aten.lift_fresh_copy.default", "aten.contiguous.default",
         "aten.dropout.default")  # fmt: skip
def identity(b, self, **_):
    return self


@aten_op("aten.copy.default")
def copy(b, self, src, non_blocking=False):
    """self's shape and dtype, src's values (broadcast)."""
    x = b.cast(src, self.type.dtype.numpy_name)
    return x if x.type.shape == self.type.shape else b.call("expand", x, shape=self.type.shape)


@aten_op("aten._to_copy.default", "aten.to.dtype", "aten.type_as.default")
def to_copy(b, self, **_):
    return b.cast(self, b.out_dtype)


@aten_op("aten.permute.default")
def permute(b, self, dims):
    axes = tuple(int(d) % self.type.ndim for d in dims)
    if axes == tuple(range(self.type.ndim)):
        return self
    out = b.call("transpose", self, axes=axes)
    if axes == (1, 0):
        b.transposed[id(out)] = self  # so mm/addmm with W.t() becomes nn.dense with W
    return out


@aten_op("aten.t.default")
def t(b, self):
    return self if self.type.ndim < 2 else permute(b, self, (1, 0))


@aten_op("aten.transpose.int")
def transpose(b, self, dim0, dim1):
    axes = list(range(self.type.ndim))
    axes[dim0], axes[dim1] = axes[dim1], axes[dim0]
    return permute(b, self, axes)


@aten_op("aten.expand.default", "aten.expand_copy.default")
def expand(b, self, size, implicit=False):
    if self.type.shape == b.out_shape:
        return self
    return b.call("expand", self, shape=b.out_shape)


@aten_op("aten.repeat.default")
def repeat(b, self, repeats):
    x = b.reshape(self, (1,) * (len(repeats) - self.type.ndim) + self.type.shape)
    return b.call("tile", x, reps=tuple(int(r) for r in repeats))


@aten_op("aten.cat.default", "aten.concat.default")
def cat(b, tensors, dim=0):
    tensors = [b.cast(x, b.out_dtype) for x in tensors if x.type.shape != (0,)]
    if len(tensors) == 1:
        return tensors[0]
    return b.call("concatenate", *tensors, axis=dim % len(b.out_shape))


@aten_op("aten.stack.default")
def stack(b, tensors, dim=0):
    dim = dim % len(b.out_shape)
    parts = [b.reshape(x, x.type.shape[:dim] + (1,) + x.type.shape[dim:]) for x in tensors]
    return parts[0] if len(parts) == 1 else b.call("concatenate", *parts, axis=dim)


def _slice(b, x, dim, start, end, step=1):
    n = x.type.ndim
    dim = dim % n
    size = x.type.shape[dim]
    start, end, step = slice(start, end, step).indices(size)
    if (start, end, step) == (0, size, 1):
        return x
    begin, stop, strides = [0] * n, list(x.type.shape), [1] * n
    begin[dim], stop[dim], strides[dim] = start, end, step
    return b.call("slice", x, begin=tuple(begin), end=tuple(stop), strides=tuple(strides))


@aten_op("aten.slice.Tensor", "aten.slice_copy.Tensor")
def slice_(b, self, dim=0, start=None, end=None, step=1):
    return _slice(b, self, dim, start, end, step)


@aten_op("aten.narrow.default")
def narrow(b, self, dim, start, length):
    return _slice(b, self, dim, start, start + length)


@aten_op("aten.select.int", "aten.select_copy.int")
def select(b, self, dim, index):
    index = index % self.type.shape[dim]
    return b.reshape(_slice(b, self, dim, index, index + 1), b.out_shape)


@aten_op("aten.split_with_sizes.default", "aten.split_with_sizes_copy.default")
def split_with_sizes(b, self, split_sizes, dim=0):
    sizes = tuple(int(s) for s in split_sizes)
    if len(sizes) == 1:
        return (self,)
    out = b.call("split", self, axis=dim % self.type.ndim, sections=sizes)
    return tuple(out)


@aten_op("aten.split.Tensor", "aten.split_copy.Tensor")
def split(b, self, split_size, dim=0):
    n = self.type.shape[dim]
    sizes = [split_size] * (n // split_size) + ([n % split_size] if n % split_size else [])
    return split_with_sizes(b, self, sizes, dim)


@aten_op("aten.unbind.int", "aten.unbind_copy.int")
def unbind(b, self, dim=0):
    dim = dim % self.type.ndim
    parts = split_with_sizes(b, self, [1] * self.type.shape[dim], dim)
    shape = self.type.shape[:dim] + self.type.shape[dim + 1 :]
    return tuple(b.reshape(p, shape) for p in parts)


@aten_op("aten.index_select.default")
def index_select(b, self, dim, index):
    return b.call("gather", self, index, axis=dim % self.type.ndim)


@aten_op("aten.embedding.default")
def embedding(b, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    return b.call("gather", weight, indices, axis=0)


@aten_op("aten.gather.default")
def gather(b, self, dim, index, sparse_grad=False):
    return b.call("gather_elements", self, index, axis=dim % self.type.ndim)


@aten_op("aten.index.Tensor")
def index(b, self, indices):
    """x[idx] with one index tensor (at any position; the others None): a gather."""
    given = [(i, ix) for i, ix in enumerate(indices) if ix is not None]
    if len(given) != 1:
        raise NodeError("indexing with several index tensors is not supported")
    axis, ix = given[0]
    if ix.type.dtype.numpy_name == "bool":
        raise NodeError("boolean-mask indexing has a data-dependent shape")
    return b.call("gather", self, ix, axis=axis)


@aten_op("aten.flip.default")
def flip(b, self, dims):
    return b.call("reverse", self, axis=tuple(d % self.type.ndim for d in dims))


@aten_op("aten.roll.default")
def roll(b, self, shifts, dims=()):
    x = self
    if not dims:
        x, dims = b.reshape(self, (self.type.size,)), (0,)
    for s, d in zip(shifts, dims, strict=True):
        n = x.type.shape[d]
        s %= n
        if s:
            x = b.call("concatenate", _slice(b, x, d, n - s, n), _slice(b, x, d, 0, n - s), axis=d)
    return b.reshape(x, b.out_shape)


@aten_op("aten.constant_pad_nd.default")
def constant_pad_nd(b, self, pad, value=0):
    """torch lists (begin, end) pairs from the last dim backwards; negative pads crop."""
    n = self.type.ndim
    width = [0] * (2 * n)
    for i in range(len(pad) // 2):
        axis = n - 1 - i
        width[axis], width[axis + n] = int(pad[2 * i]), int(pad[2 * i + 1])
    return b.call("pad", self, pad_width=tuple(width), mode="constant", value=float(value))


def _pad_mode(mode):
    def convert(b, self, padding):
        n = self.type.ndim
        width = [0] * (2 * n)
        for i in range(len(padding) // 2):
            axis = n - 1 - i
            width[axis], width[axis + n] = int(padding[2 * i]), int(padding[2 * i + 1])
        return b.call("pad", self, pad_width=tuple(width), mode=mode)

    return convert


for _nd in (1, 2, 3):
    aten_op(f"aten.reflection_pad{_nd}d.default")(_pad_mode("reflect"))
    aten_op(f"aten.replication_pad{_nd}d.default")(_pad_mode("edge"))


@aten_op("aten.slice_scatter.default")
def slice_scatter(b, self, src, dim=0, start=None, end=None, step=1):
    """self with self[..., start:end:step, ...] = src: the pieces around src, concatenated."""
    dim %= self.type.ndim
    size = self.type.shape[dim]
    start, end, step = slice(start, end, step).indices(size)
    if step != 1:
        index = np.arange(start, end, step)
        shape = [1] * self.type.ndim
        shape[dim] = len(index)
        indices = np.broadcast_to(index.reshape(shape), src.type.shape).astype(np.int64)
        return b.call("scatter_elements", self, b.const(indices), src, axis=dim)
    parts = [_slice(b, self, dim, 0, start), src, _slice(b, self, dim, end, size)]
    parts = [p for p in parts if p.type.shape[dim] > 0]
    return parts[0] if len(parts) == 1 else b.call("concatenate", *parts, axis=dim)


@aten_op("aten.select_scatter.default")
def select_scatter(b, self, src, dim, index):
    dim %= self.type.ndim
    index %= self.type.shape[dim]
    src = b.reshape(src, src.type.shape[:dim] + (1,) + src.type.shape[dim:])
    return slice_scatter(b, self, src, dim, index, index + 1)


@aten_op("aten.scatter.src", "aten.scatter.value")
def scatter(b, self, dim, index, src=None, value=None):
    updates = src if src is not None else b.const(np.full(index.type.shape, value, b.out_dtype))
    return b.call("scatter_elements", self, index, updates, axis=dim % self.type.ndim)


@aten_op("aten.scatter_add.default")
def scatter_add(b, self, dim, index, src):
    return b.call("scatter_elements", self, index, src, axis=dim % self.type.ndim, reduction="add")


@aten_op("aten.index_put.default")
def index_put(b, self, indices, values, accumulate=False):
    """x[idx] = v with one integer index tensor (a scatter along its axis), or x[mask] = v with
    a boolean mask and a single value (a where)."""
    given = [(i, ix) for i, ix in enumerate(indices) if ix is not None]
    if len(given) != 1:
        raise NodeError("index_put with several index tensors is not supported")
    axis, ix = given[0]
    dtype = self.type.dtype.numpy_name
    if ix.type.dtype.numpy_name == "bool":
        if values.type.size != 1 or accumulate:
            raise NodeError("x[mask] = values needs a single value (data-dependent otherwise)")
        mask = b.reshape(ix, ix.type.shape + (1,) * (self.type.ndim - ix.type.ndim))
        return b.call("where", mask, b.reshape(b.cast(values, dtype), ()), self)
    if ix.type.ndim != 1:
        raise NodeError("index_put with a multi-dimensional index is not supported")
    shape = list(self.type.shape)
    shape[axis] = ix.type.shape[0]
    axes_shape = [1] * self.type.ndim
    axes_shape[axis] = shape[axis]
    index = b.call("expand", b.reshape(ix, axes_shape), shape=tuple(shape))
    updates = b.call("expand", b.cast(values, dtype), shape=tuple(shape))
    reduction = "add" if accumulate else "none"
    return b.call("scatter_elements", self, index, updates, axis=axis, reduction=reduction)
