"""Structural equality up to a consistent renaming of variables and buffers.

`a == b` on IR is exact: two `Var("i")` objects differ. Text that is parsed back creates new
variables, so tests compare with `structural_equal`, which maps the leaves of `a` onto those of
`b` one to one as it meets them (a bijection), and compares everything else field by field.
Fields declared `field(compare=False)` are metadata (a graph call's source span) and are skipped.

    i, j = Var("i"), Var("j")
    structural_equal(i + 1, j + 1)        # True: i maps to j
    structural_equal(i + i, i + j)        # False: i cannot map to both i and j
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields

from tessera.ir.node import Node


class _Equal:
    def __init__(self, map_free_vars: bool):
        self.map_free_vars = map_free_vars
        self.fwd: dict[int, object] = {}
        self.back: dict[int, object] = {}
        self.path: list[str] = []

    def eq(self, a, b) -> bool:
        if isinstance(a, Node) and a.is_leaf:
            return type(a) is type(b) and self._leaf(a, b)
        if a is b:
            return True
        if isinstance(a, Node) or isinstance(b, Node):
            if type(a) is not type(b):
                return False
            if a.is_leaf:
                return self._leaf(a, b)
            return all(self.eq(getattr(a, f.name), getattr(b, f.name)) for f in _compared(a))
        if isinstance(a, tuple) and isinstance(b, tuple):
            return len(a) == len(b) and all(self.eq(x, y) for x, y in zip(a, b, strict=True))
        if isinstance(a, Mapping) and isinstance(b, Mapping):  # dicts and graph Attrs
            return a.keys() == b.keys() and all(self.eq(a[k], b[k]) for k in a)
        if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
            return True  # nan
        return type(a) is type(b) and a == b

    def _leaf(self, a, b) -> bool:
        if id(a) in self.fwd or id(b) in self.back:
            return self.fwd.get(id(a)) is b and self.back.get(id(b)) is a
        if not self.map_free_vars and a is not b:
            return False
        self.fwd[id(a)] = b
        self.back[id(b)] = a
        # A leaf's own fields (a buffer's shape, a var's dtype) must agree too.
        ok = all(
            self.eq(getattr(a, f.name), getattr(b, f.name))
            for f in _compared(a)
            if f.name != "name"
        )
        if not ok:
            del self.fwd[id(a)]
            del self.back[id(b)]
        return ok


def _compared(node):
    return [f for f in fields(node) if f.compare]


def structural_equal(a, b, map_free_vars: bool = True) -> bool:
    """True when a and b are the same IR up to renaming of variables and buffers."""
    return _Equal(map_free_vars).eq(a, b)


def assert_structural_equal(a, b, map_free_vars: bool = True) -> None:
    """Raise AssertionError showing both texts when a and b differ."""
    if not structural_equal(a, b, map_free_vars):
        raise AssertionError(f"IR differs.\n--- got:\n{a}\n--- expected:\n{b}")
