"""Text form of any IR node: each IR family registers its printer here.

`str(node)` on any IR node calls `to_text`, which finds the printer registered for the most
specific base class of the node (`tir` registers one for its expressions and statements).
"""

from __future__ import annotations

_PRINTERS: list[tuple[type, object]] = []


def register_printer(base: type, fn) -> None:
    """Print nodes that are instances of `base` with fn(node) -> str."""
    _PRINTERS.insert(0, (base, fn))


def to_text(node) -> str:
    for base, fn in _PRINTERS:
        if isinstance(node, base):
            return fn(node)
    return repr(node)
