"""Vectorize loops: a VECTORIZED For with a constant extent becomes vector code.

    before:  for (i, 0, n) { for (j, 0, 16, vectorized) { C[i * 16 + j] = A[i * 16 + j] * x } }
    after:   for (i, 0, n) { C[ramp(i * 16, 1, 16)] = A[ramp(i * 16, 1, 16)] * broadcast(x, 16) }

The loop var becomes `Ramp(min, 1, lanes)`; expressions that depend on it widen to `lanes` lanes
(scalar operands are broadcast; `ramp + x`, `ramp - x`, `ramp * x` fold into one Ramp, so a
contiguous access keeps a Ramp index); loads and stores get vector indices; comparisons, Select,
Cast, Let and intrinsic calls widen. An `if_then_else` whose condition is the same in every lane
but whose branches load is hoisted out of the store into an IfThenElse statement, so that a
vector `if_then_else` never loads (code generators may emit it as a select).

Where the loop cannot be vectorized it stays a SERIAL loop (correct first): an extent that is not
a constant; a store whose address does not depend on the loop var (a reduction into C[i]); a loop
or an Allocate inside the body; a condition (IfThenElse, or if_then_else with loads) that varies
across lanes, unless its loads are provably inside their buffers and few (Note [loads in
bounds]: then it is a select); vector code already in the body; or lanes that depend on each
other: a buffer stored in the loop must be stored and loaded at one single index, and that index
must not repeat across lanes (a Ramp with a non-zero constant stride) when the buffer is also
loaded. Loops around the vectorized loop are untouched.
"""

from __future__ import annotations

from dataclasses import replace

from tessera.ir.node import Mutator
from tessera.tir.expr import (
    Add,
    Broadcast,
    BufferLoad,
    Call,
    Cast,
    Expr,
    IntImm,
    Let,
    Mul,
    Not,
    Ramp,
    Select,
    Sub,
    Var,
)
from tessera.tir.function import PrimFunc
from tessera.tir.stmt import (
    Allocate,
    AttrStmt,
    BufferStore,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    LetStmt,
    SeqStmt,
)
from tessera.tir.stmt_functor import collect, substitute

# How many lane-uniform if_then_else a single store may be split on (2^n stores at most).
_MAX_HOISTED_CONDITIONS = 4


def vectorize_loop(func: PrimFunc) -> PrimFunc:
    """Turn the VECTORIZED loops of `func` into vector code (see the module docstring)."""
    return func.with_body(_VectorizeLoops().visit(func.body))


class _VectorizeLoops(Mutator):
    def __init__(self):
        self.outer: list[For] = []  # the loops around the one visited (Note [loads in bounds])

    def visit_For(self, node: For):
        self.outer.append(node)
        try:
            body = self.visit(node.body)  # inner loops first
        finally:
            self.outer.pop()
        loop = node if body is node.body else replace(node, body=body)
        if loop.kind is not ForKind.VECTORIZED:
            return loop
        return vectorize(loop, self.outer)


# Note [loads in bounds]
# A vector if_then_else is a select: both sides are computed in every lane, so a load on the
# side a lane does not take would read where its condition said not to (a guarded tail past the
# buffer's end): the loop stays serial. But a load whose every index is provably inside its
# buffer's shape, for every iteration of the loops around it (their ranges) and every lane, is
# safe in any lane. The padding of `pad` is such a guard: it clamps its source index into the
# data, so the whole pad (and the int8 conv's zero-point padding, quantize fused in: 72 of the
# 80 us of ddddocr_old's pad on AVX2, one lane at a time) vectorizes. A select computes the
# side a lane does not take for nothing: where the sides hold more than MAX_SELECT_LOADS loads
# that vary across lanes the loop stays serial (a concatenate along the vectorized axis is a
# tree of guards over one load per input: ddddocr_old's LSTM output joins 64, and its kernel
# took 0.66 ms vectorized against 0.19 serial, each lane branching to its one load).
MAX_SELECT_LOADS = 2


def _uses(e, var: Var) -> bool:
    return bool(collect(e, lambda n: n is var))


