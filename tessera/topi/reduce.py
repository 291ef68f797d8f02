"""Reduction te operators: sum, mean, prod, max, min, argmax/argmin, cumsum, topk.

    y = topi.reduce.reduce("sum", x, axis=(1,), keepdims=True)   # tag "reduce"
    i = topi.reduce.argmax(x, axis=-1, select_last_index=True)   # int64 indices
    v, i = topi.reduce.topk(x, k=3)

One te.compute reduces all the axes at once, its output already in the keepdims shape. Sums
accumulate in the input dtype for float32/float64 (float16 in float32; mean of ints in int64),
and a separate element-wise stage (tag "elemwise") finishes mean and narrow accumulators.
Bool tensors reduce with or/and, as numpy's sum/max (any) and prod/min (all) do.
"""

from __future__ import annotations

import math

from tessera import te
from tessera.ir.dtype import DType
from tessera.tir.expr import Expr
from tessera.topi.broadcast import int_divide
from tessera.topi.elemwise import cast_expr

REDUCE = "reduce"

_any = te.comm_reducer(te.logical_or, lambda t: te.const(False, t), name="any")
_all = te.comm_reducer(te.logical_and, lambda t: te.const(True, t), name="all")
_prod = te.comm_reducer(lambda x, y: x * y, lambda t: te.const(1, t), name="prod")

# name -> (reducer for numbers, reducer for bools)
_REDUCERS = {
    "sum": (te.sum, _any),
    "mean": (te.sum, _any),
    "prod": (_prod, _all),
    "max": (te.max, _any),
    "min": (te.min, _all),
}


def normalize_axes(axis, ndim: int) -> tuple[int, ...]:
    """None means every axis; negative axes count from the end."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    out = tuple(sorted({a % ndim for a in axes})) if ndim else ()
    if len(out) != len(axes) or any(not -ndim <= a < ndim for a in axes):
        raise ValueError(f"bad reduction axes {axes} for a tensor of rank {ndim}")
    return out


def _reduction(x: te.Tensor, axes, keepdims: bool, fbody, name: str, tag: str = REDUCE):
    """te.compute over the kept axes whose body is fbody(load, reduce_axes): the load is
    x at the output position with the reduced axes replaced by reduce axes."""
    raxes = {a: te.reduce_axis((0, x.shape[a]), name=f"k{a}") for a in axes}
    if keepdims:
        shape = tuple(te.const(1, "int32") if a in raxes else d for a, d in enumerate(x.shape))
    else:
        shape = tuple(d for a, d in enumerate(x.shape) if a not in raxes)

    def body(*i):
        it, index = iter(i), []
        for a in range(x.ndim):
            if a in raxes:
                if keepdims:
                    next(it)
                index.append(raxes[a].var)
            else:
                index.append(next(it))
        return fbody(x(*index), list(raxes.values()))

    return te.compute(shape, body, name=name, tag=tag)


def _accumulator(name: str, dtype: DType) -> DType:
    if name == "mean" and dtype.is_integer:
        return DType.parse("int64")
    if name in ("sum", "mean", "prod") and dtype.is_float and dtype.bits < 32:
        return DType.parse("float32")
    return dtype


def reduce(name: str, x: te.Tensor, axis=None, keepdims: bool = False) -> te.Tensor:
    """The reduction `name` (sum, mean, prod, max, min) of x over `axis`, in x's dtype."""
    if name not in _REDUCERS:
        raise ValueError(f"unknown reduction {name!r}; known: {', '.join(_REDUCERS)}")
    axes = normalize_axes(axis, x.ndim)
    if not axes:  # numpy: reducing over no axes is the identity
        return te.compute(x.shape, lambda *i: x(*i), name=name, tag="elemwise")
    number, logic = _REDUCERS[name]
    reducer = logic if x.dtype.is_bool else number
    acc = _accumulator(name, x.dtype)
    red = _reduction(
        x, axes, keepdims, lambda v, k: reducer(cast_expr(v, acc), axis=k), f"{name}_red"
    )
    count = math.prod(int(x.shape[a].value) for a in axes) if name == "mean" else 1
    if acc == x.dtype and count == 1:
        return red

    def finish(v: Expr) -> Expr:
        if count != 1 and not x.dtype.is_bool:
            v = int_divide(v, te.const(count, acc)) if acc.is_integer else v / te.const(count, acc)
        return cast_expr(v, x.dtype)

    return te.compute(red.shape, lambda *i: finish(red(*i)), name=name, tag="elemwise")


# -- argmax / argmin --------------------------------------------------------------------------


