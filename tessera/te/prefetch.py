"""Lowering of `Stage.prefetch`: the prefetch statements at the top of a loop's body.

    s[C].prefetch(A, ko, 1)       # C[i, j] += A[i, k] * B[k, j], k split into ko x 16
    # for (ko, 0, 64)
    #   evaluate(prefetch(A[i, min(ko * 16 + 16, 1008)], 0, 3))     one 64-byte line: 16 floats
    #   for (ki, 0, 16) ...

Note [prefetch]
The region of the tensor that iteration `iv + offset` reads is found as bound inference finds a
producer's region (te/bound.py): the body's read indices with iv's value shifted by `offset`, the
loops inside iv relaxed over their ranges, the loops outside iv symbolic. Its extent must have a
constant bound. The region is moved into the tensor where it would pass an end (the last
iterations prefetch their own region again: a prefetch never faults, but its address must be
computed in bounds). Row-major, the region is runs of contiguous elements: the innermost dims
the region covers whole, with the first dim it does not; one prefetch is issued per 64-byte line
of each run (a run that starts inside a line may miss its last line: a hint, not a contract), in
loops over the outer dims and, past UNROLL_LINES lines, over the lines. More than
MAX_PREFETCH_LINES lines per iteration (64 KiB, more than any L1) is refused: the prefetch
belongs at an inner loop then, where it also interleaves with the computation instead of
filling the CPU's miss buffers all at once.
"""

from __future__ import annotations

import math

from tessera.arith import IntSet
from tessera.te.bound import _const_upper_bound, _reads, leaf_values, root_values
from tessera.te.schedule import PrefetchSpec, Stage
from tessera.tir.expr import BufferLoad, Expr, IntImm, Range, Var, convert
from tessera.tir.op import max as tir_max
from tessera.tir.op import min as tir_min
from tessera.tir.op import prefetch
from tessera.tir.stmt import Evaluate, For, ForKind, Stmt, seq
from tessera.tir.stmt_functor import substitute

CACHE_LINE = 64
MAX_PREFETCH_LINES = 1024
UNROLL_LINES = 8


def prefetch_stmts(lw, st: Stage, iv) -> list[Stmt]:
    """The prefetches of stage `st` at the top of each iteration of its loop `iv`."""
    return [_lower_one(lw, st, spec) for spec in st.prefetches if spec.iv is iv]


def check_prefetches(st: Stage) -> None:
    """Each prefetch of `st` sits at a loop that still exists and is not vectorized."""
    for spec in st.prefetches:
        where = f"prefetch of {spec.tensor.name} at {st.name}'s loop {spec.iv.var.name}"
        if not any(v is spec.iv for v in st.leaf_iter_vars):
            raise ValueError(f"{where}: the loop was split or fused since; prefetch at a leaf")
        attr = st.iter_var_attrs.get(spec.iv)
        if attr is not None and attr.kind.value == "vectorized":
            raise ValueError(f"{where}: a vectorized loop has no iterations to prefetch at")


def _readers(lw, st: Stage, pos: int):
    """(stage, its loops inside the prefetch loop) of `st` and of every stage computed inside
    loop pos of st (attached at it or at a loop within it, directly or through others)."""
    inside = list(st.leaf_iter_vars[pos + 1 :])
    out, work = [st], [lw.attached.get(iv, []) for iv in st.leaf_iter_vars[pos:]]
    while work:
        for x in work.pop():
            out.append(x)
            inside += x.leaf_iter_vars
            work += [lw.attached.get(iv, []) for iv in x.leaf_iter_vars]
    return out, inside