def _in_bounds(exprs, loops: list[For], var: Var, lanes_range) -> bool:
    """Whether every load in `exprs` is provably inside its buffer's shape, with the loops'
    vars in their ranges and `var` in `lanes_range`, and at most MAX_SELECT_LOADS of them vary
    across lanes (Note [loads in bounds])."""
    from tessera.arith import Analyzer
    from tessera.tir.expr import Range

    loads = [n for e in exprs for n in collect(e, lambda n: isinstance(n, BufferLoad))]
    varying = [ld for ld in loads if any(_uses(i, var) for i in ld.indices)]
    if len(varying) > MAX_SELECT_LOADS:
        return False
    an = Analyzer()
    for loop in loops:
        an.bind(loop.loop_var, Range.from_min_extent(loop.min, loop.extent))
    an.bind(var, lanes_range)
    for ld in loads:
        shape = ld.buffer.shape
        if len(shape) != len(ld.indices):
            return False
        for index, dim in zip(ld.indices, shape, strict=True):
            if not isinstance(dim, IntImm):
                return False
            lo, hi = an.const_int_bound(index)
            if lo < 0 or hi > dim.value - 1:
                return False
    return True


def vectorize(loop: For, outer: list[For] = ()):
    """The vector code for one VECTORIZED loop, or the loop as SERIAL where that is not possible;
    `outer`: the loops around it (their ranges bound the loads, Note [loads in bounds])."""
    serial = replace(loop, kind=ForKind.SERIAL)
    if not isinstance(loop.extent, IntImm) or loop.extent.value < 1:
        return serial
    lanes = loop.extent.value
    if lanes == 1:
        return substitute(loop.body, {loop.loop_var: loop.min})
    if not _vectorizable_body(loop.body):
        return serial
    ramp = Ramp(loop.min, IntImm(1, loop.loop_var.dtype), lanes)
    loaded = {id(n.buffer) for n in collect(loop.body, lambda n: isinstance(n, BufferLoad))}

    def safe(*exprs) -> bool:
        from tessera.tir.expr import Range

        lanes_range = Range.from_min_extent(loop.min, loop.extent)
        return _in_bounds(exprs, list(outer), loop.loop_var, lanes_range)

    try:
        body = _Widen(loop.loop_var, ramp, lanes, loaded, safe).visit(loop.body)
    except _CannotVectorize:
        return serial
    if collect(body, _is_guarded_load):
        return serial  # a guarded load left where it could not be hoisted (a let value)
    return body


class _CannotVectorize(Exception):
    pass


def _vectorizable_body(body) -> bool:
    """No loops, allocations or vectors inside, and lanes that do not read each other's stores."""

    def bad(n):
        if isinstance(n, For | Allocate):
            return True
        return isinstance(n, Expr) and n.dtype.lanes > 1

    if collect(body, bad):
        return False
    for buf, index in _store_indices(body).items():
        if index is None:
            return False
        loads = collect(body, lambda n, b=buf: isinstance(n, BufferLoad) and n.buffer is b)
        if any(not _same_indices(ld.indices, index) for ld in loads):
            return False
    return True


def _store_indices(body) -> dict:
    """buffer -> the one index tuple it is stored at in body (None when there are several)."""
    out = {}
    for st in collect(body, lambda n: isinstance(n, BufferStore)):
        seen = out.get(st.buffer, st.indices)
        out[st.buffer] = (
            st.indices if seen is not None and _same_indices(seen, st.indices) else None
        )
    return out


def _same_indices(a, b) -> bool:
    return len(a) == len(b) and all(x.same_as(y) for x, y in zip(a, b, strict=True))


def _broadcast(e: Expr, lanes: int) -> Expr:
    if e.dtype.lanes == lanes:
        return e
    if e.dtype.lanes != 1:
        raise _CannotVectorize
    return Broadcast(e, lanes)


def _add(a, b):
    return a if isinstance(b, IntImm) and b.value == 0 else a + b


def _mul(a, b):
    if isinstance(b, IntImm) and b.value == 1:
        return a
    if isinstance(a, IntImm) and a.value == 1:
        return b
    return a * b


def _cast_int(dt, e: Expr) -> Expr:
    """An integer cast, folded for a constant: a widened ramp's stride stays an IntImm, so a
    store through it is known injective (a reduction into a symbolic buffer vectorizes)."""
    return IntImm(e.value, dt) if isinstance(e, IntImm) else Cast(dt, e)