def _arg_reducer(largest: bool, last: bool, float_values: bool):
    """A tuple reducer over (int64 index, value) that keeps numpy's choice: the first (or
    last) extreme, NaN beating everything; index -1 marks the empty identity."""

    def combine(x, y):
        (xi, xv), (yi, yv) = x, y
        prefer_index = xi > yi if last else xi < yi
        strict = xv > yv if largest else xv < yv
        take = te.logical_or(strict, te.logical_and(xv == yv, prefer_index))
        if float_values:
            x_nan, y_nan = te.isnan(xv), te.isnan(yv)
            nan_pick = te.logical_and(x_nan, te.logical_or(te.logical_not(y_nan), prefer_index))
            take = te.select(te.logical_or(x_nan, y_nan), nan_pick, take)
        minus_one = te.const(-1, xi.dtype)
        take = te.logical_or(yi == minus_one, te.logical_and(xi != minus_one, take))
        return te.select(take, xi, yi), te.select(take, xv, yv)

    def identity(ti, tv):
        return te.const(-1, ti), te.const(0, tv)

    return te.comm_reducer(combine, identity, name="argmax" if largest else "argmin")


def arg_reduce(
    x: te.Tensor,
    axis: int = 0,
    keepdims: bool = False,
    select_last_index: bool = False,
    *,
    largest: bool = True,
) -> te.Tensor:
    """int64 index of the max (largest) or min along one axis; ties: first (or last) index."""
    (axis,) = normalize_axes((axis,), x.ndim)
    value = x.dtype if not x.dtype.is_bool else DType.parse("int8")
    reducer = _arg_reducer(largest, bool(select_last_index), value.is_float)

    def fbody(v, k):
        index = te.cast(k[0].var, "int64")
        return reducer((index, cast_expr(v, value)), axis=k)

    name = "argmax" if largest else "argmin"
    idx, _ = _reduction(x, (axis,), keepdims, fbody, name)
    return idx


def argmax(x, axis=0, keepdims=False, select_last_index=False):
    return arg_reduce(x, axis, keepdims, select_last_index, largest=True)


def argmin(x, axis=0, keepdims=False, select_last_index=False):
    return arg_reduce(x, axis, keepdims, select_last_index, largest=False)


# -- cumsum, topk -----------------------------------------------------------------------------


def _along(axis: int, i, pos):
    """The index i with its `axis` entry replaced by pos."""
    return [pos if a == axis else v for a, v in enumerate(i)]


def cumsum(x: te.Tensor, axis: int, exclusive: bool = False, reverse: bool = False, product=False):
    """Running sum (or product) along axis as a log-step scan (Note [log-step scan]):
    ceil(log2 n) stages of O(n) each, not a masked reduction of O(n^2)."""
    (axis,) = normalize_axes((axis,), x.ndim)
    n = int(x.shape[axis].value)
    name = "cumprod" if product else "cumsum"
    combine = (lambda a, b: a * b) if product else (lambda a, b: a + b)
    identity = te.const(1 if product else 0, x.dtype)

    def inside(pos, d):
        return pos + d < n if reverse else pos >= d

    def first(*i):  # exclusive: each element starts from its predecessor (identity at the end)
        pos = i[axis]
        if not exclusive:
            return x(*i)
        src = te.min(pos + 1, n - 1) if reverse else te.max(pos - 1, 0)
        return te.select(inside(pos, 1), x(*_along(axis, i, src)), identity)

    y = te.compute(x.shape, first, name=f"{name}_0", tag=name)
    d = 1
    while d < n:

        def body(*i, y=y, d=d):
            pos = i[axis]
            src = te.min(pos + d, n - 1) if reverse else te.max(pos - d, 0)
            return te.select(inside(pos, d), combine(y(*i), y(*_along(axis, i, src))), y(*i))

        d *= 2
        y = te.compute(x.shape, body, name=name if d >= n else f"{name}_{d}", tag=name)
    return y


# Note [log-step scan]: stage s adds to each element the partial of the element 2^s before it
# (Hillis-Steele): after ceil(log2 n) stages element i holds x[0] + ... + x[i]. Each stage is a
# gather, the only form a te.compute has, and a stage is stored, never inlined (its tag is not
# an injective one): inlined, stage s would read 2^s copies of the input. Sums are added in a
# tree order, not left to right: float results differ from a sequential sum in the last bits.
# The stages' outer axes run in parallel (schedule_stages).


def schedule_stages(outs, target=None) -> te.Schedule:
    """Each stage of a multi-stage op (scan, sorting network) at root, its axes fused and run
    in parallel when large enough; the innermost axis of a stage is left to LLVM."""
    from tessera.topi import generic

    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    s = te.create_schedule([t.op for t in outs])

    def visit(op):
        axes = list(s[op].op.axis)
        total = 1
        for iv in axes:
            total *= generic.const_extent(iv) or 1 << 20
        if axes and total >= 1024:
            fused = s[op].fuse(*axes) if len(axes) > 1 else axes[0]
            s[op].parallel(fused)

    generic.traverse(outs, visit)
    return s


