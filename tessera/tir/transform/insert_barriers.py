"""Insert thread barriers around shared-memory traffic in a device kernel (after split_kernels).

    before:  for (k.outer, 0, 16) {
               A.shared[threadIdx.x] = A[...]                # all threads fill the tile
               C.local[0] = C.local[0] + A.shared[...]       # each thread reads any of it
             }
    after:   for (k.outer, 0, 16) {
               tessera.barrier()                             # the last iteration's reads are done
               A.shared[threadIdx.x] = A[...]
               tessera.barrier()                             # the tile is complete
               C.local[0] = C.local[0] + A.shared[...]
             }

In each sequence of statements, a barrier goes before a statement that reads a shared buffer
written since the last barrier (read after write), and before one that writes a shared buffer
read since the last barrier (write after read); inside a serial loop the reads of the whole
loop body count as "since the last barrier" at the top of the body (the previous iteration).
Barriers are `Evaluate(Call("barrier"))`; every thread of the block must reach them, which
verify_gpu checks (no barrier under a condition on a thread index).
"""

from __future__ import annotations

from dataclasses import replace

from tessera.ir.node import Mutator
from tessera.tir.expr import BufferLoad, Call
from tessera.tir.function import PrimFunc
from tessera.tir.stmt import BufferStore, Evaluate, For, ForKind, SeqStmt, Stmt
from tessera.tir.stmt_functor import collect


def barrier() -> Stmt:
    """A barrier of all threads of a block, with shared-memory ordering."""
    return Evaluate(Call("int32", "barrier", ()))


def is_barrier(stmt: Stmt) -> bool:
    return (
        isinstance(stmt, Evaluate) and isinstance(stmt.value, Call) and stmt.value.op == "barrier"
    )


def _shared_reads(stmt) -> set[int]:
    loads = collect(stmt, lambda n: isinstance(n, BufferLoad) and n.buffer.scope == "shared")
    return {id(ld.buffer) for ld in loads}


def _shared_writes(stmt) -> set[int]:
    stores = collect(stmt, lambda n: isinstance(n, BufferStore) and n.buffer.scope == "shared")
    return {id(st.buffer) for st in stores}


def insert_barriers(func: PrimFunc) -> PrimFunc:
    """`func` (a device kernel) with barriers where shared memory needs them (module docstring)."""
    return func.with_body(_Insert().visit(func.body))


class _Insert(Mutator):
    def __init__(self):
        self.loop_reads: list[set[int]] = [set()]  # shared reads of the innermost serial loop

    def visit_For(self, node: For):
        if node.kind == ForKind.THREAD_BINDING:  # split_kernels removed these; be safe
            return self.generic_visit(node)
        self.loop_reads.append(_shared_reads(node.body))
        body = self.visit(node.body)
        self.loop_reads.pop()
        return node if body is node.body else replace(node, body=body)

    def visit_SeqStmt(self, node: SeqStmt):
        children = [self.visit(c) for c in node.seq]
        written: set[int] = set()
        read = set(self.loop_reads[-1])
        out: list[Stmt] = []
        for child in children:
            reads, writes = _shared_reads(child), _shared_writes(child)
            if (reads & written or writes & read) and not (out and is_barrier(out[-1])):
                out.append(barrier())
                written, read = set(), set()
            out.append(child)
            written |= writes
            read |= reads
        if len(out) == len(node.seq) and all(a is b for a, b in zip(out, node.seq, strict=True)):
            return node
        return SeqStmt(tuple(out))
