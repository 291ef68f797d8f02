"""Helpers the tir passes share: copying a statement with fresh bound variables.

    copy_fresh(body, {i: const(3)})   # body with i -> 3, and every loop/let variable and
                                      # allocated buffer inside replaced by a new one

A pass that duplicates code (unrolling, loop partitioning) copies with fresh variables so that no
Var is bound twice in a function, which code generators and the analyzer rely on.
"""

from __future__ import annotations

from dataclasses import replace

from tessera.ir.node import Mutator
from tessera.tir.buffer import Buffer
from tessera.tir.expr import Let, Var
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

    def visit_Allocate(self, node: Allocate):
        old = node.buffer
        shape = tuple(self.visit(d) for d in old.shape)
        new = Buffer(old.name, shape, old.dtype, old.scope)
        self.buffers[id(old)] = new
        return Allocate(new, self.visit(node.body))


def copy_fresh(node, vmap: dict | None = None):
    """A copy of `node` with `vmap` substituted and fresh variables/buffers for those it binds."""
    return _CopyFresh(vmap or {}).visit(node)
