"""What every code generator shares: the runtime description of a PrimFunc (`function_info`),
and what a parallel loop's outlined body captures (`closure_of`)."""

from __future__ import annotations

from tessera.ir.node import Visitor
from tessera.runtime.function_info import FunctionInfo, ParamInfo, VarInfo
from tessera.tir.buffer import Buffer
from tessera.tir.expr import IntImm, Let, Var
from tessera.tir.function import PrimFunc
from tessera.tir.stmt import Allocate, BufferStore, For, LetStmt, Stmt
from tessera.tir.stmt_functor import collect


def _dim(d):
    if isinstance(d, IntImm):
        return d.value
    if isinstance(d, Var):
        return d.name
    return str(d)


def function_info(func: PrimFunc) -> FunctionInfo:
    """The FunctionInfo the runtime checks calls of `func` against (see tir/function.py)."""
    stores = collect(func.body, lambda n: isinstance(n, BufferStore))
    written = {id(s.buffer) for s in stores}
    from tessera.tir.transform.lift_workspaces import workspace_params

    scratch = {id(b) for b in workspace_params(func)}
    params = []
    for p in func.params:
        if isinstance(p, Buffer):
            shape = [_dim(d) for d in func.param_shape(p)]
            params.append(
                ParamInfo(p.name, "buffer", str(p.dtype), shape, id(p) in written, id(p) in scratch)
            )
        else:
            params.append(ParamInfo(p.name, "var", str(p.dtype)))
    vars_ = [VarInfo(v.name, str(v.dtype)) for v in func.scalar_vars()]
    return FunctionInfo(func.name, params, vars_)


class _Uses(Visitor):
    """The free variables and the outside buffers a statement uses (see `closure_of`)."""

    def __init__(self):
        self.bound: set[int] = set()
        self.inner_buffers: set[int] = set()
        self.vars: dict[int, Var] = {}
        self.buffers: dict[int, Buffer] = {}

    def visit_Var(self, v):
        if id(v) not in self.bound:
            self.vars.setdefault(id(v), v)

    def _buffer(self, buf):
        if id(buf) not in self.inner_buffers:
            self.buffers.setdefault(id(buf), buf)

    def visit_BufferLoad(self, node):
        self._buffer(node.buffer)
        self.generic_visit(node)

    def visit_BufferStore(self, node):
        self._buffer(node.buffer)
        self.generic_visit(node)

    def visit_Allocate(self, node: Allocate):
        for dim in node.buffer.shape:  # a symbolic size is evaluated where it is allocated
            self.visit(dim)
        self.inner_buffers.add(id(node.buffer))
        self.visit(node.body)

    def _bind(self, var, value, body):
        if value is not None:
            self.visit(value)
        self.bound.add(id(var))
        self.visit(body)

    def visit_For(self, node: For):
        self.visit(node.min)
        self.visit(node.extent)
        self._bind(node.loop_var, None, node.body)

    def visit_LetStmt(self, node: LetStmt):
        self._bind(node.var, node.value, node.body)

    def visit_Let(self, node: Let):
        self._bind(node.var, node.value, node.body)


def closure_of(stmt: Stmt, exclude: tuple[Var, ...] = ()) -> tuple[list[Var], list[Buffer]]:
    """What the outlined body of a parallel loop must receive: (free vars, outside buffers).

    Vars bound inside `stmt` (loops, lets) and buffers allocated inside it are not listed, nor
    the vars in `exclude` (the loop variable, which the outlined function computes itself).
    """
    uses = _Uses()
    uses.bound.update(id(v) for v in exclude)
    uses.visit(stmt)
    return list(uses.vars.values()), list(uses.buffers.values())
