"""te.lower: a schedule to a tir.PrimFunc (the contract is in docs/architecture.md).

    s = te.create_schedule(C.op); xo, xi = s[C].split(C.op.axis[0], factor=16)
    te.lower(s, [A, B, C], name="add")
    # for (i.outer, 0, (n + 15) // 16)
    #   for (i.inner, 0, 16)
    #     if (likely(i.outer * 16 + i.inner < n))  C[i.outer * 16 + i.inner] = A[..] + B[..]

Each computed stage becomes a loop nest in its leaf order; stages computed at a loop are emitted
at the top of that loop's body, with an Allocate of their region; root intermediates are
allocated around everything. Reductions become an init store before the outermost reduction
loop and an update store inside. Non-divisible splits are guarded with `likely` conditions.
A stage's prefetches come first in the body of their loop (te/prefetch.py).
"""

from __future__ import annotations

from tessera.arith import Analyzer
from tessera.ir.node import Mutator
from tessera.te.bound import BoundInfo, infer_bound, leaf_values, root_values
from tessera.te.prefetch import check_prefetches, prefetch_stmts
from tessera.te.schedule import AttachType, Schedule, SizeDispatch, Stage
from tessera.te.tensor import PlaceholderOp, Tensor
from tessera.tir.buffer import Buffer
from tessera.tir.expr import BufferLoad, Expr, IntImm, IterVar, IterVarType, Reduce, Var
from tessera.tir.function import PrimFunc
from tessera.tir.op import floordiv, floormod, likely
from tessera.tir.op import max as tmax
from tessera.tir.op import min as tmin
from tessera.tir.stmt import (
    Allocate,
    AttrStmt,
    BufferStore,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    LetStmt,
    Stmt,
    seq,
)
from tessera.tir.stmt_functor import substitute
from tessera.tir.transform.flatten_storage import fused_groups


def _offset(ix: Expr, off: Expr | None) -> Expr:
    if off is None or isinstance(off, IntImm) and off.value == 0:
        return ix
    return ix - off


class _ToBufferLoads(Mutator):
    def __init__(self, lowerer, clamp: Stage | None = None):
        self.lw = lowerer
        self.clamp = clamp  # Note [clamped tails]: the stage whose reads are clamped

    def visit_ProducerLoad(self, node):
        node = self.generic_visit(node)
        buf, offsets = self.lw.storage_of(node.producer)
        indices = node.indices
        if self.clamp is not None:
            indices = self._clamped(node.producer, indices, offsets)
        idx = [_offset(ix, off) for ix, off in zip(indices, offsets, strict=True)]
        return BufferLoad(buf, tuple(self.lw.an.simplify(i) for i in idx))

    def _clamped(self, tensor: Tensor, indices, offsets):
        if any(not _is_zero(off) for off in offsets):
            return indices  # a region buffer: bound inference sized it for every read
        an, out = self.lw.an, []
        # a fused index read as (floordiv(r, d), floormod(r, d)) is clamped as r (Note [clamped
        # fused reads]), else each index into its own dim
        for ix, dims in fused_groups(tensor.shape, indices):
            size = dims[0]
            for d in dims[1:]:
                size = size * d
            if an.can_prove(ix < size) and an.can_prove(ix >= 0):
                out.extend(_unfused(ix, dims))
                continue
            if not an.can_prove(ix < size):
                ix = tmin(ix, size - 1)
            if not an.can_prove(ix >= 0):
                ix = tmax(ix, 0)
            out.extend(_unfused(ix, dims))
        return out


def _unfused(ix: Expr, dims: list) -> list:
    """The indices of the row-major dims `dims` from the index `ix` of their product, written as
    a loop fused over them writes them (floordiv(ix, d), floormod(ix, d), nested)."""
    out = []
    for d in reversed(dims[1:]):
        out.append(floormod(ix, d))
        ix = floordiv(ix, d)
    out.append(ix)
    return out[::-1]


def _is_zero(off) -> bool:
    return off is None or isinstance(off, IntImm) and off.value == 0


