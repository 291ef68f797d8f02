"""ONNX converters for shape and data-movement ops: Shape, Reshape, Flatten, (Un)Squeeze,
Transpose, Concat, Split, Slice, Gather*, Expand, Tile, Pad, Constant*, Range, OneHot, ...

Shapes are static, so `Shape` is a constant and ops whose shape-like inputs are constants get
static attributes; the ops that only compute shapes fold away (see GraphBuilder).
"""

from __future__ import annotations

import numpy as np

from tessera.frontend.onnx_registry import NodeError, onnx_op
from tessera.graph.dims import num_elements, same_dim, simplify_dim
from tessera.tir.expr import Expr


@onnx_op("Shape")
def shape(b, data, *, start=0, end=None):
    if not data.type.is_static:  # symbolic dims: a shape constant (graph/ir.py ShapeConstant)
        dims = np.array(list(data.type.shape) + [None], dtype=object)[:-1][start:end]
        return b.shape_const(dims)
    dims = np.array(b.shape_of(data), dtype=np.int64)
    return b.const(dims[start:end])


@onnx_op("Size")
def size(b, data):
    return b.const(np.array(int(np.prod(b.shape_of(data), dtype=np.int64)), dtype=np.int64))


def _onnx_reshape(in_shape, shape, allowzero=0):
    if not all(isinstance(d, int) for d in (*in_shape, *shape)):
        return _symbolic_reshape(in_shape, shape, allowzero)
    out = [int(d) for d in shape]
    for i, d in enumerate(out):
        if d == 0 and not allowzero:
            if i >= len(in_shape):
                raise NodeError(
                    f"shape {list(shape)} copies dim {i} of a rank-{len(in_shape)} input"
                )
            out[i] = in_shape[i]
    if out.count(-1) > 1:
        raise NodeError(f"shape {list(shape)} has more than one -1")
    if -1 in out:
        known = int(np.prod([d for d in out if d != -1], dtype=np.int64))
        total = int(np.prod(in_shape, dtype=np.int64))
        if known == 0 or total % known:
            raise NodeError(f"cannot reshape {list(in_shape)} to {list(shape)}")
        out[out.index(-1)] = total // known
    return out


