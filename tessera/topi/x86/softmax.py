"""x86 schedule of row-wise ops over the last axis: softmax, log_softmax (and layer_norm, which
uses it from norm.py): every row's stages computed once per row, inside one parallel row loop.

    y = topi.nn.softmax(x)                  # (rows..., n): partial/combine reductions, exp row
    s = schedule_rows([y], target)
    # parallel (row) {
    #   max_partial[0:16] = max over k of x[row, 16k : 16k + 16]    (vector registers)
    #   max = max(max_partial[0:16], tail);  exp[0:n] = exp(x[row] - max)        (vectorized)
    #   sum_partial ... ; sum ... ; inv = 1 / sum;  y[row, 0:n] = exp[0:n] * inv (vectorized)
    # }

The computes (topi/nn/softmax.py, Note [lane split]; topi/nn/norm.py) split each row reduction
into a partial over `row_split` lanes (one vector of the target, several for long rows) and a
combine; here the partial's lanes become vectors of the target's width (one accumulator each),
the k loop outside them. Row stages (attrs["row_stage"], e.g. softmax's exp(x - max)) are
computed once per row for all their readers (te's Note [readers in scope]), in stack buffers
when small. Groups of another shape (softmax over another axis) get the generic schedule, its
row reductions on the stack where small (`_local_reductions`, Note [short kept axes]).
"""

from __future__ import annotations

import math

from tessera import te
from tessera.ir.dtype import DType
from tessera.te.schedule import AttachType
from tessera.topi.generic import const_extent, is_injective, traverse, vector_lanes
from tessera.topi.nn.schedule import find_stages, schedule_row_reduce
from tessera.topi.strategy import record_config
from tessera.topi.x86.cpu import stack_share

# a row buffer up to 1 / STACK_SHARE of the target's thread stack lives on the stack of the
# row's thread (`stack_share` in cpu.py: 64 KiB of the default 8 MiB; knob `stack_bytes`)
STACK_SHARE = 128


def stack_bytes_rule(target=None) -> int:
    """The default of knob `stack_bytes`: a share of the target's (else the current) stack."""
    return stack_share(target, STACK_SHARE)


def _is_row_stage(op) -> bool:
    return bool(op.attrs.get("row_stage"))


def _inline(s, outs) -> None:
    """Inline the injective stages that are no outputs, except the row stages."""
    out_ops = {id(t.op) for t in outs}

    def visit(op):
        if id(op) not in out_ops and is_injective(op.output(0)) and not _is_row_stage(op):
            s[op].compute_inline()

    traverse(outs, visit)


def _vectorize_last(stage, axis, lanes: int):
    """Split `axis` into vectors of `lanes` (vectorized); returns the outer loop, or None."""
    extent = const_extent(axis)  # None: symbolic; its tail is peeled (topi/symbolic.py)
    if lanes <= 1 or (extent is not None and extent < lanes):
        return None
    outer, inner = stage.split(axis, factor=lanes)
    stage.vectorize(inner)
    return outer


def _schedule_partial(stage, target) -> None:
    """(rows..., split) reducing k: k outside, the split lanes as unrolled vectors inside."""
    *rows, lane = stage.op.axis
    (k,) = stage.op.reduce_axis
    lanes = vector_lanes(target, stage.op.output(0).dtype)
    extent = const_extent(lane)
    if lanes > 1 and extent is not None and extent >= lanes:
        vo, vi = stage.split(lane, factor=lanes)
        stage.reorder(*rows, k, vo, vi)
        stage.unroll(vo)
        stage.vectorize(vi)
    else:
        stage.reorder(*rows, k, lane)


def _place(s, t: te.Tensor, parent, at, n_outer: int, target, stack_bytes: int) -> None:
    stage = s[t]
    stage.compute_at(parent, at)
    if t.op.tag == "row_partial":
        _schedule_partial(stage, target)
    elif not t.op.is_reduction and t.ndim > n_outer:
        _vectorize_last(stage, stage.op.axis[-1], vector_lanes(target, t.dtype))
    # computed at the row loop: a row (or one value) per row
    row = int(getattr(t.shape[-1], "value", stack_bytes + 1)) if t.ndim > n_outer else 1
    if row * DType.parse(t.dtype).itemsize <= stack_bytes:
        stage.set_scope("local")


def _local_reductions(s: te.Schedule, stack_bytes: int) -> te.Schedule:
    """The reductions the generic row schedule computes inside a row loop (softmax over a
    middle axis: the kept inner axes' running max and sum) on the stack where their rows are
    small and constant (Note [short kept axes] in topi/nn/schedule.py): registers, not a
    heap buffer each reduction step stores to and reloads."""
    for st in s.stages:
        if st.is_placeholder or st.attach_type != AttachType.SCOPE or not st.op.is_reduction:
            continue
        n_outer = int(st.op.attrs.get("n_outer", 0))
        sizes = [const_extent(iv) for iv in st.op.axis[n_outer:]]
        if None not in sizes:
            nbytes = DType.parse(st.op.output(0).dtype).itemsize * math.prod(sizes)
            if nbytes <= stack_bytes:
                st.set_scope("local")
    return s


def schedule_rows(outs, target=None, config=None) -> te.Schedule:
    """Schedule a group anchored by row reductions over the last axis (see the docstring).
    `config`: the x86 row strategy's ("generic", or "rows" with knob stack_bytes: row buffers
    up to this size live on the stack; its knob split is read by the compute), recorded
    with the steps; None: the rule (`stack_bytes_rule`)."""
    if config is not None and config.impl == "generic":
        outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
        return _local_reductions(schedule_row_reduce(outs, target), stack_bytes_rule(target))
    stack_bytes = config["stack_bytes"] if config is not None else stack_bytes_rule(target)
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    combines = find_stages(outs, lambda op: op.tag == "row_combine")
    out = outs[0]
    n_outer = int(combines[0].op.attrs["n_outer"]) if combines else 0
    if len(outs) != 1 or not combines or n_outer < 1 or out.ndim != n_outer + 1:
        return _local_reductions(schedule_row_reduce(outs, target), stack_bytes)
    s = te.create_schedule([out.op])
    record_config(s, config)  # its split shaped the compute (topi/nn/softmax.py)
    _inline(s, outs)
    stage = s[out]
    *rows, col = stage.op.axis
    row = stage.fuse(*rows) if len(rows) > 1 else rows[0]
    stage.parallel(row)
    _vectorize_last(stage, col, vector_lanes(target, out.dtype))
    placed = [stage]
    for st in reversed(s.stages):  # consumers first
        if st is stage or st.is_placeholder or st.attach_type == AttachType.INLINE:
            continue
        # the output's row loop when the output reads it (also when reductions inside that
        # loop do: te's Note [readers in scope]), else its consumer's row
        parent = stage if s._consumes(stage, st) else next(p for p in placed if s._consumes(p, st))
        at = row if parent is stage else parent.op.axis[n_outer - 1]
        _place(s, st.op.output(0), parent, at, n_outer, target, stack_bytes)
        placed.append(st)
    return s
