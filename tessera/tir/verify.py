"""Check that a PrimFunc is well formed; report every problem at once.

    verify(func)     # None, or raises VerifyError listing each problem on its own line

What is checked: operands of a binary op share one dtype; conditions are bool; vector lanes
agree (Ramp/Broadcast parts are scalars, a Select condition is scalar or as wide as its values,
a Cast keeps the lane count, vector indices agree); every Var used is bound (a scalar param, a
shape var of a buffer param, a loop var, a let) and bound once in the whole function; every
buffer used is a param or allocated by an enclosing Allocate; each load/store has one index
per buffer dim; a stored value has the buffer's dtype (with the lanes of its index); loop
bounds are integers; a thread-binding loop names its thread; intrinsics get their argument
count; no `Reduce` is left.
"""

from __future__ import annotations

from tessera.ir.node import Visitor
from tessera.tir.buffer import Buffer
from tessera.tir.expr import (
    And,
    BinaryOp,
    Broadcast,
    BufferLoad,
    Call,
    Cast,
    CmpOp,
    Expr,
    Let,
    Not,
    Or,
    Ramp,
    Reduce,
    Select,
    Var,
)
from tessera.tir.function import PrimFunc
from tessera.tir.op import INTRINSICS
from tessera.tir.stmt import Allocate, AttrStmt, BufferStore, For, ForKind, IfThenElse, LetStmt


class VerifyError(ValueError):
    """A malformed PrimFunc; `problems` lists what is wrong, one sentence each."""

    def __init__(self, func_name: str, problems: list[str]):
        self.problems = list(dict.fromkeys(problems))  # a name used twice is one problem
        count = f"{len(self.problems)} problem{'s' if len(self.problems) != 1 else ''}"
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"PrimFunc {func_name!r} is malformed ({count}):\n{lines}")


