"""cache_read and cache_write: new stages that copy a tensor through a buffer of another scope.

    AA = s.cache_read(A, "local", [C])    # new stage A.local = A; C now reads A.local
    CC = s.cache_write(C, "local")        # new stage C.local computes C's body (its reduction
                                          # too); C becomes the copy C[i, j] = C.local[i, j]

The rewritten stages keep their axes (the user's `C.op.axis` still names C's loops); the cache
stage gets fresh axes of the same names (`s[CC].op.axis`).
"""

from __future__ import annotations

from tessera.ir.node import Mutator
from tessera.te import steps as S
from tessera.te.schedule import Schedule, Stage
from tessera.te.tensor import ComputeOp, ProducerLoad, Tensor, compute
from tessera.tir.expr import IterVar, Reduce, Var
from tessera.tir.stmt_functor import substitute

_SCOPES = ("global", "local", "shared")


def _check_scope(scope: str, primitive: str) -> None:
    if scope not in _SCOPES:
        raise ValueError(f"{primitive}: unknown storage scope {scope!r} (one of {_SCOPES})")


class _ReplaceTensor(Mutator):
    def __init__(self, old: Tensor, new: Tensor):
        self.old, self.new = old, new

    def visit_ProducerLoad(self, node):
        node = self.generic_visit(node)
        if node.producer is self.old:
            return ProducerLoad(self.new, node.indices)
        return node


def _with_body(op: ComputeOp, body) -> ComputeOp:
    return ComputeOp(op.name, op.tag, op.attrs, op.axis, op.reduce_axis, tuple(body))


def _replace_op(sch: Schedule, stage: Stage, new_op) -> None:
    stage.op = new_op
    sch.stage_map[new_op] = stage


def _reader_stages(sch: Schedule, readers, primitive: str) -> list[Stage]:
    if not isinstance(readers, (list, tuple)):
        readers = [readers]
    stages = [sch[r] for r in readers]
    for st in stages:
        if not isinstance(st.op, ComputeOp):
            raise ValueError(f"{primitive}: reader {st.name} is not a compute stage")
    return stages


def cache_read(sch: Schedule, tensor: Tensor, scope: str, readers) -> Tensor:
    """A stage `<tensor>.<scope>` copying `tensor`; `readers` read the copy instead."""
    _check_scope(scope, "cache_read")
    if not isinstance(tensor, Tensor):
        raise TypeError(f"cache_read needs a tensor, got {tensor!r}")
    producer = sch[tensor]
    stages = _reader_stages(sch, readers, "cache_read")
    cache = compute(tensor.shape, lambda *i: tensor(*i), name=f"{tensor.name}.{scope}")
    for st in stages:
        if not any(t is tensor for t in st.op.input_tensors):
            raise ValueError(f"cache_read: {st.name} does not read {tensor.name}")
        repl = _ReplaceTensor(tensor, cache)
        _replace_op(sch, st, _with_body(st.op, [repl.visit(b) for b in st.op.body]))
    cache_stage = Stage(cache.op, sch)
    cache_stage.scope = scope
    sch._add_stage(cache_stage, sch.stages.index(producer) + 1)
    sch._record(S.CacheRead(tensor.name, scope, tuple(st.name for st in stages)))
    return cache


def _fresh_axis(iv: IterVar) -> IterVar:
    return IterVar(iv.dom, Var(iv.var.name, iv.var.dtype), iv.iter_type, iv.thread_tag)


def _copy_body(op: ComputeOp, axis, reduce_axis):
    vmap = {old.var: new.var for old, new in zip(op.axis, axis, strict=True)}
    vmap |= {old.var: new.var for old, new in zip(op.reduce_axis, reduce_axis, strict=True)}
    body = []
    for b in op.body:
        if isinstance(b, Reduce):
            b = Reduce(
                b.combiner,
                tuple(substitute(x, vmap) for x in b.source),
                tuple(reduce_axis),
                substitute(b.condition, vmap),
                b.value_index,
                tuple(substitute(x, vmap) for x in b.init),
            )
        else:
            b = substitute(b, vmap)
        body.append(b)
    return tuple(body)


def cache_write(sch: Schedule, tensor: Tensor, scope: str) -> Tensor:
    """A stage `<tensor>.<scope>` computing `tensor`'s body; the tensor's stage copies it."""
    _check_scope(scope, "cache_write")
    if not isinstance(tensor, Tensor):
        raise TypeError(f"cache_write needs a tensor, got {tensor!r}")
    stage = sch[tensor]
    op = stage.op
    if not isinstance(op, ComputeOp):
        raise ValueError(f"cache_write: {tensor.name} is not computed (it is a placeholder)")
    if op.num_outputs != 1:
        raise ValueError(f"cache_write: {tensor.name} has several outputs; not supported")
    if stage.relations or stage.iter_var_attrs or stage.leaf_iter_vars != stage.all_iter_vars:
        raise ValueError(
            f"cache_write of {tensor.name} must come before the other primitives on its stage"
        )
    axis = tuple(_fresh_axis(iv) for iv in op.axis)
    red = tuple(_fresh_axis(iv) for iv in op.reduce_axis)
    cache_op = ComputeOp(
        f"{op.name}.{scope}", op.tag, op.attrs, axis, red, _copy_body(op, axis, red)
    )
    cache = cache_op.output(0)
    copy = ProducerLoad(cache, tuple(iv.var for iv in op.axis))
    _replace_op(sch, stage, ComputeOp(op.name, op.tag, op.attrs, op.axis, (), (copy,)))
    stage._reset_axes()
    cache_stage = Stage(cache_op, sch)
    cache_stage.scope = scope
    sch._add_stage(cache_stage, sch.stages.index(stage))
    sch._record(S.CacheWrite(tensor.name, scope))
    return cache
