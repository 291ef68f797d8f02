"""Schedules: one Stage per operation, the primitives that reshape its loops, and their records.

    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=64)       # leaf order: i.outer, i.inner
    s[C].vectorize(xi)
    print(s)                        # split(C, i, factor=64), vectorize(C, i.inner)

A stage keeps its root axes (`op.axis + op.reduce_axis`), the relations that derive new iteration
variables from them (`SplitRelation`, `FuseRelation`), the current loop order
(`leaf_iter_vars`), per-loop annotations, where it is computed (root, inline, or at a loop of
a consumer), and the prefetches at its loops (`prefetch`: software prefetch of a tensor the next
iterations read, Note [prefetch] in te/prefetch.py). Every primitive appends a step record
(tessera.te.steps) to `Schedule.steps`.
"""

from __future__ import annotations

import contextlib
import enum
from dataclasses import dataclass, field

from tessera.te import steps as S
from tessera.te.tensor import ComputeOp, Operation, PlaceholderOp, Tensor
from tessera.tir.expr import Expr, IntImm, IterVar, IterVarType, Var, convert
from tessera.tir.stmt import ForKind


class AttachType(enum.Enum):
    ROOT = "root"
    INLINE = "inline"
    SCOPE = "scope"  # computed at a loop of another stage


@dataclass(frozen=True, eq=False)
class SplitRelation:
    """parent = outer * factor + inner (factor = ceil(extent / nparts) when nparts is given)."""

    parent: IterVar
    outer: IterVar
    inner: IterVar
    factor: Expr | None
    nparts: Expr | None


@dataclass(frozen=True, eq=False)
class FuseRelation:
    """fused = outer * extent(inner) + inner."""

    outer: IterVar
    inner: IterVar
    fused: IterVar


@dataclass(frozen=True, eq=False)
class PrefetchSpec:
    """At the start of each iteration of loop `iv`, prefetch the part of `tensor` that iteration
    `iv + offset` reads (to cache level `locality`: 3 all levels ... 0 none, as C's)."""

    tensor: Tensor
    iv: IterVar
    offset: int
    locality: int = 3


@dataclass
class IterVarAttr:
    """What a loop becomes: its kind, its bound thread, its pragmas."""

    kind: ForKind = ForKind.SERIAL
    thread: IterVar | None = None
    pragmas: list = field(default_factory=list)


def _positive_factor(value, what: str, stage: str):
    if isinstance(value, bool) or not isinstance(value, (int, Expr)):
        raise TypeError(f"{what} of stage {stage} must be an integer, got {value!r}")
    if isinstance(value, int) and value <= 0 or isinstance(value, IntImm) and value.value <= 0:
        raise ValueError(f"{what} of stage {stage} must be positive, got {value}")
    return convert(value)


