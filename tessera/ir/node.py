"""The base of every IR node, and the generic Visitor and Mutator.

IR is plain data: frozen dataclasses whose `==` and `hash` are structural, except "leaf" nodes
that stand for an identity (a `tir.Var`, a `tir.Buffer`): those compare by identity, and the
generic Visitor/Mutator do not descend into them (a pass that renames buffers does so on purpose).

    class Double(Mutator):
        def visit_IntImm(self, n):
            return IntImm(n.value * 2, n.dtype)

A Mutator returns the very same object when nothing changed below it, so `new is old` tells a
caller that a pass did nothing.
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import ClassVar


class Node:
    """Base class of IR nodes. Subclasses are frozen dataclasses."""

    # Identity nodes (variables, buffers) are leaves for the generic visitors.
    is_leaf: ClassVar[bool] = False

    def child_fields(self):
        """(name, value) of the fields that hold nodes or tuples of nodes."""
        for name in field_names(type(self)):
            yield name, getattr(self, name)

    def __str__(self) -> str:
        from tessera.ir.printer import to_text

        return to_text(self)


FIELD_NAMES_CACHE: dict[type, tuple[str, ...]] = {}


def field_names(cls) -> tuple[str, ...]:
    """The dataclass field names of node class `cls` (cached)."""
    # dataclasses.fields() rebuilds its tuple on every call: every visit of every node paid
    # for it (a tenth of a model's compile time)
    names = FIELD_NAMES_CACHE.get(cls)
    if names is None:
        names = FIELD_NAMES_CACHE[cls] = tuple(f.name for f in fields(cls))
    return names


class Visitor:
    """Walk a tree. Override visit_<ClassName>; call self.generic_visit(node) to go on below."""

    def visit(self, node):
        return getattr(self, f"visit_{type(node).__name__}", self.generic_visit)(node)

    def generic_visit(self, node):
        if not isinstance(node, Node) or node.is_leaf:
            return None
        for _, value in node.child_fields():
            self._visit_field(value)
        return None

    def _visit_field(self, value):
        if isinstance(value, Node):
            self.visit(value)
        elif isinstance(value, tuple):
            for v in value:
                self._visit_field(v)


class Mutator:
    """Rebuild a tree bottom-up. Override visit_<ClassName>; other nodes: children visited."""

    def visit(self, node):
        return getattr(self, f"visit_{type(node).__name__}", self.generic_visit)(node)

    def generic_visit(self, node):
        if not isinstance(node, Node) or node.is_leaf:
            return node
        changed = {}
        for name, old in node.child_fields():
            new = self._visit_field(old)
            if new is not old:
                changed[name] = new
        return replace(node, **changed) if changed else node

    def _visit_field(self, value):
        if isinstance(value, Node):
            return self.visit(value)
        if isinstance(value, tuple):
            new = tuple(self._visit_field(v) for v in value)
            if all(a is b for a, b in zip(new, value, strict=True)):
                return value
            return new
        return value


def post_order(node, fn):
    """Call fn on every node of a tree, children first (leaves included, not descended into)."""

    class _Walk(Visitor):
        def visit(self, n):
            self.generic_visit(n)
            fn(n)

    _Walk().visit(node)