def _fold_ramp(cls, a: Expr, b: Expr):
    """a op b as one Ramp when op is +, - or * of a Ramp and a scalar (or two Ramps for +, -)."""
    ra, rb = isinstance(a, Ramp), isinstance(b, Ramp)
    sa, sb = a.dtype.lanes == 1, b.dtype.lanes == 1
    if cls is Add:
        if ra and sb:
            return Ramp(_add(a.base, b), a.stride, a.lanes)
        if sa and rb:
            return Ramp(_add(a, b.base), b.stride, b.lanes)
        if ra and rb:
            return Ramp(a.base + b.base, a.stride + b.stride, a.lanes)
    if cls is Sub:
        if ra and sb:
            return Ramp(a.base - b, a.stride, a.lanes)
        if ra and rb:
            return Ramp(a.base - b.base, a.stride - b.stride, a.lanes)
    if cls is Mul:
        if ra and sb:
            return Ramp(_mul(a.base, b), _mul(a.stride, b), a.lanes)
        if sa and rb:
            return Ramp(_mul(a, b.base), _mul(a, b.stride), b.lanes)
    return None


class _Widen(Mutator):
    """Rewrite a loop body with the loop var as a Ramp. Raises _CannotVectorize where it must."""

    def __init__(self, var: Var, ramp: Ramp, lanes: int, loaded: set[int], safe=None):
        self.vars = {id(var): ramp}
        self.lanes = lanes
        self.loaded = loaded  # ids of the buffers the body loads
        self.safe = safe  # (scalar exprs) -> whether their loads stay in bounds

    # -- expressions -------------------------------------------------------------------------

    def visit_Var(self, v):
        return self.vars.get(id(v), v)

    def _binary(self, node):
        a, b = self.visit(node.a), self.visit(node.b)
        if a is node.a and b is node.b:
            return node
        cls = type(node)
        if a.dtype.lanes == 1 and b.dtype.lanes == 1:
            return cls(a, b)
        folded = _fold_ramp(cls, a, b)
        if folded is not None:
            return folded
        return cls(_broadcast(a, self.lanes), _broadcast(b, self.lanes))

    visit_Add = visit_Sub = visit_Mul = visit_Div = visit_Mod = _binary
    visit_FloorDiv = visit_FloorMod = visit_Min = visit_Max = _binary
    visit_EQ = visit_NE = visit_LT = visit_LE = visit_GT = visit_GE = _binary
    visit_And = visit_Or = _binary

    def visit_Not(self, node: Not):
        a = self.visit(node.a)
        return node if a is node.a else Not(a)

    def visit_Select(self, node: Select):
        args = [self.visit(x) for x in (node.condition, node.true_value, node.false_value)]
        if all(a.dtype.lanes == 1 for a in args):
            same = all(a is b for a, b in zip(args, _select_args(node), strict=True))
            return node if same else Select(*args)
        return Select(*(_broadcast(a, self.lanes) for a in args))

    def visit_Cast(self, node: Cast):
        value = self.visit(node.value)
        if value is node.value:
            return node
        dt = node.dtype
        # a widened index (flatten_storage's int64 offsets of symbolic buffers) stays a ramp,
        # so its access stays one contiguous vector load, not a gather
        if isinstance(value, Ramp) and dt.is_int and value.dtype.is_int:
            if dt.bits >= value.dtype.bits:
                return Ramp(Cast(dt, value.base), _cast_int(dt, value.stride), value.lanes)
        if isinstance(value, Broadcast):
            return Broadcast(Cast(dt, value.value), value.lanes)
        return Cast(dt.with_lanes(value.dtype.lanes), value)

    def visit_Call(self, node: Call):
        args = tuple(self.visit(a) for a in node.args)
        if all(a is b for a, b in zip(args, node.args, strict=True)):
            return node
        if all(a.dtype.lanes == 1 for a in args):
            return Call(node.dtype, node.op, args)
        dtype = node.dtype.with_lanes(self.lanes)
        if node.op == "if_then_else":
            cond, t, f = args
            if cond.dtype.lanes > 1 and _loads(t, f):
                # lanes would load where their condition is false: only inside the buffers
                if self.safe is None or not self.safe(*node.args[1:]):
                    raise _CannotVectorize
            return Call(
                dtype, node.op, (cond, _broadcast(t, self.lanes), _broadcast(f, self.lanes))
            )
        return Call(dtype, node.op, tuple(_broadcast(a, self.lanes) for a in args))

    def visit_Let(self, node: Let):
        value = self.visit(node.value)
        var = self._rebind(node.var, value)
        body = self.visit(node.body)
        if value is node.value and var is node.var and body is node.body:
            return node
        return Let(var, value, body)

    def _rebind(self, var: Var, value: Expr) -> Var:
        if value.dtype.lanes == 1:
            return var
        new = Var(var.name, var.dtype.with_lanes(value.dtype.lanes))
        self.vars[id(var)] = new
        return new

    def visit_BufferLoad(self, node: BufferLoad):
        indices = tuple(self.visit(i) for i in node.indices)
        if all(a is b for a, b in zip(indices, node.indices, strict=True)):
            return node
        if any(i.dtype.lanes > 1 for i in indices):
            indices = tuple(_broadcast(i, self.lanes) for i in indices)
        return BufferLoad(node.buffer, indices)

    def visit_Ramp(self, node):
        raise _CannotVectorize

    visit_Broadcast = visit_Reduce = visit_Ramp

    # -- statements --------------------------------------------------------------------------

    def visit_BufferStore(self, node: BufferStore):
        indices = tuple(self.visit(i) for i in node.indices)
        if all(i.dtype.lanes == 1 for i in indices):
            raise _CannotVectorize  # every lane would store to the same address
        indices = tuple(_broadcast(i, self.lanes) for i in indices)
        if id(node.buffer) in self.loaded and not any(_injective(i) for i in indices):
            raise _CannotVectorize  # two lanes could update the same element
        value = _broadcast(self.visit(node.value), self.lanes)
        return _hoist_guards(BufferStore(node.buffer, value, indices), _MAX_HOISTED_CONDITIONS)

    def visit_IfThenElse(self, node: IfThenElse):
        cond = self.visit(node.condition)
        if cond.dtype.lanes > 1:
            raise _CannotVectorize
        then_case = self.visit(node.then_case)
        else_case = None if node.else_case is None else self.visit(node.else_case)
        return IfThenElse(cond, then_case, else_case)

    def visit_LetStmt(self, node: LetStmt):
        value = self.visit(node.value)
        var = self._rebind(node.var, value)
        return LetStmt(var, value, self.visit(node.body))

    def visit_Evaluate(self, node: Evaluate):
        if self.visit(node.value) is not node.value:
            raise _CannotVectorize  # a call for its effect, once per lane
        return node

    def visit_SeqStmt(self, node: SeqStmt):
        return SeqStmt(tuple(self.visit(s) for s in node.seq))

    def visit_AttrStmt(self, node: AttrStmt):
        return replace(node, body=self.visit(node.body))

    def visit_For(self, node):
        raise _CannotVectorize

    visit_Allocate = visit_For


