"""Data-movement te operators: reshape, transpose, concatenate, split, slice, the gathers,
tile, pad, depth_to_space / space_to_depth, reverse.

    y = topi.transform.transpose(x, (0, 2, 1))
    ys = topi.transform.split(x, axis=1, sections=(2, 3))     # a tuple of tensors

Every compute is tagged "injective": out[i] reads a fixed function of i, so a fused group
inlines it into its consumer. Gathered indices may be negative (counted from the end, as
numpy); an index still out of range is clamped, so a bad index never reads outside a buffer.
"""

from __future__ import annotations

import numpy as np

from tessera import te
from tessera.tir.expr import Expr, IntImm
from tessera.topi.elemwise import scalar_as

INJECTIVE = "injective"


def _ints(shape) -> tuple[int, ...]:
    try:
        return tuple(int(d.value) for d in shape)
    except AttributeError:
        raise ValueError(f"this operator needs a static shape, got {list(shape)}") from None


def ravel(index, shape) -> Expr:
    """Row-major linear position of index in shape (i0 * d1 + i1 ..., no leading 0 * d0)."""
    if not index:
        return te.const(0, "int32")
    linear = index[0]
    for i, d in zip(index[1:], shape[1:], strict=True):
        linear = linear * d + i
    return linear


def unravel(linear: Expr, shape) -> tuple[Expr, ...]:
    """The row-major index of a linear position."""
    out = []
    for d in reversed(shape):
        out.append(te.floormod(linear, d))
        linear = te.floordiv(linear, d)
    return tuple(reversed(out))


def unravel_rows(r: Expr, lead) -> list:
    """The index into leading dims `lead` of row r of their raveled view (Note [row view] in
    topi/x86/dense.py): 0 for a dim of 1, and r itself for a symbolic outermost dim (no
    remainder, so bound inference sees r)."""
    idx = []
    for k, d in enumerate(reversed(lead)):
        if isinstance(d, int) and d == 1:
            idx.append(0)
        elif k == len(lead) - 1 and not isinstance(d, int):
            idx.append(r)
        else:
            idx.append(r % d)
        r = r // d
    return idx[::-1]


def reshape(x: te.Tensor, newshape) -> te.Tensor:
    if not all(isinstance(d, int | np.integer | IntImm) for d in (*newshape, *x.shape)):
        return _symbolic_reshape(x, tuple(newshape))
    newshape = tuple(int(d) for d in newshape)
    if int(np.prod(newshape)) != int(np.prod(_ints(x.shape))):
        raise ValueError(f"cannot reshape {x} to {list(newshape)}")
    in_shape = _ints(x.shape)

    def body(*i):
        return x(*unravel(ravel(i, newshape), in_shape))

    return te.compute(newshape, body, name="reshape", tag=INJECTIVE)


def _symbolic_reshape(x: te.Tensor, newshape: tuple) -> te.Tensor:
    """reshape with symbolic dims (graph/dims.py): the leading dims both shapes share are read
    as they are; the rest goes through a linear position (floordiv/floormod by the dims)."""
    in_shape = tuple(x.shape)
    same = 0
    while same < min(len(in_shape), len(newshape)) and _same_dim(in_shape[same], newshape[same]):
        same += 1

    def body(*i):
        rest = unravel(ravel(i[same:], newshape[same:]), in_shape[same:])
        return x(*i[:same], *rest)

    return te.compute(newshape, body, name="reshape", tag=INJECTIVE)


def _same_dim(a, b) -> bool:
    from tessera.arith import simplify

    d = simplify(te.const(0, "int32") + a - b)
    return isinstance(d, IntImm) and d.value == 0


def transpose(x: te.Tensor, axes) -> te.Tensor:
    axes = [a % x.ndim for a in axes]
    shape = tuple(x.shape[a] for a in axes)

    def body(*i):
        index = [None] * x.ndim
        for out_axis, in_axis in enumerate(axes):
            index[in_axis] = i[out_axis]
        return x(*index)

    return te.compute(shape, body, name="transpose", tag=INJECTIVE)


def _replace(index, axis: int, value) -> tuple:
    return tuple(value if k == axis else v for k, v in enumerate(index))


