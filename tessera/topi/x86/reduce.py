"""x86 schedule of the plain reductions (sum, mean, max, min, prod and the composites built on
them: ReduceL2, ReduceLogSumExp, ...): vector loops over whichever axis of the input is
contiguous (Note [reduction vectors]).

    y = topi.reduce.reduce("mean", x, axis=(1,))       # x: (175, 202, 10) -> (175, 10)
    s = schedule_reduce([y], target)
    # parallel (i) { for k: y_red[i, 0:10] += x[i, k, 0:10]   (vector, tail) }; y = y_red / 202

    y = topi.reduce.reduce("sum", x, axis=None)          # the whole tensor -> one element
    # partial[0:32] = sum over k of x[32k : 32k + 32]     (4 vector accumulators, registers)
    # y = sum(partial[0:32])
"""

from __future__ import annotations

import math

from tessera import te
from tessera.te.bound import inline_bodies
from tessera.tir.expr import IntImm, Var
from tessera.topi import generic
from tessera.topi.generic import const_extent, inline_injective, traverse, vector_lanes
from tessera.topi.x86 import cpu

# Note [reduction vectors]
# The generic reduction schedule keeps the reduce loops innermost and scalar: one add's latency
# per element (a ReduceMean of a million floats ran at 1 GFLOP/s, 5x ONNX Runtime, in
# bench/op_sweep.py), and a reduction over a middle axis (x[i, k, j] summed over k) read x with
# a stride of a row per add. The input's innermost axis decides the vector loop:
# - kept (the innermost output axis j reads x's innermost index): the reduce loops go outside
#   j, and j runs in vectors of the target's lanes, accumulating into the output row (in L1);
# - reduced (by the innermost reduce axis k, at least a vector long): k is split by
#   `ACCUMULATORS` vectors; rfactor turns the split into partial sums held in registers (Note
#   [rfactor sketch] in autotune/auto_schedule.py), added up once per output element. The other
#   reduce axes stay outside, serial (te's rfactor takes no fused axes: a reduction over
#   trailing axes shorter than a vector keeps the generic schedule).
# The outer output axes run in parallel (the fused prefix, Note [fused prefix] in generic.py).
# A group with another shape (two reductions, a reduction with an init, a tuple reduction such
# as argmax) keeps the generic schedule.
ACCUMULATORS = 4  # vector accumulators: an add's latency over its issue rate on current cores


def _loads(s, op) -> list:
    """The loads of op's body with the inlined stages' bodies substituted in: what it reads
    from memory."""
    return generic._producer_loads(inline_bodies(s)[s[op]])


def _the_reduction(s, outs):
    """The group's one reduction op (after inlining), or None."""
    found = []

    def visit(op):
        if op.is_reduction:
            found.append(op)

    traverse(outs, visit)
    if len(found) != 1:
        return None
    op = s[found[0]].op
    if op.num_outputs != 1 or op.body[0].init:
        return None
    if any(const_extent(iv) is None for iv in (*op.axis, *op.reduce_axis)):
        return None
    return op


def _innermost_vars(s, op) -> set | None:
    """The variables of the innermost index of every multi-dimensional load; None where a load
    indexes its innermost axis by more than one variable."""
    found = set()
    for ld in _loads(s, op):
        if not ld.indices:
            continue
        last = ld.indices[-1]
        if isinstance(last, Var):
            found.add(last)
        elif not isinstance(last, IntImm):
            return None
    return found


def _reads_innermost(s, op, iv) -> bool:
    """Whether every load of op indexes its innermost dimension by the reduce axis iv alone."""
    loads = [ld for ld in _loads(s, op) if ld.indices]
    return bool(loads) and all(ld.indices[-1] is iv.var for ld in loads)


def _parallel_outer(stage, axes):
    """Fuse the leading output axes (Note [fused prefix]) and run them in parallel; returns
    the row loops outermost first (the fused one, then the serial rest)."""
    outer = generic._parallel_axes(axes)
    if not outer:
        return []
    fused = stage.fuse(*outer) if len(outer) > 1 else outer[0]
    stage.parallel(fused)
    return [fused, *axes[len(outer) :]]


def schedule_reduce(outs, target=None) -> te.Schedule:
    """Note [reduction vectors]; other groups get generic.schedule_reduce."""
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    if target is None or not target.kind_info.cpu:
        return generic.schedule_reduce(outs, target)
    s = te.create_schedule([t.op for t in outs])
    inline_injective(s, outs)
    red = _the_reduction(s, outs)
    if red is None:
        return generic.schedule_reduce(outs, target)
    lanes = vector_lanes(target, red.output(0).dtype)
    inner = _innermost_vars(s, red)
    if inner is None:
        return generic.schedule_reduce(outs, target)
    data = [iv for iv in red.axis if (const_extent(iv) or 0) > 1]
    keeps_inner = (
        data and data[-1].var in inner and not any(iv.var in inner for iv in red.reduce_axis)
    )
    if keeps_inner:
        _vector_over_kept(s, red, data, lanes)
    else:
        k = red.reduce_axis[-1]
        if lanes <= 1 or const_extent(k) < lanes or not _reads_innermost(s, red, k):
            return generic.schedule_reduce(outs, target)
        _vector_partials(s, red, k, lanes, target)
    for t in outs:
        if t.op is not red and not t.op.is_reduction:
            generic.schedule_elementwise_stage(s, t, target)
    return s


def _vector_over_kept(s, red, data, lanes):
    """The kept innermost axis j in vectors, the reduce loops outside it."""
    stage = s[red]
    axes = list(red.axis)
    j = axes[-1] if axes[-1] is data[-1] else data[-1]
    rest = [iv for iv in axes if iv is not j]
    stage.reorder(*rest, *red.reduce_axis, j)
    _parallel_outer(stage, rest)
    if (const_extent(j) or 0) >= lanes:
        _, ji = stage.split(j, factor=lanes)
        stage.vectorize(ji)


def _vector_partials(s, red, k, lanes, target):
    """The innermost reduce axis k split into ACCUMULATORS vectors of partials (rfactor)."""
    total = red.output(0)
    stage = s[red]
    vectors = const_extent(k) // lanes
    most = max(1, min(ACCUMULATORS, vectors, cpu.vector_registers(target) // 2))
    # kv vectors per step, preferably dividing k's whole vectors (the steps past them are
    # peeled off the main loop by partition_loop: rfactor's peel_tail)
    kv = next((v for v in range(most, 1, -1) if vectors % v == 0), most)
    _, ki = stage.split(k, factor=kv * lanes)
    rf = s.rfactor(total, ki, factor_axis=len(red.axis), peel_tail=True)
    local = s.cache_write(rf, "local")
    rstage = s[rf]
    *rows, kf = rstage.op.axis
    loops = _parallel_outer(rstage, rows)
    rstage.vectorize(rstage.split(kf, factor=lanes)[1])
    lstage = s[local]
    if loops:
        lstage.compute_at(rstage, loops[-1])  # one row's partials at a time
    *lrows, lk = lstage.op.axis
    ka, kl = lstage.split(lk, factor=lanes)
    lstage.reorder(*lrows, *lstage.op.reduce_axis, ka, kl)
    lstage.unroll(ka)
    lstage.vectorize(kl)
    tstage = s[total]
    if math.prod(const_extent(iv) for iv in total.op.axis) > 1:
        _parallel_outer(tstage, list(total.op.axis))