def _select_args(node: Select):
    return (node.condition, node.true_value, node.false_value)


def _loads(*exprs) -> bool:
    return any(collect(e, lambda n: isinstance(n, BufferLoad)) for e in exprs)


def _injective(index: Expr) -> bool:
    return isinstance(index, Ramp) and isinstance(index.stride, IntImm) and index.stride.value != 0


def _is_guarded_load(n) -> bool:
    """A vector if_then_else whose branches load, on a lane-uniform condition (one that varies
    across lanes was let through only with its loads in bounds: Note [loads in bounds])."""
    if not (isinstance(n, Call) and n.op == "if_then_else" and n.dtype.lanes > 1):
        return False
    if n.args[0].dtype.lanes > 1:
        return False
    return _loads(n.args[1], n.args[2])


def _guarded_load(e):
    """The outermost vector if_then_else in e whose branches load (its condition is scalar)."""
    found = collect(e, _is_guarded_load)
    return found[-1] if found else None  # collect is children-first: outer calls come last


class _ReplaceNode(Mutator):
    def __init__(self, old, new):
        self.old, self.new = old, new

    def visit(self, node):
        return self.new if node is self.old else super().visit(node)


def _hoist_guards(store: BufferStore, budget: int):
    """Split a store on its lane-uniform guarded loads: if (c) { A[..] = t } else { A[..] = f }."""
    call = _guarded_load(store.value)
    if call is None:
        return store
    if budget == 0 or collect(store.value, lambda n: isinstance(n, Let)):
        raise _CannotVectorize  # too many guards, or a guard that may use a let-bound var
    lanes = call.dtype.lanes
    sides = []
    for branch in call.args[1:]:
        value = _ReplaceNode(call, _broadcast(branch, lanes)).visit(store.value)
        sides.append(_hoist_guards(replace(store, value=value), budget - 1))
    return IfThenElse(call.args[0], sides[0], sides[1])
