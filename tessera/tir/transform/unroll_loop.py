"""Unroll loops: an UNROLLED For with a constant extent becomes copies of its body.

    before:  for (k, 0, 3, unrolled) { C[k] = A[k] + 1 }
    after:   C[0] = A[0] + 1;  C[1] = A[1] + 1;  C[2] = A[2] + 1

Each copy gets fresh Vars for the loops and lets inside it (and fresh buffers for its Allocates),
so no Var is bound twice. An UNROLLED loop whose extent is not a constant becomes SERIAL. Inner
loops are unrolled first, so nested UNROLLED loops unroll completely.

A loop annotated `("pragma_auto_unroll_max_step", n)` also unrolls itself and the SERIAL loops
nested in it when, once the loops inside are unrolled, no loop is left in the body and
extent * (stores in the body) <= n.
"""

from __future__ import annotations

from dataclasses import replace

from tessera.ir.node import Mutator
from tessera.tir.expr import IntImm, convert
from tessera.tir.function import PrimFunc
from tessera.tir.stmt import BufferStore, Evaluate, For, ForKind, seq
from tessera.tir.stmt_functor import collect
from tessera.tir.transform._util import copy_fresh

AUTO_UNROLL_KEY = "pragma_auto_unroll_max_step"


def unroll_loop(func: PrimFunc) -> PrimFunc:
    """Unroll the UNROLLED loops of `func` (see the module docstring)."""
    return func.with_body(_Unroll().visit(func.body))


def unroll(loop: For):
    """The copies of loop's body, one per iteration (its extent must be a constant)."""
    if not isinstance(loop.extent, IntImm):
        raise ValueError(f"cannot unroll loop {loop.loop_var.name}: its extent is not a constant")
    copies = []
    for k in range(loop.extent.value):
        value = _offset(loop.min, k, loop.loop_var.dtype)
        copies.append(copy_fresh(loop.body, {loop.loop_var: value}))
    return seq(*copies)


def _offset(lo, k: int, dtype):
    if isinstance(lo, IntImm):
        return IntImm(lo.value + k, dtype)
    return lo if k == 0 else lo + convert(k, dtype)


class _Unroll(Mutator):
    def __init__(self):
        self.auto_max_step = 0  # from the innermost enclosing pragma_auto_unroll_max_step

    def visit_For(self, node: For):
        saved = self.auto_max_step
        step = dict(node.annotations).get(AUTO_UNROLL_KEY)
        if step is not None:
            self.auto_max_step = int(step)
        body = self.visit(node.body)
        self.auto_max_step = saved
        loop = node if body is node.body else replace(node, body=body)
        if node.kind is ForKind.UNROLLED:
            if isinstance(node.extent, IntImm):
                return unroll(loop)
            return replace(loop, kind=ForKind.SERIAL)
        if node.kind is ForKind.SERIAL and self._auto(node):
            return unroll(loop)
        return loop

    def _auto(self, loop: For) -> bool:
        # Inner loops were visited first: a body that still holds a loop is too big to unroll.
        if self.auto_max_step <= 0 or not isinstance(loop.extent, IntImm):
            return False
        if collect(loop.body, lambda n: isinstance(n, For)):
            return False
        leaves = collect(loop.body, lambda n: isinstance(n, BufferStore | Evaluate))
        return loop.extent.value * max(len(leaves), 1) <= self.auto_max_step