class Stage:
    """The schedule of one operation."""

    def __init__(self, op: Operation, schedule: Schedule):
        self.op = op
        self.origin_op = op
        self.schedule = schedule
        self.relations: list = []
        self.iter_var_attrs: dict[IterVar, IterVarAttr] = {}
        self.attach_type = AttachType.ROOT
        self.attach_stage: Stage | None = None
        self.attach_ivar: IterVar | None = None
        self.scope = "global"
        self.clamp_tail = False  # Note [clamped tails] in te/lower.py
        self.prefetches: list[PrefetchSpec] = []
        self._reset_axes()

    def _reset_axes(self):
        axes = list(getattr(self.op, "axis", ())) + list(getattr(self.op, "reduce_axis", ()))
        self.all_iter_vars = list(axes)
        self.leaf_iter_vars = list(axes)

    @property
    def name(self) -> str:
        return self.op.name

    @property
    def is_placeholder(self) -> bool:
        return isinstance(self.op, PlaceholderOp)

    @property
    def is_output(self) -> bool:
        return any(o is self.origin_op or o is self.op for o in self.schedule.outputs)

    def __repr__(self) -> str:
        return (
            f"Stage({self.name}, leaves=[{', '.join(iv.var.name for iv in self.leaf_iter_vars)}])"
        )

    # ---- lookups ------------------------------------------------------------------------
    def find_iv(self, name: str) -> IterVar:
        """The iteration variable of this stage named `name` (a leaf first)."""
        for group in (self.leaf_iter_vars, self.all_iter_vars):
            for iv in group:
                if iv.var.name == name:
                    return iv
        raise ValueError(f"stage {self.name} has no iteration variable named {name!r}")

    def _leaf_index(self, iv, primitive: str) -> int:
        if not isinstance(iv, IterVar):
            raise TypeError(f"{primitive} on stage {self.name} needs an IterVar, got {iv!r}")
        for k, leaf in enumerate(self.leaf_iter_vars):
            if leaf is iv:
                return k
        known = "is not an iteration variable" if iv not in self.all_iter_vars else "is no leaf"
        raise ValueError(
            f"{primitive}: {iv.var.name} {known} of stage {self.name} "
            f"(leaves: {', '.join(v.var.name for v in self.leaf_iter_vars)})"
        )

    def _attr(self, iv) -> IterVarAttr:
        return self.iter_var_attrs.setdefault(iv, IterVarAttr())

    def _record(self, step) -> None:
        self.schedule._record(step)

    def _check_compute(self, primitive: str) -> None:
        if self.is_placeholder:
            raise ValueError(f"{primitive}: {self.name} is a placeholder; it has no loops")

    # ---- loop structure -----------------------------------------------------------------
    def split(self, parent: IterVar, factor=None, nparts=None):
        """Split `parent` into (outer, inner) with inner extent `factor` or outer `nparts`."""
        self._check_compute("split")
        k = self._leaf_index(parent, "split")
        if (factor is None) == (nparts is None):
            raise ValueError(f"split on stage {self.name}: give exactly one of factor, nparts")
        fac = None if factor is None else _positive_factor(factor, "split factor", self.name)
        npa = None if nparts is None else _positive_factor(nparts, "split nparts", self.name)
        name = parent.var.name
        outer = IterVar(None, Var(f"{name}.outer", parent.var.dtype), parent.iter_type)
        inner = IterVar(None, Var(f"{name}.inner", parent.var.dtype), parent.iter_type)
        self.relations.append(SplitRelation(parent, outer, inner, fac, npa))
        self.all_iter_vars += [outer, inner]
        self.leaf_iter_vars[k : k + 1] = [outer, inner]
        self._record(S.Split(self.name, name, factor, nparts))
        return outer, inner

    def fuse(self, *ivs: IterVar) -> IterVar:
        """Fuse adjacent loops (outer first) into one loop named `outer.inner.fused`."""
        self._check_compute("fuse")
        if len(ivs) == 1 and isinstance(ivs[0], (list, tuple)):
            ivs = tuple(ivs[0])
        if not ivs:
            raise ValueError(f"fuse on stage {self.name} needs at least one iteration variable")
        fused = ivs[0]
        self._leaf_index(fused, "fuse")
        for inner in ivs[1:]:
            fused = self._fuse_two(fused, inner)
        self._record(S.Fuse(self.name, tuple(iv.var.name for iv in ivs)))
        return fused

    def _fuse_two(self, outer: IterVar, inner: IterVar) -> IterVar:
        ko, ki = self._leaf_index(outer, "fuse"), self._leaf_index(inner, "fuse")
        if ki != ko + 1:
            raise ValueError(
                f"fuse on stage {self.name}: {outer.var.name} and {inner.var.name} are not "
                "adjacent loops (outer first); reorder them first"
            )
        if outer.iter_type != inner.iter_type:
            raise ValueError(
                f"fuse on stage {self.name}: cannot fuse a reduction loop with a data-parallel "
                f"loop ({outer.var.name}, {inner.var.name})"
            )
        name = f"{outer.var.name}.{inner.var.name}.fused"
        fused = IterVar(None, Var(name, outer.var.dtype), outer.iter_type)
        self.relations.append(FuseRelation(outer, inner, fused))
        self.all_iter_vars.append(fused)
        self.leaf_iter_vars[ko : ki + 1] = [fused]
        return fused

    def reorder(self, *ivs: IterVar) -> None:
        """Put `ivs` in this order, in the loop positions they occupy now."""
        self._check_compute("reorder")
        if len(ivs) == 1 and isinstance(ivs[0], (list, tuple)):
            ivs = tuple(ivs[0])
        positions = [self._leaf_index(iv, "reorder") for iv in ivs]
        if len(set(positions)) != len(positions):
            twice = [iv.var.name for k, iv in enumerate(ivs) if positions.count(positions[k]) > 1]
            raise ValueError(f"reorder on stage {self.name}: {twice[0]} is given twice")
        for pos, iv in zip(sorted(positions), ivs, strict=True):
            self.leaf_iter_vars[pos] = iv
        self._record(S.Reorder(self.name, tuple(iv.var.name for iv in ivs)))

    def tile(self, x_parent: IterVar, y_parent: IterVar, x_factor, y_factor):
        """Split x and y and order the loops (x.outer, y.outer, x.inner, y.inner)."""
        with self.schedule._quiet():
            xo, xi = self.split(x_parent, factor=x_factor)
            yo, yi = self.split(y_parent, factor=y_factor)
            self.reorder(xo, yo, xi, yi)
        self._record(S.Tile(self.name, x_parent.var.name, y_parent.var.name, x_factor, y_factor))
        return xo, yo, xi, yi

    # ---- loop kinds ---------------------------------------------------------------------
    def _set_kind(self, iv, kind: ForKind, primitive: str) -> None:
        self._check_compute(primitive)
        self._leaf_index(iv, primitive)
        if kind in (ForKind.VECTORIZED, ForKind.PARALLEL) and iv.iter_type == IterVarType.REDUCE:
            raise ValueError(
                f"{primitive}: {iv.var.name} of stage {self.name} is a reduction loop; its "
                "iterations update the same element, so they cannot run side by side "
                "(reorder a data-parallel loop innermost, or rfactor)"
            )
        attr = self._attr(iv)
        if attr.kind not in (ForKind.SERIAL, kind):
            raise ValueError(
                f"{primitive}: {iv.var.name} of stage {self.name} is already {attr.kind.value}"
            )
        attr.kind = kind

    def vectorize(self, iv: IterVar) -> None:
        self._set_kind(iv, ForKind.VECTORIZED, "vectorize")
        self._record(S.Vectorize(self.name, iv.var.name))

    def unroll(self, iv: IterVar) -> None:
        self._set_kind(iv, ForKind.UNROLLED, "unroll")
        self._record(S.Unroll(self.name, iv.var.name))

    def parallel(self, iv: IterVar) -> None:
        self._set_kind(iv, ForKind.PARALLEL, "parallel")
        self._record(S.Parallel(self.name, iv.var.name))

    def bind(self, iv: IterVar, thread: IterVar) -> None:
        """Run loop `iv` on the GPU thread axis `thread` (te.thread_axis("threadIdx.x"))."""
        if not isinstance(thread, IterVar) or thread.iter_type != IterVarType.THREAD:
            raise TypeError(f"bind on stage {self.name} needs a te.thread_axis, got {thread!r}")
        if iv.iter_type == IterVarType.REDUCE and not thread.thread_tag.startswith("threadIdx"):
            raise ValueError(
                f"bind: reduction loop {iv.var.name} of {self.name} can only be bound to a "
                f"threadIdx axis (a cross-thread reduction), not {thread.thread_tag}"
            )
        self._set_kind(iv, ForKind.THREAD_BINDING, "bind")
        self._attr(iv).thread = thread
        self._record(S.Bind(self.name, iv.var.name, thread.thread_tag))

    def pragma(self, iv: IterVar, key: str, value=None) -> None:
        """Annotate loop `iv` with ("pragma_<key>", value)."""
        self._check_compute("pragma")
        self._leaf_index(iv, "pragma")
        if not isinstance(key, str) or not key:
            raise TypeError(f"pragma on stage {self.name}: the key must be a string")
        self._attr(iv).pragmas.append((f"pragma_{key}", value))
        self._record(S.Pragma(self.name, iv.var.name, key, value))

    def set_scope(self, scope: str) -> None:
        """Where this stage's buffer lives: "global" (the heap) or "local" (the stack where
        small and of constant size, e.g. a row of a reduction computed at a parallel loop; on
        a GPU, registers), or on a GPU "shared" (one buffer per thread block)."""
        self._check_compute("set_scope")
        if scope not in ("global", "local", "shared"):
            raise ValueError(
                f"set_scope of {self.name}: scope must be global, local or shared, not {scope!r}"
            )
        if self.is_output:
            raise ValueError(f"set_scope: {self.name} is an output; its buffer is a parameter")
        self.scope = scope
        self._record(S.SetScope(self.name, scope))

    def prefetch(self, tensor: Tensor, iv: IterVar, offset: int, locality: int = 3) -> None:
        """At the start of each iteration of loop `iv`, prefetch the region of `tensor` that
        iteration `iv + offset` will read: one prefetch per 64-byte line of each contiguous run
        of the region (Note [prefetch] in te/prefetch.py), clamped into the tensor, so the last
        iterations prefetch their own region again. As TVM's `s[C].prefetch(A, ko, 1)`;
        `locality` (3: keep in every cache level ... 0: none) picks the cache level."""
        self._check_compute("prefetch")
        if not isinstance(tensor, Tensor):
            raise TypeError(f"prefetch on stage {self.name} needs a te.Tensor, got {tensor!r}")
        self._leaf_index(iv, "prefetch")
        if not _reads_tensor(self.op, tensor):
            raise ValueError(f"prefetch: stage {self.name} does not read {tensor.name}")
        for what, value, lo, hi in (("offset", offset, None, None), ("locality", locality, 0, 3)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"prefetch on stage {self.name}: {what} must be an int")
            if lo is not None and not lo <= value <= hi:
                raise ValueError(f"prefetch on stage {self.name}: locality must be 0 to 3")
        self.prefetches.append(PrefetchSpec(tensor, iv, offset, locality))
        self._record(S.Prefetch(self.name, tensor.name, iv.var.name, offset, locality))

    # ---- where the stage is computed ----------------------------------------------------
    def compute_at(self, parent: Stage, iv: IterVar) -> None:
        """Compute this stage inside loop `iv` of `parent`, one region per iteration."""
        self._check_compute("compute_at")
        if not isinstance(parent, Stage):
            raise TypeError(f"compute_at of {self.name}: the parent must be a stage (s[T])")
        if parent is self:
            raise ValueError(f"compute_at: cannot compute {self.name} at itself")
        if self.is_output:
            raise ValueError(f"compute_at: {self.name} is an output; it is computed at root")
        if not self.schedule._consumes(parent, self):
            raise ValueError(
                f"compute_at: {parent.name} does not read {self.name}; a stage can only be "
                "computed at a loop of a stage that consumes it"
            )
        if not any(v is iv for v in parent.all_iter_vars):
            raise ValueError(
                f"compute_at: {getattr(getattr(iv, 'var', None), 'name', iv)} is not an "
                f"iteration variable of {parent.name}"
            )
        self.attach_type, self.attach_stage, self.attach_ivar = AttachType.SCOPE, parent, iv
        self._record(S.ComputeAt(self.name, parent.name, iv.var.name))

    def compute_inline(self) -> None:
        """Substitute this stage's body into its consumers; it gets no loops or buffer."""
        self._check_compute("compute_inline")
        if self.is_output:
            raise ValueError(f"compute_inline: {self.name} is an output; it must be stored")
        if isinstance(self.op, ComputeOp) and self.op.reduce_axis:
            raise ValueError(f"compute_inline: {self.name} is a reduction; it cannot be inlined")
        self.attach_type, self.attach_stage, self.attach_ivar = AttachType.INLINE, None, None
        self._record(S.ComputeInline(self.name))

    def clamp_tails(self) -> None:
        """Compute the points of this stage's loops past its extent too (a split's tail tile,
        as Halide's RoundUp), reading every tensor at indices clamped into its bounds, so that
        the stage's loops need no guard (Note [clamped tails] in te/lower.py). Only for a stage
        whose extra points nobody reads: a cache_write accumulator computed at a tile of its
        consumer, which stores the points inside the tensor only (its guards stay)."""
        self._check_compute("clamp_tails")
        if self.is_output:
            raise ValueError(f"clamp_tails: {self.name} is an output; its tail must be guarded")
        self.clamp_tail = True
        self._record(S.ClampTails(self.name))

    def compute_root(self) -> None:
        """Compute this stage at the top level, the whole tensor at once (the default)."""
        self._check_compute("compute_root")
        self.attach_type, self.attach_stage, self.attach_ivar = AttachType.ROOT, None, None
        self._record(S.ComputeRoot(self.name))


