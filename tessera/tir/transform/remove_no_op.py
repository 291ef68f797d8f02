"""Remove statements that do nothing.

    before:  for (i, 0, n) { 0 }                 (an Evaluate of a constant)
             if (1) { A[0] = A[0] } else { B[0] = 1 }
             allocate T: float32[16] { C[0] = 1 }
    after:   C[0] = 1

Removed: `Evaluate` of a constant, loops whose extent is a constant <= 0 or whose body does
nothing, `IfThenElse` with a constant condition (the taken branch stays), stores of a buffer
element to itself, Allocates whose buffer is never used, lets and attributes around nothing.
A function whose whole body does nothing keeps the body `Evaluate(0)`.
"""

from __future__ import annotations

from dataclasses import replace

from tessera.ir.node import Mutator
from tessera.tir.expr import BufferLoad, FloatImm, IntImm, Not, StringImm
from tessera.tir.function import PrimFunc
from tessera.tir.stmt import (
    Allocate,
    AttrStmt,
    BufferStore,
    Evaluate,
    For,
    IfThenElse,
    LetStmt,
    SeqStmt,
    seq,
)
from tessera.tir.stmt_functor import collect, uses_var


def remove_no_op(func: PrimFunc) -> PrimFunc:
    """Remove the statements of `func` that have no effect (see the module docstring)."""
    return func.with_body(_RemoveNoOp().visit(func.body))


def is_no_op(stmt) -> bool:
    """True for the statement that stands for "nothing": an Evaluate of a constant."""
    return isinstance(stmt, Evaluate) and isinstance(stmt.value, IntImm | FloatImm | StringImm)


_NOTHING = Evaluate(IntImm(0))


class _RemoveNoOp(Mutator):
    def visit_Evaluate(self, node: Evaluate):
        return _NOTHING if is_no_op(node) else node

    def visit_SeqStmt(self, node: SeqStmt):
        items = [self.visit(s) for s in node.seq]
        kept = [s for s in items if not is_no_op(s)]
        if len(kept) == len(node.seq) and all(a is b for a, b in zip(kept, node.seq, strict=True)):
            return node
        return seq(*kept) if kept else _NOTHING

    def visit_For(self, node: For):
        if isinstance(node.extent, IntImm) and node.extent.value <= 0:
            return _NOTHING
        body = self.visit(node.body)
        if is_no_op(body):
            return _NOTHING
        return node if body is node.body else replace(node, body=body)

    def visit_IfThenElse(self, node: IfThenElse):
        cond = node.condition
        if isinstance(cond, IntImm):
            taken = node.then_case if cond.value else node.else_case
            return _NOTHING if taken is None else self.visit(taken)
        then_case = self.visit(node.then_case)
        else_case = None if node.else_case is None else self.visit(node.else_case)
        if else_case is not None and is_no_op(else_case):
            else_case = None
        if is_no_op(then_case):
            if else_case is None:
                return _NOTHING  # tir conditions have no side effects
            return IfThenElse(Not(cond), else_case, None)
        if then_case is node.then_case and else_case is node.else_case:
            return node
        return IfThenElse(cond, then_case, else_case)

    def visit_BufferStore(self, node: BufferStore):
        v = node.value
        if isinstance(v, BufferLoad) and v.buffer is node.buffer:
            if all(a.same_as(b) for a, b in zip(v.indices, node.indices, strict=True)):
                return _NOTHING
        return node

    def visit_Allocate(self, node: Allocate):
        body = self.visit(node.body)
        buf = node.buffer
        if is_no_op(body) or not collect(body, lambda n: n is buf):
            return body
        return node if body is node.body else replace(node, body=body)

    def visit_LetStmt(self, node: LetStmt):
        body = self.visit(node.body)
        if is_no_op(body) or not uses_var(body, node.var):
            return body  # the value has no side effects: an unused let can go
        return node if body is node.body else replace(node, body=body)

    def visit_AttrStmt(self, node: AttrStmt):
        body = self.visit(node.body)
        if is_no_op(body):
            return body
        return node if body is node.body else replace(node, body=body)