def _symbolic_reshape(in_shape, shape, allowzero):
    """_onnx_reshape of an input with symbolic dims: 0 copies a dim, -1 is the elements left
    (an exact division of the symbolic sizes, else a clear error)."""
    out = [d if isinstance(d, Expr) else int(d) for d in shape]
    for i, d in enumerate(out):
        if d == 0 and not allowzero and i < len(in_shape):
            out[i] = in_shape[i]
    if out.count(-1) > 1 or any(isinstance(d, int) and d < -1 for d in out):
        raise NodeError(f"shape {list(shape)} has more than one -1 or a negative dim")
    if -1 in out:
        known = num_elements([d for d in out if not (isinstance(d, int) and d == -1)])
        rest = simplify_dim(num_elements(in_shape) // known) if known != 0 else None
        if rest is None or not same_dim(num_elements([rest, known]), num_elements(in_shape)):
            raise NodeError(
                f"cannot reshape {list(in_shape)} to {list(shape)}: the elements left for -1 "
                "are no exact division of the symbolic sizes"
            )
        out[out.index(-1)] = rest
    if not same_dim(num_elements(out), num_elements(in_shape)):
        raise NodeError(f"cannot reshape {list(in_shape)} to {list(shape)}")
    return out


@onnx_op("Reshape", since=5)
def reshape(b, data, shape, *, allowzero=0):
    in_shape = b.shape_of(data, symbolic=True)
    return b.reshape(data, _onnx_reshape(in_shape, b.known(shape, "shape"), allowzero))


@onnx_op("Flatten")
def flatten(b, input, *, axis=1):
    s = b.shape_of(input, symbolic=True)
    axis = axis + len(s) if axis < 0 else axis
    return b.reshape(input, (num_elements(s[:axis]), num_elements(s[axis:])))


def _squeeze(b, data, axes):
    s = b.shape_of(data, symbolic=True)
    if axes is None:
        axes = [i for i, d in enumerate(s) if d == 1]
    axes = {int(a) % len(s) for a in axes}
    for a in axes:
        if s[a] != 1:
            raise NodeError(f"cannot squeeze axis {a} of size {s[a]}")
    return b.reshape(data, [d for i, d in enumerate(s) if i not in axes])


def _unsqueeze(b, data, axes):
    s = list(b.shape_of(data, symbolic=True))
    rank = len(s) + len(axes)
    for a in sorted(int(a) % rank for a in axes):
        s.insert(a, 1)
    return b.reshape(data, s)


@onnx_op("Squeeze")
def squeeze_1(b, data, *, axes=None):
    return _squeeze(b, data, axes)


@onnx_op("Squeeze", since=13)
def squeeze_13(b, data, axes=None):
    return _squeeze(b, data, None if axes is None else b.known(axes, "axes").tolist())


@onnx_op("Unsqueeze")
def unsqueeze_1(b, data, *, axes):
    return _unsqueeze(b, data, axes)


@onnx_op("Unsqueeze", since=13)
def unsqueeze_13(b, data, axes):
    return _unsqueeze(b, data, np.atleast_1d(b.known(axes, "axes")).tolist())


@onnx_op("Transpose")
def transpose(b, data, *, perm=None):
    perm = tuple(perm) if perm is not None else tuple(reversed(range(data.type.ndim)))
    if perm == tuple(range(data.type.ndim)):
        return data
    return b.call("transpose", data, axes=perm)


@onnx_op("Concat")
def concat(b, *inputs, axis):
    inputs = [x for x in inputs if x is not None]
    if len(inputs) == 1:
        return inputs[0]
    return b.call("concatenate", *inputs, axis=axis)


def _split(b, input, axis, split, num_outputs):
    dim = b.shape_of(input, symbolic=True)[axis]
    if not isinstance(dim, int) and split is None:
        raise NodeError(f"cannot split the symbolic dim {dim} of {input.type} in equal parts")
    if split is None:
        n = num_outputs
        chunk = -(-dim // n)
        split = [chunk] * (n - 1) + [dim - chunk * (n - 1)]
        if split[-1] < 0:
            raise NodeError(f"cannot split {dim} into {n} parts")
    out = b.call("split", input, axis=axis, sections=tuple(int(s) for s in split))
    return out if isinstance(out, tuple) else (out,)


@onnx_op("Split", since=2)
def split_2(b, input, *, axis=0, split=None):
    return _split(b, input, axis, split, b.num_outputs)


@onnx_op("Split", since=13)
def split_13(b, input, split=None, *, axis=0):
    return _split(b, input, axis, b.known_or(split, None, "split"), b.num_outputs)


@onnx_op("Split", since=18)
def split_18(b, input, split=None, *, axis=0, num_outputs=None):
    sizes = b.known_or(split, None, "split")
    return _split(b, input, axis, sizes, num_outputs or b.num_outputs)


def _slice(b, data, starts, ends, axes, steps):
    shape = b.shape_of(data)
    nd = len(shape)
    begin, end, stride = [0] * nd, list(shape), [1] * nd
    axes = range(len(starts)) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    for a, s, e, st in zip(axes, starts, ends, steps, strict=True):
        a = int(a) % nd
        if st == 0:
            raise NodeError("slice steps must not be 0")
        # INT64_MAX / INT64_MIN mean "to the end"; Python's slice.indices clamps like ONNX.
        begin[a], end[a], stride[a] = slice(int(s), int(e), int(st)).indices(shape[a])
    if (begin, end, stride) == ([0] * nd, list(shape), [1] * nd):
        return data
    return b.call("slice", data, begin=tuple(begin), end=tuple(end), strides=tuple(stride))


@onnx_op("Slice")
def slice_1(b, data, *, axes=None, ends, starts):
    return _slice(b, data, starts, ends, axes, None)


@onnx_op("Slice", since=10)
def slice_10(b, data, starts, ends, axes=None, steps=None):
    known = b.known
    return _slice(b, data, known(starts, "starts").tolist(), known(ends, "ends").tolist(),
                  b.known_or(axes, None, "axes"), b.known_or(steps, None, "steps"))  # fmt: skip


@onnx_op("Gather")
def gather(b, data, indices, *, axis=0):
    return b.call("gather", data, indices, axis=axis)


@onnx_op("GatherElements", since=11)
def gather_elements(b, data, indices, *, axis=0):
    return b.call("gather_elements", data, indices, axis=axis)


@onnx_op("GatherND", since=11)
def gather_nd(b, data, indices, *, batch_dims=0):
    return b.call("gather_nd", data, indices, batch_dims=batch_dims)


@onnx_op("Expand", since=8)
def expand(b, input, shape):
    dims = b.known(shape, "shape")
    return b.call("expand", input, shape=tuple(d if isinstance(d, Expr) else int(d) for d in dims))


@onnx_op("Tile", since=6)
def tile(b, input, repeats):
    return b.call("tile", input, reps=tuple(int(r) for r in b.known(repeats, "repeats")))


def _pad(b, data, pads, mode, value, axes=None):
    nd = data.type.ndim
    pads = [int(p) for p in pads]
    if axes is not None:
        full = [0] * (2 * nd)
        k = len(axes)
        for j, a in enumerate(axes):
            full[int(a) % nd], full[int(a) % nd + nd] = pads[j], pads[j + k]
        pads = full
    if not any(pads):
        return data
    return b.call("pad", data, pad_width=tuple(pads), mode=mode, value=float(value))


@onnx_op("Pad", since=2)
def pad_2(b, data, *, mode="constant", pads, value=0.0):
    return _pad(b, data, pads, mode, value)


@onnx_op("Pad", since=11)
def pad_11(b, data, pads, constant_value=None, axes=None, *, mode="constant"):
    value = b.known_or(constant_value, np.zeros(()), "constant_value")
    value = np.asarray(value).reshape(-1)[0] if np.size(value) else 0.0
    axes = b.known_or(axes, None, "axes")
    return _pad(b, data, b.known(pads, "pads").tolist(), mode, value, axes)


@onnx_op("Constant")
def constant(
    b,
    *,
    value=None,
    value_float=None,
    value_floats=None,
    value_int=None,
    value_ints=None,
    value_string=None,
    value_strings=None,
    sparse_value=None,
):
    if sparse_value is not None or value_string is not None or value_strings is not None:
        raise NodeError("sparse and string constants are not supported")
    for v, dtype in ((value, None), (value_float, np.float32), (value_floats, np.float32),
                     (value_int, np.int64), (value_ints, np.int64)):  # fmt: skip
        if v is not None:
            return b.const(np.asarray(v, dtype=dtype))
    raise NodeError("has no value")


@onnx_op("ConstantOfShape", since=9)
def constant_of_shape(b, input, *, value=None):
    fill = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
    dims = b.known(input, "input")
    if any(isinstance(d, Expr) for d in dims.reshape(-1)):  # symbolic dims: filled at run time
        return b.call("expand", b.const(fill[:1].reshape(())), shape=tuple(dims.reshape(-1)))
    shape = tuple(int(d) for d in dims)
    return b.const(np.full(shape, fill[0], dtype=fill.dtype))


@onnx_op("Range", since=11)
def range_(b, start, limit, delta):
    s, l, d = (b.known(v, n) for v, n in ((start, "start"), (limit, "limit"), (delta, "delta")))
    return b.const(np.arange(s.item(), l.item(), d.item()).astype(s.dtype))


@onnx_op("EyeLike", since=9)
def eye_like(b, input, *, dtype=None, k=0):
    from onnx import helper

    out_dtype = (
        input.type.dtype.numpy_name if dtype is None else helper.tensor_dtype_to_np_dtype(dtype)
    )
    n, m = b.shape_of(input)
    return b.const(np.eye(n, m, k=k, dtype=out_dtype))


@onnx_op("OneHot", since=9)
def one_hot(b, indices, depth, values, *, axis=-1):
    depth_v = int(b.known(depth, "depth").reshape(-1)[0])
    rank = indices.type.ndim + 1
    axis = axis % rank
    idx = b.call("where", b.call("less", indices, b.scalar(0, indices)),
                 b.call("add", indices, b.scalar(depth_v, indices)), indices)  # fmt: skip
    shape = [1] * rank
    shape[axis] = depth_v
    iota = b.const(np.arange(depth_v, dtype=indices.type.dtype.numpy_name).reshape(shape))
    idx = b.reshape(idx, [*indices.type.shape[:axis], 1, *indices.type.shape[axis:]])
    hot = b.call("equal", idx, iota)
    off, on = b.call("split", values, axis=0, sections=(1, 1))
    return b.call("where", hot, b.reshape(on, ()), b.reshape(off, ()))


@onnx_op("NonZero", since=9)
def non_zero(b, X):
    return b.const(np.array(np.nonzero(b.known(X, "X")), dtype=np.int64))


@onnx_op("Trilu", since=14)
def trilu(b, input, k=None, *, upper=1):
    kv = int(b.known_or(k, np.zeros(()), "k").reshape(-1)[0]) if k is not None else 0
    n, m = b.shape_of(input)[-2:]
    mask = np.triu(np.ones((n, m), bool), kv) if upper else np.tril(np.ones((n, m), bool), kv)
    return b.call("where", b.const(mask), input, b.scalar(0, input))


@onnx_op("DepthToSpace")
def depth_to_space(b, input, *, blocksize, mode="DCR"):
    return b.call("nn.depth_to_space", input, block_size=blocksize, mode=mode)


@onnx_op("SpaceToDepth")
def space_to_depth(b, input, *, blocksize, mode="DCR"):
    if mode == "DCR":
        return b.call("nn.space_to_depth", input, block_size=blocksize)
    if mode != "CRD":
        raise NodeError(f"unknown mode {mode!r}")
    n, c, h, w = b.shape_of(input)
    k = blocksize
    x = b.reshape(input, (n, c, h // k, k, w // k, k))
    x = b.call("transpose", x, axes=(0, 1, 3, 5, 2, 4))
    return b.reshape(x, (n, c * k * k, h // k, w // k))