class Schedule:
    """The stages of every op reachable from the outputs, producers first, and the steps."""

    def __init__(self, outputs):
        self.outputs = list(outputs)
        self.stages: list[Stage] = []
        self.stage_map: dict[Operation, Stage] = {}
        self.steps: list[S.Step] = []
        self._quiet_depth = 0
        for op in post_order(self.outputs):
            self._add_stage(Stage(op, self), len(self.stages))

    def _add_stage(self, stage: Stage, position: int) -> None:
        self.stages.insert(position, stage)
        self.stage_map[stage.op] = stage

    def __getitem__(self, key) -> Stage:
        if isinstance(key, Stage):
            return key
        op = key.op if isinstance(key, Tensor) else key
        stage = self.stage_map.get(op) if isinstance(op, Operation) else None
        if stage is None:
            raise ValueError(f"{key!r} is not an operation of this schedule")
        return stage

    def stage_by_name(self, name: str) -> Stage:
        found = [st for st in self.stages if st.name == name]
        if len(found) != 1:
            what = "no stage" if not found else f"{len(found)} stages"
            raise ValueError(f"schedule has {what} named {name!r}")
        return found[0]

    def tensor_by_name(self, name: str) -> Tensor:
        for st in self.stages:
            for k in range(st.origin_op.num_outputs):
                if st.origin_op.output(k).name == name:
                    return st.origin_op.output(k)
        raise ValueError(f"schedule has no tensor named {name!r}")

    def _consumes(self, consumer: Stage, producer: Stage) -> bool:
        """True when consumer reads producer directly or through inlined stages, or a stage
        computed inside one of consumer's loops does (Note [readers in scope], te/bound.py)."""
        for t in consumer.op.input_tensors:
            st = self.stage_map.get(t.op)
            if st is producer:
                return True
            if (
                st is not None
                and st.attach_type == AttachType.INLINE
                and self._consumes(st, producer)
            ):
                return True
        return any(
            st.attach_type == AttachType.SCOPE
            and st.attach_stage is consumer
            and st is not producer
            and self._consumes(st, producer)
            for st in self.stages
        )

    # ---- steps --------------------------------------------------------------------------
    @contextlib.contextmanager
    def _quiet(self):
        self._quiet_depth += 1
        try:
            yield
        finally:
            self._quiet_depth -= 1

    def _record(self, step) -> None:
        if self._quiet_depth == 0:
            self.steps.append(step)

    def replay(self, steps) -> Schedule:
        """Apply recorded steps (from another schedule of the same compute) to this one."""
        for step in steps:
            if not isinstance(step, S.Step):
                raise TypeError(f"replay needs schedule steps, got {step!r}")
            step.apply(self)
        return self

    apply_steps = replay

    def steps_json(self) -> str:
        return S.steps_to_json(self.steps)

    def print_steps(self) -> None:
        print(self)

    def __str__(self) -> str:
        return "\n".join(str(st) for st in self.steps)

    def cache_read(self, tensor: Tensor, scope: str, readers) -> Tensor:
        from tessera.te.cache import cache_read

        return cache_read(self, tensor, scope, readers)

    def cache_write(self, tensor: Tensor, scope: str) -> Tensor:
        from tessera.te.cache import cache_write

        return cache_write(self, tensor, scope)

    def rfactor(
        self, tensor: Tensor, axis: IterVar, factor_axis: int = 0, peel_tail: bool = False
    ) -> Tensor:
        """The partial reduction of `tensor` with its reduce loop `axis` made data-parallel
        (te/rfactor.py); `tensor` becomes the reduction of those partial results. `peel_tail`:
        the guard of a split that does not divide is `likely` (partition_loop peels it off)."""
        from tessera.te.rfactor import rfactor

        return rfactor(self, tensor, axis, factor_axis, peel_tail)


