"""Helpers for te tests: run a lowered PrimFunc on numpy arrays, and read its loop nest."""

from __future__ import annotations

import numpy as np
import pytest

from tessera import tir
from tessera.ir.node import Visitor
from tessera.tir.interpreter import interpret


def _loops(func) -> list[tuple[str, object, str, int]]:
    """(loop var name, extent, kind, depth) of every For, outermost first."""
    out = []

    class _V(Visitor):
        depth = 0

        def visit_For(self, node):
            ext = node.extent.value if isinstance(node.extent, tir.IntImm) else str(node.extent)
            out.append((node.loop_var.name, ext, node.kind.value, self.depth))
            self.depth += 1
            self.generic_visit(node)
            self.depth -= 1

    _V().visit(func.body)
    return out


def _run(func, *arrays):
    """Run func on copies of the arrays; return the copies (outputs filled)."""
    arrays = [np.ascontiguousarray(a).copy() if isinstance(a, np.ndarray) else a for a in arrays]
    interpret(func, *arrays)
    return arrays


@pytest.fixture
def loops():
    return _loops


@pytest.fixture
def run():
    return _run


@pytest.fixture
def rng():
    return np.random.default_rng(0)