# Note [clamped fused reads]
# A matrix product over rows of a view (a dense over (batch, seq, k) reads x[floordiv(r, seq),
# floormod(r, seq), k]) clamped each index alone: min(floordiv(r, seq), batch - 1), a clamp the
# flattened offset cannot see through, so each row of every tile paid a division and a modulo
# by seq (hoisted out of the k loop, still ~12 divisions per 6 x 16 tile: the dynamic encoder's
# dense layers were 1.2x their specialized kernels). The fused index is clamped instead (r to
# min(r, batch*seq - 1)), an in-bounds read like the other, and the flattened offset merges
# the pair back into that r (Note [fused index merge] in tir/transform/flatten_storage.py).

# Note [clamped tails]
# A stage marked `clamp_tails` (a cache_write accumulator of a matrix product whose rows or
# columns are symbolic) computes every point of its loops, also those past its extent in the
# last tile of a split, so its loops carry no guard and its register block stays whole (a
# guard per element inside a vectorized, unrolled micro-kernel made the partial tiles 10-20x
# slower). Its reads are clamped into the tensors they read (min(i, n - 1)): the extra points
# are finite copies of the last row or column, in the stage's own tile-sized buffer, and its
# consumer stores only the points inside the tensor (its guards stay, and partition_loop peels
# them). Only the dom guards go; the region guards (a split that does not divide a region)
# stay. Where a tile is whole, partition_loop's main part proves the clamp is the index itself.
# A tensor computed at a loop (a conv's input window padded per tile) is read unclamped: its
# buffer is the region bound inference derived from these very reads, and its own guards keep
# its points past its extent from reading outside its inputs (those slots are never written;
# only the extra points read them).


_INT32_MAX = (1 << 31) - 1


def _bind_shape_vars(an: Analyzer, sch: Schedule) -> None:
    """Note [shape vars are positive]: the symbolic dims of the stages' shapes are >= 1 for
    the guards' proofs. A statement runs only inside its loops, and a loop over a dim that is 0
    runs nothing, so the fused loop of a (12, n) tensor proves floordiv(f, n) < 12 (no guard)."""
    from tessera.tir.expr import Range
    from tessera.tir.stmt_functor import free_vars

    seen: set[int] = set()
    for st in sch.stages:
        for k in range(st.op.num_outputs):
            for d in st.op.output(k).shape:
                for v in free_vars(d):
                    if id(v) not in seen and v.dtype.is_int:
                        seen.add(id(v))
                        one = IntImm(1, v.dtype)
                        an.bind(v, Range.from_min_extent(one, IntImm(_INT32_MAX - 1, v.dtype)))