def concatenate(xs, axis: int) -> te.Tensor:
    """Join along axis: a balanced tree of if_then_else on the position (only one side is
    loaded; Note [concatenate tree])."""
    axis = axis % xs[0].ndim
    pieces, start = [], 0
    for t in xs:
        size = int(t.shape[axis].value)
        if size > 0:
            pieces.append((t, start, start + size))
        start += size
    shape = _replace(xs[0].shape, axis, te.const(start, "int32"))
    if not pieces:
        return te.compute(shape, lambda *i: te.const(0, xs[0].dtype), "concatenate", INJECTIVE)

    def pick(i, pos, first, last):  # the piece among pieces[first:last] that holds pos
        if last - first == 1:
            t, lo, _ = pieces[first]
            return t(*_replace(i, axis, pos - lo))
        mid = (first + last) // 2
        return te.if_then_else(
            pos < pieces[mid][1], pick(i, pos, first, mid), pick(i, pos, mid, last)
        )

    return te.compute(
        shape, lambda *i: pick(i, i[axis], 0, len(pieces)), name="concatenate", tag=INJECTIVE
    )


# Note [concatenate tree]
# The position along the joined axis picks one piece: a chain of if_then_else tested up to n - 1
# bounds per element, a balanced tree tests about log2(n). Where the test stays per element
# (the axis outer to a vectorized one behind reshapes and transposes: a bidirectional LSTM's 64
# steps of h joined into its output, ddddocr_old), a chain of 32 made that copy 10 ns a float.


def split(x: te.Tensor, axis: int, sections) -> tuple[te.Tensor, ...]:
    axis = axis % x.ndim
    outs, offset = [], 0
    for k, n in enumerate(sections):
        shape = _replace(x.shape, axis, te.const(int(n), "int32"))

        def body(*i, offset=offset):
            return x(*_replace(i, axis, i[axis] + offset))

        outs.append(te.compute(shape, body, name=f"split{k}", tag=INJECTIVE))
        offset += int(n)
    return tuple(outs)


def slice_length(begin, end, stride):
    """len(range(begin, end, stride)); over a symbolic axis (graph/dims.py) the end may be a
    dim expression when the stride is 1 and begin an int (a slice to the axis' end: alter_layout
    slicing the padded channels of a blocked value keeps its symbolic batch and sizes whole)."""
    if isinstance(end, Expr) and not isinstance(end, IntImm):
        if stride != 1 or not isinstance(begin, int) or begin < 0:
            raise ValueError(
                f"a slice over a symbolic end {end} needs stride 1 and a static begin >= 0, "
                f"got begin {begin}, stride {stride}"
            )
        return end - begin if begin else end
    return len(range(begin, int(end), stride))


def strided_slice(x: te.Tensor, begin, end, strides) -> te.Tensor:
    """x[b0:e0:s0, ...] with (begin, end, stride) in Python's `slice.indices` form."""
    shape = tuple(slice_length(b, e, s) for b, e, s in zip(begin, end, strides, strict=True))

    def body(*i):
        return x(*[b + v * s for v, b, s in zip(i, begin, strides, strict=True)])

    return te.compute(shape, body, name="slice", tag=INJECTIVE)


def wrap_index(v: Expr, dim) -> Expr:
    """A gathered index: negative counts from the end; out of range is clamped into [0, dim).
    The result has the dtype of the shape (int32), like the loop variables it stands in for:
    an inlined consumer substitutes it for an axis and must not see a different dtype."""
    dim = te.const(int(dim.value), v.dtype) if hasattr(dim, "value") else te.const(dim, v.dtype)
    v = te.select(v < te.const(0, v.dtype), v + dim, v)
    v = te.max(te.min(v, dim - te.const(1, v.dtype)), te.const(0, v.dtype))
    return te.cast(v, "int32")


def gather(x: te.Tensor, indices: te.Tensor, axis: int = 0) -> te.Tensor:
    """np.take(x, indices, axis): out[a.., j.., b..] = x[a.., indices[j..], b..]."""
    axis = axis % x.ndim
    m = indices.ndim
    shape = (*x.shape[:axis], *indices.shape, *x.shape[axis + 1 :])

    def body(*i):
        idx = wrap_index(indices(*i[axis : axis + m]), x.shape[axis])
        return x(*i[:axis], idx, *i[axis + m :])

    return te.compute(shape, body, name="gather", tag=INJECTIVE)


def gather_elements(x: te.Tensor, indices: te.Tensor, axis: int = 0) -> te.Tensor:
    """np.take_along_axis: out[i] = x[i with i[axis] replaced by indices[i]]."""
    axis = axis % x.ndim

    def body(*i):
        return x(*_replace(i, axis, wrap_index(indices(*i), x.shape[axis])))

    return te.compute(indices.shape, body, name="gather_elements", tag=INJECTIVE)


