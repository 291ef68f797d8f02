"""Scatter te operators: scatter_elements and scatter_nd (ONNX reductions none/add/mul/max/min).

    y = topi.scatter.scatter_elements(data, indices, updates, axis=1, reduction="add")
    y = topi.scatter.scatter_nd(data, indices, updates, reduction="none")

A te.compute reads, it cannot write somewhere else, so a scatter is turned around (Note
[scatter as gather]): output position p reduces over every update position u whose index
names p. That costs O(outputs * updates along the scattered axes) work, which is what static
shapes allow without data-dependent writes; the models that use scatter (index_put, KV-cache
writes, masked updates) scatter few rows.

Note [scatter as gather]: for reduction "none" the last update naming p wins (ONNX's reference
applies updates in order), so a first stage finds the largest matching update position (-1:
none) and a second stage picks that update or keeps data[p]. The other reductions fold the
matching updates into data[p] with the reduction's combiner in one stage. Indices may be
negative (counted from the end); an index still out of range matches no position.
"""

from __future__ import annotations

from tessera import te
from tessera.tir.expr import Expr
from tessera.topi.reduce import _prod

SCATTER = "scatter"
REDUCTIONS = ("none", "add", "mul", "max", "min")


def _wrapped(v: Expr, dim) -> Expr:
    """An index counted from the end when negative, as int32 (may still be out of range)."""
    dim = te.const(int(dim.value) if hasattr(dim, "value") else int(dim), v.dtype)
    v = te.select(v < te.const(0, v.dtype), v + dim, v)
    return te.cast(v, "int32")


def _fold(reduction: str, data_value: Expr, value: Expr, axes, match: Expr) -> Expr:
    """data[p] combined with every matching update (reduction add/mul/max/min): the
    reduction starts from data[p]."""
    reducer = {"add": te.sum, "mul": _prod, "max": te.max, "min": te.min}[reduction]
    return reducer(value, axis=axes, where=match, init=data_value)


def _check(reduction: str, data: te.Tensor) -> None:
    if reduction not in REDUCTIONS:
        raise ValueError(f"unknown scatter reduction {reduction!r} (one of {REDUCTIONS})")
    if data.dtype.is_bool and reduction != "none":
        raise ValueError(f"scatter reduction {reduction!r} is not defined for bool tensors")


def scatter_elements(data, indices, updates, axis: int = 0, reduction: str = "none"):
    """ONNX ScatterElements: out[j with axis replaced by indices[j]] (reduction)= updates[j]."""
    _check(reduction, data)
    axis = axis % data.ndim
    k = te.reduce_axis((0, indices.shape[axis]), name="k")

    def source(i, kv):
        """The update position (clamped into the indices' shape) and whether it is inside."""
        pos, inside = [], te.const(True)
        for d, (v, n) in enumerate(zip(i, indices.shape, strict=True)):
            if d == axis:
                pos.append(kv)
            elif int(n.value) < int(data.shape[d].value):
                inside = te.logical_and(inside, v < n)
                pos.append(te.min(v, n - 1))
            else:
                pos.append(v)
        return pos, inside

    def match(i, kv):
        pos, inside = source(i, kv)
        named = _wrapped(indices(*pos), data.shape[axis]) == i[axis]
        return te.logical_and(inside, named), pos

    if reduction != "none":

        def body(*i):
            cond, pos = match(i, k.var)
            return _fold(reduction, data(*i), updates(*pos), k, cond)

        return te.compute(data.shape, body, name="scatter_elements", tag=SCATTER)

    def last_body(*i):
        cond, _ = match(i, k.var)
        return te.max(k.var, axis=k, where=cond, init=te.const(-1, "int32"))

    last = te.compute(data.shape, last_body, name="scatter_last", tag=SCATTER)

    def pick(*i):
        j = last(*i)
        pos, _ = source(i, te.max(j, te.const(0, "int32")))
        return te.if_then_else(j >= 0, updates(*pos), data(*i))

    return te.compute(data.shape, pick, name="scatter_elements", tag=SCATTER)


def scatter_nd(data, indices, updates, reduction: str = "none"):
    """ONNX ScatterND: indices[u] (the last axis, q long) names data[indices[u], ...]; the
    update updates[u, ...] is written (or reduced) there."""
    _check(reduction, data)
    q = int(indices.shape[-1].value)
    batch = indices.shape[:-1]
    axes = [te.reduce_axis((0, n), name=f"u{d}") for d, n in enumerate(batch)]
    u = [a.var for a in axes]

    def match(i, u):
        cond = te.const(True)
        for k in range(q):
            idx = indices(*u, te.const(k, "int32"))
            cond = te.logical_and(cond, _wrapped(idx, data.shape[k]) == i[k])
        return cond

    if reduction != "none":

        def body(*i):
            return _fold(reduction, data(*i), updates(*u, *i[q:]), axes, match(i, u))

        return te.compute(data.shape, body, name="scatter_nd", tag=SCATTER)

    def linear(u):
        out = te.const(0, "int32")
        for v, n in zip(u, batch, strict=True):
            out = out * n + v
        return out

    def last_body(*i):
        return te.max(linear(u), axis=axes, where=match(i, u), init=te.const(-1, "int32"))

    last = te.compute(data.shape, last_body, name="scatter_last", tag=SCATTER)

    def pick(*i):
        j = te.max(last(*i), te.const(0, "int32"))
        pos = []
        for n in reversed(batch):
            pos.append(te.floormod(j, n))
            j = te.floordiv(j, n)
        value = updates(*reversed(pos), *i[q:])
        return te.if_then_else(last(*i) >= 0, value, data(*i))

    return te.compute(data.shape, pick, name="scatter_nd", tag=SCATTER)