def _reads_tensor(op: Operation, tensor: Tensor) -> bool:
    """Does op read `tensor`, directly or through the computes it reads (which may be inlined)?"""
    seen: set[int] = set()
    work = list(op.input_tensors)
    while work:
        t = work.pop()
        if t.op is tensor.op and t.value_index == tensor.value_index:
            return True
        if id(t.op) not in seen:
            seen.add(id(t.op))
            work.extend(t.op.input_tensors)
    return False


def post_order(outputs) -> list[Operation]:
    """The ops reachable from `outputs` (ops), producers before their consumers."""
    seen: set[int] = set()
    order: list[Operation] = []

    def visit(op):
        if id(op) in seen:
            return
        seen.add(id(op))
        for t in op.input_tensors:
            visit(t.op)
        order.append(op)

    for op in outputs:
        visit(op)
    return order


def create_schedule(ops) -> Schedule:
    """A schedule of `ops` (an op, a tensor, or a list of them) and everything they read."""
    if not isinstance(ops, (list, tuple)):
        ops = [ops]
    out = []
    for op in ops:
        op = op.op if isinstance(op, Tensor) else op
        if not isinstance(op, Operation):
            raise TypeError(f"create_schedule needs operations or tensors, got {op!r}")
        out.append(op)
    return Schedule(out)


