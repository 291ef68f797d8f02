"""Reductions (sum, mean, max, min, prod, argmax, argmin), and the scans and selections that
reduce along an axis (cumsum, topk).

`axis` is a tuple of axes (None: all axes); `keepdims` keeps reduced axes as size 1.
"""

from __future__ import annotations

import numpy as np

from tessera.graph.ir import TensorType
from tessera.graph.op import OpKind, register_op
from tessera.graph.ops.common import (
    broadcast_shapes,
    normalize_axes,
    normalize_axis,
    type_error,
)
from tessera.ir.dtype import int64
from tessera.topi import reduce as topi_reduce


def _reduced_shape(op, x: TensorType, axis, keepdims):
    axes = tuple(range(x.ndim)) if axis is None else normalize_axes(op, axis, x.ndim)
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    return tuple(d for i, d in enumerate(x.shape) if i not in axes)


def _accumulate(fn):
    """Sum-like reductions accumulate in float64 (or int64) and return the input dtype."""

    def run(x, axis=None, keepdims=False):
        wide = np.float64 if x.dtype.kind == "f" else None
        out = fn(x, axis=axis, keepdims=bool(keepdims), dtype=wide)
        return np.asarray(out).astype(x.dtype)

    return run


def _select(fn):
    def run(x, axis=None, keepdims=False):
        if x.size == 0:
            raise ValueError("max/min of an empty tensor")
        return np.asarray(fn(x, axis=axis, keepdims=bool(keepdims)))

    return run


_REDUCE = {
    "sum": _accumulate(np.sum),
    "mean": _accumulate(np.mean),
    "prod": _accumulate(np.prod),
    "max": _select(np.max),
    "min": _select(np.min),
}

for _name, _fn in _REDUCE.items():
    _op = register_op(_name, kind=OpKind.COMM_REDUCE)

    def _reduce_type(x: TensorType, axis=None, keepdims=False, _name=_name) -> TensorType:
        return x.with_shape(_reduced_shape(_name, x, axis, keepdims))

    _op.type_rule(_reduce_type)
    _op.reference(_fn)

    def _reduce_compute(x, axis=None, keepdims=False, _name=_name):
        return topi_reduce.reduce(_name, x, axis, bool(keepdims))

    _op.compute(_reduce_compute)


def _arg_reference(fn):
    def run(x, axis=0, keepdims=False, select_last_index=False):
        if select_last_index:
            flipped = np.flip(x, axis=axis)
            idx = x.shape[axis] - 1 - fn(flipped, axis=axis)
        else:
            idx = fn(x, axis=axis)
        idx = np.expand_dims(idx, axis) if keepdims else idx
        return np.asarray(idx, dtype=np.int64)

    return run


for _name, _fn in (("argmax", np.argmax), ("argmin", np.argmin)):
    _op = register_op(_name, kind=OpKind.COMM_REDUCE)

    def _arg_type(x: TensorType, axis=0, keepdims=False, select_last_index=False, _name=_name):
        axis = normalize_axis(_name, axis, x.ndim)
        if x.shape[axis] == 0:
            raise type_error(_name, f"cannot reduce an empty axis of {x}")
        return TensorType(_reduced_shape(_name, x, (axis,), keepdims), int64)

    _op.type_rule(_arg_type)
    _op.reference(_arg_reference(_fn))

    def _arg_compute(x, axis=0, keepdims=False, select_last_index=False, _name=_name):
        fn = topi_reduce.argmax if _name == "argmax" else topi_reduce.argmin
        return fn(x, axis, bool(keepdims), bool(select_last_index))

    _op.compute(_arg_compute)

cumsum = register_op("cumsum", kind=OpKind.OPAQUE)


@cumsum.type_rule
def _(x: TensorType, axis, exclusive=False, reverse=False) -> TensorType:
    normalize_axis("cumsum", axis, x.ndim)
    return x


@cumsum.reference
def _(x, axis, exclusive=False, reverse=False):
    y = np.flip(x, axis) if reverse else x
    out = np.cumsum(y, axis=axis, dtype=y.dtype)
    if exclusive:
        out = out - y
    return (np.flip(out, axis) if reverse else out).astype(x.dtype)


@cumsum.compute
def _(x, axis, exclusive=False, reverse=False):
    return topi_reduce.cumsum(x, axis, bool(exclusive), bool(reverse))


cumsum.schedule("generic")(topi_reduce.schedule_stages)