class _Lowerer:
    def __init__(self, sch: Schedule, bounds: BoundInfo, storage):
        self.sch, self.bounds, self.storage = sch, bounds, storage
        self.an = Analyzer()
        _bind_shape_vars(self.an, sch)
        for iv, r in bounds.ranges.items():
            if iv.var is not None and r is not None:
                self.an.bind(iv.var, _zero_based(r))
        self.attached: dict[IterVar, list[Stage]] = {}
        for st in sch.stages:
            if st in bounds.regions and st.attach_type == AttachType.SCOPE:
                self.attached.setdefault(st.attach_ivar, []).append(st)

    def storage_of(self, tensor: Tensor):
        st = self.sch[tensor]
        return self.storage[(st, tensor.value_index)]

    # ---- guards -------------------------------------------------------------------------
    def _guards(self, axes, values, in_dom: bool = False) -> list[Expr]:
        """The conditions under which a point is computed; `in_dom`: points past the tensor's
        extent are computed too (Note [clamped tails]), only the region is guarded."""
        conds = []
        for iv in axes:
            v, dom = values[iv], iv.dom
            if not in_dom and not self.an.can_prove(v >= dom.min):
                conds.append(v >= dom.min)
            if not in_dom and not self.an.can_prove(v < dom.min + dom.extent):
                conds.append(v < self.an.simplify(dom.min + dom.extent))
            # a stage computed at a loop covers its region only: a split that does not divide
            # the region's extent must not write past its (region-sized) buffer
            region = self.bounds.ranges.get(iv)
            if region is not None and region is not dom and iv.iter_type != IterVarType.REDUCE:
                local = self.an.simplify(v - region.min)
                if not self.an.can_prove(local < region.extent):
                    conds.append(local < region.extent)
        return conds

    @staticmethod
    def _guard(conds, body: Stmt) -> Stmt:
        for c in reversed(conds):
            body = IfThenElse(likely(c), body)
        return body

    # ---- loops --------------------------------------------------------------------------
    def _loop(self, st: Stage, iv: IterVar, body: Stmt, var: Var | None = None) -> Stmt:
        attr = st.iter_var_attrs.get(iv)
        kind = attr.kind if attr else ForKind.SERIAL
        tag = attr.thread.thread_tag if attr and attr.thread is not None else ""
        notes = tuple(attr.pragmas) if attr else ()
        ext = self.bounds.ranges[iv].extent
        return For(
            iv.var if var is None else var, IntImm(0, iv.var.dtype), ext, kind, body, tag, notes
        )

    def _wrap(self, st: Stage, leaves, body: Stmt) -> Stmt:
        for iv in reversed(leaves):
            body = self._with_attached(iv, body)
            if st.prefetches:  # first in each iteration: Note [prefetch] in te/prefetch.py
                body = seq(*prefetch_stmts(self, st, iv), body)
            body = self._loop(st, iv, body)
        return body

    def _with_attached(self, iv: IterVar, body: Stmt) -> Stmt:
        stages = self.attached.get(iv, [])
        if not stages:
            return body
        body = seq(*[self.stage_nest(x) for x in stages], body)
        for x in reversed(stages):
            for k in reversed(range(x.op.num_outputs)):
                if (x, k) in self.allocated:
                    body = Allocate(self.storage[(x, k)][0], body)
        return body

    # ---- one stage ----------------------------------------------------------------------
    def stage_nest(self, st: Stage) -> Stmt:
        ranges = self.bounds.ranges
        vals = root_values(st, ranges, leaf_values(st, ranges))
        vmap = {iv.var: vals[iv] for iv in st.op.axis + st.op.reduce_axis}
        to_loads = _ToBufferLoads(self, st if st.clamp_tail else None)
        body = [to_loads.visit(substitute(b, vmap)) for b in self.bounds.bodies[st]]
        outs = [self.storage[(st, k)] for k in range(len(body))]
        index = [
            tuple(
                self.an.simplify(_offset(vals[iv], off))
                for iv, off in zip(st.op.axis, offs, strict=True)
            )
            for _, offs in outs
        ]
        bufs = [buf for buf, _ in outs]
        dp_conds = self._guards(st.op.axis, vals, in_dom=st.clamp_tail)
        if not isinstance(body[0], Reduce):
            stores = seq(
                *[BufferStore(b, v, ix) for b, v, ix in zip(bufs, body, index, strict=True)]
            )
            return self._wrap(st, st.leaf_iter_vars, self._guard(dp_conds, stores))
        red_conds = self._guards(st.op.reduce_axis, vals)
        return self._reduction_nest(st, body, bufs, index, dp_conds, red_conds)

    def _reduction_nest(self, st, body, bufs, index, dp_conds, red_conds) -> Stmt:
        red: Reduce = body[0]
        leaves = st.leaf_iter_vars
        r = next(k for k, iv in enumerate(leaves) if iv.iter_type == IterVarType.REDUCE)
        bound = [iv for iv in leaves[r:] if _kind(st, iv) == ForKind.THREAD_BINDING]
        if bound:
            return self._allreduce_nest(st, body, bufs[0], index[0], dp_conds, red_conds, r)
        init_vals = red.init or red.combiner.identity_element
        init = seq(
            *[BufferStore(b, v, ix) for b, v, ix in zip(bufs, init_vals, index, strict=True)]
        )
        init = self._guard(dp_conds, init)
        # data-parallel loops inside the reduction loops get an init nest of their own
        inner_dp = [iv for iv in leaves[r:] if iv.iter_type != IterVarType.REDUCE]
        fresh = {iv.var: Var(f"{iv.var.name}.init", iv.var.dtype) for iv in inner_dp}
        init = substitute(init, fresh)
        for iv in reversed(inner_dp):
            init = self._loop(st, iv, init, fresh[iv.var])
        olds = tuple(BufferLoad(b, ix) for b, ix in zip(bufs, index, strict=True))
        new = red.combiner(olds, red.source)
        if len(bufs) == 1:
            update = BufferStore(bufs[0], new[0], index[0])
        else:  # combine every value from the old ones before storing any of them
            tmps = [Var(f"{b.name}.v", b.dtype) for b in bufs]
            update = seq(
                *[BufferStore(b, t, ix) for b, t, ix in zip(bufs, tmps, index, strict=True)]
            )
            for t, v in reversed(list(zip(tmps, new, strict=True))):
                update = LetStmt(t, v, update)
        if not (isinstance(red.condition, IntImm) and red.condition.value == 1):
            update = IfThenElse(red.condition, update)
        update = self._guard(dp_conds + red_conds, update)
        return self._wrap(st, leaves[:r], seq(init, self._wrap(st, leaves[r:], update)))

    def _allreduce_nest(self, st, body, buf, index, dp_conds, red_conds, r) -> Stmt:
        """A reduction with a loop bound to threadIdx: Note [cross-thread reduction]."""
        red: Reduce = body[0]
        leaves = st.leaf_iter_vars
        bound = [iv for iv in leaves[r:] if _kind(st, iv) == ForKind.THREAD_BINDING]
        if len(body) != 1 or len(bound) != 1:
            raise ValueError(
                f"{st.name}: a cross-thread reduction has one value and one reduction loop "
                "bound to threadIdx"
            )
        if any(iv.iter_type != IterVarType.REDUCE for iv in leaves[r:]):
            raise ValueError(
                f"{st.name}: a cross-thread reduction keeps its data-parallel loops outside "
                "the reduction loops (reorder them)"
            )
        acc = Buffer(f"{st.name}.acc", (IntImm(1),), buf.dtype, "local")
        init = BufferStore(acc, (red.init or red.combiner.identity_element)[0], (IntImm(0),))
        update = BufferStore(acc, red.combiner((acc[IntImm(0)],), red.source)[0], (IntImm(0),))
        if not (isinstance(red.condition, IntImm) and red.condition.value == 1):
            update = IfThenElse(red.condition, update)
        serial = [iv for iv in leaves[r:] if iv is not bound[0]]
        partial = self._wrap(st, serial, self._guard(red_conds, update))
        tid = bound[0]
        allreduce = AttrStmt(
            "thread_allreduce",
            (red.combiner, acc, tid.var, self.bounds.ranges[tid].extent),
            Evaluate(IntImm(0)),
        )
        store = self._guard(dp_conds, BufferStore(buf, acc[IntImm(0)], index))
        inner = Allocate(acc, seq(init, partial, allreduce, store))
        return self._wrap(st, leaves[:r], self._loop(st, tid, inner))


