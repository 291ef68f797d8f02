"""rfactor: a reduction split into a partial reduction with a data-parallel axis, and its total.

    C = te.compute((M,), lambda i: te.sum(A[i, k], axis=k), name="C")
    s = te.create_schedule(C.op)
    ko, ki = s[C].split(k, factor=16)
    CF = s.rfactor(C, ki)        # CF[ki, i] = sum over ko of A[i, ko * 16 + ki]   ("C.rf")
                                 # C[i]     = sum over ki of CF[ki, i]             (C's stage)
    s[CF].vectorize(s[CF].op.axis[0])      # 16 partial sums side by side: a vector

The factored axis (`ki` here, or `ko`, or a reduce axis left unsplit) becomes a data-parallel
axis of the new stage `<C>.rf`, at position `factor_axis` among its axes; the reduce axes left
over (here `ko`, and any other reduce axis of C) stay its reduction. C's stage then reduces
`<C>.rf` over a new reduce axis `<name>.v` of the factored axis's extent, with the same
combiner (a sum of partial sums, a max of partial maxima). A split that does not divide the
axis keeps its bound as the partial reduction's condition, so every partial reduction is exact.
This is TVM's `rfactor`: the way to run a long reduction in parallel (partial sums per thread,
`parallel` on the factored axis) or in vector lanes (`vectorize` it, then a short horizontal
reduction), where the reduction alone has no data-parallel loop to give.

Limits (each refused with a clear error): rfactor must come right after splitting the
reduction's axes (no fuse, no split of a split, no other primitive on the stage before it); one
output; no reduction with an explicit initial value (`init`), since the partial reductions
would each start from it.
"""

from __future__ import annotations

from tessera.te import steps as S
from tessera.te.schedule import Schedule, SplitRelation, Stage
from tessera.te.tensor import ComputeOp, ProducerLoad, Tensor
from tessera.tir.expr import IterVar, IterVarType, Range, Var, convert
from tessera.tir.iter_var import Reduce
from tessera.tir.op import likely, logical_and, select
from tessera.tir.stmt_functor import substitute


def _fresh(iv: IterVar, name: str | None = None, kind: IterVarType | None = None, dom=None):
    return IterVar(
        iv.dom if dom is None else dom,
        Var(name or iv.var.name, iv.var.dtype),
        iv.iter_type if kind is None else kind,
    )


def _split_extents(rel: SplitRelation) -> tuple:
    """(outer extent, inner extent, factor) of a split of a reduce axis."""
    extent = rel.parent.dom.extent
    if rel.factor is not None:
        factor = rel.factor
        outer = (extent + factor - 1) // factor
        return outer, factor, factor
    factor = (extent + rel.nparts - 1) // rel.nparts
    return rel.nparts, factor, factor


