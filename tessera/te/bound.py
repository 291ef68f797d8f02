"""Bound inference: the range of every iteration variable and the region each stage computes.

For a stage at root the region is its whole tensor. For a stage computed at loop `iv` of a
consumer, it is the part of its output that the consumer's body *below* `iv` reads: the read
indices are evaluated over the ranges of the consumer loops inside `iv` (loops at and outside
`iv` stay symbolic), so a 3x3 blur's producer computed at the consumer's x loop gets a region 2
larger than the consumer's tile (the halo):

    blur_y(y, x) reads blur_x(y + 0..2, x)  ->  blur_x's region at blur_y's x: [y, y+3) x [x, x+1)

Ranges then flow through the split/fuse relations: root -> leaves for loop extents (split:
ceil-div), leaves -> root for the values of the root variables (`root_values`).
Every loop runs from 0; a root variable's value is `loop_var + range.min`.
"""

from __future__ import annotations

from dataclasses import dataclass

from tessera.arith import Analyzer, IntSet
from tessera.ir.node import Mutator, Visitor
from tessera.te.schedule import AttachType, FuseRelation, Schedule, SplitRelation, Stage
from tessera.te.tensor import ComputeOp, ProducerLoad
from tessera.tir.expr import Expr, IntImm, IterVar, Max, Min, Range, convert
from tessera.tir.stmt_functor import substitute


@dataclass
class BoundInfo:
    """Everything lowering needs to know about extents and regions."""

    ranges: dict[IterVar, Range]  # every iteration variable of every computed stage
    regions: dict[Stage, list[Range]]  # per stage, the computed region of each output dim
    bodies: dict[Stage, tuple[Expr, ...]]  # bodies with inlined stages substituted
    consumers: dict[Stage, list[Stage]]  # who reads each computed stage (after inlining)


# ---------------------------------------------------------------------------------------------
# inlining


class _Inline(Mutator):
    def __init__(self, sch: Schedule, bodies):
        self.sch, self.bodies = sch, bodies

    def visit_ProducerLoad(self, node):
        node = self.generic_visit(node)
        st = self.sch.stage_map.get(node.producer.op)
        if st is None or st.attach_type != AttachType.INLINE:
            return node
        body = self.bodies[st][node.producer.value_index]
        # an index of another dtype (an int64 gathered index) takes the axis dtype, so the
        # body, built around int32 axes, stays well typed
        vmap = {
            iv.var: ix.astype(iv.var.dtype) for iv, ix in zip(st.op.axis, node.indices, strict=True)
        }
        return substitute(body, vmap)


def inline_bodies(sch: Schedule) -> dict[Stage, tuple[Expr, ...]]:
    """Each compute stage's body with the bodies of inlined stages substituted in."""
    bodies: dict[Stage, tuple[Expr, ...]] = {}
    for st in sch.stages:  # producers first
        if isinstance(st.op, ComputeOp):
            bodies[st] = tuple(_Inline(sch, bodies).visit(b) for b in st.op.body)
    return bodies


def _reads(sch: Schedule, exprs) -> list[tuple[Stage, ProducerLoad]]:
    found = []

    class _V(Visitor):
        def visit_ProducerLoad(self, node):
            st = sch.stage_map.get(node.producer.op)
            if st is None:
                raise ValueError(f"tensor {node.producer.name} is not part of the schedule")
            found.append((st, node))
            self.generic_visit(node)

    for e in exprs:
        _V().visit(e)
    return found


# ---------------------------------------------------------------------------------------------
# relations