# Note [cross-thread reduction]: with its reduction loop k bound to threadIdx.x (extent T), a
# reduction is computed by T threads together: each folds its share of the other reduction
# loops into a register `X.acc`; the attribute "thread_allreduce" (combiner, acc, k, T) then
# stands for combining the T registers, so that every thread holds the result in its `acc`
# (tir/transform/lower_thread_allreduce.py: warp shuffles on CUDA, a tree in shared memory on
# OpenCL); the result is stored (by every thread: the same value). As TVM's allreduce.


def _kind(st: Stage, iv: IterVar) -> ForKind:
    attr = st.iter_var_attrs.get(iv)
    return attr.kind if attr else ForKind.SERIAL


def _zero_based(r):
    from tessera.tir.expr import Range

    return Range(IntImm(0, r.extent.dtype), r.extent)


# ---------------------------------------------------------------------------------------------
# arguments and storage


def _arg_storage(sch: Schedule, args, buffers=None):
    """(params, storage) of the arguments; `buffers`: the Buffers to use for the tensors (another
    schedule's of the same compute, Note [size dispatch]), else new ones."""
    params, storage, seen = [], {}, set()
    given = iter(buffers) if buffers is not None else None
    for a in args:
        if isinstance(a, Var):
            params.append(a)
            continue
        if not isinstance(a, Tensor):
            raise TypeError(f"lower: arguments are tensors or te.var scalars, got {a!r}")
        if id(a) in seen:
            raise ValueError(f"lower: tensor {a.name} is given twice in the arguments")
        seen.add(id(a))
        buf = Buffer(a.name, a.shape, a.dtype) if given is None else next(given)
        params.append(buf)
        st = sch.stage_map.get(a.op)
        if st is not None:
            if st.attach_type == AttachType.INLINE:
                raise ValueError(f"lower: {a.name} is inlined, so it cannot be an argument")
            storage[(st, a.value_index)] = (buf, (None,) * a.ndim)
    return params, storage


