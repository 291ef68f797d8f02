"""Simplify: every expression through `arith.Analyzer`, knowing the range of each loop var.

    before:  for (i, 0, 16) {
               for (j, 0, 1) { if (likely(i < 16)) { A[(i*4 + j*4) - i*4 + (j + i)] = 1 } } }
    after:   for (i, 0, 16) { A[i] = 1 }

Descending into `for (v, min, extent)` binds v to [min, min + extent) in the analyzer, so guards
that always hold go away (an IfThenElse whose condition, `likely` or not, is proven true keeps
its then-branch; proven false, its else-branch). A loop of extent 0 (or less) is dropped; a loop
of extent 1 becomes its body with the loop var replaced by min. A let var is bound to the
constant bounds of its value. Symbolic shape variables are known to be non-negative.
"""

from __future__ import annotations

from dataclasses import replace

from tessera.arith import Analyzer, IntSet
from tessera.ir.node import Mutator
from tessera.tir.expr import Call, Expr, IntImm, Not, Range
from tessera.tir.function import PrimFunc
from tessera.tir.stmt import Evaluate, For, IfThenElse, LetStmt
from tessera.tir.stmt_functor import substitute
from tessera.tir.transform.partition_loop import shape_analyzer


def simplify(func: PrimFunc) -> PrimFunc:
    """Simplify every expression and statement of `func` (see the module docstring)."""
    return func.with_body(_Simplify(shape_analyzer(func)).visit(func.body))


_NOTHING = Evaluate(IntImm(0))


class _Simplify(Mutator):
    def __init__(self, analyzer: Analyzer):
        self.an = analyzer

    def visit(self, node):
        if isinstance(node, Expr):
            return self.expr(node)
        return super().visit(node)

    def expr(self, e: Expr) -> Expr:
        new = self.an.simplify(e)
        return e if new is e or new.same_as(e) else new

    def visit_For(self, node: For):
        lo, extent = self.expr(node.min), self.expr(node.extent)
        if isinstance(extent, IntImm) and extent.value <= 0:
            return _NOTHING
        if isinstance(extent, IntImm) and extent.value == 1:
            return self.visit(substitute(node.body, {node.loop_var: lo}))
        self.an.bind(node.loop_var, Range(lo, extent))
        body = self.visit(node.body)
        self.an.unbind(node.loop_var)
        if lo is node.min and extent is node.extent and body is node.body:
            return node
        return replace(node, min=lo, extent=extent, body=body)

    def visit_IfThenElse(self, node: IfThenElse):
        cond = self.expr(node.condition)
        bare = cond.args[0] if isinstance(cond, Call) and cond.op == "likely" else cond
        if self._proves(bare):
            return self.visit(node.then_case)
        if self._proves(Not(bare)):
            return _NOTHING if node.else_case is None else self.visit(node.else_case)
        then_case = self.visit(node.then_case)
        else_case = None if node.else_case is None else self.visit(node.else_case)
        if cond is node.condition and then_case is node.then_case and else_case is node.else_case:
            return node
        return IfThenElse(cond, then_case, else_case)

    def _proves(self, cond: Expr) -> bool:
        return cond.dtype.lanes == 1 and self.an.can_prove(cond)

    def visit_LetStmt(self, node: LetStmt):
        value = self.expr(node.value)
        bound = value.dtype.is_integer and value.dtype.lanes == 1
        if bound:
            lo, hi = self.an.const_int_bound(value)
            lo = None if lo == float("-inf") else lo
            hi = None if hi == float("inf") else hi
            self.an.bind(node.var, IntSet.interval(lo, hi))
        body = self.visit(node.body)
        if bound:
            self.an.unbind(node.var)
        if value is node.value and body is node.body:
            return node
        return LetStmt(node.var, value, body)