def ceil_div(a: Expr, b: Expr) -> Expr:
    a, b = convert(a), convert(b)
    if isinstance(a, IntImm) and isinstance(b, IntImm):
        return IntImm(-(-a.value // b.value), a.dtype)
    return (a + b - 1) // b


def pass_down(stage: Stage, ranges: dict[IterVar, Range], an: Analyzer) -> None:
    """Ranges of the derived iteration variables from those of their parents."""
    zero = convert(0)
    for rel in stage.relations:
        if isinstance(rel, SplitRelation):
            ext = ranges[rel.parent].extent
            if rel.factor is not None:
                outer, inner = ceil_div(ext, rel.factor), rel.factor
            else:
                outer, inner = rel.nparts, ceil_div(ext, rel.nparts)
            ranges[rel.outer] = Range(zero, an.simplify(outer))
            ranges[rel.inner] = Range(zero, an.simplify(inner))
        elif isinstance(rel, FuseRelation):
            ext = ranges[rel.outer].extent * ranges[rel.inner].extent
            ranges[rel.fused] = Range(zero, an.simplify(ext))


def root_values(stage: Stage, ranges, leaf_values: dict[IterVar, Expr]) -> dict[IterVar, Expr]:
    """The value of every iteration variable given the values of the leaves."""
    values = dict(leaf_values)
    for rel in reversed(stage.relations):
        if isinstance(rel, SplitRelation):
            factor = rel.factor if rel.factor is not None else ranges[rel.inner].extent
            value = values[rel.outer] * factor + values[rel.inner]
            values[rel.parent] = _plus(value, ranges[rel.parent].min)
        elif isinstance(rel, FuseRelation):
            fused = values[rel.fused]
            inner_ext = ranges[rel.inner].extent
            values[rel.outer] = _plus(fused // inner_ext, ranges[rel.outer].min)
            values[rel.inner] = _plus(fused % inner_ext, ranges[rel.inner].min)
    return values


def _plus(e: Expr, m: Expr) -> Expr:
    return e if isinstance(m, IntImm) and m.value == 0 else e + m


def leaf_values(stage: Stage, ranges) -> dict[IterVar, Expr]:
    """Each leaf's value: its loop variable, plus the range's min for a root variable."""
    return {iv: _plus(iv.var, ranges[iv].min) for iv in stage.leaf_iter_vars}


# ---------------------------------------------------------------------------------------------
# regions


def _check_attach(stage: Stage, consumers: list[Stage]) -> None:
    parent, iv = stage.attach_stage, stage.attach_ivar
    if parent.attach_type == AttachType.INLINE:
        raise ValueError(f"{stage.name} is computed at {parent.name}, which is inlined")
    if not any(v is iv for v in parent.leaf_iter_vars):
        raise ValueError(
            f"{stage.name} is computed at {parent.name}'s loop {iv.var.name}, which is no "
            "longer a loop (it was split or fused); compute_at one of "
            f"{', '.join(v.var.name for v in parent.leaf_iter_vars)}"
        )
    others = [c.name for c in consumers if c is not parent and not _scope_chain(c, stage)]
    if others:
        raise ValueError(
            f"{stage.name} is computed at {parent.name} but also read by {', '.join(others)}; "
            "compute it at root or inline it, or compute those readers at the same loop"
        )


def _scope_chain(consumer: Stage, stage: Stage) -> list[Stage] | None:
    """The stages from `consumer` up to one computed at the same loop as `stage` (so emitted
    after it, inside that loop), or None when `consumer` runs outside that loop.

    Note [readers in scope]: softmax's exp row is read by the output and by the row sum, which
    is computed at the output's row loop too: the row is computed once there, for both. A
    reader computed at a loop of the same stage nested inside that loop is in scope too (an
    int8 depthwise conv's tap words, built per channel block, are read by the accumulator
    tile computed at the block's column loop)."""
    chain, cur = [], consumer
    parent, iv = stage.attach_stage, stage.attach_ivar
    while cur.attach_type == AttachType.SCOPE:
        chain.append(cur)
        if cur.attach_stage is parent and (
            cur.attach_ivar is iv or _loop_inside(parent, cur.attach_ivar, iv)
        ):
            return chain
        cur = cur.attach_stage
    return None


def _loop_inside(parent: Stage, inner, outer) -> bool:
    """Whether loop `inner` of parent is nested inside its loop `outer`."""
    leaves = parent.leaf_iter_vars
    pos = {id(v): k for k, v in enumerate(leaves)}
    return id(inner) in pos and id(outer) in pos and pos[id(inner)] > pos[id(outer)]


def _attached_region(stage, sch, bounds: BoundInfo, an: Analyzer) -> list[Range]:
    """The region of `stage` read by its attach parent below the attach loop."""
    parent, iv = stage.attach_stage, stage.attach_ivar
    ranges = bounds.ranges
    pos = next(k for k, v in enumerate(parent.leaf_iter_vars) if v is iv)
    relax = {
        v.var: IntSet.from_range(Range(convert(0), ranges[v].extent))
        for v in parent.leaf_iter_vars[pos + 1 :] + _shared_thread_loops(stage, parent, pos)
    }
    vals = root_values(parent, ranges, leaf_values(parent, ranges))
    vmap = {v.var: vals[v] for v in parent.op.axis + parent.op.reduce_axis}
    ndim = len(stage.op.axis)
    sets: list = [None] * ndim
    readers = [(parent, vmap, relax)]
    for c in bounds.consumers.get(stage, []):
        chain = _scope_chain(c, stage) if c is not parent else None
        if chain:  # every loop of the chain runs inside `iv`: relax them all
            cvals = root_values(c, ranges, leaf_values(c, ranges))
            cmap = {v.var: cvals[v] for v in c.op.axis + c.op.reduce_axis}
            crelax = {
                v.var: IntSet.from_range(Range(convert(0), ranges[v].extent))
                for link in chain
                for v in link.leaf_iter_vars
            }
            crelax.update(relax)  # a chain attached deeper runs over parent's inner loops too
            readers.append((c, cmap, crelax))
    for reader, rmap, rrelax in readers:
        for st, load in _reads(sch, bounds.bodies[reader]):
            if st is not stage:
                continue
            for d, ix in enumerate(load.indices):
                s = an.int_set(substitute(ix, rmap), rrelax)
                sets[d] = s if sets[d] is None else sets[d].union(s)
    region = []
    for d, s in enumerate(sets):
        if s is None:  # the dimension is never read: keep the whole axis
            region.append(stage.op.axis[d].dom)
            continue
        lo = an.simplify(s.min_value)
        extent = _const_upper_bound(an.simplify(s.max_value - s.min_value + 1), ranges, an)
        if not isinstance(extent, IntImm):  # Note [symbolic regions]
            lo, extent = _within(s.min_value, s.max_value, lo, extent, stage.op.axis[d].dom, an)
        region.append(Range(lo, extent))
    return region


# Note [symbolic regions]
# The union of a stage's reads over-approximates what a reader under a guard reads: softmax's
# exp row, read by the output's vector loop (ceil(n / 8) * 8 lanes, the tail guarded) and by the
# sum's combine (`max(j - 32, 0) + floordiv(n, 32) * 32`), came out as
# [min(floordiv(n, 32) * 32, 0), max(floordiv(n + 7, 8) * 8 - 1, ...)]: a loop whose extent
# partition_loop cannot split at the vector width, so every element of the exp row ran as
# guarded scalar code with a libm exp. No reader may read a stage outside its own shape, so a
# region of symbolic extent whose ends provably reach past the stage's domain is cut to the
# domain (here [0, n)). A region of constant extent (a register tile computed whole, Note
# [clamped tails] in te/lower.py) is left as it is: its tail rows are computed on purpose.


def _within(lo_set, hi_set, lo, extent, dom: Range, an: Analyzer) -> tuple[Expr, Expr]:
    """(lo, extent), each end cut to `dom` where it provably reaches past it."""
    cut_lo = _proves(an, lo_set, dom.min, at_least=False)
    cut_hi = _proves(an, hi_set, dom.min + dom.extent - 1, at_least=True)
    if not (cut_lo or cut_hi):
        return lo, extent
    new_lo = dom.min if cut_lo else lo
    end = dom.min + dom.extent if cut_hi else lo + extent
    return an.simplify(new_lo), an.simplify(end - new_lo)


def _proves(an: Analyzer, e: Expr, bound: Expr, at_least: bool) -> bool:
    """Whether e >= bound (at_least) or e <= bound provably; through max and min, whose one
    arm (max, for >=; min, for <=) or both arms decide it."""
    if an.can_prove(e >= bound if at_least else e <= bound):
        return True
    if isinstance(e, Max | Min):
        arms = (_proves(an, e.a, bound, at_least), _proves(an, e.b, bound, at_least))
        return any(arms) if isinstance(e, Max) == at_least else all(arms)
    return False


def _shared_thread_loops(stage: Stage, parent: Stage, pos: int) -> list:
    """The loops bound to threadIdx.* around the attach point (the parent's outside it, and
    those of the stages the parent is computed in), for a stage in "shared" scope:
    Note [shared regions span the block]."""
    if stage.scope != "shared":
        return []
    found = []
    while True:
        for v in parent.leaf_iter_vars[:pos]:
            attr = parent.iter_var_attrs.get(v)
            if attr is not None and attr.thread is not None:
                if attr.thread.thread_tag.startswith("threadIdx"):
                    found.append(v)
        if parent.attach_type != AttachType.SCOPE:
            return found
        iv, parent = parent.attach_ivar, parent.attach_stage
        pos = next(k for k, v in enumerate(parent.leaf_iter_vars) if v is iv) + 1


# Note [shared regions span the block]: a GPU thread loop is not a loop; all its iterations run
# at once, one per thread. A "local" cache computed at a loop inside threadIdx.x holds what one
# thread reads, so threadIdx.x stays symbolic (as an outer loop would); a "shared" cache is one
# buffer for the whole block, filled by all its threads together, so its region is what all the
# threads of the block read: the threadIdx loops outside the attach point are relaxed too
# (blockIdx loops are not: each block has its own shared memory).


def _const_upper_bound(extent: Expr, ranges, an: Analyzer) -> Expr:
    """A constant bound on a region extent that depends on outer loops (else the extent)."""
    if isinstance(extent, IntImm):
        return extent
    dom = {iv.var: IntSet.from_range(r) for iv, r in ranges.items() if r is not None}
    bound = an.simplify(an.int_set(extent, dom).max_value)
    return bound if isinstance(bound, IntImm) else extent


def infer_bound(sch: Schedule) -> BoundInfo:
    """Ranges of all iteration variables and regions of all computed stages."""
    an = Analyzer()
    bodies = inline_bodies(sch)
    computed = [st for st in sch.stages if st in bodies and st.attach_type != AttachType.INLINE]
    consumers: dict[Stage, list[Stage]] = {st: [] for st in computed}
    for st in computed:
        for prod, _ in _reads(sch, bodies[st]):
            if prod in consumers and st not in consumers[prod]:
                consumers[prod].append(st)
    bounds = BoundInfo({}, {}, bodies, consumers)
    for st in reversed(computed):  # consumers first
        if st.attach_type == AttachType.SCOPE:
            _check_attach(st, consumers[st])
            region = _attached_region(st, sch, bounds, an)
        else:
            region = [iv.dom for iv in st.op.axis]
        bounds.regions[st] = region
        for iv, r in zip(st.op.axis, region, strict=True):
            bounds.ranges[iv] = r
        for iv in st.op.reduce_axis:
            bounds.ranges[iv] = iv.dom
        pass_down(st, bounds.ranges, an)
    return bounds