def _intermediate_storage(sch: Schedule, bounds: BoundInfo, storage) -> list:
    allocated = []
    for st in sch.stages:
        if st not in bounds.regions:
            continue
        region = bounds.regions[st]
        for k in range(st.op.num_outputs):
            if (st, k) in storage:
                continue
            t = st.origin_op.output(k)
            if st.attach_type == AttachType.SCOPE:
                shape, offs = [r.extent for r in region], tuple(r.min for r in region)
            else:
                shape, offs = list(t.shape), (None,) * t.ndim
            storage[(st, k)] = (Buffer(t.name, tuple(shape), t.dtype, st.scope), offs)
            allocated.append((st, k))
    return allocated


def _check_outputs(sch: Schedule, storage) -> None:
    for op in sch.outputs:
        st = sch[op]
        if (st, 0) not in storage:
            raise ValueError(f"lower: output {op.name} must be in the argument list")


def _check_args(sch: Schedule, bounds: BoundInfo, storage) -> None:
    for st, body in bounds.bodies.items():
        if st not in bounds.regions:
            continue
        for t in _read_tensors(body):
            pst = sch.stage_map.get(t.op)
            if isinstance(t.op, PlaceholderOp) and (pst, t.value_index) not in storage:
                raise ValueError(
                    f"lower: placeholder {t.name} is read by {st.name} but is not in the "
                    "argument list"
                )


def _read_tensors(body):
    from tessera.te.tensor import input_tensors

    return input_tensors(body)


def lower(sch: Schedule, args, name: str = "main", simple_mode: bool = False) -> PrimFunc:
    """The PrimFunc computing the outputs of `sch` (a Schedule, or a SizeDispatch of several),
    with `args` (tensors, vars) as parameters.

    `simple_mode` is accepted for TVM compatibility; the result is the same PrimFunc.
    """
    if isinstance(sch, SizeDispatch):
        return _lower_dispatch(sch, args, name)
    if not isinstance(sch, Schedule):
        raise TypeError(f"lower needs a te.Schedule, got {type(sch).__name__}")
    if not isinstance(args, (list, tuple)):
        raise TypeError("lower: args must be a list of tensors (and vars)")
    params, body = _lower_body(sch, args)
    return PrimFunc(name, tuple(params), body)


def _lower_dispatch(d: SizeDispatch, args, name: str) -> PrimFunc:
    """Each schedule's body, chosen at run time by the size (Note [size dispatch])."""
    params, body = _lower_body(d.default, args)
    buffers = [p for p in params if isinstance(p, Buffer)]
    from tessera.tir.transform._util import copy_fresh

    for limit, s in reversed(d.cases):
        _, case = _lower_body(s, args, buffers)
        # the schedules share the compute's axis vars: each body binds fresh ones
        body = IfThenElse(d.size < limit, copy_fresh(case), body)
    return PrimFunc(name, tuple(params), body)


def _lower_body(sch: Schedule, args, buffers=None):
    bounds = infer_bound(sch)
    params, storage = _arg_storage(sch, args, buffers)
    _check_outputs(sch, storage)
    allocated = _intermediate_storage(sch, bounds, storage)
    _check_args(sch, bounds, storage)
    for st in bounds.regions:
        check_prefetches(st)
    lw = _Lowerer(sch, bounds, storage)
    lw.allocated = set(allocated)
    roots = [st for st in sch.stages if st in bounds.regions and st.attach_type == AttachType.ROOT]
    body = seq(*[lw.stage_nest(st) for st in roots])
    for st, k in reversed(allocated):
        if st.attach_type == AttachType.ROOT:
            body = Allocate(storage[(st, k)][0], body)
    return params, body