def topk(x: te.Tensor, k: int, axis: int = -1, largest: bool = True, sorted: bool = True):  # noqa: A002
    """(values, int64 indices) of the k largest (or smallest) along axis, best first; ties keep
    the lower index first. Short axes count each element's rank (O(n^2) along axis), then
    output position p picks the element of rank p; longer ones run a bitonic network
    (topi/sort.py, O(n log^2 k)), whichever does less work."""
    from tessera.topi import sort

    (axis,) = normalize_axes((axis,), x.ndim)
    n = x.shape[axis]
    # A network's compare-exchange costs about four rank steps (two gathers of positions, two
    # of values, and a stage stored per step).
    if 4 * sort.bitonic_work(int(n.value), int(k)) < int(n.value) ** 2:
        return sort.bitonic_topk(x, int(k), axis, largest)
    j = te.reduce_axis((0, n), name="j")

    def at(i, pos):
        return x(*[pos if a == axis else v for a, v in enumerate(i)])

    def rank_body(*i):
        me, other = at(i, i[axis]), at(i, j.var)
        before = sort.beats(other, me, j.var, i[axis], largest, x.dtype.is_float)
        return te.sum(te.cast(before, "int32"), axis=j)

    rank = te.compute(x.shape, rank_body, name="topk_rank", tag="topk")
    shape = tuple(te.const(int(k), "int32") if a == axis else d for a, d in enumerate(x.shape))

    def pick(value):
        def body(*i):
            m = te.reduce_axis((0, n), name="m")
            src = value(i, m.var)
            cond = rank(*[m.var if a == axis else v for a, v in enumerate(i)]) == i[axis]
            return (_any if x.dtype.is_bool else te.sum)(src, axis=m, where=cond)

        return body

    values = te.compute(shape, pick(at), name="topk_values", tag="topk")
    indices = te.compute(
        shape, pick(lambda i, m: te.cast(m, "int64")), name="topk_indices", tag="topk"
    )
    return values, indices


# -- einsum -----------------------------------------------------------------------------------


def _einsum_labels(equation: str, shapes):
    """(labels of each operand, output labels, size of each label), numpy's rules: '...'
    dims align right and broadcast; without '->' the output is '...' then the labels used once,
    sorted. Ellipsis dims get the labels '.0', '.1', ..."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise ValueError(f"einsum {equation!r} names {len(terms)} operands, got {len(shapes)}")
    n_ell = max(
        (
            len(s) - len(t.replace("...", ""))
            for t, s in zip(terms, shapes, strict=True)
            if "..." in t
        ),
        default=0,
    )
    ell = [f".{k}" for k in range(n_ell)]
    operands, sizes, counts = [], {}, {}
    for term, shape in zip(terms, shapes, strict=True):
        pre, dots, post = term.partition("...")
        mine = ell[n_ell - (len(shape) - len(pre) - len(post)) :] if dots else []
        labels = [*pre, *mine, *post]
        if len(labels) != len(shape):
            raise ValueError(f"einsum term {term!r} does not match shape {list(shape)}")
        for lab, d in zip(labels, shape, strict=True):
            if sizes.get(lab, 1) not in (1, d) and d != 1:
                raise ValueError(f"einsum label {lab!r} has sizes {sizes[lab]} and {d}")
            sizes[lab] = max(sizes.get(lab, 1), d)
            if not lab.startswith("."):
                counts[lab] = counts.get(lab, 0) + 1
        operands.append(labels)
    if arrow:
        pre, dots, post = rhs.partition("...")
        out = [*pre, *(ell if dots else []), *post]
    else:
        out = ell + sorted(c for c, n in counts.items() if n == 1)
    return operands, out, sizes


def einsum(equation: str, *xs: te.Tensor) -> te.Tensor:
    """numpy.einsum: the output labels are data-parallel axes, the other labels reduce axes
    of one te.compute over the product of the operands (tag "einsum")."""
    shapes = [tuple(int(d.value) for d in x.shape) for x in xs]
    operands, out, sizes = _einsum_labels(equation, shapes)
    seen = [lab for labels in operands for lab in labels]
    reduced = [lab for k, lab in enumerate(seen) if lab not in out and lab not in seen[:k]]
    raxes = {lab: te.reduce_axis((0, sizes[lab]), name=f"r_{lab.strip('.')}") for lab in reduced}
    dtype = xs[0].dtype

    def body(*i):
        env = {**dict(zip(out, i, strict=True)), **{lab: r.var for lab, r in raxes.items()}}
        product = None
        for x, labels, shape in zip(xs, operands, shapes, strict=True):
            index = [
                te.const(0, "int32") if d == 1 and sizes[lab] != 1 else env[lab]
                for lab, d in zip(labels, shape, strict=True)
            ]
            v = x(*index)
            product = v if product is None else product * v
        return te.sum(product, axis=list(raxes.values())) if raxes else product

    shape = tuple(te.const(sizes[lab], "int32") for lab in out)
    y = te.compute(shape, body, name="einsum", tag="einsum")
    return (
        y
        if y.dtype == dtype
        else te.compute(
            shape, lambda *i: cast_expr(y(*i), dtype), name="einsum_cast", tag="elemwise"
        )
    )
