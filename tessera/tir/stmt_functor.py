"""Small utilities over tir trees: substitution, free variables, collecting nodes.

    substitute(i * 2 + j, {i: k})          # k * 2 + j
    free_vars(body)                        # variables used but not bound inside

Mutators here return the same node when nothing changed.
"""

from __future__ import annotations

from tessera.ir.node import Mutator, Visitor, post_order
from tessera.tir.expr import Expr, Let, Var
from tessera.tir.stmt import For, LetStmt


class _Substitute(Mutator):
    def __init__(self, vmap):
        self.vmap = {id(k): v for k, v in vmap.items()}

    def visit_Var(self, v):
        return self.vmap.get(id(v), v)


def substitute(node, vmap: dict):
    """Replace each Var key of `vmap` with its value (an Expr) throughout `node`."""
    if not vmap:
        return node
    return _Substitute(vmap).visit(node)


def collect(node, pred) -> list:
    """Every node of the tree (leaves included) for which pred(node) holds, children first."""
    out = []
    post_order(node, lambda n: out.append(n) if pred(n) else None)
    return out


class _FreeVars(Visitor):
    def __init__(self):
        self.bound: set[int] = set()
        self.free: dict[int, Var] = {}

    def visit_Var(self, v):
        if id(v) not in self.bound:
            self.free.setdefault(id(v), v)

    def _bind(self, var, node):
        self.bound.add(id(var))
        self.generic_visit(node)

    def visit_For(self, node: For):
        self.visit(node.min)
        self.visit(node.extent)
        self.bound.add(id(node.loop_var))
        self.visit(node.body)

    def visit_LetStmt(self, node: LetStmt):
        self.visit(node.value)
        self.bound.add(id(node.var))
        self.visit(node.body)

    def visit_Let(self, node: Let):
        self.visit(node.value)
        self.bound.add(id(node.var))
        self.visit(node.body)


def free_vars(node) -> list[Var]:
    """Variables used in `node` and not bound by a loop or let inside it, in order of use."""
    v = _FreeVars()
    v.visit(node)
    return list(v.free.values())


def uses_var(node, var: Var) -> bool:
    return any(n is var for n in collect(node, lambda n: isinstance(n, Var)))


def is_pure(e: Expr) -> bool:
    """True when evaluating e has no side effects (every tir expression is pure today)."""
    return True