# Note [size dispatch]
# A kernel with a symbolic size serves every size with one tile, chosen for a representative
# size (topi/symbolic.py); at sizes far below it the tile is mostly tail (a 6 x 64 register
# block for a 1 x 13 product). A SizeDispatch holds schedules of ONE compute for ranges of a
# size: te.lower gives one PrimFunc whose body is `if (size < limit_0) body_0 else if ... else
# default`, each body lowered from its schedule with the same parameters, so a caller sees one
# kernel. The shape-specialized variants of the heavy ops, dispatched at run time.


class SizeDispatch:
    """Schedules of one compute by ranges of `size` (an expression of symbolic dims): `cases`
    [(limit, schedule), ...] in ascending limits, the first with size < limit runs; else
    `default`. te.lower lowers it into one PrimFunc (Note [size dispatch])."""

    def __init__(self, size, cases, default: Schedule):
        limits = [limit for limit, _ in cases]
        if limits != sorted(limits) or len(set(limits)) != len(limits):
            raise ValueError(f"SizeDispatch: limits must ascend, got {limits}")
        self.size, self.cases, self.default = size, list(cases), default

    @property
    def steps(self):
        """The default schedule's steps (its config record among them)."""
        return self.default.steps

    def __repr__(self) -> str:
        return f"SizeDispatch({self.size}, limits={[limit for limit, _ in self.cases]})"