def _region(lw, st: Stage, spec: PrefetchSpec) -> list[tuple[Expr, int]]:
    """(min, constant extent) per dim of the part of spec.tensor that iteration iv + offset
    reads, in `st` or the stages computed inside iv (Note [prefetch])."""
    ranges, an = lw.bounds.ranges, lw.an
    pos = next(k for k, v in enumerate(st.leaf_iter_vars) if v is spec.iv)
    readers, inside = _readers(lw, st, pos)
    relax = {v.var: IntSet.from_range(Range(convert(0), ranges[v].extent)) for v in inside}
    sets: list = [None] * spec.tensor.ndim
    for reader in readers:
        vals = root_values(reader, ranges, leaf_values(reader, ranges))
        vmap = {v.var: vals[v] for v in reader.op.axis + reader.op.reduce_axis}
        for _, load in _reads(lw.sch, lw.bounds.bodies[reader]):
            t = load.producer
            if t.op is not spec.tensor.op or t.value_index != spec.tensor.value_index:
                continue
            for d, ix in enumerate(load.indices):
                s = an.int_set(substitute(ix, vmap), relax)
                sets[d] = s if sets[d] is None else sets[d].union(s)
    where = f"prefetch of {spec.tensor.name} at {st.name}'s loop {spec.iv.var.name}"
    if sets[0] is None:
        raise ValueError(f"{where}: neither {st.name} nor a stage inside reads it")
    shift = {spec.iv.var: spec.iv.var + spec.offset}
    region = []
    for d, s in enumerate(sets):
        extent = _const_upper_bound(an.simplify(s.max_value - s.min_value + 1), ranges, an)
        if not isinstance(extent, IntImm):
            raise ValueError(f"{where}: the extent of dim {d} ({extent}) has no constant bound")
        region.append((an.simplify(substitute(s.min_value, shift)), extent.value))
    return region


def _static_shape(spec: PrefetchSpec) -> list[int]:
    shape = [getattr(d, "value", None) for d in spec.tensor.shape]
    if any(not isinstance(d, int) for d in shape):
        raise ValueError(f"prefetch of {spec.tensor.name}: its shape must be constant")
    return shape


def _clamped(an, lo: Expr, extent: int, size: int) -> Expr:
    """lo moved so that [lo, lo + extent) lies in [0, size)."""
    if not an.can_prove(lo <= size - extent):
        lo = an.simplify(tir_min(lo, size - extent))
    if not an.can_prove(lo >= 0):
        lo = an.simplify(tir_max(lo, 0))
    return lo


def _lower_one(lw, st: Stage, spec: PrefetchSpec) -> Stmt:
    shape = _static_shape(spec)
    region = _region(lw, st, spec)
    extents = [min(e, n) for (_, e), n in zip(region, shape, strict=True)]
    lows = [_clamped(lw.an, lo, e, n) for (lo, _), e, n in zip(region, extents, shape, strict=True)]
    # the run: dims k+1.. are covered whole, so dims k.. are contiguous
    k = len(shape) - 1
    while k > 0 and extents[k] == shape[k]:
        k -= 1
    inner = math.prod(shape[k + 1 :])
    run = extents[k] * inner
    dt = spec.tensor.dtype
    per_line = max(1, CACHE_LINE * 8 // (dt.bits * dt.lanes))
    lines = -(-run // per_line)
    total = lines * math.prod(extents[:k])
    if total > MAX_PREFETCH_LINES:
        raise ValueError(
            f"prefetch of {spec.tensor.name} at {st.name}'s loop {spec.iv.var.name}: "
            f"{total} cache lines per iteration (at most {MAX_PREFETCH_LINES}); prefetch at an "
            "inner loop"
        )
    buf, offsets = lw.storage_of(spec.tensor)
    if any(off is not None for off in offsets):
        raise ValueError(
            f"prefetch of {spec.tensor.name}: it is stored as a region computed inside a loop; "
            "prefetch tensors stored whole (inputs, root stages)"
        )
    name = spec.tensor.name
    outer = [Var(f"{name}.pf{d}") if extents[d] > 1 else None for d in range(k)]
    line = Var(f"{name}.pf_line") if lines > UNROLL_LINES else None

    def at(t) -> Stmt:
        rest, idx = t, []
        for n in reversed(shape[k + 1 :]):
            idx.append(rest % n)
            rest = rest // n
        idx.append(lows[k] + rest)
        idx += [lows[d] if outer[d] is None else lows[d] + outer[d] for d in reversed(range(k))]
        element = BufferLoad(buf, tuple(lw.an.simplify(convert(i)) for i in reversed(idx)))
        return Evaluate(prefetch(element, 0, spec.locality))

    if line is None:
        body = seq(*[at(convert(j * per_line)) for j in range(lines)])
    else:
        body = For(line, 0, lines, ForKind.SERIAL, at(line * per_line))
    for d in reversed(range(k)):
        if outer[d] is not None:
            body = For(outer[d], 0, extents[d], ForKind.SERIAL, body)
    return body