def gather_nd(x: te.Tensor, indices: te.Tensor, batch_dims: int = 0) -> te.Tensor:
    """ONNX GatherND: the last axis of indices addresses the leading (non-batch) axes of x."""
    last = int(indices.shape[-1].value)
    m = indices.ndim - 1
    shape = (*indices.shape[:-1], *x.shape[batch_dims + last :])

    def body(*i):
        picked = [
            wrap_index(indices(*i[:m], te.const(k, "int32")), x.shape[batch_dims + k])
            for k in range(last)
        ]
        return x(*i[:batch_dims], *picked, *i[m:])

    return te.compute(shape, body, name="gather_nd", tag=INJECTIVE)


def tile(x: te.Tensor, reps) -> te.Tensor:
    shape = tuple(d * int(r) for d, r in zip(x.shape, reps, strict=True))
    return te.compute(
        shape,
        lambda *i: x(*[te.floormod(v, d) for v, d in zip(i, x.shape, strict=True)]),
        name="tile",
        tag=INJECTIVE,
    )


def reverse(x: te.Tensor, axis) -> te.Tensor:
    axes = {a % x.ndim for a in axis}

    def body(*i):
        dims = enumerate(zip(i, x.shape, strict=True))
        return x(*[d - 1 - v if k in axes else v for k, (v, d) in dims])

    return te.compute(x.shape, body, name="reverse", tag=INJECTIVE)


# -- pad --------------------------------------------------------------------------------------


def _pad_source(j: Expr, length: int, mode: str) -> Expr:
    """Position in [0, length) that output position j (relative to the data start) reads."""
    if mode == "edge":
        return te.max(te.min(j, length - 1), 0)
    if mode == "wrap":
        return te.floormod(j, length)
    if length == 1:  # reflect
        return te.const(0, "int32")
    # numpy's reflect repeats with period 2 * (length - 1): a triangle wave
    m = te.floormod(j, 2 * (length - 1))
    return te.select(m < length, m, 2 * (length - 1) - m)


def pad(x: te.Tensor, pad_width, mode: str = "constant", value=0.0) -> te.Tensor:
    """ONNX Pad (pads: all begins, then all ends); negative pads crop first."""
    n = x.ndim
    dims = _ints(x.shape)
    lo, hi = list(pad_width[:n]), list(pad_width[n:])
    shape = tuple(d + a + b for d, a, b in zip(dims, lo, hi, strict=True))
    crop = [max(0, -a) for a in lo]
    kept = [d - max(0, -a) - max(0, -b) for d, a, b in zip(dims, lo, hi, strict=True)]
    if mode != "constant" and any(k == 0 and s > 0 for k, s in zip(kept, shape, strict=True)):
        raise ValueError(f"pad mode {mode!r} cannot pad an empty axis of {x}")

    def body(*i):
        rel = [v - max(0, a) for v, a in zip(i, lo, strict=True)]  # position in the cropped data
        if mode == "constant":
            inside = te.all(*[te.all(r >= 0, r < k) for r, k in zip(rel, kept, strict=True)])
            src = [c + te.max(te.min(r, k - 1), 0) for r, c, k in zip(rel, crop, kept, strict=True)]
            return te.if_then_else(inside, x(*src), scalar_as(value, x.dtype))
        return x(*[c + _pad_source(r, k, mode) for r, c, k in zip(rel, crop, kept, strict=True)])

    return te.compute(shape, body, name="pad", tag=INJECTIVE)


# -- depth_to_space / space_to_depth ----------------------------------------------------------


def depth_to_space(x: te.Tensor, block_size: int, mode: str = "DCR") -> te.Tensor:
    n, c, h, w = x.shape
    b = int(block_size)
    oc = te.floordiv(c, b * b)

    def body(ni, ci, hi, wi):
        bh, bw = te.floormod(hi, b), te.floormod(wi, b)
        if mode == "DCR":
            channel = (bh * b + bw) * oc + ci
        else:
            channel = ci * (b * b) + bh * b + bw
        return x(ni, channel, te.floordiv(hi, b), te.floordiv(wi, b))

    return te.compute((n, oc, h * b, w * b), body, name="depth_to_space", tag=INJECTIVE)


def space_to_depth(x: te.Tensor, block_size: int) -> te.Tensor:
    n, c, h, w = x.shape
    b = int(block_size)

    def body(ni, ci, hi, wi):
        bh = te.floordiv(ci, c * b)
        bw = te.floormod(te.floordiv(ci, c), b)
        return x(ni, te.floormod(ci, c), hi * b + bh, wi * b + bw)

    shape = (n, c * (b * b), te.floordiv(h, b), te.floordiv(w, b))
    return te.compute(shape, body, name="space_to_depth", tag=INJECTIVE)