def rfactor(
    sch: Schedule, tensor: Tensor, axis: IterVar, factor_axis: int = 0, peel_tail: bool = False
) -> Tensor:
    """The partial reduction `<tensor>.rf` over the reduce axes other than `axis`, with `axis`
    as its data-parallel axis number `factor_axis`; `tensor` becomes its total (module doc)."""
    if not isinstance(tensor, Tensor):
        raise TypeError(f"rfactor needs a tensor, got {tensor!r}")
    stage: Stage = sch[tensor]
    op = stage.op
    name = op.name
    if not isinstance(op, ComputeOp) or not op.is_reduction:
        raise ValueError(f"rfactor: {name} is not a reduction")
    if op.num_outputs != 1:
        raise ValueError(f"rfactor: {name} has several outputs (a tuple reduction); not supported")
    red: Reduce = op.body[0]
    if red.init:
        raise ValueError(f"rfactor: {name} has an initial value; its partial reductions cannot")
    if not isinstance(axis, IterVar) or axis not in stage.leaf_iter_vars:
        raise ValueError(f"rfactor: {axis!r} is not a loop (a leaf) of stage {name}")
    if (
        stage.iter_var_attrs
        or stage.prefetches
        or any(
            not isinstance(r, SplitRelation) or r.parent not in op.reduce_axis
            for r in stage.relations
        )
    ):
        raise ValueError(
            f"rfactor of {name} must come right after splitting its reduce axes "
            "(no fuse, no split of a split, no annotation before it)"
        )
    if axis.iter_type != IterVarType.REDUCE:
        raise ValueError(f"rfactor: {axis.var.name} is not a reduce axis of {name}")
    if not 0 <= factor_axis <= len(op.axis):
        raise ValueError(f"rfactor: factor_axis {factor_axis} outside 0..{len(op.axis)}")

    # the partial reduction's axes: fresh copies of the data axes, the factored axis among them
    data = [_fresh(iv) for iv in op.axis]
    vmap = {old.var: new.var for old, new in zip(op.axis, data, strict=True)}
    split_of = {r.parent: r for r in stage.relations}
    leaves, conds, rf_extent = {}, [], None  # leaf -> its fresh IterVar
    for k in op.reduce_axis:
        rel = split_of.get(k)
        if rel is None:
            leaves[k] = _fresh(k)
            vmap[k.var] = leaves[k].var
            if k is axis:
                rf_extent = k.dom.extent
            continue
        outer_n, inner_n, factor = _split_extents(rel)
        zero = convert(0)
        outer = _fresh(rel.outer, dom=Range(zero, convert(outer_n)))
        inner = _fresh(rel.inner, dom=Range(zero, convert(inner_n)))
        leaves[rel.outer], leaves[rel.inner] = outer, inner
        index = outer.var * factor + inner.var
        vmap[k.var] = k.dom.min + index
        extent, f = _const(k.dom.extent), _const(factor)
        if extent is None or f is None or extent % f:
            bound = index < k.dom.extent
            conds.append(likely(bound) if peel_tail else bound)  # likely: partition_loop peels
        if axis is rel.outer:
            rf_extent = outer_n
        elif axis is rel.inner:
            rf_extent = inner_n
    if axis not in leaves:
        raise ValueError(f"rfactor: {axis.var.name} is not a reduce loop of {name}")
    # the factored loop's variable, now a data-parallel axis
    rf_iv = IterVar(Range(convert(0), convert(rf_extent)), leaves[axis].var, IterVarType.DATA_PAR)
    rest = [
        leaves[iv]
        for iv in stage.leaf_iter_vars
        if iv in leaves and iv is not axis and iv.iter_type == IterVarType.REDUCE
    ]
    source = tuple(substitute(x, vmap) for x in red.source)
    if not (_const(red.condition) == 1 or getattr(red.condition, "value", None) is True):
        conds.insert(0, substitute(red.condition, vmap))
    condition = logical_and(*conds) if conds else convert(True)
    if rest:
        body = Reduce(red.combiner, source, tuple(rest), condition, 0, ())
    else:  # the factored axis was the only reduce loop: a select of the value or the identity
        body = select(condition, source[0], red.combiner.identity_element[0])
    rf_axes = (*data[:factor_axis], rf_iv, *data[factor_axis:])
    rf_op = ComputeOp(f"{name}.rf", op.tag, op.attrs, rf_axes, tuple(rest), (body,))
    rf = rf_op.output(0)

    # the tensor's stage: the total of the partial reductions, over `<name>.v`
    total_iv = IterVar(rf_iv.dom, Var(f"{axis.var.name}.v", rf_iv.var.dtype), IterVarType.REDUCE)
    index = [iv.var for iv in op.axis]
    index.insert(factor_axis, total_iv.var)
    total = Reduce(
        red.combiner, (ProducerLoad(rf, tuple(index)),), (total_iv,), convert(True), 0, ()
    )
    new_op = ComputeOp(op.name, op.tag, op.attrs, op.axis, (total_iv,), (total,))
    stage.op = new_op
    sch.stage_map[new_op] = stage
    stage.relations = []
    stage._reset_axes()
    rf_stage = Stage(rf_op, sch)
    sch._add_stage(rf_stage, sch.stages.index(stage))
    sch._record(S.RFactor(tensor.name, axis.var.name, factor_axis, peel_tail or None))
    return rf


def _const(x) -> int | None:
    """x's value when it is a constant."""
    if isinstance(x, int):
        return x
    return getattr(x, "value", None) if type(x).__name__ == "IntImm" else None