def _short(node, limit: int = 60) -> str:
    text = str(node).splitlines()[0] if str(node) else ""
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _Verifier(Visitor):
    def __init__(self):
        self.problems: list[str] = []
        self.in_scope: set[int] = set()  # Vars bound where we are now
        self.ever_bound: set[int] = set()  # Vars bound anywhere so far
        self.buffers: set[int] = set()  # Buffers usable where we are now
        self.ever_buffers: set[int] = set()
        self.keep: list[object] = []  # keeps ids unique while we hold them

    def problem(self, text: str) -> None:
        self.problems.append(text)

    # -- binding -------------------------------------------------------------------------------

    def bind(self, var: Var, binder: str) -> None:
        if id(var) in self.ever_bound:
            self.problem(f"variable {var.name!r} is bound more than once (again by {binder})")
        self.keep.append(var)
        self.ever_bound.add(id(var))
        self.in_scope.add(id(var))

    def scoped(self, var: Var, binder: str, body) -> None:
        was_in_scope = id(var) in self.in_scope
        self.bind(var, binder)
        self.visit(body)
        if not was_in_scope:
            self.in_scope.discard(id(var))

    def params(self, func: PrimFunc) -> None:
        for p in func.params:
            if isinstance(p, Var):
                self.bind(p, "a parameter")
        for p in func.params:
            if not isinstance(p, Buffer):
                continue
            if id(p) in self.ever_buffers:
                self.problem(f"buffer {p.name!r} is a parameter more than once")
            self.keep.append(p)
            self.ever_buffers.add(id(p))
            self.buffers.add(id(p))
            for dim in (*func.param_shape(p), *p.shape):  # flattened shapes use the same vars
                self.declare_shape_vars(dim)

    def declare_shape_vars(self, dim) -> None:
        if isinstance(dim, Var):
            if id(dim) not in self.in_scope:
                self.keep.append(dim)
                self.ever_bound.add(id(dim))
                self.in_scope.add(id(dim))
        elif isinstance(dim, Expr):
            for _, value in dim.child_fields():
                if isinstance(value, Expr):
                    self.declare_shape_vars(value)

    # -- expressions ---------------------------------------------------------------------------

    def visit_Var(self, v: Var):
        if id(v) not in self.in_scope:
            self.problem(f"variable {v.name!r} is used but not bound here")

    def generic_visit(self, node):
        if isinstance(node, BinaryOp | CmpOp | And | Or) and node.a.dtype != node.b.dtype:
            what = f"{node.a.dtype} and {node.b.dtype}"
            self.problem(
                f"operands of {type(node).__name__} differ in dtype ({what}): {_short(node)}"
            )
        if isinstance(node, And | Or | Not):
            for x in (node.a, node.b) if not isinstance(node, Not) else (node.a,):
                if not x.dtype.is_bool:
                    self.problem(f"{type(node).__name__} needs bool operands, got {x.dtype}")
        return super().generic_visit(node)

    def visit_Let(self, e: Let):
        self.visit(e.value)
        self.check_let(e.var, e.value)
        self.scoped(e.var, f"let {e.var.name}", e.body)

    def check_let(self, var: Var, value: Expr) -> None:
        if var.dtype != value.dtype:
            self.problem(f"let {var.name!r}: {var.dtype} is given a {value.dtype} value")

    def visit_Select(self, e: Select):
        self.generic_visit(e)
        self.condition(e.condition, "select", e.true_value.dtype.lanes)
        if e.true_value.dtype != e.false_value.dtype:
            t, f = e.true_value.dtype, e.false_value.dtype
            self.problem(f"select branches differ in dtype ({t} and {f}): {_short(e)}")

    def condition(self, cond: Expr, where: str, lanes: int = 1) -> None:
        dt = cond.dtype
        if not dt.is_bool:
            self.problem(f"the condition of {where} is {dt}, not bool: {_short(cond)}")
        elif dt.lanes not in (1, lanes):
            self.problem(f"the condition of {where} has {dt.lanes} lanes, its values {lanes}")

    def visit_Cast(self, e: Cast):
        self.generic_visit(e)
        if e.dtype.lanes != e.value.dtype.lanes:
            self.problem(f"cast changes the lane count ({e.value.dtype} to {e.dtype})")

    def visit_Ramp(self, e: Ramp):
        self.generic_visit(e)
        if e.base.dtype.lanes != 1 or e.stride.dtype.lanes != 1:
            self.problem(f"Ramp base and stride must be scalars: {_short(e)}")
        if e.base.dtype != e.stride.dtype:
            self.problem(f"Ramp base and stride differ in dtype: {_short(e)}")
        if e.lanes < 1:
            self.problem(f"Ramp has {e.lanes} lanes")

    def visit_Broadcast(self, e: Broadcast):
        self.generic_visit(e)
        if e.value.dtype.lanes != 1:
            self.problem(f"Broadcast of a vector ({e.value.dtype}): {_short(e)}")
        if e.lanes < 1:
            self.problem(f"Broadcast has {e.lanes} lanes")

    def visit_Call(self, e: Call):
        self.generic_visit(e)
        expected = INTRINSICS.get(e.op, (len(e.args),))[0]
        if len(e.args) != expected:
            self.problem(f"{e.op} takes {expected} arguments, got {len(e.args)}")
        if e.op == "if_then_else" and len(e.args) == 3:
            self.condition(e.args[0], "if_then_else", e.dtype.lanes)

    def visit_Reduce(self, e: Reduce):
        self.problem(f"a Reduce is left in the function (lower it first): {_short(e)}")

    # -- memory --------------------------------------------------------------------------------

    def access(self, buf: Buffer, indices, what: str) -> int:
        """Check a load or store of buf; the lanes of its index."""
        if id(buf) not in self.buffers:
            self.problem(f"buffer {buf.name!r} is used but is neither a parameter nor allocated")
        if len(indices) != buf.ndim:
            n = len(indices)
            self.problem(f"{what} of {buf.name!r} has {n} indices for {buf.ndim} dims")
        for ix in indices:
            self.visit(ix)
            if not ix.dtype.is_integer:
                self.problem(f"{what} of {buf.name!r} has a {ix.dtype} index: {_short(ix)}")
        lanes = {ix.dtype.lanes for ix in indices} - {1}
        if len(lanes) > 1:
            self.problem(f"{what} of {buf.name!r} mixes index lanes {sorted(lanes)}")
        return max(lanes, default=1)

    def visit_BufferLoad(self, e: BufferLoad):
        self.access(e.buffer, e.indices, "load")

    def visit_BufferStore(self, s: BufferStore):
        lanes = self.access(s.buffer, s.indices, "store")
        self.visit(s.value)
        want = s.buffer.dtype.with_lanes(s.buffer.dtype.lanes * lanes)
        if s.value.dtype != want:
            name = s.buffer.name
            self.problem(f"store to {name!r} ({want}) of a {s.value.dtype} value: {_short(s)}")

    def visit_Allocate(self, s: Allocate):
        buf = s.buffer
        if id(buf) in self.ever_buffers:
            self.problem(f"buffer {buf.name!r} is allocated again (or is also a parameter)")
        for dim in buf.shape:
            self.visit(dim)
            if not dim.dtype.is_integer or dim.dtype.lanes != 1:
                self.problem(f"allocate {buf.name!r} has a {dim.dtype} dimension")
        self.keep.append(buf)
        self.ever_buffers.add(id(buf))
        self.buffers.add(id(buf))
        self.visit(s.body)
        self.buffers.discard(id(buf))

    # -- statements ----------------------------------------------------------------------------

    def visit_For(self, s: For):
        name = s.loop_var.name
        for part, e in (("min", s.min), ("extent", s.extent)):
            self.visit(e)
            if not e.dtype.is_integer or e.dtype.lanes != 1:
                self.problem(f"loop {name!r} has a {e.dtype} {part}, not an integer")
        if not s.loop_var.dtype.is_integer or s.loop_var.dtype.lanes != 1:
            self.problem(f"loop variable {name!r} is {s.loop_var.dtype}, not an integer")
        if s.kind is ForKind.THREAD_BINDING and not s.thread_tag:
            self.problem(f"thread_binding loop {name!r} names no thread (thread_tag is empty)")
        self.scoped(s.loop_var, f"for {name}", s.body)

    def visit_LetStmt(self, s: LetStmt):
        self.visit(s.value)
        self.check_let(s.var, s.value)
        self.scoped(s.var, f"let {s.var.name}", s.body)

    def visit_IfThenElse(self, s: IfThenElse):
        self.visit(s.condition)
        self.condition(s.condition, "if")
        self.visit(s.then_case)
        if s.else_case is not None:
            self.visit(s.else_case)

    def visit_AttrStmt(self, s: AttrStmt):
        if isinstance(s.value, Expr):
            self.visit(s.value)
        self.visit(s.body)


def verify(func: PrimFunc) -> None:
    """Raise VerifyError listing every problem of `func`; return None when it is well formed."""
    if not isinstance(func, PrimFunc):
        raise TypeError(f"verify expects a tir.PrimFunc, got {type(func).__name__}")
    v = _Verifier()
    v.params(func)
    v.visit(func.body)
    if v.problems:
        raise VerifyError(func.name, v.problems)
