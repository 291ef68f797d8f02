"""Turn a kernel's heap scratch buffers into parameters: workspaces the caller provides.

    before:  def f(A, B) { allocate V: float32[36, 196, 64] (global) { ... } }
    after:   def f(A, B, V) { ... }            attrs: ("workspaces", 1)

A compiled model runs its kernels on one arena planned at compile time (the issue's "no
allocation per inference"); a kernel that needs scratch memory of its own (the winograd
transforms, a padded copy too large for the stack) would otherwise call the allocator on every
call, and large blocks come from the OS with a page fault per 4 KiB each time. Lifted, such a
buffer is one more trailing buffer parameter and the executor plan gives it arena space for the
duration of the call (`graph_build/executor_plan.py`). Lifted: allocations of global scope and
constant size that are not inside a loop or a condition (they live for the whole call).
Standalone kernels (tessera.build of a schedule) keep their allocations: nobody passes them
workspaces.
"""

from __future__ import annotations

from tessera.tir.buffer import Buffer
from tessera.tir.expr import IntImm
from tessera.tir.function import PrimFunc
from tessera.tir.stmt import Allocate, AttrStmt, LetStmt, SeqStmt, Stmt

WORKSPACES_ATTR = "workspaces"


def lift_workspaces(func: PrimFunc) -> PrimFunc:
    """`func` with its top-level heap allocations as trailing buffer params (module docstring);
    the attribute "workspaces" counts them."""
    lifted: list[Buffer] = []
    body = _lift(func.body, lifted)
    if not lifted:
        return func
    attrs = dict(func.attrs)
    attrs[WORKSPACES_ATTR] = int(attrs.get(WORKSPACES_ATTR, 0)) + len(lifted)
    if "param_shapes" in attrs:  # the callers' view of each buffer param (after flattening)
        attrs["param_shapes"] = (*attrs["param_shapes"], *(b.shape for b in lifted))
    return PrimFunc(func.name, (*func.params, *lifted), body, tuple(attrs.items()))


def workspace_params(func: PrimFunc) -> tuple[Buffer, ...]:
    """The trailing buffer params that `lift_workspaces` added."""
    n = int(func.attr(WORKSPACES_ATTR, 0))
    return func.buffer_params[len(func.buffer_params) - n :] if n else ()


def _lift(stmt: Stmt, lifted: list[Buffer]) -> Stmt:
    if isinstance(stmt, Allocate):
        buf = stmt.buffer
        if buf.scope == "global" and isinstance(buf.num_elements(), IntImm):
            lifted.append(buf)
            return _lift(stmt.body, lifted)
        return Allocate(buf, _lift(stmt.body, lifted))
    if isinstance(stmt, AttrStmt):
        return AttrStmt(stmt.key, stmt.value, _lift(stmt.body, lifted))
    if isinstance(stmt, LetStmt):
        return LetStmt(stmt.var, stmt.value, _lift(stmt.body, lifted))
    if isinstance(stmt, SeqStmt):
        return SeqStmt(tuple(_lift(s, lifted) for s in stmt.seq))
    return stmt