cumprod = register_op("cumprod", kind=OpKind.OPAQUE)


@cumprod.type_rule
def _(x: TensorType, axis, exclusive=False, reverse=False) -> TensorType:
    normalize_axis("cumprod", axis, x.ndim)
    return x


@cumprod.reference
def _(x, axis, exclusive=False, reverse=False):
    y = np.flip(x, axis) if reverse else x
    if exclusive:  # shift by one along axis, a 1 first
        first = np.ones_like(np.take(y, [0], axis=axis))
        y = np.concatenate([first, np.delete(y, -1, axis=axis)], axis=axis)
    out = np.cumprod(y, axis=axis, dtype=y.dtype)
    return (np.flip(out, axis) if reverse else out).astype(x.dtype)


@cumprod.compute
def _(x, axis, exclusive=False, reverse=False):
    return topi_reduce.cumsum(x, axis, bool(exclusive), bool(reverse), product=True)


cumprod.schedule("generic")(topi_reduce.schedule_stages)


topk = register_op("topk", kind=OpKind.OPAQUE)


@topk.type_rule
def _(x: TensorType, k, axis=-1, largest=True, sorted=True):
    axis = normalize_axis("topk", axis, x.ndim)
    if not 0 <= k <= x.shape[axis]:
        raise type_error("topk", f"k={k} is out of range for axis {axis} of {x}")
    shape = tuple(k if i == axis else d for i, d in enumerate(x.shape))
    return (x.with_shape(shape), TensorType(shape, int64))


@topk.reference
def _(x, k, axis=-1, largest=True, sorted=True):
    # Ties keep the lower index first (ONNX): a stable sort of the negated keys for `largest`.
    keys = -x if largest else x
    if x.dtype.kind == "u" and largest:
        keys = np.iinfo(x.dtype).max - x
    idx = np.argsort(keys, axis=axis, kind="stable")
    idx = np.take(idx, np.arange(k), axis=axis)
    return np.take_along_axis(x, idx, axis=axis), idx.astype(np.int64)


@topk.compute
def _(x, k, axis=-1, largest=True, sorted=True):
    return topi_reduce.topk(x, k, axis, bool(largest), bool(sorted))


topk.schedule("generic")(topi_reduce.schedule_stages)


einsum = register_op("einsum", kind=OpKind.OPAQUE)


def _einsum_shape(equation: str, shapes):
    """Output shape of numpy.einsum for these operand shapes (explicit or implicit output)."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise type_error("einsum", f"{equation!r} names {len(terms)} operands, got {len(shapes)}")
    sizes, ellipsis, counts = {}, (), {}
    for term, shape in zip(terms, shapes, strict=True):
        letters = term.replace("...", "")
        n_ell = len(shape) - len(letters)
        if n_ell < 0 or (n_ell and "..." not in term):
            raise type_error("einsum", f"term {term!r} does not match shape {list(shape)}")
        pre = term.split("...")[0] if "..." in term else term
        dims = list(shape)
        ell = tuple(dims[len(pre) : len(pre) + n_ell]) if "..." in term else ()
        labelled = dims[: len(pre)] + dims[len(pre) + n_ell :]
        ellipsis = broadcast_shapes("einsum", ellipsis, ell)
        for c, d in zip(letters, labelled, strict=True):
            counts[c] = counts.get(c, 0) + 1
            if sizes.setdefault(c, d) != d and 1 not in (d, sizes[c]):
                raise type_error("einsum", f"label {c!r} has sizes {sizes[c]} and {d}")
            sizes[c] = max(sizes[c], d)
    if not arrow:
        rhs = "..." + "".join(sorted(c for c, n in counts.items() if n == 1))
    if "..." in rhs:
        pre, post = rhs.split("...")
        return tuple(sizes[c] for c in pre) + tuple(ellipsis) + tuple(sizes[c] for c in post)
    return tuple(sizes[c] for c in rhs)


@einsum.type_rule
def _(*xs: TensorType, equation) -> TensorType:
    if not xs:
        raise type_error("einsum", "needs at least one operand")
    if len({t.dtype for t in xs}) != 1:
        raise type_error("einsum", "operands must share one dtype")
    return xs[0].with_shape(_einsum_shape(equation, [t.shape for t in xs]))


@einsum.reference
def _(*xs, equation):
    return np.einsum(equation, *xs).astype(xs[0].dtype)


@einsum.compute
def _(*xs, equation):
    return topi_reduce.einsum(equation, *xs)
