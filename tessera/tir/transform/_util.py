"""Helpers the tir passes share: copying a statement with fresh bound variables.

    copy_fresh(body, {i: const(3)})   # body with i -> 3, and every loop/let variable and
                                      # allocated buffer inside replaced by a new one

A pass that duplicates code (unrolling, loop partitioning) copies with fresh variables so that no
Var is bound twice in a function, which code generators and the analyzer rely on. A `Select`
whose condition becomes an integer comparison of constants is copied as its taken side only: an
unrolled lookup (`select(i == 0, a, select(i == 1, b, ...))`, as the winograd transforms write
them) then costs its one option per copy, not the whole chain until `simplify` folds it.
"""

from __future__ import annotations

from dataclasses import replace

from tessera.ir.node import Mutator
from tessera.tir.buffer import Buffer
from tessera.tir.expr import EQ, GE, GT, LE, LT, NE, Broadcast, IntImm, Let, Select, Var
from tessera.tir.stmt import Allocate, For, LetStmt


class _CopyFresh(Mutator):
    def __init__(self, vmap):
        self.vars = {id(k): v for k, v in vmap.items()}
        self.buffers: dict[int, Buffer] = {}

    def visit_Var(self, v):
        return self.vars.get(id(v), v)

    def visit_Buffer(self, b):
        return self.buffers.get(id(b), b)

    def _fresh(self, v: Var) -> Var:
        new = Var(v.name, v.dtype)
        self.vars[id(v)] = new
        return new

    def visit_For(self, node: For):
        lo, extent = self.visit(node.min), self.visit(node.extent)
        var = self._fresh(node.loop_var)
        return replace(node, loop_var=var, min=lo, extent=extent, body=self.visit(node.body))

    def visit_LetStmt(self, node: LetStmt):
        value = self.visit(node.value)
        return LetStmt(self._fresh(node.var), value, self.visit(node.body))

    def visit_Let(self, node: Let):
        value = self.visit(node.value)
        return Let(self._fresh(node.var), value, self.visit(node.body))

    def visit_Select(self, node: Select):
        cond = self.visit(node.condition)
        taken = _const_truth(cond)
        if taken is not None:
            return self.visit(node.true_value if taken else node.false_value)
        true_value, false_value = self.visit(node.true_value), self.visit(node.false_value)
        return Select(cond, true_value, false_value)

    def visit_Allocate(self, node: Allocate):
        old = node.buffer
        shape = tuple(self.visit(d) for d in old.shape)
        new = Buffer(old.name, shape, old.dtype, old.scope)
        self.buffers[id(old)] = new
        return Allocate(new, self.visit(node.body))


_COMPARE = {
    EQ: lambda a, b: a == b, NE: lambda a, b: a != b, LT: lambda a, b: a < b,
    LE: lambda a, b: a <= b, GT: lambda a, b: a > b, GE: lambda a, b: a >= b,
}  # fmt: skip


def _const_truth(cond) -> bool | None:
    """The value of a condition that is a constant or compares two integer constants (or a
    vector of lanes that all hold such a condition)."""
    if isinstance(cond, Broadcast):
        cond = cond.value
    if isinstance(cond, IntImm) and cond.dtype.lanes == 1:
        return bool(cond.value)
    cmp = _COMPARE.get(type(cond))
    if (
        cmp
        and isinstance(cond.a, IntImm)
        and isinstance(cond.b, IntImm)
        and cond.a.dtype.lanes == 1
    ):
        return cmp(cond.a.value, cond.b.value)
    return None


def copy_fresh(node, vmap: dict | None = None):
    """A copy of `node` with `vmap` substituted and fresh variables/buffers for those it binds."""
    return _CopyFresh(vmap or {}).visit(node)
