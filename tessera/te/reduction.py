"""Reducers: `comm_reducer` and the built-in `sum`, `max`, `min`, `argmax`, `argmin`.

A reducer called with an axis builds a `tir.Reduce`; `max`/`min` called with two values are the
elementwise maximum/minimum, so one name serves both uses (as in TVM):

    k = te.reduce_axis((0, K), name="k")
    te.sum(A[i, k] * B[k, j], axis=k)         # Reduce(sum, ...)
    te.max(A[i, k], axis=[k], where=k > 0)
    te.max(x, 0.0)                            # Max(x, 0.0)
    mysum = te.comm_reducer(lambda x, y: x + y, lambda t: te.const(0, t), name="mysum")

A tuple reducer combines tuples (`fcombine(x, y)` gets and returns tuples) and gives one Reduce
per value; pass them all as the result of one compute.
"""

from __future__ import annotations

from tessera.ir.dtype import DType
from tessera.tir import op as _op
from tessera.tir.expr import CommReducer, IterVar, Reduce, Var, const, convert


def _as_axes(axis) -> tuple[IterVar, ...]:
    axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
    for a in axes:
        if not isinstance(a, IterVar):
            raise TypeError(f"a reduction axis must be made with te.reduce_axis, got {a!r}")
    return axes


def _is_axis_arg(axis) -> bool:
    if isinstance(axis, IterVar):
        return True
    return isinstance(axis, (list, tuple)) and all(isinstance(a, IterVar) for a in axis)


class Reducer:
    """A commutative reducer built by `comm_reducer`; call it with (expr, axis, where=...)."""

    def __init__(self, fcombine, fidentity, name: str):
        self.fcombine = fcombine
        self.fidentity = fidentity
        self.name = name

    def combiner(self, dtypes: tuple[DType, ...]) -> CommReducer:
        lhs = tuple(Var(f"x{k}" if len(dtypes) > 1 else "x", dt) for k, dt in enumerate(dtypes))
        rhs = tuple(Var(f"y{k}" if len(dtypes) > 1 else "y", dt) for k, dt in enumerate(dtypes))
        if len(dtypes) == 1:
            result = (convert(self.fcombine(lhs[0], rhs[0])),)
            ident = (convert(self.fidentity(dtypes[0]), dtypes[0]),)
        else:
            result = tuple(convert(r) for r in self.fcombine(lhs, rhs))
            ident = tuple(
                convert(v, dt) for v, dt in zip(self.fidentity(*dtypes), dtypes, strict=False)
            )
        if len(result) != len(dtypes) or len(ident) != len(dtypes):
            raise ValueError(
                f"reducer {self.name}: combine/identity must give {len(dtypes)} values"
            )
        result = tuple(r.astype(dt) for r, dt in zip(result, dtypes, strict=True))
        ident = tuple(v.astype(dt) for v, dt in zip(ident, dtypes, strict=True))
        return CommReducer(lhs, rhs, result, ident)

    def __call__(self, expr, axis=None, where=None, init=None):
        if axis is None or not _is_axis_arg(axis):
            return self._elementwise(expr, axis)
        multi = isinstance(expr, (tuple, list))
        source = tuple(convert(e) for e in (expr if multi else (expr,)))
        combiner = self.combiner(tuple(e.dtype for e in source))
        cond = const(True) if where is None else convert(where)
        if not cond.dtype.is_bool:
            raise TypeError(f"reducer {self.name}: `where` must be a condition, got {cond.dtype}")
        inits = ()
        if init is not None:
            inits = tuple(convert(v) for v in (init if multi else (init,)))
        axes = _as_axes(axis)
        outs = tuple(Reduce(combiner, source, axes, cond, k, inits) for k in range(len(source)))
        return outs if multi else outs[0]

    def _elementwise(self, a, b):
        if b is None:
            raise TypeError(f"te.{self.name} needs `axis=` (a reduction) or two values")
        return convert(self.fcombine(convert(a), b))

    def __repr__(self) -> str:
        return f"comm_reducer({self.name})"


def comm_reducer(fcombine, fidentity, name: str = "reduce") -> Reducer:
    """A reducer from combine(x, y) and identity(dtype) (tuples of both for tuple reducers)."""
    return Reducer(fcombine, fidentity, name)


sum = comm_reducer(lambda x, y: x + y, lambda t: const(0, t), name="sum")  # noqa: A001
max = comm_reducer(_op.max, _op.min_value, name="max")  # noqa: A001
min = comm_reducer(_op.min, _op.max_value, name="min")  # noqa: A001


def _argmax_combine(x, y):
    # ties keep the smaller index, like numpy.argmax
    take_x = (x[1] > y[1]) | ((x[1] == y[1]) & (x[0] < y[0]))
    return _op.select(take_x, x[0], y[0]), _op.select(take_x, x[1], y[1])


def _argmin_combine(x, y):
    take_x = (x[1] < y[1]) | ((x[1] == y[1]) & (x[0] < y[0]))
    return _op.select(take_x, x[0], y[0]), _op.select(take_x, x[1], y[1])


argmax = comm_reducer(
    _argmax_combine, lambda ti, tv: (const(-1, ti), _op.min_value(tv)), name="argmax"
)
argmin = comm_reducer(
    _argmin_combine, lambda ti, tv: (const(-1, ti), _op.max_value(tv)), name="argmin"
)
