"""Statements of the loop-level IR: loops, stores, allocations, branches, sequences.

    for (i: int32, 0, n) {           For(i, 0, n, ForKind.SERIAL, body)
      C[i] = A[i] + B[i]             BufferStore(C, A[i] + B[i], (i,))
    }

Statements are frozen dataclasses with structural `==` (variables and buffers by identity).
Loop annotations (`pragma_*`, unroll hints) are (key, value) pairs on the For.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from tessera.ir.node import Node
from tessera.tir.expr import Expr, Var, convert


class Stmt(Node):
    """Base of statements."""


class ForKind(enum.Enum):
    SERIAL = "serial"
    PARALLEL = "parallel"
    VECTORIZED = "vectorized"
    UNROLLED = "unrolled"
    THREAD_BINDING = "thread_binding"


@dataclass(frozen=True)
class BufferStore(Stmt):
    """buffer[indices] = value. A Ramp index stores a vector."""

    buffer: object  # tir.Buffer
    value: Expr
    indices: tuple[Expr, ...]

    def __post_init__(self):
        object.__setattr__(self, "indices", tuple(convert(i) for i in self.indices))


@dataclass(frozen=True)
class For(Stmt):
    """for loop_var in [min, min + extent): body."""

    loop_var: Var
    min: Expr
    extent: Expr
    kind: ForKind
    body: Stmt
    thread_tag: str = ""  # for THREAD_BINDING: "blockIdx.x", "threadIdx.x", ...
    annotations: tuple[tuple[str, object], ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "min", convert(self.min))
        object.__setattr__(self, "extent", convert(self.extent))
        object.__setattr__(self, "annotations", tuple(self.annotations))


@dataclass(frozen=True)
class IfThenElse(Stmt):
    condition: Expr
    then_case: Stmt
    else_case: Stmt | None = None


@dataclass(frozen=True)
class SeqStmt(Stmt):
    seq: tuple[Stmt, ...]

    def __post_init__(self):
        object.__setattr__(self, "seq", tuple(self.seq))


@dataclass(frozen=True)
class Evaluate(Stmt):
    """Evaluate an expression for its side effect (an intrinsic call)."""

    value: Expr

    def __post_init__(self):
        object.__setattr__(self, "value", convert(self.value))


@dataclass(frozen=True)
class LetStmt(Stmt):
    var: Var
    value: Expr
    body: Stmt


@dataclass(frozen=True)
class Allocate(Stmt):
    """Allocate `buffer` (its shape, dtype and scope) for the duration of `body`."""

    buffer: object  # tir.Buffer
    body: Stmt


@dataclass(frozen=True)
class AttrStmt(Stmt):
    """A keyed annotation on a region: ("pragma_<name>", value), ("compute_scope", name), ..."""

    key: str
    value: object
    body: Stmt


def seq(*stmts) -> Stmt:
    """A SeqStmt of the given statements, flattening nested sequences; one statement stays bare."""
    flat: list[Stmt] = []
    for s in stmts:
        if s is None:
            continue
        if isinstance(s, SeqStmt):
            flat.extend(s.seq)
        elif isinstance(s, (list, tuple)):
            inner = seq(*s)
            if inner is not None:
                flat.extend(inner.seq if isinstance(inner, SeqStmt) else [inner])
        else:
            flat.append(s)
    if not flat:
        return Evaluate(convert(0))
    return flat[0] if len(flat) == 1 else SeqStmt(tuple(flat))
